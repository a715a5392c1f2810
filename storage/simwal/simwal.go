// Package simwal is a segment log (fsys.SegmentLog) over any fsys.FS that
// reproduces tidwall/wal v1.2.1 as storage uses it (binary format, empty
// logs allowed), its on-disk files byte for byte and its failure modes, so
// that the simulator runs storage over storage/simfs without real files.
// It was written from reading tidwall's behaviour, not its code.
//
// Invariants (tidwall's, kept on purpose, faults included):
//   - a segment is named by the index of its first entry, 20 digits, and
//     holds frames of uvarint length then data, back to back;
//   - the tail segment is held in memory whole (tailBuf) and is the only
//     file written; a batch first rolls a tail already over the size, and
//     within a batch the tail rolls as soon as an entry brings it to the
//     size: the finished segment is fsynced and closed, the next created
//     (emptied if present). The directory is never fsynced;
//   - Sync fsyncs the tail only; with NoSync unset every batch ends with it;
//   - TruncateFront writes the kept part of the segment holding the new
//     first index to <name>.START through <name>.START.TEMP (written,
//     fsynced, renamed), removes every earlier segment and that one, then
//     renames .START to its final name; an error after the .START is
//     written marks the log corrupt for good;
//   - Open finishes an interrupted truncation (.START: remove what precedes
//     it and rename it; .END likewise from the back; both: corrupt), reads
//     only the tail segment back and fails with ErrSegmentCorrupt when any
//     frame of it is cut off or its length does not parse. It checks no
//     other segment, no checksum, and no name continuity.
package simwal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	"github.com/fibril-go/fibril/storage/fsys"
)

const nameDigits = 20

// The errors tidwall returns, as simwal does.
var (
	ErrCorrupt    = fmt.Errorf("simwal: log corrupt: %w", fsys.ErrSegmentCorrupt)
	ErrClosed     = errors.New("simwal: log closed")
	ErrOutOfOrder = errors.New("simwal: out of order")
	ErrOutOfRange = errors.New("simwal: out of range")
)

// Opener returns the fsys.OpenSegmentLog of simwal over fs.
func Opener(fs fsys.FS) fsys.OpenSegmentLog {
	return func(dir string, opts fsys.SegmentLogOptions) (fsys.SegmentLog, error) { return Open(fs, dir, opts) }
}

type segment struct {
	index uint64
	path  string
}

// Log is one segment log.
type Log struct {
	fs         fsys.FS
	dir        string
	opts       fsys.SegmentLogOptions
	segments   []segment
	firstIndex uint64
	lastIndex  uint64
	tail       fsys.File
	tailBuf    []byte // the tail segment's bytes
	tailStarts []int  // where each of its frames starts
	closed     bool
	corrupt    bool
}

func segmentName(index uint64) string { return fmt.Sprintf("%0*d", nameDigits, index) }

// Open opens the log in dir, creating it when it holds no segment.
func Open(fs fsys.FS, dir string, opts fsys.SegmentLogOptions) (*Log, error) {
	if opts.SegmentSizeBytes <= 0 {
		opts.SegmentSizeBytes = 20 << 20 // tidwall's default
	}
	if err := fs.MkdirAll(dir); err != nil {
		return nil, err
	}
	l := &Log{fs: fs, dir: dir, opts: opts}
	if err := l.load(); err != nil {
		if l.tail != nil {
			l.tail.Close()
		}
		return nil, err
	}
	return l, nil
}

func (l *Log) load() error {
	entries, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return err
	}
	startAt, endAt := -1, -1
	for _, e := range entries {
		name := e.Name
		if e.IsDir || len(name) < nameDigits {
			continue
		}
		index, err := strconv.ParseUint(name[:nameDigits], 10, 64)
		if err != nil || index == 0 {
			continue
		}
		isStart := len(name) == nameDigits+len(".START") && strings.HasSuffix(name, ".START")
		isEnd := len(name) == nameDigits+len(".END") && strings.HasSuffix(name, ".END")
		if len(name) != nameDigits && !isStart && !isEnd {
			continue
		}
		if isStart {
			startAt = len(l.segments)
		} else if isEnd && endAt == -1 {
			endAt = len(l.segments)
		}
		l.segments = append(l.segments, segment{index: index, path: path.Join(l.dir, name)})
	}
	if len(l.segments) == 0 {
		l.segments = []segment{{index: 1, path: path.Join(l.dir, segmentName(1))}}
		l.firstIndex, l.lastIndex = 1, 0
		l.tail, err = l.fs.Create(l.segments[0].path, false)
		return err
	}
	if startAt != -1 {
		if endAt != -1 {
			return ErrCorrupt
		}
		if err := l.finishStart(startAt); err != nil {
			return err
		}
	}
	if endAt != -1 {
		if err := l.finishEnd(endAt); err != nil {
			return err
		}
	}
	l.firstIndex = l.segments[0].index
	last := l.segments[len(l.segments)-1]
	if l.tail, err = l.fs.OpenAppend(last.path); err != nil {
		return err
	}
	if err := l.loadTail(last.path); err != nil {
		return err
	}
	l.lastIndex = last.index + uint64(len(l.tailStarts)) - 1
	return nil
}

// finishStart completes a TruncateFront: what precedes the .START goes.
func (l *Log) finishStart(startAt int) error {
	for i := 0; i < startAt; i++ {
		if err := l.fs.Remove(l.segments[i].path); err != nil {
			return err
		}
	}
	l.segments = append([]segment(nil), l.segments[startAt:]...)
	final := strings.TrimSuffix(l.segments[0].path, ".START")
	if err := l.fs.Rename(l.segments[0].path, final); err != nil {
		return err
	}
	l.segments[0].path = final
	return nil
}

// finishEnd completes a TruncateBack: what follows the .END goes.
func (l *Log) finishEnd(endAt int) error {
	for i := len(l.segments) - 1; i > endAt; i-- {
		if err := l.fs.Remove(l.segments[i].path); err != nil {
			return err
		}
	}
	l.segments = append([]segment(nil), l.segments[:endAt+1]...)
	if n := len(l.segments); n > 1 && l.segments[n-2].index == l.segments[n-1].index {
		l.segments[n-2] = l.segments[n-1]
		l.segments = l.segments[:n-1]
	}
	lastSeg := &l.segments[len(l.segments)-1]
	final := strings.TrimSuffix(lastSeg.path, ".END")
	if err := l.fs.Rename(lastSeg.path, final); err != nil {
		return err
	}
	lastSeg.path = final
	return nil
}

// readFile reads a whole file through the FS.
func readFile(fs fsys.FS, p string) ([]byte, error) {
	f, err := fs.OpenRead(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.SizeBytes()
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	for done := 0; done < len(data); {
		n, err := f.ReadAt(data[done:], int64(done))
		done += n
		if done < len(data) && err != nil {
			if err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return data, nil
}

// frameStarts parses a segment's frames, as tidwall loads a segment: any
// frame whose length does not parse or runs past the end is corruption.
func frameStarts(data []byte) ([]int, error) {
	var starts []int
	for pos := 0; pos < len(data); {
		size, n := binary.Uvarint(data[pos:])
		if n <= 0 || uint64(len(data)-pos-n) < size {
			return nil, ErrCorrupt
		}
		starts = append(starts, pos)
		pos += n + int(size)
	}
	return starts, nil
}

func (l *Log) loadTail(p string) error {
	data, err := readFile(l.fs, p)
	if err != nil {
		return err
	}
	starts, err := frameStarts(data)
	if err != nil {
		return err
	}
	l.tailBuf, l.tailStarts = data, starts
	return nil
}

func (l *Log) usable() error {
	if l.corrupt {
		return ErrCorrupt
	}
	if l.closed {
		return ErrClosed
	}
	return nil
}

func (l *Log) FirstIndex() (uint64, error) {
	if err := l.usable(); err != nil {
		return 0, err
	}
	return l.firstIndex, nil
}

func (l *Log) LastIndex() (uint64, error) {
	if err := l.usable(); err != nil {
		return 0, err
	}
	return l.lastIndex, nil
}
