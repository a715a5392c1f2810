package storage

import (
	"bytes"
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
//   - a cut at or below a synced mark (record.go) that a record passing its
//     CRC carries, before the cut or after it, is never torn: the log was
//     synced there before a later round was written;
//   - above every mark, a cut is torn only if nothing after the bad record,
//     at any byte, is a record that passes its CRC with a later index, or
//     if a zeroed sector lies between it and that record: unsynced pages
//     reach the disk in any order, and a sector that never got there reads
//     as zeros, while damage to bytes already written is not zeros;
//   - a cut changes files only after it was decided, removing the newest
//     files first, so a crash half way leaves a log whose first bad record is
//     the same one, and the next Open makes the same cut.

// ErrCorrupt is wrapped by every error that reports a corrupt log or
// snapshot (see CorruptionError).
var ErrCorrupt = errors.New("logstore: corrupt")

// ErrUnstableRead is wrapped by the error Open and OpenRecordLog return
// when, before making a cut, a second read of the bytes from the cut on
// (or of the payload a blob record's cut blames) does not give back what
// the first read did: a read fault (bit rot on the read path), not the
// disk, may have made the bad record. Nothing on disk was changed; the
// open is worth retrying.
var ErrUnstableRead = errors.New("logstore: unstable read")

// Cut describes where recovery found the first bad record.
type Cut struct {
	// Index is the index the bad record holds by its place in the log: every
	// record below it is intact, it and everything after it are dropped.
	Index  uint64
	Reason CutReason
	// Torn says the damage looks like an unfinished write: the bad record,
	// cut off or failing its checksum, is the last frame of the tail
	// segment, or zeros fill the file from it on, and no record with a
	// later index that passes its CRC lies anywhere after it but behind a
	// zeroed sector (unsynced pages written back out of order); never at or
	// below a synced mark (record.go).
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
	// syncedMark is the highest synced mark of the records that passed.
	syncedMark uint64
	// readBack holds the bytes the cut was decided on, from the cut to the
	// end of the log, so that they can be read again before it is made
	// (verifyCutReads); cutRef is the blob reference of a cut blamed on
	// its payload.
	readBack []readSpan
	cutRef   *blobRef
}

// readSpan is what one read of a file gave: data at offsetBytes of name.
type readSpan struct {
	name        string
	offsetBytes int64
	data        []byte
}

// scanSegments reads every segment in order and stops at the first bad
// record. Records at or below snapshotIndex are framed but not decoded: the
// snapshot replaces them and recovery truncates them, so corruption there
// must not cost the entries after them. A blob record's payload is read
// back from blobs and checked as part of its record: a payload that cannot
// be read is a bad record at that index.
// scanOptions are what Open adds to a scan: a cut asked for
// (Options.CutFromIndex, 0: none), and the index a clean-close mark
// claims synced (closedmark.go; 0: none), counted as a synced mark.
type scanOptions struct {
	cutFrom    uint64
	closedMark uint64
}

func scanSegments(fs fsys.FS, dir string, segments []segmentFile, snapshotIndex uint64, blobs *blobReader, opts scanOptions) (scanResult, error) {
	var res scanResult
	res.lastIndex = snapshotIndex
	res.syncedMark = opts.closedMark
	cutFrom := opts.cutFrom
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
			if reason == CutNone && cutFrom != 0 && next >= cutFrom && next > snapshotIndex {
				reason = CutRequested
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
				if isBlob && (reason == CutBlobMissing || reason == CutBlobShort || reason == CutBlobChecksum) {
					res.cutRef = &ref
				}
				return res, res.cutRecord(fs, dir, segments, k, data, pos, f, next, reason, ref.roundLastIndex, entryRecords)
			}
			if next > snapshotIndex {
				res.entries = append(res.entries, e)
				res.lastEpoch = e.Epoch
				if isBlob {
					res.noteUse(next, ref)
				}
				res.syncedMark = max(res.syncedMark, recordSyncedMark(f.data, next))
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
// format reads the records of this log.
func (res *scanResult) cutRecord(fs fsys.FS, dir string, segments []segmentFile, k int, data []byte, pos int, f frame, index uint64, reason CutReason, roundLast uint64, format recordFormat) error {
	assertTrue(reason != CutNone, "a cut has a reason")
	assertTrue(index == res.lastIndex+1, "the cut follows the last valid record")
	// A write cut short leaves a frame that runs off the end, fails its
	// checksum, or reads as zeros; a record that passes its checksum but
	// holds the wrong index or epoch was written whole, so it is corruption
	// wherever it is.
	isTail := k == len(segments)-1
	looksUnfinished := reason == CutTornFrame || reason == CutShortRecord || reason == CutChecksum
	later, laterRecords, laterValidIndex, laterSpans, err := laterSegments(fs, dir, segments[k+1:])
	if err != nil {
		return err
	}
	res.readBack = append([]readSpan{{name: segments[k].name, offsetBytes: int64(pos), data: data[pos:]}}, laterSpans...)
	dropped := countFrames(data[pos:]) + laterRecords
	torn := isTail && looksUnfinished && (f.reachesEOF || allZero(data[pos:]))
	if !torn && isTail && (looksUnfinished || reason == CutBadFrame) {
		torn = onlyJunkFollows(data, pos, f)
	}
	// Records after the damage are looked for at every byte: a length
	// prefix that now runs past the end of the file hides the frames
	// behind it.
	laterAt, laterMark := scanLaterRecords(data, pos, index, format)
	syncedMark := max(res.syncedMark, laterMark)
	switch {
	case index <= syncedMark:
		// A later round was written after this one was synced.
		torn = false
	case laterAt >= 0:
		// A record written after the damaged one reached the disk: only a
		// sector that never got there (zeros) makes that a write cut short.
		torn = format.syncedMarks && isTail && looksUnfinished && holeWithin(data, pos, laterAt)
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
		torn = roundLast >= index && lastInLog <= roundLast && index > syncedMark
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
	dropped, records, _, spans, err := laterSegments(fs, dir, segments[k:])
	if err != nil {
		return err
	}
	res.readBack = spans
	res.cut = &Cut{Index: index, Reason: reason, Segment: segments[k].name, DroppedBytes: dropped, DroppedRecords: records}
	res.cutSegment = k
	res.cutDropsFile = true
	return nil
}

// laterSegments sums the bytes and complete frames of segments a cut drops.
// It also returns the highest index (by place) of a record among them that
// passes its CRC, 0 when none does, and the bytes it read.
func laterSegments(fs fsys.FS, dir string, segments []segmentFile) (sizeBytes int64, records int, lastValidIndex uint64, spans []readSpan, err error) {
	for _, seg := range segments {
		data, err := readFile(fs, path.Join(dir, seg.name))
		if err != nil {
			return 0, 0, 0, nil, err
		}
		spans = append(spans, readSpan{name: seg.name, data: data})
		sizeBytes += int64(len(data))
		records += countFrames(data)
		if n := lastValidFrame(data); n >= 0 {
			lastValidIndex = max(lastValidIndex, seg.firstIndex+uint64(n))
		}
	}
	return sizeBytes, records, lastValidIndex, spans, nil
}

// verifyCutReads reads again, with fresh ReadAt calls, every byte the cut
// in res was decided on (from the cut to the end of the log), and the
// payload of a blob record the cut blames, before anything acts on it: a
// read that does not give back the same bytes (or the same verdict on the
// payload) means the damage may be in the read path, not on the disk, and
// cutting would durably drop records that may be intact. It then returns
// an error wrapping ErrUnstableRead, having changed nothing.
func verifyCutReads(fs fsys.FS, dir string, res *scanResult, blobs *blobReader) error {
	assertTrue(res.cut != nil, "there is a cut to verify")
	for _, span := range res.readBack {
		again, err := readFileFrom(fs, path.Join(dir, span.name), span.offsetBytes)
		if err != nil {
			return err
		}
		if !bytes.Equal(again, span.data) {
			return fmt.Errorf("logstore %s: %s at index %d: a second read of %s from byte %d differs from the first (%d and %d bytes): %w",
				dir, res.cut.Reason, res.cut.Index, span.name, span.offsetBytes, len(span.data), len(again), ErrUnstableRead)
		}
	}
	if res.cutRef != nil && blobs != nil {
		blobs.cached = 0 // a fresh read of the blob file
		reason, err := blobs.check(*res.cutRef, false)
		if err != nil {
			return err
		}
		if reason != res.cut.Reason {
			return fmt.Errorf("logstore %s: %s at index %d: a second read of its payload finds %s: %w",
				dir, res.cut.Reason, res.cut.Index, reason, ErrUnstableRead)
		}
	}
	return nil
}

// readFileFrom reads a file from offsetBytes to its end.
func readFileFrom(fs fsys.FS, file string, offsetBytes int64) ([]byte, error) {
	f, err := fs.OpenRead(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sizeBytes, err := f.SizeBytes()
	if err != nil {
		return nil, err
	}
	if sizeBytes < offsetBytes {
		return nil, nil
	}
	data := make([]byte, sizeBytes-offsetBytes)
	for done := 0; done < len(data); {
		n, err := f.ReadAt(data[done:], offsetBytes+int64(done))
		done += n
		if done == len(data) {
			break
		}
		if err == io.EOF {
			return data[:done], nil
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, io.ErrNoProgress
		}
	}
	return data, nil
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

// recordFormat reads, before its CRC is checked, what a record of one kind
// of log claims: its index (ok false when it is too short to hold one) and
// its synced mark (0 for none).
type recordFormat struct {
	indexOf      func(record []byte) (index uint64, ok bool)
	syncedMarkOf func(record []byte, index uint64) uint64
	// syncedMarks says the log writes synced marks: only then may a hole
	// before later records be torn, as a mark after it would have told
	// synced damage.
	syncedMarks bool
}

// entryRecords are a partition log's records; nodeRecords (recordlog.go)
// the record log's.
var entryRecords = recordFormat{indexOf: entryRecordIndex, syncedMarkOf: recordSyncedMark, syncedMarks: true}

// Where a partition log's record holds its entry's index: the entry starts
// after the CRC (and a synced mark, and a blob record's reference); in it,
// the magic, kind and cause bytes and the epoch come before the index
// (core.AppendEntry).
const entryIndexOffsetBytes = 1 + 1 + 1 + 8

func entryRecordIndex(record []byte) (uint64, bool) {
	start := recordHeaderBytes
	if len(record) > start && record[start] == syncedMarkKind {
		start += syncedMarkBytes
	}
	if len(record) <= start {
		return 0, false
	}
	switch record[start] {
	case blobRecordKind:
		start += blobRefBytes
	case blobRecordKindRound:
		start += blobRefBytesRound
	}
	at := start + entryIndexOffsetBytes
	if len(record) < at+8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(record[at:]), true
}

// scanLaterRecords looks at every byte after the frame start at pos in data
// for a frame holding a record that passes its CRC and claims an index
// after index. It returns where the first such frame starts (-1 for none)
// and the highest synced mark such records carry, and stops once that
// settles the cut (cutRecord): at the first one when no hole lies before
// it, or at a mark reaching index. A claimed index beyond one record per
// remaining byte cannot be this file's, so only plausible ones pay for a
// CRC; after a record that passes, the scan goes on behind it, so records
// inside its payload are never looked at.
func scanLaterRecords(data []byte, pos int, index uint64, format recordFormat) (firstAt int, syncedMark uint64) {
	assertTrue(pos >= 0 && pos <= len(data), "the cut is inside the file")
	firstAt = -1
	indexMax := index + uint64(len(data)-pos)
	for at := pos + 1; at < len(data); {
		f := parseFrame(data[at:])
		claimed, ok := uint64(0), false
		if f.ok {
			claimed, ok = format.indexOf(f.data)
		}
		if !ok || claimed <= index || claimed > indexMax || !crcValid(f.data) {
			at++
			continue
		}
		if firstAt < 0 {
			firstAt = at
			if !format.syncedMarks || !holeWithin(data, pos, at) {
				break
			}
		}
		if syncedMark = max(syncedMark, format.syncedMarkOf(f.data, claimed)); syncedMark >= index {
			break
		}
		at += f.totalBytes
	}
	assertTrue(firstAt < 0 || firstAt > pos, "a later record starts after the cut")
	return firstAt, syncedMark
}

// holeSectorBytes is the smallest unit a disk writes: a page of the cache
// that never reached it leaves zeros to a sector boundary, from one or from
// where the durable bytes end.
const holeSectorBytes = 512

// holeWithin says whether data[from:to], from the first bad record's frame,
// holds a sector that never reached the disk: an aligned sector of zeros
// wholly inside, or zeros from the frame itself to the next boundary (the
// durable bytes end at a record, and the bad record is the first after
// them). A record's frame never starts with a zero byte (its length is not
// 0), and holds a whole sector of zeros only in an inline payload (below
// Options.BlobPayloadBytesMin, 256 bytes by default): that, above every
// synced mark, is the one damage this takes for a hole.
func holeWithin(data []byte, from, to int) bool {
	assertTrue(from >= 0 && from <= to && to <= len(data), "the range is inside the file")
	boundary := (from + holeSectorBytes - 1) / holeSectorBytes * holeSectorBytes
	if boundary > from && boundary <= to && allZero(data[from:boundary]) {
		return true
	}
	for s := boundary; s+holeSectorBytes <= to; s += holeSectorBytes {
		if allZero(data[s : s+holeSectorBytes]) {
			return true
		}
	}
	return false
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
