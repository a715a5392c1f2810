// Package fsys holds the interfaces the storage package runs over: a small
// filesystem (FS, File), tidwall/wal's segment log (SegmentLog), and how
// two independent waits may overlap (Runner). It is a leaf: storage, its
// simulated implementations (storage/simfs, storage/simwal) and the
// production adapters (io/logstore/osfs) all import it and nothing else of
// ours, so that storage's tests can run over every backend.
//
// Invariants every implementation keeps:
//   - paths are slash-separated and name files in flat directories;
//   - File.Write appends at the end of the file: storage never writes in
//     the middle of a file (it truncates, then appends);
//   - nothing is durable until Sync or Datasync returned nil for the file,
//     and a new, renamed or removed name until SyncDir returned nil for its
//     directory (a file's fsync does not make its directory entry durable);
//   - an error from Sync, Datasync or SyncDir is final for the data it
//     covered: it may be gone, and a later fsync may succeed without it.
package fsys

import "errors"

// FS is the filesystem storage uses.
type FS interface {
	// OpenRead opens an existing file for ReadAt.
	OpenRead(path string) (File, error)
	// OpenAppend opens an existing file for Write (at its end), Truncate
	// and ReadAt.
	OpenAppend(path string) (File, error)
	// Create creates path and opens it as OpenAppend does. With exclusive
	// it fails if path exists; otherwise an existing file is emptied.
	Create(path string, exclusive bool) (File, error)
	// ReadDir lists dir's entries, sorted by name.
	ReadDir(dir string) ([]DirEntry, error)
	// Remove unlinks a file; open handles keep working.
	Remove(path string) error
	// Rename moves oldPath to newPath (same directory), replacing newPath.
	Rename(oldPath, newPath string) error
	// MkdirAll creates dir and its parents; existing ones are fine.
	MkdirAll(dir string) error
	// SyncDir makes dir's entries durable.
	SyncDir(dir string) error
}

// File is one open file.
type File interface {
	ReadAt(p []byte, offsetBytes int64) (int, error)
	// Write appends p at the end of the file.
	Write(p []byte) (int, error)
	Truncate(sizeBytes int64) error
	// Sync makes the file's data and metadata durable (fsync).
	Sync() error
	// Datasync makes its data, and the size needed to read it, durable
	// (fdatasync).
	Datasync() error
	SizeBytes() (int64, error)
	Close() error
}

// DirEntry is one name in a directory.
type DirEntry struct {
	Name      string
	IsDir     bool
	SizeBytes int64
}

// ErrNotExist is wrapped by errors about a missing file.
var ErrNotExist = errors.New("fsys: file does not exist")

// ErrExist is wrapped by errors about a file that already exists.
var ErrExist = errors.New("fsys: file exists")

// SegmentLogOptions are the tidwall/wal options storage varies; the rest
// are fixed: binary format, one cached segment, no copy on read, empty
// logs allowed, permissions 0750/0640.
type SegmentLogOptions struct {
	// SegmentSizeBytes: a segment is finished (fsynced, never again
	// written) once it reaches this size.
	SegmentSizeBytes int
	// NoSync: writes are not fsynced; only Sync (and a segment roll) does.
	NoSync bool
}

// SegmentLog is what storage uses of tidwall/wal: segments named by their
// first index (20 digits), frames of uvarint length then data.
type SegmentLog interface {
	FirstIndex() (uint64, error)
	LastIndex() (uint64, error)
	// NewBatch returns an empty batch for WriteBatch; it keeps its buffer
	// for reuse after Clear.
	NewBatch() Batch
	// WriteBatch appends the batch (indexes follow LastIndex) and clears it.
	WriteBatch(b Batch) error
	// Sync fsyncs the tail segment.
	Sync() error
	// TruncateFront drops the entries before index (up to LastIndex+1).
	TruncateFront(index uint64) error
	// ClearCache drops cached finished segments (memory only).
	ClearCache() error
	Close() error
}

// Batch collects entries for one SegmentLog.WriteBatch.
type Batch interface {
	// Write adds an entry; data is copied.
	Write(index uint64, data []byte)
	Clear()
}

// OpenSegmentLog opens (creating if absent) the segment log in dir. It
// fails with an error wrapping ErrSegmentCorrupt when the tail segment
// does not parse, as tidwall's Open does.
type OpenSegmentLog func(dir string, opts SegmentLogOptions) (SegmentLog, error)

// ErrSegmentCorrupt is wrapped by a segment log's corrupt-log errors.
var ErrSegmentCorrupt = errors.New("fsys: segment log corrupt")

// Runner runs storage's work that may overlap or wait: production runs
// Both on two goroutines (a round's payload fdatasync beside the segment
// fsync) and Later on a background goroutine (unlinking blob files); the
// simulator runs both inline, in order.
type Runner interface {
	// Both runs first and second, possibly at once, and returns both errors.
	Both(first, second func() error) (error, error)
	// Later runs work at some point before the next Wait returns.
	Later(work func() error)
	// Wait waits for all Later work and returns the first error it met.
	Wait() error
}

// Inline is the Runner that runs everything at once, in order.
type Inline struct{ err error }

func (r *Inline) Both(first, second func() error) (error, error) { return first(), second() }

func (r *Inline) Later(work func() error) {
	if err := work(); err != nil && r.err == nil {
		r.err = err
	}
}

func (r *Inline) Wait() error { err := r.err; r.err = nil; return err }
