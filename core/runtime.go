package core

// Runtime settings of a loaded partition (SPEC 14 "Runtime"): the lease and
// the expiry batch, which the operator may change while the broker runs.
// Invariants:
//   - they are configuration, not log-derived state: no entry records them.
//     A lease entry stores its absolute deadline, so a lease handed out
//     under the old value keeps its deadline after a change, a restart or a
//     replay; only leases handed out after the change use the new value;
//   - the values are checked by the sender (the Node validates every
//     runtime setting before it is recorded); the partition asserts they
//     are in range rather than trusting a zero.

// SetRuntime changes the partition's lease (Config.LeaseMs) and expiry batch
// (Config.ExpiryBatchMax) from this step on. It is never answered and
// appends nothing.
type SetRuntime struct {
	NowMs          int64
	LeaseMs        int64
	ExpiryBatchMax int
}

func (in *SetRuntime) nowMs() int64 { return in.NowMs }

// onSetRuntime applies a runtime change to the partition's config copy.
func (p *Partition) onSetRuntime(in *SetRuntime) {
	// Zero or negative values would lease nothing for any time or expire
	// nothing per pass: the Node validated them, so one here is a bug.
	assertTrue(in.LeaseMs >= 1, "a runtime lease is at least 1 ms")
	assertTrue(in.ExpiryBatchMax >= 1, "a runtime expiry batch is at least 1")
	p.cfg.LeaseMs, p.cfg.ExpiryBatchMax = in.LeaseMs, in.ExpiryBatchMax
}

// GlobalDLQ is the global dead-letter target the partition holds (nil:
// none); the Host compares it with the Node's when it loads.
func (p *Partition) GlobalDLQ() *DLQTarget {
	if p.globalDLQ == nil {
		return nil
	}
	t := *p.globalDLQ
	return &t
}
