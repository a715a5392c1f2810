package storage

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/fibril-go/fibril/core"
)

// Records and frames. Invariants:
//   - a frame is tidwall's binary entry: uvarint data length, then the data;
//   - a frame's data is one record: u32 CRC-32C (big-endian) of the rest,
//     then either core.AppendEntry bytes (an inline record: they start with
//     the entry magic 0xFE), or a blob record: the byte blobRecordKind, the
//     blob reference (file id u64, offset u64, length u32, payload CRC-32C
//     u32, all big-endian), then core.AppendEntry bytes of the entry with an
//     empty payload. Either way the entry's index is the frame's tidwall index;
//   - only a publish with a payload of at least BlobPayloadBytesMin gets a
//     blob record, and its payload is durable in the blob file before the
//     record is written to tidwall (blob.go);
//   - a record is checked the same way on the way in (Append asserts index
//     and epoch) and on the way out (checkRecord), so a record that passes
//     is one we wrote.
//   - the first record of each Append may open with a synced mark: the byte
//     syncedMarkKind and the index (u64 big-endian, below the record's own)
//     up to which the log was synced when the round was appended; then the
//     record as without it. Recovery refuses damage at or below a mark that
//     a record passing its CRC carries (repair.go).

// recordHeaderBytes is the CRC in front of the entry bytes.
const recordHeaderBytes = 4

// castagnoli is CRC-32C: hardware-accelerated on amd64 and arm64, and
// better at catching burst errors than IEEE.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord encodes e as a record after dst, with a synced mark of
// syncedMark unless it is 0 (nothing synced: a mark would tell nothing).
func appendRecord(dst []byte, e *core.Entry, syncedMark uint64) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = appendSyncedMark(dst, e, syncedMark)
	dst = core.AppendEntry(dst, e)
	crc := crc32.Checksum(dst[start+recordHeaderBytes:], castagnoli)
	binary.BigEndian.PutUint32(dst[start:], crc)
	return dst
}

const (
	// blobRecordKind opened blob records before round marks (below); such
	// records are still read. It differs from core's entry magic (0xFE),
	// which opens an inline record, so logs written before blob records
	// existed read unchanged.
	blobRecordKind = 0xB1
	// blobRefBytes: kind, file id, offset, length, payload CRC.
	blobRefBytes = 1 + 8 + 8 + 4 + 4
	// blobRecordKindRound opens the blob records Append writes now: the
	// reference is followed by the index of the last entry of the Append
	// that wrote it (its round), which recovery needs to tell a payload
	// lost with its unfinished round from a damaged one (repair.go).
	blobRecordKindRound = 0xB2
	blobRefBytesRound   = blobRefBytes + 8
	// syncedMarkKind opens a synced mark (the package invariants); it
	// differs from the entry magic and the blob kinds, so a record without
	// one reads as before and one with it is refused by older code.
	syncedMarkKind  = 0xC5
	syncedMarkBytes = 1 + 8
)

// appendSyncedMark writes a synced mark of syncedMark, unless it is 0.
func appendSyncedMark(dst []byte, e *core.Entry, syncedMark uint64) []byte {
	if syncedMark == 0 {
		return dst
	}
	assertTrue(syncedMark < e.Index, "a synced mark is below its record")
	dst = append(dst, syncedMarkKind)
	return binary.BigEndian.AppendUint64(dst, syncedMark)
}

// recordSyncedMark is the synced mark of a record (frame data) that claims
// index, or 0 when it has none (or one no Append writes).
func recordSyncedMark(record []byte, index uint64) uint64 {
	if len(record) < recordHeaderBytes+syncedMarkBytes || record[recordHeaderBytes] != syncedMarkKind {
		return 0
	}
	if mark := binary.BigEndian.Uint64(record[recordHeaderBytes+1:]); mark < index {
		return mark
	}
	return 0
}

// blobRef locates one payload in the blob files.
type blobRef struct {
	fileID      uint64 // the blob file's name: the index of the first entry in it
	offsetBytes uint64 // where the payload starts in the file
	lengthBytes uint32 // > 0: only payloads of at least BlobPayloadBytesMin >= 1 go to blobs
	crc         uint32 // CRC-32C of the payload
	// roundLastIndex is the last index of the Append that wrote the
	// payload (for records without a round mark, the record's own index).
	roundLastIndex uint64
}

func (r blobRef) endBytes() uint64 { return r.offsetBytes + uint64(r.lengthBytes) }

// appendBlobRecord encodes e as a blob record after dst: ref in place of
// the payload. scratch is reused to encode e without its payload, without
// changing e.Body, which the core and other goroutines share.
func appendBlobRecord(dst []byte, e *core.Entry, ref blobRef, scratch *blobScratch, syncedMark uint64) []byte {
	assertTrue(e.Kind == core.EntryPublish && e.Body != nil, "only publishes have blob payloads")
	assertTrue(uint64(len(e.Body.Payload)) == uint64(ref.lengthBytes) && ref.lengthBytes > 0, "the reference is to this payload")
	assertTrue(ref.roundLastIndex >= e.Index, "a record is in its own round")
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = appendSyncedMark(dst, e, syncedMark)
	dst = append(dst, blobRecordKindRound)
	dst = binary.BigEndian.AppendUint64(dst, ref.fileID)
	dst = binary.BigEndian.AppendUint64(dst, ref.offsetBytes)
	dst = binary.BigEndian.AppendUint32(dst, ref.lengthBytes)
	dst = binary.BigEndian.AppendUint32(dst, ref.crc)
	dst = binary.BigEndian.AppendUint64(dst, ref.roundLastIndex)
	scratch.entry, scratch.body = *e, *e.Body
	scratch.body.Payload = nil
	scratch.entry.Body = &scratch.body
	dst = core.AppendEntry(dst, &scratch.entry)
	*scratch = blobScratch{} // keep no reference to the caller's entry
	crc := crc32.Checksum(dst[start+recordHeaderBytes:], castagnoli)
	binary.BigEndian.PutUint32(dst[start:], crc)
	return dst
}

// blobScratch is the payload-less copy of an entry appendBlobRecord encodes.
type blobScratch struct {
	entry core.Entry
	body  core.Body
}

// checkRecord verifies and decodes the record stored at tidwall index
// wantIndex, after an entry of epoch epochMin. For a blob record it returns
// the reference too (ok), and the entry's payload is still to be read.
// skipCRC is only ever true under a mutant (scanSegments).
func checkRecord(record []byte, wantIndex, epochMin uint64, skipCRC bool) (core.Entry, blobRef, bool, CutReason) {
	if len(record) < recordHeaderBytes {
		return core.Entry{}, blobRef{}, false, CutShortRecord
	}
	crc := binary.BigEndian.Uint32(record)
	if !skipCRC && crc32.Checksum(record[recordHeaderBytes:], castagnoli) != crc {
		return core.Entry{}, blobRef{}, false, CutChecksum
	}
	body := record[recordHeaderBytes:]
	if len(body) > 0 && body[0] == syncedMarkKind {
		if len(body) < syncedMarkBytes || binary.BigEndian.Uint64(body[1:]) >= wantIndex {
			return core.Entry{}, blobRef{}, false, CutUndecodable
		}
		body = body[syncedMarkBytes:]
	}
	var ref blobRef
	isBlob := len(body) > 0 && (body[0] == blobRecordKind || body[0] == blobRecordKindRound)
	if isBlob {
		refBytes := blobRefBytes
		if body[0] == blobRecordKindRound {
			refBytes = blobRefBytesRound
		}
		if len(body) < refBytes {
			return core.Entry{}, blobRef{}, false, CutUndecodable
		}
		ref = blobRef{
			fileID:      binary.BigEndian.Uint64(body[1:]),
			offsetBytes: binary.BigEndian.Uint64(body[9:]),
			lengthBytes: binary.BigEndian.Uint32(body[17:]),
			crc:         binary.BigEndian.Uint32(body[21:]),
		}
		if refBytes == blobRefBytesRound {
			ref.roundLastIndex = binary.BigEndian.Uint64(body[25:])
		}
		body = body[refBytes:]
	}
	e, err := core.DecodeEntry(body)
	if err != nil {
		return core.Entry{}, blobRef{}, false, CutUndecodable
	}
	if isBlob && ref.roundLastIndex == 0 {
		ref.roundLastIndex = e.Index // no round mark: a round of its own
	}
	if isBlob && (e.Kind != core.EntryPublish || len(e.Body.Payload) != 0 || ref.lengthBytes == 0 ||
		ref.fileID == 0 || ref.fileID > e.Index || ref.roundLastIndex < e.Index) {
		// CRC fine but not what appendBlobRecord writes.
		return core.Entry{}, blobRef{}, false, CutUndecodable
	}
	if e.Index != wantIndex {
		return core.Entry{}, blobRef{}, false, CutIndexMismatch
	}
	if e.Epoch < epochMin {
		return core.Entry{}, blobRef{}, false, CutEpochWentBack
	}
	return e, ref, isBlob, CutNone
}

// recordSizeBytesEstimate approximates (from above, within about a hundred
// bytes) the size of e's record without encoding it: the Committer sizes
// its rounds with it; Append splits by exact sizes.
func recordSizeBytesEstimate(e *core.Entry) int {
	// CRC, magic, kind, cause, epoch, index, and the fixed fields of the
	// largest kind (publish: offset, expiry, not-before).
	// A synced mark is counted for every record, first of a round or not.
	n := recordHeaderBytes + syncedMarkBytes + 3 + 8 + 8 + 3*8
	if b := e.Body; b != nil {
		// stamps, content kind and length, header count, payload length
		n += 8 + 8 + 1 + 4 + 4 + 4 + len(b.ContentType.Custom) + len(b.Payload)
		for _, h := range b.Headers {
			n += 8 + len(h.Key) + len(h.Value)
		}
	}
	if s := e.Settings; s != nil {
		n += 1 + 8 + 4 + 8 + len(s.DLQ.Target.Topic) + len(s.DLQ.Target.Group)
	}
	if t := e.Target; t != nil {
		n += 1 + 8 + len(t.Topic) + len(t.Group)
	}
	return n
}

// frameBytes is the size of the tidwall frame holding a record of
// recordBytes: what tidwall adds to its tail segment for it.
func frameBytes(recordBytes int) int {
	var scratch [binary.MaxVarintLen64]byte
	return binary.PutUvarint(scratch[:], uint64(recordBytes)) + recordBytes
}

// frame is one tidwall frame parsed from the front of a buffer.
type frame struct {
	totalBytes int    // length prefix plus data; 0 when not ok
	data       []byte // the record
	ok         bool
	// reachesEOF says the frame ends exactly at the end of the buffer or
	// would need bytes past it: what an unfinished last write looks like.
	reachesEOF bool
}

// parseFrame reads the frame at the front of b (len(b) > 0).
func parseFrame(b []byte) frame {
	size, n := binary.Uvarint(b)
	if n == 0 {
		return frame{reachesEOF: true} // the length prefix itself is cut off
	}
	if n < 0 {
		return frame{} // more than 64 bits of length: garbage, not a cut-off write
	}
	if uint64(len(b)-n) < size {
		return frame{reachesEOF: true}
	}
	total := n + int(size)
	return frame{totalBytes: total, data: b[n:total], ok: true, reachesEOF: total == len(b)}
}

// countFrames counts the complete frames at the front of b, up to the first
// one whose framing is broken (nothing after it can be located).
func countFrames(b []byte) int {
	count := 0
	for len(b) > 0 {
		f := parseFrame(b)
		if !f.ok {
			break
		}
		count++
		b = b[f.totalBytes:]
	}
	return count
}

// CutReason says why recovery cut the log at a record. Logged and reported:
// append-only.
type CutReason uint8

const (
	CutNone          CutReason = 0
	CutTornFrame     CutReason = 1 // the frame's length prefix or data runs past the end of the file
	CutShortRecord   CutReason = 2 // the record is too short to hold its CRC
	CutChecksum      CutReason = 3 // CRC mismatch
	CutUndecodable   CutReason = 4 // CRC fine, but not an entry (written by something else)
	CutIndexMismatch CutReason = 5 // the entry's index is not its place in the log
	CutEpochWentBack CutReason = 6 // the entry's epoch is below the one before it
	CutSegmentGap    CutReason = 7 // a segment file does not start where the previous one ended
	CutMissingPrefix CutReason = 8 // the log starts after snapshot index + 1: entries are missing
	CutBadFrame      CutReason = 9 // the length prefix is not a valid uvarint
	// A blob record whose payload cannot be read back: the blob file is
	// absent, ends before the payload, or holds other bytes there.
	CutBlobMissing  CutReason = 10
	CutBlobShort    CutReason = 11
	CutBlobChecksum CutReason = 12
	// CutRequested: Options.CutFromIndex asked for a cut at this record,
	// which passed every check here: core recovery refused the entry (a
	// settle of a message past the log's tail, SPEC 7), and a repair cuts
	// there.
	CutRequested CutReason = 13
)

func (r CutReason) String() string {
	switch r {
	case CutNone:
		return "none"
	case CutTornFrame:
		return "torn frame"
	case CutShortRecord:
		return "short record"
	case CutChecksum:
		return "checksum mismatch"
	case CutUndecodable:
		return "undecodable entry"
	case CutIndexMismatch:
		return "index mismatch"
	case CutEpochWentBack:
		return "epoch went back"
	case CutSegmentGap:
		return "segment gap"
	case CutMissingPrefix:
		return "missing prefix"
	case CutBadFrame:
		return "bad frame length"
	case CutBlobMissing:
		return "blob file missing"
	case CutBlobShort:
		return "blob file too short"
	case CutBlobChecksum:
		return "blob checksum mismatch"
	case CutRequested:
		return "entry refused by recovery"
	}
	return "unknown"
}
