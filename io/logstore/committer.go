package logstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
)

// Group commit. Invariants:
//   - one writer goroutine per Log does all its I/O; Submit only copies
//     entries into pending under the mutex, and the mutex is never held
//     across I/O, so entries keep accumulating while an fsync runs;
//   - a round takes what is pending, up to one batch (BatchEntriesMax,
//     BatchBytesMax), appends it, fsyncs once, then reports
//     onDurable(last index of the round): reports strictly increase. The cap
//     bounds how long the first entry of a round waits for its fsync; under
//     overload the queue, bounded by PendingEntriesMax, pushes back instead;
//   - submitted indexes are contiguous, from the log's LastIndex()+1;
//   - after an I/O error the writer reports onDurable(0, err) once and stops;
//     Submit returns the error from then on and nothing is retried;
//   - a queue holding only deferrable entries (settles, leases, requeues:
//     nothing a client waits on, see urgentEntry) waits up to
//     Options.DeferrableWaitMax for an urgent entry or DeferrableEntriesMax
//     of them before it becomes a round of its own, so at moderate rates
//     acks ride along with the next publishes' fsync instead of taking one
//     (and delaying the publishes behind it) on their own.

// Stats counts what a Committer did (metrics, tests). Syncs far below
// Submits is group commit working.
type Stats struct {
	Submits   uint64 // Submit calls that queued entries
	Rounds    uint64 // writer rounds: one or more batches, then one Sync
	Batches   uint64 // tidwall WriteBatch calls
	Entries   uint64 // entries made durable
	Syncs     uint64 // fsyncs of the tail segment
	Snapshots uint64 // snapshots saved
}

// Committer is the single writer of one Log: it batches entries from any
// number of Submit calls into one append and one fsync per round.
type Committer struct {
	log       *Log
	onDurable func(upToIndex uint64, stored []StoredPayload, err error)

	mu       sync.Mutex
	notEmpty sync.Cond // the writer waits for work
	notFull  sync.Cond // submitters wait for room (backpressure)
	// pending[head:] are queued for the writer; the writer takes from head
	// and compacts once head passes half, so each entry moves O(1) times.
	pending []core.Entry
	head    int
	// snapshot waiting for the writer; a newer request replaces it.
	snapshot      *snapshotRequest
	nextIndex     uint64 // the index the next submitted entry must carry
	snapshotIndex uint64 // the newest snapshot requested (or stored)
	closing       bool
	err           error // the writer's I/O error, sticky
	done          chan struct{}
	// urgentQueued counts queued entries someone waits on (urgentEntry);
	// queuedSince is when the queue last went from empty to not empty.
	urgentQueued int
	queuedSince  time.Time
	deferTimer   *time.Timer // wakes the writer when a deferral ends

	submits, rounds, batches, entries, syncs, snapshots atomic.Uint64
}

type snapshotRequest struct {
	index         uint64
	data          []byte
	keepBlobsFrom uint64
}

// NewCommitter starts the writer goroutine of l. From now until Close
// returns only the Committer touches l; the caller closes l after that.
// onDurable runs on the writer goroutine after each fsync with the index
// every entry up to which is durable and the round's publishes whose
// payloads are now durable in blob files (the callee owns the slice), or
// once with (0, nil, err) when the log failed. It must return quickly and
// must not call Submit (which may wait for this very goroutine to make room).
func NewCommitter(l *Log, onDurable func(upToIndex uint64, stored []StoredPayload, err error)) *Committer {
	assertTrue(l.usable() == nil, "a committer starts on an open, healthy log")
	c := &Committer{
		log:           l,
		onDurable:     onDurable,
		nextIndex:     l.LastIndex() + 1,
		snapshotIndex: l.SnapshotIndex(),
		done:          make(chan struct{}),
	}
	c.notEmpty.L = &c.mu
	c.notFull.L = &c.mu
	c.deferTimer = time.AfterFunc(time.Hour, func() {
		c.mu.Lock()
		c.notEmpty.Signal()
		c.mu.Unlock()
	})
	c.deferTimer.Stop()
	go c.run()
	return c
}

// Submit queues entries for the next round. It copies the Entry structs
// (their Body, Settings and Target pointers are shared: the core never
// mutates them once handed out). It never waits for I/O; it waits only when
// more than PendingEntriesMax entries are already waiting. Entries must
// follow on from the previous Submit's.
func (c *Committer) Submit(entries []core.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.closing && c.queued() > 0 && c.queued()+len(entries) > c.log.opts.PendingEntriesMax {
		c.notFull.Wait()
	}
	if c.err != nil {
		return c.err
	}
	if c.closing {
		return ErrClosed
	}
	urgent := 0
	for i := range entries {
		assertTrue(entries[i].Index == c.nextIndex+uint64(i), "submitted entries are contiguous")
		if urgentEntry(&entries[i]) {
			urgent++
		}
	}
	wasEmpty := c.queued() == 0
	if wasEmpty {
		c.queuedSince = time.Now()
	}
	c.pending = append(c.pending, entries...)
	c.nextIndex += uint64(len(entries))
	c.urgentQueued += urgent
	c.submits.Add(1)
	// The writer re-decides only when it could take a round now or must
	// start its deferral clock, not on every deferrable entry.
	if wasEmpty || urgent > 0 || c.queued() >= c.log.opts.DeferrableEntriesMax {
		c.notEmpty.Signal()
	}
	return nil
}

// SaveSnapshot asks the writer to store data as the snapshot at index once
// every entry up to index is durable, and then drop those entries from the
// log (Log.SaveSnapshot, which says what keepBlobsFrom keeps). It returns at
// once; an I/O error comes through onDurable. index must be submitted
// already, and after the last request.
func (c *Committer) SaveSnapshot(index uint64, data []byte, keepBlobsFrom uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if c.closing {
		return ErrClosed
	}
	if index >= c.nextIndex || index <= c.snapshotIndex {
		return fmt.Errorf("logstore: snapshot at %d: must be after the snapshot at %d and at most the last submitted index %d",
			index, c.snapshotIndex, c.nextIndex-1)
	}
	c.snapshot = &snapshotRequest{index: index, data: data, keepBlobsFrom: keepBlobsFrom}
	c.snapshotIndex = index
	c.notEmpty.Signal()
	return nil
}

// Stats returns the counters. Safe from any goroutine.
func (c *Committer) Stats() Stats {
	return Stats{
		Submits:   c.submits.Load(),
		Rounds:    c.rounds.Load(),
		Batches:   c.batches.Load(),
		Entries:   c.entries.Load(),
		Syncs:     c.syncs.Load(),
		Snapshots: c.snapshots.Load(),
	}
}

// Close writes and syncs everything submitted, stops the writer and returns
// its error, if any. It does not close the Log.
func (c *Committer) Close() error {
	c.mu.Lock()
	c.closing = true
	c.notEmpty.Signal()
	c.notFull.Broadcast()
	c.mu.Unlock()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Committer) queued() int { return len(c.pending) - c.head }

// urgentEntry says whether someone waits on e's durability: a publish (its
// confirm, and its deliveries), a declare or a global DLQ change (their
// replies). Leases, settles and requeues only delay bookkeeping: their
// effects reach clients before they are durable, and a crash before it
// means redelivery, which at-least-once allows.
func urgentEntry(e *core.Entry) bool {
	switch e.Kind {
	case core.EntryPublish, core.EntryDeclare, core.EntryGlobalDLQ:
		return true
	}
	return false
}

// roundReady says whether the writer should take a round now; if not, it
// returns how long the queued deferrable entries may still wait. Called
// with mu held and something queued.
func (c *Committer) roundReady() (bool, time.Duration) {
	if c.closing || c.snapshot != nil || c.urgentQueued > 0 || c.queued() >= c.log.opts.DeferrableEntriesMax {
		return true, 0
	}
	wait := c.log.opts.DeferrableWaitMax - time.Since(c.queuedSince)
	return wait <= 0, wait
}

func (c *Committer) run() {
	defer close(c.done)
	var round []core.Entry
	for {
		c.mu.Lock()
		for {
			for c.queued() == 0 && c.snapshot == nil && !c.closing {
				c.notEmpty.Wait()
			}
			if c.queued() == 0 {
				break
			}
			ready, wait := c.roundReady()
			if ready {
				break
			}
			c.deferTimer.Reset(wait)
			c.notEmpty.Wait()
		}
		if c.queued() == 0 && c.snapshot == nil {
			c.mu.Unlock()
			c.deferTimer.Stop()
			return // closing, and everything is written
		}
		round = c.takeRound(round[:0])
		for i := range round {
			if urgentEntry(&round[i]) {
				c.urgentQueued--
			}
		}
		assertTrue(c.urgentQueued >= 0, "urgent entries are counted once")
		if c.queued() > 0 {
			c.queuedSince = time.Now() // what is left waits afresh
		}
		// The writer owns the log, so reading it here is safe.
		roundLastIndex := c.log.LastIndex() + uint64(len(round))
		var snapshot *snapshotRequest
		if c.snapshot != nil && c.snapshot.index <= roundLastIndex {
			snapshot, c.snapshot = c.snapshot, nil
		}
		assertTrue(len(round) > 0 || snapshot != nil, "a snapshot request waits only for queued entries")
		c.notFull.Broadcast()
		c.mu.Unlock()

		err := c.writeRound(round, snapshot)
		clear(round) // drop the bodies before the buffer is reused
		if err != nil {
			c.mu.Lock()
			c.err = err
			clear(c.pending)
			c.pending, c.head = nil, 0
			c.notFull.Broadcast()
			c.mu.Unlock()
			c.onDurable(0, nil, err)
			return
		}
	}
}

// takeRound moves the next round's entries from the queue into round: at
// least one, at most BatchEntriesMax and (after the first) BatchBytesMax by
// estimate. Called with mu held.
func (c *Committer) takeRound(round []core.Entry) []core.Entry {
	queued := c.pending[c.head:]
	count, sizeBytes := 0, 0
	for count < len(queued) && count < c.log.opts.BatchEntriesMax {
		n := recordSizeBytesEstimate(&queued[count])
		if count > 0 && sizeBytes+n > c.log.opts.BatchBytesMax {
			break
		}
		sizeBytes += n
		count++
	}
	assertTrue(count > 0 || len(queued) == 0, "a round takes at least one queued entry")
	round = append(round, queued[:count]...)
	clear(queued[:count])
	c.head += count
	switch {
	case c.head == len(c.pending):
		c.pending, c.head = c.pending[:0], 0
	case c.head > len(c.pending)/2:
		rest := copy(c.pending, c.pending[c.head:])
		clear(c.pending[rest:])
		c.pending, c.head = c.pending[:rest], 0
	}
	return round
}

// writeRound appends and syncs one round, reports it, then saves the
// snapshot that came with it (whose index the round has made durable).
func (c *Committer) writeRound(round []core.Entry, snapshot *snapshotRequest) error {
	l := c.log
	if len(round) > 0 {
		before := l.Stats()
		if err := l.Append(round); err != nil {
			return err
		}
		roundLast := round[len(round)-1].Index
		early := mutant.On(mutant.DurableOnSubmit)
		if early {
			// Broken on purpose: the round is reported durable before its
			// fsync has even started.
			c.onDurable(roundLast, l.appendStored(nil, round), nil)
		}
		if err := l.Sync(); err != nil {
			return err
		}
		after := l.Stats()
		assertTrue(l.SyncedIndex() == roundLast, "a round is durable up to its last entry")
		c.rounds.Add(1)
		c.batches.Add(after.Batches - before.Batches)
		c.syncs.Add(after.Syncs - before.Syncs)
		c.entries.Add(uint64(len(round)))
		if !early {
			c.onDurable(l.SyncedIndex(), l.appendStored(nil, round), nil)
		}
	}
	if snapshot != nil {
		assertTrue(snapshot.index <= l.SyncedIndex(), "a snapshot request follows its entries")
		if err := l.SaveSnapshot(snapshot.index, snapshot.data, snapshot.keepBlobsFrom); err != nil {
			return err
		}
		c.snapshots.Add(1)
	}
	return nil
}
