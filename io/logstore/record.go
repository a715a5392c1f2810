package logstore

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/fibril-go/fibril/core"
)

// Records and frames. Invariants:
//   - a frame is tidwall's binary entry: uvarint data length, then the data;
//   - a frame's data is one record: u32 CRC-32C (big-endian) of the rest,
//     then core.AppendEntry bytes, whose index is the frame's tidwall index;
//   - a record is checked the same way on the way in (Append asserts index
//     and epoch) and on the way out (checkRecord), so a record that passes
//     is one we wrote.

// recordHeaderBytes is the CRC in front of the entry bytes.
const recordHeaderBytes = 4

// castagnoli is CRC-32C: hardware-accelerated on amd64 and arm64, and
// better at catching burst errors than IEEE.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord encodes e as a record after dst.
func appendRecord(dst []byte, e *core.Entry) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = core.AppendEntry(dst, e)
	crc := crc32.Checksum(dst[start+recordHeaderBytes:], castagnoli)
	binary.BigEndian.PutUint32(dst[start:], crc)
	return dst
}

// checkRecord verifies and decodes the record stored at tidwall index
// wantIndex, after an entry of epoch epochMin.
func checkRecord(record []byte, wantIndex, epochMin uint64) (core.Entry, CutReason) {
	if len(record) < recordHeaderBytes {
		return core.Entry{}, CutShortRecord
	}
	crc := binary.BigEndian.Uint32(record)
	if crc32.Checksum(record[recordHeaderBytes:], castagnoli) != crc {
		return core.Entry{}, CutChecksum
	}
	e, err := core.DecodeEntry(record[recordHeaderBytes:])
	if err != nil {
		return core.Entry{}, CutUndecodable
	}
	if e.Index != wantIndex {
		return core.Entry{}, CutIndexMismatch
	}
	if e.Epoch < epochMin {
		return core.Entry{}, CutEpochWentBack
	}
	return e, CutNone
}

// recordSizeBytesEstimate approximates (from above, within about a hundred
// bytes) the size of e's record without encoding it: the Committer sizes
// its rounds with it; Append splits by exact sizes.
func recordSizeBytesEstimate(e *core.Entry) int {
	// CRC, magic, kind, cause, epoch, index, and the fixed fields of the
	// largest kind (publish: offset, expiry, not-before).
	n := recordHeaderBytes + 3 + 8 + 8 + 3*8
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
	}
	return "unknown"
}
