package node

import (
	"github.com/fibril-go/fibril/core"
)

// Streams in the catalogue (docs/streams.md "Through the node"). Invariants:
//   - a topic is a queue or a stream, never both: a stream declare on a
//     queue's topic, a queue declare or an implicit queue on a stream's
//     topic, a queue SUBSCRIBE or SUBSCRIBE_STREAM across kinds: 400;
//   - a stream's settings (tier, retention, partition count) never change:
//     a re-declare with the same ones is idempotent (DECLARE_PLEXUS_OK once
//     the record is durable), with others it is refused (ErrStreamSettings,
//     400: the request is invalid against what is declared; 409 is kept
//     for ownership conflicts in cluster mode, PROTOCOL 5.14);
//   - a stream exists only once declared: an Open for SUBSCRIBE_STREAM of
//     an undeclared topic gets 404 and creates nothing;
//   - as for queues, no stream partition is loaded before the stream's
//     record is durable (creating holds its Opens), and streams share the
//     QueuesMax bound and the partitions map with queues (a stream
//     partition is keyed by its topic, no group, and partition).

// streamKey is a stream's key in the maps it shares with queues.
func streamKey(topic string) queueKey { return queueKey{Topic: topic} }

// onDeclareStream records a stream and answers once its record is durable.
func (n *Node) onDeclareStream(from Address, d *DeclareStream) {
	if len(n.gated)+len(n.heldDeclares) >= declaresWaitingMax {
		n.send(from, &Declared{Token: d.Token, Err: core.ErrCatalogBehind})
		return
	}
	key := streamKey(d.Topic)
	switch {
	case core.ValidateName(d.Topic) != nil:
		n.send(from, &Declared{Token: d.Token, Err: core.ErrInvalidName})
		return
	case d.Settings.Tier > core.TierDurable || d.Settings.PartitionCount == 0:
		n.send(from, &Declared{Token: d.Token, Err: core.ErrStreamSettings})
		return
	case d.Settings.PartitionCount > n.cfg.PartitionsPerQueueMax:
		n.send(from, &Declared{Token: d.Token, Err: core.ErrTooManyPartitions})
		return
	case n.state.queueTopics[d.Topic] > 0:
		n.send(from, &Declared{Token: d.Token, Err: core.ErrTopicIsQueue})
		return
	}
	answer := Declared{Token: d.Token, Partitions: d.Settings.PartitionCount}
	if old := n.state.streams[d.Topic]; old != nil {
		if old.settings != d.Settings {
			n.send(from, &Declared{Token: d.Token, Err: core.ErrStreamSettings})
			return
		}
		// Idempotent: answered once the stream's record is durable.
		if n.queueRecordAt[key] > n.durableIndex {
			n.gate(gatedAction{kind: gatedDeclared, to: from, declared: answer, key: key, stream: true})
			return
		}
		n.send(from, &answer)
		return
	}
	if len(n.state.queues)+len(n.state.streams) >= n.cfg.QueuesMax {
		n.send(from, &Declared{Token: d.Token, Err: core.ErrTooManyQueues})
		return
	}
	if n.overPartitionBudget(d.Settings.PartitionCount) {
		n.send(from, &Declared{Token: d.Token, Err: core.ErrPartitionBudget})
		return
	}
	if n.storageBehind() {
		n.send(from, &Declared{Token: d.Token, Err: core.ErrCatalogBehind})
		return
	}
	index := n.appendRecord(&record{kind: recordStream, stream: &streamEntry{topic: d.Topic, settings: d.Settings}})
	assertHold(n.queueRecordAt[key] < index, "a stream's record is appended in index order")
	n.queueRecordAt[key] = index
	n.creating[key] = &creatingQueue{index: index}
	n.gate(gatedAction{kind: gatedCreated, key: key})
	n.gate(gatedAction{kind: gatedDeclared, to: from, declared: answer, key: key, stream: true})
}

// openStream answers an Open of a stream's topic (o.partition of it).
func (n *Node) openStream(key queueKey, o opener) {
	assertHold(o.forward == nil, "dead letters never go to a stream")
	if key.Group != "" {
		n.failOpener(key, o, core.ErrTopicIsStream)
		return
	}
	if cq := n.creating[key]; cq != nil {
		if len(cq.waiters) >= opensWaitingMax {
			n.failOpener(key, o, core.ErrPartitionLoadFailed)
			return
		}
		cq.waiters = append(cq.waiters, o)
		return
	}
	if !n.bootDurable() {
		if len(n.bootWaiters) >= opensWaitingMax {
			n.failOpener(key, o, core.ErrPartitionLoadFailed)
			return
		}
		n.bootWaiters = append(n.bootWaiters, bootWaiter{key: key, o: o})
		return
	}
	n.openStreamPartition(key, o)
}

// openStreamPartition answers o from the stream partition's load state,
// loading it if nobody has yet.
func (n *Node) openStreamPartition(key queueKey, o opener) {
	entry := n.state.streams[key.Topic]
	assertHold(entry != nil && n.creating[key] == nil, "a stream partition is opened once its record is durable")
	if o.partition >= entry.settings.PartitionCount {
		// PROTOCOL 5.11 step 3: a stream partition that does not exist is
		// 404, which is also how a client that knows no count (a standalone
		// broker's TOPOLOGY lists no streams) finds where the partitions end.
		n.failOpener(key, o, core.ErrStreamNotDeclared)
		return
	}
	id := core.QueueID{Topic: key.Topic, Partition: o.partition}
	if err := n.quarantineRefusal(id); err != nil {
		n.failOpener(key, o, err)
		return
	}
	pe := n.partitions[id]
	switch {
	case pe != nil && pe.loaded:
		n.openerReady(id, entry.settings.PartitionCount, o)
	case pe != nil:
		if len(pe.waiters) >= opensWaitingMax {
			n.failOpener(key, o, core.ErrPartitionLoadFailed)
			return
		}
		pe.waiters = append(pe.waiters, o)
	default:
		assertHold(n.bootDurable(), "no LoadRequest before the boot record is durable")
		pe = &partitionEntry{waiters: []opener{o}, stream: true}
		n.partitions[id] = pe
		cfg := n.cfg.StreamPartition
		cfg.Stream, cfg.Epoch = id, 1
		n.rd.Load = append(n.rd.Load, LoadRequest{Queue: id, Kind: KindStream, StreamConfig: cfg, Stream: entry.settings})
	}
}

// isStream says whether key names a declared stream.
func (n *Node) isStream(key queueKey) bool {
	return n.state.streams[key.Topic] != nil
}

// kindOf is the kind of a loaded partition.
func (n *Node) kindOf(id core.QueueID) PartitionKind {
	if id.Group == "" && n.state.streams[id.Topic] != nil {
		return KindStream
	}
	return KindQueue
}
