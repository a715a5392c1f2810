package storage

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"path"

	"github.com/fibril-go/fibril/storage/fsys"
)

// The clean-close mark (Options.MarkCleanClose). A synced mark in a record
// (record.go) only covers rounds before a later one, so damage to the last
// round of a log (a flipped byte in its last record, a file cut short in
// the middle of it) reads exactly as a write a crash cut short, and
// recovery trims it as a torn tail: a confirmed message lost without a
// word. A clean Close knows everything is synced: it leaves this mark,
// naming the last index, and the next Open counts it as a synced mark, so
// damage at or below it is corruption (SPEC 7 recovery checks), not a torn
// tail. Invariants:
//   - written only after the final fsync of a log that did not fail, and
//     fsynced with its directory entry before Close returns;
//   - an Open that goes on to serve removes it before anything is
//     appended (made durable with the directory sync of recovery): after
//     a cut or new appends it would claim too much; an Open that refuses
//     corruption leaves it, so the next Open finds the same damage;
//   - a mark that does not pass its CRC is ignored (no claim at all).

// closedMarkName does not parse as a segment, blob or snapshot name, and
// tidwall skips it.
const closedMarkName = "clean-close.mark"

// closedMarkBytes: the last index (u64) and a CRC-32C of it.
const closedMarkBytes = 8 + 4

// writeClosedMark records that the log was closed with everything up to
// lastIndex synced.
func writeClosedMark(fs fsys.FS, dir string, lastIndex uint64) error {
	var b [closedMarkBytes]byte
	binary.BigEndian.PutUint64(b[:8], lastIndex)
	binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[:8], castagnoli))
	f, err := fs.Create(path.Join(dir, closedMarkName), false)
	if err != nil {
		return err
	}
	_, err = f.Write(b[:])
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	return fs.SyncDir(dir)
}

// readClosedMark is the index a clean-close mark claims synced, or 0 when
// there is none (or it does not check).
func readClosedMark(fs fsys.FS, dir string) (uint64, error) {
	data, err := readFile(fs, path.Join(dir, closedMarkName))
	if errors.Is(err, fsys.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(data) != closedMarkBytes || crc32.Checksum(data[:8], castagnoli) != binary.BigEndian.Uint32(data[8:]) {
		return 0, nil
	}
	return binary.BigEndian.Uint64(data[:8]), nil
}

// removeClosedMark unlinks the mark if there is one (the caller syncs the
// directory).
func removeClosedMark(fs fsys.FS, dir string) error {
	err := fs.Remove(path.Join(dir, closedMarkName))
	if errors.Is(err, fsys.ErrNotExist) {
		return nil
	}
	return err
}
