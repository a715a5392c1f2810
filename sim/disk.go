package sim

import (
	"encoding/binary"
	"hash/crc32"
)

// The simulated disk: one append-only log file per node, written through a
// page cache. Invariants:
//   - a write sits in the volatile page cache until a sync that covers it
//     completes; only synced bytes are promised to survive a crash;
//   - a crash keeps the synced bytes and, at most, a prefix of the unsynced
//     ones, possibly cutting (tearing) the last record and garbling its tail;
//   - every record carries a CRC32-C over its length, stream and payload, and
//     recovery stops at the first record that does not check out and cuts the
//     file there, so later appends follow the good prefix.

// Storage is what a node's driver needs from its write-ahead log. The
// production runner implements the same shape on tidwall/wal.
type Storage interface {
	// Append writes one record for stream (a partition) to the page cache.
	Append(stream uint16, payload []byte)
	// SyncStart begins an fsync and returns the position it will make durable.
	SyncStart() int64
	// SyncDone reports that the fsync begun at position completed.
	SyncDone(position int64)
	// Recover reads back every intact record, in order, and cuts the log
	// after the last one.
	Recover() []Record
}

// Record is one log record as read back.
type Record struct {
	Stream  uint16
	Payload []byte
}

// recordHeaderBytes: length (4), CRC32-C (4), stream (2).
const recordHeaderBytes = 10

// recordPayloadBytesMax bounds one record; a longer length field is corrupt.
const recordPayloadBytesMax = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Disk is the simulated file behind a node's Storage.
type Disk struct {
	data        []byte // every byte written: synced prefix + page cache
	syncedBytes int64  // data[:syncedBytes] survives any crash
	stats       DiskStats
}

// DiskStats counts what the disk went through.
type DiskStats struct {
	Records      uint64
	Syncs        uint64
	TornWrites   uint64
	LostBytes    uint64
	TruncatedOff uint64 // bytes cut by recovery after the last good record
}

var _ Storage = (*Disk)(nil)

// Append encodes one record into the page cache.
func (d *Disk) Append(stream uint16, payload []byte) {
	assert(len(payload) <= recordPayloadBytesMax, "a record fits the length field bound")
	start := len(d.data)
	d.data = binary.BigEndian.AppendUint32(d.data, uint32(len(payload)))
	d.data = append(d.data, 0, 0, 0, 0) // CRC, filled below
	d.data = binary.BigEndian.AppendUint16(d.data, stream)
	d.data = append(d.data, payload...)
	crc := recordCRC(d.data[start:start+4], d.data[start+8:])
	binary.BigEndian.PutUint32(d.data[start+4:], crc)
	d.stats.Records++
}

func recordCRC(lengthField, rest []byte) uint32 {
	crc := crc32.Update(0, castagnoli, lengthField)
	return crc32.Update(crc, castagnoli, rest)
}

// SyncStart captures the write position the fsync will cover.
func (d *Disk) SyncStart() int64 { return int64(len(d.data)) }

// SyncDone makes everything up to position durable.
func (d *Disk) SyncDone(position int64) {
	assert(position <= int64(len(d.data)), "a sync covers only what was written")
	if position > d.syncedBytes {
		d.syncedBytes = position
	}
	d.stats.Syncs++
}

// SyncedBytes is the durable prefix length.
func (d *Disk) SyncedBytes() int64 { return d.syncedBytes }

// Crash drops the page cache. With probability tornWriteRatio a random prefix
// of the unsynced bytes reaches the platter instead, and the cut record's
// surviving tail may be garbage.
func (d *Disk) Crash(rng *Rand, tornWriteRatio float64) (tornBytes int64) {
	unsynced := int64(len(d.data)) - d.syncedBytes
	keep := d.syncedBytes
	if unsynced > 0 && rng.Chance(tornWriteRatio) {
		kept := rng.RangeInt64(1, unsynced)
		keep += kept
		tornBytes = kept
		d.stats.TornWrites++
		if rng.Chance(0.5) {
			// Garble the last few surviving bytes: a sector half written.
			garble := min(kept, rng.RangeInt64(1, 16))
			for i := keep - garble; i < keep; i++ {
				d.data[i] = byte(rng.Uint64())
			}
		}
	}
	d.stats.LostBytes += uint64(int64(len(d.data)) - keep)
	d.data = d.data[:keep]
	return tornBytes
}

// Recover parses records from the start and cuts the file at the first one
// that is short or fails its checksum. What it returns is on the platter, so
// it is durable from now on.
func (d *Disk) Recover() []Record {
	var records []Record
	pos := 0
	for {
		rec, next, ok := parseRecord(d.data, pos)
		if !ok {
			break
		}
		records = append(records, rec)
		pos = next
	}
	d.stats.TruncatedOff += uint64(len(d.data) - pos)
	d.data = d.data[:pos]
	d.syncedBytes = int64(pos)
	return records
}

// parseRecord decodes the record at pos; ok is false for a torn or corrupt one.
func parseRecord(data []byte, pos int) (Record, int, bool) {
	if len(data)-pos < recordHeaderBytes {
		return Record{}, pos, false
	}
	length := int(binary.BigEndian.Uint32(data[pos:]))
	if length > recordPayloadBytesMax || len(data)-pos-recordHeaderBytes < length {
		return Record{}, pos, false
	}
	end := pos + recordHeaderBytes + length
	want := binary.BigEndian.Uint32(data[pos+4:])
	if recordCRC(data[pos:pos+4], data[pos+8:end]) != want {
		return Record{}, pos, false
	}
	stream := binary.BigEndian.Uint16(data[pos+8:])
	payload := data[pos+recordHeaderBytes : end]
	return Record{Stream: stream, Payload: payload}, end, true
}
