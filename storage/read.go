package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/storage/fsys"
)

// Reading entries back by index (a lagging stream subscriber reads the log:
// docs/streams.md, "Memory"). Invariants:
//   - a record is decoded exactly as recovery decodes it (checkRecord: CRC,
//     index, epoch after the entry before it when the cursor read that one),
//     and a blob record's payload is read back from its blob file and checked
//     against the reference's CRC-32C (PayloadReader). A record or payload
//     that fails is an error wrapping ErrCorrupt, never skipped;
//   - the segment files are read through the FS, as recovery reads them, not
//     through the segment log: tidwall and simwal write every batch to the
//     tail file before WriteBatch returns (neither buffers), so the unsynced
//     tail reads back too; and tidwall's Read would load a finished segment
//     whole into the cache Append empties (writeBatch's ClearCache);
//   - a placed cursor's file holds the frame of entry next at byte pos, and
//     buf holds bytes of that file from bufAt (files are append-only, so
//     bytes once read never change); truncateFront, Close and a failed read
//     drop every cursor (tidwall rewrites the segment holding the new first
//     index under a new name);
//   - sequential calls (each from where the last stopped) never list the
//     directory or reread a byte: reading n entries costs O(n); and so do
//     up to readCursorsMax readers reading sequentially by turns, each on
//     its own cursor.

// ErrCompacted is wrapped by the error ReadEntries returns for an index the
// log no longer holds: a snapshot covers it and retention dropped it.
var ErrCompacted = errors.New("logstore: entries compacted")

// CompactedError says which index was asked for and the first one the log
// still holds.
type CompactedError struct {
	Dir        string
	Index      uint64
	FirstIndex uint64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("logstore %s: entry %d compacted: the log holds entries from %d", e.Dir, e.Index, e.FirstIndex)
}

func (e *CompactedError) Unwrap() error { return ErrCompacted }

const (
	// readChunkBytes: each read of a segment file asks for at least this
	// much, so that a run of small records costs one pread per chunk.
	readChunkBytes = 64 << 10
	// readWalkEntriesMax bounds a forward seek by walking frames from the
	// cursor; a longer one goes to the start of the segment holding the
	// entry (skipping the segments between).
	readWalkEntriesMax = 4096
	// framePosEntriesMax bounds the frame positions a cursor keeps for its
	// segment (8 bytes each; a 1 MiB segment of 1 KiB records needs ~1000).
	framePosEntriesMax = 1 << 16
	// readCursorsMax bounds the cursors of one Log (each keeps an open file,
	// a buffer of about readChunkBytes and its frame positions).
	readCursorsMax = 4
)

// readCursors are ReadEntries' cursors: several, so that readers at
// different places in the log (a stream's subscriptions catching up at
// their own pace) each read on sequentially from their own file and byte,
// instead of one cursor thrashing between them.
type readCursors struct {
	cur   *readCursor // the cursor of the ReadEntries in progress
	all   [readCursorsMax]readCursor
	used  [readCursorsMax]uint64 // last-use stamps: the least recent is reused
	clock uint64

	payloads *PayloadReader // made at the first blob record
	// segments caches the directory's segment files (nil: list again). It
	// may miss segments appended since: a seek past its last segment opens
	// that one and walks on into the newer files, which tidwall names by
	// their first index. Dropped with the cursors, so a truncation relists.
	segments []segmentFile
}

// pick makes cur the cursor for a read from index, in this order: one
// standing on index; the nearest a short walk before it; an unplaced one;
// one whose segment holds index behind it (a jump back to a known frame);
// the least recently used. Moving another reader's cursor back costs that
// reader a seek later, so a free cursor comes first.
func (rc *readCursors) pick(index uint64) {
	ahead, behind, free, lru := -1, -1, -1, 0
	for i := range rc.all {
		c := &rc.all[i]
		if rc.used[i] < rc.used[lru] {
			lru = i
		}
		switch {
		case c.f == nil:
			if free < 0 {
				free = i
			}
		case c.next == index:
			ahead = i
		case c.next < index && index-c.next <= readWalkEntriesMax:
			if ahead < 0 || rc.all[ahead].next < c.next {
				ahead = i
			}
		case c.segFirst <= index && index < c.next:
			if behind < 0 {
				behind = i
			}
		}
		if ahead >= 0 && rc.all[ahead].next == index {
			break
		}
	}
	best := lru
	for _, i := range []int{ahead, free, behind} {
		if i >= 0 {
			best = i
			break
		}
	}
	rc.clock++
	rc.used[best] = rc.clock
	rc.cur = &rc.all[best]
}

// dropAll forgets every position and the cached listing.
func (rc *readCursors) dropAll() {
	for i := range rc.all {
		rc.all[i].drop()
	}
	rc.segments = nil
}

// closeAll drops every position and closes the payload reader.
func (rc *readCursors) closeAll() {
	for i := range rc.all {
		rc.all[i].drop()
		rc.all[i].buf = nil
	}
	rc.segments = nil
	if rc.payloads != nil {
		rc.payloads.Close()
		rc.payloads = nil
	}
}

// readCursor is where one reader's last ReadEntries stopped (see the
// invariants).
type readCursor struct {
	f        fsys.File // nil: no position
	name     string    // f's segment file
	segFirst uint64    // the first index of f's segment
	next     uint64    // the index of the frame at pos
	pos      int64
	// epoch is the epoch of entry next-1 when the cursor decoded it, else 0.
	epoch uint64
	buf   []byte // bytes of f from bufAt
	bufAt int64
	// eof: the last fill read up to the end of the file as it then was.
	eof bool

	// framePos[i] is the byte position of entry segFirst+i in f, for the
	// frames the cursor has passed (filled in order, at most
	// framePosEntriesMax): a seek back within the segment jumps instead of
	// walking from the segment's start. Appends never move a frame, and a
	// front truncation (the only rewrite) drops the cursor.
	framePos []int64
}

// drop forgets the position (the payload reader keeps its files).
func (c *readCursor) drop() {
	if c.f != nil {
		c.f.Close()
	}
	c.f, c.name, c.segFirst, c.next, c.pos, c.epoch = nil, "", 0, 0, 0, 0
	c.buf, c.bufAt, c.eof = c.buf[:0], 0, false
	c.framePos = c.framePos[:0]
}

// advance moves the cursor past the frame at it (totalBytes long), noting
// the frame's position while the positions known are contiguous from the
// segment's start.
func (c *readCursor) advance(totalBytes int) {
	if uint64(len(c.framePos)) == c.next-c.segFirst && len(c.framePos) < framePosEntriesMax {
		c.framePos = append(c.framePos, c.pos)
	}
	c.next++
	c.pos += int64(totalBytes)
}

// ReadEntries returns the entries the log holds from fromIndex on: at most
// maxEntries (at least 1), and no more once the next entry would bring the
// payload bytes returned past maxBytes (the first entry always comes, so
// maxBytes <= 0 gives one entry per call, plus those without payload).
// Each is decoded as recovery decodes it, its payload resolved: a
// blob-stored payload is read from its blob file and checked, and the entry
// comes back with Body.Payload set (its own copy) and Body.Ref zero.
//
// An index above LastIndex gives no entries and no error; one below
// FirstIndex (after the snapshot) a *CompactedError (ErrCompacted). A
// record that fails its checks, or a payload that is missing or damaged,
// is an error wrapping ErrCorrupt. Entries appended but not yet synced are
// read too. A failed or closed Log refuses. An error leaves the Log usable
// (nothing was written) and forgets the cursors.
//
// It runs on the goroutine that owns the Log, between its other calls, and
// keeps cursors: a call that starts where an earlier one stopped reads on
// from the same file and byte, so reading the log sequentially costs O(n).
func (l *Log) ReadEntries(fromIndex uint64, maxEntries int, maxBytes int) ([]core.Entry, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	if maxEntries < 1 {
		return nil, fmt.Errorf("logstore %s: read of %d entries: ask for at least one", l.dir, maxEntries)
	}
	if first := max(l.firstIndex, l.snapshotIndex+1); fromIndex < first {
		return nil, &CompactedError{Dir: l.dir, Index: fromIndex, FirstIndex: first}
	}
	if fromIndex > l.lastIndex {
		return nil, nil
	}
	l.reader.pick(fromIndex)
	out, err := l.readEntries(fromIndex, maxEntries, maxBytes)
	c := l.reader.cur
	if cap(c.buf) > recordBufferRetainBytesMax {
		// One large record grew the buffer: do not keep it for small ones.
		c.buf, c.bufAt = nil, 0
	}
	if err != nil {
		l.reader.dropAll()
		return nil, err
	}
	return out, nil
}

func (l *Log) readEntries(fromIndex uint64, maxEntries, maxBytes int) ([]core.Entry, error) {
	c := l.reader.cur
	if err := l.seek(fromIndex); err != nil {
		return nil, err
	}
	// Broken on purpose under the mutant (as recovery is): no CRC check.
	skipCRC := mutant.On(mutant.SkipCRC)
	var out []core.Entry
	payloadBytes := 0
	for len(out) < maxEntries && c.next <= l.lastIndex {
		f, err := l.currentFrame()
		if err != nil {
			return nil, err
		}
		e, ref, isBlob, reason := checkRecord(f.data, c.next, c.epoch, skipCRC)
		if reason != CutNone {
			return nil, l.readCorrupt(reason, "")
		}
		n := 0
		switch {
		case isBlob:
			n = int(ref.lengthBytes)
		case e.Body != nil:
			n = len(e.Body.Payload)
		}
		if len(out) > 0 && payloadBytes+n > maxBytes {
			break // the cursor stays on this record for the next call
		}
		if isBlob {
			if err := l.resolvePayload(&e, ref); err != nil {
				return nil, err
			}
		}
		out = append(out, e)
		payloadBytes += n
		c.epoch = e.Epoch
		c.advance(f.totalBytes)
	}
	return out, nil
}

// seek puts the cursor on the frame of index (FirstIndex <= index <=
// LastIndex): where it is already; at a known frame position of its
// segment; walking forward a bounded way; else at the start of the segment
// that holds index (from the cached listing), walking from there.
func (l *Log) seek(index uint64) error {
	c := l.reader.cur
	if c.f != nil && c.next == index {
		return nil
	}
	l.stats.ReadSeeks++
	// Readers of one partition's log move the cursor back and forth by a
	// read batch or two: within the cursor's segment that is a jump to a
	// known frame, or a short walk from the last known one.
	if c.f != nil && c.segFirst <= index {
		// The known frame nearest at or before index: jump to it when the
		// cursor is past index (an index behind the cursor lies in its
		// segment: segments are contiguous) or it is ahead of the cursor.
		if known := uint64(len(c.framePos)); known > 0 {
			if k := min(index-c.segFirst, known-1); index < c.next || c.segFirst+k > c.next {
				c.next, c.pos, c.epoch = c.segFirst+k, c.framePos[k], 0
			}
		}
		if c.next <= index && index-c.next <= readWalkEntriesMax {
			return l.walkTo(index)
		}
	}
	seg, err := l.segmentHolding(index)
	if err != nil {
		return err
	}
	if c.f == nil || c.segFirst != seg.firstIndex || c.next > index {
		if err := l.openSegment(seg.name, seg.firstIndex); err != nil {
			return err
		}
	}
	return l.walkTo(index)
}

// segmentHolding returns the segment file holding index, from the cached
// listing when it can tell (index lies before its last segment's end, or
// near its last segment's start), else from a fresh listing.
func (l *Log) segmentHolding(index uint64) (segmentFile, error) {
	rc := &l.reader
	for attempt := 0; attempt < 2; attempt++ {
		if rc.segments == nil || attempt == 1 {
			l.stats.ReadListings++
			listing, err := listDir(l.fs, l.dir)
			if err != nil {
				return segmentFile{}, err
			}
			rc.segments = listing.segments
		}
		// The last segment starting at or before index.
		at := -1
		for i := range rc.segments {
			if rc.segments[i].firstIndex <= index {
				at = i
			}
		}
		if at < 0 {
			break
		}
		// A cached listing's last segment may have been followed by newer
		// ones: walk into them only a bounded way.
		if at < len(rc.segments)-1 || index-rc.segments[at].firstIndex <= readWalkEntriesMax || attempt == 1 {
			return rc.segments[at], nil
		}
	}
	return segmentFile{}, fmt.Errorf("logstore %s: no segment holds entry %d (first index %d): %w", l.dir, index, l.firstIndex, ErrCorrupt)
}

// walkTo moves the cursor forward to the frame of index (at or after the
// cursor). Frames before index are located, not decoded (recovery does the
// same below its snapshot): the record at index still has to carry index.
func (l *Log) walkTo(index uint64) error {
	c := l.reader.cur
	assertTrue(c.f != nil && c.next <= index, "a walk goes forward from a placed cursor")
	for c.next < index {
		f, err := l.currentFrame()
		if err != nil {
			return err
		}
		c.advance(f.totalBytes)
		c.epoch = 0
	}
	assertTrue(c.next == index, "the cursor is on the frame asked for")
	return nil
}

// openSegment points the cursor at the first frame of the segment file name.
func (l *Log) openSegment(name string, firstIndex uint64) error {
	c := l.reader.cur
	c.drop()
	f, err := l.fs.OpenRead(path.Join(l.dir, name))
	if errors.Is(err, fsys.ErrNotExist) {
		return fmt.Errorf("logstore %s: segment %s for entry %d is missing: %w: %w", l.dir, name, firstIndex, ErrCorrupt, err)
	}
	if err != nil {
		return err
	}
	c.f, c.name, c.segFirst, c.next = f, name, firstIndex, firstIndex
	return nil
}

// currentFrame returns the frame at the cursor, reading on (and on into the
// next segment file, which tidwall names by the index it starts at) as
// needed. Entry c.next is in the log, so a frame must be there.
func (l *Log) currentFrame() (frame, error) {
	c := l.reader.cur
	for {
		f, atEnd, err := l.frameInFile()
		if err != nil || !atEnd {
			return f, err
		}
		if c.next == c.segFirst {
			return frame{}, l.readCorrupt(CutSegmentGap, "an empty segment")
		}
		if err := l.openSegment(segmentName(c.next), c.next); err != nil {
			return frame{}, err
		}
		l.stats.ReadSegmentSwitches++
	}
}

// frameInFile returns the frame at the cursor in its file, or atEnd when
// the cursor is at the end of the file.
func (l *Log) frameInFile() (f frame, atEnd bool, err error) {
	c := l.reader.cur
	for filled := false; ; filled = true {
		var avail []byte
		if off := c.pos - c.bufAt; off >= 0 && off < int64(len(c.buf)) {
			avail = c.buf[off:]
		}
		if len(avail) > 0 {
			f = parseFrame(avail)
			if f.ok {
				return f, false, nil
			}
			if !f.reachesEOF {
				return frame{}, false, l.readCorrupt(CutBadFrame, "")
			}
		}
		if filled && c.eof {
			if len(avail) == 0 {
				return frame{}, true, nil
			}
			return frame{}, false, l.readCorrupt(CutTornFrame, "")
		}
		if err := l.fill(frameNeedBytes(avail)); err != nil {
			return frame{}, false, err
		}
	}
}

// frameNeedBytes is how many bytes from the front of avail (a frame cut off
// by the end of the buffer) the frame needs, as far as avail tells.
func frameNeedBytes(avail []byte) int64 {
	size, n := binary.Uvarint(avail)
	if n <= 0 {
		return binary.MaxVarintLen64
	}
	return int64(n) + int64(min(size, 1<<62))
}

// fill reads the cursor's file from pos: at least needBytes (a frame's
// length), at least readChunkBytes, at most up to the end of the file.
func (l *Log) fill(needBytes int64) error {
	c := l.reader.cur
	size, err := c.f.SizeBytes()
	if err != nil {
		return err
	}
	want := min(max(needBytes, readChunkBytes), max(size-c.pos, 0))
	if int64(cap(c.buf)) < want {
		c.buf = make([]byte, want)
	}
	c.buf = c.buf[:want]
	done := 0
	for done < len(c.buf) {
		n, err := c.f.ReadAt(c.buf[done:], c.pos+int64(done))
		done += n
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrNoProgress
		}
	}
	c.buf, c.bufAt = c.buf[:done], c.pos
	c.eof = c.pos+int64(done) >= size
	l.stats.ReadSegmentBytes += uint64(done)
	return nil
}

// resolvePayload reads e's stored payload (ref) into e's body, checked.
func (l *Log) resolvePayload(e *core.Entry, ref blobRef) error {
	rc := &l.reader
	if rc.payloads == nil {
		rc.payloads = NewPayloadReader(l.fs, l.dir)
	}
	payload, err := rc.payloads.Read(ref.payloadRef())
	if errors.Is(err, fsys.ErrNotExist) {
		return fmt.Errorf("logstore %s: entry %d: stored payload's %s is missing: %w: %w", l.dir, e.Index, blobName(ref.fileID), ErrCorrupt, err)
	}
	if err != nil {
		return fmt.Errorf("logstore %s: entry %d: %w", l.dir, e.Index, err)
	}
	body := *e.Body
	body.Payload, body.Ref = append([]byte(nil), payload...), core.PayloadRef{}
	e.Body = &body
	return nil
}

// readCorrupt is the error for a bad record (or frame) at the cursor.
func (l *Log) readCorrupt(reason CutReason, detail string) error {
	c := l.reader.cur
	if detail != "" {
		detail = " (" + detail + ")"
	}
	return fmt.Errorf("logstore %s: read of entry %d: %s%s in segment %s at byte %d: %w",
		l.dir, c.next, reason, detail, c.name, c.pos, ErrCorrupt)
}

// forgetBlobFiles closes the payload reader's files below id (removed, or
// about to be, by a snapshot).
func (l *Log) forgetBlobFiles(below uint64) {
	if l.reader.payloads != nil {
		l.reader.payloads.Forget(below)
	}
}
