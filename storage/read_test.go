package storage

import (
	"errors"
	"fmt"
	"path"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/storage/simfs"
	"github.com/fibril-go/fibril/storage/storagetest"
	"pgregory.net/rapid"
)

// ReadEntries (read.go) over both backends: round trips across segments
// and blob files, after snapshots, of the unsynced tail, of damaged
// records and payloads, after a power loss, and a property over random
// appends, snapshots, reopens and reads.

// readOptions: several segments and blob files from a few hundred entries
// of up to 900-byte payloads (those of at least 256 bytes go to blobs).
func readOptions() Options { return testOptions(2<<10, CorruptionRefuse) }

// readAll reads [from, LastIndex] in calls of at most n entries, checking
// that each call continues where the last stopped.
func readAll(t testing.TB, l *Log, from uint64, n, maxBytes int) []core.Entry {
	t.Helper()
	var out []core.Entry
	for next := from; next <= l.LastIndex(); {
		got, err := l.ReadEntries(next, n, maxBytes)
		if err != nil {
			t.Fatalf("read from %d: %v", next, err)
		}
		if len(got) == 0 || len(got) > n {
			t.Fatalf("read from %d (at most %d, last index %d): %d entries", next, n, l.LastIndex(), len(got))
		}
		out = append(out, got...)
		next += uint64(len(got))
	}
	return out
}

// wantRead is what ReadEntries(from, n, maxBytes) must return of all
// (indexes 1..len(all)): the entries from from on, at most n, stopping
// before maxBytes of payload once one is in.
func wantRead(all []core.Entry, from uint64, n, maxBytes int) []core.Entry {
	if from > uint64(len(all)) {
		return nil
	}
	var out []core.Entry
	total := 0
	for _, e := range all[from-1:] {
		if len(out) == n {
			break
		}
		size := 0
		if e.Body != nil {
			size = len(e.Body.Payload)
		}
		if len(out) > 0 && total+size > maxBytes {
			break
		}
		out = append(out, e)
		total += size
	}
	return out
}

// noStoredBodies: every body ReadEntries returns has its payload resolved.
func noStoredBodies(t storagetest.TB, entries []core.Entry) {
	t.Helper()
	for _, e := range entries {
		if e.Body != nil && e.Body.IsStored() {
			t.Fatalf("entry %d comes back stored (ref %+v)", e.Index, e.Body.Ref)
		}
	}
}

func countFiles(t testing.TB, dir string) (segments, blobs int) {
	t.Helper()
	listing, err := listDir(testFS, dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(listing.segments), len(listing.blobs)
}

func TestReadEntriesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, readOptions())
	gen := newEntryGen(7, 900)
	var all []core.Entry
	for len(all) < 300 {
		batch := gen.Entries(uint64(len(all))+1, 1+len(all)%9)
		appendSync(t, l, batch)
		all = append(all, batch...)
	}
	segments, blobs := countFiles(t, dir)
	stats := l.Stats()
	if segments < 5 || blobs < 5 || stats.BlobBytes == 0 {
		t.Fatalf("want several segments and blob files: %d segments, %d blob files", segments, blobs)
	}
	for _, n := range []int{1, 7, 64, 1000} {
		got := readAll(t, l, 1, n, 1<<30)
		noStoredBodies(t, got)
		sameEntries(t, got, all)
	}
	// Reads anywhere, in any order, with byte limits.
	for i, from := range []uint64{150, 3, 299, 300, 1, 151, 77, 78, 79, 200} {
		n, maxBytes := 1+i*5, []int{0, 500, 1 << 30}[i%3]
		got, err := l.ReadEntries(from, n, maxBytes)
		if err != nil {
			t.Fatalf("read %d+%d: %v", from, n, err)
		}
		sameEntries(t, got, wantRead(all, from, n, maxBytes))
	}
	if got, err := l.ReadEntries(301, 10, 1<<30); err != nil || len(got) != 0 {
		t.Fatalf("read past the last index: %d entries, %v", len(got), err)
	}
	// After a reopen (recovery), the same.
	must(t, l.Close())
	if _, err := l.ReadEntries(1, 1, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("read of a closed log: %v", err)
	}
	l, _ = openLog(t, dir, readOptions())
	defer l.Close()
	sameEntries(t, readAll(t, l, 1, 13, 1<<30), all)
	sameEntries(t, readAll(t, l, 1, 1000, 2000), all)
	if _, err := l.ReadEntries(1, 0, 0); err == nil {
		t.Fatal("a read of no entries is refused")
	}
}

// TestReadEntriesSequentialIsLinear: reading the log front to back in small
// calls lists the directory once and reads each segment byte about once.
func TestReadEntriesSequentialIsLinear(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(16<<10, CorruptionRefuse)
	l, _ := openLog(t, dir, opts)
	defer l.Close()
	const count = 20_000
	for i := uint64(1); i <= count; i += 500 {
		appendSync(t, l, publishEntries(i, 500, 40))
	}
	listing, err := listDir(testFS, dir)
	if err != nil {
		t.Fatal(err)
	}
	var segmentBytes uint64
	for _, seg := range listing.segments {
		segmentBytes += uint64(seg.sizeBytes)
	}
	before := l.Stats()
	got := readAll(t, l, 1, 10, 1<<30)
	if len(got) != count || got[count-1].Index != count {
		t.Fatalf("read %d entries", len(got))
	}
	stats := l.Stats()
	seeks, read := stats.ReadSeeks-before.ReadSeeks, stats.ReadSegmentBytes-before.ReadSegmentBytes
	switches := stats.ReadSegmentSwitches - before.ReadSegmentSwitches
	t.Logf("%d segments, %d bytes; %d seeks, %d switches, %d bytes read", len(listing.segments), segmentBytes, seeks, switches, read)
	if seeks != 1 || switches != uint64(len(listing.segments)-1) {
		t.Fatalf("%d seeks and %d segment switches for one sequential pass over %d segments", seeks, switches, len(listing.segments))
	}
	if read < segmentBytes || read > segmentBytes+segmentBytes/8 {
		t.Fatalf("read %d segment bytes for %d on disk", read, segmentBytes)
	}
}

// TestReadEntriesInterleavedReadersStayCheap: readers at different places in
// the log take turns (as a stream's catching-up subscriptions do). Each gets
// exactly its entries, each has a cursor of its own (placed once), the
// directory is listed about once, and the bytes read stay within a small
// multiple of what they asked for.
func TestReadEntriesInterleavedReadersStayCheap(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, testOptions(256<<10, CorruptionRefuse))
	defer l.Close()
	// A batch's bytes about one fill's chunk (readChunkBytes), as in a
	// stream's reads of 256 records of 1 KiB.
	const count, batch = 4_000, 64
	all := publishEntries(1, count, 1000)
	for i := 0; i < count; i += 500 {
		appendSync(t, l, all[i:i+500])
	}
	// Four readers, each ahead of the next by up to two batches.
	next := []uint64{1 + 3*batch, 1 + 2*batch, 1 + batch, 1}
	before := l.Stats()
	var asked uint64
	for turn := 0; ; turn++ {
		r := turn % len(next)
		if turn%7 == 3 {
			r = (turn / 7) % len(next) // now and then one reader twice
		}
		if next[r] > count {
			done := true
			for _, n := range next {
				done = done && n > count
			}
			if done {
				break
			}
			continue
		}
		got, err := l.ReadEntries(next[r], batch, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, got, wantRead(all, next[r], batch, 1<<30))
		for _, e := range got {
			asked += uint64(len(e.Body.Payload))
		}
		next[r] += uint64(len(got))
	}
	stats := l.Stats()
	listings, read := stats.ReadListings-before.ReadListings, stats.ReadSegmentBytes-before.ReadSegmentBytes
	t.Logf("%d seeks, %d listings, %d bytes read for %d bytes of entries", stats.ReadSeeks-before.ReadSeeks, listings, read, asked)
	if listings > 2 {
		t.Fatalf("%d directory listings for interleaved readers of one log", listings)
	}
	// Four readers, four cursors: each placed once, then read on.
	if seeks := stats.ReadSeeks - before.ReadSeeks; seeks > uint64(len(next)) {
		t.Fatalf("%d seeks for %d readers reading sequentially by turns", seeks, len(next))
	}
	if read > 3*asked {
		t.Fatalf("read %d segment bytes for %d bytes of entries", read, asked)
	}
}

func TestReadEntriesAfterSnapshot(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, readOptions())
	gen := newEntryGen(11, 900)
	all := gen.Entries(1, 240)
	for i := 0; i < len(all); i += 12 {
		appendSync(t, l, all[i:i+12])
	}
	_, blobsBefore := countFiles(t, dir)
	// The cursor sits in a segment the snapshot rewrites or removes.
	sameEntries(t, readAll(t, l, 1, 9, 1<<30)[:100], all[:100])
	if _, err := l.ReadEntries(105, 3, 1<<30); err != nil {
		t.Fatal(err)
	}
	must(t, l.SaveSnapshot(130, []byte("state at 130"), 0))
	if err := l.runner.Wait(); err != nil { // the unlinks of covered blob files
		t.Fatal(err)
	}
	if _, blobsAfter := countFiles(t, dir); blobsAfter >= blobsBefore {
		t.Fatalf("the snapshot removed no blob file (%d, then %d)", blobsBefore, blobsAfter)
	}
	for _, from := range []uint64{0, 1, 108, 129, 130} {
		_, err := l.ReadEntries(from, 5, 1<<30)
		var ce *CompactedError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCompacted) || ce.FirstIndex != 131 || ce.Index != from {
			t.Fatalf("read from %d after a snapshot at 130: %v", from, err)
		}
	}
	sameEntries(t, readAll(t, l, 131, 7, 1<<30), all[130:])
	got, err := l.ReadEntries(200, 10, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, got, all[199:209])
	// A snapshot at the last index: the log holds nothing.
	must(t, l.SaveSnapshot(240, []byte("state at 240"), 0))
	if _, err := l.ReadEntries(240, 1, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("read of the snapshot's index: %v", err)
	}
	if got, err := l.ReadEntries(241, 1, 0); err != nil || len(got) != 0 {
		t.Fatalf("read past an empty log: %d, %v", len(got), err)
	}
	more := atEpoch(gen.Entries(241, 30), gen.Epoch)
	must(t, l.Append(more))
	sameEntries(t, readAll(t, l, 241, 4, 1<<30), more)
	must(t, l.Close())
	// After a reopen, the snapshot's bound holds.
	l, rec := openLog(t, dir, readOptions())
	defer l.Close()
	if _, err := l.ReadEntries(240, 1, 0); !errors.Is(err, ErrCompacted) || rec.SnapshotIndex != 240 {
		t.Fatalf("after a reopen, read of the snapshot's index: %v", err)
	}
	sameEntries(t, readAll(t, l, 241, 100, 1<<30), more)
}

func TestReadEntriesUnsyncedTail(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, readOptions())
	defer l.Close()
	gen := newEntryGen(3, 900)
	var all []core.Entry
	next := uint64(1)
	// Append, read to the end, append more (rolling segments, starting blob
	// files), read on from the cursor: never synced.
	for round := 0; round < 40; round++ {
		batch := gen.Entries(uint64(len(all))+1, 1+round%6)
		must(t, l.Append(batch))
		all = append(all, batch...)
		for next <= l.LastIndex() {
			got, err := l.ReadEntries(next, 4, 1<<30)
			if err != nil {
				t.Fatalf("round %d: read from %d: %v", round, next, err)
			}
			sameEntries(t, got, wantRead(all, next, 4, 1<<30))
			next += uint64(len(got))
		}
		if got, err := l.ReadEntries(next, 4, 1<<30); err != nil || len(got) != 0 {
			t.Fatalf("read past the end: %d, %v", len(got), err)
		}
	}
	if l.SyncedIndex() != 0 {
		t.Fatalf("synced up to %d", l.SyncedIndex())
	}
	if segments, blobs := countFiles(t, dir); segments < 3 || blobs < 3 {
		t.Fatalf("%d segments, %d blob files", segments, blobs)
	}
	if l.Stats().ReadSeeks != 1 {
		t.Fatalf("%d seeks reading on from the cursor", l.Stats().ReadSeeks)
	}
	sameEntries(t, readAll(t, l, 1, 1000, 1<<30), all)
}

// recordFrame returns the segment file holding index and where its frame
// starts and ends.
func recordFrame(t testing.TB, dir string, index uint64) (string, int, int) {
	t.Helper()
	segments := segmentsOf(t, dir)
	for k := len(segments) - 1; k >= 0; k-- {
		if segments[k].firstIndex <= index {
			file := path.Join(dir, segments[k].name)
			starts := frameStarts(t, file)
			j := int(index - segments[k].firstIndex)
			return file, starts[j], starts[j+1]
		}
	}
	t.Fatalf("no segment holds %d", index)
	return "", 0, 0
}

// checkReadFlippedByte: a byte of an inline payload flipped in a finished
// segment makes the read of that record (and only that one) an error
// wrapping ErrCorrupt. Only the CRC can tell: the record still decodes.
func checkReadFlippedByte(t testing.TB) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, readOptions())
	defer l.Close()
	all := publishEntries(1, 120, 100) // inline: below BlobPayloadBytesMin
	for i := 0; i < len(all); i += 10 {
		appendSync(t, l, all[i:i+10])
	}
	const bad = 17
	file, _, end := recordFrame(t, dir, bad)
	if segs := segmentsOf(t, dir); path.Base(file) == segs[len(segs)-1].name {
		t.Fatalf("entry %d is in the tail segment", bad)
	}
	flipByte(t, file, end-1) // the last payload byte
	if _, err := l.ReadEntries(1, 1000, 1<<30); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read across a flipped byte: %v", err)
	}
	got, err := l.ReadEntries(1, bad-1, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, got, all[:bad-1])
	if _, err := l.ReadEntries(bad, 1, 1<<30); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read of the flipped record: %v", err)
	}
	got, err = l.ReadEntries(bad+1, 1000, 1<<30)
	if err != nil {
		t.Fatalf("read after the flipped record: %v", err)
	}
	sameEntries(t, got, all[bad:])
}

func TestReadEntriesFlippedByte(t *testing.T) {
	failsUnder(t, mutant.SkipCRC, checkReadFlippedByte)
}

func TestReadEntriesDamagedBlob(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, readOptions())
	defer l.Close()
	rng := newEntryGen(5, 0).Rng
	var all []core.Entry
	for len(all) < 60 {
		batch := sizedPublishes(rng, uint64(len(all))+1, 700, 10, 600, 800)
		appendSync(t, l, batch)
		all = append(all, batch...)
	}
	listing, err := listDir(testFS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(listing.blobs) < 4 {
		t.Fatalf("%d blob files", len(listing.blobs))
	}
	// The first blob file loses its end: its last payloads are short.
	first, second := listing.blobs[0], listing.blobs[1]
	f, err := testFS.OpenAppend(path.Join(dir, blobName(first.id)))
	if err != nil {
		t.Fatal(err)
	}
	must(t, f.Truncate(first.sizeBytes-1))
	must(t, f.Close())
	// The second is gone.
	must(t, testFS.Remove(path.Join(dir, blobName(second.id))))
	readFrom := func(from uint64) error {
		_, err := l.ReadEntries(from, 1, 1<<30)
		return err
	}
	lastInFirst := second.id - 1
	for lastInFirst > 0 && len(all[lastInFirst-1].Body.Payload) < 256 {
		lastInFirst--
	}
	if err := readFrom(lastInFirst); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read of a payload a truncated blob file cut short: %v", err)
	}
	if err := readFrom(second.id); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read of a payload in a missing blob file: %v", err)
	}
	if _, err := l.ReadEntries(1, 1000, 1<<30); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read across damaged blob files: %v", err)
	}
	// What the damage does not touch still reads.
	got, err := l.ReadEntries(1, int(lastInFirst)-1, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, got, all[:lastInFirst-1])
	third := listing.blobs[2].id
	sameEntries(t, readAll(t, l, third, 5, 1<<30), all[third-1:])
}

// TestReadEntriesAfterPowerLoss: reads of an unsynced tail, a power loss,
// then reads of what the reopened log holds: exactly what recovery returned,
// payloads resolved, a prefix of what was appended that holds the synced.
func TestReadEntriesAfterPowerLoss(t *testing.T) {
	simOnly(t)
	opts := readOptions()
	lost := 0
	for seed := uint64(1); seed <= 30; seed++ {
		fs, env := newCrashableEnv(seed, simfs.Options{PagesOutOfOrder: seed%2 == 0})
		dir := fmt.Sprintf("/rp%d", seed)
		l, _, err := Open(env, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		gen := newEntryGen(seed, 900)
		all := gen.Entries(1, 80)
		must(t, l.Append(all[:50]))
		must(t, l.Sync())
		if seed%3 == 0 {
			must(t, l.SaveSnapshot(20, []byte("state at 20"), 0))
		}
		must(t, l.Append(all[50:]))
		got, err := l.ReadEntries(45, 100, 1<<30)
		if err != nil {
			t.Fatalf("seed %d: read of the unsynced tail: %v", seed, err)
		}
		sameEntries(t, got, all[44:])
		fs.PowerLoss()
		l, rec, err := Open(env, dir, opts)
		if err != nil {
			t.Fatalf("seed %d: reopen: %v", seed, err)
		}
		if uint64(len(rec.Entries))+rec.SnapshotIndex < 50 {
			t.Fatalf("seed %d: recovered up to %d, synced 50", seed, uint64(len(rec.Entries))+rec.SnapshotIndex)
		}
		if l.LastIndex() < 80 {
			lost++
		}
		from := rec.SnapshotIndex + 1
		read := readAll(t, l, from, 6, 3000)
		loadStoredIn(t, fs, dir, rec.Entries)
		sameEntries(t, read, rec.Entries)
		sameEntries(t, read, all[from-1:l.LastIndex()])
		if rec.SnapshotIndex > 0 {
			if _, err := l.ReadEntries(rec.SnapshotIndex, 1, 0); !errors.Is(err, ErrCompacted) {
				t.Fatalf("seed %d: read at the snapshot: %v", seed, err)
			}
		}
		must(t, l.Close())
	}
	if lost == 0 {
		t.Fatal("no power loss took an unsynced entry")
	}
}

// TestReadEntriesProperty: random appends (synced or not), snapshots,
// reopens and reads by several readers; every ReadEntries(i, n, maxBytes)
// is the slice of what was appended from i that the limits allow, or
// ErrCompacted below the first index, or nothing past the last.
func TestReadEntriesProperty(t *testing.T) {
	base := t.TempDir()
	runs := 0
	rapid.Check(t, func(rt *rapid.T) {
		runs++
		checkReadProperty(rt, path.Join(base, fmt.Sprint(runs)))
	})
}

func checkReadProperty(t *rapid.T, dir string) {
	seed := rapid.Uint64().Draw(t, "seed")
	opts := testOptions(rapid.SampledFrom([]int{512, 2 << 10, 16 << 10}).Draw(t, "segment bytes"), CorruptionRefuse)
	l, _, err := Open(testEnv, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.Close() }()
	gen := newEntryGen(seed, 900)
	var all []core.Entry
	snapshotIndex := uint64(0)
	// One to seven readers (more than the Log's cursors) take random
	// turns, each reading on from where it stopped, now and then seeking
	// back a little or anywhere: every read is exact whichever cursor
	// serves it.
	cursors := make([]uint64, rapid.IntRange(1, 7).Draw(t, "readers"))
	for i := range cursors {
		cursors[i] = 1
	}
	steps := rapid.IntRange(1, 100).Draw(t, "steps")
	for range steps {
		switch op := rapid.IntRange(0, 12).Draw(t, "op"); {
		case op < 4:
			batch := gen.Entries(uint64(len(all))+1, rapid.IntRange(1, 20).Draw(t, "count"))
			mustR(t, l.Append(batch))
			all = append(all, batch...)
			if rapid.Bool().Draw(t, "sync") {
				mustR(t, l.Sync())
			}
		case op == 4 && uint64(len(all)) > snapshotIndex:
			index := rapid.Uint64Range(snapshotIndex+1, uint64(len(all))).Draw(t, "snapshot index")
			mustR(t, l.SaveSnapshot(index, []byte(fmt.Sprint("state at ", index)), 0))
			snapshotIndex = index
		case op == 5:
			mustR(t, l.Close())
			var rec Recovered
			l, rec, err = Open(testEnv, dir, opts)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			if rec.SnapshotIndex != snapshotIndex || l.LastIndex() != uint64(len(all)) {
				t.Fatalf("reopened at snapshot %d, last %d; want %d, %d", rec.SnapshotIndex, l.LastIndex(), snapshotIndex, len(all))
			}
		default:
			r := rapid.IntRange(0, len(cursors)-1).Draw(t, "reader")
			from := cursors[r]
			switch rapid.IntRange(0, 5).Draw(t, "seek") {
			case 0:
				from = rapid.Uint64Range(0, uint64(len(all))+2).Draw(t, "from")
			case 1:
				if back := rapid.Uint64Range(0, 40).Draw(t, "back"); from > back {
					from -= back
				}
			}
			n := rapid.IntRange(1, 40).Draw(t, "n")
			maxBytes := rapid.SampledFrom([]int{0, 300, 2000, 1 << 30}).Draw(t, "max bytes")
			got, err := l.ReadEntries(from, n, maxBytes)
			if from <= snapshotIndex {
				if !errors.Is(err, ErrCompacted) {
					t.Fatalf("read from %d under a snapshot at %d: %v", from, snapshotIndex, err)
				}
				cursors[r] = snapshotIndex + 1
				continue
			}
			if err != nil {
				t.Fatalf("read from %d: %v", from, err)
			}
			noStoredBodies(t, got)
			sameEntries(t, got, wantRead(all, from, n, maxBytes))
			cursors[r] = from + uint64(len(got))
		}
	}
}

func mustR(t storagetest.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v", err)
	}
}

// TestReadEntriesCursorAcrossTailRewrite: the cursor is in the tail segment
// when a snapshot's truncation rewrites that segment under a new name; the
// entries appended after it are in the new file, and reading on from the
// cursor finds them.
func TestReadEntriesCursorAcrossTailRewrite(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, testOptions(64<<10, CorruptionRefuse))
	defer l.Close()
	all := publishEntries(1, 30, 50)
	appendSync(t, l, all[:20])
	sameEntries(t, readAll(t, l, 1, 8, 1<<30), all[:20])
	if segments, _ := countFiles(t, dir); segments != 1 {
		t.Fatalf("%d segments", segments)
	}
	must(t, l.SaveSnapshot(10, []byte("state at 10"), 0))
	must(t, l.Append(all[20:]))
	got, err := l.ReadEntries(21, 100, 1<<30)
	if err != nil {
		t.Fatalf("read on from the cursor: %v", err)
	}
	sameEntries(t, got, all[20:])
	sameEntries(t, readAll(t, l, 11, 3, 1<<30), all[10:])
}
