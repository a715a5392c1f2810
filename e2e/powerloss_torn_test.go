package e2e

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/io/logstore"
)

// TestTornGarbageSectorOverRecordsIsCut: a power loss that tears the tail
// segment with a sector of garbage starting inside one record (so that
// record fails its checksum and the bytes after it frame as nothing) is a
// torn tail: the log opens, cut before the spoiled record, and keeps every
// record before it. Without the fix (storage's onlyJunkFollows) recovery
// refuses to open such a log (checksum mismatch with bytes after it), and
// the broker stays down after an ordinary power loss (found by
// TestPowerLossLoop).
func TestTornGarbageSectorOverRecordsIsCut(t *testing.T) {
	for seed := uint64(1); seed <= 32; seed++ {
		dir := filepath.Join(t.TempDir(), "log")
		log, _, err := logstore.Open(dir, logstore.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		const records = 40
		var entries []core.Entry
		for i := uint64(1); i <= records; i++ {
			entries = append(entries, core.Entry{Epoch: 1, Index: i, Kind: core.EntryPublish, Offset: i - 1,
				Body: &core.Body{Payload: bytes.Repeat([]byte{byte(i)}, 40)}})
		}
		if err := log.Append(entries); err != nil {
			t.Fatal(err)
		}
		if err := log.Sync(); err != nil {
			t.Fatal(err)
		}
		log.Close()
		segment := lastSegment(t, dir)
		data, err := os.ReadFile(segment)
		if err != nil {
			t.Fatal(err)
		}
		starts := frameStartsOf(data)
		// Spoil from inside the third-to-last record's body to the end.
		rng := rand.New(rand.NewPCG(seed, 3))
		victim := len(starts) - 3
		from := starts[victim] + 8 + rng.IntN(starts[victim+1]-starts[victim]-8)
		for i := from; i < len(data); i++ {
			data[i] = byte(rng.Uint32())
		}
		if err := os.WriteFile(segment, data, 0o640); err != nil {
			t.Fatal(err)
		}
		log, rec, err := logstore.Open(dir, logstore.DefaultOptions())
		if err != nil {
			t.Fatalf("seed %d: a log whose tail a garbage sector tore does not open: %v", seed, err)
		}
		log.Close()
		if !rec.TruncatedTail || len(rec.Entries) != victim {
			t.Fatalf("seed %d: %d entries back after the cut (want the %d before the spoiled one), truncated %v",
				seed, len(rec.Entries), victim, rec.TruncatedTail)
		}
	}
}

func lastSegment(t *testing.T, dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); len(n) == 20 && n[0] == '0' {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatalf("no segment in %s", dir)
	}
	return filepath.Join(dir, names[len(names)-1])
}

// frameStartsOf lists where each length-prefixed frame of a segment starts
// (and, last, the end).
func frameStartsOf(data []byte) []int {
	var starts []int
	for pos := 0; pos < len(data); {
		size, n := binary.Uvarint(data[pos:])
		if n <= 0 {
			break
		}
		starts = append(starts, pos)
		pos += n + int(size)
	}
	return append(starts, len(data))
}
