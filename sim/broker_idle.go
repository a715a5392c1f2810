package sim

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// Idle queue eviction, the simulator's part (as io/broker/host_idle.go):
// the Node decides, the Host agreed; the driver drops the Host and closes
// the partition's storage, then answers UnloadDone. Invariants:
//   - the Host leaves hosts (and hostOrder) before anything else happens,
//     so later envelopes to it bounce and its pending wake-up is a no-op;
//   - storage is closed only between rounds: a round in flight finishes
//     first (the Host said yes only once everything was durable, so the
//     round has nothing of it to lose);
//   - a reload opens the log afresh and is checked against the shadow
//     like any recovery (DESIGN.md item 10).

// unload carries out one Ready.Unload after a seeded delay.
func (b *Broker) unload(q core.QueueID) {
	b.later(b.rng.RangeInt64(0, b.w.faults.LoadDelayMaxMs), func() { b.finishUnload(q) })
}

func (b *Broker) finishUnload(q core.QueueID) {
	h := b.hosts[q]
	assert(h != nil && h.m.Released(), "the Node unloads only a Host that agreed")
	st := b.store.parts[q]
	if b.store.round.inFlight || (st != nil && !st.planner.Idle()) {
		b.later(1, func() { b.finishUnload(q) }) // between rounds
		return
	}
	h.shadow.evictedEmpty = h.m.Partition().Live() == 0
	delete(b.hosts, q)
	for i, x := range b.hostOrder {
		if x == h {
			b.hostOrder = append(b.hostOrder[:i], b.hostOrder[i+1:]...)
			break
		}
	}
	// Resident bytes are summed over hostOrder: h's leave with it.
	if st != nil && st.host == h {
		b.store.dropPart(st)
	}
	b.stats.Unloads++
	b.stepNode(&node.UnloadDone{NowMs: b.nowMs(), Queue: q}, "unload_done")
}
