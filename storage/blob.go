package storage

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/storage/fsys"
)

// Blob files: the payloads of publishes, kept out of tidwall. tidwall keeps
// its tail segment in memory and regrows it by append, so each byte it
// stores is copied several times into fresh memory (docs/PERF-LOG.md); a
// payload written here is copied once, into a buffer reused every round.
// Invariants:
//   - a blob file is named blob-<index of the first entry whose payload it
//     holds> and holds payloads back to back, nothing else: each blob
//     record's reference carries the offset, length and CRC-32C. Ids (and
//     offsets within a file) grow with the entry index;
//   - Append writes the round's payloads, then its records; Sync makes both
//     durable, the payloads' fdatasync running beside tidwall's fsync (one
//     disk round trip of waiting instead of two), and the next Append starts
//     only after both. So only the last round can leave a durable record
//     whose payload is not: every blob record carries the last index of its
//     round, and recovery treats a missing payload as a torn tail exactly
//     when nothing after that round is in the log (repair.go). A crash can
//     also leave payload bytes no record refers to;
//   - blobFiles lists the live files by id; the last is the active one, open
//     for append in blobActive (blobActive != nil iff len(blobFiles) > 0);
//     maxRefIndex is the highest entry index referring to a file, and grows
//     with the id, so the files a snapshot covers are a prefix;
//   - a file goes only when a snapshot covers every entry referring to it
//     and no stored body in the snapshot refers to it (SaveSnapshot, files
//     below keepBlobsFrom), and Open keeps exactly the files the recovered
//     entries or the snapshot's stored bodies refer to, and cuts the last
//     one after its last payload an entry refers to.

const blobPrefix = "blob-"

func blobName(fileID uint64) string {
	return fmt.Sprintf("%s%0*d", blobPrefix, segmentNameDigits, fileID)
}

func parseBlobName(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, blobPrefix)
	if !ok {
		return 0, false
	}
	return parseIndexName(digits)
}

// blobFile is one live blob file.
type blobFile struct {
	id          uint64
	sizeBytes   int64  // including payloads placed by the Append in progress
	maxRefIndex uint64 // the highest entry index referring to it
}

// blobChunk is a run of the round's blob buffer bound for one file.
type blobChunk struct {
	fileID     uint64
	create     bool // the file does not exist yet
	start, end int  // in blobBuf
}

// isBlobPayload says whether e's payload goes to a blob file.
func (l *Log) isBlobPayload(e *core.Entry) bool {
	return e.Kind == core.EntryPublish && e.Body != nil && len(e.Body.Payload) >= l.opts.BlobPayloadBytesMin
}

// placeBlobs lays out the payloads of entries in blobBuf, rotating blob
// files at BlobFileSizeBytes, and fills blobRefs (one per entry; a zero
// lengthBytes means inline). Nothing is written yet.
func (l *Log) placeBlobs(entries []core.Entry) {
	l.blobRefs = l.blobRefs[:0]
	l.blobChunks = l.blobChunks[:0]
	needBytes := 0
	for i := range entries {
		if l.isBlobPayload(&entries[i]) {
			needBytes += len(entries[i].Body.Payload)
		}
	}
	roundLast := uint64(0)
	if len(entries) > 0 {
		roundLast = entries[len(entries)-1].Index
	}
	if cap(l.blobBuf) < needBytes {
		// Exactly what the round needs: no append-growth copies.
		l.blobBuf = make([]byte, 0, needBytes)
	}
	l.blobBuf = l.blobBuf[:0]
	for i := range entries {
		e := &entries[i]
		if !l.isBlobPayload(e) {
			l.blobRefs = append(l.blobRefs, blobRef{})
			continue
		}
		payload := e.Body.Payload
		assertTrue(len(payload) <= math.MaxUint32, "a payload's length fits its reference")
		n := int64(len(payload))
		if k := len(l.blobFiles); k == 0 || (l.blobFiles[k-1].sizeBytes > 0 && l.blobFiles[k-1].sizeBytes+n > l.opts.BlobFileSizeBytes) {
			l.blobFiles = append(l.blobFiles, blobFile{id: e.Index})
			l.blobChunks = append(l.blobChunks, blobChunk{fileID: e.Index, create: true, start: len(l.blobBuf), end: len(l.blobBuf)})
		}
		file := &l.blobFiles[len(l.blobFiles)-1]
		if len(l.blobChunks) == 0 || l.blobChunks[len(l.blobChunks)-1].fileID != file.id {
			l.blobChunks = append(l.blobChunks, blobChunk{fileID: file.id, start: len(l.blobBuf), end: len(l.blobBuf)})
		}
		ref := blobRef{
			fileID:         file.id,
			offsetBytes:    uint64(file.sizeBytes),
			lengthBytes:    uint32(len(payload)),
			crc:            crc32.Checksum(payload, castagnoli),
			roundLastIndex: roundLast,
		}
		assertTrue(ref.fileID <= e.Index && e.Index > file.maxRefIndex, "blob ids and references grow with the index")
		l.blobBuf = append(l.blobBuf, payload...)
		l.blobChunks[len(l.blobChunks)-1].end = len(l.blobBuf)
		file.sizeBytes += n
		file.maxRefIndex = e.Index
		l.blobRefs = append(l.blobRefs, ref)
	}
	assertTrue(len(l.blobRefs) == len(entries), "one reference slot per entry")
}

// writeBlobs writes the chunks placeBlobs laid out, one write per file. It
// runs before any record of the round reaches tidwall; syncBlobs (from
// Sync) makes them durable.
func (l *Log) writeBlobs() error {
	for _, chunk := range l.blobChunks {
		if chunk.create {
			if err := l.createBlobFile(chunk.fileID); err != nil {
				return err
			}
		}
		assertTrue(l.blobActive != nil && l.blobFiles[len(l.blobFiles)-1].id >= chunk.fileID, "chunks go to the active file")
		if _, err := l.blobActive.Write(l.blobBuf[chunk.start:chunk.end]); err != nil {
			return err
		}
		l.blobSyncPending = true
		l.stats.BlobWrites++
		l.stats.BlobBytes += uint64(chunk.end - chunk.start)
	}
	if cap(l.blobBuf) > max(l.opts.BatchBytesMax, recordBufferRetainBytesMax) {
		// One oversized Append grew it: do not keep that much for every round.
		l.blobBuf = nil
	}
	return nil
}

// createBlobFile closes the active file, durable first (a round that fills
// it goes on in the next), and starts fileID; its directory entry becomes
// durable with the round's next Sync.
func (l *Log) createBlobFile(fileID uint64) error {
	if err := l.closeBlobs(); err != nil {
		return err
	}
	f, err := l.fs.Create(path.Join(l.dir, blobName(fileID)), true)
	if err != nil {
		return err
	}
	l.blobActive = f
	l.dirSyncPending, l.blobNamePending = true, true
	l.stats.BlobFilesCreated++
	return nil
}

// syncBlobs makes the payloads written since the last call durable.
func (l *Log) syncBlobs() error {
	if !l.blobSyncPending {
		return nil
	}
	assertTrue(l.blobActive != nil, "pending payload bytes are in the active file")
	if mutant.On(mutant.NoBlobDatasync) {
		// Broken on purpose: the payloads are taken for durable unsynced.
		l.blobSyncPending = false
		return nil
	}
	if err := l.blobActive.Datasync(); err != nil {
		return err
	}
	l.blobSyncPending = false
	l.stats.BlobSyncs++
	return nil
}

// removeCoveredBlobs drops the blob files every reference to which a
// snapshot at index covers and that hold no stored body (their id is below
// keepBlobsFrom, 0 meaning none is stored), the active one included (the
// next payload starts a new file), and unlinks them in the background:
// freeing their blocks (a discard on this VM's ext4) costs tens of
// milliseconds that must not stall the rounds behind the snapshot. No
// directory fsync either: a removed file that reappears after a crash is
// one no recovered entry or snapshot refers to, and Open removes it again.
// It returns how many it dropped.
func (l *Log) removeCoveredBlobs(index, keepBlobsFrom uint64) (int, error) {
	covered := 0
	for covered < len(l.blobFiles) && l.blobFiles[covered].maxRefIndex <= index &&
		(keepBlobsFrom == 0 || l.blobFiles[covered].id < keepBlobsFrom) {
		covered++
	}
	if covered == 0 {
		return 0, nil
	}
	if covered == len(l.blobFiles) {
		if err := l.closeBlobs(); err != nil {
			return 0, err
		}
	}
	paths := make([]string, 0, covered)
	for _, file := range l.blobFiles[:covered] {
		paths = append(paths, path.Join(l.dir, blobName(file.id)))
		l.stats.BlobFilesRemoved++
	}
	fs := l.fs
	l.runner.Later(func() error {
		var first error
		for _, p := range paths {
			if err := fs.Remove(p); err != nil && !errors.Is(err, fsys.ErrNotExist) && first == nil {
				first = err
			}
		}
		return first
	})
	rest := copy(l.blobFiles, l.blobFiles[covered:])
	l.blobFiles = l.blobFiles[:rest]
	for i := 1; i < len(l.blobFiles); i++ {
		assertTrue(l.blobFiles[i-1].id < l.blobFiles[i].id && l.blobFiles[i-1].maxRefIndex <= l.blobFiles[i].maxRefIndex, "a later blob file holds later references")
	}
	assertTrue((l.blobActive != nil) == (len(l.blobFiles) > 0), "the last live blob file is the active one")
	return covered, nil
}

// closeBlobs closes the active blob file, if any, its payloads durable.
func (l *Log) closeBlobs() error {
	if l.blobActive == nil {
		return nil
	}
	syncErr := l.syncBlobs()
	err := l.blobActive.Close()
	l.blobActive = nil
	l.blobSyncPending = false
	return errors.Join(syncErr, err)
}

// blobOnDisk is one blob file found by listDir.
type blobOnDisk struct {
	id        uint64
	sizeBytes int64
}

// blobUse is what the recovered entries need of one blob file.
type blobUse struct {
	id          uint64
	maxRefIndex uint64
	endBytes    uint64 // the end of the last payload referenced in it
}

// blobReader reads payloads back during the scan. References come in index
// order and so file by file: it holds one file's bytes at a time.
type blobReader struct {
	fs     fsys.FS
	dir    string
	onDisk map[uint64]int64 // id -> size
	cached uint64           // the id whose bytes data holds; 0 for none
	data   []byte
}

func newBlobReader(fs fsys.FS, dir string, blobs []blobOnDisk) *blobReader {
	r := &blobReader{fs: fs, dir: dir, onDisk: make(map[uint64]int64, len(blobs))}
	for _, b := range blobs {
		r.onDisk[b.id] = b.sizeBytes
	}
	return r
}

// check says whether the payload ref names is there and intact, or why not.
// Recovered entries keep only the reference (their bodies come back stored),
// so recovery holds one file's bytes at a time, not every payload.
// skipCRC is only ever true under a mutant (scanSegments).
func (r *blobReader) check(ref blobRef, skipCRC bool) (CutReason, error) {
	if _, ok := r.onDisk[ref.fileID]; !ok {
		return CutBlobMissing, nil
	}
	if r.cached != ref.fileID {
		if err := r.load(ref.fileID); err != nil {
			return CutNone, err
		}
	}
	if ref.offsetBytes > uint64(len(r.data)) || ref.endBytes() > uint64(len(r.data)) {
		return CutBlobShort, nil
	}
	if !skipCRC && crc32.Checksum(r.data[ref.offsetBytes:ref.endBytes()], castagnoli) != ref.crc {
		return CutBlobChecksum, nil
	}
	return CutNone, nil
}

// load reads blob file id into data, reusing the buffer of the previous
// file: a fresh 64 MiB buffer per file costs ~16,000 page faults (about
// 0.2 s each file on our VM), more than reading it.
func (r *blobReader) load(id uint64) error {
	r.cached = 0
	f, err := r.fs.OpenRead(path.Join(r.dir, blobName(id)))
	if err != nil {
		return err
	}
	defer f.Close()
	sizeBytes, err := f.SizeBytes()
	if err != nil {
		return err
	}
	size := int(sizeBytes)
	if cap(r.data) < size {
		r.data = nil // let the smaller buffer go before the larger one
		r.data = make([]byte, size)
	}
	r.data = r.data[:size]
	if err := readFull(f, r.data); err != nil {
		return err
	}
	r.cached = id
	return nil
}

// refFollows says whether ref comes after every reference noted so far, as
// Append writes them. A record that passes its CRC but breaks this was not
// written by us in this place: undecodable, not an assertion.
func (res *scanResult) refFollows(ref blobRef) bool {
	n := len(res.blobUses)
	if n == 0 {
		return true
	}
	last := res.blobUses[n-1]
	return ref.fileID > last.id || (ref.fileID == last.id && ref.offsetBytes >= last.endBytes)
}

// noteUse records that the entry at index refers to ref.
func (res *scanResult) noteUse(index uint64, ref blobRef) {
	if n := len(res.blobUses); n > 0 && res.blobUses[n-1].id == ref.fileID {
		use := &res.blobUses[n-1]
		assertTrue(ref.offsetBytes >= use.endBytes, "payloads in a blob file follow each other")
		use.maxRefIndex, use.endBytes = index, ref.endBytes()
		return
	}
	if n := len(res.blobUses); n > 0 {
		assertTrue(ref.fileID > res.blobUses[n-1].id, "blob ids grow with the index")
	}
	res.blobUses = append(res.blobUses, blobUse{id: ref.fileID, maxRefIndex: index, endBytes: ref.endBytes()})
}

// openBlobs makes the blob files what recovery needs: those the recovered
// entries refer to (uses) and those the snapshot's stored bodies may refer
// to (ids from keepBlobsFrom up to snapshotIndex; keepBlobsFrom 0 keeps
// none). Other files go (covered by the snapshot, or written for records a
// crash or a cut lost). The last file an entry refers to is cut after its
// last referenced payload (a torn or orphaned tail). The last kept file
// becomes the active one. The caller fsyncs the directory. It returns how
// many files it removed.
func (l *Log) openBlobs(onDisk []blobOnDisk, uses []blobUse, snapshotIndex, keepBlobsFrom uint64) (int, error) {
	used := make(map[uint64]blobUse, len(uses))
	for _, use := range uses {
		used[use.id] = use
	}
	keptBySnapshot := func(id uint64) bool {
		return keepBlobsFrom != 0 && id >= keepBlobsFrom && id <= snapshotIndex
	}
	removed := 0
	var kept []blobOnDisk
	for i := len(onDisk) - 1; i >= 0; i-- { // newest first, as a cut removes
		id := onDisk[i].id
		if _, ok := used[id]; ok || keptBySnapshot(id) {
			kept = append(kept, onDisk[i])
			continue
		}
		if err := l.fs.Remove(path.Join(l.dir, blobName(id))); err != nil {
			return removed, err
		}
		removed++
	}
	slices.Reverse(kept)
	l.blobFiles = l.blobFiles[:0]
	if len(kept) == 0 {
		return removed, nil
	}
	for _, file := range kept {
		use, ok := used[file.id]
		if !ok {
			// Only the snapshot's stored bodies refer to it: covered by the
			// snapshot, like every record that wrote into it. (Such files
			// come before the entries' files; a directory that says
			// otherwise still keeps references growing with the id.)
			maxRef := snapshotIndex
			if n := len(l.blobFiles); n > 0 {
				maxRef = max(maxRef, l.blobFiles[n-1].maxRefIndex)
			}
			l.blobFiles = append(l.blobFiles, blobFile{id: file.id, sizeBytes: file.sizeBytes, maxRefIndex: maxRef})
			continue
		}
		l.blobFiles = append(l.blobFiles, blobFile{id: file.id, sizeBytes: int64(use.endBytes), maxRefIndex: use.maxRefIndex})
	}
	last := &l.blobFiles[len(l.blobFiles)-1]
	f, err := l.fs.OpenAppend(path.Join(l.dir, blobName(last.id)))
	if err != nil {
		return removed, err
	}
	if use, ok := used[last.id]; ok {
		sizeBytes, err := f.SizeBytes()
		if err == nil && uint64(sizeBytes) > use.endBytes {
			// Payloads of records that never reached the disk, or were cut.
			err = f.Truncate(int64(use.endBytes))
		}
		if err != nil {
			f.Close()
			return removed, err
		}
		assertTrue(uint64(sizeBytes) >= use.endBytes, "the scan read every referenced payload")
	}
	// A last file only the snapshot needs keeps whatever follows its stored
	// payloads (payloads of records a crash lost): appends go after it, and
	// references say where each payload is. Earlier files keep whatever
	// they hold past their last reference; only the active file grows.
	l.blobActive = f
	return removed, nil
}
