package storage

import (
	"encoding/binary"
	"hash/crc32"
	"path/filepath"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// TestBlobFileOfTheLastRoundMissing: the last round started a blob file
// whose directory entry a crash lost (it becomes durable with the round's
// Sync); its records survived. The whole round is a torn tail.
func TestBlobFileOfTheLastRoundMissing(t *testing.T) {
	const payloadBytes = 300
	opts := blobOptions(CorruptionRefuse)
	dir := t.TempDir()
	l, _ := openLog(t, dir, opts)
	var all []core.Entry
	for l.LastIndex() < 60 {
		batch := blobPublishes(l.LastIndex()+1, 5, payloadBytes, 1)
		appendSync(t, l, batch)
		all = append(all, batch...)
	}
	filesBefore := len(blobsOf(t, dir))
	// One round big enough to start a new blob file.
	last := blobPublishes(l.LastIndex()+1, 40, payloadBytes, 1)
	appendSync(t, l, last)
	l.Close()
	blobs := blobsOf(t, dir)
	if len(blobs) <= filesBefore {
		t.Fatalf("the last round started no blob file (%d files before, %d after)", filesBefore, len(blobs))
	}
	newest := blobs[len(blobs)-1]
	if err := tfs.Remove(filepath.Join(dir, blobName(newest.id))); err != nil {
		t.Fatal(err)
	}
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Reason != CutBlobMissing || rec.Cut.Index != newest.id {
		t.Fatalf("reported %+v", rec.Cut)
	}
	sameEntries(t, rec.Entries, append(all, last[:newest.id-last[0].Index]...))
}

// TestPayloadsSyncBeforeTheNextRound: Sync fdatasyncs the round's payloads,
// and an Append after an Append without Sync makes the first one's payloads
// durable before writing its own records.
func TestPayloadsSyncBeforeTheNextRound(t *testing.T) {
	opts := blobOptions(CorruptionRefuse)
	l, _ := openLog(t, t.TempDir(), opts)
	defer l.Close()
	appendSync(t, l, blobPublishes(1, 3, 300, 1))
	if got := l.Stats().BlobSyncs; got != 1 {
		t.Fatalf("%d blob syncs after one round, want 1", got)
	}
	if err := l.Append(blobPublishes(4, 3, 300, 1)); err != nil {
		t.Fatal(err)
	}
	if got := l.Stats().BlobSyncs; got != 1 {
		t.Fatalf("%d blob syncs before Sync, want 1 (Append does not wait for the disk)", got)
	}
	if err := l.Append(blobPublishes(7, 3, 300, 1)); err != nil {
		t.Fatal(err)
	}
	if got := l.Stats().BlobSyncs; got != 2 {
		t.Fatalf("%d blob syncs after a second Append, want 2: the first round's payloads go durable first", got)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := l.Stats().BlobSyncs; got != 3 || l.SyncedIndex() != 9 {
		t.Fatalf("after Sync: %d blob syncs, synced to %d", got, l.SyncedIndex())
	}
}

// TestBlobRecordWithoutRoundMark: records written before round marks
// (kind 0xB1) still decode, as rounds of one record.
func TestBlobRecordWithoutRoundMark(t *testing.T) {
	payload := []byte("0123456789")
	e := core.Entry{Epoch: 1, Index: 7, Kind: core.EntryPublish, Offset: 6, Body: &core.Body{}}
	record := []byte{0, 0, 0, 0, blobRecordKind}
	record = binary.BigEndian.AppendUint64(record, 5)
	record = binary.BigEndian.AppendUint64(record, 100)
	record = binary.BigEndian.AppendUint32(record, uint32(len(payload)))
	record = binary.BigEndian.AppendUint32(record, crc32.Checksum(payload, castagnoli))
	record = core.AppendEntry(record, &e)
	binary.BigEndian.PutUint32(record, crc32.Checksum(record[recordHeaderBytes:], castagnoli))
	got, ref, isBlob, reason := checkRecord(record, 7, 1, false)
	if reason != CutNone || !isBlob || got.Index != 7 {
		t.Fatalf("reason %v blob %v entry %+v", reason, isBlob, got)
	}
	if ref != (blobRef{fileID: 5, offsetBytes: 100, lengthBytes: 10, crc: crc32.Checksum(payload, castagnoli), roundLastIndex: 7}) {
		t.Fatalf("ref %+v", ref)
	}
	// A round mark before the record's own index is not ours.
	marked := appendBlobRecord(nil, &core.Entry{Epoch: 1, Index: 7, Kind: core.EntryPublish, Offset: 6, Body: &core.Body{Payload: payload}},
		blobRef{fileID: 5, offsetBytes: 100, lengthBytes: 10, crc: 1, roundLastIndex: 9}, &blobScratch{})
	if _, ref, _, reason := checkRecord(marked, 7, 1, false); reason != CutNone || ref.roundLastIndex != 9 {
		t.Fatalf("marked record: %v %+v", reason, ref)
	}
	binary.BigEndian.PutUint64(marked[recordHeaderBytes+25:], 6)
	binary.BigEndian.PutUint32(marked, crc32.Checksum(marked[recordHeaderBytes:], castagnoli))
	if _, _, _, reason := checkRecord(marked, 7, 1, false); reason != CutUndecodable {
		t.Fatalf("a round ending before its record: %v, want undecodable", reason)
	}
}
