package storage

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
)

func openRecordLog(t testing.TB, dir string, opts RecordLogOptions) (*RecordLog, RecordLogRecovered) {
	t.Helper()
	rl, rec, err := OpenRecordLog(testEnv, dir, opts)
	if err != nil {
		t.Fatalf("open record log %s: %v", dir, err)
	}
	return rl, rec
}

func makeRecords(first uint64, count int) []Record {
	out := make([]Record, count)
	for i := range out {
		index := first + uint64(i)
		out[i] = Record{Index: index, Data: []byte(fmt.Sprintf("record %d %s", index, bytes.Repeat([]byte{'x'}, int(index%37))))}
	}
	return out
}

func sameRecords(t testing.TB, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Index != want[i].Index || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Fatalf("record %d: got %d %q, want %d %q", i, got[i].Index, got[i].Data, want[i].Index, want[i].Data)
		}
	}
}

func smallRecordOptions() RecordLogOptions {
	opts := DefaultRecordLogOptions()
	opts.SegmentSizeBytes = 1 << 10
	return opts
}

// TestRecordLogRoundTrip: records across several segments, a snapshot in
// the middle, more records: reopening gives the snapshot and exactly the
// records after it; appending goes on at the next index.
func TestRecordLogRoundTrip(t *testing.T) {
	dir := t.TempDir()
	rl, rec := openRecordLog(t, dir, smallRecordOptions())
	if rec.Snapshot != nil || len(rec.Records) != 0 || rl.LastIndex() != 0 {
		t.Fatalf("fresh log: %+v, last %d", rec, rl.LastIndex())
	}
	all := makeRecords(1, 200)
	for i := 0; i < 150; i += 10 {
		must(t, rl.Append(all[i:i+10]))
		must(t, rl.Sync())
	}
	if err := rl.SaveSnapshot(151, []byte("too far")); err == nil {
		t.Fatal("a snapshot beyond the synced index was accepted")
	}
	must(t, rl.SaveSnapshot(120, []byte("state at 120")))
	must(t, rl.Append(all[150:]))
	must(t, rl.Close())
	if len(segmentsOf(t, dir)) < 2 {
		t.Fatal("want several segments")
	}
	rl, rec = openRecordLog(t, dir, smallRecordOptions())
	if string(rec.Snapshot) != "state at 120" || rec.SnapshotIndex != 120 || rec.TruncatedTail {
		t.Fatalf("snapshot %q at %d, cut %v", rec.Snapshot, rec.SnapshotIndex, rec.TruncatedTail)
	}
	sameRecords(t, rec.Records, all[120:])
	if err := rl.Append(makeRecords(202, 1)); err == nil {
		t.Fatal("a gap was accepted")
	}
	must(t, rl.Append(makeRecords(201, 1)))
	must(t, rl.Close())
}

// TestRecordLogTornTail: the last record cut at every byte, or flipped, is
// a torn tail: trimmed, every earlier record kept.
func TestRecordLogTornTail(t *testing.T) {
	master := t.TempDir()
	rl, _ := openRecordLog(t, master, smallRecordOptions())
	all := makeRecords(1, 30)
	must(t, rl.Append(all))
	must(t, rl.Close())
	tail := tailWithRecords(t, master)
	starts := frameStarts(t, filepath.Join(master, tail.name))
	lastStart, end := starts[len(starts)-2], starts[len(starts)-1]
	for cut := lastStart + 1; cut < end; cut++ {
		dir := copyDir(t, master)
		must(t, tfs.Truncate(filepath.Join(dir, tail.name), int64(cut)))
		rl, rec := openRecordLog(t, dir, smallRecordOptions())
		if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != 30 {
			t.Fatalf("cut at %d: %+v", cut, rec.Cut)
		}
		sameRecords(t, rec.Records, all[:29])
		must(t, rl.Close())
		must(t, tfs.RemoveAll(dir))
	}
	dir := copyDir(t, master)
	flipByte(t, filepath.Join(dir, tail.name), end-2)
	rl, rec := openRecordLog(t, dir, smallRecordOptions())
	defer rl.Close()
	if !rec.Cut.Torn || rec.Cut.Reason != CutChecksum {
		t.Fatalf("flipped last record: %+v", rec.Cut)
	}
	sameRecords(t, rec.Records, all[:29])
}

// TestRecordLogCorruptionRefused: a flipped byte in an earlier record is
// corruption: refused with nothing changed, or cut under CorruptionTruncate.
func TestRecordLogCorruptionRefused(t *testing.T) {
	dir := t.TempDir()
	rl, _ := openRecordLog(t, dir, smallRecordOptions())
	all := makeRecords(1, 30)
	must(t, rl.Append(all))
	must(t, rl.Close())
	seg := segmentsOf(t, dir)[0]
	starts := frameStarts(t, filepath.Join(dir, seg.name))
	flipByte(t, filepath.Join(dir, seg.name), starts[3]+14) // record 4's data
	before := dirDigest(t, dir)
	if _, _, err := OpenRecordLog(testEnv, dir, smallRecordOptions()); asCorruption(t, err).Cut.Index != 4 {
		t.Fatalf("reported %v", err)
	}
	if dirDigest(t, dir) != before {
		t.Fatal("a refused open changed the files")
	}
	opts := smallRecordOptions()
	opts.OnCorruption = CorruptionTruncate
	rl, rec := openRecordLog(t, dir, opts)
	defer rl.Close()
	sameRecords(t, rec.Records, all[:3])
}
