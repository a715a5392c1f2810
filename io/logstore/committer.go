package logstore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/storage"
)

// Group commit: the goroutine shell around storage.Planner, which decides
// everything (what forms a round, how long deferrable entries wait, when a
// round is reported). Invariants:
//   - one writer goroutine per Log does all its I/O; Submit only hands
//     entries to the planner under the mutex, and the mutex is never held
//     across I/O, so entries keep accumulating while an fsync runs;
//   - time reaches the planner as a value: nanoseconds on the monotonic
//     clock since the Committer started;
//   - after an I/O error the writer reports onDurable(0, nil, err) once and
//     stops; Submit returns the error from then on and nothing is retried;
//   - reads back (ReadEntries) run on the writer too, between rounds: the
//     Log is one goroutine's, and its read cursor is Log state. Every read
//     queued is answered exactly once (entries, or an error).

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
	// snapshotSaved is the callback of the pending snapshot request (index
	// snapshotSavedIndex), under mu.
	snapshotSaved      func()
	snapshotSavedIndex uint64
	// report is onDurable for a good round, made once (no closure per round).
	report func(upTo uint64, stored []StoredPayload, stats storage.RoundStats)
	start  time.Time // the planner's clock is time since start

	mu       sync.Mutex
	notEmpty sync.Cond // the writer waits for work
	notFull  sync.Cond // submitters wait for room (backpressure)
	planner  *storage.Planner
	closing  bool
	err      error // the writer's I/O error, sticky
	reads    []readRequest
	spare    []readRequest // the writer's last served batch, reused
	done     chan struct{}

	deferTimer *time.Timer // wakes the writer when a deferral ends

	submits, rounds, batches, entries, syncs, snapshots atomic.Uint64
	// observer, when set (ObserveRounds), is told each good round's entry
	// count and its write-and-sync time, on the writer goroutine.
	observer atomic.Pointer[func(entries uint64, writeNs int64)]
}

// ObserveRounds has f told, after each good round, how many entries it made
// durable and how long its append and fsync took (metrics). f runs on the
// writer goroutine and must return at once.
func (c *Committer) ObserveRounds(f func(entries uint64, writeNs int64)) { c.observer.Store(&f) }

// NewCommitter starts the writer goroutine of l. From now until Close
// returns only the Committer touches l; the caller closes l after that.
// onDurable runs on the writer goroutine after each fsync with the index
// every entry up to which is durable and the round's publishes whose
// payloads are now durable in blob files (the callee owns the slice), or
// once with (0, nil, err) when the log failed. It must return quickly and
// must not call Submit (which may wait for this very goroutine to make room).
func NewCommitter(l *Log, onDurable func(upToIndex uint64, stored []StoredPayload, err error)) *Committer {
	if l.Err() != nil {
		panic("fibril/logstore invariant violated: a committer starts on an open, healthy log")
	}
	c := &Committer{
		log:       l,
		onDurable: onDurable,
		start:     time.Now(),
		planner:   storage.NewPlanner(l.Options(), l.LastIndex(), l.SnapshotIndex()),
		done:      make(chan struct{}),
	}
	c.report = func(upTo uint64, stored []StoredPayload, stats storage.RoundStats) {
		// Counted before the report, so that a callee sees its round in Stats.
		c.rounds.Add(1)
		c.batches.Add(stats.Batches)
		c.syncs.Add(stats.Syncs)
		c.entries.Add(stats.Entries)
		onDurable(upTo, stored, nil)
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

func (c *Committer) nowNs() int64 { return int64(time.Since(c.start)) }

// readRequest is one ReadEntries call waiting for the writer.
type readRequest struct {
	fromIndex  uint64
	maxEntries int
	maxBytes   int
	done       func([]core.Entry, error)
}

// ReadEntries asks the writer to read entries back (Log.ReadEntries) before
// its next round, and returns at once. done gets the answer on the writer
// goroutine: like onDurable it must return quickly and must not call
// Submit. Entries submitted but not yet written are not there yet: ask only
// for durable ones. A read queued before Close is still answered; one after
// Close or a failure is refused here (done is not called).
func (c *Committer) ReadEntries(fromIndex uint64, maxEntries, maxBytes int, done func([]core.Entry, error)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if c.closing {
		return ErrClosed
	}
	c.reads = append(c.reads, readRequest{fromIndex: fromIndex, maxEntries: maxEntries, maxBytes: maxBytes, done: done})
	c.notEmpty.Signal()
	return nil
}

// serveReads answers the reads queued, on the writer goroutine, without
// the mutex (a read is I/O).
func (c *Committer) serveReads() {
	c.mu.Lock()
	reads := c.reads
	c.reads, c.spare = c.spare[:0], nil
	c.mu.Unlock()
	for _, r := range reads {
		entries, err := c.log.ReadEntries(r.fromIndex, r.maxEntries, r.maxBytes)
		r.done(entries, err)
	}
	clear(reads) // drop the callbacks
	c.mu.Lock()
	c.spare = reads[:0]
	c.mu.Unlock()
}

// failReads answers the reads still queued after the writer failed.
func (c *Committer) failReads(err error) {
	c.mu.Lock()
	reads := c.reads
	c.reads = nil
	c.mu.Unlock()
	for _, r := range reads {
		r.done(nil, err)
	}
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
	for c.err == nil && !c.closing && !c.planner.HasRoom(len(entries)) {
		c.notFull.Wait()
	}
	if c.err != nil {
		return c.err
	}
	if c.closing {
		return ErrClosed
	}
	c.submits.Add(1)
	if c.planner.Submit(entries, c.nowNs()) {
		c.notEmpty.Signal()
	}
	return nil
}

// SaveSnapshot asks the writer to store data as the snapshot at index once
// every entry up to index is durable (index may be beyond what is durable
// yet: snapshots are taken under load), and then drop those entries from
// the log (Log.SaveSnapshot, which says what keepBlobsFrom keeps). It
// returns at once; an I/O error comes through onDurable. index must be
// submitted already, and after the last request.
//
// saved (nil: none) runs on the writer goroutine once the snapshot is
// written, under onDurable's rules. A caller whose state moves at the
// snapshot (a stream's retention) must wait for it: the index being durable
// is not enough, since the snapshot is written after that round's report,
// or in a later round when its index was durable already, and a crash in
// between loses it (found by the stream retention test over SIGKILL).
func (c *Committer) SaveSnapshot(index uint64, data []byte, keepBlobsFrom uint64, saved func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if c.closing {
		return ErrClosed
	}
	if err := c.planner.RequestSnapshot(storage.SnapshotRequest{Index: index, Data: data, KeepBlobsFrom: keepBlobsFrom}); err != nil {
		return err
	}
	// The planner holds one request at a time, replacing an older one; the
	// callback follows it, so a replaced request's callback never runs.
	c.snapshotSaved, c.snapshotSavedIndex = saved, index
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

func (c *Committer) run() {
	defer close(c.done)
	var round []core.Entry
	for {
		// Reads queued meanwhile, one batch per round: a burst of reads
		// cannot hold off the next round, nor a burst of entries a read.
		c.serveReads()
		c.mu.Lock()
		due := false
		for {
			var waitNs int64
			due, waitNs = c.planner.RoundDue(c.nowNs(), c.closing)
			if due || len(c.reads) > 0 || (c.closing && c.planner.Idle()) {
				break
			}
			if !c.planner.Idle() {
				c.deferTimer.Reset(time.Duration(waitNs))
			}
			c.notEmpty.Wait()
		}
		if !due {
			idle := len(c.reads) == 0
			c.mu.Unlock()
			if idle {
				c.deferTimer.Stop()
				return // closing, everything is written and every read answered
			}
			continue
		}
		// The writer owns the log, so reading it here is safe.
		var snapshot *storage.SnapshotRequest
		round, snapshot = c.planner.TakeRound(round[:0], c.nowNs(), c.log.LastIndex())
		c.notFull.Broadcast()
		c.mu.Unlock()

		writeStart := c.nowNs()
		stats, err := c.planner.WriteRound(c.log, round, snapshot, c.report)
		if f := c.observer.Load(); f != nil && err == nil && stats.Entries > 0 {
			(*f)(stats.Entries, c.nowNs()-writeStart)
		}
		clear(round) // drop the bodies before the buffer is reused
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.planner.Drop()
			c.notFull.Broadcast()
			c.mu.Unlock()
			c.onDurable(0, nil, err)
			c.failReads(err)
			return
		}
		if stats.Snapshot {
			c.snapshots.Add(1)
			c.mu.Lock()
			saved := c.snapshotSaved
			if c.snapshotSavedIndex != snapshot.Index {
				saved = nil // a newer request replaced this one: its own callback waits
			} else {
				c.snapshotSaved, c.snapshotSavedIndex = nil, 0
			}
			c.mu.Unlock()
			if saved != nil {
				saved()
			}
		}
	}
}
