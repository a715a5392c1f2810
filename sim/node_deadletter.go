package sim

import (
	"github.com/fibril-go/fibril/core"
)

// Dead-letter forwarding. The core hands out a copy to store in the target
// queue; the node publishes it there with a confirm and, once the target
// confirms, feeds DeadLetterDone to the source. Invariants:
//   - a source message is settled as dead-lettered only after its copy is
//     durable in the target (at least once: a crash in between re-sends the
//     copy after recovery, so the target may hold two);
//   - a refused copy (the target is full or behind) is retried, never dropped.

// deadLetterRetryMs is how long a refused copy waits before the next try.
const deadLetterRetryMs = 20

func (n *Node) forwardDeadLetters(ps *nodePart, rd *core.Ready) {
	for i := range rd.DeadLetters {
		dl := rd.DeadLetters[i]
		if dl.Body = n.loadStored(ps, dl.Offset, dl.Body); dl.Body == nil {
			return
		}
		target := n.w.partitionFor(dl.Target.Topic, dl.Target.Group)
		if target < 0 {
			n.w.abort("dead-letter target " + dl.Target.Topic + " is not hosted")
			return
		}
		ref := &nodeRef{kind: refDeadLetter, source: ps, sourceOffset: dl.Offset, body: dl.Body}
		n.publishDeadLetter(n.parts[target], ref)
	}
}

// publishDeadLetter publishes the copy in its own event, after the current
// step finished: the driver never steps a partition from inside another's
// Ready handling.
func (n *Node) publishDeadLetter(target *nodePart, ref *nodeRef) {
	incarnation := n.incarnation
	n.w.after(0, func() {
		if !n.up || n.incarnation != incarnation || n.maybeCrash() {
			return // the source re-sends it after recovery
		}
		body := *ref.body // the core stamps ReceivedMs: give each try its own body
		id := n.newRef(ref)
		// A system publish: only the broker's own copies may carry stroma.dlq.*.
		n.step(target, &core.Publish{NowMs: n.nowMs(), Ref: id, Confirm: true, Body: &body, System: true}, "dead_letter")
	})
	ref.target = target
}

// deadLetterStored handles the target's answer to a copy.
func (n *Node) deadLetterStored(ref *nodeRef, r *core.Reply) {
	if r.Kind == core.ReplyError && r.Err == core.ErrReservedHeader {
		n.w.abort("core bug: the dead-letter target refuses the core's own dead-letter copy (" + r.Err.Error() + ")")
		return
	}
	if r.Kind == core.ReplyError {
		incarnation := n.incarnation
		n.w.after(deadLetterRetryMs, func() {
			if n.up && n.incarnation == incarnation {
				n.publishDeadLetter(ref.target, ref)
			}
		})
		return
	}
	source, offset, incarnation := ref.source, ref.sourceOffset, n.incarnation
	n.w.after(0, func() {
		if !n.up || n.incarnation != incarnation || n.maybeCrash() {
			return
		}
		n.step(source, &core.DeadLetterDone{NowMs: n.nowMs(), Offset: offset}, "dead_letter_done")
	})
}
