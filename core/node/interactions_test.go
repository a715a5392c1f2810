package node

import (
	"fmt"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// Regression tests for defects where separately built features of the
// Node meet: idle eviction, queue deletes, runtime settings, quarantine
// and operator requests. Each test failed before its fix.

// An idle sweep that runs while a delete is between its inflight query
// and its durable removal record must not start an UnloadCheck on the
// doomed partition: the check would find the queue gone from the
// catalogue (an assertion), and queueRemoved must find the partition
// still loaded.
func TestIdleSweepSkipsQueueBeingDeleted(t *testing.T) {
	q := qid("orders", 0)
	d := newIdleDriver(t, idleOn())
	d.setCleanup(idleOn())
	d.open(idlePub, q)
	d.publish(idlePub, q, "m0")
	d.forget(idlePub, q)
	d.run()
	// The next sweep is not due at the delete's own step.
	d.stepNode(&Tick{NowMs: d.now})
	d.run()
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: AdminAddr(3), To: NodeAddr(), Msg: &DeleteQueue{Topic: q.Topic}}})
	if len(d.queue) != 1 {
		t.Fatalf("want the InflightQuery only, got %d envelopes", len(d.queue))
	}
	// The sweep is due in the step that takes the partition's answer and
	// appends the removal record.
	d.now += idleOn().SweepIntervalMs + 1
	d.run()
	var res *QueueDeleteResult
	for _, m := range d.take(0) {
		if r, ok := m.(*QueueDeleteResult); ok {
			res = r
		}
	}
	if res == nil || res.Outcome != DeleteDone {
		t.Fatalf("delete answered %+v", res)
	}
	if d.node.partitions[q] != nil || d.node.idle.checksOut != 0 {
		t.Fatalf("the deleted partition is still in the table (%+v) or a check is out (%d)", d.node.partitions[q], d.node.idle.checksOut)
	}
	if d.unloads[q] != 0 {
		t.Fatalf("the deleted partition was unloaded rather than stopped")
	}
}

// checkOutWithIdlePartition leaves q loaded, idle and unused, with a
// sweep's UnloadCheck in the FIFO (not yet delivered). subscribed: a
// subscription keeps it, so the Host will say no.
func checkOutWithIdlePartition(t *testing.T, q core.QueueID, subscribed bool) *idleDriver {
	t.Helper()
	d := newIdleDriver(t, idleOn())
	d.open(idlePub, q)
	d.publish(idlePub, q, "m0")
	if subscribed {
		d.request(idlePub, q, &core.Subscribe{SubID: 1, Prefetch: 1})
	}
	d.forget(idlePub, q)
	d.now += 2000
	d.stepNode(&Tick{NowMs: d.now})
	if pe := d.node.partitions[q]; pe == nil || pe.idle != idleChecking || len(d.queue) != 1 {
		t.Fatalf("no check out: %+v, %d envelopes", pe, len(d.queue))
	}
	return d
}

// putLease makes lease the live delivery.inflight_ttl_ms (recorded and
// durable in this step; its answer is held until the partitions apply it).
func putLease(d *idleDriver, lease int64) {
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: AdminAddr(9), To: NodeAddr(),
		Msg: &PutRuntimeSettings{ExpectedVersion: d.node.state.runtimeVersion, Patch: RuntimePatch{LeaseMs: &lease}}}})
}

// A runtime change made live while an UnloadCheck is out skipped the
// partition (it counted as not loaded); when the Host then says no, the
// partition must get the values and the operator's answer leave.
func TestRuntimeChangeDuringRefusedUnloadCheckReachesPartition(t *testing.T) {
	q := qid("orders", 0)
	d := checkOutWithIdlePartition(t, q, true)
	putLease(d, 4321)
	if len(d.node.rt.held) != 1 {
		t.Fatalf("the answer is not held while the check is out (%d)", len(d.node.rt.held))
	}
	d.run()
	pe := d.node.partitions[q]
	if pe == nil || !pe.loaded || pe.lastCleanup != "skipped: subscribers" {
		t.Fatalf("the Host did not refuse: %+v", pe)
	}
	if len(d.node.rt.held) != 0 {
		t.Fatalf("the operator's answer is held forever")
	}
	if pe.runtime != d.node.liveStamp() || d.hosts[q].p.Config().LeaseMs != 4321 {
		t.Fatalf("the partition serves the old values: stamp %+v (live %+v), lease %d", pe.runtime, d.node.liveStamp(), d.hosts[q].p.Config().LeaseMs)
	}
}

// The same for the global dead-letter target.
func TestGlobalDLQChangeDuringRefusedUnloadCheckReachesPartition(t *testing.T) {
	q := qid("orders", 0)
	d := checkOutWithIdlePartition(t, q, true)
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: AdminAddr(9), To: NodeAddr(),
		Msg: &PutGlobalDLQ{ExpectedVersion: d.node.state.globalDLQVersion, Target: &core.DLQTarget{Topic: "dead"}}}})
	d.run()
	got := 0
	for _, m := range d.take(0) {
		if s, ok := m.(*GlobalDLQState); ok && s.Err == nil {
			got++
		}
	}
	if got != 1 {
		t.Fatalf("PUT global-dlq answered %d times (held %d)", got, len(d.node.rt.held))
	}
	if tg := d.hosts[q].p.GlobalDLQ(); tg == nil || tg.Topic != "dead" {
		t.Fatalf("the partition holds global target %+v", tg)
	}
}

// An Open during the check cancels the unload (the Host had said yes):
// the resumed partition gets the values made live meanwhile, and the Open
// is answered once they are in force.
func TestRuntimeChangeDuringCancelledUnloadCheckReachesPartition(t *testing.T) {
	q := qid("orders", 0)
	d := checkOutWithIdlePartition(t, q, false)
	putLease(d, 4321)
	d.tokens++
	d.queue = append(d.queue, Envelope{From: SessionAddr(idlePub), To: NodeAddr(), Msg: &Open{Token: d.tokens, Topic: q.Topic, Partition: q.Partition}})
	d.run()
	opened := 0
	for _, m := range d.take(idlePub) {
		if o, ok := m.(*Opened); ok && o.Err == nil {
			opened++
		}
	}
	pe := d.node.partitions[q]
	if opened != 1 || d.unloads[q] != 0 || pe == nil || pe.lastCleanup != "skipped: cancelled: used during the check" {
		t.Fatalf("opened %d, unloads %d, entry %+v", opened, d.unloads[q], pe)
	}
	if len(d.node.rt.held) != 0 || pe.runtime != d.node.liveStamp() || d.hosts[q].p.Config().LeaseMs != 4321 {
		t.Fatalf("held %d, stamp %+v (live %+v), lease %d", len(d.node.rt.held), pe.runtime, d.node.liveStamp(), d.hosts[q].p.Config().LeaseMs)
	}
}

// When the unload goes ahead the held answer leaves with the partition,
// and the next load starts with the live values.
func TestRuntimeChangeDuringAcceptedUnloadCheckReloadsWithLiveValues(t *testing.T) {
	q := qid("orders", 0)
	d := checkOutWithIdlePartition(t, q, false)
	putLease(d, 4321)
	d.run()
	if d.unloads[q] != 1 || d.node.partitions[q] != nil {
		t.Fatalf("not unloaded: %d", d.unloads[q])
	}
	if len(d.node.rt.held) != 0 {
		t.Fatalf("the answer is held after the partition left")
	}
	d.open(idlePub, q)
	if pe := d.node.partitions[q]; pe == nil || pe.runtime != d.node.liveStamp() || d.hosts[q].p.Config().LeaseMs != 4321 {
		t.Fatalf("reloaded with the old values: %+v, lease %d", pe, d.hosts[q].p.Config().LeaseMs)
	}
}

// Deleting a queue with a parked partition forgets the parked entry once
// the removal is durable, and says so in Ready.Quarantine: the damaged log
// goes with the queue's data, so the entry could never be repaired (404),
// would keep /readyz at 503 under refuse, and would refuse a fresh queue
// of the same name.
func TestDeleteQuarantinedQueueClearsItsEntry(t *testing.T) {
	cfg := testNodeConfig()
	cfg.RecoveryOnMismatch = MismatchRefuse
	h := newNodeHarness(t, cfg)
	h.declare("jobs", 1)
	h.declare("other", 1)
	_, sid, _, _ := h.hello(nil)
	h.openDamaged(sid, "jobs", 0, damageChecksum)
	h.openDamaged(sid, "other", 0, damageChecksum)
	// The removal record's durability is stepped alone, to see its report.
	h.autoPersist = false
	e := h.admin(&DeleteQueue{Topic: "jobs"})
	if len(e.persist) != 1 {
		t.Fatalf("want the removal record, got %d records", len(e.persist))
	}
	h.durable = e.persist[0].Index
	e, report := h.stepQ(&Persisted{NowMs: h.now, UpToIndex: h.durable})
	h.autoPersist = true
	if r := oneAnswer[*QueueDeleteResult](t, e); r.Outcome != DeleteDone {
		t.Fatalf("delete: %+v", r)
	}
	if report == nil || len(report.Entries) != 1 || report.Entries[0].Queue != qid("other", 0) || !report.Refused {
		t.Fatalf("the report after the delete is %+v, want only other/0", report)
	}
	if h.n.quar.entries[qid("jobs", 0)] != nil {
		t.Fatalf("the deleted queue's partition is still parked")
	}
	h.step(&RemoveDone{NowMs: h.now, Topic: "jobs"})
	// A fresh queue of the name loads and serves.
	e = h.deliver(SessionAddr(sid), &Open{Token: 21, Topic: "jobs"})
	if len(e.load) != 1 {
		t.Fatalf("the fresh queue was not loaded: %+v", e.out)
	}
	e = h.step(&LoadDone{NowMs: h.now, Queue: e.load[0].Queue})
	if opened, _ := envelopesOf[*Opened](e); len(opened) != 1 || opened[0].Err != nil {
		t.Fatalf("the fresh queue's open: %+v", e.out)
	}
}

// Deleting a queue whose partition was evicted with timer work forgets
// its deadline and its place in the ring of recent evictions: the wakes
// stay bounded by the catalogue, and a fresh queue of the same name is not
// loaded at the old queue's deadline.
func TestDeleteEvictedQueueForgetsItsWake(t *testing.T) {
	d := newIdleDriver(t, idleOn())
	const dueInMs = 3_600_000 // past the whole test but its last advance
	var deadlineMs int64
	for i := range 20 {
		q := qid(fmt.Sprintf("t%d", i), 0)
		d.open(idlePub, q)
		if i == 0 {
			deadlineMs = d.now + dueInMs
		}
		d.request(idlePub, q, &core.Publish{Confirm: true, NotBeforeMs: d.now + dueInMs, Body: &core.Body{Payload: []byte("later")}})
		d.forget(idlePub, q)
		d.advance(3000)
		if d.unloads[q] != 1 {
			t.Fatalf("%v not evicted", q)
		}
		d.queue = append(d.queue, Envelope{From: AdminAddr(3), To: NodeAddr(), Msg: &DeleteQueue{Topic: q.Topic}})
		d.run()
		d.stepNode(&RemoveDone{NowMs: d.now, Topic: q.Topic})
	}
	if parts, wakes, recent := d.node.IdleFootprint(); parts != 0 || wakes != 0 || recent != 0 {
		t.Fatalf("after deleting every queue: partitions %d, wakes %d, recent %d", parts, wakes, recent)
	}
	// A fresh t0, declared (not loaded): nothing loads it at t0's old
	// deadline.
	q := qid("t0", 0)
	d.queue = append(d.queue, Envelope{From: AdminAddr(3), To: NodeAddr(), Msg: &DeclareQueue{Token: 1, Topic: q.Topic, PartitionCount: 1}})
	d.run()
	if d.node.state.queues[queueKey{Topic: q.Topic}] == nil {
		t.Fatal("t0 was not declared again")
	}
	if deadlineMs <= d.now {
		t.Fatal("t0's old deadline passed already")
	}
	d.advance(deadlineMs - d.now + 2000)
	if d.loads[q] != 1 {
		t.Fatalf("the fresh t0 was loaded at the old queue's deadline (loads %d)", d.loads[q])
	}
}

// operatorCall sends msg to the Node as an operator and returns what the
// operators received.
func operatorCall(d *idleDriver, msg Message) []Message {
	d.queue = append(d.queue, Envelope{From: AdminAddr(5), To: NodeAddr(), Msg: msg})
	d.run()
	return d.take(0)
}

func adminTestBody() *core.Body {
	return &core.Body{Payload: []byte("t"), Headers: []core.Header{{Key: "fibril.test", Value: "admin"}}}
}

// An operator's test publish and purge go through the Node, which relays
// them to the Host: the operator holds no open of the partition (an open
// granted to an admin address was never forgotten, pinned the partition
// loaded forever and sent ReleaseIdle to a session 0 that does not exist),
// so the partition is evicted once idle.
func TestOperatorPurgeAndPublishDoNotPinPartition(t *testing.T) {
	q := qid("orders", 0)
	cleanup := idleOn()
	cleanup.PublisherIdleTimeoutMs = 500
	d := newIdleDriver(t, cleanup)
	d.setCleanup(cleanup)
	d.open(idlePub, q)
	d.publish(idlePub, q, "m0")
	d.forget(idlePub, q)
	got := operatorCall(d, &AdminPublish{Topic: q.Topic, Body: adminTestBody()})
	if len(got) != 1 {
		t.Fatalf("operator publish answered %+v", got)
	}
	if p, ok := got[0].(*AdminPublished); !ok || p.Err != nil || p.Queue != q || p.Offset != 1 {
		t.Fatalf("operator publish answered %+v", got[0])
	}
	got = operatorCall(d, &PurgeQueue{Topic: q.Topic})
	if len(got) != 1 {
		t.Fatalf("purge answered %+v", got)
	}
	if p, ok := got[0].(*Purged); !ok || p.Err != nil || p.Count != 2 {
		t.Fatalf("purge answered %+v", got[0])
	}
	if pe := d.node.partitions[q]; pe == nil || len(pe.publishers) != 0 {
		t.Fatalf("the operator holds the partition: %+v", pe)
	}
	d.advance(60_000)
	if d.unloads[q] != 1 {
		t.Fatalf("the operator's use pinned the partition (unloads %d, last cleanup %q)", d.unloads[q], d.node.partitions[q].lastCleanup)
	}
	for _, m := range d.take(0) {
		if _, ok := m.(*ReleaseIdle); ok {
			t.Fatal("ReleaseIdle sent to an operator")
		}
	}
}

// An operator's request that reaches the Node while an unload check is
// out waits and cancels the unload, and one that comes while the unload
// is on its way waits for the reload: it never reaches a Host that agreed
// to be dropped (the idle driver refuses to unload a Host that did not).
func TestOperatorRequestDuringUnloadWaitsForTheHost(t *testing.T) {
	q := qid("orders", 0)
	d := checkOutWithIdlePartition(t, q, false)
	got := operatorCall(d, &AdminPublish{Topic: q.Topic, Body: adminTestBody()})
	if len(got) != 1 {
		t.Fatalf("operator publish answered %+v", got)
	}
	if p, ok := got[0].(*AdminPublished); !ok || p.Err != nil || d.unloads[q] != 0 {
		t.Fatalf("operator publish answered %+v (unloads %d)", got[0], d.unloads[q])
	}
	d.holdUnloads = true
	d.advance(3000)
	if len(d.held) != 1 || d.row(q).State != "unloading" {
		t.Fatalf("no unload on its way (%v)", d.held)
	}
	if got := operatorCall(d, &PurgeQueue{Topic: q.Topic}); len(got) != 0 {
		t.Fatalf("a purge was answered by a partition on its way out: %+v", got)
	}
	d.holdUnloads = false
	d.finishUnloads()
	got = d.take(0)
	if len(got) != 1 {
		t.Fatalf("purge answered %+v", got)
	}
	if p, ok := got[0].(*Purged); !ok || p.Err != nil || p.Count != 2 || d.unloads[q] != 1 || d.loads[q] != 2 {
		t.Fatalf("purge answered %+v (unloads %d, loads %d)", got[0], d.unloads[q], d.loads[q])
	}
}

// A purge never creates a queue; an operator's publish does, as a
// session's would; a partition out of range is refused by the Node.
func TestOperatorPurgeAndPublishOfUnknownQueues(t *testing.T) {
	d := newIdleDriver(t, idleOn())
	got := operatorCall(d, &PurgeQueue{Topic: "nope"})
	if r, ok := got[0].(*OperatorRefused); len(got) != 1 || !ok || r.Err != core.ErrQueueUnknown {
		t.Fatalf("purge of an unknown queue answered %+v", got)
	}
	if d.node.state.queues[queueKey{Topic: "nope"}] != nil {
		t.Fatal("a purge created a queue")
	}
	got = operatorCall(d, &AdminPublish{Topic: "fresh", Partition: 1, Body: adminTestBody()})
	if r, ok := got[0].(*OperatorRefused); len(got) != 1 || !ok || r.Err != core.ErrPartitionOutOfRange {
		t.Fatalf("publish out of range answered %+v", got)
	}
	got = operatorCall(d, &AdminPublish{Topic: "fresh", Body: adminTestBody()})
	if p, ok := got[0].(*AdminPublished); len(got) != 1 || !ok || p.Err != nil || p.Queue != qid("fresh", 0) {
		t.Fatalf("publish to a new queue answered %+v", got)
	}
}
