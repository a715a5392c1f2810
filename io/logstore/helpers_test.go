package logstore

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
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
	l, rec, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	loadStored(t, dir, rec.Entries)
	return l, rec
}

// loadStored reads the stored payloads of recovered entries back into
// them, through a PayloadReader, so tests compare them with what was
// written; it checks that each came back stored.
func loadStored(t testing.TB, dir string, entries []core.Entry) {
	t.Helper()
	r := NewPayloadReader(dir)
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

// entryGen makes entries of every kind, with bodies, headers and targets.
type entryGen struct {
	rng        *rand.Rand
	epoch      uint64
	payloadMax int
}

func newEntryGen(seed uint64, payloadMax int) *entryGen {
	return &entryGen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), epoch: 1, payloadMax: payloadMax}
}

func (g *entryGen) entries(firstIndex uint64, count int) []core.Entry {
	out := make([]core.Entry, count)
	for i := range out {
		out[i] = g.entry(firstIndex + uint64(i))
	}
	return out
}

func (g *entryGen) entry(index uint64) core.Entry {
	if g.rng.IntN(50) == 0 {
		g.epoch++ // epochs only move forward
	}
	e := core.Entry{Epoch: g.epoch, Index: index, Offset: g.rng.Uint64N(1 << 40)}
	target := &core.DLQTarget{Topic: "dead", Group: fmt.Sprintf("g%d", g.rng.IntN(9))}
	switch g.rng.IntN(10) {
	case 0:
		e.Kind = core.EntryDeclare
		e.Settings = &core.QueueSettings{DLQ: core.DLQPolicy{Kind: core.DLQCustom, Target: *target}, MaxRetries: 7, DefaultTTLMs: 60_000}
	case 1:
		e.Kind, e.Target = core.EntryGlobalDLQ, target
	case 2, 3, 4, 5:
		e.Kind = core.EntryPublish
		e.ExpiresAtMs, e.AtMs = g.rng.Int64N(1<<40), g.rng.Int64N(1<<40)
		e.Body = g.body()
	case 6:
		e.Kind, e.Tag, e.AtMs = core.EntryLease, g.rng.Uint64(), g.rng.Int64N(1<<40)
	case 7:
		e.Kind, e.Cause, e.Retries, e.AtMs = core.EntryRequeue, core.CauseNack, g.rng.Uint32N(9), g.rng.Int64N(1<<40)
	case 8:
		e.Kind, e.Cause, e.AtMs, e.Target = core.EntryDeadLetter, uint8(core.ReasonTerminalNack), g.rng.Int64N(1<<40), target
	default:
		e.Kind = core.EntryAck
	}
	return e
}

func (g *entryGen) body() *core.Body {
	b := &core.Body{PublishedMs: g.rng.Int64N(1 << 40), ReceivedMs: g.rng.Int64N(1 << 40)}
	if n := g.rng.IntN(g.payloadMax + 1); n > 0 {
		b.Payload = make([]byte, n)
		for i := range b.Payload {
			b.Payload[i] = byte(g.rng.Uint32())
		}
	}
	for i := range g.rng.IntN(4) {
		b.Headers = append(b.Headers, core.Header{Key: fmt.Sprintf("k%d", i), Value: fmt.Sprintf("v%d", g.rng.IntN(1000))})
	}
	if g.rng.IntN(3) == 0 {
		b.ContentType = core.ContentType{Kind: core.ContentCustom, Custom: "application/x-test"}
	}
	return b
}

// publishEntries makes count publish entries with payloadBytes each.
func publishEntries(firstIndex uint64, count, payloadBytes int) []core.Entry {
	out := make([]core.Entry, count)
	payload := bytes.Repeat([]byte{0xAB}, payloadBytes)
	body := &core.Body{Payload: payload, Headers: []core.Header{{Key: "h", Value: "v"}}}
	for i := range out {
		index := firstIndex + uint64(i)
		out[i] = core.Entry{Epoch: 1, Index: index, Kind: core.EntryPublish, Offset: index - 1, Body: body}
	}
	return out
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

// sameEntries compares entries by their encoding, which is deterministic.
func sameEntries(t testing.TB, got, want []core.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(core.AppendEntry(nil, &got[i]), core.AppendEntry(nil, &want[i])) {
			t.Fatalf("entry %d (index %d) differs:\n got %+v\nwant %+v", i, want[i].Index, got[i], want[i])
		}
	}
}

func segmentsOf(t testing.TB, dir string) []segmentFile {
	t.Helper()
	listing, err := listDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return listing.segments
}

// copyDir copies a log directory (flat) into a new temp directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	names, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(src, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, n.Name()), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// dirDigest hashes every file name and content, to show nothing changed.
func dirDigest(t testing.TB, dir string) string {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].Name() < names[j].Name() })
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", n.Name(), len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// frameStarts returns the byte offset of every frame in a segment file, and
// the file's size last.
func frameStarts(t testing.TB, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
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
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[offset] ^= 0x5A
	if err := os.WriteFile(path, b, 0o640); err != nil {
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

// atEpoch stamps entries with epoch (to follow on from a log's last entry).
func atEpoch(entries []core.Entry, epoch uint64) []core.Entry {
	for i := range entries {
		entries[i].Epoch = epoch
	}
	return entries
}
