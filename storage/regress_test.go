package storage

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/fibril-go/fibril/storage/simfs"
)

// Regression tests for the two defects the durability property found.

// TestUnsyncedAppendsThenPowerLoss: several Appends with no Sync between
// them (blob files created, segments rolled by tidwall, which fsyncs the
// finished ones), then a power loss. Nothing was reported durable, so
// recovery must cut whatever came back, never refuse it: before the fix,
// a later round's records could reach the disk while an earlier round's
// blob file name did not, which reads as damage.
func TestUnsyncedAppendsThenPowerLoss(t *testing.T) {
	simOnly(t)
	opts := testOptions(2<<10, CorruptionRefuse)
	for seed := uint64(1); seed <= 60; seed++ {
		fs, env := newCrashableEnv(seed, simfs.Options{})
		dir := fmt.Sprintf("/u%d", seed)
		l, _, err := Open(env, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		gen := newEntryGen(seed, 700)
		next := uint64(1)
		for round := range 5 {
			batch := atEpoch(gen.Entries(next, 1+2*round), 1)
			must(t, l.Append(batch))
			next += uint64(len(batch))
		}
		fs.PowerLoss()
		if _, _, err := Open(env, dir, opts); err != nil {
			t.Fatalf("seed %d: nothing was durable, yet recovery refused: %v", seed, err)
		}
	}
}

// TestTornTailWithJunkSector: the last write cut inside its last record
// and followed by one sector of zeros or garbage (the file's size reached
// the disk, its data did not), so that the damaged record ends before the
// end of the file: a torn tail, trimmed. Before the fix it was refused as
// corruption.
func TestTornTailWithJunkSector(t *testing.T) {
	opts := testOptions(64<<10, CorruptionRefuse)
	for _, junk := range [][]byte{make([]byte, 512), bytes.Repeat([]byte{0x93, 0x05, 0xFF, 0x00}, 128)} {
		dir := t.TempDir()
		l, _ := openLog(t, dir, opts)
		all := publishEntries(1, 10, 100) // inline records of ~150 bytes
		appendSync(t, l, all)
		must(t, l.Close())
		seg := segmentsOf(t, dir)[0]
		path := filepath.Join(dir, seg.name)
		starts := frameStarts(t, path)
		data, err := tfs.ReadFile(path)
		must(t, err)
		// Record 10 keeps its first 20 bytes, then the junk.
		torn := append(append([]byte(nil), data[:starts[9]+20]...), junk...)
		must(t, tfs.WriteFile(path, torn, 0o640))
		l, rec := openLog(t, dir, opts)
		if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != 10 {
			t.Fatalf("junk %x...: cut %+v", junk[:4], rec.Cut)
		}
		sameEntries(t, rec.Entries, all[:9])
		must(t, l.Close())
	}
	// A damaged record with intact records after it is still corruption.
	dir := t.TempDir()
	l, _ := openLog(t, dir, opts)
	appendSync(t, l, publishEntries(1, 10, 100))
	must(t, l.Close())
	seg := segmentsOf(t, dir)[0]
	starts := frameStarts(t, filepath.Join(dir, seg.name))
	flipByte(t, filepath.Join(dir, seg.name), starts[7]+30)
	if _, _, err := Open(testEnv, dir, opts); asCorruption(t, err).Cut.Index != 8 {
		t.Fatalf("reported %v", err)
	}
}
