package storage

import (
	"encoding/binary"
	"hash/crc32"
	"path/filepath"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// Review findings 10 and 11: unsynced pages reach the disk in any order, so
// the last rounds may come back with holes (zeroed sectors) before records
// that did get there: torn, cut. Damage at or below a synced mark (the index
// the log was synced to when a later round was written) is refused.

// roundsLog writes three rounds of 20 inline records (about 3 KiB each) in
// one segment: A, then B, then C; syncBeforeC says B was synced before C was
// appended (C's synced mark is then 40, else 20). It returns the entries and
// the frame starts of the segment.
func roundsLog(t *testing.T, dir string, opts Options, syncBeforeC bool) ([]core.Entry, segmentFile, []int) {
	t.Helper()
	l, _ := openLog(t, dir, opts)
	all := publishEntries(1, 60, 100)
	appendSync(t, l, all[:20])
	must(t, l.Append(all[20:40]))
	if syncBeforeC {
		must(t, l.Sync())
	}
	appendSync(t, l, all[40:])
	must(t, l.Close())
	segs := segmentsOf(t, dir)
	if len(segs) != 1 {
		t.Fatalf("want one segment, got %v", segs)
	}
	return all, segs[0], frameStarts(t, filepath.Join(dir, segs[0].name))
}

// zeroRange zeroes bytes [from, to) of a file and returns the index of the
// first record it touches.
func zeroRange(t *testing.T, path string, starts []int, firstIndex uint64, from, to int) uint64 {
	t.Helper()
	b, err := tfs.ReadFile(path)
	must(t, err)
	clear(b[from:to])
	must(t, tfs.WriteFile(path, b, 0o640))
	for k := range starts[:len(starts)-1] {
		if starts[k+1] > from {
			return firstIndex + uint64(k)
		}
	}
	t.Fatal("no record at the hole")
	return 0
}

// holeInRound zeroes the first aligned sector wholly inside the records of
// round r (0, 1, 2: A, B, C), after its first record, with records of the
// round after it.
func holeInRound(t *testing.T, dir string, seg segmentFile, starts []int, r int) uint64 {
	t.Helper()
	from, to := starts[20*r+1], starts[20*r+18]
	s := (from + holeSectorBytes - 1) / holeSectorBytes * holeSectorBytes
	if s+holeSectorBytes > to {
		t.Fatalf("round %d [%d,%d) holds no whole sector", r, from, to)
	}
	return zeroRange(t, filepath.Join(dir, seg.name), starts, seg.firstIndex, s, s+holeSectorBytes)
}

// TestHoleInLastRoundIsTorn: a zeroed sector in the last round, records of
// that round after it: pages written back out of order, torn, cut (under
// CorruptionRefuse). Before the fix it was refused as corruption.
func TestHoleInLastRoundIsTorn(t *testing.T) {
	opts := testOptions(64<<10, CorruptionRefuse)
	dir := t.TempDir()
	all, seg, starts := roundsLog(t, dir, opts, true)
	bad := holeInRound(t, dir, seg, starts, 2)
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != bad {
		t.Fatalf("hole at record %d: cut %+v", bad, rec.Cut)
	}
	sameEntries(t, rec.Entries, all[:bad-1])
}

// TestHoleFromDurableEndIsTorn: the page holding the end of the synced
// bytes never rewritten: zeros from the last round's first record to the
// next sector boundary, the rest of the round there. Torn.
func TestHoleFromDurableEndIsTorn(t *testing.T) {
	opts := testOptions(64<<10, CorruptionRefuse)
	dir := t.TempDir()
	all, seg, starts := roundsLog(t, dir, opts, true)
	from := starts[40]
	boundary := (from/holeSectorBytes + 1) * holeSectorBytes
	bad := zeroRange(t, filepath.Join(dir, seg.name), starts, seg.firstIndex, from, boundary)
	if bad != 41 {
		t.Fatalf("hole at record %d", bad)
	}
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != 41 {
		t.Fatalf("cut %+v", rec.Cut)
	}
	sameEntries(t, rec.Entries, all[:40])
}

// TestHoleUnderRoundMarkRefused: the same hole in round B, which was synced
// before C was written (C's first record says so): damage to durable
// records, refused with nothing changed; cut, not torn, under
// CorruptionTruncate. Without the synced marks the hole would read as torn.
func TestHoleUnderRoundMarkRefused(t *testing.T) {
	opts := testOptions(64<<10, CorruptionRefuse)
	dir := t.TempDir()
	all, seg, starts := roundsLog(t, dir, opts, true)
	bad := holeInRound(t, dir, seg, starts, 1)
	before := dirDigest(t, dir)
	_, _, err := Open(testEnv, dir, opts)
	if ce := asCorruption(t, err); ce.Cut.Index != bad || ce.Cut.Torn {
		t.Fatalf("hole at record %d: reported %+v", bad, ce.Cut)
	}
	if dirDigest(t, dir) != before {
		t.Fatal("a refused open changed the files")
	}
	l, rec := openLog(t, dir, testOptions(64<<10, CorruptionTruncate))
	defer l.Close()
	if !rec.TruncatedTail || rec.Cut.Torn || rec.Cut.Index != bad {
		t.Fatalf("truncated with %+v", rec.Cut)
	}
	sameEntries(t, rec.Entries, all[:bad-1])
}

// TestHoleInUnsyncedEarlierRoundIsTorn: B appended and C after it with no
// Sync between (C's mark is 20): a hole in B, records of B and C after it,
// is unsynced pages out of order too. Torn.
func TestHoleInUnsyncedEarlierRoundIsTorn(t *testing.T) {
	opts := testOptions(64<<10, CorruptionRefuse)
	dir := t.TempDir()
	all, seg, starts := roundsLog(t, dir, opts, false)
	bad := holeInRound(t, dir, seg, starts, 1)
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != bad {
		t.Fatalf("hole at record %d: cut %+v", bad, rec.Cut)
	}
	sameEntries(t, rec.Entries, all[:bad-1])
}

// TestRecordLogHoleRefused: the record log writes no synced marks, so a
// zeroed sector with intact records after it is corruption there.
func TestRecordLogHoleRefused(t *testing.T) {
	dir := t.TempDir()
	opts := DefaultRecordLogOptions()
	opts.SegmentSizeBytes = 64 << 10
	rl, _ := openRecordLog(t, dir, opts)
	all := makeRecords(1, 100) // about 4 KiB
	must(t, rl.Append(all))
	must(t, rl.Close())
	seg := tailWithRecords(t, dir)
	starts := frameStarts(t, filepath.Join(dir, seg.name))
	bad := zeroRange(t, filepath.Join(dir, seg.name), starts, seg.firstIndex, 2*holeSectorBytes, 3*holeSectorBytes)
	if _, _, err := OpenRecordLog(testEnv, dir, opts); asCorruption(t, err).Cut.Index != bad {
		t.Fatalf("hole at record %d: reported %v", bad, err)
	}
}

// TestSyncedMarkRecord: a synced mark reads back from inline and blob
// records alike, does not change the entry, and one at or above its
// record's own index is not what Append writes (undecodable).
func TestSyncedMarkRecord(t *testing.T) {
	e := publishEntries(9, 1, 10)[0]
	plain := appendRecord(nil, &e, 0)
	marked := appendRecord(nil, &e, 8)
	if recordSyncedMark(plain, 9) != 0 || recordSyncedMark(marked, 9) != 8 || len(marked) != len(plain)+syncedMarkBytes {
		t.Fatalf("marks %d %d, sizes %d %d", recordSyncedMark(plain, 9), recordSyncedMark(marked, 9), len(plain), len(marked))
	}
	for _, record := range [][]byte{plain, marked} {
		got, _, _, reason := checkRecord(record, 9, 1, false)
		if index, ok := entryRecordIndex(record); reason != CutNone || !ok || index != 9 {
			t.Fatalf("reason %v, claimed index %d %v", reason, index, ok)
		}
		sameEntries(t, []core.Entry{got}, []core.Entry{e})
	}
	payload := make([]byte, 300)
	blob := core.Entry{Epoch: 1, Index: 9, Kind: core.EntryPublish, Offset: 8, Body: &core.Body{Payload: payload}}
	ref := blobRef{fileID: 9, lengthBytes: 300, crc: 1, roundLastIndex: 9}
	record := appendBlobRecord(nil, &blob, ref, &blobScratch{}, 5)
	if _, got, isBlob, reason := checkRecord(record, 9, 1, false); reason != CutNone || !isBlob || got != ref || recordSyncedMark(record, 9) != 5 {
		t.Fatalf("blob record: %v %v %+v", reason, isBlob, got)
	}
	if index, ok := entryRecordIndex(record); !ok || index != 9 {
		t.Fatalf("blob record claims %d %v", index, ok)
	}
	// A mark of the record's own index, CRC recomputed.
	binary.BigEndian.PutUint64(marked[recordHeaderBytes+1:], 9)
	binary.BigEndian.PutUint32(marked, crc32.Checksum(marked[recordHeaderBytes:], castagnoli))
	if _, _, _, reason := checkRecord(marked, 9, 1, false); reason != CutUndecodable || recordSyncedMark(marked, 9) != 0 {
		t.Fatalf("a mark at its own index: %v", reason)
	}
}
