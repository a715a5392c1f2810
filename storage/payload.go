package storage

import (
	"fmt"
	"hash/crc32"
	"io"
	"path"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/storage/fsys"
)

// Stored payloads: a publish whose payload went to a blob file can give its
// in-memory copy back (core.Partition.SpillBody) and have it read from the
// file when it is delivered. Invariants:
//   - a core.PayloadRef made here names bytes that are durable (Append
//     fdatasyncs a round's payloads before any of its records reach
//     tidwall) and never rewritten: blob files are append-only, and a file
//     goes only when no live message refers to it (SaveSnapshot's
//     keepBlobsFrom, Open's keep rule);
//   - every read is checked against the reference's CRC-32C, so a payload
//     that rotted on disk is an error, never a wrong delivery.

// StoredPayload is one publish of a durable round whose payload is in a blob
// file: the message's offset and where its payload is.
type StoredPayload struct {
	Offset uint64
	Ref    core.PayloadRef
}

func (r blobRef) payloadRef() core.PayloadRef {
	return core.PayloadRef{File: r.fileID, OffsetBytes: r.offsetBytes, LengthBytes: r.lengthBytes, Checksum: r.crc}
}

// AppendStored adds the stored payloads of the round Append just wrote
// (entries, as given to Append) to dst.
func (l *Log) AppendStored(dst []StoredPayload, entries []core.Entry) []StoredPayload {
	assertTrue(len(l.blobRefs) == len(entries), "the references are the last Append's")
	for i := range entries {
		if ref := l.blobRefs[i]; ref.lengthBytes > 0 {
			dst = append(dst, StoredPayload{Offset: entries[i].Offset, Ref: ref.payloadRef()})
		}
	}
	return dst
}

const (
	// payloadReadAheadBytes: a read past the payload asked for, so that the
	// next payloads (a backlog is delivered in offset order, and its
	// payloads lie back to back) come from memory, not one pread each.
	payloadReadAheadBytes = 256 << 10
	// payloadReaderFilesMax bounds the blob files a reader keeps open.
	payloadReaderFilesMax = 4
)

// PayloadReader reads stored payloads of one log's directory. It is not safe
// for concurrent use: each reading goroutine has its own. A file it holds
// open stays readable after SaveSnapshot removes it (only payloads no live
// message refers to are removed, so such reads do not happen in practice).
type PayloadReader struct {
	fs    fsys.FS
	dir   string
	files []readerFile // most recently used last

	window     []byte // bytes of windowFile from windowAt
	windowFile uint64
	windowAt   uint64
	windowOK   bool
}

type readerFile struct {
	id uint64
	f  fsys.File
}

// NewPayloadReader reads the stored payloads of the log in dir on fs.
func NewPayloadReader(fs fsys.FS, dir string) *PayloadReader {
	return &PayloadReader{fs: fs, dir: dir}
}

// Read returns the payload ref names. The slice is valid until the next
// Read or Close: copy it to keep it.
func (r *PayloadReader) Read(ref core.PayloadRef) ([]byte, error) {
	if !ref.Stored() {
		return nil, fmt.Errorf("logstore %s: read of a payload that is not stored", r.dir)
	}
	end := ref.OffsetBytes + uint64(ref.LengthBytes)
	if !r.windowOK || r.windowFile != ref.File || ref.OffsetBytes < r.windowAt || end > r.windowAt+uint64(len(r.window)) {
		if err := r.fill(ref); err != nil {
			return nil, err
		}
	}
	from := ref.OffsetBytes - r.windowAt
	payload := r.window[from : from+uint64(ref.LengthBytes)]
	if crc32.Checksum(payload, castagnoli) != ref.Checksum {
		return nil, fmt.Errorf("logstore %s: %s at %d: stored payload fails its checksum: %w", r.dir, blobName(ref.File), ref.OffsetBytes, ErrCorrupt)
	}
	return payload, nil
}

// fill reads the window starting at ref.
func (r *PayloadReader) fill(ref core.PayloadRef) error {
	r.windowOK = false
	f, err := r.file(ref.File)
	if err != nil {
		return err
	}
	want := max(int(ref.LengthBytes), payloadReadAheadBytes)
	// The window need not reach past the file's end: a small or fresh blob
	// file would otherwise cost a zeroed 256 KiB allocation per reader for
	// a few KiB of payloads (in the simulator, whose blob files are 32 KiB,
	// an eighth of its allocated bytes). The read returns exactly the same
	// bytes either way.
	if size, err := f.SizeBytes(); err == nil && size > int64(ref.OffsetBytes) {
		want = max(int(ref.LengthBytes), int(min(int64(want), size-int64(ref.OffsetBytes))))
	}
	if cap(r.window) < want || cap(r.window) > 4*max(want, payloadReadAheadBytes) {
		r.window = make([]byte, want)
	}
	r.window = r.window[:want]
	n, err := f.ReadAt(r.window, int64(ref.OffsetBytes))
	if err != nil && err != io.EOF {
		return fmt.Errorf("logstore %s: read %s: %w", r.dir, blobName(ref.File), err)
	}
	if n < int(ref.LengthBytes) {
		return fmt.Errorf("logstore %s: %s ends before the stored payload at %d (+%d): %w", r.dir, blobName(ref.File), ref.OffsetBytes, ref.LengthBytes, ErrCorrupt)
	}
	r.window = r.window[:n]
	r.windowFile, r.windowAt, r.windowOK = ref.File, ref.OffsetBytes, true
	return nil
}

// file returns the open file id, opening it (and closing the least recently
// used one) when needed.
func (r *PayloadReader) file(id uint64) (fsys.File, error) {
	for i, rf := range r.files {
		if rf.id == id {
			copy(r.files[i:], r.files[i+1:])
			r.files[len(r.files)-1] = rf
			return rf.f, nil
		}
	}
	f, err := r.fs.OpenRead(path.Join(r.dir, blobName(id)))
	if err != nil {
		return nil, fmt.Errorf("logstore %s: stored payload's file: %w", r.dir, err)
	}
	if len(r.files) == payloadReaderFilesMax {
		r.files[0].f.Close()
		r.files = append(r.files[:0], r.files[1:]...)
	}
	r.files = append(r.files, readerFile{id: id, f: f})
	return f, nil
}

// Forget closes the files below id (removed by a snapshot, or about to be).
func (r *PayloadReader) Forget(below uint64) {
	kept := r.files[:0]
	for _, rf := range r.files {
		if rf.id < below {
			rf.f.Close()
			continue
		}
		kept = append(kept, rf)
	}
	clear(r.files[len(kept):])
	r.files = kept
	if r.windowFile < below {
		r.windowOK = false
	}
}

// Close closes every file.
func (r *PayloadReader) Close() error {
	for _, rf := range r.files {
		rf.f.Close()
	}
	r.files, r.window, r.windowOK = nil, nil, false
	return nil
}
