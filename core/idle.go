package core

// IdleView is what idle queue eviction (core/node, SPEC 9) asks of a
// partition before it may be unloaded: all of it is volatile work a reload
// from the log would lose or redo.
type IdleView struct {
	Subscriptions int
	// Inflight counts leased messages, held by a subscription or recovered
	// with nobody holding them: their lease deadlines are live work.
	Inflight int
	// Gated counts items waiting for durability: confirms, settles and
	// dead-letter releases (pending settles).
	Gated int
	// Unpersisted: entries were handed to storage and are not durable yet.
	Unpersisted bool
	// NextWakeMs is the partition's next timer deadline (delays, TTLs,
	// leases; 0: none).
	NextWakeMs int64
}

// IdleView reports the partition's volatile work in O(1).
func (p *Partition) IdleView() IdleView {
	return IdleView{Subscriptions: len(p.subs), Inflight: p.inflightCount, Gated: p.gated.n,
		Unpersisted: p.durableIndex < p.lastIndex, NextWakeMs: p.nextWakeMs()}
}
