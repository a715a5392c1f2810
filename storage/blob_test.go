package storage

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// blobOptions: small segments and smaller blob files, so a few hundred
// entries span many of both.
func blobOptions(policy CorruptionPolicy) Options {
	opts := testOptions(16<<10, policy)
	opts.BlobFileSizeBytes = 8 << 10
	return opts
}

func blobsOf(t testing.TB, dir string) []blobOnDisk {
	t.Helper()
	listing, err := listDir(testFS, dir)
	if err != nil {
		t.Fatal(err)
	}
	return listing.blobs
}

// blobPublishes makes count publishes whose payloads (payloadBytes, each a
// different pattern) go to the blob files.
func blobPublishes(firstIndex uint64, count, payloadBytes int, epoch uint64) []core.Entry {
	out := make([]core.Entry, count)
	for i := range out {
		index := firstIndex + uint64(i)
		payload := make([]byte, payloadBytes)
		for k := range payload {
			payload[k] = byte(index*31 + uint64(k))
		}
		body := &core.Body{Payload: payload, Headers: []core.Header{{Key: "h", Value: "v"}}}
		out[i] = core.Entry{Epoch: epoch, Index: index, Kind: core.EntryPublish, Offset: index - 1, Body: body}
	}
	return out
}

// TestBlobRoundTripAcrossRotation: entries of every kind, payloads inline
// and in blob files, across many blob files, come back byte for byte, and
// appending after a reopen continues in the last blob file.
func TestBlobRoundTripAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	opts := blobOptions(CorruptionRefuse)
	opts.BatchEntriesMax = 29
	l, _ := openLog(t, dir, opts)
	gen := newEntryGen(21, 3000)
	var all []core.Entry
	for len(all) < 2000 {
		batch := gen.Entries(l.LastIndex()+1, 1+gen.Rng.IntN(60))
		appendSync(t, l, batch)
		all = append(all, batch...)
	}
	// A payload larger than a blob file gets a file of its own.
	huge := blobPublishes(l.LastIndex()+1, 1, 3*int(opts.BlobFileSizeBytes), gen.Epoch)
	appendSync(t, l, huge)
	all = append(all, huge...)
	stats := l.Stats()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	blobs := blobsOf(t, dir)
	if len(blobs) < 20 || stats.BlobFilesCreated != uint64(len(blobs)) || stats.BlobBytes == 0 {
		t.Fatalf("%d blob files, stats %+v: the test should span many", len(blobs), stats)
	}
	for _, b := range blobs[:len(blobs)-2] {
		if b.sizeBytes > opts.BlobFileSizeBytes {
			t.Fatalf("blob file %d holds %d bytes, over the size", b.id, b.sizeBytes)
		}
	}
	if last := blobs[len(blobs)-1]; last.id != huge[0].Index || last.sizeBytes != int64(len(huge[0].Body.Payload)) {
		t.Fatalf("the huge payload is not alone in its file: %+v", last)
	}

	l, rec := openLog(t, dir, opts)
	sameEntries(t, rec.Entries, all)
	if rec.TruncatedTail || rec.RemovedBlobFiles != 0 {
		t.Fatalf("clean reopen cut %v, removed %d blob files", rec.TruncatedTail, rec.RemovedBlobFiles)
	}
	more := blobPublishes(l.LastIndex()+1, 3, 300, gen.Epoch)
	appendSync(t, l, more)
	all = append(all, more...)
	if l.Stats().BlobFilesCreated != 1 {
		t.Fatalf("the huge file is full: the next payload should start a new file; stats %+v", l.Stats())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rec = openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, rec.Entries, all)
}

// writeBlobLog makes a closed log of rounds of publishes with blob
// payloads, the last round of lastRound entries, and returns the entries
// and the id and size of the last blob file.
func writeBlobLog(t *testing.T, dir string, opts Options, rounds, lastRound, payloadBytes int) ([]core.Entry, blobOnDisk) {
	t.Helper()
	l, _ := openLog(t, dir, opts)
	var all []core.Entry
	for r := range rounds {
		count := 7
		if r == rounds-1 {
			count = lastRound
		}
		batch := blobPublishes(l.LastIndex()+1, count, payloadBytes, 1)
		appendSync(t, l, batch)
		all = append(all, batch...)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	blobs := blobsOf(t, dir)
	return all, blobs[len(blobs)-1]
}

// TestBlobTornTail cuts the last blob file at every byte of the last
// payload, as a crash during its write would leave it, with the record
// that refers to it on disk or not. Either way Open keeps every entry
// before it, trims the blob file after the last payload kept, and the log
// goes on at the lost entry's index; a record whose payload is torn is a
// torn tail, even under CorruptionRefuse.
func TestBlobTornTail(t *testing.T) {
	const payloadBytes = 300
	opts := blobOptions(CorruptionRefuse)
	master := t.TempDir()
	all, lastBlob := writeBlobLog(t, master, opts, 40, 3, payloadBytes)
	n := len(all)
	lastStart := lastBlob.sizeBytes - payloadBytes
	segs := segmentsOf(t, master)
	tail := segs[len(segs)-1]
	starts := frameStarts(t, filepath.Join(master, tail.name))
	lastFrame := starts[len(starts)-2]
	for _, recordDurable := range []bool{true, false} {
		for cut := lastStart; cut < lastBlob.sizeBytes; cut++ {
			dir := copyDir(t, master)
			if err := tfs.Truncate(filepath.Join(dir, blobName(lastBlob.id)), cut); err != nil {
				t.Fatal(err)
			}
			if !recordDurable {
				if err := tfs.Truncate(filepath.Join(dir, tail.name), int64(lastFrame)); err != nil {
					t.Fatal(err)
				}
			}
			l, rec, err := Open(testEnv, dir, opts)
			if err != nil {
				t.Fatalf("durable %v, cut at %d: %v", recordDurable, cut, err)
			}
			loadStored(t, dir, rec.Entries)
			sameEntries(t, rec.Entries, all[:n-1])
			if recordDurable {
				if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != uint64(n) || rec.Cut.Reason != CutBlobShort ||
					rec.Cut.OffsetBytes != int64(lastFrame) || rec.Cut.Segment != tail.name {
					t.Fatalf("cut at %d: reported %+v", cut, rec.Cut)
				}
			} else if rec.TruncatedTail {
				t.Fatalf("cut at %d: a clean tidwall end was cut: %+v", cut, rec.Cut)
			}
			if b := blobsOf(t, dir); b[len(b)-1].id != lastBlob.id || b[len(b)-1].sizeBytes != lastStart {
				t.Fatalf("cut at %d: blob tail not trimmed to %d: %+v", cut, lastStart, b[len(b)-1])
			}
			next := blobPublishes(uint64(n), 2, payloadBytes+5, 1)
			appendSync(t, l, next)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l, rec = openLog(t, dir, opts)
			sameEntries(t, rec.Entries, append(append([]core.Entry(nil), all[:n-1]...), next...))
			if rec.TruncatedTail || rec.RemovedBlobFiles != 0 {
				t.Fatalf("cut at %d: a second open repaired again: %+v", cut, rec)
			}
			l.Close()
			tfs.RemoveAll(dir)
		}
	}
}

// TestBlobLostWithItsRoundIsTorn: payloads are fdatasynced beside their
// records, so a crash can keep every record of the last round and lose
// payloads under any of them, not only the last one. That is a torn tail
// (nothing of the round was confirmed) even under CorruptionRefuse.
func TestBlobLostWithItsRoundIsTorn(t *testing.T) {
	const payloadBytes = 300
	opts := blobOptions(CorruptionRefuse)
	master := t.TempDir()
	all, lastBlob := writeBlobLog(t, master, opts, 40, 3, payloadBytes)
	n := len(all)
	// Inside each of the last round's three payloads in turn: entries
	// n-2, n-1, n (1-based indexes).
	for lost := 3; lost >= 1; lost-- {
		dir := copyDir(t, master)
		cut := lastBlob.sizeBytes - int64(lost)*payloadBytes + payloadBytes/2
		if err := tfs.Truncate(filepath.Join(dir, blobName(lastBlob.id)), cut); err != nil {
			t.Fatal(err)
		}
		l, rec := openLog(t, dir, opts)
		keep := n - lost
		sameEntries(t, rec.Entries, all[:keep])
		if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != uint64(keep+1) || rec.Cut.Reason != CutBlobShort || rec.Cut.DroppedRecords != lost {
			t.Fatalf("payload %d of the last round lost: reported %+v", 4-lost, rec.Cut)
		}
		if b := blobsOf(t, dir); b[len(b)-1].sizeBytes != lastBlob.sizeBytes-int64(lost)*payloadBytes {
			t.Fatalf("blob tail not trimmed: %+v", b[len(b)-1])
		}
		l.Close()
	}
}

// TestBlobShortBeforeLastRoundIsCorruption: a payload missing under a
// record of a round that another round followed cannot come from a crash
// (a round starts only once the previous one's payloads are durable): the
// policy decides.
func TestBlobShortBeforeLastRoundIsCorruption(t *testing.T) {
	const payloadBytes = 300
	opts := blobOptions(CorruptionRefuse)
	dir := t.TempDir()
	all, lastBlob := writeBlobLog(t, dir, opts, 40, 3, payloadBytes)
	n := len(all)
	// Into the payload of entry n-3, the last of the round before the last
	// (the last file holds more than four payloads).
	cut := lastBlob.sizeBytes - 3*payloadBytes - payloadBytes/2
	if err := tfs.Truncate(filepath.Join(dir, blobName(lastBlob.id)), cut); err != nil {
		t.Fatal(err)
	}
	before := dirDigest(t, dir)
	_, _, err := Open(testEnv, dir, opts)
	if ce := asCorruption(t, err); ce.Cut.Index != uint64(n-3) || ce.Cut.Reason != CutBlobShort || ce.Cut.Torn || ce.Cut.DroppedRecords != 4 {
		t.Fatalf("reported %+v", ce.Cut)
	}
	if dirDigest(t, dir) != before {
		t.Fatal("a refused open changed the files")
	}
	opts.OnCorruption = CorruptionTruncate
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, rec.Entries, all[:n-4])
	if b := blobsOf(t, dir); b[len(b)-1].sizeBytes != lastBlob.sizeBytes-4*payloadBytes {
		t.Fatalf("blob tail not trimmed: %+v", b[len(b)-1])
	}
}

// TestBlobCorruptByte: a flipped payload byte fails the payload's CRC: in
// the middle of the log it is corruption (refused, or cut under
// CorruptionTruncate, which also drops the blob files only later entries
// used); in the last payload it is a torn tail.
func TestBlobCorruptByte(t *testing.T) {
	const payloadBytes = 500
	opts := blobOptions(CorruptionRefuse)
	dir := t.TempDir()
	all, lastBlob := writeBlobLog(t, dir, opts, 60, 4, payloadBytes)
	blobs := blobsOf(t, dir)
	if len(blobs) < 10 {
		t.Fatalf("only %d blob files", len(blobs))
	}
	middle := blobs[len(blobs)/2]
	// Every entry is a blob publish, so the id is the first entry's index.
	flipByte(t, filepath.Join(dir, blobName(middle.id)), payloadBytes+7) // its second payload
	badIndex := middle.id + 1
	before := dirDigest(t, dir)
	_, _, err := Open(testEnv, dir, opts)
	if ce := asCorruption(t, err); ce.Cut.Index != badIndex || ce.Cut.Reason != CutBlobChecksum || ce.Cut.Torn {
		t.Fatalf("reported %+v", ce.Cut)
	}
	if dirDigest(t, dir) != before {
		t.Fatal("a refused open changed the files")
	}

	truncate := opts
	truncate.OnCorruption = CorruptionTruncate
	l, rec := openLog(t, copyDir(t, dir), truncate)
	sameEntries(t, rec.Entries, all[:badIndex-1])
	if rec.Cut.Index != badIndex || rec.Cut.Reason != CutBlobChecksum || rec.RemovedBlobFiles != len(blobs)-len(blobs)/2-1 {
		t.Fatalf("cut %+v, removed %d blob files", rec.Cut, rec.RemovedBlobFiles)
	}
	if b := blobsOf(t, l.Dir()); b[len(b)-1].id != middle.id || b[len(b)-1].sizeBytes != payloadBytes {
		t.Fatalf("blob files after the cut: %+v", b)
	}
	l.Close()

	// Undo, then break the last payload instead: a torn tail.
	flipByte(t, filepath.Join(dir, blobName(middle.id)), payloadBytes+7)
	flipByte(t, filepath.Join(dir, blobName(lastBlob.id)), int(lastBlob.sizeBytes)-1)
	l, rec = openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, rec.Entries, all[:len(all)-1])
	if !rec.Cut.Torn || rec.Cut.Reason != CutBlobChecksum || rec.Cut.Index != uint64(len(all)) {
		t.Fatalf("reported %+v", rec.Cut)
	}
}

// TestBlobMissingFile: a blob file gone from the middle is corruption at
// the first entry that refers to it.
func TestBlobMissingFile(t *testing.T) {
	opts := blobOptions(CorruptionRefuse)
	dir := t.TempDir()
	writeBlobLog(t, dir, opts, 40, 3, 300)
	blobs := blobsOf(t, dir)
	gone := blobs[len(blobs)/2]
	tfs.Remove(filepath.Join(dir, blobName(gone.id)))
	_, _, err := Open(testEnv, dir, opts)
	if ce := asCorruption(t, err); ce.Cut.Index != gone.id || ce.Cut.Reason != CutBlobMissing || ce.Cut.Torn {
		t.Fatalf("reported %+v", ce.Cut)
	}
}

// TestSnapshotRemovesBlobFiles: a snapshot removes exactly the blob files
// every reference to which it covers, the active one too when it is
// covered; the entries after it still read back.
func TestSnapshotRemovesBlobFiles(t *testing.T) {
	const payloadBytes = 1000 // 8 per 8 KiB blob file
	opts := blobOptions(CorruptionRefuse)
	dir := t.TempDir()
	l, _ := openLog(t, dir, opts)
	var all []core.Entry
	for l.LastIndex() < 200 {
		batch := blobPublishes(l.LastIndex()+1, 10, payloadBytes, 1)
		appendSync(t, l, batch)
		all = append(all, batch...)
	}
	if len(blobsOf(t, dir)) != 25 {
		t.Fatalf("%d blob files, want 25", len(blobsOf(t, dir)))
	}
	// Index 100 is in the file of 97..104: it stays, 1..96 (12 files) go.
	if err := l.SaveSnapshot(100, []byte("at 100"), 0); err != nil {
		t.Fatal(err)
	}
	must(t, l.runner.Wait()) // removal runs in the background
	blobs := blobsOf(t, dir)
	if len(blobs) != 13 || blobs[0].id != 97 || l.Stats().BlobFilesRemoved != 12 {
		t.Fatalf("after a snapshot at 100: %+v, stats %+v", blobs, l.Stats())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rec := openLog(t, dir, opts)
	sameEntries(t, rec.Entries, all[100:])
	if rec.RemovedBlobFiles != 0 {
		t.Fatalf("reopen removed %d blob files", rec.RemovedBlobFiles)
	}
	// A snapshot at the last index covers the active file too.
	if err := l.SaveSnapshot(200, []byte("at 200"), 0); err != nil {
		t.Fatal(err)
	}
	must(t, l.runner.Wait())
	if blobs := blobsOf(t, dir); len(blobs) != 0 {
		t.Fatalf("blob files left after a snapshot of everything: %+v", blobs)
	}
	next := blobPublishes(201, 3, payloadBytes, 1)
	appendSync(t, l, next)
	if blobs := blobsOf(t, dir); len(blobs) != 1 || blobs[0].id != 201 {
		t.Fatalf("the next payload should start blob-201: %+v", blobs)
	}
	l.Close()
	l, rec = openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, rec.Entries, next)
}

// TestCrashBetweenBlobSyncAndTidwallWrite: the round's payloads are
// durable (in the active file, or in a file the round started) but its
// records never reached tidwall. Open recovers without the round, drops
// its payload bytes, and the indexes are reused for other entries.
func TestCrashBetweenBlobSyncAndTidwallWrite(t *testing.T) {
	const payloadBytes = 1000
	for _, rotates := range []bool{false, true} {
		opts := blobOptions(CorruptionRefuse)
		dir := t.TempDir()
		l, _ := openLog(t, dir, opts)
		first := blobPublishes(1, 5, payloadBytes, 1) // 5 of the 8 a file holds
		appendSync(t, l, first)
		count := 2
		if rotates {
			count = 6
		}
		lost := blobPublishes(6, count, payloadBytes, 1)
		// What Append does before it writes to tidwall; then the crash (the
		// copy is the disk as the crash left it).
		l.placeBlobs(lost)
		if err := l.writeBlobs(); err != nil {
			t.Fatal(err)
		}
		crashed := copyDir(t, dir)
		if got := len(blobsOf(t, crashed)); got != map[bool]int{false: 1, true: 2}[rotates] {
			t.Fatalf("rotates %v: %d blob files before the crash", rotates, got)
		}
		l.failed = errors.New("crashed") // the test's Log is done: close without syncing
		l.Close()

		l, rec := openLog(t, crashed, opts)
		sameEntries(t, rec.Entries, first)
		if rec.TruncatedTail || rec.RemovedBlobFiles != map[bool]int{false: 0, true: 1}[rotates] {
			t.Fatalf("rotates %v: %+v", rotates, rec)
		}
		if b := blobsOf(t, crashed); len(b) != 1 || b[0].sizeBytes != 5*payloadBytes {
			t.Fatalf("rotates %v: blob files %+v", rotates, b)
		}
		other := blobPublishes(6, count, payloadBytes+1, 1)
		appendSync(t, l, other)
		l.Close()
		l, rec = openLog(t, crashed, opts)
		sameEntries(t, rec.Entries, append(append([]core.Entry(nil), first...), other...))
		l.Close()
	}
}

// TestInlineBelowThreshold: payloads below BlobPayloadBytesMin, and every
// entry that is not a publish, stay in tidwall; no blob file appears.
func TestInlineBelowThreshold(t *testing.T) {
	dir := t.TempDir()
	opts := blobOptions(CorruptionRefuse)
	l, _ := openLog(t, dir, opts)
	entries := blobPublishes(1, 50, opts.BlobPayloadBytesMin-1, 1)
	appendSync(t, l, entries)
	l.Close()
	if b := blobsOf(t, dir); len(b) != 0 {
		t.Fatalf("blob files for inline payloads: %+v", b)
	}
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	sameEntries(t, rec.Entries, entries)
}
