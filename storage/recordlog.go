package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path"

	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/storage/fsys"
)

// The record log: the Node's own log of opaque records (catalogue,
// identities, session skeletons; core/node encodes them) and its snapshot,
// in the same directory layout, segment log and snapshot files as a
// partition's Log, without blobs. Invariants:
//   - a frame's data is u32 CRC-32C (big-endian) of the rest, then the
//     record's index (u64 big-endian), then its bytes; the segment index of
//     a record is its index;
//   - recovery checks framing, CRC and that each index is its place; the
//     first bad record is the cut: a torn tail (the bad record is the last
//     frame of the tail segment, cut off or failing its CRC, or zeros fill
//     the file from it) is trimmed, anything else refused (or trimmed under
//     CorruptionTruncate);
//   - what OpenRecordLog returns is durable (every kept segment and the
//     directory are fsynced first), as for a Log;
//   - snapshotIndex <= syncedIndex <= lastIndex; a snapshot is written only
//     at a durable index, then the records up to it are truncated.

// Record is one record of a record log (node.Record has the same shape).
type Record struct {
	Index uint64
	Data  []byte
}

// RecordLogOptions configures a record log.
type RecordLogOptions struct {
	SegmentSizeBytes int
	OnCorruption     CorruptionPolicy
	// RecordBytesMax bounds one record's data: Append refuses a larger one.
	RecordBytesMax int
}

// DefaultRecordLogOptions: 1 MiB segments (records are small), corruption
// refused, records up to 16 MiB (a catalogue snapshot is not a record).
func DefaultRecordLogOptions() RecordLogOptions {
	return RecordLogOptions{SegmentSizeBytes: 1 << 20, OnCorruption: CorruptionRefuse, RecordBytesMax: 16 << 20}
}

// recordHeaderBytesRL: the CRC and the index in front of a record's data.
const recordLogHeaderBytes = 4 + 8

// RecordLogRecovered is what OpenRecordLog found.
type RecordLogRecovered struct {
	// Snapshot is the newest snapshot's bytes (nil: none), as of SnapshotIndex.
	Snapshot      []byte
	SnapshotIndex uint64
	// Records are the records after the snapshot, in index order.
	Records []Record
	// TruncatedTail and Cut say what recovery cut, as for a Log.
	TruncatedTail bool
	Cut           Cut
}

// RecordLog is one record log. It is used by one goroutine at a time.
type RecordLog struct {
	env  Env
	fs   fsys.FS
	dir  string
	opts RecordLogOptions
	wal  fsys.SegmentLog

	firstIndex, lastIndex, syncedIndex, snapshotIndex uint64

	tailSegmentBytes int
	dirSyncPending   bool
	batch            fsys.Batch
	buf              []byte
	frameSizes       []int

	failed error
	closed bool
}

// OpenRecordLog opens the record log in dir over env, creating it if
// absent, repairs a torn tail, makes what it keeps durable and returns it.
func OpenRecordLog(env Env, dir string, opts RecordLogOptions) (*RecordLog, RecordLogRecovered, error) {
	var rec RecordLogRecovered
	if opts.SegmentSizeBytes < 1 || opts.RecordBytesMax < 1 ||
		(opts.OnCorruption != CorruptionRefuse && opts.OnCorruption != CorruptionTruncate) {
		return nil, rec, fmt.Errorf("record log options %+v: sizes must be at least 1 and OnCorruption a policy", opts)
	}
	if err := env.FS.MkdirAll(dir); err != nil {
		return nil, rec, err
	}
	if err := syncAncestors(env.FS, dir); err != nil {
		return nil, rec, err
	}
	rl := &RecordLog{env: env, fs: env.FS, dir: dir, opts: opts}
	if err := rl.recover(&rec); err != nil {
		if rl.wal != nil {
			rl.wal.Close()
		}
		return nil, RecordLogRecovered{}, err
	}
	return rl, rec, nil
}

func (rl *RecordLog) recover(rec *RecordLogRecovered) error {
	listing, err := listDir(rl.fs, rl.dir)
	if err != nil {
		return err
	}
	if finished, err := finishTidwallTruncation(rl.env, rl.dir, listing); err != nil {
		return err
	} else if finished {
		if listing, err = listDir(rl.fs, rl.dir); err != nil {
			return err
		}
	}
	if err := removeLeftovers(rl.fs, rl.dir, listing.leftovers); err != nil {
		return err
	}
	snapshotIndex, snapshot, _, err := loadNewestSnapshot(rl.fs, rl.dir, listing.snapshots)
	if err != nil {
		return err
	}
	segments := listing.segments
	scan, err := scanRecordSegments(rl.fs, rl.dir, segments, snapshotIndex)
	if err != nil {
		return err
	}
	if scan.cut != nil {
		if err := verifyCutReads(rl.fs, rl.dir, &scan.scanResult, nil); err != nil {
			return err
		}
		if !scan.cut.Torn && rl.opts.OnCorruption == CorruptionRefuse {
			return &CorruptionError{Dir: rl.dir, Cut: *scan.cut}
		}
		if err := applyCut(rl.fs, rl.dir, segments, &scan.scanResult); err != nil {
			return err
		}
		rec.TruncatedTail, rec.Cut = true, *scan.cut
		segments = segments[:scan.cutSegment+1]
		if scan.cutDropsFile {
			segments = segments[:scan.cutSegment]
		}
	}
	if len(segments) == 0 || scan.lastIndex < snapshotIndex {
		if err := resetLog(rl.fs, rl.dir, segments, snapshotIndex+1); err != nil {
			return err
		}
		segments = []segmentFile{{name: segmentName(snapshotIndex + 1), firstIndex: snapshotIndex + 1}}
		scan.lastIndex, scan.records = snapshotIndex, nil
	}
	if err := rl.openSegments(segments[0].firstIndex, scan.lastIndex); err != nil {
		return err
	}
	rl.snapshotIndex = snapshotIndex
	if rl.firstIndex <= snapshotIndex {
		if err := rl.truncateFront(snapshotIndex + 1); err != nil {
			return err
		}
	} else if rl.tailSegmentBytes, err = tailSegmentBytes(rl.fs, rl.dir); err != nil {
		return err
	}
	if !mutant.On(mutant.RecoveryNoSync) {
		if err := syncKept(rl.fs, rl.dir, nil); err != nil {
			return err
		}
	} else if err := rl.fs.SyncDir(rl.dir); err != nil {
		return err
	}
	rec.Snapshot, rec.SnapshotIndex, rec.Records = snapshot, snapshotIndex, scan.records
	if n := len(rec.Records); n > 0 {
		assertTrue(rec.Records[0].Index == snapshotIndex+1, "recovered records start right after the snapshot")
		assertTrue(rec.Records[n-1].Index == rl.lastIndex, "recovered records end at the last index")
	}
	return nil
}

func (rl *RecordLog) openSegments(firstIndex, lastIndex uint64) error {
	log, err := rl.env.OpenSegmentLog(rl.dir, fsys.SegmentLogOptions{NoSync: true, SegmentSizeBytes: rl.opts.SegmentSizeBytes})
	if err != nil {
		return fmt.Errorf("record log %s: segment log open after repair: %w", rl.dir, err)
	}
	rl.wal, rl.batch = log, log.NewBatch()
	segFirst, err1 := log.FirstIndex()
	segLast, err2 := log.LastIndex()
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if segFirst != firstIndex || segLast != lastIndex {
		return fmt.Errorf("record log %s: segment log sees %d..%d, the scan %d..%d: %w", rl.dir, segFirst, segLast, firstIndex, lastIndex, ErrCorrupt)
	}
	rl.firstIndex, rl.lastIndex, rl.syncedIndex = firstIndex, lastIndex, lastIndex
	return nil
}

// recordScan is a scanResult plus the records found.
type recordScan struct {
	scanResult
	records []Record
}

// scanRecordSegments reads every segment and stops at the first bad record
// (records at or below snapshotIndex are framed, not checked).
func scanRecordSegments(fs fsys.FS, dir string, segments []segmentFile, snapshotIndex uint64) (recordScan, error) {
	var res recordScan
	res.lastIndex = snapshotIndex
	if len(segments) == 0 {
		return res, nil
	}
	if segments[0].firstIndex > snapshotIndex+1 {
		return res, res.cutFile(fs, dir, segments, 0, snapshotIndex+1, CutMissingPrefix)
	}
	res.lastIndex = segments[0].firstIndex - 1
	next := segments[0].firstIndex
	skipCRC := mutant.On(mutant.SkipCRC)
	for k := range segments {
		if segments[k].firstIndex != next {
			return res, res.cutFile(fs, dir, segments, k, next, CutSegmentGap)
		}
		data, err := readFile(fs, path.Join(dir, segments[k].name))
		if err != nil {
			return res, err
		}
		lastSegment := k == len(segments)-1
		for pos := 0; pos < len(data); {
			f := parseFrame(data[pos:])
			reason := CutNone
			var r Record
			switch {
			case !f.ok && f.reachesEOF:
				reason = CutTornFrame
			case !f.ok:
				reason = CutBadFrame
			case next > snapshotIndex:
				acceptTorn := mutant.On(mutant.AcceptTornTail) && lastSegment && f.reachesEOF
				r, reason = checkNodeRecord(f.data, next, skipCRC || acceptTorn)
			}
			if reason != CutNone {
				return res, res.cutRecord(fs, dir, segments, k, data, pos, f, next, reason, 0, nodeRecords)
			}
			if next > snapshotIndex {
				res.records = append(res.records, r)
			}
			res.lastIndex = next
			next++
			pos += f.totalBytes
		}
	}
	return res, nil
}

// nodeRecords: a record log's record holds its index after the CRC, and no
// synced mark (so damage with intact records after it is never torn).
var nodeRecords = recordFormat{indexOf: nodeRecordIndex, syncedMarkOf: func([]byte, uint64) uint64 { return 0 }}

// nodeRecordIndex reads the index a record log's record claims.
func nodeRecordIndex(frame []byte) (uint64, bool) {
	if len(frame) < recordLogHeaderBytes {
		return 0, false
	}
	return binary.BigEndian.Uint64(frame[recordHeaderBytes:]), true
}

// checkNodeRecord verifies the record stored at index wantIndex. Its data
// aliases frame (a fresh read of the file, owned by the caller).
func checkNodeRecord(frame []byte, wantIndex uint64, skipCRC bool) (Record, CutReason) {
	if len(frame) < recordLogHeaderBytes {
		return Record{}, CutShortRecord
	}
	if !skipCRC && crc32.Checksum(frame[4:], castagnoli) != binary.BigEndian.Uint32(frame) {
		return Record{}, CutChecksum
	}
	index := binary.BigEndian.Uint64(frame[4:])
	if index != wantIndex {
		return Record{}, CutIndexMismatch
	}
	return Record{Index: index, Data: frame[recordLogHeaderBytes:]}, CutNone
}

func (rl *RecordLog) usable() error {
	if rl.failed != nil {
		return rl.failed
	}
	if rl.closed {
		return ErrClosed
	}
	return nil
}

func (rl *RecordLog) fail(err error) error {
	if rl.failed == nil {
		rl.failed = fmt.Errorf("record log %s: failed: %w", rl.dir, err)
	}
	return rl.failed
}

// LastIndex is the index of the last record appended (durable or not).
func (rl *RecordLog) LastIndex() uint64 { return rl.lastIndex }

// SyncedIndex is the index up to which every record is durable.
func (rl *RecordLog) SyncedIndex() uint64 { return rl.syncedIndex }

// SnapshotIndex is the index of the newest snapshot (0: none).
func (rl *RecordLog) SnapshotIndex() uint64 { return rl.snapshotIndex }

// Append writes records (indexes following LastIndex) without fsync; the
// data is copied.
func (rl *RecordLog) Append(records []Record) error {
	if err := rl.usable(); err != nil {
		return err
	}
	if len(records) == 0 {
		return nil
	}
	for i := range records {
		if records[i].Index != rl.lastIndex+1+uint64(i) {
			return fmt.Errorf("record log %s: record %d appended after %d: indexes must be contiguous", rl.dir, records[i].Index, rl.lastIndex+uint64(i))
		}
		if len(records[i].Data) > rl.opts.RecordBytesMax {
			return fmt.Errorf("record log %s: record %d holds %d bytes, more than RecordBytesMax %d", rl.dir, records[i].Index, len(records[i].Data), rl.opts.RecordBytesMax)
		}
	}
	rl.batch.Clear()
	rl.frameSizes = rl.frameSizes[:0]
	for i := range records {
		r := &records[i]
		rl.buf = append(rl.buf[:0], 0, 0, 0, 0)
		rl.buf = binary.BigEndian.AppendUint64(rl.buf, r.Index)
		rl.buf = append(rl.buf, r.Data...)
		binary.BigEndian.PutUint32(rl.buf, crc32.Checksum(rl.buf[4:], castagnoli))
		rl.batch.Write(r.Index, rl.buf)
		rl.frameSizes = append(rl.frameSizes, frameBytes(len(rl.buf)))
	}
	if cap(rl.buf) > recordBufferRetainBytesMax {
		rl.buf = nil
	}
	if err := rl.wal.WriteBatch(rl.batch); err != nil {
		return rl.fail(err)
	}
	rl.lastIndex += uint64(len(records))
	if mirrorRolls(&rl.tailSegmentBytes, rl.opts.SegmentSizeBytes, rl.frameSizes) > 0 {
		rl.dirSyncPending = true
		if err := rl.wal.ClearCache(); err != nil {
			return rl.fail(err)
		}
	}
	segLast, err := rl.wal.LastIndex()
	assertTrue(err == nil && segLast == rl.lastIndex, "the segment log's last index is ours")
	return nil
}

// Sync makes every record appended so far durable (and the names of
// segments started since the last Sync).
func (rl *RecordLog) Sync() error {
	if err := rl.usable(); err != nil {
		return err
	}
	if rl.syncedIndex == rl.lastIndex && !rl.dirSyncPending {
		return nil
	}
	if err := rl.wal.Sync(); err != nil {
		return rl.fail(err)
	}
	if rl.dirSyncPending && !mutant.On(mutant.NoDirSync) {
		if err := rl.fs.SyncDir(rl.dir); err != nil {
			return rl.fail(err)
		}
	}
	rl.dirSyncPending = false
	rl.syncedIndex = rl.lastIndex
	return nil
}

// SaveSnapshot stores data as the state at index (durable already, and
// after the current snapshot), then drops the records up to index.
func (rl *RecordLog) SaveSnapshot(index uint64, data []byte) error {
	if err := rl.usable(); err != nil {
		return err
	}
	if index <= rl.snapshotIndex || index > rl.syncedIndex {
		return fmt.Errorf("record log %s: snapshot at %d: must be after the snapshot at %d and at most the synced index %d",
			rl.dir, index, rl.snapshotIndex, rl.syncedIndex)
	}
	if err := writeSnapshotFile(rl.fs, rl.dir, index, 0, data); err != nil {
		return rl.fail(err)
	}
	if previous := rl.snapshotIndex; previous != 0 {
		if err := rl.fs.Remove(path.Join(rl.dir, snapshotName(previous))); err != nil {
			return rl.fail(err)
		}
	}
	rl.snapshotIndex = index
	if err := rl.truncateFront(index + 1); err != nil {
		return rl.fail(err)
	}
	return nil
}

func (rl *RecordLog) truncateFront(firstIndex uint64) error {
	assertTrue(firstIndex <= rl.lastIndex+1, "truncation keeps the log's end")
	if firstIndex <= rl.firstIndex {
		return nil
	}
	if err := rl.wal.TruncateFront(firstIndex); err != nil {
		return err
	}
	rl.firstIndex = firstIndex
	if err := rl.fs.SyncDir(rl.dir); err != nil {
		return err
	}
	n, err := tailSegmentBytes(rl.fs, rl.dir)
	rl.tailSegmentBytes = n
	return err
}

// Close syncs and closes.
func (rl *RecordLog) Close() error {
	if rl.closed {
		return ErrClosed
	}
	var syncErr error
	if rl.failed == nil {
		syncErr = rl.Sync()
	}
	rl.closed = true
	walErr := rl.wal.Close()
	if rl.failed != nil {
		return rl.failed
	}
	return errors.Join(syncErr, walErr)
}
