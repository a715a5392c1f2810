package storage

import (
	"encoding/binary"
	"path/filepath"
	"testing"
)

// Regression test for review finding 1: damage to a synced record's length
// prefix in the tail segment.

// lengthFlipsPastEOF returns the single bits of the length prefix of the
// frame at start in b whose flip keeps the prefix as wide and makes the
// frame run past the end of b.
func lengthFlipsPastEOF(b []byte, start int) []int {
	_, w := binary.Uvarint(b[start:])
	remaining := len(b) - start
	var bits []int
	for bit := 0; bit < 7*w; bit++ {
		c := append([]byte(nil), b[start:start+w]...)
		c[bit/7] ^= 1 << (bit % 7)
		m, w2 := binary.Uvarint(c)
		if w2 == w && m+uint64(w) > uint64(remaining) {
			bits = append(bits, bit)
		}
	}
	return bits
}

// TestLengthBitFlipInTailIsNotTorn: one flipped bit in the length prefix of
// a synced record in the tail segment makes its frame run past the end of
// the file, which is what a torn write looks like; but intact records with
// later indexes follow it (found by scanning, as the framing is lost), and
// a torn write leaves only a prefix, so this is corruption. Under
// CorruptionRefuse it is refused with nothing changed; under
// CorruptionTruncate it is cut and reported as not torn. Before the fix it
// was cut silently as a torn tail, with every synced record after it.
func TestLengthBitFlipInTailIsNotTorn(t *testing.T) {
	refuse := testOptions(64<<10, CorruptionRefuse)
	truncate := testOptions(64<<10, CorruptionTruncate)
	master := t.TempDir()
	all := writeLog(t, master, refuse, 100, 8) // every record synced
	tail := tailWithRecords(t, master)
	starts := frameStarts(t, filepath.Join(master, tail.name))
	data, err := tfs.ReadFile(filepath.Join(master, tail.name))
	must(t, err)
	tried := 0
	// The last ten records but the last: a single intact record after the
	// damaged one is enough to tell. (Further back, no one bit makes a
	// length reach past the end of the file.)
	for k := len(starts) - 12; k <= len(starts)-3; k++ {
		badIndex := tail.firstIndex + uint64(k)
		for _, bit := range lengthFlipsPastEOF(data, starts[k]) {
			tried++
			dir := copyDir(t, master)
			path := filepath.Join(dir, tail.name)
			c := append([]byte(nil), data...)
			c[starts[k]+bit/7] ^= 1 << (bit % 7)
			must(t, tfs.WriteFile(path, c, 0o640))
			before := dirDigest(t, dir)
			l, rec, err := Open(testEnv, dir, refuse)
			if err == nil {
				l.Close()
				t.Fatalf("record %d, length bit %d: accepted as a torn tail: kept %d of %d synced entries, cut %+v",
					badIndex, bit, len(rec.Entries), len(all), rec.Cut)
			}
			if ce := asCorruption(t, err); ce.Cut.Index != badIndex || ce.Cut.Torn {
				t.Fatalf("record %d, length bit %d: reported %+v", badIndex, bit, ce.Cut)
			}
			if dirDigest(t, dir) != before {
				t.Fatal("a refused open changed the files")
			}
			l, rec = openLog(t, dir, truncate)
			sameEntries(t, rec.Entries, all[:badIndex-1])
			if !rec.TruncatedTail || rec.Cut.Torn || rec.Cut.Index != badIndex {
				t.Fatalf("record %d, length bit %d: truncated with %+v", badIndex, bit, rec.Cut)
			}
			must(t, l.Close())
			tfs.RemoveAll(dir)
		}
	}
	if tried == 0 {
		t.Fatal("no single bit makes a length run off the end")
	}
	t.Logf("%d single-bit length flips refused", tried)
}

// TestRecordLogLengthBitFlipIsNotTorn: the same for the Node's record log,
// which shares the cut rules.
func TestRecordLogLengthBitFlipIsNotTorn(t *testing.T) {
	master := t.TempDir()
	rl, _ := openRecordLog(t, master, smallRecordOptions())
	must(t, rl.Append(makeRecords(1, 30)))
	must(t, rl.Close())
	tail := tailWithRecords(t, master)
	starts := frameStarts(t, filepath.Join(master, tail.name))
	data, err := tfs.ReadFile(filepath.Join(master, tail.name))
	must(t, err)
	tried := 0
	for k := max(0, len(starts)-12); k <= len(starts)-3; k++ {
		badIndex := tail.firstIndex + uint64(k)
		for _, bit := range lengthFlipsPastEOF(data, starts[k]) {
			tried++
			dir := copyDir(t, master)
			c := append([]byte(nil), data...)
			c[starts[k]+bit/7] ^= 1 << (bit % 7)
			must(t, tfs.WriteFile(filepath.Join(dir, tail.name), c, 0o640))
			rl, rec, err := OpenRecordLog(testEnv, dir, smallRecordOptions())
			if err == nil {
				rl.Close()
				t.Fatalf("record %d, length bit %d: accepted as a torn tail: cut %+v", badIndex, bit, rec.Cut)
			}
			if ce := asCorruption(t, err); ce.Cut.Index != badIndex || ce.Cut.Torn {
				t.Fatalf("record %d, length bit %d: reported %+v", badIndex, bit, ce.Cut)
			}
			tfs.RemoveAll(dir)
		}
	}
	if tried == 0 {
		t.Fatal("no single bit makes a length run off the end")
	}
	t.Logf("%d single-bit length flips refused", tried)
}
