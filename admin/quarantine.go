package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// Recovery quarantine (SPEC 7, docs/admin.md): the partitions parked
// because their log failed a recovery check, their repair, and what
// /readyz says while any is parked. Invariants:
//   - the listing and /readyz read the Node's last report (an
//     observation); only a repair changes anything, and the Node decides
//     it (node.RepairQuarantine through Broker.Call);
//   - every repair request is audited, refused or not.

// quarantineBackend is what this family needs of the broker.
type quarantineBackend interface {
	Quarantine() node.QuarantineReport
	RepairQuarantine(ctx context.Context, q core.QueueID) (*node.QuarantineRepaired, error)
}

// repairTimeout bounds how long a repair request waits for the Node (the
// cut and the reload of one partition's log), below the server's write
// timeout so the answer still gets out. A repair that takes longer goes on
// in the Node; the operator lists again.
const repairTimeout = 25 * time.Second

// quarantineItem is one parked partition in JSON.
type quarantineItem struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Partition uint32 `json:"partition"`
	// Kind is what failed: checksum, inconsistent, snapshot or corrupt.
	Kind         string `json:"kind"`
	Reason       string `json:"reason"`
	DetectedAtMs int64  `json:"detected_at_ms"`
	// PartitionKind: queue or stream. Index: the first bad record (the
	// cut point; 0 when there is none). Refused: parked under
	// recovery.on_mismatch=refuse.
	PartitionKind string `json:"partition_kind"`
	Index         uint64 `json:"index"`
	Refused       bool   `json:"refused"`
}

func itemOf(e node.QuarantineEntry) quarantineItem {
	kind := "queue"
	if e.Kind == node.KindStream {
		kind = "stream"
	}
	return quarantineItem{Topic: e.Queue.Topic, Group: e.Queue.Group, Partition: e.Queue.Partition, Kind: e.Damage,
		Reason: e.Reason, DetectedAtMs: e.DetectedAtMs, PartitionKind: kind, Index: e.Index, Refused: e.Refused}
}

func itemsOf(r node.QuarantineReport) []quarantineItem {
	items := make([]quarantineItem, 0, len(r.Entries))
	for _, e := range r.Entries {
		items = append(items, itemOf(e))
	}
	return items
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/quarantine", s.api(s.quarantineList))
		mux.HandleFunc("POST /admin/api/quarantine/repair", s.api(s.quarantineRepair))
	})
}

func (s *Server) quarantineList(w http.ResponseWriter, _ *http.Request) error {
	b, err := backend[quarantineBackend](s)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"quarantined": itemsOf(b.Quarantine())})
	return nil
}

func (s *Server) quarantineRepair(w http.ResponseWriter, r *http.Request) error {
	q, err := repairTarget(r)
	target := partitionName(q)
	if err != nil {
		s.audit(r, "quarantine.repair", target, err, "")
		return err
	}
	answer, err := s.repair(r, q)
	detail := ""
	if answer != nil && answer.Outcome == node.RepairDone {
		detail = fmt.Sprintf("cut %d records (%s at index %d)", answer.TruncatedEntries, answer.Entry.Damage, answer.Entry.Index)
	}
	s.audit(r, "quarantine.repair", target, err, detail)
	if err != nil {
		return err
	}
	item := itemOf(answer.Entry)
	writeJSON(w, http.StatusOK, map[string]any{"repaired": struct {
		quarantineItem
		TruncatedEntries uint64 `json:"truncated_entries"`
	}{item, answer.TruncatedEntries}})
	return nil
}

// repair asks the Node and maps its outcome to a Problem.
func (s *Server) repair(r *http.Request, q core.QueueID) (*node.QuarantineRepaired, error) {
	b, err := backend[quarantineBackend](s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), repairTimeout)
	defer cancel()
	answer, err := b.RepairQuarantine(ctx, q)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, problem(http.StatusServiceUnavailable, "not_ready",
			"the repair did not finish within %v; it goes on: list GET /admin/api/quarantine again", repairTimeout)
	}
	if err != nil {
		return nil, err
	}
	name := partitionName(q)
	switch answer.Outcome {
	case node.RepairDone:
		return answer, nil
	case node.RepairUnknown:
		return answer, problem(http.StatusNotFound, "not_found", "no partition %s: check topic, group and partition (GET /admin/api/quarantine lists the parked ones)", name)
	case node.RepairNotQuarantined:
		return answer, problem(http.StatusConflict, "conflict", "partition %s is not quarantined: there is nothing to repair", name)
	case node.RepairBusy:
		return answer, problem(http.StatusConflict, "conflict", "a repair of partition %s is running; wait for it and list again", name)
	default:
		return answer, problem(http.StatusInternalServerError, "repair_failed", "the repair of partition %s failed and it stays quarantined: %s; see the broker's log", name, answer.Err)
	}
}

// partitionName names a partition as topic/group/partition, the default
// group as "default" (not an empty segment: "orders//0").
func partitionName(q core.QueueID) string {
	return fmt.Sprintf("%s/%s/%d", q.Topic, groupName(core.NormalizeGroup(q.Group)), q.Partition)
}

// repairTarget reads ?topic&group&partition.
func repairTarget(r *http.Request) (core.QueueID, error) {
	query := r.URL.Query()
	q := core.QueueID{Topic: query.Get("topic"), Group: query.Get("group")}
	if q.Topic == "" {
		return q, problem(http.StatusBadRequest, "bad_parameter", "topic is missing: POST /admin/api/quarantine/repair?topic=T&group=G&partition=N")
	}
	if err := core.ValidateName(q.Topic); err != nil {
		return q, problem(http.StatusBadRequest, "bad_name", "topic %q: %v", q.Topic, err)
	}
	if q.Group != "" {
		if err := core.ValidateName(q.Group); err != nil {
			return q, problem(http.StatusBadRequest, "bad_name", "group %q: %v", q.Group, err)
		}
	}
	if query.Get("partition") == "" {
		return q, problem(http.StatusBadRequest, "bad_parameter", "partition is missing: POST /admin/api/quarantine/repair?topic=T&group=G&partition=N")
	}
	p, err := queryUint(r, "partition", 0, 1<<32-1)
	if err != nil {
		return q, err
	}
	q.Partition = uint32(p)
	return q, nil
}

// readyzQuarantine answers /readyz while partitions are parked: 503
// {ready:false} when any was refused (recovery.on_mismatch=refuse), else
// 200 {ready:true, degraded:true}. False: nothing parked, the caller says ok.
func (s *Server) readyzQuarantine(w http.ResponseWriter, src Source) bool {
	b, ok := src.(quarantineBackend)
	if !ok {
		return false
	}
	report := b.Quarantine()
	if len(report.Entries) == 0 {
		return false
	}
	items := itemsOf(report)
	if report.Refused {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "code": "not_ready",
			"message":     "a partition log failed its recovery check and recovery.on_mismatch is refuse; repair it with POST /admin/api/quarantine/repair",
			"quarantined": items})
		return true
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true, "degraded": true, "quarantined": items})
	return true
}

// Quarantined partitions are attention items (SPEC 11: critical), each
// naming the repair.
func init() {
	attentionHooks = append(attentionHooks, func(s *Server) []AttentionItem {
		src := s.attached()
		b, ok := src.(quarantineBackend)
		if src == nil || !ok {
			return nil
		}
		report := b.Quarantine()
		items := make([]AttentionItem, 0, len(report.Entries))
		for _, e := range report.Entries {
			q := e.Queue
			items = append(items, AttentionItem{Kind: "quarantined", Severity: "critical", Subject: q.String(),
				Message: fmt.Sprintf("partition %s is quarantined: %s; repair with POST /admin/api/quarantine/repair?topic=%s&group=%s&partition=%d or fibrilctl admin quarantine repair",
					q.String(), e.Reason, url.QueryEscape(q.Topic), url.QueryEscape(q.Group), q.Partition),
				SinceMs: e.DetectedAtMs})
		}
		return items
	})
}
