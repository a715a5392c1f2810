package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
)

// Operator queue operations at the Node: list, the delete protocol and its
// crash behaviour (tombstones), and the refusals.

var adminFrom = AdminAddr(77)

func (h *nodeHarness) admin(msg Message) effects {
	h.t.Helper()
	return h.step(&Deliver{NowMs: h.now, Envelope: Envelope{From: adminFrom, To: NodeAddr(), Msg: msg}})
}

func oneAnswer[T Message](t *testing.T, e effects) T {
	t.Helper()
	got, to := envelopesOf[T](e)
	if len(got) != 1 || to[0] != adminFrom {
		t.Fatalf("want one %T to the operator, got %+v", *new(T), e.out)
	}
	return got[0]
}

func (h *nodeHarness) declare(topic string, partitions uint32) {
	h.t.Helper()
	e := h.admin(&DeclareQueue{Token: 1, Topic: topic, PartitionCount: partitions})
	if d := oneAnswer[*Declared](h.t.(*testing.T), e); d.Err != nil {
		h.t.Fatalf("declare %s: %v", topic, d.Err)
	}
}

func TestNodeListsEveryQueueLoadedOrNot(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	h.declare("b", 2)
	h.declare("a", 1)
	_, sid, _, _ := h.hello(nil)
	h.openQueue(sid, "b", 1)
	l := oneAnswer[*QueueList](t, h.admin(&ListQueues{}))
	if len(l.Queues) != 2 || l.Queues[0].Topic != "a" || l.Queues[1].Topic != "b" {
		t.Fatalf("queues in name order: %+v", l.Queues)
	}
	if b := l.Queues[1]; b.Partitions != 2 || b.Loaded[0] || !b.Loaded[1] {
		t.Fatalf("b: %+v", b)
	}
	if l.OwnerID != h.n.OwnerID() {
		t.Fatal("list carries the owner id")
	}
}

func TestNodeDeleteUnknownInvalidAndInUse(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	if r := oneAnswer[*QueueDeleteResult](t, h.admin(&DeleteQueue{Topic: "nope"})); r.Outcome != DeleteNotFound {
		t.Fatalf("unknown: %+v", r)
	}
	if r := oneAnswer[*QueueDeleteResult](t, h.admin(&DeleteQueue{Topic: "Bad Name"})); r.Outcome != DeleteInvalid {
		t.Fatalf("bad name: %+v", r)
	}
	h.declare("jobs", 2)
	_, sid, _, _ := h.hello(nil)
	h.openQueue(sid, "jobs", 0)
	h.openQueue(sid, "jobs", 1)
	e := h.admin(&DeleteQueue{Topic: "jobs"})
	queries, to := envelopesOf[*InflightQuery](e)
	if len(queries) != 2 || to[0] != PartitionAddr(qid("jobs", 0)) || len(e.persist) != 0 {
		t.Fatalf("want a query per loaded partition and no record yet: %+v", e)
	}
	// A second delete meanwhile is busy.
	if r := oneAnswer[*QueueDeleteResult](t, h.admin(&DeleteQueue{Topic: "jobs"})); r.Outcome != DeleteBusy {
		t.Fatalf("second delete: %+v", r)
	}
	h.step(&Deliver{NowMs: h.now, Envelope: Envelope{From: PartitionAddr(qid("jobs", 0)), To: NodeAddr(), Msg: &InflightCount{Token: queries[0].Token, Inflight: 0}}})
	e = h.step(&Deliver{NowMs: h.now, Envelope: Envelope{From: PartitionAddr(qid("jobs", 1)), To: NodeAddr(), Msg: &InflightCount{Token: queries[1].Token, Inflight: 3}}})
	if r := oneAnswer[*QueueDeleteResult](t, e); r.Outcome != DeleteInUse || r.Inflight != 3 {
		t.Fatalf("in use: %+v", r)
	}
	if h.n.state.queues[queueKey{Topic: "jobs"}] == nil || len(e.persist) != 0 {
		t.Fatal("a refused delete changed the catalogue")
	}
}

func TestNodeDeleteRecordsThenStopsThenRemoves(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	h.declare("jobs", 2)
	_, sid, _, _ := h.hello(nil)
	h.openQueue(sid, "jobs", 1)
	h.autoPersist = false
	e := h.admin(&DeleteQueue{Topic: "jobs"})
	queries, _ := envelopesOf[*InflightQuery](e)
	e = h.step(&Deliver{NowMs: h.now, Envelope: Envelope{From: PartitionAddr(qid("jobs", 1)), To: NodeAddr(), Msg: &InflightCount{Token: queries[0].Token}}})
	if len(e.persist) != 1 || len(e.remove) != 0 || len(e.out) != 0 {
		t.Fatalf("want the removal record and nothing else before it is durable: %+v", e)
	}
	// Not durable: an Open of the name is refused (retryable), nothing loads.
	o := h.deliver(SessionAddr(sid), &Open{Token: 5, Topic: "jobs"})
	if opened, _ := envelopesOf[*Opened](o); len(opened) != 1 || opened[0].Err != core.ErrPartitionLoadFailed || len(o.load) != 0 || len(o.persist) != 0 {
		t.Fatalf("open while deleting: %+v", o)
	}
	e = h.persist()
	stops, to := envelopesOf[*PartitionDeleted](e)
	if len(stops) != 1 || to[0] != PartitionAddr(qid("jobs", 1)) {
		t.Fatalf("want the loaded partition stopped: %+v", e.out)
	}
	if len(e.remove) != 1 || e.remove[0].Topic != "jobs" {
		t.Fatalf("want a Remove once durable: %+v", e.remove)
	}
	if r := oneAnswer[*QueueDeleteResult](t, e); r.Outcome != DeleteDone {
		t.Fatalf("answer: %+v", r)
	}
	// Still refused until the data is gone.
	if d := oneAnswer[*Declared](t, h.admin(&DeclareQueue{Token: 2, Topic: "jobs"})); d.Err == nil {
		t.Fatal("a declare of a name whose data is not yet deleted was accepted")
	}
	h.autoPersist = true
	h.step(&RemoveDone{NowMs: h.now, Topic: "jobs"})
	// A publish's Open now creates a fresh queue with one partition.
	if o := h.openQueue(sid, "jobs", 0); o.Err != nil || o.Partitions != 1 {
		t.Fatalf("recreated: %+v", o)
	}
}

func TestNodeDeleteCrashBeforeDurableKeepsTheQueue(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	h.declare("jobs", 1)
	h.autoPersist = false
	h.admin(&DeleteQueue{Topic: "jobs"}) // nothing loaded: recorded at once
	h.restart(3)
	if h.n.state.queues[queueKey{Topic: "jobs"}] == nil {
		t.Fatal("a removal that was not durable took the queue")
	}
	if e := h.stepRaw(&Tick{NowMs: h.now}); len(e.remove) != 0 {
		t.Fatalf("a whole queue's data is deleted: %+v", e.remove)
	}
}

func TestNodeDeleteCrashAfterDurableAsksForTheRemovalAgain(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	h.declare("jobs", 1)
	e := h.admin(&DeleteQueue{Topic: "jobs"})
	if len(e.remove) != 1 {
		t.Fatalf("want a Remove: %+v", e)
	}
	// Crash before RemoveDone: the restarted Node asks again, first thing.
	h.restart(3)
	e = h.stepRaw(&Tick{NowMs: h.now})
	if len(e.remove) != 1 || e.remove[0].Topic != "jobs" || h.n.state.queues[queueKey{Topic: "jobs"}] != nil {
		t.Fatalf("after restart: remove %+v", e.remove)
	}
	h.persist()
	h.step(&RemoveDone{NowMs: h.now, Topic: "jobs"})
	h.restart(4)
	if e := h.stepRaw(&Tick{NowMs: h.now}); len(e.remove) != 0 {
		t.Fatalf("a removal recorded done asked again: %+v", e.remove)
	}
}
