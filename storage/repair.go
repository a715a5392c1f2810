package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/storage/fsys"
)

// Reading the segments back and cutting the log at its first bad record.
// Invariants:
//   - we parse tidwall's segment files ourselves: tidwall's Open reads only
//     the tail segment, fails outright on a torn tail, takes zero-filled
//     bytes for empty entries, and never checks that segment names follow on;
//   - the cut is at the first bad record, to the byte: every record before it
//     stays, every byte from it on goes;
//   - a cut changes files only after it was decided, removing the newest
//     files first, so a crash half way leaves a log whose first bad record is
//     the same one, and the next Open makes the same cut.

// ErrCorrupt is wrapped by every error that reports a corrupt log or
// snapshot (see CorruptionError).
var ErrCorrupt = errors.New("logstore: corrupt")

// Cut describes where recovery found the first bad record.
type Cut struct {
	// Index is the index the bad record holds by its place in the log: every
	// record below it is intact, it and everything after it are dropped.
	Index  uint64
	Reason CutReason
	// Torn says the damage looks like an unfinished write: the bad record,
	// cut off or failing its checksum, is the last frame of the tail
	// segment, or zeros fill the file from it on.
	Torn bool
	// Segment names the file holding the bad record; OffsetBytes is where
	// the record's frame starts in it.
	Segment     string
	OffsetBytes int64
	// DroppedBytes counts the bytes from the cut to the end of the log.
	DroppedBytes int64
	// DroppedRecords counts the complete frames among them (a broken length
	// prefix hides whatever follows it in its file).
	DroppedRecords int
}

// CorruptionError reports a cut that Open did not make because
// Options.OnCorruption is CorruptionRefuse. Nothing on disk was changed.
type CorruptionError struct {
	Dir string
	Cut Cut
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("logstore %s: %s at index %d (segment %s, byte %d); %d bytes (%d complete records) from there on left untouched",
		e.Dir, e.Cut.Reason, e.Cut.Index, e.Cut.Segment, e.Cut.OffsetBytes, e.Cut.DroppedBytes, e.Cut.DroppedRecords)
}

func (e *CorruptionError) Unwrap() error { return ErrCorrupt }

// segmentFile is one tidwall segment file.
type segmentFile struct {
	name       string
	firstIndex uint64
	sizeBytes  int64
}

// segmentNameDigits is the width of tidwall's segment names.
const segmentNameDigits = 20

// segmentName is tidwall's name for the segment starting at index.
func segmentName(index uint64) string { return fmt.Sprintf("%0*d", segmentNameDigits, index) }

// parseIndexName reads a 20-digit, nonzero index: tidwall's rule for names.
func parseIndexName(name string) (uint64, bool) {
	if len(name) != segmentNameDigits {
		return 0, false
	}
	index, err := strconv.ParseUint(name, 10, 64)
	return index, err == nil && index != 0
}

// dirListing sorts a log directory's files by role.
type dirListing struct {
	segments  []segmentFile  // by first index
	snapshots []snapshotFile // by index
	blobs     []blobOnDisk   // by id
	// unfinished tidwall truncations: a .START or .END segment that
	// tidwall's Open completes.
	tidwallPending []string
	// temporary files a crash left behind: tidwall's .TEMP, our snapshot .tmp.
	leftovers []string
}

func listDir(fs fsys.FS, dir string) (dirListing, error) {
	var listing dirListing
	names, err := fs.ReadDir(dir)
	if err != nil {
		return listing, err
	}
	for _, entry := range names {
		name := entry.Name
		if entry.IsDir {
			continue
		}
		if index, ok := parseIndexName(name); ok {
			listing.segments = append(listing.segments, segmentFile{name: name, firstIndex: index, sizeBytes: entry.SizeBytes})
			continue
		}
		if id, ok := parseBlobName(name); ok {
			listing.blobs = append(listing.blobs, blobOnDisk{id: id, sizeBytes: entry.SizeBytes})
			continue
		}
		if index, ok := parseSnapshotName(name); ok {
			listing.snapshots = append(listing.snapshots, snapshotFile{name: name, index: index})
			continue
		}
		if len(name) > segmentNameDigits {
			_, isIndexed := parseIndexName(name[:segmentNameDigits])
			rest := name[segmentNameDigits:]
			switch {
			case isIndexed && strings.HasSuffix(rest, ".TEMP"):
				listing.leftovers = append(listing.leftovers, name)
			case isIndexed && (rest == ".START" || rest == ".END"):
				listing.tidwallPending = append(listing.tidwallPending, name)
			}
		}
		if isSnapshotTmpName(name) {
			listing.leftovers = append(listing.leftovers, name)
		}
	}
	sort.Slice(listing.segments, func(i, j int) bool { return listing.segments[i].firstIndex < listing.segments[j].firstIndex })
	sort.Slice(listing.snapshots, func(i, j int) bool { return listing.snapshots[i].index < listing.snapshots[j].index })
	sort.Slice(listing.blobs, func(i, j int) bool { return listing.blobs[i].id < listing.blobs[j].id })
	return listing, nil
}

// finishTidwallTruncation lets tidwall complete a TruncateFront or
// TruncateBack that a crash interrupted (its .START / .END protocol), so the
// segment files we scan are the ones tidwall will load. tidwall does that
// before it loads the tail, so a torn tail (ErrCorrupt) does not stop it.
func finishTidwallTruncation(env Env, dir string, listing dirListing) (bool, error) {
	if len(listing.tidwallPending) == 0 {
		return false, nil
	}
	log, err := env.OpenSegmentLog(dir, segmentLogOptions(DefaultOptions()))
	if err == nil {
		err = log.Close()
	}
	if err != nil && !errors.Is(err, fsys.ErrSegmentCorrupt) {
		return false, err
	}
	after, err := listDir(env.FS, dir)
	if err != nil {
		return false, err
	}
	if len(after.tidwallPending) != 0 {
		// Both a START and an END: tidwall refuses, and our own operation
		// order never leaves both.
		return false, fmt.Errorf("logstore %s: unfinished tidwall truncations %v: %w", dir, after.tidwallPending, ErrCorrupt)
	}
	return true, nil
}

// scanResult is what scanning the segments found.
type scanResult struct {
	entries   []core.Entry // the valid entries after the snapshot, in order
	lastIndex uint64       // the last valid record's index (entries or not)
	lastEpoch uint64       // of the last decoded entry; 0 when none
	// blobUses: the blob files the entries refer to, in order.
	blobUses []blobUse
	cut      *Cut
	// cutSegment is the position in segments of the file the cut is in;
	// cutDropsFile says that whole file goes (its name is wrong).
	cutSegment   int
	cutDropsFile bool
}

// scanSegments reads every segment in order and stops at the first bad
// record. Records at or below snapshotIndex are framed but not decoded: the
// snapshot replaces them and recovery truncates them, so corruption there
// must not cost the entries after them. A blob record's payload is read
// back from blobs and checked as part of its record: a payload that cannot
// be read is a bad record at that index.
func scanSegments(fs fsys.FS, dir string, segments []segmentFile, snapshotIndex uint64, blobs *blobReader) (scanResult, error) {
	var res scanResult
	res.lastIndex = snapshotIndex
	if len(segments) == 0 {
		return res, nil
	}
	if segments[0].firstIndex > snapshotIndex+1 {
		return res, res.cutFile(fs, dir, segments, 0, snapshotIndex+1, CutMissingPrefix)
	}
	res.lastIndex = segments[0].firstIndex - 1
	next := segments[0].firstIndex
	// Broken variants (mutant): recovery without its CRC checks, or keeping
	// a torn last record of the tail segment.
	skipCRC := mutant.On(mutant.SkipCRC)
	acceptTorn := mutant.On(mutant.AcceptTornTail)
	for k := range segments {
		seg := &segments[k]
		if seg.firstIndex != next {
			return res, res.cutFile(fs, dir, segments, k, next, CutSegmentGap)
		}
		data, err := readFile(fs, path.Join(dir, seg.name))
		if err != nil {
			return res, err
		}
		for pos := 0; pos < len(data); {
			f := parseFrame(data[pos:])
			reason := CutNone
			var e core.Entry
			var ref blobRef
			isBlob := false
			switch {
			case !f.ok && f.reachesEOF:
				reason = CutTornFrame
			case !f.ok:
				reason = CutBadFrame
			case next > snapshotIndex:
				e, ref, isBlob, reason = checkRecord(f.data, next, res.lastEpoch, skipCRC || (acceptTorn && f.reachesEOF && k == len(segments)-1))
			}
			if reason == CutNone && isBlob && !res.refFollows(ref) {
				reason = CutUndecodable
			}
			if reason == CutNone && isBlob {
				if reason, err = blobs.check(ref, skipCRC); err != nil {
					return res, err
				}
				if acceptTorn && f.reachesEOF && k == len(segments)-1 {
					// Broken on purpose: the last record is kept whatever
					// became of its payload.
					reason = CutNone
				}
				e.Body.Ref = ref.payloadRef()
			}
			if reason != CutNone {
				return res, res.cutRecord(fs, dir, segments, k, data, pos, f, next, reason, ref.roundLastIndex)
			}
			if next > snapshotIndex {
				res.entries = append(res.entries, e)
				res.lastEpoch = e.Epoch
				if isBlob {
					res.noteUse(next, ref)
				}
			}
			res.lastIndex = next
			next++
			pos += f.totalBytes
		}
	}
	return res, nil
}

// cutRecord records a cut at the frame at pos in segments[k] (whose bytes
// are data).
// roundLast is, for a blob record whose payload cannot be read back, the
// last index of the Append that wrote it (blobRef.roundLastIndex).
func (res *scanResult) cutRecord(fs fsys.FS, dir string, segments []segmentFile, k int, data []byte, pos int, f frame, index uint64, reason CutReason, roundLast uint64) error {
	assertTrue(reason != CutNone, "a cut has a reason")
	assertTrue(index == res.lastIndex+1, "the cut follows the last valid record")
	// A write cut short leaves a frame that runs off the end, fails its
	// checksum, or reads as zeros; a record that passes its checksum but
	// holds the wrong index or epoch was written whole, so it is corruption
	// wherever it is.
	isTail := k == len(segments)-1
	looksUnfinished := reason == CutTornFrame || reason == CutShortRecord || reason == CutChecksum
	later, laterRecords, laterValidIndex, err := laterSegments(fs, dir, segments[k+1:])
	if err != nil {
		return err
	}
	dropped := countFrames(data[pos:]) + laterRecords
	torn := isTail && looksUnfinished && (f.reachesEOF || allZero(data[pos:]))
	if !torn && isTail && (looksUnfinished || reason == CutBadFrame) {
		torn = onlyJunkFollows(data, pos, f)
	}
	if reason == CutBlobMissing || reason == CutBlobShort || reason == CutBlobChecksum {
		// A round's payloads are fdatasynced beside its records, so a crash
		// can keep records of the last round without their payloads; the
		// next round starts only once both are durable. A payload lost
		// under a record whose round reaches the end of the log is that
		// unfinished round (nothing in it was confirmed); under an earlier
		// round it is damage.
		// Only records that pass their CRC count: a torn tail's garbage
		// or zeros parse as frames too.
		lastInLog := index
		if n := lastValidFrame(data[pos:]); n > 0 {
			lastInLog = index + uint64(n)
		}
		lastInLog = max(lastInLog, laterValidIndex)
		torn = roundLast >= index && lastInLog <= roundLast
	}
	res.cut = &Cut{
		Index:          index,
		Reason:         reason,
		Torn:           torn,
		Segment:        segments[k].name,
		OffsetBytes:    int64(pos),
		DroppedBytes:   int64(len(data)-pos) + later,
		DroppedRecords: dropped,
	}
	res.cutSegment = k
	return nil
}

// cutFile records a cut that drops segments[k] and all after it.
func (res *scanResult) cutFile(fs fsys.FS, dir string, segments []segmentFile, k int, index uint64, reason CutReason) error {
	dropped, records, _, err := laterSegments(fs, dir, segments[k:])
	if err != nil {
		return err
	}
	res.cut = &Cut{Index: index, Reason: reason, Segment: segments[k].name, DroppedBytes: dropped, DroppedRecords: records}
	res.cutSegment = k
	res.cutDropsFile = true
	return nil
}

// laterSegments sums the bytes and complete frames of segments a cut drops.
// It also returns the highest index (by place) of a record among them that
// passes its CRC, 0 when none does.
func laterSegments(fs fsys.FS, dir string, segments []segmentFile) (sizeBytes int64, records int, lastValidIndex uint64, err error) {
	for _, seg := range segments {
		data, err := readFile(fs, path.Join(dir, seg.name))
		if err != nil {
			return 0, 0, 0, err
		}
		sizeBytes += int64(len(data))
		records += countFrames(data)
		if n := lastValidFrame(data); n >= 0 {
			lastValidIndex = max(lastValidIndex, seg.firstIndex+uint64(n))
		}
	}
	return sizeBytes, records, lastValidIndex, nil
}

// lastValidFrame is the position (0 first) of the last frame at the front
// of b whose record passes its CRC, or -1.
func lastValidFrame(b []byte) int {
	last := -1
	for n := 0; len(b) > 0; n++ {
		f := parseFrame(b)
		if !f.ok {
			break
		}
		if crcValid(f.data) {
			last = n
		}
		b = b[f.totalBytes:]
	}
	return last
}

// crcValid says whether a record passes its CRC (any kind of record: the
// CRC always covers everything after it).
func crcValid(record []byte) bool {
	return len(record) >= recordHeaderBytes && crc32.Checksum(record[recordHeaderBytes:], castagnoli) == binary.BigEndian.Uint32(record)
}

// tornJunkBytesMax is the most junk a torn write leaves at the end of a
// file: one large sector (4 KiB) whose data never made it (zeros) or came
// out garbled, after the bytes that did.
const tornJunkBytesMax = 4096

// onlyJunkFollows says whether the damage at pos (whose frame is f) looks
// like the end of an unfinished write even though it does not reach the
// end of the file: no complete frame after it holds a record that passes
// its CRC, and what cannot be framed is no longer than tornJunkBytesMax. A
// record damaged in place, with intact records after it, is corruption.
func onlyJunkFollows(data []byte, pos int, f frame) bool {
	if !f.ok {
		return len(data)-pos <= tornJunkBytesMax
	}
	for at := pos + f.totalBytes; at < len(data); {
		next := parseFrame(data[at:])
		if !next.ok {
			return len(data)-at <= tornJunkBytesMax
		}
		if crcValid(next.data) {
			return false
		}
		at += next.totalBytes
	}
	return true
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// applyCut makes the cut on disk: the newest files go first, then the file
// holding the bad record is truncated just before it (or removed, when its
// name itself is wrong), then the file and the directory are fsynced.
func applyCut(fs fsys.FS, dir string, segments []segmentFile, res *scanResult) error {
	assertTrue(res.cut != nil, "there is a cut to apply")
	k := res.cutSegment
	for i := len(segments) - 1; i > k; i-- {
		if err := fs.Remove(path.Join(dir, segments[i].name)); err != nil {
			return err
		}
	}
	file := path.Join(dir, segments[k].name)
	if res.cutDropsFile {
		if err := fs.Remove(file); err != nil {
			return err
		}
	} else if err := truncateFile(fs, file, res.cut.OffsetBytes); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}

func truncateFile(fs fsys.FS, file string, sizeBytes int64) error {
	f, err := fs.OpenAppend(file)
	if err != nil {
		return err
	}
	if err := f.Truncate(sizeBytes); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// resetLog replaces every segment with one empty segment starting at
// firstIndex, so tidwall's next index is firstIndex. Used when no segment is
// left, or the log ends before the snapshot (everything in it is covered).
func resetLog(fs fsys.FS, dir string, segments []segmentFile, firstIndex uint64) error {
	for i := len(segments) - 1; i >= 0; i-- {
		if err := fs.Remove(path.Join(dir, segments[i].name)); err != nil {
			return err
		}
	}
	f, err := fs.Create(path.Join(dir, segmentName(firstIndex)), true)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}

// removeLeftovers deletes temporary files a crash left behind: they were
// never renamed into place, so nothing refers to them.
func removeLeftovers(fs fsys.FS, dir string, names []string) error {
	for _, name := range names {
		if err := fs.Remove(path.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// readFile reads a whole file.
func readFile(fs fsys.FS, file string) ([]byte, error) {
	f, err := fs.OpenRead(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sizeBytes, err := f.SizeBytes()
	if err != nil {
		return nil, err
	}
	data := make([]byte, sizeBytes)
	if err := readFull(f, data); err != nil {
		return nil, err
	}
	return data, nil
}

// readFull fills p from the start of f.
func readFull(f fsys.File, p []byte) error {
	for done := 0; done < len(p); {
		n, err := f.ReadAt(p[done:], int64(done))
		done += n
		if done == len(p) {
			return nil
		}
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrNoProgress
		}
	}
	return nil
}
