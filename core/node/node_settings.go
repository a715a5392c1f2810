package node

import (
	"github.com/fibril-go/fibril/core"
)

// Declared settings on their way to loaded partitions. The driver keeps
// envelopes FIFO per (sender, receiver) pair only: a Declared the Node
// sends a session and the DeclareSettings it sends a Host in the same step
// are not ordered, so a publish the client sends after DECLARE_QUEUE_OK
// could reach the partition first and run under the old settings. Each
// DeclareSettings therefore carries a Seq the Host acknowledges
// (SettingsApplied), and what a client could act on waits for it.
// Invariants:
//   - Seqs come from one counter and only grow; per partition
//     settingsAppliedSeq <= settingsSentSeq <= n.settingsSeq, and an
//     acknowledgement moves settingsAppliedSeq forward only;
//   - a Declared is sent only when no loaded partition of its queue has
//     settings outstanding that were sent before it was due: a held one
//     waits in heldDeclares (arrival order) for such a partition;
//   - an Opened (or dead-letter copy) of a loaded partition is answered
//     only when none of its settings are outstanding: otherwise it waits
//     in the partition's held list, which is empty once they are applied;
//   - declares waiting (gated or held) are bounded by declaresWaitingMax.

// declaresWaitingMax bounds declares waiting for durability or for their
// settings to apply; past it a declare is refused (ErrCatalogBehind).
const declaresWaitingMax = 65_536

// heldDeclare is a durable declare's answer waiting for its settings to be
// in force in every loaded partition of its queue.
type heldDeclare struct {
	to     Address
	answer Declared
	key    queueKey
	// seq: the settings sent up to when the answer was due.
	seq uint64
}

// sendSettings sends a loaded partition its queue's settings, numbered.
func (n *Node) sendSettings(id core.QueueID, pe *partitionEntry, s catalogSettings) {
	assertHold(pe.loaded, "settings go to loaded partitions")
	n.settingsSeq++
	pe.settingsSentSeq = n.settingsSeq
	msg := declareSettingsOf(s)
	msg.Seq = n.settingsSeq
	n.send(PartitionAddr(id), msg)
}

// settingsOutstanding says whether the partition has not yet applied
// settings sent at or before seq. Acknowledgements come in order (one
// sender, one receiver), so what it applied covers every earlier Seq.
func (pe *partitionEntry) settingsOutstanding(seq uint64) bool {
	return pe.settingsAppliedSeq < pe.settingsSentSeq && pe.settingsAppliedSeq < seq
}

// queueSettingsOutstanding says whether a loaded partition of key has not
// yet applied settings sent at or before seq.
func (n *Node) queueSettingsOutstanding(key queueKey, seq uint64) bool {
	entry := n.state.queues[key]
	if entry == nil {
		// Deleted by an operator after the declare was recorded (the
		// removal record comes later in the log, so the declare did
		// happen): no partition is left to apply anything.
		assertHold(n.removedPending(key), "a declared queue is in the catalogue unless it was deleted since")
		return false
	}
	for p := uint32(0); p < entry.partitions; p++ {
		id := core.QueueID{Topic: key.Topic, Group: key.Group, Partition: p}
		if pe := n.partitions[id]; pe != nil && pe.loaded && pe.settingsOutstanding(seq) {
			return true
		}
	}
	return false
}

// answerDeclared sends a durable declare's answer, or holds it until the
// settings sent so far are in force in the queue's loaded partitions.
func (n *Node) answerDeclared(to Address, answer Declared, key queueKey) {
	if !n.queueSettingsOutstanding(key, n.settingsSeq) {
		n.send(to, &answer)
		return
	}
	n.heldDeclares = append(n.heldDeclares, heldDeclare{to: to, answer: answer, key: key, seq: n.settingsSeq})
}

// onSettingsApplied: a partition has the settings up to msg.Seq in force;
// what waited for them goes on.
func (n *Node) onSettingsApplied(from Address, msg *SettingsApplied) {
	assertHold(from.Kind == AddrPartition, "partitions apply settings")
	pe := n.partitions[from.Queue]
	if pe == nil || !pe.loaded || msg.Seq <= pe.settingsAppliedSeq {
		return // a late answer
	}
	assertHold(msg.Seq <= pe.settingsSentSeq, "a partition applies only settings sent to it")
	pe.settingsAppliedSeq = msg.Seq
	n.settingsMoved(from.Queue, pe)
}

// settingsMoved releases the Opens and declares a partition's progress no
// longer holds back.
func (n *Node) settingsMoved(id core.QueueID, pe *partitionEntry) {
	if len(pe.held) > 0 && !pe.settingsOutstanding(pe.settingsSentSeq) {
		held := pe.held
		pe.held = nil
		entry := n.state.queues[queueKey{Topic: id.Topic, Group: id.Group}]
		for _, o := range held {
			n.openerReady(id, entry.partitions, o)
		}
	}
	kept := n.heldDeclares[:0]
	for _, hd := range n.heldDeclares {
		if n.queueSettingsOutstanding(hd.key, hd.seq) {
			kept = append(kept, hd)
			continue
		}
		n.send(hd.to, &hd.answer)
	}
	clear(n.heldDeclares[len(kept):])
	n.heldDeclares = kept
	n.releaseRuntimeAnswers() // node_runtime.go
}

// onSettingsBounced: the partition's Host is gone and applies nothing; it
// reads the catalogue when it loads again, so nothing waits for it.
func (n *Node) onSettingsBounced(id core.QueueID, msg *DeclareSettings) {
	pe := n.partitions[id]
	if pe == nil || !pe.loaded || msg.Seq <= pe.settingsAppliedSeq {
		return
	}
	pe.settingsAppliedSeq = msg.Seq
	n.settingsMoved(id, pe)
}
