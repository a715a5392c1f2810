package node

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// The SPEC 9 acceptance: 10,000 declared queues, a few busy ones, a day of
// simulated time with the default window (10 min) and sweep (1 min). What
// the broker holds per queue, sampled every hour, must not grow with the
// idle queues: loaded Hosts, the Node's partition entries, its kept
// deadlines and eviction ring, and the heap.
func TestIdleTenThousandQueuesStayFlatOverADay(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulated day over 10,000 queues")
	}
	const (
		idleQueues = 10_000
		busyQueues = 4
		hourMs     = 3_600_000
	)
	cfg := DefaultIdleCleanup()
	cfg.Enabled = true
	d := newIdleDriver(t, cfg)
	d.sparseChecks = true
	const pub, con SessionID = 21, 22
	busy := make([]core.QueueID, busyQueues)
	for i := range busy {
		busy[i] = qid(fmt.Sprintf("busy-%d", i), 0)
		d.open(pub, busy[i])
		d.open(con, busy[i])
		d.request(con, busy[i], &core.Subscribe{SubID: uint64(i + 1), Prefetch: 64, AutoAck: true})
	}
	// Every idle queue is created by a publish, then its publisher lets go.
	for i := range idleQueues {
		q := qid(fmt.Sprintf("idle-%05d", i), 0)
		d.open(pub, q)
		d.publish(pub, q, "once")
		d.forget(pub, q)
	}
	if len(d.hosts) != idleQueues+busyQueues {
		t.Fatalf("%d hosts loaded after creating every queue", len(d.hosts))
	}
	var heapAt [25]uint64
	var loadedAt, nodeAt [25]int
	sample := func(hour int) {
		if err := d.node.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		parts, wakes, recent := d.node.IdleFootprint()
		heapAt[hour], loadedAt[hour], nodeAt[hour] = ms.HeapAlloc, len(d.hosts), parts+wakes+recent
		t.Logf("hour %2d: hosts loaded %5d, node per-partition state %5d (entries %d, deadlines %d, ring %d), heap %6.1f MiB",
			hour, len(d.hosts), parts+wakes+recent, parts, wakes, recent, float64(ms.HeapAlloc)/(1<<20))
	}
	sample(0)
	touched := 0
	for hour := 1; hour <= 24; hour++ {
		for minute := 0; minute < 60; minute++ {
			// The busy queues get a message a minute each; an idle queue or
			// two is used now and then and must be served after its reload.
			for _, q := range busy {
				d.publish(pub, q, "tick")
				// The test's disk is in the heap too: the busy queues never
				// unload (their consumer holds them), so their entries are
				// not kept, and the heap measures the broker, not the disk.
				d.logs[q] = nil
			}
			if minute%20 == 0 {
				q := qid(fmt.Sprintf("idle-%05d", (hour*60+minute)*7%idleQueues), 0)
				d.open(pub, q)
				d.publish(pub, q, "again")
				d.forget(pub, q)
				touched++
			}
			d.advance(60_000)
			d.take(pub) // what the test's sessions received is dropped
			d.take(con)
		}
		sample(hour)
	}
	// Flat: from the second hour on nothing grows, and what is held is the
	// busy queues plus those used within the last window.
	bound := busyQueues + 1 // one idle queue used in the last 10 minutes at most
	for hour := 2; hour <= 24; hour++ {
		if loadedAt[hour] > bound || nodeAt[hour] > bound+idleRecentMax {
			t.Fatalf("hour %d: %d hosts, %d node entries (bound %d hosts)", hour, loadedAt[hour], nodeAt[hour], bound)
		}
	}
	if heapAt[24] > heapAt[2]+heapAt[2]/10+(1<<20) {
		t.Fatalf("heap grew over the day: %d at hour 2, %d at hour 24", heapAt[2], heapAt[24])
	}
	if c := d.node.IdleCounters(); c.Evicted < idleQueues || c.Reloaded < uint64(touched)/2 {
		t.Fatalf("counters %+v after %d uses of idle queues", c, touched)
	}
}
