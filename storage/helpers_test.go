package storage

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/storage/storagetest"
)

// testOptions are small enough to make several segments from a few
// hundred entries. Blob files rotate at the segment size, so that they too
// come several to a test, and snapshots can reclaim them.
func testOptions(segmentSizeBytes int, policy CorruptionPolicy) Options {
	opts := DefaultOptions()
	opts.SegmentSizeBytes = segmentSizeBytes
	opts.BlobFileSizeBytes = int64(segmentSizeBytes)
	opts.OnCorruption = policy
	return opts
}

func openLog(t testing.TB, dir string, opts Options) (*Log, Recovered) {
	t.Helper()
	l, rec, err := Open(testEnv, dir, opts)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	loadStored(t, dir, rec.Entries)
	return l, rec
}

// loadStored reads the stored payloads of recovered entries back into
// them, through a PayloadReader, so tests compare them with what was
// written; it checks that each came back stored.
func loadStored(t storagetest.TB, dir string, entries []core.Entry) {
	t.Helper()
	r := NewPayloadReader(testFS, dir)
	defer r.Close()
	for i := range entries {
		e := &entries[i]
		if e.Body == nil || !e.Body.IsStored() {
			continue
		}
		if e.Body.Payload != nil {
			t.Fatalf("entry %d: stored body also holds its payload", e.Index)
		}
		payload, err := r.Read(e.Body.Ref)
		if err != nil {
			t.Fatalf("entry %d: read stored payload: %v", e.Index, err)
		}
		loaded := *e.Body
		loaded.Payload, loaded.Ref = append([]byte(nil), payload...), core.PayloadRef{}
		e.Body = &loaded
	}
}

// The entry generators are storagetest's, shared with io/logstore's tests.
type entryGen = storagetest.EntryGen

func newEntryGen(seed uint64, payloadMax int) *entryGen {
	return storagetest.NewEntryGen(seed, payloadMax)
}

func publishEntries(firstIndex uint64, count, payloadBytes int) []core.Entry {
	return storagetest.PublishEntries(firstIndex, count, payloadBytes)
}

func sameEntries(t storagetest.TB, got, want []core.Entry) {
	t.Helper()
	storagetest.SameEntries(t, got, want)
}

func atEpoch(entries []core.Entry, epoch uint64) []core.Entry {
	return storagetest.AtEpoch(entries, epoch)
}

func appendSync(t testing.TB, l *Log, entries []core.Entry) {
	t.Helper()
	if err := l.Append(entries); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := l.Sync(); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

func segmentsOf(t testing.TB, dir string) []segmentFile {
	t.Helper()
	listing, err := listDir(testFS, dir)
	if err != nil {
		t.Fatal(err)
	}
	return listing.segments
}

// copyDir copies a log directory (flat) into a new temp directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := testFS.MkdirAll(dst); err != nil {
		t.Fatal(err)
	}
	names, err := tfs.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := tfs.ReadFile(filepath.Join(src, n.Name))
		if err != nil {
			t.Fatal(err)
		}
		if err := tfs.WriteFile(filepath.Join(dst, n.Name), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// dirDigest hashes every file name and content, to show nothing changed.
func dirDigest(t testing.TB, dir string) string {
	t.Helper()
	names, err := tfs.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].Name < names[j].Name })
	h := sha256.New()
	for _, n := range names {
		b, err := tfs.ReadFile(filepath.Join(dir, n.Name))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", n.Name, len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// frameStarts returns the byte offset of every frame in a segment file, and
// the file's size last.
func frameStarts(t testing.TB, path string) []int {
	t.Helper()
	data, err := tfs.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var starts []int
	pos := 0
	for pos < len(data) {
		f := parseFrame(data[pos:])
		if !f.ok {
			t.Fatalf("%s: bad frame at %d", path, pos)
		}
		starts = append(starts, pos)
		pos += f.totalBytes
	}
	return append(starts, pos)
}

func flipByte(t testing.TB, path string, offset int) {
	t.Helper()
	b, err := tfs.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[offset] ^= 0x5A
	if err := tfs.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

func asCorruption(t testing.TB, err error) *CorruptionError {
	t.Helper()
	var ce *CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("want a *CorruptionError, got %v", err)
	}
	return ce
}

// eventually polls fn until it holds or timeoutMs passes (STYLE §7).
func eventually(t testing.TB, timeoutMs, intervalMs int, fn func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	for !fn() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %d ms", timeoutMs)
		}
		time.Sleep(time.Duration(intervalMs) * time.Millisecond)
	}
}
