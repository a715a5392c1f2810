package admin

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/broker"
)

// The messages family (SPEC 2 "Inspection", SPEC 11): GET messages, PUT
// queue-dlq, POST dlq/replay and dlq/redrive. Invariants:
//   - input is checked here against the named caps before anything
//     reaches the broker, and a cap passed is a 400 naming the cap, never a
//     silent clamp;
//   - what a request decides (which messages, what is replayed, when a
//     DLQ copy may go) is decided in the core; this file only translates;
//   - every request has a deadline (operatorTimeout), so a broker that does
//     not answer gives a 503, never a hang; a replay or redrive that runs
//     out of time reports what it did.

// Caps and defaults of the messages endpoints.
const (
	browseLimitDefault   = 50
	previewBytesDefault  = 4096
	operatorTimeout      = 20 * time.Second
	replayOffsetsMax     = node.DeadLetterReadsMax
	redriveLimitMax      = node.RedriveLimitMax
	redriveLimitDefault  = 1000
	messagesHeaderKeyMax = 256 // headers echoed per item (the core caps them lower)
)

// messagesBackend is what the family needs of the broker.
type messagesBackend interface {
	BrowseMessages(ctx context.Context, q node.BrowseMessages) (*node.MessagesPage, error)
	SetQueueDLQ(ctx context.Context, topic, group string, policy core.DLQPolicy, maxRetries *uint32) (*node.QueueSettings, error)
	RunReplay(ctx context.Context, plan node.ReplayPlan) (node.ReplayResult, error)
}

var _ messagesBackend = (*broker.Broker)(nil)

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/messages", s.api(s.getMessages))
		mux.HandleFunc("PUT /admin/api/queue-dlq", s.api(s.putQueueDLQ))
		mux.HandleFunc("POST /admin/api/dlq/replay", s.api(s.postReplay))
		mux.HandleFunc("POST /admin/api/dlq/redrive", s.api(s.postRedrive))
	})
}

// messageItem is one item of GET messages.
type messageItem struct {
	Partition       uint32            `json:"partition"`
	Offset          uint64            `json:"offset"`
	State           string            `json:"state"`
	Headers         map[string]string `json:"headers"`
	PayloadLen      uint32            `json:"payload_len"`
	PayloadBase64   *string           `json:"payload_base64,omitempty"`
	ContentType     string            `json:"content_type,omitempty"`
	DeliveryCount   uint32            `json:"delivery_count"`
	NotBeforeMs     int64             `json:"not_before_ms"`
	LeaseDeadlineMs int64             `json:"lease_deadline_ms,omitempty"`
	ExpiresAtMs     int64             `json:"expires_at_ms"`
}

// parseStates reads status=ready,inflight,... (default: every live state).
func parseStates(text string) (node.BrowseStates, error) {
	if text == "" {
		return node.BrowseActive, nil
	}
	var states node.BrowseStates
	for _, name := range strings.Split(text, ",") {
		found := false
		for _, st := range []core.MessageState{core.MessageReady, core.MessageDelayed, core.MessageInflight, core.MessagePendingDLQ} {
			if strings.TrimSpace(name) == st.String() {
				states |= 1 << st
				found = true
			}
		}
		if !found {
			return 0, problem(http.StatusBadRequest, "bad_parameter",
				"status=%q: use a comma-separated list of ready, inflight, delayed, pending_dlq", name)
		}
	}
	return states, nil
}

// queueNames reads and checks a topic and group.
func queueNames(topic, group, what string) (string, string, error) {
	if topic == "" {
		return "", "", problem(http.StatusBadRequest, "bad_parameter", "%s topic is missing: name the queue's topic", what)
	}
	if core.ValidateName(topic) != nil {
		return "", "", problem(http.StatusBadRequest, "bad_name", "%s topic %q is not a valid name: use 1-128 bytes of [a-z0-9._-]", what, topic)
	}
	group = core.NormalizeGroup(group)
	if group != "" && core.ValidateName(group) != nil {
		return "", "", problem(http.StatusBadRequest, "bad_name", "%s group %q is not a valid name: use 1-128 bytes of [a-z0-9._-]", what, group)
	}
	return topic, group, nil
}

func (s *Server) getMessages(w http.ResponseWriter, r *http.Request) error {
	b, err := backend[messagesBackend](s)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	topic, group, err := queueNames(q.Get("topic"), q.Get("group"), "the")
	if err != nil {
		return err
	}
	partition, err := queryUint(r, "partition", 0, 1<<32-1)
	if err != nil {
		return err
	}
	from, err := queryUint(r, "from", 0, 1<<63)
	if err != nil {
		return err
	}
	limit, err := queryUint(r, "limit", browseLimitDefault, node.BrowseItemsMax)
	if err != nil {
		return err
	}
	settled, err := queryBool(r, "include_settled", false)
	if err != nil {
		return err
	}
	payload, err := queryBool(r, "include_payload", false)
	if err != nil {
		return err
	}
	preview, err := queryUint(r, "payload_limit_bytes", previewBytesDefault, node.BrowsePreviewBytesMax)
	if err != nil {
		return err
	}
	states, err := parseStates(q.Get("status"))
	if err != nil {
		return err
	}
	if limit == 0 {
		return problem(http.StatusBadRequest, "bad_parameter", "limit=0: ask for 1 to %d items", node.BrowseItemsMax)
	}
	ctx, cancel := context.WithTimeout(r.Context(), operatorTimeout)
	defer cancel()
	page, err := b.BrowseMessages(ctx, node.BrowseMessages{Topic: topic, Group: group, Partition: uint32(partition),
		From: from, Limit: uint32(limit), States: states, Settled: settled, Payload: payload, PreviewBytes: uint32(preview)})
	if err != nil {
		return operatorProblem(err)
	}
	items := make([]messageItem, 0, len(page.Items))
	for i := range page.Items {
		items = append(items, toMessageItem(page.Queue.Partition, &page.Items[i], payload))
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"items": items, "next_offset_hint": page.Next, "next_offset": page.NextOffset,
		"partition": page.Queue.Partition, "partition_count": page.Partitions,
	})
	return nil
}

// toMessageItem renders one page item; the payload as base64 of its preview
// (any bytes are safe in it).
func toMessageItem(partition uint32, it *node.BrowseItem, withPayload bool) messageItem {
	out := messageItem{Partition: partition, Offset: it.Offset, State: "settled", Headers: map[string]string{}}
	if !it.Live {
		return out
	}
	out.State = it.State.String()
	for i, h := range it.Body.Headers {
		if i == messagesHeaderKeyMax {
			break
		}
		out.Headers[h.Key] = h.Value
	}
	out.PayloadLen, out.ExpiresAtMs = it.PayloadLen, it.ExpiresAtMs
	out.ContentType = contentTypeName(it.Body.ContentType)
	out.DeliveryCount = it.Retries
	switch it.State {
	case core.MessageDelayed:
		out.NotBeforeMs = it.DueMs
	case core.MessageInflight:
		out.DeliveryCount++ // the delivery it is out on
		out.LeaseDeadlineMs = it.DueMs
	}
	if withPayload {
		p := it.Body.Payload[:min(int(it.PreviewBytes), len(it.Body.Payload))]
		enc := base64.StdEncoding.EncodeToString(p)
		out.PayloadBase64 = &enc
	}
	return out
}

// contentTypeName names a core content type for the JSON answer.
func contentTypeName(ct core.ContentType) string {
	switch ct.Kind {
	case core.ContentMsgpack:
		return "application/msgpack"
	case core.ContentJSON:
		return "application/json"
	case core.ContentText:
		return "text/plain"
	case core.ContentCustom:
		return ct.Custom
	}
	return ""
}

// dlqBody is PUT queue-dlq's body.
type dlqBody struct {
	Topic      string      `json:"topic"`
	Group      string      `json:"group"`
	Policy     string      `json:"policy"`
	Target     *targetJSON `json:"target"`
	MaxRetries *uint32     `json:"max_retries"`
}

type targetJSON struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
}

// parsePolicy reads policy and target.
func parsePolicy(policy string, target *targetJSON) (core.DLQPolicy, error) {
	switch policy {
	case "discard", "global":
		if target != nil && target.Topic != "" {
			return core.DLQPolicy{}, problem(http.StatusBadRequest, "bad_parameter",
				"policy %q takes no target: send policy custom to name one", policy)
		}
		if policy == "discard" {
			return core.DLQPolicy{Kind: core.DLQDiscard}, nil
		}
		return core.DLQPolicy{Kind: core.DLQGlobal}, nil
	case "custom":
		if target == nil {
			return core.DLQPolicy{}, problem(http.StatusBadRequest, "bad_parameter",
				"policy custom needs target {topic, group}: the queue dead letters go to")
		}
		topic, group, err := queueNames(target.Topic, target.Group, "the target")
		if err != nil {
			return core.DLQPolicy{}, err
		}
		return core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: topic, Group: group}}, nil
	}
	return core.DLQPolicy{}, problem(http.StatusBadRequest, "bad_parameter",
		"policy %q: use discard, global or custom", policy)
}

func (s *Server) putQueueDLQ(w http.ResponseWriter, r *http.Request) (err error) {
	var body dlqBody
	target := ""
	defer func() { s.audit(r, "queue.dlq", target, err, "") }()
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	topic, group, err := queueNames(body.Topic, body.Group, "the")
	if err != nil {
		return err
	}
	target = topic + "/" + groupName(group)
	policy, err := parsePolicy(body.Policy, body.Target)
	if err != nil {
		return err
	}
	b, err := backend[messagesBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), operatorTimeout)
	defer cancel()
	set, err := b.SetQueueDLQ(ctx, topic, group, policy, body.MaxRetries)
	if err != nil {
		return operatorProblem(err)
	}
	writeJSON(w, http.StatusOK, queueSettingsJSON(topic, group, set))
	return nil
}

// queueSettingsJSON renders a queue's settings in the contract's Queue
// shape (the fields this family knows; counts are the queues family's).
func queueSettingsJSON(topic, group string, set *node.QueueSettings) map[string]any {
	dlq := map[string]any{"policy": "global"}
	if set.DLQ != nil {
		switch set.DLQ.Kind {
		case core.DLQDiscard:
			dlq["policy"] = "discard"
		case core.DLQCustom:
			dlq["policy"] = "custom"
			dlq["topic"], dlq["group"] = set.DLQ.Target.Topic, groupName(set.DLQ.Target.Group)
		}
	}
	if set.MaxRetries != nil {
		dlq["max_retries"] = *set.MaxRetries
	}
	out := map[string]any{"topic": topic, "group": groupName(group), "partition_count": set.Partitions, "dlq": dlq}
	if set.DefaultTTLMs != nil {
		out["default_message_ttl_ms"] = *set.DefaultTTLMs
	}
	return out
}

// groupName spells the default group as the API does.
func groupName(group string) string {
	if group == "" {
		return "default"
	}
	return group
}

// replayBody is POST dlq/replay's body.
type replayBody struct {
	DLQTopic  string   `json:"dlq_topic"`
	DLQGroup  string   `json:"dlq_group"`
	Partition uint32   `json:"partition"`
	Offsets   []uint64 `json:"offsets"`
}

type replayItem struct {
	Offset  uint64 `json:"offset"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

func (s *Server) postReplay(w http.ResponseWriter, r *http.Request) (err error) {
	var body replayBody
	target, detail := "", ""
	defer func() { s.audit(r, "dlq.replay", target, err, detail) }()
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	topic, group, err := queueNames(body.DLQTopic, body.DLQGroup, "the dlq")
	if err != nil {
		return err
	}
	target = topic + "/" + groupName(group)
	switch {
	case len(body.Offsets) == 0:
		return problem(http.StatusBadRequest, "bad_parameter", "offsets is empty: name 1 to %d DLQ offsets", replayOffsetsMax)
	case len(body.Offsets) > replayOffsetsMax:
		return problem(http.StatusBadRequest, "bad_parameter",
			"%d offsets is over the cap of %d per request: split them, or use POST /admin/api/dlq/redrive", len(body.Offsets), replayOffsetsMax)
	}
	b, err := backend[messagesBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), operatorTimeout)
	defer cancel()
	res, err := b.RunReplay(ctx, node.ReplayPlan{Topic: topic, Group: group, Partition: body.Partition, Offsets: body.Offsets})
	if err != nil {
		return operatorProblem(err)
	}
	if res.Err != nil {
		return operatorProblem(&broker.ErrOperator{Err: res.Err})
	}
	items := make([]replayItem, 0, len(res.Items))
	for _, it := range res.Items {
		out := replayItem{Offset: it.Offset, Outcome: "skipped", Reason: it.Reason}
		if it.Replayed {
			out.Outcome = "replayed"
		}
		items = append(items, out)
	}
	detail = "replayed " + strconv.Itoa(res.Replayed) + ", skipped " + strconv.Itoa(res.Skipped)
	writeJSON(w, http.StatusOK, map[string]any{"results": items})
	return nil
}

// redriveBody is POST dlq/redrive's body.
type redriveBody struct {
	DLQTopic    string `json:"dlq_topic"`
	DLQGroup    string `json:"dlq_group"`
	SourceTopic string `json:"source_topic"`
	SourceGroup string `json:"source_group"`
	Reason      string `json:"reason"`
	FromMs      int64  `json:"from_ms"`
	ToMs        int64  `json:"to_ms"`
	Limit       uint32 `json:"limit"`
	DryRun      bool   `json:"dry_run"`
	Partition   uint32 `json:"partition"`
	FromOffset  uint64 `json:"from_offset"`
}

// dlqReasons are the stroma.dlq.reason values a copy can carry.
var dlqReasons = []core.DLQReason{core.ReasonRetriesExhausted, core.ReasonTerminalNack, core.ReasonPendingRecovery, core.ReasonExpired}

func (s *Server) postRedrive(w http.ResponseWriter, r *http.Request) (err error) {
	var body redriveBody
	target, detail := "", ""
	defer func() { s.audit(r, "dlq.redrive", target, err, detail) }()
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	topic, group, err := queueNames(body.DLQTopic, body.DLQGroup, "the dlq")
	if err != nil {
		return err
	}
	target = topic + "/" + groupName(group)
	filter := node.DeadLetterFilter{Reason: body.Reason, FromMs: body.FromMs, ToMs: body.ToMs}
	if body.SourceTopic != "" {
		st, sg, err := queueNames(body.SourceTopic, body.SourceGroup, "the source")
		if err != nil {
			return err
		}
		filter.Source = core.DLQTarget{Topic: st, Group: sg}
		filter.SourceGroup = body.SourceGroup != ""
	} else if body.SourceGroup != "" {
		return problem(http.StatusBadRequest, "bad_parameter", "source_group without source_topic: name the source queue's topic too")
	}
	if body.Reason != "" && !knownReason(body.Reason) {
		return problem(http.StatusBadRequest, "bad_parameter",
			"reason %q: use retries_exhausted, terminal_nack, pending_recovery or expired", body.Reason)
	}
	switch {
	case body.FromMs < 0 || body.ToMs < 0:
		return problem(http.StatusBadRequest, "bad_parameter", "from_ms and to_ms are Unix milliseconds, never negative")
	case body.ToMs != 0 && body.ToMs < body.FromMs:
		return problem(http.StatusBadRequest, "bad_parameter", "to_ms %d is before from_ms %d: the range is [from_ms, to_ms]", body.ToMs, body.FromMs)
	case body.Limit > redriveLimitMax:
		return problem(http.StatusBadRequest, "bad_parameter", "limit %d is over the cap of %d: redrive in several requests", body.Limit, redriveLimitMax)
	}
	limit := body.Limit
	if limit == 0 {
		limit = redriveLimitDefault
	}
	b, err := backend[messagesBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), operatorTimeout)
	defer cancel()
	res, err := b.RunReplay(ctx, node.ReplayPlan{Topic: topic, Group: group, Partition: body.Partition, From: body.FromOffset,
		Redrive: true, Filter: filter, Limit: limit, DryRun: body.DryRun})
	if err != nil {
		return operatorProblem(err)
	}
	if res.Err != nil {
		return operatorProblem(&broker.ErrOperator{Err: res.Err})
	}
	detail = "matched " + strconv.Itoa(res.Matched) + ", replayed " + strconv.Itoa(res.Replayed) + ", skipped " + strconv.Itoa(res.Skipped)
	if body.DryRun {
		detail = "dry run: " + detail
	}
	out := map[string]any{"matched": res.Matched, "replayed": res.Replayed, "skipped": res.Skipped,
		"dry_run": body.DryRun, "done": res.Done, "stopped_early": res.Stopped, "next_offset_hint": nil}
	if !res.Done {
		out["next_offset_hint"] = res.NextOffset
		out["next_partition"] = res.NextPartition
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func knownReason(reason string) bool {
	for _, r := range dlqReasons {
		if r.String() == reason {
			return true
		}
	}
	return false
}

// operatorProblem maps a broker error to its answer.
func operatorProblem(err error) error {
	var op *broker.ErrOperator
	switch {
	case errors.As(err, &op):
		switch {
		case op.Err == core.ErrQueueUnknown:
			return problem(http.StatusNotFound, "not_found", "%s", op.Err.Error())
		case op.Err == core.ErrInvalidName:
			return problem(http.StatusBadRequest, "bad_name", "%s", op.Err.Error())
		case op.Err == core.ErrPartitionOutOfRange:
			return problem(http.StatusBadRequest, "bad_parameter", "%s: ask for a partition below the queue's partition_count", op.Err.Error())
		case op.Err.Code() == core.CodeInvalid:
			return problem(http.StatusBadRequest, "bad_parameter", "%s", op.Err.Error())
		case op.Err.Code() == core.CodeConflict:
			return problem(http.StatusConflict, "conflict", "%s", op.Err.Error())
		case op.Err.Code() == core.CodeNotFound:
			return problem(http.StatusNotFound, "not_found", "%s", op.Err.Error())
		}
		return problem(http.StatusServiceUnavailable, "not_ready", "%s", op.Err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return problem(http.StatusServiceUnavailable, "not_ready",
			"the broker did not answer within %s; retry, or check its log", operatorTimeout)
	case errors.Is(err, broker.ErrNoSuchMachine):
		return problem(http.StatusServiceUnavailable, "not_ready", "the queue's partition is not reachable now; retry")
	}
	return err
}
