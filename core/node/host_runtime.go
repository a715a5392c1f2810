package node

import "github.com/fibril-go/fibril/core"

// A Host's side of runtime settings: it steps its partition to the values
// the Node sent, and acknowledges them. Invariants:
//   - after a PartitionRuntime is handled the partition's lease, expiry
//     batch and global target are the message's (the target read as "none"
//     on the target queue itself, which cannot dead-letter into itself);
//   - an acknowledgement (SettingsApplied) leaves only once they are in
//     force, so the Node's answer to the operator follows it.

// onPartitionRuntime applies the Node's runtime values and acknowledges.
func (h *Host) onPartitionRuntime(msg *PartitionRuntime) {
	assertHold(msg.Seq != 0, "runtime values sent to a Host are numbered")
	cfg := h.p.Config()
	if cfg.LeaseMs != msg.LeaseMs || cfg.ExpiryBatchMax != msg.ExpiryBatchMax {
		h.stepCore(&core.SetRuntime{NowMs: h.nowMs, LeaseMs: msg.LeaseMs, ExpiryBatchMax: msg.ExpiryBatchMax})
	}
	h.applyGlobalDLQ(msg.GlobalDLQ)
	assertHold(h.p.Config().LeaseMs == msg.LeaseMs, "the lease sent is in force")
	h.send(NodeAddr(), &SettingsApplied{Seq: msg.Seq})
}

// applyGlobalDLQ steps the partition to target when it holds another (an
// entry in its log, so a partition recovered alone keeps the last one).
func (h *Host) applyGlobalDLQ(target *core.DLQTarget) {
	want := effectiveGlobalDLQ(h.queue, target)
	if sameTarget(h.p.GlobalDLQ(), want) {
		return
	}
	h.stepCore(&core.SetGlobalDLQ{NowMs: h.nowMs, Target: want})
	assertHold(sameTarget(h.p.GlobalDLQ(), want), "the partition took the global target")
}

// effectiveGlobalDLQ is the target partition q holds for the global one:
// none on the target queue itself (the core refuses a loop).
func effectiveGlobalDLQ(q core.QueueID, target *core.DLQTarget) *core.DLQTarget {
	if target == nil || (target.Topic == q.Topic && core.NormalizeGroup(target.Group) == q.Group) {
		return nil
	}
	return copyTarget(target)
}
