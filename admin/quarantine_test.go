package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// The quarantine family through httptest: a fake broker with a report
// and canned repair outcomes (the decisions are the Node's; here only the
// mapping to HTTP, the readyz states and the audit are checked).

type fakeQuarantine struct {
	fakeSource
	report  node.QuarantineReport
	outcome node.RepairOutcome
	asked   []core.QueueID
}

func (f *fakeQuarantine) Quarantine() node.QuarantineReport { return f.report }

func (f *fakeQuarantine) RepairQuarantine(_ context.Context, q core.QueueID) (*node.QuarantineRepaired, error) {
	f.asked = append(f.asked, q)
	answer := &node.QuarantineRepaired{Outcome: f.outcome, Err: "the load after the cut found damage again"}
	if f.outcome == node.RepairDone {
		answer.Entry, answer.TruncatedEntries = f.report.Entries[0], 3
	}
	return answer, nil
}

var parkedJobs = node.QuarantineEntry{Queue: core.QueueID{Topic: "jobs", Partition: 2}, Damage: "checksum",
	Reason: "checksum mismatch at index 9", Index: 9, DetectedAtMs: 1234}

func TestReadyzDegradedAndRefused(t *testing.T) {
	s := newServer(quietLogger())
	src := &fakeQuarantine{}
	s.Attach(src)
	if rec := do(t, s.Handler(), http.MethodGet, "/readyz"); rec.Code != http.StatusOK || rec.Body.String() != "ok\n" {
		t.Fatalf("nothing parked: %d %q", rec.Code, rec.Body.String())
	}
	src.report = node.QuarantineReport{Entries: []node.QuarantineEntry{parkedJobs}, QuarantinesTotal: 1}
	rec := do(t, s.Handler(), http.MethodGet, "/readyz")
	var body struct {
		Ready, Degraded bool
		Quarantined     []quarantineItem
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &body) != nil || !body.Ready || !body.Degraded ||
		len(body.Quarantined) != 1 || body.Quarantined[0].Topic != "jobs" || body.Quarantined[0].Partition != 2 {
		t.Fatalf("degraded: %d %s", rec.Code, rec.Body.String())
	}
	refused := parkedJobs
	refused.Refused = true
	src.report = node.QuarantineReport{Entries: []node.QuarantineEntry{refused}, Refused: true, QuarantinesTotal: 1}
	rec = do(t, s.Handler(), http.MethodGet, "/readyz")
	var notReady struct {
		Ready       *bool
		Code        string
		Quarantined []quarantineItem
	}
	if rec.Code != http.StatusServiceUnavailable || json.Unmarshal(rec.Body.Bytes(), &notReady) != nil || notReady.Ready == nil ||
		*notReady.Ready || notReady.Code != "not_ready" || len(notReady.Quarantined) != 1 {
		t.Fatalf("refused: %d %s", rec.Code, rec.Body.String())
	}
	// Stopping wins over everything.
	s.Stopping()
	wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/readyz"), http.StatusServiceUnavailable, "stopping")
}

func TestQuarantineListingAndRepair(t *testing.T) {
	s := newServer(quietLogger())
	src := &fakeQuarantine{report: node.QuarantineReport{Entries: []node.QuarantineEntry{parkedJobs}, QuarantinesTotal: 1}}
	s.Attach(src)
	rec := do(t, s.Handler(), http.MethodGet, "/admin/api/quarantine")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(),
		`{"topic":"jobs","group":"","partition":2,"kind":"checksum","reason":"checksum mismatch at index 9","detected_at_ms":1234,"partition_kind":"queue","index":9,"refused":false}`) {
		t.Fatalf("listing: %d %s", rec.Code, rec.Body.String())
	}
	for _, tc := range []struct {
		outcome node.RepairOutcome
		status  int
		code    string
	}{
		{node.RepairUnknown, http.StatusNotFound, "not_found"},
		{node.RepairNotQuarantined, http.StatusConflict, "conflict"},
		{node.RepairBusy, http.StatusConflict, "conflict"},
		{node.RepairFailed, http.StatusInternalServerError, "repair_failed"},
	} {
		src.outcome = tc.outcome
		wantJSONError(t, do(t, s.Handler(), http.MethodPost, "/admin/api/quarantine/repair?topic=jobs&partition=2"), tc.status, tc.code)
	}
	src.outcome = node.RepairDone
	rec = do(t, s.Handler(), http.MethodPost, "/admin/api/quarantine/repair?topic=jobs&group=default&partition=2")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"truncated_entries":3`) || !strings.Contains(rec.Body.String(), `"topic":"jobs"`) {
		t.Fatalf("repair: %d %s", rec.Code, rec.Body.String())
	}
	if last := src.asked[len(src.asked)-1]; last != (core.QueueID{Topic: "jobs", Group: "default", Partition: 2}) {
		t.Fatalf("asked to repair %+v", last)
	}
	// Bad input never reaches the broker.
	asked := len(src.asked)
	for path, code := range map[string]string{
		"/admin/api/quarantine/repair?partition=2":                  "bad_parameter",
		"/admin/api/quarantine/repair?topic=jobs":                   "bad_parameter",
		"/admin/api/quarantine/repair?topic=jobs&partition=x":       "bad_parameter",
		"/admin/api/quarantine/repair?topic=Bad%20Name&partition=0": "bad_name",
	} {
		wantJSONError(t, do(t, s.Handler(), http.MethodPost, path), http.StatusBadRequest, code)
	}
	if len(src.asked) != asked {
		t.Fatal("a bad request reached the broker")
	}
	// Every repair request is audited, refused or not.
	audit := do(t, s.Handler(), http.MethodGet, "/admin/api/audit").Body.String()
	if n := strings.Count(audit, `"quarantine.repair"`); n != 9 {
		t.Fatalf("%d repairs audited, want 9: %s", n, audit)
	}
	if !strings.Contains(audit, "cut 3 records") {
		t.Fatalf("the repair's audit entry does not say what was cut: %s", audit)
	}
}

// A quarantined partition is a critical attention item that names the
// repair; none while nothing is parked.
func TestQuarantineIsAnAttentionItem(t *testing.T) {
	s := newServer(quietLogger())
	src := &fakeQuarantine{}
	s.Attach(src)
	for _, item := range s.attention(time.Now()) {
		if item.Kind == "quarantined" {
			t.Fatalf("nothing parked, yet %+v", item)
		}
	}
	src.report = node.QuarantineReport{Entries: []node.QuarantineEntry{parkedJobs}, QuarantinesTotal: 1}
	var found []AttentionItem
	for _, item := range s.attention(time.Now()) {
		if item.Kind == "quarantined" {
			found = append(found, item)
		}
	}
	if len(found) != 1 || found[0].Severity != "critical" || found[0].SinceMs != 1234 ||
		!strings.Contains(found[0].Message, "quarantine/repair?topic=jobs&group=&partition=2") ||
		!strings.Contains(found[0].Message, parkedJobs.Reason) {
		t.Fatalf("attention %+v", found)
	}
}
