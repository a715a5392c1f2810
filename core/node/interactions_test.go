package node

import (
	"testing"
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
