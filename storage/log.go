package storage

import (
	"errors"
	"fmt"
	"path"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/storage/fsys"
)

// Log is one partition's log on disk. Invariants:
//   - firstIndex <= lastIndex+1, and the records firstIndex..lastIndex are
//     in tidwall at exactly those indexes (tidwall's own counters agree);
//   - snapshotIndex <= syncedIndex <= lastIndex, and firstIndex is
//     snapshotIndex+1 once a snapshot's truncation is done;
//   - after any I/O error the Log is failed for good: nothing is retried,
//     least of all an fsync (see doc.go).

const (
	// recordBufferRetainBytesMax: a record buffer grown past this by one
	// large message is dropped after use rather than kept for the next.
	recordBufferRetainBytesMax = 1 << 20
)

// ErrClosed reports use of a closed Log or Committer.
var ErrClosed = errors.New("logstore: closed")

// Env is what a Log runs over: the filesystem, the segment log on it, and
// how overlapping waits run (nil: inline, in order).
type Env struct {
	FS             fsys.FS
	OpenSegmentLog fsys.OpenSegmentLog
	// NewRunner makes the runner of one Log (its background unlinks are
	// waited for by that Log's Close); nil runs everything inline.
	NewRunner func() fsys.Runner
}

func (env Env) runner() fsys.Runner {
	if env.NewRunner == nil {
		return &fsys.Inline{}
	}
	return env.NewRunner()
}

// Log is one partition's durable log. See the package doc for the layout.
type Log struct {
	dir    string
	opts   Options
	env    Env
	fs     fsys.FS
	runner fsys.Runner
	wal    fsys.SegmentLog

	firstIndex    uint64 // lastIndex+1 when the log holds no record
	lastIndex     uint64
	lastEpoch     uint64
	syncedIndex   uint64
	snapshotIndex uint64

	// tailSegmentBytes mirrors the size of tidwall's tail segment, so that
	// Append knows when tidwall started a new segment file (mirrorSegmentRolls).
	tailSegmentBytes int
	// dirSyncPending: a segment or blob file appeared since the last
	// directory fsync; blobNamePending: a blob file did.
	dirSyncPending  bool
	blobNamePending bool
	// blobSyncPending: payload bytes written to the active blob file since
	// its last fdatasync.
	blobSyncPending bool

	batch      fsys.Batch
	recordBuf  []byte
	frameSizes []int // of the batch being built, for the segment mirror

	// Blob files (blob.go): the live ones by id, the last open for append.
	blobFiles  []blobFile
	blobActive fsys.File
	// Reused every Append: the round's payloads back to back, where each
	// file's run of them starts, and each entry's reference.
	blobBuf     []byte
	blobChunks  []blobChunk
	blobRefs    []blobRef
	blobScratch blobScratch
	// The two halves of a Sync that may overlap (Env.NewRunner), made once
	// so that a Sync allocates no closure.
	syncSegmentsFn, syncBlobsFn func() error

	// reader holds ReadEntries' cursors (read.go).
	reader readCursors

	failed error
	closed bool
	stats  LogStats
}

// LogStats counts what a Log did since Open (metrics, tests).
type LogStats struct {
	Batches      uint64 // tidwall WriteBatch calls
	Entries      uint64 // entries appended
	Syncs        uint64 // Sync calls that fsynced the tail segment
	DirSyncs     uint64 // directory fsyncs for new segment files
	SegmentRolls uint64 // segment files tidwall started
	Snapshots    uint64 // snapshots saved

	BlobWrites       uint64 // blob file writes
	BlobSyncs        uint64 // blob file fdatasyncs
	BlobBytes        uint64 // payload bytes written to blob files
	BlobFilesCreated uint64 // each with a directory fsync
	BlobFilesRemoved uint64 // by snapshots

	ReadSeeks           uint64 // ReadEntries calls that did not start at the cursor
	ReadSegmentSwitches uint64 // segment files ReadEntries read on into
	ReadSegmentBytes    uint64 // segment bytes ReadEntries read
	ReadListings        uint64 // directory listings ReadEntries made to place its cursor
}

// segmentLogOptions: we fsync ourselves (Sync) and never read through the
// segment log (recovery parses the files); tidwall's adapter adds an empty
// log allowed (a snapshot at the last index truncates every record, a cut
// can drop the first) and one cached segment.
func segmentLogOptions(opts Options) fsys.SegmentLogOptions {
	return fsys.SegmentLogOptions{NoSync: true, SegmentSizeBytes: opts.SegmentSizeBytes}
}

// Open opens the log in dir over env, creating it if absent, repairs a torn
// tail (and corruption, if opts.OnCorruption allows), makes what it keeps
// durable, and returns what recovery needs.
func Open(env Env, dir string, opts Options) (*Log, Recovered, error) {
	if err := opts.Validate(); err != nil {
		return nil, Recovered{}, err
	}
	assertTrue(env.FS != nil && env.OpenSegmentLog != nil, "a log runs over a filesystem and a segment log")
	if err := env.FS.MkdirAll(dir); err != nil {
		return nil, Recovered{}, err
	}
	if err := syncAncestors(env.FS, dir); err != nil {
		return nil, Recovered{}, err
	}
	l := &Log{dir: dir, opts: opts, env: env, fs: env.FS, runner: env.runner()}
	l.syncSegmentsFn = func() error { return l.wal.Sync() }
	l.syncBlobsFn = l.syncBlobs
	rec, err := l.recover()
	if err != nil {
		if l.wal != nil {
			l.wal.Close()
		}
		l.closeBlobs()
		l.runner.Wait()
		return nil, Recovered{}, err
	}
	return l, rec, nil
}

// syncAncestors fsyncs every directory above dir: MkdirAll may have made
// several levels, and the entry of each must survive a power loss, or the
// log vanishes with the first directory whose name was never durable.
func syncAncestors(fs fsys.FS, dir string) error {
	for child, parent := path.Clean(dir), path.Dir(path.Clean(dir)); parent != child; child, parent = parent, path.Dir(parent) {
		if err := fs.SyncDir(parent); err != nil {
			return err
		}
	}
	return nil
}

// Options returns the options the log was opened with.
func (l *Log) Options() Options { return l.opts }

// Err returns why the log cannot be used (failed or closed), or nil.
func (l *Log) Err() error { return l.usable() }

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// FirstIndex is the first index the log holds (LastIndex+1 when empty).
func (l *Log) FirstIndex() uint64 { return l.firstIndex }

// LastIndex is the index of the last entry appended (durable or not).
func (l *Log) LastIndex() uint64 { return l.lastIndex }

// SyncedIndex is the index up to which every entry is durable.
func (l *Log) SyncedIndex() uint64 { return l.syncedIndex }

// SnapshotIndex is the index of the newest snapshot (0 when none).
func (l *Log) SnapshotIndex() uint64 { return l.snapshotIndex }

// Stats returns the counters.
func (l *Log) Stats() LogStats { return l.stats }

func (l *Log) usable() error {
	if l.failed != nil {
		return l.failed
	}
	if l.closed {
		return ErrClosed
	}
	return nil
}

// fail makes err sticky: after an I/O error tidwall's memory and the disk
// may disagree, and an fsync error may have lost pages for good.
func (l *Log) fail(err error) error {
	if l.failed == nil {
		l.failed = fmt.Errorf("logstore %s: failed: %w", l.dir, err)
	}
	return l.failed
}

// Append encodes entries and writes them to the log, one tidwall batch per
// BatchEntriesMax / BatchBytesMax. Large publish payloads go to the blob
// files first (blob.go). Nothing is fsynced: call Sync. Entries must follow
// on from LastIndex, and epochs never go back. The payloads of the previous
// Append are made durable first if Sync did not, so a round's records never
// reach the disk before the previous round's payloads (blob.go).
func (l *Log) Append(entries []core.Entry) error {
	if err := l.usable(); err != nil {
		return err
	}
	if err := l.syncPreviousRound(); err != nil {
		return l.fail(err)
	}
	epoch := l.lastEpoch
	for i := range entries {
		e := &entries[i]
		assertTrue(e.Index == l.lastIndex+1+uint64(i), "entries are appended in contiguous index order")
		assertTrue(e.Epoch >= epoch, "entry epochs never go back")
		assertTrue(e.Epoch != 0, "entries carry an epoch")
		epoch = e.Epoch
	}
	l.placeBlobs(entries)
	if err := l.writeBlobs(); err != nil {
		return l.fail(err)
	}
	l.batch.Clear()
	l.frameSizes = l.frameSizes[:0]
	batchBytes := 0
	for i := range entries {
		e := &entries[i]
		// The round's first record carries how far the log is synced:
		// recovery refuses damage below it (repair.go).
		syncedMark := uint64(0)
		if i == 0 {
			syncedMark = l.syncedIndex
		}
		if ref := l.blobRefs[i]; ref.lengthBytes > 0 {
			l.recordBuf = appendBlobRecord(l.recordBuf[:0], e, ref, &l.blobScratch, syncedMark)
		} else {
			l.recordBuf = appendRecord(l.recordBuf[:0], e, syncedMark)
		}
		full := len(l.frameSizes) == l.opts.BatchEntriesMax || batchBytes+len(l.recordBuf) > l.opts.BatchBytesMax
		if len(l.frameSizes) > 0 && full {
			if err := l.writeBatch(batchBytes); err != nil {
				return err
			}
			batchBytes = 0
		}
		l.batch.Write(e.Index, l.recordBuf)
		l.frameSizes = append(l.frameSizes, frameBytes(len(l.recordBuf)))
		batchBytes += len(l.recordBuf)
		l.lastEpoch = e.Epoch
	}
	if cap(l.recordBuf) > recordBufferRetainBytesMax {
		l.recordBuf = nil
	}
	if len(l.frameSizes) == 0 {
		return nil
	}
	return l.writeBatch(batchBytes)
}

// syncPreviousRound makes the previous Append's payloads durable, names
// included, when no Sync did: without it, records of a later round (which
// the kernel may write back at any time, or tidwall fsync at a segment
// roll) could reach the disk while an earlier round's payloads or blob
// file did not, and recovery could not tell that from damage. The
// Committer always Syncs between rounds, so this costs it nothing.
func (l *Log) syncPreviousRound() error {
	if err := l.syncBlobs(); err != nil {
		return err
	}
	if !l.blobNamePending {
		return nil
	}
	return l.syncDir()
}

// syncDir fsyncs the directory for the names that appeared since the last
// time (a no-op under mutant.NoDirSync).
func (l *Log) syncDir() error {
	if !mutant.On(mutant.NoDirSync) {
		// Broken on purpose otherwise: new names stay in the page cache.
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
		l.stats.DirSyncs++
	}
	l.dirSyncPending, l.blobNamePending = false, false
	return nil
}

// writeBatch writes the batch built so far (batchBytes of records).
func (l *Log) writeBatch(batchBytes int) error {
	count := uint64(len(l.frameSizes))
	if err := l.wal.WriteBatch(l.batch); err != nil {
		return l.fail(err)
	}
	l.lastIndex += count
	l.stats.Batches++
	l.stats.Entries += count
	if rolls := l.mirrorSegmentRolls(l.frameSizes); rolls > 0 {
		l.dirSyncPending = true
		l.stats.SegmentRolls += uint64(rolls)
		// tidwall caches the segment it rolled away from, buffer and all;
		// we never read it back, so free it now.
		if err := l.wal.ClearCache(); err != nil {
			return l.fail(err)
		}
	}
	if batchBytes > l.opts.BatchBytesMax {
		// One oversized record grew tidwall's batch buffer, which it keeps
		// for reuse: let it go instead.
		l.batch = l.wal.NewBatch()
	}
	l.frameSizes = l.frameSizes[:0]
	tidwallLast, err := l.wal.LastIndex()
	assertTrue(err == nil && tidwallLast == l.lastIndex, "tidwall's last index is ours")
	return nil
}

// mirrorSegmentRolls replays tidwall v1.2.1's rule for starting a segment
// (wal.go, writeBatch and cycle) over one batch and returns how many segment
// files it started: before a batch, a tail already over the size rolls;
// within it, the tail rolls as soon as an entry brings it to the size.
// tidwall does not say when it creates a file, and a new file's directory
// entry needs an fsync of its own. TestSegmentMirror checks this against
// the directory.
func (l *Log) mirrorSegmentRolls(frameSizes []int) int {
	return mirrorRolls(&l.tailSegmentBytes, l.opts.SegmentSizeBytes, frameSizes)
}

// mirrorRolls is mirrorSegmentRolls over a tail of *tailBytes.
func mirrorRolls(tailBytes *int, segmentSizeBytes int, frameSizes []int) int {
	assertTrue(len(frameSizes) > 0, "a batch holds records")
	rolls := 0
	if *tailBytes > segmentSizeBytes {
		*tailBytes = 0
		rolls++
	}
	for _, n := range frameSizes {
		*tailBytes += n
		if *tailBytes >= segmentSizeBytes {
			*tailBytes = 0
			rolls++
		}
	}
	assertTrue(*tailBytes < segmentSizeBytes, "a tail that reached the size has rolled")
	return rolls
}

// Sync makes every entry appended so far durable: the tail segment (tidwall
// fsyncs a segment itself when it rolls away from it) and, when a segment
// file appeared, the directory. Nothing to do is not an fsync.
func (l *Log) Sync() error {
	if err := l.usable(); err != nil {
		return err
	}
	if l.syncedIndex == l.lastIndex && !l.dirSyncPending && !l.blobSyncPending {
		return nil
	}
	// The round's payloads and its records become durable side by side:
	// the wait is one disk round trip, not two (blob.go says why that is
	// safe).
	var walErr, blobErr error
	if l.blobSyncPending {
		walErr, blobErr = l.runner.Both(l.syncSegmentsFn, l.syncBlobsFn)
	} else {
		walErr = l.wal.Sync()
	}
	if err := errors.Join(walErr, blobErr); err != nil {
		return l.fail(err)
	}
	l.stats.Syncs++
	if l.dirSyncPending {
		if err := l.syncDir(); err != nil {
			return l.fail(err)
		}
	}
	l.syncedIndex = l.lastIndex
	return nil
}

// SaveSnapshot stores data as the state at index (which must be appended,
// and newer than the current snapshot), then drops the entries up to index
// from the log. The log is synced up to index first, so a snapshot never
// runs ahead of the durable log. Steps, each crash-safe: write the snapshot
// atomically (snapshot.go), remove the previous snapshot, tidwall
// TruncateFront, fsync the directory. A crash after the first step leaves
// entries <= index in the log; Open skips them and finishes the truncation.
// keepBlobsFrom is the lowest blob file a stored body in the snapshot refers
// to (core.Partition.LowestStoredFile), 0 when none: blob files from it on
// stay, even when the snapshot covers every record that wrote into them.
// Any error fails the Log (the broker restarts and recovers).
func (l *Log) SaveSnapshot(index uint64, data []byte, keepBlobsFrom uint64) error {
	if err := l.usable(); err != nil {
		return err
	}
	if index <= l.snapshotIndex || index > l.lastIndex {
		return fmt.Errorf("logstore %s: snapshot at %d: must be after the snapshot at %d and at most the last index %d",
			l.dir, index, l.snapshotIndex, l.lastIndex)
	}
	if l.syncedIndex < index {
		if err := l.Sync(); err != nil {
			return err
		}
	}
	assertTrue(l.syncedIndex >= index, "a snapshot never runs ahead of the durable log")
	if err := writeSnapshotFile(l.fs, l.dir, index, keepBlobsFrom, data); err != nil {
		return l.fail(err)
	}
	if previous := l.snapshotIndex; previous != 0 {
		if err := l.fs.Remove(path.Join(l.dir, snapshotName(previous))); err != nil {
			return l.fail(err)
		}
	}
	l.snapshotIndex = index
	l.stats.Snapshots++
	if err := l.truncateFront(index + 1); err != nil {
		return l.fail(err)
	}
	// After the truncation, so that a crash in between leaves only blob
	// files nothing live refers to, which Open removes.
	if _, err := l.removeCoveredBlobs(index, keepBlobsFrom); err != nil {
		return l.fail(err)
	}
	// ReadEntries' open blob files that went: every id is at most lastIndex.
	liveFrom := l.lastIndex + 1
	if len(l.blobFiles) > 0 {
		liveFrom = l.blobFiles[0].id
	}
	l.forgetBlobFiles(liveFrom)
	return nil
}

// truncateFront drops the records before firstIndex from the log.
func (l *Log) truncateFront(firstIndex uint64) error {
	assertTrue(firstIndex <= l.lastIndex+1, "truncation keeps the log's end")
	if firstIndex <= l.firstIndex {
		return nil
	}
	// tidwall rewrites the segment holding firstIndex under a new name:
	// ReadEntries' cursor may be on the old one.
	l.reader.dropAll()
	if err := l.wal.TruncateFront(firstIndex); err != nil {
		return err
	}
	l.firstIndex = firstIndex
	tidwallFirst, err := l.wal.FirstIndex()
	assertTrue(err == nil && tidwallFirst == firstIndex, "tidwall's first index is ours")
	// tidwall renames without fsyncing the directory.
	if err := l.fs.SyncDir(l.dir); err != nil {
		return err
	}
	// When the cut fell in the tail segment, tidwall rewrote it shorter.
	return l.loadTailSegmentBytes()
}

// loadTailSegmentBytes reads the size of the tail segment from the directory
// (after Open or a truncation, when tidwall reloaded its tail from disk).
func (l *Log) loadTailSegmentBytes() error {
	n, err := tailSegmentBytes(l.fs, l.dir)
	l.tailSegmentBytes = n
	return err
}

// tailSegmentBytes is the size of the last segment file in dir.
func tailSegmentBytes(fs fsys.FS, dir string) (int, error) {
	listing, err := listDir(fs, dir)
	if err != nil {
		return 0, err
	}
	assertTrue(len(listing.segments) > 0, "tidwall keeps a tail segment")
	return int(listing.segments[len(listing.segments)-1].sizeBytes), nil
}

// SizeBytes returns the bytes the log's files take (segments, snapshot and
// any leftovers), for reports. Safe to call from any goroutine.
func (l *Log) SizeBytes() (int64, error) {
	entries, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, entry := range entries {
		if !entry.IsDir {
			total += entry.SizeBytes
		}
	}
	return total, nil
}

// Close syncs what was appended and closes the files. After a failure it
// closes without syncing and returns the failure.
func (l *Log) Close() error {
	if l.closed {
		return ErrClosed
	}
	var syncErr error
	if l.failed == nil {
		syncErr = l.Sync()
	}
	l.closed = true
	walErr := l.wal.Close() // fsyncs the tail once more, even with NoSync
	if l.opts.MarkCleanClose && l.failed == nil && syncErr == nil && walErr == nil {
		// Everything up to lastIndex is synced (closedmark.go).
		walErr = writeClosedMark(l.fs, l.dir, l.lastIndex)
	}
	blobErr := l.closeBlobs()
	l.reader.closeAll()
	// A log reopened in this process must not see files vanish under it.
	unlinkErr := l.runner.Wait()
	if l.failed != nil {
		return l.failed
	}
	return errors.Join(syncErr, walErr, blobErr, unlinkErr)
}
