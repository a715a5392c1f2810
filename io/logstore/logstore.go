package logstore

import (
	"github.com/fibril-go/fibril/io/logstore/osfs"
	"github.com/fibril-go/fibril/storage"
)

// The production face of package storage: the same Log, options, recovery
// report and payload reader, over the operating system's files and
// tidwall/wal (package osfs). Invariants:
//   - every name here is an alias of storage's or a one-line wrapper that
//     supplies the production Env: no logic lives in this file;
//   - the simulator runs the same storage code over storage/simfs and
//     storage/simwal, so what differs between the two is only osfs and the
//     Committer's goroutine shell (docs/storage.md).

// Env is the production environment: OS files, tidwall/wal segments, and
// goroutines for the overlapping fsyncs and background unlinks.
var Env = storage.Env{FS: osfs.FS{}, OpenSegmentLog: osfs.OpenTidwall, NewRunner: osfs.NewRunner}

type (
	Log              = storage.Log
	LogStats         = storage.LogStats
	Options          = storage.Options
	CorruptionPolicy = storage.CorruptionPolicy
	Recovered        = storage.Recovered
	Cut              = storage.Cut
	CutReason        = storage.CutReason
	CorruptionError  = storage.CorruptionError
	StoredPayload    = storage.StoredPayload
	PayloadReader    = storage.PayloadReader
	CompactedError   = storage.CompactedError
)

const (
	CorruptionRefuse   = storage.CorruptionRefuse
	CorruptionTruncate = storage.CorruptionTruncate
	SnapshotEntriesMin = storage.SnapshotEntriesMin
	SnapshotLiveFactor = storage.SnapshotLiveFactor

	CutNone          = storage.CutNone
	CutTornFrame     = storage.CutTornFrame
	CutShortRecord   = storage.CutShortRecord
	CutChecksum      = storage.CutChecksum
	CutUndecodable   = storage.CutUndecodable
	CutIndexMismatch = storage.CutIndexMismatch
	CutEpochWentBack = storage.CutEpochWentBack
	CutSegmentGap    = storage.CutSegmentGap
	CutMissingPrefix = storage.CutMissingPrefix
	CutBadFrame      = storage.CutBadFrame
	CutBlobMissing   = storage.CutBlobMissing
	CutBlobShort     = storage.CutBlobShort
	CutBlobChecksum  = storage.CutBlobChecksum
)

var (
	ErrCorrupt   = storage.ErrCorrupt
	ErrClosed    = storage.ErrClosed
	ErrCompacted = storage.ErrCompacted
)

// DefaultOptions returns storage's defaults.
func DefaultOptions() Options { return storage.DefaultOptions() }

// Open opens the log in dir on disk (storage.Open over Env).
func Open(dir string, opts Options) (*Log, Recovered, error) { return storage.Open(Env, dir, opts) }

// NewPayloadReader reads the stored payloads of the log in dir on disk.
func NewPayloadReader(dir string) *PayloadReader { return storage.NewPayloadReader(Env.FS, dir) }

// ShouldSnapshot is storage.ShouldSnapshot.
func ShouldSnapshot(entriesSinceSnapshot, liveMessages int) bool {
	return storage.ShouldSnapshot(entriesSinceSnapshot, liveMessages)
}

// ShouldSnapshotAfter is storage.ShouldSnapshotAfter.
func ShouldSnapshotAfter(entriesMin, entriesSinceSnapshot, liveMessages int) bool {
	return storage.ShouldSnapshotAfter(entriesMin, entriesSinceSnapshot, liveMessages)
}

type (
	RecordLog          = storage.RecordLog
	RecordLogRecovered = storage.RecordLogRecovered
	Record             = storage.Record
)

// OpenRecordLog opens the Node's record log in dir on disk, with
// storage.DefaultRecordLogOptions.
func OpenRecordLog(dir string) (*RecordLog, RecordLogRecovered, error) {
	return storage.OpenRecordLog(Env, dir, storage.DefaultRecordLogOptions())
}
