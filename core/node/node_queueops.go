package node

import (
	"slices"

	"github.com/fibril-go/fibril/core"
)

// The Node's side of operator queue operations: listing the catalogue, an
// operator's test publish (relayed; a purge is relayed by
// node_messages.go), and deleting a queue. Invariants:
//   - a delete is decided here, in three steps: ask every loaded partition
//     how many messages it has inflight (InflightQuery); refuse (in use) if
//     any has one; otherwise append the removal record and, once it is
//     durable, stop the partitions (PartitionDeleted), forget them and ask
//     the driver to delete the data (Ready.Remove), then answer;
//   - nothing of a deleted name loads or is created again until the driver
//     reported its data deleted (the tombstone, record_queueops.go): an
//     Open, a dead-letter copy or a declare of it gets a retryable refusal
//     meanwhile, so a recreated queue never finds the old queue's data;
//   - at most deletionsMax deletes are in progress at once, one per queue;
//     a delete of a queue being created, loaded, declared or already being
//     deleted is refused as busy (retry), never queued;
//   - messages published between the inflight check and the removal
//     record's durability are deleted with the queue: the operator asked
//     for the queue to go, and a publish racing that is a publish to a
//     queue being deleted.

// deletionsMax bounds the deletes in progress (each holds a small entry
// until its partitions have answered).
const deletionsMax = 16

// deletion is one DeleteQueue between its InflightQuery and its record.
type deletion struct {
	from     Address
	token    uint64
	waiting  int // InflightCount answers still to come
	inflight int
}

// queueOpsState is the Node's volatile state for these operations.
type queueOpsState struct {
	deletions   map[queueKey]*deletion
	deleteToken uint64
}

// onListQueues answers with the catalogue and what of it is loaded.
func (n *Node) onListQueues(from Address) {
	assertHold(from.Kind == AddrAdmin, "operators list queues")
	out := &QueueList{OwnerID: n.state.ownerID}
	for _, key := range sortedQueueKeys(n.state.queues) {
		e := n.state.queues[key]
		s := declareSettingsOf(e.settings) // copies: the answer owns them
		info := QueueInfo{Topic: key.Topic, Group: key.Group, Partitions: e.partitions,
			DLQ: s.DLQ, MaxRetries: s.MaxRetries, DefaultTTLMs: s.DefaultTTLMs, Loaded: make([]bool, e.partitions)}
		for p := range e.partitions {
			pe := n.partitions[core.QueueID{Topic: key.Topic, Group: key.Group, Partition: p}]
			info.Loaded[p] = pe != nil && pe.loaded
		}
		out.Queues = append(out.Queues, info)
	}
	for _, topic := range sortedStreamTopics(n.state.streams) {
		e := n.state.streams[topic]
		info := StreamInfo{Topic: topic, Settings: e.settings, Loaded: make([]bool, e.settings.PartitionCount)}
		for p := range e.settings.PartitionCount {
			pe := n.partitions[core.QueueID{Topic: topic, Partition: p}]
			info.Loaded[p] = pe != nil && pe.loaded
		}
		out.Streams = append(out.Streams, info)
	}
	assertHold(len(out.Queues) == len(n.state.queues), "every queue is listed")
	n.send(from, out)
}

// onAdminPublish relays an operator's test publish to its partition,
// loading it and creating the queue implicitly as a session's Open would.
// It is relayed as the messages family's requests are (node_messages.go),
// not granted as an Open: an operator's use holds the partition only while
// the request is on its way and in the Host (whose reply owed keeps it
// loaded), never after, and it travels behind anything the Node sent the
// Host before, ahead of any later UnloadCheck.
func (n *Node) onAdminPublish(from Address, msg *AdminPublish) {
	assertHold(from.Kind == AddrAdmin, "operators publish through the Node")
	assertHold(msg.Body != nil, "an operator's publish carries a body")
	key := queueKey{Topic: msg.Topic, Group: core.NormalizeGroup(msg.Group)}
	setReplyTo(msg, from)
	o := opener{partition: msg.Partition, admin: msg}
	switch {
	case validQueueKey(key) != nil:
		n.failOpener(key, o, core.ErrInvalidName)
	case n.isStream(key):
		n.failOpener(key, o, core.ErrTopicIsStream)
	default:
		n.openQueue(key, o)
	}
}

// removedPending says whether key's old data may still be on disk: an
// Open, a forward or a declare of it must wait (a retryable refusal).
func (n *Node) removedPending(key queueKey) bool { return n.state.tombstones[key] }

// onDeleteQueue starts a delete: every loaded partition is asked for its
// inflight count; with none loaded the removal is recorded at once.
func (n *Node) onDeleteQueue(from Address, msg *DeleteQueue) {
	assertHold(from.Kind == AddrAdmin, "operators delete queues")
	key := queueKey{Topic: msg.Topic, Group: core.NormalizeGroup(msg.Group)}
	if validQueueKey(key) != nil {
		n.send(from, &QueueDeleteResult{Outcome: DeleteInvalid, Reason: "the topic or group is not a valid name"})
		return
	}
	entry := n.state.queues[key]
	if entry == nil {
		n.send(from, &QueueDeleteResult{Outcome: DeleteNotFound})
		return
	}
	if reason := n.deleteBlocked(key, entry); reason != "" {
		n.send(from, &QueueDeleteResult{Outcome: DeleteBusy, Reason: reason})
		return
	}
	if n.qops.deletions == nil {
		n.qops.deletions = map[queueKey]*deletion{}
	}
	n.qops.deleteToken++
	d := &deletion{from: from, token: n.qops.deleteToken}
	n.qops.deletions[key] = d
	for p := range entry.partitions {
		id := core.QueueID{Topic: key.Topic, Group: key.Group, Partition: p}
		if pe := n.partitions[id]; pe != nil && pe.loaded {
			n.send(PartitionAddr(id), &InflightQuery{Token: d.token})
			d.waiting++
		}
	}
	assertHold(len(n.qops.deletions) <= deletionsMax, "deletes in progress are bounded")
	if d.waiting == 0 {
		n.finishDeleteCheck(key, d)
	}
}

// deleteBlocked says why key cannot be deleted now ("" when it can).
func (n *Node) deleteBlocked(key queueKey, entry *catalogEntry) string {
	switch {
	case n.qops.deletions[key] != nil:
		return "a delete of this queue is already in progress"
	case len(n.qops.deletions) >= deletionsMax:
		return "too many deletes in progress"
	case n.creating[key] != nil || n.queueRecordAt[key] != 0:
		return "the queue's catalogue record is still being written (a create or declare)"
	case n.storageBehind():
		return "storage is behind: too many catalogue records await fsync"
	}
	for _, h := range n.heldDeclares {
		if h.key == key {
			return "a declare of this queue is waiting for its partitions"
		}
	}
	for p := range entry.partitions {
		pe := n.partitions[core.QueueID{Topic: key.Topic, Group: key.Group, Partition: p}]
		switch {
		case pe == nil:
		case !pe.loaded:
			return "a partition of the queue is loading"
		case len(pe.held) > 0 || pe.settingsOutstanding(pe.settingsSentSeq):
			return "a partition of the queue is applying new settings"
		}
	}
	return ""
}

// onInflightCount takes one partition's answer to a delete's query.
func (n *Node) onInflightCount(from Address, msg *InflightCount) {
	assertHold(from.Kind == AddrPartition, "partitions count their inflight messages")
	n.inflightAnswered(from.Queue, msg.Token, msg.Inflight)
}

// inflightAnswered counts one answer (a bounced query counts as 0: the
// partition is gone, and with it its leases).
func (n *Node) inflightAnswered(id core.QueueID, token uint64, inflight int) {
	key := queueKey{Topic: id.Topic, Group: id.Group}
	d := n.qops.deletions[key]
	if d == nil || d.token != token {
		return // a delete that ended already
	}
	assertHold(d.waiting > 0 && inflight >= 0, "each queried partition answers once")
	d.waiting--
	d.inflight += inflight
	if d.waiting == 0 {
		n.finishDeleteCheck(key, d)
	}
}

// finishDeleteCheck decides once every partition answered: in use, busy
// (something changed meanwhile), or the removal record.
func (n *Node) finishDeleteCheck(key queueKey, d *deletion) {
	delete(n.qops.deletions, key)
	entry := n.state.queues[key]
	if entry == nil {
		n.send(d.from, &QueueDeleteResult{Outcome: DeleteNotFound})
		return
	}
	if d.inflight > 0 {
		n.send(d.from, &QueueDeleteResult{Outcome: DeleteInUse, Inflight: d.inflight})
		return
	}
	// Checked again: a declare or a load may have started while the
	// partitions answered.
	if reason := n.deleteBlocked(key, entry); reason != "" {
		n.send(d.from, &QueueDeleteResult{Outcome: DeleteBusy, Reason: reason})
		return
	}
	k := key
	n.appendRecord(&record{kind: recordQueueRemoved, queueKey: &k})
	assertHold(n.state.queues[key] == nil && n.removedPending(key), "a removed queue leaves a tombstone")
	n.gate(gatedAction{kind: gatedRemoved, to: d.from, key: key, declared: Declared{Partitions: entry.partitions}})
}

// queueRemoved: the removal record is durable. The loaded partitions stop
// (their subscribers are told), the Node forgets them, and the driver
// deletes the data once those envelopes are delivered.
func (n *Node) queueRemoved(g *gatedAction) {
	for p := range g.declared.Partitions {
		id := core.QueueID{Topic: g.key.Topic, Group: g.key.Group, Partition: p}
		pe := n.partitions[id]
		if pe == nil {
			continue
		}
		// deleteBlocked refused loads and held openers; the tombstone kept
		// new ones out since, so a loaded partition is all there can be.
		assertHold(pe.loaded && len(pe.waiters) == 0 && len(pe.held) == 0, "a deleted partition has nobody waiting")
		n.send(PartitionAddr(id), &PartitionDeleted{})
		delete(n.partitions, id)
	}
	n.unparkRemoved(g.key, g.declared.Partitions)   // node_quarantine.go
	n.forgetEvictions(g.key, g.declared.Partitions) // node_idle.go
	n.rd.Remove = append(n.rd.Remove, RemoveRequest{Topic: g.key.Topic, Group: g.key.Group})
	n.send(g.to, &QueueDeleteResult{Outcome: DeleteDone})
}

// onRemoveDone: the driver deleted (or failed to delete) a removed queue's
// data. On success the tombstone goes (a record; the name is usable from
// now on); on failure it stays and a restart asks again.
func (n *Node) onRemoveDone(in *RemoveDone) {
	key := queueKey{Topic: in.Topic, Group: core.NormalizeGroup(in.Group)}
	if in.Err != nil || !n.removedPending(key) {
		return
	}
	n.appendRecord(&record{kind: recordQueueDataGone, queueKey: &key})
	assertHold(!n.removedPending(key), "the data-gone record clears the tombstone")
}

// requestPendingRemovals asks, at boot, for the deletion of every removed
// queue whose data-gone record was not durable before the crash.
func (n *Node) requestPendingRemovals() {
	keys := make([]queueKey, 0, len(n.state.tombstones))
	for k := range n.state.tombstones {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareQueueKeys)
	for _, k := range keys {
		n.rd.Remove = append(n.rd.Remove, RemoveRequest{Topic: k.Topic, Group: k.Group})
	}
}
