package storage

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// writeLog makes a closed log of count mixed entries in small segments and
// returns them.
func writeLog(t testing.TB, dir string, opts Options, count int, seed uint64) []core.Entry {
	t.Helper()
	l, _ := openLog(t, dir, opts)
	gen := newEntryGen(seed, 300)
	var all []core.Entry
	for len(all) < count {
		batch := gen.Entries(l.LastIndex()+1, min(1+gen.Rng.IntN(9), count-len(all)))
		appendSync(t, l, batch)
		all = append(all, batch...)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return all
}

// tailWithRecords returns the tail segment, which must hold records.
func tailWithRecords(t testing.TB, dir string) segmentFile {
	t.Helper()
	segs := segmentsOf(t, dir)
	tail := segs[len(segs)-1]
	if tail.sizeBytes == 0 {
		t.Fatalf("tail segment %s is empty; pick another count", tail.name)
	}
	return tail
}

// TestTornTailEveryOffset cuts the tail segment at every byte of its last
// record, as a crash in the middle of writing it would, and reopens: the
// records before it all come back, the torn one is reported and trimmed,
// and appending continues at its index. This holds under CorruptionRefuse:
// a torn tail is never refused.
func TestTornTailEveryOffset(t *testing.T) {
	const count = 61
	// 2 KiB segments: payloads of 256 bytes and more are in blob files, so
	// 61 records make several segments only at this size.
	opts := testOptions(2<<10, CorruptionRefuse)
	master := t.TempDir()
	all := writeLog(t, master, opts, count, 3)
	if len(segmentsOf(t, master)) < 3 {
		t.Fatal("want several segments, so the torn one is not the only one")
	}
	tail := tailWithRecords(t, master)
	starts := frameStarts(t, filepath.Join(master, tail.name))
	lastStart, end := starts[len(starts)-2], starts[len(starts)-1]
	gen := newEntryGen(99, 50)
	gen.Epoch = all[count-1].Epoch
	for cut := lastStart; cut <= end; cut++ {
		dir := copyDir(t, master)
		if err := tfs.Truncate(filepath.Join(dir, tail.name), int64(cut)); err != nil {
			t.Fatal(err)
		}
		l, rec, err := Open(testEnv, dir, opts)
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		loadStored(t, dir, rec.Entries)
		want := count - 1
		if cut == end {
			want = count
		}
		sameEntries(t, rec.Entries, all[:want])
		torn := cut > lastStart && cut < end
		if rec.TruncatedTail != torn {
			t.Fatalf("cut at %d of [%d,%d]: TruncatedTail %v", cut, lastStart, end, rec.TruncatedTail)
		}
		if torn && (!rec.Cut.Torn || rec.Cut.Index != count || rec.Cut.Reason != CutTornFrame ||
			rec.Cut.OffsetBytes != int64(lastStart) || rec.Cut.DroppedBytes != int64(cut-lastStart) || rec.Cut.Segment != tail.name) {
			t.Fatalf("cut at %d: reported %+v", cut, rec.Cut)
		}
		if l.LastIndex() != uint64(want) {
			t.Fatalf("cut at %d: last index %d, want %d", cut, l.LastIndex(), want)
		}
		next := gen.Entries(uint64(want)+1, 2)
		appendSync(t, l, next)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l, rec = openLog(t, dir, opts)
		sameEntries(t, rec.Entries, append(append([]core.Entry(nil), all[:want]...), next...))
		if rec.TruncatedTail {
			t.Fatalf("cut at %d: a second open cut again", cut)
		}
		l.Close()
		tfs.RemoveAll(dir)
	}
}

// TestTornTailFlippedLastRecord: a complete last frame whose bytes are wrong
// (a write whose pages reached the disk only in part) is a torn tail too.
func TestTornTailFlippedLastRecord(t *testing.T) { checkTornTailFlippedLastRecord(t) }

func checkTornTailFlippedLastRecord(t testing.TB) {
	dir := t.TempDir()
	opts := testOptions(4<<10, CorruptionRefuse)
	all := writeLog(t, dir, opts, 40, 4)
	tail := tailWithRecords(t, dir)
	starts := frameStarts(t, filepath.Join(dir, tail.name))
	flipByte(t, filepath.Join(dir, tail.name), starts[len(starts)-1]-3)
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, rec.Entries, all[:39])
	if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != 40 || rec.Cut.Reason != CutChecksum {
		t.Fatalf("reported %+v", rec.Cut)
	}
}

// TestZeroFilledTail: a file extended but never written (a crash after the
// size reached the disk and before the data did) reads as zeros, which
// tidwall would take for empty entries. We trim them.
func TestZeroFilledTail(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(4<<10, CorruptionRefuse)
	all := writeLog(t, dir, opts, 40, 5)
	tail := tailWithRecords(t, dir)
	f, err := testFS.OpenAppend(filepath.Join(dir, tail.name))
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 4096))
	f.Close()
	l, rec := openLog(t, dir, opts)
	sameEntries(t, rec.Entries, all)
	if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != 41 || rec.Cut.DroppedBytes != 4096 || rec.Cut.DroppedRecords != 4096 {
		t.Fatalf("reported %+v", rec.Cut)
	}
	appendSync(t, l, atEpoch(publishEntries(41, 1, 10), all[39].Epoch))
	l.Close()
}

// corruptMiddle writes a log over several segments and flips a byte in the
// payload of a record in the middle of a middle segment.
func corruptMiddle(t *testing.T, opts Options) (dir string, all []core.Entry, badIndex uint64, badSegment string) {
	t.Helper()
	dir = t.TempDir()
	all = writeLog(t, dir, opts, 300, 6)
	segs := segmentsOf(t, dir)
	if len(segs) < 4 {
		t.Fatalf("only %d segments", len(segs))
	}
	seg := segs[len(segs)/2]
	starts := frameStarts(t, filepath.Join(dir, seg.name))
	k := (len(starts) - 1) / 2
	flipByte(t, filepath.Join(dir, seg.name), (starts[k]+starts[k+1])/2)
	return dir, all, seg.firstIndex + uint64(k), seg.name
}

func TestCorruptMiddleRefused(t *testing.T) {
	opts := testOptions(4<<10, CorruptionRefuse)
	dir, _, badIndex, badSegment := corruptMiddle(t, opts)
	before := dirDigest(t, dir)
	_, _, err := Open(testEnv, dir, opts)
	ce := asCorruption(t, err)
	if ce.Cut.Index != badIndex || ce.Cut.Torn || ce.Cut.Segment != badSegment || ce.Cut.DroppedBytes == 0 || ce.Cut.DroppedRecords < 2 {
		t.Fatalf("index %d in %s: reported %+v", badIndex, badSegment, ce.Cut)
	}
	if ce.Cut.Reason != CutChecksum && ce.Cut.Reason != CutBadFrame && ce.Cut.Reason != CutTornFrame {
		t.Fatalf("reason %v", ce.Cut.Reason)
	}
	if dirDigest(t, dir) != before {
		t.Fatal("a refused open changed the files")
	}
	t.Logf("refused: %v", err)
}

func TestCorruptMiddleTruncated(t *testing.T) {
	opts := testOptions(4<<10, CorruptionTruncate)
	dir, all, badIndex, badSegment := corruptMiddle(t, opts)
	l, rec := openLog(t, dir, opts)
	sameEntries(t, rec.Entries, all[:badIndex-1])
	if !rec.TruncatedTail || rec.Cut.Torn || rec.Cut.Index != badIndex || rec.Cut.Segment != badSegment {
		t.Fatalf("index %d: reported %+v", badIndex, rec.Cut)
	}
	segs := segmentsOf(t, dir)
	if segs[len(segs)-1].name != badSegment {
		t.Fatalf("segments after the cut remain: %v", segs)
	}
	next := atEpoch(publishEntries(badIndex, 5, 100), all[badIndex-2].Epoch)
	appendSync(t, l, next)
	l.Close()
	l, rec = openLog(t, dir, testOptions(4<<10, CorruptionRefuse))
	defer l.Close()
	sameEntries(t, rec.Entries, append(append([]core.Entry(nil), all[:badIndex-1]...), next...))
}

// TestCorruptLengthPrefix breaks the framing in the middle of a segment, so
// nothing after it in that file can be located. The records before it in
// the same file survive: tidwall's own TruncateBack could not do that (it
// loads the whole segment first, and fails on its framing).
func TestCorruptLengthPrefix(t *testing.T) {
	opts := testOptions(4<<10, CorruptionTruncate)
	dir := t.TempDir()
	all := writeLog(t, dir, opts, 300, 7)
	segs := segmentsOf(t, dir)
	seg := segs[1]
	path := filepath.Join(dir, seg.name)
	starts := frameStarts(t, path)
	k := (len(starts) - 1) / 2
	b, _ := tfs.ReadFile(path)
	copy(b[starts[k]:], bytes.Repeat([]byte{0xFF}, 11)) // an overlong uvarint
	tfs.WriteFile(path, b, 0o640)
	badIndex := seg.firstIndex + uint64(k)

	_, _, err := Open(testEnv, dir, testOptions(4<<10, CorruptionRefuse))
	if ce := asCorruption(t, err); ce.Cut.Reason != CutBadFrame || ce.Cut.Index != badIndex {
		t.Fatalf("reported %+v", ce.Cut)
	}
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, rec.Entries, all[:badIndex-1])
	if l.LastIndex() != badIndex-1 || len(segmentsOf(t, dir)) != 2 {
		t.Fatalf("last %d, segments %v", l.LastIndex(), segmentsOf(t, dir))
	}
}

// TestCorruptTailNotLastRecord: damage in the tail segment with a valid
// record after it is corruption, not a torn write.
func TestCorruptTailNotLastRecord(t *testing.T) {
	opts := testOptions(64<<10, CorruptionRefuse)
	dir := t.TempDir()
	writeLog(t, dir, opts, 100, 8)
	tail := tailWithRecords(t, dir)
	starts := frameStarts(t, filepath.Join(dir, tail.name))
	flipByte(t, filepath.Join(dir, tail.name), starts[50]+6)
	_, _, err := Open(testEnv, dir, opts)
	if ce := asCorruption(t, err); ce.Cut.Index != 51 || ce.Cut.Torn {
		t.Fatalf("reported %+v", ce.Cut)
	}
}

// TestSegmentGap: a segment file missing from the middle (or a name that
// does not follow on) cuts the log where the previous segment ends.
func TestSegmentGap(t *testing.T) {
	opts := testOptions(4<<10, CorruptionRefuse)
	dir := t.TempDir()
	all := writeLog(t, dir, opts, 300, 9)
	segs := segmentsOf(t, dir)
	tfs.Remove(filepath.Join(dir, segs[2].name))
	_, _, err := Open(testEnv, dir, opts)
	if ce := asCorruption(t, err); ce.Cut.Reason != CutSegmentGap || ce.Cut.Index != segs[2].firstIndex || ce.Cut.Segment != segs[3].name {
		t.Fatalf("reported %+v", ce.Cut)
	}
	opts.OnCorruption = CorruptionTruncate
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, rec.Entries, all[:segs[2].firstIndex-1])
	appendSync(t, l, atEpoch(publishEntries(segs[2].firstIndex, 1, 10), all[segs[2].firstIndex-2].Epoch))
}

// TestMissingPrefix: without a snapshot the log must start at 1.
func TestMissingPrefix(t *testing.T) {
	opts := testOptions(4<<10, CorruptionRefuse)
	dir := t.TempDir()
	writeLog(t, dir, opts, 300, 10)
	segs := segmentsOf(t, dir)
	tfs.Remove(filepath.Join(dir, segs[0].name))
	_, _, err := Open(testEnv, dir, opts)
	if ce := asCorruption(t, err); ce.Cut.Reason != CutMissingPrefix || ce.Cut.Index != 1 {
		t.Fatalf("reported %+v", ce.Cut)
	}
	opts.OnCorruption = CorruptionTruncate
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if len(rec.Entries) != 0 || l.FirstIndex() != 1 || l.LastIndex() != 0 || !rec.ResetLog {
		t.Fatalf("first %d last %d, %+v", l.FirstIndex(), l.LastIndex(), rec)
	}
}

// TestIndexMismatch: a valid record in the wrong place (a segment renamed)
// is caught by the index check even though every CRC matches.
func TestIndexMismatch(t *testing.T) {
	opts := testOptions(4<<10, CorruptionRefuse)
	dir := t.TempDir()
	writeLog(t, dir, opts, 310, 11) // 300 would leave the tail empty (payloads in blob files)
	segs := segmentsOf(t, dir)
	last := segs[len(segs)-1]
	// Drop the last record of the segment before the tail and rename the
	// tail to start one index earlier: names follow on, every CRC matches,
	// but the tail's first record says it is one index further on.
	prev := segs[len(segs)-2]
	prevStarts := frameStarts(t, filepath.Join(dir, prev.name))
	tfs.Truncate(filepath.Join(dir, prev.name), int64(prevStarts[len(prevStarts)-2])) // drop prev's last record
	tfs.Rename(filepath.Join(dir, last.name), filepath.Join(dir, segmentName(last.firstIndex-1)))
	_, _, err := Open(testEnv, dir, opts)
	if ce := asCorruption(t, err); ce.Cut.Reason != CutIndexMismatch || ce.Cut.Index != last.firstIndex-1 {
		t.Fatalf("reported %+v", ce.Cut)
	}
}

// TestWholeWrongRecordAtEndIsNotTorn: a last record that passes its checksum
// but holds the wrong index was written whole; it is refused, not trimmed.
func TestWholeWrongRecordAtEndIsNotTorn(t *testing.T) {
	opts := testOptions(64<<10, CorruptionRefuse)
	dir := t.TempDir()
	all := writeLog(t, dir, opts, 20, 13)
	tail := tailWithRecords(t, dir)
	stray := atEpoch(publishEntries(999, 1, 10), all[19].Epoch)[0]
	record := appendRecord(nil, &stray)
	frame := append(binary.AppendUvarint(nil, uint64(len(record))), record...)
	f, _ := testFS.OpenAppend(filepath.Join(dir, tail.name))
	f.Write(frame)
	f.Close()
	_, _, err := Open(testEnv, dir, opts)
	if ce := asCorruption(t, err); ce.Cut.Reason != CutIndexMismatch || ce.Cut.Index != 21 || ce.Cut.Torn {
		t.Fatalf("reported %+v", ce.Cut)
	}
}
