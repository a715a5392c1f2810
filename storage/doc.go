// Package storage keeps one queue partition's durable log: the entries the
// core hands out in Ready.Persist, a snapshot of the state they built, and
// the recovery that gives both back after a crash; and the Node's record
// log (recordlog.go). It does no I/O of its own: it runs over the small
// filesystem and segment-log interfaces of package fsys, so that
// production (io/logstore: the OS and tidwall/wal) and the simulator
// (storage/simfs and storage/simwal) run this very code. It starts no
// goroutine and reads no clock (TestStorageIsPure): the group commit's
// policy is the pure Planner (planner.go), whose goroutine shell is
// io/logstore's Committer. docs/storage.md describes the layer.
//
// # On disk
//
// One directory per partition:
//
//	00000000000000000001            tidwall/wal segment (name = its first index)
//	00000000000000004097            ... the last one is the tail, the only one written to
//	blob-00000000000000000001       publish payloads (name = the first entry index in it)
//	blob-00000000000000061234       ... the last one is appended to
//	snapshot-00000000000000003000   the newest snapshot (older ones are removed)
//
// A segment is tidwall's binary format: one frame per entry, uvarint length
// then the data. tidwall stores no checksum, so each frame's data is our
// record: u32 CRC-32C (Castagnoli, big-endian) of the rest, then the bytes of
// core.AppendEntry, which carry the entry's epoch and index (record.go).
// A publish whose payload is at least Options.BlobPayloadBytesMin long has a
// blob record instead: the CRC, a kind byte (0xB2), a reference (blob file
// id, offset, length, CRC-32C of the payload), the last index of the Append
// that wrote it, then the entry encoded with an empty payload (0xB1 records,
// written before the round mark, are still read). The payload itself is in a blob file (blob.go): raw
// payloads back to back, rotated at Options.BlobFileSizeBytes, and removed
// once a snapshot covers every entry that refers to it. tidwall copies what
// it stores several times (it regrows its in-memory tail by append), so
// payloads bypass it; records written before blob records existed read as
// before.
// The tidwall index of a record is exactly the core index of its entry: a
// fresh log starts at 1, and a snapshot at index S moves the first index to
// S+1 (tidwall TruncateFront).
// The first record of each Append may open with a synced mark: a kind byte
// (0xC5) and the index the log was synced up to when the round was written,
// then the record as without it (records without one read as before).
//
// # Durability
//
// Append writes without fsync (tidwall NoSync); Sync makes everything
// appended so far durable, including the directory entry of any segment or
// blob file started since the last Sync (tidwall never fsyncs the
// directory). An Append that follows an unsynced one first makes the
// previous round's payloads and blob file names durable (log.go). A round's payloads are written before its records and
// fdatasynced beside tidwall's fsync, and the next Append starts only once
// both are durable: only the last round can leave records whose payloads
// did not reach the disk.
// An fsync error is never retried: the Log fails for good, since after a
// failed fsync the kernel may already have dropped the dirty pages (the
// "fsyncgate" lesson); the broker crashes and recovers from what is on disk.
//
// io/logstore's Committer is the one writer goroutine per Log (group
// commit): callers Submit entries without blocking on I/O, and learn
// through onDurable when they are on disk; the Planner decides its rounds.
//
// # Recovery
//
// Open reads every segment itself rather than through tidwall (repair.go):
// it checks each record's framing, CRC, decoding, that its index is its
// position and that epochs never go back. The first bad record is the cut.
// A cut that looks like an unfinished write (a torn tail: the bad record,
// cut off or failing its checksum, is the last frame of the tail segment, or
// zeros fill the file from it on) is always trimmed: it can only hold writes
// that were never fsynced, since tidwall fsyncs a segment before it starts
// the next one and we fsync the tail before reporting anything durable.
// Only a prefix of a write is torn: a record passing its CRC with a later
// index, found at any byte after the bad one, makes it corruption, unless a
// zeroed sector lies between them (unsynced pages reach the disk in any
// order). A cut at or below the synced mark of a record that passes its CRC
// is always corruption: a later round was written after it was synced. A
// blob record whose payload cannot be read back (file missing, too short,
// CRC mismatch) is torn when its round reaches the end of the log (the
// unfinished last round, nothing of which was confirmed), and corruption
// under any earlier round. Blob files no recovered entry
// refers to are removed, and the last one is cut after its last referenced
// payload. Any other cut is corruption: Options.OnCorruption says
// whether Open trims it too (CorruptionTruncate) or leaves the files
// untouched and returns a *CorruptionError (CorruptionRefuse), so that the
// driver can quarantine the partition (SPEC §7) until an operator repairs it.
// Before any cut is made (or refused), the bytes it was decided on, from
// the bad record to the end of the log, and the payload a blob record's cut
// blames, are read again: if the second read differs from the first, the
// damage may be a read fault (bit rot on the read path) rather than the
// disk, and Open (OpenRecordLog too) fails with an error wrapping
// ErrUnstableRead, having changed nothing, for the driver to retry.
// Before Open returns, every segment and blob file it keeps, and the
// directory, are fsynced: what it read may have been only in the page
// cache of a process that crashed (recover.go).
//
// # Reading back
//
// ReadEntries (read.go) returns the entries from an index on, for a lagging
// stream subscriber: read from the segment files as recovery reads them
// (the unsynced tail included), each record checked the same way, each
// blob payload read back and checked against its reference, any failure an
// error wrapping ErrCorrupt; an index a snapshot dropped is a
// *CompactedError (ErrCompacted). It keeps a cursor (the open segment file
// and the byte of the next record), so sequential reads cost O(n); a
// snapshot's truncation drops it. It runs on the goroutine that owns the
// Log, between Append and Sync calls.
//
// # Concurrency
//
// A Log is used by one goroutine at a time (the Committer's writer, once one
// is started); only SizeBytes may be called from anywhere. A Committer is
// safe for concurrent use.
package storage
