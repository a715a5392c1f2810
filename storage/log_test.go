package storage

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
)

func TestFreshLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "p0") // Open creates it
	l, rec := openLog(t, dir, DefaultOptions())
	if l.FirstIndex() != 1 || l.LastIndex() != 0 || l.SyncedIndex() != 0 {
		t.Fatalf("fresh log: first %d last %d synced %d", l.FirstIndex(), l.LastIndex(), l.SyncedIndex())
	}
	if rec.Snapshot != nil || len(rec.Entries) != 0 || rec.TruncatedTail || rec.ResetLog {
		t.Fatalf("fresh log recovered %+v", rec)
	}
	if err := l.Append(nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Syncs != 0 || s.Batches != 0 {
		t.Fatalf("nothing to write still wrote: %+v", s)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != ErrClosed {
		t.Fatalf("second close: %v", err)
	}
}

// TestRoundTrip appends entries of every kind in batches of every size over
// many segments, reopens, and gets them back byte for byte.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(16<<10, CorruptionRefuse)
	opts.BatchEntriesMax = 37 // so Append splits some inputs
	l, _ := openLog(t, dir, opts)
	gen := newEntryGen(1, 700)
	var all []core.Entry
	for len(all) < 3000 {
		batch := gen.Entries(l.LastIndex()+1, 1+gen.Rng.IntN(120))
		if err := l.Append(batch); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch...)
		if gen.Rng.IntN(3) == 0 {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if l.LastIndex() != uint64(len(all)) {
		t.Fatalf("last index %d, appended %d", l.LastIndex(), len(all))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(segmentsOf(t, dir)); n < 10 {
		t.Fatalf("only %d segments: the test should span many", n)
	}

	l, rec := openLog(t, dir, opts)
	sameEntries(t, rec.Entries, all)
	if rec.TruncatedTail || l.FirstIndex() != 1 || l.LastIndex() != uint64(len(all)) || l.SyncedIndex() != l.LastIndex() {
		t.Fatalf("reopen: truncated %v first %d last %d synced %d", rec.TruncatedTail, l.FirstIndex(), l.LastIndex(), l.SyncedIndex())
	}
	more := gen.Entries(l.LastIndex()+1, 500)
	appendSync(t, l, more)
	all = append(all, more...)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rec = openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, rec.Entries, all)
}

// TestSegmentMirror checks mirrorSegmentRolls against the directory after
// every append: segments roll exactly when the mirror says, and the tail's
// size is the mirror's, so Sync fsyncs the directory when it must.
func TestSegmentMirror(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(1500, CorruptionRefuse)
	opts.BatchEntriesMax = 5
	l, _ := openLog(t, dir, opts)
	defer l.Close()
	gen := newEntryGen(2, 900)
	segments := len(segmentsOf(t, dir))
	for round := range 400 {
		rollsBefore := l.Stats().SegmentRolls
		if err := l.Append(gen.Entries(l.LastIndex()+1, 1+gen.Rng.IntN(12))); err != nil {
			t.Fatal(err)
		}
		rolled := int(l.Stats().SegmentRolls - rollsBefore)
		files := segmentsOf(t, dir)
		if len(files) != segments+rolled {
			t.Fatalf("round %d: %d segment files, mirror expects %d", round, len(files), segments+rolled)
		}
		if tail := files[len(files)-1]; tail.sizeBytes != int64(l.tailSegmentBytes) {
			t.Fatalf("round %d: tail %s holds %d bytes, mirror says %d", round, tail.name, tail.sizeBytes, l.tailSegmentBytes)
		}
		if rolled > 0 && !l.dirSyncPending {
			t.Fatalf("round %d: a segment appeared but no directory fsync is pending", round)
		}
		segments = len(files)
		if round%3 == 0 {
			dirSyncs := l.Stats().DirSyncs
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if l.dirSyncPending || (rolled > 0 && l.Stats().DirSyncs != dirSyncs+1) {
				t.Fatalf("round %d: sync left the directory unsynced", round)
			}
		}
	}
	if segments < 50 {
		t.Fatalf("only %d segments", segments)
	}
}

func TestAppendAssertsContiguity(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), DefaultOptions())
	defer l.Close()
	appendSync(t, l, publishEntries(1, 3, 10))
	assertPanics(t, "gap", func() { l.Append(publishEntries(5, 1, 10)) })
	back := publishEntries(4, 1, 10)
	back[0].Epoch = 0
	assertPanics(t, "epoch", func() { l.Append(back) })
}

func assertPanics(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("%s: no panic", what)
		}
		if s, ok := r.(string); !ok || !strings.Contains(s, "invariant violated") {
			t.Fatalf("%s: unexpected panic %v", what, r)
		}
	}()
	fn()
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultOptions()
	bad.OnCorruption = 0
	if _, _, err := Open(testEnv, t.TempDir(), bad); err == nil {
		t.Fatal("open accepted a zero corruption policy")
	}
}

// TestRecordSizeEstimate: the Committer's round sizing errs high, by little.
func TestRecordSizeEstimate(t *testing.T) {
	gen := newEntryGen(12, 3000)
	for i, e := range gen.Entries(1, 2000) {
		actual := len(appendRecord(nil, &e))
		estimate := recordSizeBytesEstimate(&e)
		if estimate < actual || estimate > actual+128 {
			t.Fatalf("entry %d (kind %d): estimate %d, actual %d", i, e.Kind, estimate, actual)
		}
	}
}
