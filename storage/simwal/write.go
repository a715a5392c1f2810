package simwal

import (
	"encoding/binary"
	"errors"
	"path"

	"github.com/fibril-go/fibril/storage/fsys"
)

// Writing, rolling and truncating. Invariants:
//   - tailBuf is exactly the tail segment's bytes once a WriteBatch
//     returns nil (the file may hold less only after an error);
//   - a finished segment is fsynced before the next one is created, and
//     never written again.

type batchEntry struct {
	index     uint64
	sizeBytes int
}

// batch is a fsys.Batch: entries and their data back to back.
type batch struct {
	entries []batchEntry
	data    []byte
}

func (b *batch) Write(index uint64, data []byte) {
	b.entries = append(b.entries, batchEntry{index: index, sizeBytes: len(data)})
	b.data = append(b.data, data...)
}

func (b *batch) Clear() { b.entries, b.data = b.entries[:0], b.data[:0] }

func (l *Log) NewBatch() fsys.Batch { return &batch{} }

func (l *Log) WriteBatch(fb fsys.Batch) error {
	if err := l.usable(); err != nil {
		return err
	}
	b := fb.(*batch)
	if len(b.entries) == 0 {
		return nil
	}
	for i, e := range b.entries {
		if e.index != l.lastIndex+uint64(i+1) {
			return ErrOutOfOrder
		}
	}
	if len(l.tailBuf) > l.opts.SegmentSizeBytes {
		if err := l.cycle(); err != nil {
			return err
		}
	}
	mark := len(l.tailBuf)
	data := b.data
	for _, e := range b.entries {
		l.tailStarts = append(l.tailStarts, len(l.tailBuf))
		l.tailBuf = binary.AppendUvarint(l.tailBuf, uint64(e.sizeBytes))
		l.tailBuf = append(l.tailBuf, data[:e.sizeBytes]...)
		data = data[e.sizeBytes:]
		if len(l.tailBuf) >= l.opts.SegmentSizeBytes {
			if _, err := l.tail.Write(l.tailBuf[mark:]); err != nil {
				return err
			}
			l.lastIndex = e.index
			if err := l.cycle(); err != nil {
				return err
			}
			mark = 0
		}
	}
	if len(l.tailBuf) > mark {
		if _, err := l.tail.Write(l.tailBuf[mark:]); err != nil {
			return err
		}
		l.lastIndex = b.entries[len(b.entries)-1].index
	}
	assertTrue(l.lastIndex == b.entries[len(b.entries)-1].index, "a written batch ends the log")
	assertTrue(len(l.tailBuf) < l.opts.SegmentSizeBytes, "a tail that reached the size has rolled")
	if !l.opts.NoSync {
		if err := l.tail.Sync(); err != nil {
			return err
		}
	}
	b.Clear()
	return nil
}

// assertTrue panics with why when cond is false: only a bug breaks it.
func assertTrue(cond bool, why string) {
	if !cond {
		panic("fibril/simwal invariant violated: " + why)
	}
}

// cycle finishes the tail (fsync, close) and starts the next segment.
func (l *Log) cycle() error {
	if err := l.tail.Sync(); err != nil {
		return err
	}
	if err := l.tail.Close(); err != nil {
		return err
	}
	next := segment{index: l.lastIndex + 1, path: path.Join(l.dir, segmentName(l.lastIndex+1))}
	f, err := l.fs.Create(next.path, false)
	if err != nil {
		return err
	}
	l.tail, l.tailBuf, l.tailStarts = f, nil, nil
	l.segments = append(l.segments, next)
	return nil
}

func (l *Log) Sync() error {
	if err := l.usable(); err != nil {
		return err
	}
	return l.tail.Sync()
}

// ClearCache: simwal caches no finished segment (it reads one back from
// its file when a truncation needs it, as tidwall does after ClearCache).
func (l *Log) ClearCache() error { return l.usable() }

func (l *Log) Close() error {
	if l.closed {
		if l.corrupt {
			return ErrCorrupt
		}
		return ErrClosed
	}
	if err := l.tail.Sync(); err != nil {
		return err
	}
	if err := l.tail.Close(); err != nil {
		return err
	}
	l.closed = true
	if l.corrupt {
		return ErrCorrupt
	}
	return nil
}

// findSegment is the position of the segment holding index.
func (l *Log) findSegment(index uint64) int {
	i, j := 0, len(l.segments)
	for i < j {
		h := i + (j-i)/2
		if index >= l.segments[h].index {
			i = h + 1
		} else {
			j = h
		}
	}
	return i - 1
}

func (l *Log) TruncateFront(index uint64) error {
	if err := l.usable(); err != nil {
		return err
	}
	if index < l.firstIndex || index > l.lastIndex+1 {
		return ErrOutOfRange
	}
	if index == l.firstIndex {
		return nil
	}
	segAt := len(l.segments) - 1
	var kept []byte
	if index <= l.lastIndex {
		segAt = l.findSegment(index)
		seg := l.segments[segAt]
		buf, starts := l.tailBuf, l.tailStarts
		if segAt != len(l.segments)-1 {
			data, err := readFile(l.fs, seg.path)
			if err != nil {
				return err
			}
			if starts, err = frameStarts(data); err != nil {
				return err
			}
			buf = data
		}
		kept = buf[starts[index-seg.index]:]
	}
	startPath := path.Join(l.dir, segmentName(index)+".START")
	if err := l.atomicWrite(startPath, kept); err != nil {
		return err
	}
	// From here an error leaves the files for Open to finish: corrupt.
	if err := l.truncateFrontFiles(segAt, index, startPath, len(kept)); err != nil {
		l.corrupt = true
		return err
	}
	return nil
}

func (l *Log) truncateFrontFiles(segAt int, index uint64, startPath string, keptBytes int) error {
	isTail := segAt == len(l.segments)-1
	if isTail {
		if err := l.tail.Close(); err != nil {
			return err
		}
	}
	for i := 0; i <= segAt; i++ {
		if err := l.fs.Remove(l.segments[i].path); err != nil {
			return err
		}
	}
	final := path.Join(l.dir, segmentName(index))
	if err := l.fs.Rename(startPath, final); err != nil {
		return err
	}
	l.segments[segAt] = segment{index: index, path: final}
	if isTail {
		f, err := l.fs.OpenAppend(final)
		if err != nil {
			return err
		}
		l.tail = f
		size, err := f.SizeBytes()
		if err != nil {
			return err
		}
		if size != int64(keptBytes) {
			return errInvalidSeek
		}
		if err := l.loadTail(final); err != nil {
			return err
		}
	}
	l.segments = append([]segment(nil), l.segments[segAt:]...)
	l.firstIndex = index
	assertTrue(l.segments[0].index == index && l.firstIndex <= l.lastIndex+1, "the kept part starts the log")
	return nil
}

// atomicWrite writes data as name through name.TEMP: create, write,
// fsync, close, rename; the temporary file goes on any error.
func (l *Log) atomicWrite(name string, data []byte) (err error) {
	temp := name + ".TEMP"
	defer func() {
		if err != nil {
			l.fs.Remove(temp) // best effort, as tidwall's RemoveAll
		}
	}()
	f, err := l.fs.Create(temp, false)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err = f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return l.fs.Rename(temp, name)
}

var errInvalidSeek = errors.New("simwal: invalid seek")
