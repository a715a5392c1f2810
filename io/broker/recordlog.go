package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/fibril-go/fibril/core/node"
)

// INTERIM: a file-backed record log with the API of logstore.OpenRecordLog
// (the storage branch), used until that lands; then openRecordLog calls it
// and this file goes. Invariants:
//   - records are framed [len u32][crc32c u32][index u64][data], indexes
//     contiguous from the snapshot's index + 1;
//   - a frame cut short or failing its CRC as the last frame of the file is
//     a torn tail (a crash mid-append, never reported durable): cut; a bad
//     frame with more data after it is corruption: Open refuses;
//   - a snapshot is written to a temporary file, synced and renamed; the
//     records it covers are then dropped by rewriting the log the same way.

var errRecordLogCorrupt = errors.New("record log: corrupt record")

const (
	recordFrameHeaderBytes = 16
	recordDataBytesMax     = 64 << 20
	recordLogName          = "records"
	recordSnapshotName     = "snapshot"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type fileRecordLog struct {
	dir       string
	f         *os.File
	lastIndex uint64
}

func openRecordLog(dir string) (recordLog, recoveredRecords, error) {
	var rec recoveredRecords
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, rec, err
	}
	snapIndex, snap, err := readRecordSnapshot(filepath.Join(dir, recordSnapshotName))
	if err != nil {
		return nil, rec, err
	}
	rec.Snapshot, rec.SnapshotIndex = snap, snapIndex
	path := filepath.Join(dir, recordLogName)
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, rec, err
	}
	records, validBytes, err := scanRecords(data, snapIndex)
	if err != nil {
		return nil, rec, err
	}
	for _, r := range records {
		if r.Index > snapIndex {
			rec.Records = append(rec.Records, r)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, rec, err
	}
	if int64(validBytes) != int64(len(data)) {
		if err := f.Truncate(int64(validBytes)); err != nil {
			f.Close()
			return nil, rec, err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, rec, err
		}
	}
	if _, err := f.Seek(int64(validBytes), 0); err != nil {
		f.Close()
		return nil, rec, err
	}
	l := &fileRecordLog{dir: dir, f: f, lastIndex: snapIndex}
	if len(records) > 0 {
		l.lastIndex = max(snapIndex, records[len(records)-1].Index)
	}
	return l, rec, syncDir(dir)
}

// scanRecords parses frames; it returns the valid prefix's records and size.
func scanRecords(data []byte, snapIndex uint64) ([]node.Record, int, error) {
	var out []node.Record
	pos := 0
	for pos < len(data) {
		if len(data)-pos < recordFrameHeaderBytes {
			return out, pos, nil // torn header
		}
		size := int(binary.BigEndian.Uint32(data[pos:]))
		end := pos + recordFrameHeaderBytes + size
		if size > recordDataBytesMax {
			return nil, 0, fmt.Errorf("%w at byte %d: length %d", errRecordLogCorrupt, pos, size)
		}
		if end > len(data) {
			return out, pos, nil // torn: cut short
		}
		sum := binary.BigEndian.Uint32(data[pos+4:])
		if crc32.Checksum(data[pos+8:end], castagnoli) != sum {
			if end == len(data) {
				return out, pos, nil // torn last frame
			}
			return nil, 0, fmt.Errorf("%w at byte %d: checksum mismatch", errRecordLogCorrupt, pos)
		}
		index := binary.BigEndian.Uint64(data[pos+8:])
		if len(out) > 0 && index != out[len(out)-1].Index+1 {
			return nil, 0, fmt.Errorf("%w at byte %d: index %d after %d", errRecordLogCorrupt, pos, index, out[len(out)-1].Index)
		}
		out = append(out, node.Record{Index: index, Data: append([]byte(nil), data[pos+recordFrameHeaderBytes:end]...)})
		pos = end
	}
	if len(out) > 0 && out[0].Index > snapIndex+1 {
		return nil, 0, fmt.Errorf("%w: records start at %d after a snapshot at %d", errRecordLogCorrupt, out[0].Index, snapIndex)
	}
	return out, pos, nil
}

func appendRecordFrame(dst []byte, r node.Record) []byte {
	var hdr [recordFrameHeaderBytes]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(len(r.Data)))
	binary.BigEndian.PutUint64(hdr[8:], r.Index)
	sum := crc32.Update(crc32.Checksum(hdr[8:16], castagnoli), castagnoli, r.Data)
	binary.BigEndian.PutUint32(hdr[4:], sum)
	return append(append(dst, hdr[:]...), r.Data...)
}

func (l *fileRecordLog) Append(records []node.Record) error {
	var buf []byte
	for _, r := range records {
		if r.Index != l.lastIndex+1 {
			return fmt.Errorf("record log: append %d after %d", r.Index, l.lastIndex)
		}
		buf = appendRecordFrame(buf, r)
		l.lastIndex = r.Index
	}
	_, err := l.f.Write(buf)
	return err
}

func (l *fileRecordLog) Sync() error       { return l.f.Sync() }
func (l *fileRecordLog) LastIndex() uint64 { return l.lastIndex }
func (l *fileRecordLog) Close() error      { return l.f.Close() }

// SaveSnapshot stores data as the state at index, then drops the records
// it covers.
func (l *fileRecordLog) SaveSnapshot(index uint64, data []byte) error {
	var buf [12]byte
	binary.BigEndian.PutUint64(buf[4:], index)
	binary.BigEndian.PutUint32(buf[0:], crc32.Update(crc32.Checksum(buf[4:], castagnoli), castagnoli, data))
	if err := writeFileAtomic(filepath.Join(l.dir, recordSnapshotName), append(buf[:], data...), 0o644); err != nil {
		return err
	}
	path := filepath.Join(l.dir, recordLogName)
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	records, _, err := scanRecords(old, 0)
	if err != nil {
		return err
	}
	var kept []byte
	for _, r := range records {
		if r.Index > index {
			kept = appendRecordFrame(kept, r)
		}
	}
	if err := writeFileAtomic(path, kept, 0o644); err != nil {
		return err
	}
	l.f.Close()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	l.f = f
	return nil
}

func readRecordSnapshot(path string) (uint64, []byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	if len(data) < 12 || crc32.Checksum(data[4:], castagnoli) != binary.BigEndian.Uint32(data) {
		return 0, nil, fmt.Errorf("%w: snapshot %s", errRecordLogCorrupt, path)
	}
	return binary.BigEndian.Uint64(data[4:]), data[12:], nil
}
