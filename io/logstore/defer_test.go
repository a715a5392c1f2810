package logstore

import (
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
)

// ackEntries are deferrable entries (settles) at index first, first+1, ...
func ackEntries(first uint64, count int) []core.Entry {
	out := make([]core.Entry, count)
	for i := range out {
		out[i] = core.Entry{Epoch: 1, Index: first + uint64(i), Kind: core.EntryAck, Offset: uint64(i)}
	}
	return out
}

// TestDeferrableEntriesWaitForAPublish: settles alone wait (up to
// DeferrableWaitMax) and then share the round of the publish that comes
// along: one fsync for both, reported together.
func TestDeferrableEntriesWaitForAPublish(t *testing.T) {
	opts := testOptions(1<<20, CorruptionRefuse)
	opts.DeferrableWaitMax = time.Hour // only a publish or the count may end it
	l, _ := openLog(t, t.TempDir(), opts)
	rec := &durableRecorder{t: t}
	c := NewCommitter(l, rec.onDurable)
	must(t, c.Submit(ackEntries(1, 5)))
	time.Sleep(50 * time.Millisecond)
	if got := rec.last.Load(); got != 0 {
		t.Fatalf("settles alone became a round of their own (durable up to %d)", got)
	}
	publish := publishEntries(6, 1, 10)
	must(t, c.Submit(publish))
	eventually(t, 2000, 1, func() bool { return rec.last.Load() == 6 })
	if s := c.Stats(); s.Rounds != 1 || s.Syncs != 1 {
		t.Fatalf("want the settles and the publish in one round and one fsync, got %+v", s)
	}
	must(t, c.Close())
	l.Close()
}

// TestDeferrableEntriesWaitAtMostTheirBound: with no publish coming, settles
// become durable once DeferrableWaitMax passes, or at once when
// DeferrableEntriesMax of them are queued.
func TestDeferrableEntriesWaitAtMostTheirBound(t *testing.T) {
	opts := testOptions(1<<20, CorruptionRefuse)
	opts.DeferrableWaitMax = 30 * time.Millisecond
	opts.DeferrableEntriesMax = 100
	l, _ := openLog(t, t.TempDir(), opts)
	rec := &durableRecorder{t: t}
	c := NewCommitter(l, rec.onDurable)
	start := time.Now()
	must(t, c.Submit(ackEntries(1, 3)))
	eventually(t, 2000, 1, func() bool { return rec.last.Load() == 3 })
	if waited := time.Since(start); waited < 25*time.Millisecond {
		t.Fatalf("settles became durable after %v, before their deferral ended", waited)
	}
	start = time.Now()
	must(t, c.Submit(ackEntries(4, 100)))
	eventually(t, 2000, 1, func() bool { return rec.last.Load() == 103 })
	if waited := time.Since(start); waited > 25*time.Millisecond {
		t.Fatalf("%d queued settles waited %v: the count should end the deferral", 100, waited)
	}
	must(t, c.Close())
	l.Close()
}

// TestCloseWritesDeferredEntries: Close does not wait out a deferral and
// loses nothing.
func TestCloseWritesDeferredEntries(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(1<<20, CorruptionRefuse)
	opts.DeferrableWaitMax = time.Hour
	l, _ := openLog(t, dir, opts)
	rec := &durableRecorder{t: t}
	c := NewCommitter(l, rec.onDurable)
	must(t, c.Submit(ackEntries(1, 4)))
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the deferral")
	}
	if rec.last.Load() != 4 {
		t.Fatalf("durable up to %d after Close, want 4", rec.last.Load())
	}
	l.Close()
	l, recovered := openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, recovered.Entries, ackEntries(1, 4))
}
