package storage

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
)

// The group-commit policy, pure: what forms the next round, how long a
// queue of only deferrable entries waits for an urgent one to share its
// fsync, and when a round is reported durable. Time comes in as a value
// (nowNs, on any monotonic clock); the shell that owns goroutines, locks
// and timers is io/logstore's Committer, and the simulator drives the same
// planner from its event queue. Invariants:
//   - entries are submitted with contiguous indexes from NextIndex, and a
//     round takes a prefix of what is queued: at least one entry, at most
//     BatchEntriesMax and (after the first) BatchBytesMax by estimate;
//   - queued entries never exceed PendingEntriesMax except by one Submit
//     into an empty queue (HasRoom is the shell's backpressure);
//   - a queue of only deferrable entries (urgentEntry) becomes a round only
//     once DeferrableWaitMax passed since it started waiting, or it holds
//     DeferrableEntriesMax, or a snapshot or close is pending;
//   - reports (WriteRound's report) strictly increase, and are made only
//     after the round's fsync returned, except under mutant.DurableOnSubmit;
//   - a snapshot request is handed out with the first round whose last
//     index reaches it, so it is written only after everything up to it is
//     durable, in order with the rounds.

// SnapshotRequest is a snapshot waiting for its entries to be durable.
type SnapshotRequest struct {
	Index         uint64
	Data          []byte
	KeepBlobsFrom uint64
}

// Planner decides the rounds of one Log. It is not safe for concurrent use:
// the shell holds a lock around it.
type Planner struct {
	opts Options
	// pending[head:] are queued; TakeRound takes from head and compacts
	// once head passes half, so each entry moves O(1) times.
	pending []core.Entry
	head    int
	// urgentQueued counts queued entries someone waits on (urgentEntry);
	// queuedSinceNs is when the queue last started waiting.
	urgentQueued  int
	queuedSinceNs int64
	nextIndex     uint64 // the index the next submitted entry must carry
	snapshot      *SnapshotRequest
	snapshotIndex uint64 // the newest snapshot requested (or stored)
	lastReported  uint64
	// roundEarly: the round being written was reported by AppendRound
	// (mutant.DurableOnSubmit only).
	roundEarly bool
}

// NewPlanner plans the rounds of a log whose last index and snapshot index
// are as given (Log.LastIndex, Log.SnapshotIndex).
func NewPlanner(opts Options, lastIndex, snapshotIndex uint64) *Planner {
	assertTrue(snapshotIndex <= lastIndex, "a snapshot never runs ahead of the log")
	return &Planner{opts: opts, nextIndex: lastIndex + 1, snapshotIndex: snapshotIndex, lastReported: lastIndex}
}

// Queued is how many entries wait for a round.
func (p *Planner) Queued() int { return len(p.pending) - p.head }

// NextIndex is the index the next submitted entry must carry.
func (p *Planner) NextIndex() uint64 { return p.nextIndex }

// Idle says there is nothing to write: no entry, no snapshot.
func (p *Planner) Idle() bool { return p.Queued() == 0 && p.snapshot == nil }

// HasRoom says whether count more entries may be queued now.
func (p *Planner) HasRoom(count int) bool {
	return p.Queued() == 0 || p.Queued()+count <= p.opts.PendingEntriesMax
}

// Submit queues entries (it copies the Entry structs; the core never
// mutates what they point to once handed out). It returns whether the
// shell should re-decide now (wake its writer): only when a round could be
// due or the deferral clock starts, not on every deferrable entry.
func (p *Planner) Submit(entries []core.Entry, nowNs int64) bool {
	if len(entries) == 0 {
		return false
	}
	urgent := 0
	for i := range entries {
		assertTrue(entries[i].Index == p.nextIndex+uint64(i), "submitted entries are contiguous")
		if urgentEntry(&entries[i]) {
			urgent++
		}
	}
	wasEmpty := p.Queued() == 0
	if wasEmpty {
		p.queuedSinceNs = nowNs
	}
	p.pending = append(p.pending, entries...)
	p.nextIndex += uint64(len(entries))
	p.urgentQueued += urgent
	assertTrue(p.urgentQueued <= p.Queued(), "urgent entries are counted once")
	return wasEmpty || urgent > 0 || p.Queued() >= p.opts.DeferrableEntriesMax
}

// RequestSnapshot asks for data to be stored as the snapshot at index once
// every entry up to it is durable; a newer request replaces an older one.
// index must be submitted already, and after the last request.
func (p *Planner) RequestSnapshot(req SnapshotRequest) error {
	if req.Index >= p.nextIndex || req.Index <= p.snapshotIndex {
		return fmt.Errorf("logstore: snapshot at %d: must be after the snapshot at %d and at most the last submitted index %d",
			req.Index, p.snapshotIndex, p.nextIndex-1)
	}
	p.snapshot = &req
	p.snapshotIndex = req.Index
	return nil
}

// RoundDue says whether a round should be taken now; if not and entries
// are queued, waitNs is how long the deferrable ones may still wait (the
// shell wakes after it). closing forces what is queued out.
func (p *Planner) RoundDue(nowNs int64, closing bool) (due bool, waitNs int64) {
	if p.Idle() {
		return false, 0
	}
	if closing || p.snapshot != nil || p.urgentQueued > 0 || p.Queued() >= p.opts.DeferrableEntriesMax {
		return true, 0
	}
	waitNs = int64(p.opts.DeferrableWaitMax) - (nowNs - p.queuedSinceNs)
	return waitNs <= 0, max(waitNs, 0)
}

// TakeRound moves the next round's entries into round (reused by the
// caller) and hands out the snapshot request the round makes durable, if
// any. logLastIndex is the log's LastIndex before the round.
func (p *Planner) TakeRound(round []core.Entry, nowNs int64, logLastIndex uint64) ([]core.Entry, *SnapshotRequest) {
	assertTrue(logLastIndex+uint64(p.Queued()) == p.nextIndex-1, "the log holds everything not queued")
	queued := p.pending[p.head:]
	count, sizeBytes := 0, 0
	for count < len(queued) && count < p.opts.BatchEntriesMax {
		n := recordSizeBytesEstimate(&queued[count])
		if count > 0 && sizeBytes+n > p.opts.BatchBytesMax {
			break
		}
		sizeBytes += n
		count++
	}
	assertTrue(count > 0 || len(queued) == 0, "a round takes at least one queued entry")
	for i := range queued[:count] {
		if urgentEntry(&queued[i]) {
			p.urgentQueued--
		}
	}
	assertTrue(p.urgentQueued >= 0, "urgent entries are counted once")
	round = append(round, queued[:count]...)
	clear(queued[:count])
	p.head += count
	switch {
	case p.head == len(p.pending):
		p.pending, p.head = p.pending[:0], 0
	case p.head > len(p.pending)/2:
		rest := copy(p.pending, p.pending[p.head:])
		clear(p.pending[rest:])
		p.pending, p.head = p.pending[:rest], 0
	}
	if p.Queued() > 0 {
		p.queuedSinceNs = nowNs // what is left waits afresh
	}
	var snapshot *SnapshotRequest
	if p.snapshot != nil && p.snapshot.Index <= logLastIndex+uint64(count) {
		snapshot, p.snapshot = p.snapshot, nil
	}
	assertTrue(count > 0 || snapshot != nil, "a snapshot request waits only for queued entries")
	return round, snapshot
}

// Drop forgets everything queued (after an I/O error: nothing is retried).
func (p *Planner) Drop() {
	clear(p.pending)
	p.pending, p.head, p.urgentQueued, p.snapshot = nil, 0, 0, nil
}

// urgentEntry says whether someone waits on e's durability: a publish or a
// stream record (its confirm, and its deliveries), a declare of a queue or
// a stream, or a global DLQ change (their replies). Leases, settles,
// requeues and cursor commits only delay bookkeeping: their effects reach
// clients before they are durable, and a crash before it means
// redelivery, which at-least-once allows.
func urgentEntry(e *core.Entry) bool {
	switch e.Kind {
	case core.EntryPublish, core.EntryDeclare, core.EntryGlobalDLQ, core.EntryStreamRecord, core.EntryStreamDeclare:
		return true
	}
	return false
}

// RoundStats is what one WriteRound did, for the shell's counters.
type RoundStats struct {
	Batches, Syncs, Entries uint64
	Snapshot                bool
}

// WriteRound appends and syncs one round on l, reports it (report gets the
// index every entry up to which is durable, the round's stored payloads,
// which it owns, and what the round did), then saves the snapshot that
// came with it: AppendRound then SyncRound. An error fails l: the caller
// reports it and stops. It touches only lastReported and roundEarly of the
// planner, which no other method reads: a shell may call it without the
// lock it holds around the others.
func (p *Planner) WriteRound(l *Log, round []core.Entry, snapshot *SnapshotRequest, report func(upTo uint64, stored []StoredPayload, stats RoundStats)) (RoundStats, error) {
	before := l.Stats()
	if err := p.AppendRound(l, round, report); err != nil {
		return RoundStats{}, err
	}
	return p.SyncRound(l, round, snapshot, before, report)
}

// AppendRound writes round to l (no fsync). A simulator may crash the
// process between it and SyncRound. Only under mutant.DurableOnSubmit does
// it report the round, before its fsync.
func (p *Planner) AppendRound(l *Log, round []core.Entry, report func(upTo uint64, stored []StoredPayload, stats RoundStats)) error {
	p.roundEarly = false
	if len(round) == 0 {
		return nil
	}
	if err := l.Append(round); err != nil {
		return err
	}
	roundLast := round[len(round)-1].Index
	assertTrue(roundLast > p.lastReported, "reports strictly increase")
	assertTrue(l.LastIndex() == roundLast, "the round ends the log")
	if mutant.On(mutant.DurableOnSubmit) {
		// Broken on purpose: the round is reported durable before its
		// fsync has even started.
		p.roundEarly, p.lastReported = true, roundLast
		report(roundLast, l.AppendStored(nil, round), RoundStats{Entries: uint64(len(round))})
	}
	return nil
}

// SyncRound makes the round AppendRound wrote durable, reports it, then
// saves snapshot if any (its index is durable now). before is l.Stats()
// from before AppendRound, for the round's counts.
func (p *Planner) SyncRound(l *Log, round []core.Entry, snapshot *SnapshotRequest, before LogStats, report func(upTo uint64, stored []StoredPayload, stats RoundStats)) (RoundStats, error) {
	var stats RoundStats
	if len(round) > 0 {
		roundLast := round[len(round)-1].Index
		if err := l.Sync(); err != nil {
			return stats, err
		}
		after := l.Stats()
		assertTrue(l.SyncedIndex() == roundLast, "a round is durable up to its last entry")
		stats.Batches = after.Batches - before.Batches
		stats.Syncs = after.Syncs - before.Syncs
		stats.Entries = uint64(len(round))
		if !p.roundEarly {
			assertTrue(roundLast > p.lastReported, "reports strictly increase")
			p.lastReported = roundLast
			report(roundLast, l.AppendStored(nil, round), stats)
		}
	}
	if snapshot != nil {
		assertTrue(snapshot.Index <= l.SyncedIndex(), "a snapshot request follows its entries")
		if err := l.SaveSnapshot(snapshot.Index, snapshot.Data, snapshot.KeepBlobsFrom); err != nil {
			return stats, err
		}
		stats.Snapshot = true
	}
	return stats, nil
}
