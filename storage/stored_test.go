package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// sizedPublishes makes publishes with the given payload sizes. Payloads are
// random, so a reference to the wrong bytes cannot match by pattern, and
// offsets differ from indexes, so a report must carry entry.Offset.
func sizedPublishes(rng *rand.Rand, firstIndex uint64, sizes ...int) []core.Entry {
	out := make([]core.Entry, len(sizes))
	for i, n := range sizes {
		index := firstIndex + uint64(i)
		var payload []byte
		if n > 0 {
			payload = make([]byte, n)
			for k := range payload {
				payload[k] = byte(rng.Uint32())
			}
		}
		body := &core.Body{Payload: payload, Headers: []core.Header{{Key: "h", Value: "v"}}}
		out[i] = core.Entry{Epoch: 1, Index: index, Kind: core.EntryPublish, Offset: 5000 + 3*index, Body: body}
	}
	return out
}

// readsBack checks that ref describes want and that r reads want at it.
func readsBack(t *testing.T, r *PayloadReader, ref core.PayloadRef, want []byte) {
	t.Helper()
	if !ref.Stored() || int(ref.LengthBytes) != len(want) || ref.Checksum != crc32.Checksum(want, castagnoli) {
		t.Fatalf("ref %+v does not describe a %d-byte payload", ref, len(want))
	}
	if got, err := r.Read(ref); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %+v: %v (bytes equal: %v)", ref, err, bytes.Equal(got, want))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func blobIDs(t *testing.T, dir string) []uint64 {
	t.Helper()
	var ids []uint64
	for _, b := range blobsOf(t, dir) {
		ids = append(ids, b.id)
	}
	return ids
}

// TestCommitterReportsStoredPayloads: each durable round reports exactly its
// publishes whose payloads went to blob files (the threshold inclusive), by
// entry.Offset, and each reference reads the payload back. The Committer
// passes keepBlobsFrom on to the snapshot.
func TestCommitterReportsStoredPayloads(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	opts.BatchEntriesMax = 7 // several rounds, so reports must split by round
	l, _ := openLog(t, dir, opts)
	defer l.Close()
	var upTos []uint64
	var reports [][]StoredPayload // appended on the writer goroutine, read after Close
	c := newPlanCommitter(l, func(upTo uint64, stored []StoredPayload, err error) {
		if err != nil {
			t.Errorf("onDurable: %v", err)
		}
		upTos, reports = append(upTos, upTo), append(reports, stored)
	})
	threshold := opts.BlobPayloadBytesMin
	sizes := []int{threshold - 1, threshold, 10, 0, 5000, 300, threshold + 1, 1, 20_000}
	rng := rand.New(rand.NewPCG(7, 8))
	var all []core.Entry
	for len(all) < 120 {
		var batch []core.Entry
		for range 1 + rng.IntN(9) {
			index := uint64(len(all)+len(batch)) + 1
			if rng.IntN(5) == 0 { // not a publish: never reported
				batch = append(batch, core.Entry{Epoch: 1, Index: index, Kind: core.EntryAck, Offset: 5000 + 3*index})
			} else {
				batch = append(batch, sizedPublishes(rng, index, sizes[rng.IntN(len(sizes))])...)
			}
		}
		must(t, c.Submit(batch))
		all = append(all, batch...)
	}
	must(t, c.Close())

	byOffset := make(map[uint64]core.Entry, len(all))
	var want, got []uint64
	var refs []core.PayloadRef
	for _, e := range all {
		byOffset[e.Offset] = e
		if e.Kind == core.EntryPublish && len(e.Body.Payload) >= threshold {
			want = append(want, e.Offset)
		}
	}
	r := NewPayloadReader(testFS, dir)
	defer r.Close()
	prevUpTo := uint64(0)
	for k, stored := range reports {
		for _, sp := range stored {
			if e := byOffset[sp.Offset]; e.Index <= prevUpTo || e.Index > upTos[k] {
				t.Fatalf("offset %d (index %d) reported in the round (%d, %d]", sp.Offset, e.Index, prevUpTo, upTos[k])
			}
			got, refs = append(got, sp.Offset), append(refs, sp.Ref)
			readsBack(t, r, sp.Ref, byOffset[sp.Offset].Body.Payload)
		}
		prevUpTo = upTos[k]
	}
	if len(reports) < 2 || prevUpTo != uint64(len(all)) || !slices.Equal(got, want) {
		t.Fatalf("%d reports up to %d; offsets %v\nwant %v", len(reports), prevUpTo, got, want)
	}

	ids, keep := blobIDs(t, dir), refs[len(refs)*2/3].File
	c = newPlanCommitter(l, func(uint64, []StoredPayload, error) {})
	must(t, c.SaveSnapshot(uint64(len(all)), []byte("snap"), keep))
	must(t, c.Close())
	must(t, l.runner.Wait())
	if got := blobIDs(t, dir); ids[0] == keep || !slices.Equal(got, ids[slices.Index(ids, keep):]) {
		t.Fatalf("snapshot keeping from %d: files %v, were %v", keep, got, ids)
	}
}

// TestRecoveredPublishesComeBackStored: Open returns blob publishes as
// stored bodies (no payload, a reference that reads the original bytes) and
// keeps small payloads inline.
func TestRecoveredPublishesComeBackStored(t *testing.T) {
	dir := t.TempDir()
	opts := blobOptions(CorruptionRefuse)
	l, _ := openLog(t, dir, opts)
	threshold := opts.BlobPayloadBytesMin
	rng := rand.New(rand.NewPCG(3, 4))
	var all []core.Entry
	for len(all) < 100 {
		batch := sizedPublishes(rng, l.LastIndex()+1, 1000, threshold-1, threshold, 0, 3000, 17)
		appendSync(t, l, batch)
		all = append(all, batch...)
	}
	must(t, l.Close())
	l, rec, err := Open(testEnv, dir, opts) // not openLog: it would load the payloads
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(rec.Entries) != len(all) {
		t.Fatalf("%d entries, want %d", len(rec.Entries), len(all))
	}
	r := NewPayloadReader(testFS, dir)
	defer r.Close()
	for i, e := range rec.Entries {
		want := all[i].Body.Payload
		if len(want) >= threshold {
			if e.Body.Payload != nil || !e.Body.Ref.Stored() {
				t.Fatalf("entry %d: blob publish not stored: %d payload bytes, ref %+v", e.Index, len(e.Body.Payload), e.Body.Ref)
			}
			readsBack(t, r, e.Body.Ref, want)
		} else if e.Body.IsStored() || !bytes.Equal(e.Body.Payload, want) {
			t.Fatalf("entry %d: inline payload came back as %+v", e.Index, e.Body)
		}
	}
	loadStored(t, dir, rec.Entries)
	sameEntries(t, rec.Entries, all) // the rest of each entry is intact
}

// TestSnapshotKeepsBlobFilesWithStoredBodies: keepBlobsFrom keeps the blob
// files a snapshot's stored bodies refer to, through SaveSnapshot and Open;
// appends go on after them; without stored bodies every covered file goes.
func TestSnapshotKeepsBlobFilesWithStoredBodies(t *testing.T) {
	dir := t.TempDir()
	opts := blobOptions(CorruptionRefuse) // 8 KiB files: eight 1000-byte payloads each
	rng := rand.New(rand.NewPCG(5, 6))
	payloads := map[uint64][]byte{} // by offset
	var stored []StoredPayload
	appendBlobs := func(l *Log, count int) []core.Entry {
		batch := sizedPublishes(rng, l.LastIndex()+1, slices.Repeat([]int{1000}, count)...)
		appendSync(t, l, batch)
		stored = l.AppendStored(stored, batch)
		for _, e := range batch {
			payloads[e.Offset] = e.Body.Payload
		}
		return batch
	}
	// Refs into files from keepFrom on read back; the others' files are gone.
	checkRefs := func(keepFrom uint64, wantIDs []uint64) {
		t.Helper()
		if got := blobIDs(t, dir); !slices.Equal(got, wantIDs) {
			t.Fatalf("blob files %v, want %v", got, wantIDs)
		}
		for _, sp := range stored {
			r := NewPayloadReader(testFS, dir) // fresh: holds no file open from before
			if sp.Ref.File >= keepFrom {
				readsBack(t, r, sp.Ref, payloads[sp.Offset])
			} else if _, err := r.Read(sp.Ref); err == nil {
				t.Fatalf("ref into removed file %d still reads", sp.Ref.File)
			}
			r.Close()
		}
	}

	l, _ := openLog(t, dir, opts)
	for l.LastIndex() < 210 {
		appendBlobs(l, 10)
	}
	before := blobIDs(t, dir) // 1, 9, ..., 193, 201, 209 (209 holds 2 payloads)
	if len(before) != 27 || before[26] != 209 {
		t.Fatalf("blob files %v", before)
	}
	keep, kept := before[12], before[12:] // 97: a stored body of the snapshot is in it
	must(t, l.SaveSnapshot(210, []byte("at 210"), keep))
	must(t, l.runner.Wait())
	checkRefs(keep, kept)
	must(t, l.Close())

	// Open keeps them too, though no recovered entry refers to them.
	l, rec := openLog(t, dir, opts)
	if len(rec.Entries) != 0 || rec.RemovedBlobFiles != 0 {
		t.Fatalf("reopen: %d entries, removed %d blob files", len(rec.Entries), rec.RemovedBlobFiles)
	}
	checkRefs(keep, kept)
	// The last kept file (209, 2000 bytes) is active again: appends follow
	// its stored payloads, never overwrite them.
	more := appendBlobs(l, 3)
	for i, sp := range stored[len(stored)-3:] {
		if sp.Ref.File != 209 || sp.Ref.OffsetBytes != uint64(2000+1000*i) || sp.Offset != more[i].Offset {
			t.Fatalf("appended after reopen: %+v", sp)
		}
	}
	must(t, l.Close())
	l, rec = openLog(t, dir, opts)
	sameEntries(t, rec.Entries, more)
	if rec.RemovedBlobFiles != 0 {
		t.Fatalf("second reopen removed %d blob files", rec.RemovedBlobFiles)
	}
	checkRefs(keep, kept)

	// Keeping from 201: the covered files below it go.
	must(t, l.SaveSnapshot(213, []byte("at 213"), 201))
	must(t, l.runner.Wait())
	checkRefs(201, []uint64{201, 209})

	// No stored body (keepBlobsFrom 0): every covered file goes.
	appendBlobs(l, 2)
	must(t, l.SaveSnapshot(215, []byte("at 215"), 0))
	must(t, l.runner.Wait())
	checkRefs(216, nil)
	must(t, l.Close())
}

// TestPayloadReaderDetectsCorruption: a payload that rotted, a file cut
// short, or a missing file is an error, never wrong bytes.
func TestPayloadReaderDetectsCorruption(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, blobOptions(CorruptionRefuse))
	batch := sizedPublishes(rand.New(rand.NewPCG(9, 9)), 1, slices.Repeat([]int{1000}, 5)...)
	appendSync(t, l, batch)
	stored := l.AppendStored(nil, batch)
	must(t, l.Close())
	if len(stored) != 5 || stored[4].Ref.File != stored[0].Ref.File {
		t.Fatalf("want 5 payloads in one file: %+v", stored)
	}
	path := filepath.Join(dir, blobName(stored[0].Ref.File))
	corrupt := func(i int, why string) {
		t.Helper()
		r := NewPayloadReader(testFS, dir)
		defer r.Close()
		if _, err := r.Read(stored[i].Ref); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: read payload %d: %v, want ErrCorrupt", why, i, err)
		}
	}

	flipByte(t, path, int(stored[2].Ref.OffsetBytes)+7)
	corrupt(2, "flipped byte")
	r := NewPayloadReader(testFS, dir)
	readsBack(t, r, stored[1].Ref, batch[1].Body.Payload) // neighbours intact
	readsBack(t, r, stored[3].Ref, batch[3].Body.Payload)
	r.Close()

	end := stored[4].Ref.OffsetBytes + uint64(stored[4].Ref.LengthBytes)
	must(t, tfs.Truncate(path, int64(end)-1))
	corrupt(4, "one byte short")
	must(t, tfs.Truncate(path, int64(stored[3].Ref.OffsetBytes)-10))
	corrupt(3, "cut before the payload's start")
	corrupt(4, "starts past the end")

	must(t, tfs.Remove(path))
	r = NewPayloadReader(testFS, dir)
	defer r.Close()
	if _, err := r.Read(stored[0].Ref); err == nil {
		t.Fatal("read from a missing file succeeded")
	} else if _, err := r.Read(core.PayloadRef{}); err == nil {
		t.Fatal("read of a ref that names no stored payload succeeded")
	}
}

// TestSnapshotV1HeaderStillReads: a snapshot written before FLS2 (no
// keepBlobsFrom; built here by hand to the old layout) still opens, as
// keepBlobsFrom 0, and a damaged one is still caught.
func TestSnapshotV1HeaderStillReads(t *testing.T) {
	dir := t.TempDir()
	opts := blobOptions(CorruptionRefuse)
	l, _ := openLog(t, dir, opts)
	all := sizedPublishes(rand.New(rand.NewPCG(1, 1)), 1, slices.Repeat([]int{1000}, 50)...)
	appendSync(t, l, all)
	l.Close()
	const index = 30
	data := []byte("state as of 30, v1")
	header := binary.BigEndian.AppendUint64([]byte("FLS1"), index)
	header = binary.BigEndian.AppendUint64(header, uint64(len(data)))
	crc := crc32.Update(crc32.Update(0, castagnoli, header[4:]), castagnoli, data)
	header = binary.BigEndian.AppendUint32(header, crc)
	must(t, tfs.WriteFile(filepath.Join(dir, snapshotName(index)), append(header, data...), 0o640))
	damaged := copyDir(t, dir)
	flipByte(t, filepath.Join(damaged, snapshotName(index)), len(header)+3)
	if _, _, err := Open(testEnv, damaged, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged v1 snapshot: %v, want ErrCorrupt", err)
	}

	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if !bytes.Equal(rec.Snapshot, data) || rec.SnapshotIndex != index || !rec.FinishedTruncation {
		t.Fatalf("v1 snapshot: %+v", rec)
	}
	sameEntries(t, rec.Entries, all[index:])
	// Files 1, 9, 17 hold only covered payloads and nothing keeps them.
	if ids := blobIDs(t, dir); rec.RemovedBlobFiles != 3 || ids[0] != 25 {
		t.Fatalf("removed %d blob files, left %v", rec.RemovedBlobFiles, ids)
	}
}

// TestPayloadReaderReadAhead: reads in order come from the read-ahead
// window, across more files than the reader keeps open and payloads larger
// than the window; jumps back and forth, Forget, and a file that grew after
// it was read to its end all still give the right bytes.
func TestPayloadReaderReadAhead(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(1<<20, CorruptionRefuse)
	opts.BlobFileSizeBytes = 512 << 10
	l, _ := openLog(t, dir, opts)
	defer l.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	var payloads [][]byte
	var stored []StoredPayload
	appendSized := func(sizes ...int) {
		batch := sizedPublishes(rng, l.LastIndex()+1, sizes...)
		appendSync(t, l, batch)
		stored = l.AppendStored(stored, batch)
		for _, e := range batch {
			payloads = append(payloads, e.Body.Payload)
		}
	}
	for len(stored) < 400 {
		appendSized(256+rng.IntN(20_000), 256+rng.IntN(20_000), 256+rng.IntN(300))
	}
	appendSized(300<<10, 1500<<10, 500) // over the window; over a file
	if ids := blobIDs(t, dir); len(ids) <= payloadReaderFilesMax+1 {
		t.Fatalf("only %d blob files: the reader should have to close some", len(ids))
	}

	r := NewPayloadReader(testFS, dir)
	defer r.Close()
	check := func(i int) { t.Helper(); readsBack(t, r, stored[i].Ref, payloads[i]) }
	for i := range stored {
		check(i)
	}
	// Two small neighbours: the second comes from the window the first filled.
	check(0)
	windowAt := r.windowAt
	if check(1); r.windowAt != windowAt || stored[1].Ref.File != stored[0].Ref.File {
		t.Fatalf("the next payload was read again, not from the window")
	}
	last := len(stored) - 1
	for _, i := range []int{last, 0, 1, last / 2, last, 2} {
		check(i)
	}
	for i := last; i >= 0; i-- {
		check(i)
	}
	r.Forget(stored[last/2].Ref.File) // then 0 must be read from a reopened file
	check(0)
	// The active file grows after the reader read up to its end.
	check(last)
	appendSized(400, 900)
	for _, i := range []int{last + 1, last + 2, 0} {
		check(i)
	}
}
