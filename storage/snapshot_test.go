package storage

import (
	"bytes"
	"errors"
	"github.com/fibril-go/fibril/storage/fsys"
	"path/filepath"
	"testing"
)

// writePublishes makes a log of count 1 KiB publishes and leaves it open.
func writePublishes(t *testing.T, dir string, opts Options, count int) *Log {
	t.Helper()
	l, _ := openLog(t, dir, opts)
	for l.LastIndex() < uint64(count) {
		appendSync(t, l, publishEntries(l.LastIndex()+1, min(100, count-int(l.LastIndex())), 1024))
	}
	return l
}

func sizeBytes(t testing.TB, l *Log) int64 {
	t.Helper()
	n, err := l.SizeBytes()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSnapshotTruncatesAndRecovers(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	l := writePublishes(t, dir, opts, 2000)
	before := sizeBytes(t, l)
	state := bytes.Repeat([]byte("state"), 1000)
	if err := l.SaveSnapshot(1500, state, 0); err != nil {
		t.Fatal(err)
	}
	must(t, l.runner.Wait()) // blob files go in the background
	after := sizeBytes(t, l)
	// 1500 records of about 1.1 KiB went, 5 KB of snapshot came.
	if before-after < 1500*1024 {
		t.Fatalf("disk use %d -> %d bytes: the truncation freed too little", before, after)
	}
	if l.FirstIndex() != 1501 || l.SnapshotIndex() != 1500 || segmentsOf(t, dir)[0].firstIndex != 1501 {
		t.Fatalf("first %d snapshot %d segments %v", l.FirstIndex(), l.SnapshotIndex(), segmentsOf(t, dir))
	}
	appendSync(t, l, publishEntries(2001, 100, 1024))
	l.Close()

	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if !bytes.Equal(rec.Snapshot, state) || rec.SnapshotIndex != 1500 || rec.FinishedTruncation {
		t.Fatalf("snapshot %d bytes at %d, finished %v", len(rec.Snapshot), rec.SnapshotIndex, rec.FinishedTruncation)
	}
	sameEntries(t, rec.Entries, publishEntries(1501, 600, 1024))
	t.Logf("disk bytes: %d before the snapshot, %d after", before, after)
}

// TestSnapshotAtLastIndex empties the log (tidwall AllowEmpty): the next
// entry still gets the next index, across a reopen too.
func TestSnapshotAtLastIndex(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	l := writePublishes(t, dir, opts, 500)
	if err := l.SaveSnapshot(500, []byte("s"), 0); err != nil {
		t.Fatal(err)
	}
	must(t, l.runner.Wait())
	if l.FirstIndex() != 501 || l.LastIndex() != 500 {
		t.Fatalf("first %d last %d", l.FirstIndex(), l.LastIndex())
	}
	if n := sizeBytes(t, l); n > 1024 {
		t.Fatalf("%d bytes left after truncating every record", n)
	}
	l.Close()
	l, rec := openLog(t, dir, opts)
	if len(rec.Entries) != 0 || rec.SnapshotIndex != 500 || l.FirstIndex() != 501 || l.LastIndex() != 500 {
		t.Fatalf("reopen: %d entries, snapshot %d, first %d last %d", len(rec.Entries), rec.SnapshotIndex, l.FirstIndex(), l.LastIndex())
	}
	appendSync(t, l, publishEntries(501, 3, 10))
	l.Close()
	l, rec = openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, rec.Entries, publishEntries(501, 3, 10))
}

// TestCrashBetweenSnapshotAndTruncation: the snapshot file is durable but
// the log was never truncated. Open skips the covered entries and finishes
// the truncation.
func TestCrashBetweenSnapshotAndTruncation(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	l := writePublishes(t, dir, opts, 2000)
	l.Close()
	if err := writeSnapshotFile(testFS, dir, 1200, 0, []byte("state at 1200")); err != nil {
		t.Fatal(err)
	}
	l, rec := openLog(t, dir, opts)
	if !rec.FinishedTruncation || string(rec.Snapshot) != "state at 1200" || l.FirstIndex() != 1201 {
		t.Fatalf("finished %v snapshot %q first %d", rec.FinishedTruncation, rec.Snapshot, l.FirstIndex())
	}
	sameEntries(t, rec.Entries, publishEntries(1201, 800, 1024))
	if segs := segmentsOf(t, dir); segs[0].firstIndex != 1201 {
		t.Fatalf("segments %v", segs)
	}
	l.Close()
}

// TestCoveredCorruptionIsSkipped: a bad record that the snapshot covers
// costs nothing, because recovery neither needs it nor keeps it.
func TestCoveredCorruptionIsSkipped(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	writePublishes(t, dir, opts, 300).Close()
	segs := segmentsOf(t, dir)
	seg := segs[0]
	for _, s := range segs {
		if s.firstIndex <= 100 {
			seg = s
		}
	}
	starts := frameStarts(t, filepath.Join(dir, seg.name))
	flipByte(t, filepath.Join(dir, seg.name), starts[100-seg.firstIndex]+30) // index 100
	writeSnapshotFile(testFS, dir, 150, 0, []byte("s"))
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if rec.TruncatedTail || !rec.FinishedTruncation {
		t.Fatalf("%+v", rec)
	}
	sameEntries(t, rec.Entries, publishEntries(151, 150, 1024))
}

// TestLeftoversRemoved: a snapshot .tmp and a tidwall .TEMP left by a crash,
// and a superseded snapshot, are removed; the newest snapshot wins.
func TestLeftoversRemoved(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	l := writePublishes(t, dir, opts, 300)
	l.SaveSnapshot(100, []byte("old"), 0)
	l.Close()
	writeSnapshotFile(testFS, dir, 200, 0, []byte("new"))
	// The old snapshot is back, as if the crash came before its removal.
	tfs.WriteFile(filepath.Join(dir, snapshotName(100)), mustRead(t, filepath.Join(dir, snapshotName(200))), 0o640)
	junk := []string{snapshotName(250) + snapshotTmpSuffix, segmentName(260) + ".START.TEMP"}
	for _, name := range junk {
		tfs.WriteFile(filepath.Join(dir, name), []byte("half written"), 0o640)
	}
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if string(rec.Snapshot) != "new" || rec.SnapshotIndex != 200 || rec.RemovedFiles != 3 {
		t.Fatalf("snapshot %q at %d, removed %d", rec.Snapshot, rec.SnapshotIndex, rec.RemovedFiles)
	}
	for _, name := range append(junk, snapshotName(100)) {
		if _, err := tfs.Stat(filepath.Join(dir, name)); !errors.Is(err, fsys.ErrNotExist) {
			t.Fatalf("%s still there: %v", name, err)
		}
	}
	sameEntries(t, rec.Entries, publishEntries(201, 100, 1024))
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := tfs.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCorruptSnapshotIsAnError(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionTruncate)
	l := writePublishes(t, dir, opts, 300)
	l.SaveSnapshot(100, []byte("some state"), 0)
	l.Close()
	flipByte(t, filepath.Join(dir, snapshotName(100)), snapshotHeaderBytes+2)
	if _, _, err := Open(testEnv, dir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with a corrupt snapshot: %v", err)
	}
}

func TestSnapshotRejectsBadIndex(t *testing.T) {
	l := writePublishes(t, t.TempDir(), testOptions(64<<10, CorruptionRefuse), 10)
	defer l.Close()
	if err := l.SaveSnapshot(11, nil, 0); err == nil {
		t.Fatal("snapshot past the last index accepted")
	}
	if err := l.SaveSnapshot(5, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.SaveSnapshot(5, nil, 0); err == nil {
		t.Fatal("snapshot at the same index accepted")
	}
}

// TestSnapshotSyncsFirst: a snapshot of unsynced entries syncs them first,
// so the snapshot never runs ahead of the durable log.
func TestSnapshotSyncsFirst(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), testOptions(64<<10, CorruptionRefuse))
	defer l.Close()
	if err := l.Append(publishEntries(1, 10, 10)); err != nil {
		t.Fatal(err)
	}
	if err := l.SaveSnapshot(10, nil, 0); err != nil || l.SyncedIndex() != 10 {
		t.Fatalf("err %v synced %d", err, l.SyncedIndex())
	}
}

// TestLogBehindSnapshot: a log that ends before its snapshot (the disk lost
// its end) restarts empty after the snapshot.
func TestLogBehindSnapshot(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	writePublishes(t, dir, opts, 100).Close()
	writeSnapshotFile(testFS, dir, 150, 0, []byte("s"))
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if !rec.ResetLog || len(rec.Entries) != 0 || l.FirstIndex() != 151 || l.LastIndex() != 150 {
		t.Fatalf("reset %v entries %d first %d last %d", rec.ResetLog, len(rec.Entries), l.FirstIndex(), l.LastIndex())
	}
	appendSync(t, l, publishEntries(151, 1, 10))
}

// TestInterruptedTidwallTruncateFront: a crash in the middle of tidwall's
// TruncateFront leaves a .START segment; tidwall finishes the job on open,
// before we scan.
func TestInterruptedTidwallTruncateFront(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(16<<10, CorruptionRefuse)
	writePublishes(t, dir, opts, 200).Close()
	segs := segmentsOf(t, dir)
	seg := segs[len(segs)/2]
	starts := frameStarts(t, filepath.Join(dir, seg.name))
	cutIndex := seg.firstIndex + 3
	rest := mustRead(t, filepath.Join(dir, seg.name))[starts[3]:]
	tfs.WriteFile(filepath.Join(dir, segmentName(cutIndex)+".START"), rest, 0o640)
	writeSnapshotFile(testFS, dir, cutIndex-1, 0, []byte("s"))
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if l.FirstIndex() != cutIndex || rec.FinishedTruncation {
		t.Fatalf("first %d, want %d; finished %v", l.FirstIndex(), cutIndex, rec.FinishedTruncation)
	}
	sameEntries(t, rec.Entries, publishEntries(cutIndex, 200-int(cutIndex)+1, 1024))
}

func TestShouldSnapshot(t *testing.T) {
	cases := []struct {
		entries, live int
		want          bool
	}{
		{100_000, 0, false},
		{100_001, 0, true},
		{100_001, 25_001, false}, // 4*live = 100_004
		{400_000, 100_000, false},
		{400_001, 100_000, true},
	}
	for _, c := range cases {
		if got := ShouldSnapshot(c.entries, c.live); got != c.want {
			t.Errorf("ShouldSnapshot(%d, %d) = %v", c.entries, c.live, got)
		}
	}
}
