package logstore

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/io/logstore/osfs"
	"github.com/fibril-go/fibril/storage"
	"github.com/fibril-go/fibril/storage/fsys"
)

// durableRecorder checks onDurable reports as they come.
type durableRecorder struct {
	t       testing.TB
	mu      sync.Mutex
	reports []uint64
	err     error
	last    atomic.Uint64
}

func (r *durableRecorder) onDurable(upTo uint64, _ []StoredPayload, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.err = err
		return
	}
	if n := len(r.reports); n > 0 && upTo <= r.reports[n-1] {
		r.t.Errorf("onDurable went from %d to %d", r.reports[n-1], upTo)
	}
	r.reports = append(r.reports, upTo)
	r.last.Store(upTo)
}

// TestCommitterConcurrentSubmits: many goroutines submit (index assignment
// and Submit serialized by a mutex, as the partition loop serializes them);
// every entry becomes durable, reports only grow and end at the last index,
// and fsyncs are far fewer than submits.
func TestCommitterConcurrentSubmits(t *testing.T) {
	const (
		submitters       = 8
		submitsPerWorker = 1500
	)
	dir := t.TempDir()
	opts := testOptions(256<<10, CorruptionRefuse)
	l, _ := openLog(t, dir, opts)
	rec := &durableRecorder{t: t}
	c := NewCommitter(l, rec.onDurable)

	var loop sync.Mutex // the partition loop
	nextIndex := uint64(1)
	var all []core.Entry
	var wg sync.WaitGroup
	for w := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gen := newEntryGen(uint64(100+w), 200)
			for range submitsPerWorker {
				loop.Lock()
				batch := atEpoch(gen.Entries(nextIndex, 1+gen.Rng.IntN(3)), 1)
				nextIndex += uint64(len(batch))
				all = append(all, batch...)
				if err := c.Submit(batch); err != nil {
					t.Error(err)
				}
				loop.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	last := nextIndex - 1
	if rec.last.Load() != last || l.SyncedIndex() != last {
		t.Fatalf("last report %d, synced %d, want %d", rec.last.Load(), l.SyncedIndex(), last)
	}
	s := c.Stats()
	if s.Submits != submitters*submitsPerWorker || s.Entries != last || s.Syncs != s.Rounds || s.Syncs != uint64(len(rec.reports)) {
		t.Fatalf("stats %+v, %d reports", s, len(rec.reports))
	}
	if s.Syncs*4 > s.Submits {
		t.Fatalf("%d fsyncs for %d submits: group commit is not grouping", s.Syncs, s.Submits)
	}
	t.Logf("%d submits, %d entries, %d fsyncs (%.1f submits per fsync)", s.Submits, s.Entries, s.Syncs, float64(s.Submits)/float64(s.Syncs))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, recovered := openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, recovered.Entries, all)
}

// TestCommitterBackpressure: with the writer stuck, Submit queues up to
// PendingEntriesMax entries and then waits for room.
func TestCommitterBackpressure(t *testing.T) {
	opts := testOptions(256<<10, CorruptionRefuse)
	opts.PendingEntriesMax = 8
	l, _ := openLog(t, t.TempDir(), opts)
	defer l.Close()
	release := make(chan struct{})
	var blockedOnce sync.Once
	c := NewCommitter(l, func(uint64, []StoredPayload, error) { blockedOnce.Do(func() { <-release }) })

	c.Submit(publishEntries(1, 1, 10)) // the writer takes it and blocks in onDurable
	eventually(t, 5000, 1, func() bool { return c.Stats().Rounds == 1 })
	for i := uint64(2); i <= 9; i++ {
		if err := c.Submit(publishEntries(i, 1, 10)); err != nil { // fills pending to 8
			t.Fatal(err)
		}
	}
	var returned atomic.Bool
	go func() {
		c.Submit(publishEntries(10, 1, 10))
		returned.Store(true)
	}()
	time.Sleep(50 * time.Millisecond) // a Submit that wrongly returns does so at once
	if returned.Load() {
		t.Fatal("Submit over PendingEntriesMax did not wait")
	}
	close(release)
	eventually(t, 5000, 1, returned.Load)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if l.SyncedIndex() != 10 {
		t.Fatalf("synced %d", l.SyncedIndex())
	}
}

// TestCommitterSnapshot: a snapshot request is written after its entries
// are durable, and the log is truncated behind it.
func TestCommitterSnapshot(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	l, _ := openLog(t, dir, opts)
	rec := &durableRecorder{t: t}
	c := NewCommitter(l, rec.onDurable)
	for i := uint64(1); i <= 1000; i += 100 {
		c.Submit(publishEntries(i, 100, 1024))
	}
	if err := c.SaveSnapshot(1001, nil, 0, nil); err == nil {
		t.Fatal("a snapshot past the submitted entries was accepted")
	}
	if err := c.SaveSnapshot(800, []byte("at 800"), 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveSnapshot(700, []byte("at 700"), 0, nil); err == nil {
		t.Fatal("an older snapshot was accepted")
	}
	c.Submit(publishEntries(1001, 50, 1024))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Snapshots != 1 {
		t.Fatalf("stats %+v", s)
	}
	l.Close()
	l, recovered := openLog(t, dir, opts)
	defer l.Close()
	if string(recovered.Snapshot) != "at 800" || l.FirstIndex() != 801 {
		t.Fatalf("snapshot %q, first %d", recovered.Snapshot, l.FirstIndex())
	}
	sameEntries(t, recovered.Entries, publishEntries(801, 250, 1024))
}

// TestCommitterIOError: an I/O error is reported once through onDurable,
// then every Submit fails with it; nothing is retried.
func TestCommitterIOError(t *testing.T) {
	var broken atomic.Bool
	env := Env
	env.OpenSegmentLog = func(dir string, opts fsys.SegmentLogOptions) (fsys.SegmentLog, error) {
		log, err := osfs.OpenTidwall(dir, opts)
		return breakableSegments{SegmentLog: log, broken: &broken}, err
	}
	l, _, err := storage.Open(env, t.TempDir(), DefaultOptions())
	must(t, err)
	rec := &durableRecorder{t: t}
	c := NewCommitter(l, rec.onDurable)
	c.Submit(publishEntries(1, 10, 10))
	eventually(t, 5000, 1, func() bool { return rec.last.Load() == 10 })
	broken.Store(true) // the disk goes away under the writer
	c.Submit(publishEntries(11, 10, 10))
	eventually(t, 5000, 1, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.err != nil
	})
	if err := c.Submit(publishEntries(21, 1, 10)); err == nil {
		t.Fatal("Submit after an I/O error succeeded")
	}
	if err := c.Close(); err == nil || !errors.Is(err, rec.err) {
		t.Fatalf("close: %v, reported %v", err, rec.err)
	}
	if err := l.Sync(); err == nil {
		t.Fatal("a failed log synced")
	}
	if rec.last.Load() != 10 {
		t.Fatalf("reported durable up to %d", rec.last.Load())
	}
}

// breakableSegments fails every write once broken is set.
type breakableSegments struct {
	fsys.SegmentLog
	broken *atomic.Bool
}

func (b breakableSegments) WriteBatch(batch fsys.Batch) error {
	if b.broken.Load() {
		return errors.New("test: the disk is gone")
	}
	return b.SegmentLog.WriteBatch(batch)
}

// TestCommitterCloseFlushes: Close writes and syncs what is pending.
func TestCommitterCloseFlushes(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, DefaultOptions())
	rec := &durableRecorder{t: t}
	c := NewCommitter(l, rec.onDurable)
	for i := uint64(1); i <= 500; i += 5 {
		c.Submit(publishEntries(i, 5, 100))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if rec.last.Load() != 500 {
		t.Fatalf("last report %d", rec.last.Load())
	}
	if err := c.Submit(publishEntries(501, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after close: %v", err)
	}
	l.Close()
	l, recovered := openLog(t, dir, DefaultOptions())
	defer l.Close()
	sameEntries(t, recovered.Entries, publishEntries(1, 500, 100))
}

// TestCommitterRoundsAreBounded: a long queue is written in rounds of at
// most BatchEntriesMax, each with its own fsync and report, so the first
// entries of a backlog do not wait for all of it.
func TestCommitterRoundsAreBounded(t *testing.T) {
	opts := testOptions(256<<10, CorruptionRefuse)
	opts.BatchEntriesMax = 16
	opts.PendingEntriesMax = 1000
	l, _ := openLog(t, t.TempDir(), opts)
	defer l.Close()
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var reports []uint64
	c := NewCommitter(l, func(upTo uint64, _ []StoredPayload, err error) {
		once.Do(func() { <-release })
		mu.Lock()
		reports = append(reports, upTo)
		mu.Unlock()
	})
	c.Submit(publishEntries(1, 1, 10))
	eventually(t, 5000, 1, func() bool { return c.Stats().Rounds == 1 })
	for i := uint64(2); i <= 500; i += 7 {
		c.Submit(publishEntries(i, 7, 10))
	}
	close(release)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	previous := uint64(0)
	for _, upTo := range reports {
		if upTo-previous > 16 {
			t.Fatalf("a round of %d entries (reports %v)", upTo-previous, reports)
		}
		previous = upTo
	}
	if previous != 505 || c.Stats().Syncs < 505/16 {
		t.Fatalf("last report %d, stats %+v", previous, c.Stats())
	}
}
