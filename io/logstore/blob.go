package logstore

import (
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/fibril-go/fibril/core"
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
//   - Append writes and fdatasyncs the round's payloads (and fsyncs the
//     directory when it created a blob file) before it hands any record of
//     the round to tidwall, so every tidwall record that reaches the disk,
//     synced or not, refers to durable payload bytes. A crash can leave
//     payload bytes no record refers to, never the reverse;
//   - blobFiles lists the live files by id; the last is the active one, open
//     for append in blobActive (blobActive != nil iff len(blobFiles) > 0);
//     maxRefIndex is the highest entry index referring to a file, and grows
//     with the id, so the files a snapshot covers are a prefix;
//   - a file goes only when a snapshot covers every entry referring to it
//     (SaveSnapshot), and Open keeps exactly the files the recovered entries
//     refer to and cuts the last one after its last referenced payload.

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
			fileID:      file.id,
			offsetBytes: uint64(file.sizeBytes),
			lengthBytes: uint32(len(payload)),
			crc:         crc32.Checksum(payload, castagnoli),
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

// writeBlobs writes the chunks placeBlobs laid out, one write per file,
// and makes them durable: fdatasync each file, fsync the directory after
// creating one. It runs before any record of the round reaches tidwall.
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
		if err := datasync(l.blobActive); err != nil {
			return err
		}
		l.stats.BlobWrites++
		l.stats.BlobBytes += uint64(chunk.end - chunk.start)
	}
	if cap(l.blobBuf) > max(l.opts.BatchBytesMax, recordBufferRetainBytesMax) {
		// One oversized Append grew it: do not keep that much for every round.
		l.blobBuf = nil
	}
	return nil
}

// createBlobFile closes the active file (its bytes are durable: each write
// was fdatasynced) and starts fileID, durable in the directory before any
// record can refer to it.
func (l *Log) createBlobFile(fileID uint64) error {
	if l.blobActive != nil {
		if err := l.blobActive.Close(); err != nil {
			return err
		}
		l.blobActive = nil
	}
	f, err := os.OpenFile(filepath.Join(l.dir, blobName(fileID)), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, filePerm)
	if err != nil {
		return err
	}
	l.blobActive = f
	if err := l.dirFile.Sync(); err != nil {
		return err
	}
	l.stats.BlobFilesCreated++
	return nil
}

// removeCoveredBlobs deletes the blob files every reference to which a
// snapshot at index covers, the active one included (the next payload
// starts a new file). It returns how many it removed; the caller fsyncs
// the directory.
func (l *Log) removeCoveredBlobs(index uint64) (int, error) {
	covered := 0
	for covered < len(l.blobFiles) && l.blobFiles[covered].maxRefIndex <= index {
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
	for _, file := range l.blobFiles[:covered] {
		if err := os.Remove(filepath.Join(l.dir, blobName(file.id))); err != nil {
			return 0, err
		}
		l.stats.BlobFilesRemoved++
	}
	rest := copy(l.blobFiles, l.blobFiles[covered:])
	l.blobFiles = l.blobFiles[:rest]
	for i := 1; i < len(l.blobFiles); i++ {
		assertTrue(l.blobFiles[i-1].maxRefIndex < l.blobFiles[i].maxRefIndex, "a later blob file holds later references")
	}
	assertTrue((l.blobActive != nil) == (len(l.blobFiles) > 0), "the last live blob file is the active one")
	return covered, nil
}

// closeBlobs closes the active blob file, if any.
func (l *Log) closeBlobs() error {
	if l.blobActive == nil {
		return nil
	}
	err := l.blobActive.Close()
	l.blobActive = nil
	return err
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
	dir    string
	onDisk map[uint64]int64 // id -> size
	cached uint64           // the id whose bytes data holds; 0 for none
	data   []byte
}

func newBlobReader(dir string, blobs []blobOnDisk) *blobReader {
	r := &blobReader{dir: dir, onDisk: make(map[uint64]int64, len(blobs))}
	for _, b := range blobs {
		r.onDisk[b.id] = b.sizeBytes
	}
	return r
}

// payload returns a copy of the payload ref names (a copy, so recovered
// entries do not pin whole files), or why it cannot.
func (r *blobReader) payload(ref blobRef) ([]byte, CutReason, error) {
	if _, ok := r.onDisk[ref.fileID]; !ok {
		return nil, CutBlobMissing, nil
	}
	if r.cached != ref.fileID {
		r.cached, r.data = 0, nil // let the previous file go before reading the next
		data, err := os.ReadFile(filepath.Join(r.dir, blobName(ref.fileID)))
		if err != nil {
			return nil, CutNone, err
		}
		r.cached, r.data = ref.fileID, data
	}
	if ref.offsetBytes > uint64(len(r.data)) || ref.endBytes() > uint64(len(r.data)) {
		return nil, CutBlobShort, nil
	}
	payload := r.data[ref.offsetBytes:ref.endBytes()]
	if crc32.Checksum(payload, castagnoli) != ref.crc {
		return nil, CutBlobChecksum, nil
	}
	return append([]byte(nil), payload...), CutNone, nil
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

// openBlobs makes the blob files what the recovered entries need (uses):
// files nobody refers to go (covered by the snapshot, or written for
// records a crash or a cut lost), the last one is cut after its last
// referenced payload (a torn or orphaned tail), and it becomes the active
// file. The caller fsyncs the directory. It returns how many files it
// removed.
func (l *Log) openBlobs(onDisk []blobOnDisk, uses []blobUse) (int, error) {
	used := make(map[uint64]bool, len(uses))
	for _, use := range uses {
		used[use.id] = true
	}
	removed := 0
	for i := len(onDisk) - 1; i >= 0; i-- { // newest first, as a cut removes
		if used[onDisk[i].id] {
			continue
		}
		if err := os.Remove(filepath.Join(l.dir, blobName(onDisk[i].id))); err != nil {
			return removed, err
		}
		removed++
	}
	if len(uses) == 0 {
		return removed, nil
	}
	last := uses[len(uses)-1]
	path := filepath.Join(l.dir, blobName(last.id))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return removed, err
	}
	info, err := f.Stat()
	if err == nil && uint64(info.Size()) > last.endBytes {
		// Payloads of records that never reached the disk, or were cut.
		if err = f.Truncate(int64(last.endBytes)); err == nil {
			err = f.Sync()
		}
	}
	if err != nil {
		f.Close()
		return removed, err
	}
	assertTrue(uint64(info.Size()) >= last.endBytes, "the scan read every referenced payload")
	l.blobActive = f
	l.blobFiles = l.blobFiles[:0]
	for _, use := range uses {
		l.blobFiles = append(l.blobFiles, blobFile{id: use.id, sizeBytes: int64(use.endBytes), maxRefIndex: use.maxRefIndex})
	}
	// Earlier files keep whatever they hold past their last reference
	// (nothing, unless a rotation's file was cut short by hand); only the
	// active file is appended to.
	return removed, nil
}
