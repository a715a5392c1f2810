package logstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
)

// Snapshot files. Invariants:
//   - a snapshot file appears under its final name only complete and
//     fsynced (written as .tmp, fsynced, renamed, directory fsynced), so a
//     crash leaves either the old snapshot or the new one, plus at most a
//     .tmp that Open removes;
//   - the newest valid snapshot wins; older ones are removed once a newer
//     one is durable;
//   - a snapshot at index S is written only when the log is durable up to
//     S, so the log never ends before the snapshot unless the disk lost it.

// snapshotFile is one snapshot file in the directory.
type snapshotFile struct {
	name  string
	index uint64
}

const (
	snapshotPrefix    = "snapshot-"
	snapshotTmpSuffix = ".tmp"
	// snapshotHeaderBytes: magic, index, data length, CRC-32C.
	snapshotHeaderBytes = 4 + 8 + 8 + 4
)

// snapshotMagic opens a snapshot file (the core's snapshot bytes follow the
// header and carry their own magic).
var snapshotMagic = [4]byte{'F', 'L', 'S', '1'}

func snapshotName(index uint64) string {
	return fmt.Sprintf("%s%0*d", snapshotPrefix, segmentNameDigits, index)
}

func parseSnapshotName(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, snapshotPrefix)
	if !ok {
		return 0, false
	}
	return parseIndexName(digits)
}

func isSnapshotTmpName(name string) bool {
	base, ok := strings.CutSuffix(name, snapshotTmpSuffix)
	if !ok {
		return false
	}
	_, ok = parseSnapshotName(base)
	return ok
}

// snapshotChecksum covers the index and the length as well as the data, so
// a header pointing at the wrong bytes fails too.
func snapshotChecksum(index uint64, data []byte) uint32 {
	var fields [16]byte
	binary.BigEndian.PutUint64(fields[0:], index)
	binary.BigEndian.PutUint64(fields[8:], uint64(len(data)))
	crc := crc32.Update(0, castagnoli, fields[:])
	return crc32.Update(crc, castagnoli, data)
}

// writeSnapshotFile stores data as the snapshot at index, atomically.
func writeSnapshotFile(dir string, dirFile *os.File, index uint64, data []byte) (err error) {
	final := filepath.Join(dir, snapshotName(index))
	tmp := final + snapshotTmpSuffix
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, filePerm)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp) // best effort: Open removes it otherwise
		}
	}()
	header := make([]byte, 0, snapshotHeaderBytes)
	header = append(header, snapshotMagic[:]...)
	header = binary.BigEndian.AppendUint64(header, index)
	header = binary.BigEndian.AppendUint64(header, uint64(len(data)))
	header = binary.BigEndian.AppendUint32(header, snapshotChecksum(index, data))
	if _, err = f.Write(header); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, final); err != nil {
		return err
	}
	return dirFile.Sync()
}

// readSnapshotFile reads and verifies the snapshot file for index.
func readSnapshotFile(dir string, index uint64) ([]byte, error) {
	name := snapshotName(index)
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	corrupt := func(why string) error {
		return fmt.Errorf("logstore %s: snapshot %s: %s: %w", dir, name, why, ErrCorrupt)
	}
	if len(b) < snapshotHeaderBytes || [4]byte(b[:4]) != snapshotMagic {
		return nil, corrupt("bad header")
	}
	if binary.BigEndian.Uint64(b[4:]) != index {
		return nil, corrupt("index differs from its name")
	}
	data := b[snapshotHeaderBytes:]
	if binary.BigEndian.Uint64(b[12:]) != uint64(len(data)) {
		return nil, corrupt("length differs from the file")
	}
	if binary.BigEndian.Uint32(b[20:]) != snapshotChecksum(index, data) {
		return nil, corrupt("checksum mismatch")
	}
	return data, nil
}

// loadNewestSnapshot returns the newest snapshot (index 0 and nil when there
// is none) and removes the older ones, which a crash between writing a new
// snapshot and removing its predecessor leaves behind. A newest snapshot
// that fails its checksum is an error, not a reason to fall back: the log
// may already be truncated past the older one.
func loadNewestSnapshot(dir string, snapshots []snapshotFile) (uint64, []byte, error) {
	if len(snapshots) == 0 {
		return 0, nil, nil
	}
	newest := snapshots[len(snapshots)-1]
	data, err := readSnapshotFile(dir, newest.index)
	if err != nil {
		return 0, nil, err
	}
	for _, old := range snapshots[:len(snapshots)-1] {
		if err := os.Remove(filepath.Join(dir, old.name)); err != nil {
			return 0, nil, err
		}
	}
	return newest.index, data, nil
}

// Snapshot policy limits (see ShouldSnapshot).
const (
	// SnapshotEntriesMin is the fewest entries between two snapshots: below
	// it a snapshot saves little replay and costs a tidwall TruncateFront,
	// which rewrites the rest of the segment it cuts.
	SnapshotEntriesMin = 100_000
	// SnapshotLiveFactor: wait for this many entries per live message, so
	// the bytes written for snapshots stay a fraction of the log's bytes.
	SnapshotLiveFactor = 4
)

// ShouldSnapshot says whether a partition with liveMessages live messages
// and entriesSinceSnapshot entries appended since its last snapshot should
// snapshot now. It bounds both the disk (the snapshot plus at most
// max(SnapshotEntriesMin, SnapshotLiveFactor*live) entries of log) and the
// replay at recovery, while a snapshot, which costs O(live), is written at
// most once per SnapshotLiveFactor*live entries.
func ShouldSnapshot(entriesSinceSnapshot, liveMessages int) bool {
	return entriesSinceSnapshot > max(SnapshotEntriesMin, SnapshotLiveFactor*liveMessages)
}
