package node

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/fibril-go/fibril/core"
)

// Quarantine (SPEC 7 recovery.on_mismatch): what a partition whose log
// failed a recovery check means. The driver finds the damage (storage
// checks every record's CRC, core.Recover / stream.Load every entry
// against the state before it) and reports it in LoadDone.Damage without
// touching the files; the Node decides here. Invariants:
//   - a parked partition has no partitionEntry (nothing loads or serves
//     it) except while its repair's load runs; every Open, forward and
//     declare touching it is refused with core.QuarantinedError, which
//     names the partition, the damage and the repair;
//   - the set is volatile on purpose: a parked log is left exactly as it
//     was, so the first load after a restart finds the same damage and
//     parks it again (detection is lazy), and the set can never claim a
//     partition is damaged after its files were repaired;
//   - under MismatchIgnore a load that found damage with a cut point is
//     tried once more with LoadRequest.Truncate; damage without one (a
//     snapshot), or found again by that load, parks the partition;
//   - a repair is the same truncating load, asked by an operator; the
//     partition stays parked until it succeeds, one repair at a time;
//   - the set is bounded (quarantinedMax): past it a damaged load fails
//     as an ordinary load failure, retried at the next Open;
//   - every change is reported whole in Ready.Quarantine.

// quarantinedMax bounds the partitions parked at once. A node with more
// damaged logs than this has a disk problem; the rest fail their loads
// (500, retried) rather than grow the set.
const quarantinedMax = 4096

// quarantineState is the Node's quarantine set.
type quarantineState struct {
	entries map[core.QueueID]*quarantined
	// truncating: an ignore-policy reload with Truncate is on its way for
	// the partition (at most one per loading partition).
	truncating map[core.QueueID]bool
	total      uint64 // partitions parked by this process
}

// quarantined is one parked partition.
type quarantined struct {
	entry     QuarantineEntry
	repairing bool
	repairBy  Address // the operator waiting for the repair
}

// quarantineRefusal is the error an operation on id gets, or nil when id
// is not parked.
func (n *Node) quarantineRefusal(id core.QueueID) *core.Error {
	q := n.quar.entries[id]
	if q == nil {
		return nil
	}
	return core.QuarantinedError(id, q.entry.Reason)
}

// quarantineBlocksDeclare refuses a declare of a queue with a parked
// partition: its new settings could not reach that partition, and an
// answer would claim they apply.
// The lowest parked partition is named: map order must not reach an
// answer (the machines are deterministic).
func (n *Node) quarantineBlocksDeclare(key queueKey) *core.Error {
	found := false
	var lowest core.QueueID
	for id := range n.quar.entries {
		if id.Topic == key.Topic && id.Group == key.Group && (!found || id.Partition < lowest.Partition) {
			found, lowest = true, id
		}
	}
	if !found {
		return nil
	}
	return n.quarantineRefusal(lowest)
}

// quarantineLoadDone takes a LoadDone first: true when it decided
// everything (a damaged log parked or reloaded, a failed repair), false
// when onLoadDone goes on with an ordinary load (also a repair that
// loaded: the partition then serves as any other).
func (n *Node) quarantineLoadDone(in *LoadDone, pe *partitionEntry) bool {
	assertHold(in.Damage == nil || in.Err == nil, "a load reports damage or an error, not both")
	if q := n.quar.entries[in.Queue]; q != nil {
		assertHold(q.repairing, "a parked partition loads only for its repair")
		return n.finishRepair(in, pe, q)
	}
	wasTruncating := n.quar.truncating[in.Queue]
	delete(n.quar.truncating, in.Queue)
	if in.Damage == nil {
		return false
	}
	if n.cfg.RecoveryOnMismatch == MismatchIgnore && !wasTruncating && in.Damage.Index > 0 {
		// Cut at the last valid record and serve: the waiters wait on.
		if n.quar.truncating == nil {
			n.quar.truncating = make(map[core.QueueID]bool)
		}
		n.quar.truncating[in.Queue] = true
		n.rd.Load = append(n.rd.Load, n.truncatingLoad(in.Queue, pe.stream))
		return true
	}
	n.park(in.Queue, pe, in.Damage)
	return true
}

// park quarantines a partition whose load found damage and answers
// everything waiting on the load.
func (n *Node) park(id core.QueueID, pe *partitionEntry, d *LoadDamage) {
	assertHold(n.partitions[id] == pe && !pe.loaded, "a partition is parked from its load")
	delete(n.partitions, id)
	key := queueKey{Topic: id.Topic, Group: id.Group}
	if len(n.quar.entries) >= quarantinedMax {
		for _, o := range pe.waiters {
			n.failOpener(key, o, core.ErrPartitionLoadFailed)
		}
		return
	}
	if n.quar.entries == nil {
		n.quar.entries = make(map[core.QueueID]*quarantined)
	}
	kind := KindQueue
	if pe.stream {
		kind = KindStream
	}
	q := &quarantined{entry: QuarantineEntry{
		Queue: id, Kind: kind, Damage: d.Kind, Reason: d.Reason, Index: d.Index,
		DetectedAtMs: n.nowMs, Refused: n.cfg.RecoveryOnMismatch == MismatchRefuse,
	}}
	n.quar.entries[id] = q
	n.quar.total++
	err := n.quarantineRefusal(id)
	for _, o := range pe.waiters {
		n.failOpener(key, o, err)
	}
	n.reportQuarantine()
}

// onRepairQuarantine starts an operator's repair: the truncating load.
func (n *Node) onRepairQuarantine(from Address, msg *RepairQuarantine) {
	assertHold(from.Kind == AddrAdmin, "repairs come from operators")
	id := msg.Queue
	stream := id.Group == "" && n.isStream(streamKey(id.Topic))
	if !n.partitionExists(id, stream) {
		n.send(from, &QuarantineRepaired{Outcome: RepairUnknown})
		return
	}
	q := n.quar.entries[id]
	switch {
	case q == nil:
		n.send(from, &QuarantineRepaired{Outcome: RepairNotQuarantined})
		return
	case q.repairing:
		n.send(from, &QuarantineRepaired{Outcome: RepairBusy, Entry: q.entry})
		return
	}
	assertHold(n.partitions[id] == nil, "a parked partition has no entry before its repair")
	pe := &partitionEntry{stream: stream}
	if !stream {
		// With the runtime values in force, as openPartition loads.
		pe.sent = n.state.queues[queueKey{Topic: id.Topic, Group: id.Group}].settings
		pe.runtime = n.liveStamp()
	}
	n.partitions[id] = pe
	q.repairing, q.repairBy = true, from
	n.rd.Load = append(n.rd.Load, n.truncatingLoad(id, stream))
}

// finishRepair takes the LoadDone of a repair. A repair that loaded clears
// the quarantine and lets onLoadDone serve the partition (false); one that
// failed leaves it parked (true).
func (n *Node) finishRepair(in *LoadDone, pe *partitionEntry, q *quarantined) bool {
	assertHold(len(pe.waiters) == 0, "nothing waits on a parked partition's load")
	q.repairing = false
	if in.Err != nil || in.Damage != nil {
		delete(n.partitions, in.Queue)
		why := "the load after the cut found damage again"
		if in.Err != nil {
			why = in.Err.Error()
		} else if in.Damage.Index == 0 {
			why = fmt.Sprintf("%s: there is no record to cut at (%s)", in.Damage.Reason, in.Damage.Kind)
		}
		n.send(q.repairBy, &QuarantineRepaired{Outcome: RepairFailed, Entry: q.entry, Err: why})
		return true
	}
	answer := &QuarantineRepaired{Outcome: RepairDone, Entry: q.entry}
	if in.Cut != nil {
		answer.TruncatedEntries = in.Cut.DroppedRecords
	}
	delete(n.quar.entries, in.Queue)
	n.send(q.repairBy, answer)
	n.reportQuarantine()
	return false
}

// unparkRemoved forgets the parked partitions of a queue whose removal is
// durable: their damaged logs go with the queue's data, and an entry left
// behind could never be repaired (the partition is out of the catalogue),
// would keep /readyz at 503 under refuse, and would refuse a fresh queue
// of the same name. A repair cannot be running: deleteBlocked refused the
// delete while its load was out, and the removed queue is not found since.
func (n *Node) unparkRemoved(key queueKey, partitions uint32) {
	changed := false
	for p := range partitions {
		id := core.QueueID{Topic: key.Topic, Group: key.Group, Partition: p}
		q := n.quar.entries[id]
		if q == nil {
			continue
		}
		assertHold(!q.repairing, "no repair of a partition whose queue was removed")
		assertHold(n.partitions[id] == nil, "a parked partition has no entry")
		delete(n.quar.entries, id)
		changed = true
	}
	if changed {
		n.reportQuarantine()
	}
}

// partitionExists says whether the catalogue holds the partition (durable
// or on its way: a repair needs only that it was ever loaded).
func (n *Node) partitionExists(id core.QueueID, stream bool) bool {
	if stream {
		entry := n.state.streams[id.Topic]
		return id.Group == "" && entry != nil && id.Partition < entry.settings.PartitionCount
	}
	entry := n.state.queues[queueKey{Topic: id.Topic, Group: id.Group}]
	return entry != nil && id.Partition < entry.partitions
}

// truncatingLoad is the LoadRequest that cuts the partition's log at its
// first bad record, built as openPartition and openStreamPartition build
// theirs.
func (n *Node) truncatingLoad(id core.QueueID, stream bool) LoadRequest {
	if stream {
		entry := n.state.streams[id.Topic]
		assertHold(entry != nil, "a stream partition's stream is in the catalogue")
		cfg := n.cfg.StreamPartition
		cfg.Stream, cfg.Epoch = id, 1
		return LoadRequest{Queue: id, Kind: KindStream, StreamConfig: cfg, Stream: entry.settings, Truncate: true}
	}
	entry := n.state.queues[queueKey{Topic: id.Topic, Group: id.Group}]
	assertHold(entry != nil, "a loading partition's queue is in the catalogue")
	return LoadRequest{Queue: id, Config: n.partitionConfig(id), Settings: *declareSettingsOf(entry.settings), Truncate: true,
		GlobalDLQ: copyTarget(n.rt.globalDLQ)}
}

// reportQuarantine puts the whole set, sorted, in this step's Ready.
func (n *Node) reportQuarantine() {
	r := &QuarantineReport{QuarantinesTotal: n.quar.total, Entries: make([]QuarantineEntry, 0, len(n.quar.entries))}
	for _, q := range n.quar.entries {
		r.Entries = append(r.Entries, q.entry)
		r.Refused = r.Refused || q.entry.Refused
	}
	slices.SortFunc(r.Entries, func(a, b QuarantineEntry) int {
		return cmp.Or(cmp.Compare(a.Queue.Topic, b.Queue.Topic), cmp.Compare(a.Queue.Group, b.Queue.Group),
			cmp.Compare(a.Queue.Partition, b.Queue.Partition))
	})
	n.rd.Quarantine = r
}

// repairing says a repair's load of id runs (the operator waits on it,
// nobody else: CheckInvariants).
func (n *Node) repairing(id core.QueueID) bool {
	q := n.quar.entries[id]
	return q != nil && q.repairing
}

// checkQuarantine is the set's part of CheckInvariants.
func (n *Node) checkQuarantine() error {
	if len(n.quar.entries) > quarantinedMax {
		return fmt.Errorf("quarantine: %d parked, over %d", len(n.quar.entries), quarantinedMax)
	}
	for id, q := range n.quar.entries {
		pe := n.partitions[id]
		switch {
		case q.repairing && (pe == nil || pe.loaded):
			return fmt.Errorf("quarantine: %v repairs without a load", id)
		case !q.repairing && pe != nil:
			return fmt.Errorf("quarantine: parked %v has a partition entry", id)
		case q.entry.Queue != id:
			return fmt.Errorf("quarantine: entry of %v filed under %v", q.entry.Queue, id)
		case q.entry.Kind == KindQueue && !n.partitionExists(id, false) && !n.removedPending(queueKey{Topic: id.Topic, Group: id.Group}):
			// Cleared when the removal is durable (unparkRemoved); until
			// then the tombstone stands.
			return fmt.Errorf("quarantine: parked %v of a queue that is gone", id)
		}
	}
	for id := range n.quar.truncating {
		if pe := n.partitions[id]; pe == nil || pe.loaded {
			return fmt.Errorf("quarantine: truncating load of %v with no load", id)
		}
	}
	return nil
}
