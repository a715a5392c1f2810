package node

import (
	"slices"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// Idle queue eviction (node_idle.go, host_idle.go): each SPEC 9 condition
// keeps a partition loaded, and an evicted one reloads on use with what it
// held.

func idleOn() IdleCleanupConfig {
	return IdleCleanupConfig{Enabled: true, EvictAfterMs: 1000, SweepIntervalMs: 100}
}

const idlePub SessionID = 7

func TestIdleEvictsOnlyOnceEveryConditionHolds(t *testing.T) {
	q := qid("orders", 0)
	d := newIdleDriver(t, IdleCleanupConfig{EvictAfterMs: 1000, SweepIntervalMs: 100}) // off
	if !d.open(idlePub, q) {
		t.Fatal("no Opened")
	}
	d.publish(idlePub, q, "m0")
	d.publish(idlePub, q, "m1")
	d.forget(idlePub, q)
	d.advance(10_000)
	if d.unloads[q] != 0 || d.row(q).State != "loaded" {
		t.Fatalf("cleanup off, yet %v was unloaded (%d)", q, d.unloads[q])
	}

	// On, with a publisher holding it open: skipped for that reason.
	d.setCleanup(idleOn())
	d.open(idlePub, q)
	d.advance(5000)
	d.publish(idlePub, q, "m2") // the last use: the window counts from it
	if r := d.row(q); d.unloads[q] != 0 || r.Publishers != 1 || !strings.Contains(r.LastCleanup, "publishers") {
		t.Fatalf("a held open did not keep %v loaded: %+v", q, r)
	}
	// Let go: the window counts from the last use, not from the Forget.
	d.forget(idlePub, q)
	d.advance(100)
	if r := d.row(q); d.unloads[q] != 0 {
		t.Fatalf("evicted at once, before its window (%+v)", r)
	}
	d.advance(2000)
	r := d.row(q)
	if d.unloads[q] != 1 || r.State != "unloaded" || r.LastCleanup != "evicted" {
		t.Fatalf("an idle partition was not evicted: unloads %d, %+v", d.unloads[q], r)
	}
	// An unloaded partition is not swept again, and the Node keeps nothing
	// per partition for it but the eviction ring.
	d.advance(10_000)
	parts, wakes, recent := d.node.IdleFootprint()
	if d.unloads[q] != 1 || parts != 0 || wakes != 0 || recent != 1 {
		t.Fatalf("after more sweeps: unloads %d, footprint %d/%d/%d", d.unloads[q], parts, wakes, recent)
	}
	// Use reloads it with its messages, in order.
	d.open(idlePub, q)
	if got := d.drain(idlePub, q, 1); !slices.Equal(got, []string{"m0", "m1", "m2"}) {
		t.Fatalf("after the reload delivered %q", got)
	}
	if c := d.node.IdleCounters(); c.Evicted != 1 || c.Reloaded != 1 || d.loads[q] != 2 {
		t.Fatalf("counters %+v, loads %d", c, d.loads[q])
	}
}

func TestIdleHostRefusesWhileWorkIsLive(t *testing.T) {
	q := qid("orders", 0)
	d := newIdleDriver(t, idleOn())
	d.open(idlePub, q)
	d.publish(idlePub, q, "m0")
	// A subscription with a lease: the Host says no, and says why.
	d.request(idlePub, q, &core.Subscribe{SubID: 1, Prefetch: 1})
	d.forget(idlePub, q) // the Node's own check passes; the Host's must not
	d.advance(3000)
	if r := d.row(q); d.unloads[q] != 0 || r.LastCleanup != "skipped: subscribers" || r.Subscribers != 1 {
		t.Fatalf("a subscribed partition: unloads %d, %+v", d.unloads[q], r)
	}
}

func TestIdleOpenDuringCheckCancelsTheUnload(t *testing.T) {
	q := qid("orders", 0)
	d := newIdleDriver(t, idleOn())
	d.open(idlePub, q)
	d.publish(idlePub, q, "m0")
	d.forget(idlePub, q)
	// Move time so the next Node step sweeps, then put an Open in the FIFO
	// right behind the check: it reaches the Node while the check is out.
	d.now += 2000
	d.stepNode(&Tick{NowMs: d.now})
	if len(d.queue) != 1 {
		t.Fatalf("the sweep sent %d envelopes, want one UnloadCheck", len(d.queue))
	}
	d.tokens++
	d.queue = append(d.queue, Envelope{From: SessionAddr(idlePub), To: NodeAddr(), Msg: &Open{Token: d.tokens, Topic: q.Topic, Partition: q.Partition}})
	d.run()
	opened := 0
	for _, m := range d.take(idlePub) {
		if o, ok := m.(*Opened); ok && o.Err == nil {
			opened++
		}
	}
	// The Host had said yes before the Open arrived: the Open waited for
	// the answer, which the Node then took back; it is answered, not lost.
	if opened != 1 || d.unloads[q] != 0 || d.loads[q] != 1 || d.hosts[q] == nil || d.hosts[q].Released() {
		t.Fatalf("opened %d, unloads %d, loads %d", opened, d.unloads[q], d.loads[q])
	}
	if got := d.drain(idlePub, q, 1); !slices.Equal(got, []string{"m0"}) {
		t.Fatalf("after a racing open delivered %q", got)
	}
}

func TestIdleTimerWorkReloadsAtItsDeadline(t *testing.T) {
	q := qid("orders", 0)
	d := newIdleDriver(t, idleOn())
	d.open(idlePub, q)
	due := d.now + 60_000
	d.request(idlePub, q, &core.Publish{Confirm: true, NotBeforeMs: due, Body: &core.Body{Payload: []byte("later")}})
	d.forget(idlePub, q)
	d.advance(3000)
	if d.unloads[q] != 1 {
		t.Fatalf("a partition with only a delayed message was not evicted (%+v)", d.row(q))
	}
	if _, wakes, _ := d.node.IdleFootprint(); wakes != 1 {
		t.Fatalf("the Node keeps %d deadlines, want the delayed message's", wakes)
	}
	// Nothing loads it before its deadline; at it, the Node reloads it.
	d.advance(due - d.now - 100)
	if d.loads[q] != 1 {
		t.Fatalf("reloaded %d times before the deadline", d.loads[q]-1)
	}
	d.advance(200)
	if d.loads[q] != 2 || d.hosts[q] == nil {
		t.Fatalf("not reloaded at its deadline (loads %d)", d.loads[q])
	}
	if d.node.IdleCounters().Reloaded != 1 {
		t.Fatalf("counters %+v", d.node.IdleCounters())
	}
}

func TestSessionReleasesAnIdleOpen(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", Payload: []byte("x")})
	h.takeOpen(sessQOrders, 1, nil)
	h.takeOut()
	h.deliver(&ReleaseIdle{Queue: sessQOrders, IdleMs: 5000})
	if len(h.forgets) != 0 {
		t.Fatal("a session let go of an open it used just now")
	}
	h.now += 5000
	h.deliver(&ReleaseIdle{Queue: sessQOrders, IdleMs: 5000})
	if len(h.forgets) != 1 || h.forgets[0].To != PartitionAddr(sessQOrders) {
		t.Fatalf("an idle open was not forgotten: %v", h.forgets)
	}
}

func TestIdleOpenDuringUnloadWaitsAndReloads(t *testing.T) {
	q := qid("orders", 0)
	d := newIdleDriver(t, idleOn())
	d.open(idlePub, q)
	d.publish(idlePub, q, "m0")
	d.forget(idlePub, q)
	d.holdUnloads = true
	d.advance(2000)
	if len(d.held) != 1 || d.row(q).State != "unloading" {
		t.Fatalf("no unload on its way (%v, %+v)", d.held, d.row(q))
	}
	// An Open while the unload is on its way: not answered from the Host
	// being dropped, but after the reload.
	if d.open(idlePub, q) {
		t.Fatal("an Open was answered by a partition on its way out")
	}
	d.holdUnloads = false
	d.finishUnloads()
	opened := 0
	for _, m := range d.take(idlePub) {
		if o, ok := m.(*Opened); ok && o.Err == nil {
			opened++
		}
	}
	if opened != 1 || d.unloads[q] != 1 || d.loads[q] != 2 {
		t.Fatalf("opened %d, unloads %d, loads %d", opened, d.unloads[q], d.loads[q])
	}
	if got := d.drain(idlePub, q, 1); !slices.Equal(got, []string{"m0"}) {
		t.Fatalf("after the reload delivered %q", got)
	}
}
