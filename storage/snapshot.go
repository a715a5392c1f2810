package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path"
	"strings"

	"github.com/fibril-go/fibril/storage/fsys"
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
	// snapshotHeaderBytes: magic, index, keepBlobsFrom, data length, CRC-32C.
	snapshotHeaderBytes = 4 + 8 + 8 + 8 + 4
	// snapshotHeaderBytesV1: FLS1 had no keepBlobsFrom.
	snapshotHeaderBytesV1 = 4 + 8 + 8 + 4
)

// snapshotMagic opens a snapshot file (the core's snapshot bytes follow the
// header and carry their own magic). FLS2 adds keepBlobsFrom; FLS1 files
// (keepBlobsFrom 0) are still read.
var (
	snapshotMagic   = [4]byte{'F', 'L', 'S', '2'}
	snapshotMagicV1 = [4]byte{'F', 'L', 'S', '1'}
)

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

// snapshotChecksum covers the index, keepBlobsFrom (FLS2) and the length as
// well as the data, so a header pointing at the wrong bytes fails too.
func snapshotChecksum(v1 bool, index, keepBlobsFrom uint64, data []byte) uint32 {
	fields := binary.BigEndian.AppendUint64(make([]byte, 0, 24), index)
	if !v1 {
		fields = binary.BigEndian.AppendUint64(fields, keepBlobsFrom)
	}
	fields = binary.BigEndian.AppendUint64(fields, uint64(len(data)))
	crc := crc32.Update(0, castagnoli, fields)
	return crc32.Update(crc, castagnoli, data)
}

// writeSnapshotFile stores data as the snapshot at index, atomically.
func writeSnapshotFile(fs fsys.FS, dir string, index, keepBlobsFrom uint64, data []byte) (err error) {
	final := path.Join(dir, snapshotName(index))
	tmp := final + snapshotTmpSuffix
	f, err := fs.Create(tmp, false)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			fs.Remove(tmp) // best effort: Open removes it otherwise
		}
	}()
	header := make([]byte, 0, snapshotHeaderBytes)
	header = append(header, snapshotMagic[:]...)
	header = binary.BigEndian.AppendUint64(header, index)
	header = binary.BigEndian.AppendUint64(header, keepBlobsFrom)
	header = binary.BigEndian.AppendUint64(header, uint64(len(data)))
	header = binary.BigEndian.AppendUint32(header, snapshotChecksum(false, index, keepBlobsFrom, data))
	if _, err = f.Write(header); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	closed = true
	if err = f.Close(); err != nil {
		return err
	}
	if err = fs.Rename(tmp, final); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}

// readSnapshotFile reads and verifies the snapshot file for index; it
// returns the snapshot's data and keepBlobsFrom.
func readSnapshotFile(fs fsys.FS, dir string, index uint64) ([]byte, uint64, error) {
	name := snapshotName(index)
	b, err := readFile(fs, path.Join(dir, name))
	if err != nil {
		return nil, 0, err
	}
	corrupt := func(why string) error {
		return fmt.Errorf("logstore %s: snapshot %s: %s: %w", dir, name, why, ErrCorrupt)
	}
	if len(b) < snapshotHeaderBytesV1 {
		return nil, 0, corrupt("bad header")
	}
	v1 := [4]byte(b[:4]) == snapshotMagicV1
	headerBytes := snapshotHeaderBytes
	if v1 {
		headerBytes = snapshotHeaderBytesV1
	}
	if len(b) < headerBytes || (!v1 && [4]byte(b[:4]) != snapshotMagic) {
		return nil, 0, corrupt("bad header")
	}
	r := b[4:]
	if binary.BigEndian.Uint64(r) != index {
		return nil, 0, corrupt("index differs from its name")
	}
	r = r[8:]
	keepBlobsFrom := uint64(0)
	if !v1 {
		keepBlobsFrom, r = binary.BigEndian.Uint64(r), r[8:]
	}
	data := b[headerBytes:]
	if binary.BigEndian.Uint64(r) != uint64(len(data)) {
		return nil, 0, corrupt("length differs from the file")
	}
	if binary.BigEndian.Uint32(r[8:]) != snapshotChecksum(v1, index, keepBlobsFrom, data) {
		return nil, 0, corrupt("checksum mismatch")
	}
	return data, keepBlobsFrom, nil
}

// loadNewestSnapshot returns the newest snapshot (index 0 and nil when there
// is none) and removes the older ones, which a crash between writing a new
// snapshot and removing its predecessor leaves behind. A newest snapshot
// that fails its checksum is an error, not a reason to fall back: the log
// may already be truncated past the older one.
func loadNewestSnapshot(fs fsys.FS, dir string, snapshots []snapshotFile) (index uint64, data []byte, keepBlobsFrom uint64, err error) {
	if len(snapshots) == 0 {
		return 0, nil, 0, nil
	}
	newest := snapshots[len(snapshots)-1]
	data, keepBlobsFrom, err = readSnapshotFile(fs, dir, newest.index)
	if err != nil {
		return 0, nil, 0, err
	}
	for _, old := range snapshots[:len(snapshots)-1] {
		if err := fs.Remove(path.Join(dir, old.name)); err != nil {
			return 0, nil, 0, err
		}
	}
	return newest.index, data, keepBlobsFrom, nil
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
	return ShouldSnapshotAfter(SnapshotEntriesMin, entriesSinceSnapshot, liveMessages)
}

// ShouldSnapshotAfter is ShouldSnapshot with another floor than
// SnapshotEntriesMin (tests that want snapshots often, small deployments).
func ShouldSnapshotAfter(entriesMin, entriesSinceSnapshot, liveMessages int) bool {
	return entriesSinceSnapshot > max(entriesMin, SnapshotLiveFactor*liveMessages)
}
