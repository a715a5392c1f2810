package logstore

import (
	"errors"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
)

// readResult is one ReadEntries answer.
type readResult struct {
	entries []core.Entry
	err     error
}

// readVia asks c for a read and waits for its answer.
func readVia(t *testing.T, c *Committer, from uint64, n, maxBytes int) readResult {
	t.Helper()
	got := make(chan readResult, 1)
	if err := c.ReadEntries(from, n, maxBytes, func(e []core.Entry, err error) { got <- readResult{e, err} }); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("a read was never answered")
		return readResult{}
	}
}

// TestCommitterReadEntries: reads run on the writer between rounds while
// entries keep coming (inline and blob payloads), return exactly what was
// made durable, report a compacted index after a snapshot, and one queued
// before Close is still answered; after Close they are refused.
func TestCommitterReadEntries(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	l, _ := openLog(t, dir, opts)
	rec := &durableRecorder{t: t}
	c := NewCommitter(l, rec.onDurable)
	small := publishEntries(1, 300, 100)
	large := publishEntries(301, 20, 300<<10) // blob-stored
	must(t, c.Submit(small))
	must(t, c.Submit(large))
	eventually(t, 10000, 2, func() bool { return rec.last.Load() == 320 })
	all := append(append([]core.Entry(nil), small...), large...)

	var read []core.Entry
	next, tail := uint64(1), uint64(321)
	for next <= 320 {
		// Submits interleave with the reads: the writer takes both.
		must(t, c.Submit(publishEntries(tail, 1, 10)))
		tail++
		r := readVia(t, c, next, 7, 1<<20)
		if r.err != nil || len(r.entries) == 0 {
			t.Fatalf("read from %d: %d entries, %v", next, len(r.entries), r.err)
		}
		read = append(read, r.entries...)
		next += uint64(len(r.entries))
	}
	sameEntries(t, read[:320], all)
	for _, e := range read {
		if e.Body != nil && e.Body.IsStored() {
			t.Fatalf("entry %d came back stored", e.Index)
		}
	}

	must(t, c.SaveSnapshot(100, []byte("at 100"), 0, nil))
	eventually(t, 10000, 2, func() bool { return c.Stats().Snapshots == 1 })
	if r := readVia(t, c, 50, 10, 0); !errors.Is(r.err, ErrCompacted) {
		t.Fatalf("a read below the snapshot: %v", r.err)
	}
	if r := readVia(t, c, 10_000, 10, 0); r.err != nil || len(r.entries) != 0 {
		t.Fatalf("a read past the end: %d entries, %v", len(r.entries), r.err)
	}

	got := make(chan readResult, 1)
	must(t, c.ReadEntries(101, 5, 0, func(e []core.Entry, err error) { got <- readResult{e, err} }))
	must(t, c.Close())
	select {
	case r := <-got:
		if r.err != nil || len(r.entries) == 0 || r.entries[0].Index != 101 {
			t.Fatalf("the read queued before Close: %d entries, %v", len(r.entries), r.err)
		}
	default:
		t.Fatal("a read queued before Close was not answered by Close")
	}
	if err := c.ReadEntries(101, 5, 0, func([]core.Entry, error) { t.Error("a refused read was answered") }); !errors.Is(err, ErrClosed) {
		t.Fatalf("a read after Close: %v", err)
	}
	l.Close()
}
