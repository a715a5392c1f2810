package admin

import (
	"context"
	"errors"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/cohort"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/broker"
)

// The streams and cohorts endpoints through httptest against a fake broker:
// the JSON shapes (null offsets for a partition not observed), defaults
// and refusals of a create (bad input reaches nothing; the broker's
// refusal is a 400 with its message), audit entries, and the cohort view.

type fakeStreams struct {
	fakeSource
	streams    []broker.StreamState
	declareErr error
	declared   []core.StreamSettings
	calls      []string
	cohorts    *node.CohortList
	cohortsErr error
}

func (f *fakeStreams) ListStreams(context.Context) ([]broker.StreamState, error) {
	f.calls = append(f.calls, "list")
	return f.streams, nil
}

func (f *fakeStreams) DeclareStream(_ context.Context, topic string, s core.StreamSettings) (bool, error) {
	f.calls = append(f.calls, "declare")
	if f.declareErr != nil {
		return false, f.declareErr
	}
	f.declared = append(f.declared, s)
	for _, st := range f.streams {
		if st.Topic == topic {
			return false, nil
		}
	}
	st := broker.StreamState{Topic: topic, Settings: s}
	for p := range s.PartitionCount {
		st.Parts = append(st.Parts, broker.StreamPartState{Partition: p})
	}
	f.streams = append(f.streams, st)
	return true, nil
}

func (f *fakeStreams) Cohorts(context.Context) (*node.CohortList, error) {
	return f.cohorts, f.cohortsErr
}

func TestStreamsListShape(t *testing.T) {
	s := newServer(quietLogger())
	f := &fakeStreams{streams: []broker.StreamState{{Topic: "clicks",
		Settings: core.StreamSettings{Tier: core.TierSpeculative, PartitionCount: 2, MaxAgeMs: 60000, MaxBytes: 1 << 20, MaxRecords: 9},
		Parts:    []broker.StreamPartState{{Partition: 0, Loaded: true, Observed: true, Oldest: 3, Next: 10, Subscriptions: 2}, {Partition: 1}}}}}
	s.Attach(f)
	rec, out := sendQ(t, s.Handler(), "GET", "/admin/api/streams", "")
	if rec.Code != 200 {
		t.Fatalf("list = %d %v", rec.Code, out)
	}
	st := out["streams"].([]any)[0].(map[string]any)
	for k, v := range map[string]any{"topic": "clicks", "partition_count": 2.0, "durability": "speculative", "max_age_ms": 60000.0,
		"max_bytes": float64(1 << 20), "max_records": 9.0, "loaded_partitions": 1.0, "records": 7.0, "subscriptions": 2.0} {
		if st[k] != v {
			t.Errorf("stream.%s = %v, want %v", k, st[k], v)
		}
	}
	parts := st["partitions"].([]any)
	p0, p1 := parts[0].(map[string]any), parts[1].(map[string]any)
	if p0["oldest_offset"] != 3.0 || p0["next_offset"] != 10.0 || p0["records"] != 7.0 || p0["subscriptions"] != 2.0 || p0["loaded"] != true {
		t.Fatalf("partition 0 %v", p0)
	}
	for _, k := range []string{"oldest_offset", "next_offset", "records", "subscriptions"} {
		if v, ok := p1[k]; !ok || v != nil {
			t.Errorf("an unloaded partition's %s = %v, want null", k, v)
		}
	}
	// No stream at all is an empty list, not null.
	f.streams = nil
	if _, out := sendQ(t, s.Handler(), "GET", "/admin/api/streams", ""); out["streams"] == nil || len(out["streams"].([]any)) != 0 {
		t.Fatalf("empty listing %v", out)
	}
}

func TestStreamsCreateDefaultsRefusalsAndAudit(t *testing.T) {
	s := newServer(quietLogger())
	f := &fakeStreams{}
	s.Attach(f)
	rec, out := sendQ(t, s.Handler(), "POST", "/admin/api/streams", `{"topic":"ev"}`)
	if rec.Code != 201 || out["partition_count"] != 1.0 || out["durability"] != "durable" {
		t.Fatalf("create with defaults = %d %v", rec.Code, out)
	}
	want := core.StreamSettings{Tier: core.TierDurable, PartitionCount: 1}
	if f.declared[0] != want {
		t.Fatalf("declared %+v, want %+v", f.declared[0], want)
	}
	rec, out = sendQ(t, s.Handler(), "POST", "/admin/api/streams",
		`{"topic":"ev2","partition_count":3,"durability":"ephemeral","max_age_ms":5,"max_bytes":6,"max_records":7}`)
	if rec.Code != 201 || len(out["partitions"].([]any)) != 3 {
		t.Fatalf("create = %d %v", rec.Code, out)
	}
	want = core.StreamSettings{Tier: core.TierEphemeral, PartitionCount: 3, MaxAgeMs: 5, MaxBytes: 6, MaxRecords: 7}
	if f.declared[1] != want {
		t.Fatalf("declared %+v, want %+v", f.declared[1], want)
	}
	// The same again: 200 (idempotent, as DECLARE_PLEXUS).
	if rec, _ := sendQ(t, s.Handler(), "POST", "/admin/api/streams", `{"topic":"ev"}`); rec.Code != 200 {
		t.Fatalf("re-declare = %d", rec.Code)
	}
	// Bad input never reaches the broker.
	f.calls = nil
	for _, body := range []string{`{}`, `{"topic":"a b"}`, `{"topic":"x","partition_count":0}`, `{"topic":"x","durability":"fast"}`,
		`{"topic":"x","max_age_ms":-1}`, `{"topic":"x","retention":{}}`} {
		if rec, out := sendQ(t, s.Handler(), "POST", "/admin/api/streams", body); rec.Code != 400 || out["message"] == "" {
			t.Errorf("%s: %d %v, want 400 with a message", body, rec.Code, out)
		}
	}
	if len(f.calls) != 0 {
		t.Fatalf("bad input reached the broker: %v", f.calls)
	}
	// The Node's refusal (other settings, a queue's topic) is a 400 with
	// its reason.
	f.declareErr = &broker.QueueOpError{Kind: broker.QueueBadInput, Message: core.ErrStreamSettings.Error()}
	rec, out = sendQ(t, s.Handler(), "POST", "/admin/api/streams", `{"topic":"ev","partition_count":2}`)
	if rec.Code != 400 || out["message"] != core.ErrStreamSettings.Error() {
		t.Fatalf("refused = %d %v", rec.Code, out)
	}
	// Every create is audited, refused or not: 3 done, 6 bad, 1 refused.
	entries := s.auditLog.newest(0, auditRingSize)
	if len(entries) != 10 {
		t.Fatalf("%d audit entries, want 10", len(entries))
	}
	for _, e := range entries {
		if e.Action != "stream.create" {
			t.Fatalf("audit %+v", e)
		}
	}
}

func TestCohortsShape(t *testing.T) {
	s := newServer(quietLogger())
	id := cohort.MemberID{0xaa, 1}
	f := &fakeStreams{cohorts: &node.CohortList{Cohorts: []node.CohortInfo{{Topic: "orders", Group: "", CohortID: "billing",
		Generation: 1<<32 + 3, PartitionCount: 4, Members: []node.CohortMemberInfo{
			{Member: id, Session: 7, Subscribed: []uint32{0, 1, 2, 3}, Owned: []uint32{0, 1}, Target: 2},
			{Member: cohort.MemberID{0xbb}, Session: 8, Subscribed: []uint32{2, 3}}}}}}}
	s.Attach(f)
	rec, out := sendQ(t, s.Handler(), "GET", "/admin/api/cohorts", "")
	if rec.Code != 200 {
		t.Fatalf("cohorts = %d %v", rec.Code, out)
	}
	c := out["cohorts"].([]any)[0].(map[string]any)
	if c["topic"] != "orders" || c["group"] != "" || c["consumer_group"] != "billing" || c["generation"] != float64(1<<32+3) ||
		c["partition_count"] != 4.0 || c["pending"] != false {
		t.Fatalf("cohort %v", c)
	}
	members := c["members"].([]any)
	m0, m1 := members[0].(map[string]any), members[1].(map[string]any)
	if m0["member_id"] != id.String() || m0["session"] != 7.0 || m0["consumer_target"] != 2.0 ||
		len(m0["subscribed_partitions"].([]any)) != 4 || len(m0["owned_partitions"].([]any)) != 2 {
		t.Fatalf("member 0 %v", m0)
	}
	// Nothing owned is [], not null; no target is null.
	if owned, ok := m1["owned_partitions"].([]any); !ok || len(owned) != 0 || m1["consumer_target"] != nil {
		t.Fatalf("member 1 %v", m1)
	}
	f.cohortsErr = errors.New("deadline exceeded")
	wantJSONError(t, do(t, s.Handler(), "GET", "/admin/api/cohorts"), 503, "not_ready")
}
