package logstore

import (
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/storage/storagetest"
)

// The Committer's tests run over the OS only (the shell is production
// code); storage's suite runs the log itself over every backend.

func testOptions(segmentSizeBytes int, policy CorruptionPolicy) Options {
	opts := DefaultOptions()
	opts.SegmentSizeBytes = segmentSizeBytes
	opts.BlobFileSizeBytes = int64(segmentSizeBytes)
	opts.OnCorruption = policy
	return opts
}

func openLog(t testing.TB, dir string, opts Options) (*Log, Recovered) {
	t.Helper()
	l, rec, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	loadStored(t, dir, rec.Entries)
	return l, rec
}

// loadStored reads the stored payloads of recovered entries back into them.
func loadStored(t testing.TB, dir string, entries []core.Entry) {
	t.Helper()
	r := NewPayloadReader(dir)
	defer r.Close()
	for i := range entries {
		e := &entries[i]
		if e.Body == nil || !e.Body.IsStored() {
			continue
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

func appendSync(t testing.TB, l *Log, entries []core.Entry) {
	t.Helper()
	must(t, l.Append(entries))
	must(t, l.Sync())
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newEntryGen(seed uint64, payloadMax int) *storagetest.EntryGen {
	return storagetest.NewEntryGen(seed, payloadMax)
}

func publishEntries(firstIndex uint64, count, payloadBytes int) []core.Entry {
	return storagetest.PublishEntries(firstIndex, count, payloadBytes)
}

func sameEntries(t testing.TB, got, want []core.Entry) {
	t.Helper()
	storagetest.SameEntries(t, got, want)
}

func atEpoch(entries []core.Entry, epoch uint64) []core.Entry {
	return storagetest.AtEpoch(entries, epoch)
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
