package node

import (
	"slices"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// Runtime settings and the global dead-letter target (node_runtime.go):
// versions, refusals, durability across restarts, and the live copies.

// emptyRuntimeSnapshotBytes is the runtime section of a snapshot of a state
// with no runtime record and no global target: presence 0, version 0,
// presence 0.
const emptyRuntimeSnapshotBytes = 1 + 8 + 1

// adminAsk delivers msg to the Node from operator req and returns what the
// operator got back once everything settled.
func (d *miniDriver) adminAsk(req uint64, msg Message) []Message {
	d.t.Helper()
	var got []Message
	d.toAdmin = func(env Envelope) {
		if env.To != AdminAddr(req) {
			d.t.Fatalf("an answer for %v reached %v", AdminAddr(req), env.To)
		}
		got = append(got, env.Msg)
	}
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: AdminAddr(req), To: NodeAddr(), Msg: msg}})
	d.run()
	d.toAdmin = nil
	return got
}

func (d *miniDriver) putRuntime(req, expected uint64, patch RuntimePatch) *RuntimeSettingsState {
	d.t.Helper()
	got := d.adminAsk(req, &PutRuntimeSettings{ExpectedVersion: expected, Patch: patch})
	if len(got) != 1 {
		d.t.Fatalf("put runtime: %d answers", len(got))
	}
	return got[0].(*RuntimeSettingsState)
}

func (d *miniDriver) openPartition(topic string, p uint32) {
	d.t.Helper()
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: SessionAddr(1), To: NodeAddr(), Msg: &Open{Token: 1, Topic: topic, Partition: p}}})
	d.run()
}

func TestRuntimeSeedsApplyOnFirstBootOnly(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	if h.n.state.runtimeVersion != 1 || *h.n.state.runtime != RuntimeSeeds(h.cfg) {
		t.Fatalf("first boot recorded version %d %+v, want the seeds at version 1", h.n.state.runtimeVersion, h.n.state.runtime)
	}
	h.cfg.Partition.LeaseMs = 1234 // a changed flag on the next start
	h.restart(2)
	if got := h.n.liveRuntime().LeaseMs; got != DefaultConfig().Partition.LeaseMs {
		t.Fatalf("after a restart with another seed the lease is %d, want the persisted %d", got, DefaultConfig().Partition.LeaseMs)
	}
	if !slices.Equal(h.n.RuntimeSeedsIgnored(), []string{"delivery.inflight_ttl_ms"}) {
		t.Fatalf("ignored seeds %v", h.n.RuntimeSeedsIgnored())
	}
	if h.n.state.runtimeVersion != 1 {
		t.Fatalf("a later boot wrote version %d", h.n.state.runtimeVersion)
	}
}

func TestRuntimeSeedsAreValidatedAtStart(t *testing.T) {
	cfg := testNodeConfig()
	cfg.ReconnectGraceMs = runtimeGraceMsMax + 1
	if _, err := NewNode(cfg, nil, nil, entropyOf(1)); err == nil {
		t.Fatal("a seed out of range was accepted at start")
	}
}

func TestRuntimePutRefusesStaleLockedInvalidAndEmpty(t *testing.T) {
	d := newMiniDriver(t)
	if st := d.putRuntime(1, 7, RuntimePatch{LeaseMs: i64(500)}); st.Err == nil || st.Err.Code != RefusedStaleVersion || st.Version != 1 {
		t.Fatalf("stale put answered %+v", st)
	}
	if st := d.putRuntime(2, 1, RuntimePatch{LeaseMs: i64(0)}); st.Err == nil || st.Err.Code != RefusedInvalid || st.Err.Key != "delivery.inflight_ttl_ms" {
		t.Fatalf("invalid put answered %+v", st)
	}
	if st := d.putRuntime(3, 1, RuntimePatch{}); st.Err == nil || st.Err.Code != RefusedEmpty {
		t.Fatalf("empty put answered %+v", st)
	}
	d.node.cfg.RuntimeLockIdleQueueCleanup = true
	on := true
	if st := d.putRuntime(4, 1, RuntimePatch{IdleCleanupEnabled: &on}); st.Err == nil || st.Err.Code != RefusedLocked || !slices.Equal(st.Locked, []string{RuntimeGroupIdleQueueCleanup}) {
		t.Fatalf("locked put answered %+v", st)
	}
	if d.node.state.runtimeVersion != 1 {
		t.Fatalf("a refused put recorded version %d", d.node.state.runtimeVersion)
	}
	st := d.putRuntime(5, 1, RuntimePatch{LeaseMs: i64(500)})
	if st.Err != nil || st.Version != 2 || st.Settings.LeaseMs != 500 || st.Settings.ReconnectGraceMs != d.cfg.ReconnectGraceMs {
		t.Fatalf("put answered %+v", st)
	}
}

// TestRuntimeLeaseReachesLoadedAndLaterPartitions: the answer leaves only
// once every loaded partition has the new lease; a partition loaded later
// starts with it.
func TestRuntimeLeaseReachesLoadedAndLaterPartitions(t *testing.T) {
	d := newMiniDriver(t)
	d.openPartition("jobs", 0)
	var answered bool
	d.toAdmin = func(env Envelope) {
		answered = true
		if got := d.hosts[qid("jobs", 0)].Partition().Config().LeaseMs; got != 500 {
			t.Fatalf("the answer left while jobs/0 leases for %d ms", got)
		}
	}
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: AdminAddr(1), To: NodeAddr(),
		Msg: &PutRuntimeSettings{ExpectedVersion: 1, Patch: RuntimePatch{LeaseMs: i64(500), ExpiryBatchMax: intp(7)}}}})
	// The record is durable (the mini driver persists at once): the Node
	// sent the partition its values, and holds the answer until the
	// partition acknowledges, whatever order envelopes of different
	// senders arrive in.
	for _, env := range d.queue {
		if env.To.Kind == AddrAdmin {
			t.Fatalf("the answer left with the partition's update, before its acknowledgement")
		}
	}
	d.run()
	if !answered {
		t.Fatal("no answer")
	}
	d.openPartition("other", 0)
	if cfg := d.hosts[qid("other", 0)].Partition().Config(); cfg.LeaseMs != 500 || cfg.ExpiryBatchMax != 7 {
		t.Fatalf("a partition loaded after the change leases for %d ms, batch %d", cfg.LeaseMs, cfg.ExpiryBatchMax)
	}
}

func intp(v int) *int { return &v }

func TestGlobalDLQVersionsAndDeadLetters(t *testing.T) {
	d := newMiniDriver(t)
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: SessionAddr(1), To: NodeAddr(),
		Msg: &DeclareQueue{Token: 1, Topic: "jobs", DLQ: &core.DLQPolicy{Kind: core.DLQGlobal}, MaxRetries: u32(0)}}})
	d.openPartition("jobs", 0)
	put := func(req, expected uint64, target *core.DLQTarget) *GlobalDLQState {
		got := d.adminAsk(req, &PutGlobalDLQ{ExpectedVersion: expected, Target: target})
		if len(got) != 1 {
			t.Fatalf("%d answers", len(got))
		}
		return got[0].(*GlobalDLQState)
	}
	if st := put(1, 0, &core.DLQTarget{Topic: "Bad Name"}); st.Err == nil || st.Err.Code != RefusedInvalid {
		t.Fatalf("a bad target answered %+v", st)
	}
	if st := put(2, 0, &core.DLQTarget{Topic: "graveyard", Group: "default"}); st.Err != nil || st.Version != 1 || *st.Target != (core.DLQTarget{Topic: "graveyard"}) {
		t.Fatalf("put answered %+v", st)
	}
	if got := d.hosts[qid("jobs", 0)].Partition().GlobalDLQ(); got == nil || got.Topic != "graveyard" {
		t.Fatalf("jobs/0 holds global target %v", got)
	}
	if st := put(3, 0, nil); st.Err == nil || st.Err.Code != RefusedStaleVersion || st.Version != 1 || st.Target.Topic != "graveyard" {
		t.Fatalf("a stale clear answered %+v", st)
	}
	// A message that fails lands in the global target.
	src := qid("jobs", 0)
	d.stepHost(src, &Deliver{NowMs: d.now, Envelope: Envelope{From: SessionAddr(1), To: PartitionAddr(src),
		Msg: &Request{Input: &core.Publish{Confirm: true, Body: &core.Body{Payload: []byte("x")}}}}})
	d.stepHost(src, &Deliver{NowMs: d.now, Envelope: Envelope{From: SessionAddr(1), To: PartitionAddr(src),
		Msg: &Request{Input: &core.Subscribe{SubID: 1, Prefetch: 1}}}})
	var tags []uint64
	d.toSession = func(env Envelope) {
		if ds, ok := env.Msg.(*Deliveries); ok {
			for _, it := range ds.Items {
				tags = append(tags, it.Tag)
			}
		}
	}
	d.run()
	if len(tags) != 1 {
		t.Fatalf("delivered %v", tags)
	}
	d.stepHost(src, &Deliver{NowMs: d.now, Envelope: Envelope{From: SessionAddr(1), To: PartitionAddr(src),
		Msg: &Request{Input: &core.Nack{SubID: 1, Tags: tags, Requeue: false}}}})
	d.run()
	target := d.hosts[qid("graveyard", 0)]
	if target == nil || target.Partition().Stats().Published != 1 {
		t.Fatalf("the dead letter did not reach the global target")
	}
	if st := put(4, 1, nil); st.Err != nil || st.Version != 2 || st.Target != nil {
		t.Fatalf("clear answered %+v", st)
	}
	if got := d.hosts[src].Partition().GlobalDLQ(); got != nil {
		t.Fatalf("after a clear jobs/0 holds %v", got)
	}
}

// TestRuntimeGraceReachesSessionsAndNewOnes: a changed grace goes to every
// session; a session started after starts with it; the session applies it.
func TestRuntimeGraceReachesSessionsAndNewOnes(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	e := h.deliver(AdminAddr(1), &PutRuntimeSettings{ExpectedVersion: 1, Patch: RuntimePatch{ReconnectGraceMs: i64(1234)}})
	var told bool
	for _, env := range e.out {
		if m, ok := env.Msg.(*SessionRuntime); ok && env.To == SessionAddr(sid) && m.ReconnectGraceMs == 1234 {
			told = true
		}
	}
	if !told {
		t.Fatalf("session %d was not told the new grace: %+v", sid, e.out)
	}
	_, _, _, e = h.hello(nil)
	if len(e.start) != 1 || e.start[0].Runtime == nil || e.start[0].Runtime.ReconnectGraceMs != 1234 {
		t.Fatalf("a new session starts with %+v", e.start)
	}
	s := NewSession(h.cfg, e.start[0])
	if s.graceMs() != 1234 {
		t.Fatalf("the session's grace is %d", s.graceMs())
	}
	s.Step(&Deliver{NowMs: h.now, Envelope: Envelope{From: NodeAddr(), To: SessionAddr(e.start[0].ID), Msg: &SessionRuntime{ReconnectGraceMs: 77}}})
	if s.graceMs() != 77 {
		t.Fatalf("after SessionRuntime the session's grace is %d", s.graceMs())
	}
}

// TestRuntimeDefaultPartitionCount: queues created after the change without
// a count get the new default; an existing queue keeps its count.
func TestRuntimeDefaultPartitionCount(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	if o := h.openQueue(1, "before", 0); o.Partitions != 1 {
		t.Fatalf("an implicit queue has %d partitions", o.Partitions)
	}
	h.deliver(AdminAddr(1), &PutRuntimeSettings{ExpectedVersion: 1, Patch: RuntimePatch{DefaultPartitionCount: u32(3)}})
	if o := h.openQueue(1, "after", 2); o.Err != nil || o.Partitions != 3 {
		t.Fatalf("an implicit queue after the change: %+v", o)
	}
	if got := h.n.state.queues[queueKey{Topic: "before"}].partitions; got != 1 {
		t.Fatalf("the earlier queue now has %d partitions", got)
	}
	e := h.deliver(SessionAddr(1), &DeclareQueue{Token: 5, Topic: "declared"})
	for _, env := range e.out {
		if d, ok := env.Msg.(*Declared); ok && d.Partitions != 3 {
			t.Fatalf("a declare without a count got %d partitions", d.Partitions)
		}
	}
	if st := h.n.runtimeState(); st.Settings.DefaultPartitionCount != 3 || st.Version != 2 {
		t.Fatalf("state %+v", st)
	}
}
