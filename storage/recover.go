package storage

import (
	"fmt"
	"path"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/storage/fsys"
)

// Open's recovery, in order. Invariants:
//   - what Open returns is durable: it fsyncs every segment and blob file it
//     keeps, then the directory, before returning, since a process crash
//     (not a machine crash) leaves written but unsynced bytes (and names)
//     readable in the page cache, and the core treats recovered entries as
//     durable: a power loss after Open must not take back what it returned;
//   - Entries are exactly the records SnapshotIndex+1..LastIndex, contiguous;
//   - with CorruptionRefuse, a cut that is not a torn tail changes no
//     segment file.

// Recovered is what Open found: what core.Recover needs, and what it repaired.
type Recovered struct {
	// Snapshot is the newest snapshot's bytes (nil when there is none), the
	// state as of SnapshotIndex.
	Snapshot      []byte
	SnapshotIndex uint64
	// Entries are every valid entry after the snapshot, in index order. A
	// publish whose payload is in a blob file comes back stored (Body.Ref
	// set, Payload nil): read it with a PayloadReader when it is needed.
	Entries []core.Entry

	// TruncatedTail says Open cut the log (a torn tail, or corruption under
	// CorruptionTruncate); Cut says where, why and how much went.
	TruncatedTail bool
	Cut           Cut
	// FinishedTruncation says a snapshot's truncation of the log had not
	// happened (a crash after the snapshot was written) and Open did it.
	FinishedTruncation bool
	// ResetLog says the log held nothing after the snapshot that could be
	// kept (it ended before it, or no segment was left), so Open restarted
	// it empty at SnapshotIndex+1.
	ResetLog bool
	// RemovedFiles counts leftovers Open deleted: temporary files and
	// superseded snapshots a crash left behind.
	RemovedFiles int
	// RemovedBlobFiles counts blob files Open deleted because no recovered
	// entry refers to them: covered by the snapshot (a crash before
	// SaveSnapshot removed them), or holding only payloads of records a
	// crash or the cut lost.
	RemovedBlobFiles int
}

func (l *Log) recover() (Recovered, error) {
	var rec Recovered
	listing, err := listDir(l.fs, l.dir)
	if err != nil {
		return rec, err
	}
	if finished, err := finishTidwallTruncation(l.env, l.dir, listing); err != nil {
		return rec, err
	} else if finished {
		if listing, err = listDir(l.fs, l.dir); err != nil {
			return rec, err
		}
	}
	if err := removeLeftovers(l.fs, l.dir, listing.leftovers); err != nil {
		return rec, err
	}
	rec.RemovedFiles = len(listing.leftovers) + max(0, len(listing.snapshots)-1)
	snapshotIndex, snapshot, keepBlobsFrom, err := loadNewestSnapshot(l.fs, l.dir, listing.snapshots)
	if err != nil {
		return rec, err
	}
	isNew := len(listing.segments) == 0 && snapshotIndex == 0
	closedMark, err := readClosedMark(l.fs, l.dir)
	if err != nil {
		return rec, err
	}
	segments, scan, err := l.scanAndCut(&rec, listing.segments, snapshotIndex, newBlobReader(l.fs, l.dir, listing.blobs), closedMark)
	if err != nil {
		return rec, err
	}
	// Serving from here on: the mark would claim too much after a cut or
	// the next append (made durable by the directory sync below).
	if err := removeClosedMark(l.fs, l.dir); err != nil {
		return rec, err
	}
	if len(segments) == 0 || scan.lastIndex < snapshotIndex {
		if err := resetLog(l.fs, l.dir, segments, snapshotIndex+1); err != nil {
			return rec, err
		}
		rec.ResetLog = !isNew
		segments = []segmentFile{{name: segmentName(snapshotIndex + 1), firstIndex: snapshotIndex + 1}}
		scan.lastIndex, scan.entries, scan.blobUses = snapshotIndex, nil, nil
	}
	// After the cut: a refused open returns above with every file as it was.
	if rec.RemovedBlobFiles, err = l.openBlobs(listing.blobs, scan.blobUses, snapshotIndex, keepBlobsFrom); err != nil {
		return rec, err
	}
	if err := l.openTidwall(segments[0].firstIndex, scan.lastIndex); err != nil {
		return rec, err
	}
	l.snapshotIndex = snapshotIndex
	l.lastEpoch = scan.lastEpoch
	if l.firstIndex <= snapshotIndex {
		if err := l.truncateFront(snapshotIndex + 1); err != nil {
			return rec, err
		}
		rec.FinishedTruncation = true
	} else if err := l.loadTailSegmentBytes(); err != nil {
		return rec, err
	}
	if err := l.makeRecoveredDurable(); err != nil {
		return rec, err
	}
	rec.Snapshot, rec.SnapshotIndex, rec.Entries = snapshot, snapshotIndex, scan.entries
	if n := len(rec.Entries); n > 0 {
		assertTrue(rec.Entries[0].Index == snapshotIndex+1, "recovered entries start right after the snapshot")
		assertTrue(rec.Entries[n-1].Index == l.lastIndex, "recovered entries end at the last index")
	}
	return rec, nil
}

// makeRecoveredDurable fsyncs every segment and blob file the log keeps,
// then the directory (and with it every rename and removal recovery made):
// what recovery read may have come from the page cache of a process that
// crashed before its fsync, and is about to be reported durable.
func (l *Log) makeRecoveredDurable() error {
	if mutant.On(mutant.RecoveryNoSync) {
		// Broken on purpose (the defect this fixed): only the tail and
		// the directory were synced.
		if err := l.wal.Sync(); err != nil {
			return err
		}
		return l.fs.SyncDir(l.dir)
	}
	names := make([]string, 0, len(l.blobFiles))
	for _, blob := range l.blobFiles {
		names = append(names, blobName(blob.id))
	}
	return syncKept(l.fs, l.dir, names)
}

// syncKept fsyncs every segment of dir and the files named in extra, then
// dir itself.
func syncKept(fs fsys.FS, dir string, extra []string) error {
	listing, err := listDir(fs, dir)
	if err != nil {
		return err
	}
	for _, seg := range listing.segments {
		if err := syncFile(fs, dir, seg.name); err != nil {
			return err
		}
	}
	for _, name := range extra {
		if err := syncFile(fs, dir, name); err != nil {
			return err
		}
	}
	return fs.SyncDir(dir)
}

// syncFile fsyncs one file of dir.
func syncFile(fs fsys.FS, dir, name string) error {
	f, err := fs.OpenRead(path.Join(dir, name))
	if err != nil {
		return err
	}
	syncErr := f.Sync()
	closeErr := f.Close()
	if syncErr != nil {
		return syncErr
	}
	return closeErr
}

// scanAndCut scans the segments and makes the cut the policy allows. It
// returns the segments left.
func (l *Log) scanAndCut(rec *Recovered, segments []segmentFile, snapshotIndex uint64, blobs *blobReader, closedMark uint64) ([]segmentFile, scanResult, error) {
	scan, err := scanSegments(l.fs, l.dir, segments, snapshotIndex, blobs, scanOptions{cutFrom: l.opts.CutFromIndex, closedMark: closedMark})
	if err != nil || scan.cut == nil {
		return segments, scan, err
	}
	if err := verifyCutReads(l.fs, l.dir, &scan, blobs); err != nil {
		return nil, scan, err
	}
	if !scan.cut.Torn && l.opts.OnCorruption == CorruptionRefuse {
		return nil, scan, &CorruptionError{Dir: l.dir, Cut: *scan.cut}
	}
	if err := applyCut(l.fs, l.dir, segments, &scan); err != nil {
		return nil, scan, err
	}
	rec.TruncatedTail = true
	rec.Cut = *scan.cut
	if scan.cutDropsFile {
		return segments[:scan.cutSegment], scan, nil
	}
	return segments[:scan.cutSegment+1], scan, nil
}

// openTidwall opens tidwall on the repaired directory and checks that it
// sees the records we scanned.
func (l *Log) openTidwall(firstIndex, lastIndex uint64) error {
	log, err := l.env.OpenSegmentLog(l.dir, segmentLogOptions(l.opts))
	if err != nil {
		return fmt.Errorf("logstore %s: tidwall open after repair: %w", l.dir, err)
	}
	l.wal = log
	l.batch = log.NewBatch()
	tidwallFirst, err := log.FirstIndex()
	if err != nil {
		return err
	}
	tidwallLast, err := log.LastIndex()
	if err != nil {
		return err
	}
	if tidwallFirst != firstIndex || tidwallLast != lastIndex {
		return fmt.Errorf("logstore %s: tidwall sees records %d..%d, the scan %d..%d: %w",
			l.dir, tidwallFirst, tidwallLast, firstIndex, lastIndex, ErrCorrupt)
	}
	l.firstIndex, l.lastIndex, l.syncedIndex = firstIndex, lastIndex, lastIndex
	return nil
}
