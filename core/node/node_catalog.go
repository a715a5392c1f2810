package node

import (
	"github.com/fibril-go/fibril/core"
)

// The catalogue, partition loading and dead-letter routing. Invariants:
//   - a queue's partition count never changes once recorded;
//   - no LoadRequest for a queue before its catalogue record is durable: a
//     queue whose data exists is never missing from the catalogue after a
//     crash (creating holds what waits for that record);
//   - a partition is loading (waiters, no Host yet) or loaded (no waiters);
//     every Open and forward waiting on it is answered exactly once: Opened
//     or StoreDeadLetter when it loads, a failure when it cannot;
//   - a loaded partition's settings follow the catalogue: a declare that
//     changes them sends DeclareSettings once durable, and one made during
//     a load is sent at LoadDone; what a client could act on (Declared,
//     Opened) waits until the partition says they apply (node_settings.go);
//   - a declare is answered only once its queue's last record is durable,
//     even when it changes nothing (queueRecordAt);
//   - nothing here blocks: the old catalogue held its lock across write and
//     fsync and stalled every publish broker-wide during a declare.

// onOpen answers a session's Open: names are checked here, the rest is
// shared with dead-letter forwarding (openQueue).
func (n *Node) onOpen(from Address, msg *Open) {
	assertHold(from.Kind == AddrSession, "sessions open partitions")
	key := queueKey{Topic: msg.Topic, Group: core.NormalizeGroup(msg.Group)}
	// Names are checked again here, not only in the session: the Node is where a name
	// would become a catalogue record, and a bad one there cannot be removed.
	o := opener{partition: msg.Partition, session: from, token: msg.Token}
	if validQueueKey(key) != nil {
		n.failOpener(key, o, core.ErrInvalidName)
		return
	}
	switch {
	case n.isStream(key):
		n.openStream(key, o)
	case msg.Stream && n.state.queueTopics[key.Topic] > 0:
		n.failOpener(key, o, core.ErrTopicIsQueue)
	case msg.Stream:
		// PROTOCOL 5.11 step 3: a stream is never created by subscribing.
		n.failOpener(key, o, core.ErrStreamNotDeclared)
	default:
		n.openQueue(key, o)
	}
}

// openQueue creates the queue if it was never declared (one partition,
// implicit queues of SPEC 1), then opens the partition o wants once the
// queue's record is durable.
func (n *Node) openQueue(key queueKey, o opener) {
	if n.removedPending(key) {
		// Deleted, its data not yet gone (node_queueops.go): retry later.
		n.failOpener(key, o, core.ErrPartitionLoadFailed)
		return
	}
	// The catalogue entry exists from this step on (a second Open sees it
	// and waits with the first); its record makes it durable.
	if n.state.queues[key] == nil {
		// A topic is a queue or a stream: no implicit queue (nor a
		// dead-letter target) on a stream's topic.
		if n.isStream(key) {
			n.failOpener(key, o, core.ErrTopicIsStream)
			return
		}
		// QueuesMax bounds the catalogue, which every snapshot writes whole: an
		// implicit queue per typo'd topic would otherwise grow it without limit.
		if len(n.state.queues)+len(n.state.streams) >= n.cfg.QueuesMax {
			n.failOpener(key, o, core.ErrTooManyQueues)
			return
		}
		if n.overPartitionBudget(n.defaultPartitionCount()) {
			n.failOpener(key, o, core.ErrPartitionBudget)
			return
		}
		if n.storageBehind() {
			// Backpressure rather than another unpersisted record: storage that fell
			// behind would otherwise let the log's tail grow without bound in memory.
			n.failOpener(key, o, core.ErrCatalogBehind)
			return
		}
		// An implicit queue gets one partition: a later DECLARE_QUEUE cannot raise
		// it (counts never change), so clients that need more must declare first.
		n.createQueue(&catalogEntry{key: key, partitions: n.defaultPartitionCount()})
	}
	if cq := n.creating[key]; cq != nil {
		// Each waiter list is bounded (STYLE 3): a flood of Opens for one slow
		// queue gets 500s the client retries, not unbounded memory here.
		if len(cq.waiters) >= opensWaitingMax {
			n.failOpener(key, o, core.ErrPartitionLoadFailed)
			return
		}
		cq.waiters = append(cq.waiters, o)
		return
	}
	if !n.bootDurable() {
		// No load before the boot record is durable (every TagFloor comes
		// from a durable boot count): wait for it.
		if len(n.bootWaiters) >= opensWaitingMax {
			n.failOpener(key, o, core.ErrPartitionLoadFailed)
			return
		}
		n.bootWaiters = append(n.bootWaiters, bootWaiter{key: key, o: o})
		return
	}
	n.openPartition(key, o)
}

// bootWaiter is an Open or forward of a recovered queue that came before
// the boot record was durable.
type bootWaiter struct {
	key queueKey
	o   opener
}

// createQueue records a new queue; what needs it waits for the record.
func (n *Node) createQueue(e *catalogEntry) {
	assertHold(n.state.queues[e.key] == nil, "a queue is created once")
	index := n.appendQueueRecord(e)
	n.creating[e.key] = &creatingQueue{index: index}
	// Released by Persisted in index order, so waiters never see a queue a
	// crash could take back.
	n.gate(gatedAction{kind: gatedCreated, key: e.key})
}

// appendQueueRecord records a queue's whole entry and notes the index: a
// gate on it follows (createQueue, onDeclareQueue).
func (n *Node) appendQueueRecord(e *catalogEntry) uint64 {
	index := n.appendRecord(&record{kind: recordQueue, queue: e})
	assertHold(n.queueRecordAt[e.key] < index, "a queue's records are appended in index order")
	n.queueRecordAt[e.key] = index
	return index
}

// queueCreated: the queue's record is durable; its waiters go on.
func (n *Node) queueCreated(key queueKey) {
	cq := n.creating[key]
	assertHold(cq != nil && cq.index <= n.durableIndex, "a created queue waited for its record")
	delete(n.creating, key)
	for _, o := range cq.waiters {
		if key.Group == "" && n.isStream(key) {
			n.openStreamPartition(key, o)
			continue
		}
		n.openPartition(key, o)
	}
}

// openPartition answers o from the partition's load state, loading it if
// nobody has yet.
func (n *Node) openPartition(key queueKey, o opener) {
	entry := n.state.queues[key]
	assertHold(entry != nil && n.creating[key] == nil, "a partition is opened once its queue's record is durable")
	// A copy goes to partition offset mod count of its target: copies of
	// one source spread over the target's partitions, deterministically.
	if o.forward != nil {
		o.partition = uint32(o.forward.offset % uint64(entry.partitions))
	}
	if o.partition >= entry.partitions {
		n.failOpener(key, o, core.ErrPartitionOutOfRange)
		return
	}
	id := core.QueueID{Topic: key.Topic, Group: key.Group, Partition: o.partition}
	if err := n.quarantineRefusal(id); err != nil {
		n.failOpener(key, o, err)
		return
	}
	pe := n.partitions[id]
	switch {
	case pe != nil && pe.loaded && pe.settingsOutstanding(pe.settingsSentSeq):
		// Its settings are on their way: answer once they are in force.
		if len(pe.held) >= opensWaitingMax {
			n.failOpener(key, o, core.ErrPartitionLoadFailed)
			return
		}
		pe.held = append(pe.held, o)
	case pe != nil && pe.loaded:
		n.openerReady(id, entry.partitions, o)
	case pe != nil:
		if len(pe.waiters) >= opensWaitingMax {
			n.failOpener(key, o, core.ErrPartitionLoadFailed)
			return
		}
		pe.waiters = append(pe.waiters, o)
	default:
		assertHold(n.bootDurable(), "no LoadRequest before the boot record is durable")
		// One load per partition: later Opens wait on this one.
		pe = &partitionEntry{waiters: []opener{o}, sent: entry.settings, runtime: n.liveStamp()}
		n.partitions[id] = pe
		reload := n.noteLoadRequest(id) // node_idle.go
		n.rd.Load = append(n.rd.Load, LoadRequest{Queue: id, Config: n.partitionConfig(id), Settings: *declareSettingsOf(entry.settings), Reload: reload,
			GlobalDLQ: copyTarget(n.rt.globalDLQ)})
	}
}

// partitionConfig is the template with the partition's identity, the
// standalone epoch and this boot's tag floor.
func (n *Node) partitionConfig(id core.QueueID) core.Config {
	cfg := n.cfg.Partition
	// TagFloor from the durable boot counter: tags minted by this boot start
	// above every tag an earlier boot handed out, so a stale ACK from before a
	// restart cannot settle a new delivery (PROTOCOL 7.3).
	cfg.Queue, cfg.Epoch, cfg.TagFloor = id, 1, n.state.boot<<bootTagShift
	return cfg
}

// openerReady answers o now that its partition is loaded.
func (n *Node) openerReady(id core.QueueID, partitions uint32, o opener) {
	assertHold(n.partitions[id] != nil && n.partitions[id].loaded, "an opener is answered from a loaded partition")
	assertHold(id.Partition < partitions, "an opened partition is in range")
	if o.admin != nil {
		n.relayOperator(id, partitions, o.admin) // node_messages.go
		return
	}
	if o.forward == nil {
		// A session's Open gets Opened; a forward's "open" is the copy itself,
		// stored in the target and counted out of forwardsWaiting.
		kind := n.kindOf(id)
		if kind == KindQueue {
			// Only a session forgets what it was granted (Forget, relayed as
			// PublisherGone): an operator's requests are relayed instead.
			assertHold(o.session.Kind == AddrSession, "opens are granted to sessions only")
			n.grantOpen(id, o.session.Session) // node_idle.go: a publisher
		}
		n.send(o.session, &Opened{Token: o.token, Queue: id, Partitions: partitions, Kind: kind})
		return
	}
	n.send(PartitionAddr(id), &StoreDeadLetter{Source: o.forward.source, Offset: o.forward.offset, Body: o.forward.body})
	n.finishForward()
}

// failOpener answers o with err.
func (n *Node) failOpener(key queueKey, o opener, err *core.Error) {
	if o.admin != nil {
		n.refuseOperator(o.admin, err) // node_messages.go
		return
	}
	if o.forward == nil {
		id := core.QueueID{Topic: key.Topic, Group: key.Group, Partition: o.partition}
		n.send(o.session, &Opened{Token: o.token, Queue: id, Err: err})
		return
	}
	n.send(PartitionAddr(o.forward.source), &DeadLetterFailed{Offset: o.forward.offset, Err: err})
	n.finishForward()
}

// finishForward counts a forward out once it was sent on or refused.
func (n *Node) finishForward() {
	n.forwardsWaiting--
	assertHold(n.forwardsWaiting >= 0, "each forward is finished once")
}

// onLoadDone answers every Open and forward waiting on a load: with the
// partition, or with a 500 after which the next Open tries again.
func (n *Node) onLoadDone(in *LoadDone) {
	pe := n.partitions[in.Queue]
	assertHold(pe != nil && !pe.loaded, "LoadDone answers a LoadRequest")
	key := queueKey{Topic: in.Queue.Topic, Group: in.Queue.Group}
	if n.quarantineLoadDone(in, pe) {
		return // a damaged log, or a repair's load (node_quarantine.go)
	}
	waiters := pe.waiters
	pe.waiters = nil
	if in.Err != nil {
		// Forget the failure: the next Open tries again (a full disk or too
		// many open files can pass).
		delete(n.partitions, in.Queue)
		if pe.timerLoad {
			n.addIdleWake(in.Queue, n.nowMs+idleReloadRetryMs) // node_idle.go
		}
		for _, o := range waiters {
			n.failOpener(key, o, core.ErrPartitionLoadFailed)
		}
		return
	}
	pe.loaded, pe.timerLoad = true, false
	if pe.stream {
		entry := n.state.streams[in.Queue.Topic]
		assertHold(entry != nil, "a loaded stream partition's stream is in the catalogue")
		for _, o := range waiters {
			n.openerReady(in.Queue, entry.settings.PartitionCount, o)
		}
		return
	}
	// A declare recorded while the partition loaded is not in the
	// settings its LoadRequest carried: send it on now.
	entry := n.state.queues[key]
	assertHold(entry != nil, "a loaded partition's queue is in the catalogue")
	// Its waiters are answered once the partition has them in force (and
	// the runtime values that became live while it loaded, node_runtime.go).
	runtimeSent := n.runtimeAtLoad(in.Queue, pe)
	if runtimeSent || !catalogSettingsEqual(pe.sent, entry.settings) {
		if !catalogSettingsEqual(pe.sent, entry.settings) {
			n.sendSettings(in.Queue, pe, entry.settings)
		}
		pe.held = waiters
		pe.sent = catalogSettings{}
		return
	}
	pe.sent = catalogSettings{}
	for _, o := range waiters {
		n.openerReady(in.Queue, entry.partitions, o)
	}
}

// onDeclareQueue records a declare and answers it once durable; a declare
// that changes nothing is answered at once (when its queue is durable).
func (n *Node) onDeclareQueue(from Address, d *DeclareQueue) {
	key := queueKey{Topic: d.Topic, Group: core.NormalizeGroup(d.Group)}
	// Checked before any work so a refused declare leaves no trace: the
	// client's retry (PROTOCOL 6.2) sees the same state it would have.
	if len(n.gated)+len(n.heldDeclares) >= declaresWaitingMax {
		n.send(from, &Declared{Token: d.Token, Err: core.ErrCatalogBehind})
		return
	}
	if err := n.quarantineBlocksDeclare(key); err != nil {
		n.send(from, &Declared{Token: d.Token, Err: err})
		return
	}
	next, err := n.resolveDeclare(key, d)
	if err != nil {
		n.send(from, &Declared{Token: d.Token, Err: err})
		return
	}
	entry := n.state.queues[key]
	answer := Declared{Token: d.Token, Partitions: next.partitions}
	if entry != nil && catalogSettingsEqual(entry.settings, next.settings) {
		// Nothing changes against the entry in memory, which may hold a
		// declare (or the creation) not yet durable: answer once the
		// queue's last record is, never before (a crash would take back
		// what the answer confirms).
		if n.queueRecordAt[key] > n.durableIndex {
			n.gate(gatedAction{kind: gatedDeclared, to: from, declared: answer, key: key})
			return
		}
		// Durable: answer once what was sent to the partitions applies.
		n.answerDeclared(from, answer, key)
		return
	}
	// The record holds the whole merged entry; loaded partitions get the
	// settings once it is durable (gatedDeclared), with the answer.
	if n.storageBehind() {
		n.send(from, &Declared{Token: d.Token, Err: core.ErrCatalogBehind})
		return
	}
	if entry == nil {
		n.createQueue(next)
	} else {
		n.appendQueueRecord(next)
	}
	n.gate(gatedAction{kind: gatedDeclared, to: from, declared: answer, key: key, changed: true})
}

// resolveDeclare validates a declare and merges its present fields over the
// queue's entry ("absent means the existing setting", PROTOCOL 5.12); an
// existing queue keeps its partition count.
func (n *Node) resolveDeclare(key queueKey, d *DeclareQueue) (*catalogEntry, *core.Error) {
	if validQueueKey(key) != nil {
		return nil, core.ErrInvalidName
	}
	if n.isStream(key) {
		return nil, core.ErrTopicIsStream
	}
	if n.removedPending(key) {
		return nil, core.ErrCatalogBehind // deleted, its data not yet gone: retry
	}
	// PROTOCOL 5.12: the count is raised to at least 1; standalone
	// partitioning is fixed, so an existing queue's count wins below.
	count := max(d.PartitionCount, 1)
	if d.PartitionCount == 0 {
		count = n.defaultPartitionCount() // partitioning.default_partition_count
	}
	if count > n.cfg.PartitionsPerQueueMax {
		return nil, core.ErrTooManyPartitions
	}
	entry := n.state.queues[key]
	if entry == nil && len(n.state.queues)+len(n.state.streams) >= n.cfg.QueuesMax {
		return nil, core.ErrTooManyQueues
	}
	if entry == nil && n.overPartitionBudget(count) {
		return nil, core.ErrPartitionBudget
	}
	next := &catalogEntry{key: key, partitions: count}
	if entry != nil {
		*next = *entry
	}
	if d.DLQ != nil {
		policy := core.DLQPolicy{Kind: d.DLQ.Kind}
		switch d.DLQ.Kind {
		case core.DLQDiscard, core.DLQGlobal:
		case core.DLQCustom:
			target := queueKey{Topic: d.DLQ.Target.Topic, Group: core.NormalizeGroup(d.DLQ.Target.Group)}
			if validQueueKey(target) != nil {
				return nil, core.ErrInvalidName
			}
			// A queue dead-lettering into itself would retry a poisoned message
			// forever, each failure feeding the queue it fails on.
			if target == key {
				return nil, core.ErrDeadLetterLoop
			}
			policy.Target = core.DLQTarget(target)
		default:
			return nil, core.ErrInvalidSettings
		}
		next.settings.DLQ = &policy
	}
	if d.MaxRetries != nil {
		v := *d.MaxRetries
		next.settings.MaxRetries = &v
	}
	if d.DefaultTTLMs != nil {
		// A negative TTL would expire every message at publish; decodeRecord
		// refuses it too, so accepting it here would make the log unreadable.
		if *d.DefaultTTLMs < 0 {
			return nil, core.ErrInvalidSettings
		}
		v := *d.DefaultTTLMs
		next.settings.DefaultTTLMs = &v
	}
	return next, nil
}

// updateLoadedPartitions brings every loaded partition of a queue up to its
// (durable) catalogue settings.
func (n *Node) updateLoadedPartitions(key queueKey) {
	entry := n.state.queues[key]
	assertHold(entry != nil, "a declared queue is in the catalogue")
	// Partitions not loaded pick the settings up from their LoadRequest, so
	// only loaded ones need a DeclareSettings.
	for p := uint32(0); p < entry.partitions; p++ {
		id := core.QueueID{Topic: key.Topic, Group: key.Group, Partition: p}
		if pe := n.partitions[id]; pe != nil && pe.loaded {
			n.sendSettings(id, pe, entry.settings)
		}
	}
}

// onDeadLetterOut routes a dead-letter copy to its target partition
// (Offset mod the target's partition count), creating and loading it as an
// Open would.
func (n *Node) onDeadLetterOut(from Address, msg *DeadLetterOut) {
	assertHold(from.Kind == AddrPartition, "partitions forward dead letters")
	key := queueKey{Topic: msg.Target.Topic, Group: core.NormalizeGroup(msg.Target.Group)}
	// Refusing is safe: the source keeps the copy and retries after its
	// backoff, so a burst of dead letters waits in the sources, bounded by
	// their own queues, rather than here.
	switch {
	case n.forwardsWaiting >= deadLetterForwardsMax:
		n.send(from, &DeadLetterFailed{Offset: msg.Offset, Err: core.ErrDeadLetterBacklog})
		return
	case validQueueKey(key) != nil:
		n.send(from, &DeadLetterFailed{Offset: msg.Offset, Err: core.ErrInvalidName})
		return
	}
	// Counted in here and out once in openerReady or failOpener, so the bound
	// holds across creation, boot waits and loads alike.
	n.forwardsWaiting++
	n.openQueue(key, opener{forward: &forward{source: from.Queue, offset: msg.Offset, body: msg.Body}})
}

// declareSettingsOf copies catalogue settings into a DeclareSettings (the
// receiver gets pointers of its own).
func declareSettingsOf(s catalogSettings) *DeclareSettings {
	out := &DeclareSettings{}
	if s.DLQ != nil {
		v := *s.DLQ
		out.DLQ = &v
	}
	if s.MaxRetries != nil {
		v := *s.MaxRetries
		out.MaxRetries = &v
	}
	if s.DefaultTTLMs != nil {
		v := *s.DefaultTTLMs
		out.DefaultTTLMs = &v
	}
	return out
}

// catalogSettingsEqual compares declared settings field by field (by
// value: nil means never declared, unlike any declared value).
func catalogSettingsEqual(a, b catalogSettings) bool {
	return equalPtr(a.DLQ, b.DLQ) && equalPtr(a.MaxRetries, b.MaxRetries) && equalPtr(a.DefaultTTLMs, b.DefaultTTLMs)
}

// equalPtr says whether two optional values are both absent or equal.
func equalPtr[T comparable](a, b *T) bool {
	// nil and a declared zero differ: "never declared" keeps the default.
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// overPartitionBudget says whether adding count partitions to the catalogue
// would pass PartitionsMax. Only new queues and streams are checked: one
// recovered from an older, larger budget keeps serving.
func (n *Node) overPartitionBudget(count uint32) bool {
	assertHold(n.state.partitionsTotal >= 0, "the partition total never goes negative")
	return n.state.partitionsTotal+int(count) > n.cfg.PartitionsMax
}
