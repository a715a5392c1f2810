package core

import "github.com/fibril-go/fibril/mutant"

// The exclusive gate (docs/cohorts.md, "The gate"), not to be confused with
// the durability gate of gate.go: it only narrows who may receive. Invariants:
//   - an exclusive subscription is delivered to only while it is the owner
//     and every inflight message of the partition is leased to it, so after
//     a hand-over from A to B, B waits until all A holds is settled,
//     requeued or expired: no two consumers ever work the partition at once,
//     which is what keeps per-key order across a hand-over;
//   - a lease held by nobody (recovered after a restart) or by a
//     non-exclusive subscription keeps the gate shut just the same;
//   - owner generations only grow: a late SetOwner never undoes a newer one;
//   - nothing is logged: the owner is volatile (the Node names it again after
//     a restart), and the rule reads the inflight set, which the log rebuilds;
//   - the check is O(1) per candidate: two counts compared, no scan.

// exclusiveOwner is the partition's current exclusive owner.
type exclusiveOwner struct {
	subID      uint64 // 0: nobody may receive exclusive deliveries
	generation uint64 // of the last SetOwner applied
}

// onSetOwner makes in.SubID the owner unless a newer generation was applied.
// The SubID need not be subscribed (the SetOwner may overtake its Subscribe,
// or the subscription may be gone): the gate then admits nobody until it is.
// No reply (the Node does not wait for a hand-over), no entry.
func (p *Partition) onSetOwner(in *SetOwner) {
	before := p.owner.generation
	if in.Generation < before {
		return // a late envelope: a newer assignment is already in force
	}
	// An equal generation applies: only lower ones are late.
	p.owner = exclusiveOwner{subID: in.SubID, generation: in.Generation}
	assertTrue(p.owner.generation >= before, "owner generations only grow")
	assertTrue(p.owner.subID == in.SubID, "the owner is whoever the applied SetOwner names")
}

// exclusiveGateAdmits says whether the gate lets sub receive now (credit and
// pauses are hasCredit's). It is asked afresh for every candidate, so a
// delivery to another holder earlier in the same round shuts it at once.
func (p *Partition) exclusiveGateAdmits(sub *subscription) bool {
	if !sub.exclusive {
		return true // non-exclusive subscriptions are dispatched as before
	}
	assertTrue(sub.id != 0, "subscription ids are never 0, so owner 0 admits nobody")
	if sub.id != p.owner.subID {
		return false
	}
	held := len(sub.inflight)
	// The owner's tags are inflight messages of the partition, so equal
	// counts mean nobody else holds anything.
	assertTrue(held <= p.inflightCount, "a subscription holds no more than the partition has inflight")
	if mutant.On(mutant.GateOpenEarly) {
		return true // broken on purpose: the owner need not wait for anyone
	}
	if mutant.On(mutant.GateIgnoresRecoveredLeases) {
		return held == p.liveSubscriptionsInflight() // broken on purpose: recovered leases are nobody's
	}
	// An auto-ack owner holds nothing (its deliveries settle when sent): it
	// is admitted exactly when nothing is inflight.
	return held == p.inflightCount
}

// liveSubscriptionsInflight counts the deliveries live subscriptions hold
// (mutant GateIgnoresRecoveredLeases only: a scan the real gate avoids).
func (p *Partition) liveSubscriptionsInflight() int {
	n := 0
	for _, id := range p.subOrder {
		n += len(p.subs[id].inflight)
	}
	return n
}

// Owner returns the partition's exclusive owner (0: nobody) and the
// generation of the SetOwner that named it.
func (p *Partition) Owner() (subID, generation uint64) {
	return p.owner.subID, p.owner.generation
}
