package sim

import (
	"errors"
	"hash/crc32"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// memDisk is the broker's disk behind brokerStore: the Node's records and
// each partition's entries, with a page-cache model (written vs synced),
// snapshots and stored payloads. Invariants:
//   - a process crash keeps everything written; a power loss keeps the
//     synced prefix of each log;
//   - a snapshot at index I replaces the entries up to I; it is taken only
//     once I is synced, so it never covers what a power loss can drop;
//   - a stored payload is given out only for a synced publish, and read
//     back checked against its CRC.
type memDisk struct {
	nodeLog memLog[node.Record]
	parts   map[core.QueueID]*memLog[core.Entry]
	order   []core.QueueID // partitions in creation order
}

type memLog[T any] struct {
	snapshot      []byte
	snapshotIndex uint64
	items         []T // after the snapshot
	synced        uint64
	storedUpTo    uint64 // last index whose payload was reported stored
	// payloads are the stored payloads by entry index (blob files: they
	// outlive the snapshot that covers their entries).
	payloads map[uint64][]byte
}

func (l *memLog[T]) last() uint64 { return l.snapshotIndex + uint64(len(l.items)) }

// diskMarks is what one round covers: the last index of every log.
type diskMarks struct {
	node  uint64
	parts map[core.QueueID]uint64
}

func newMemDisk() *memDisk {
	return &memDisk{parts: map[core.QueueID]*memLog[core.Entry]{}}
}

func (d *memDisk) part(q core.QueueID) *memLog[core.Entry] {
	l := d.parts[q]
	if l == nil {
		l = &memLog[core.Entry]{}
		d.parts[q] = l
		d.order = append(d.order, q)
	}
	return l
}

func (d *memDisk) recoverNode() ([]byte, []node.Record, error) {
	l := &d.nodeLog
	return l.snapshot, append([]node.Record(nil), l.items...), nil
}

func (d *memDisk) recoverPartition(q core.QueueID) ([]byte, []core.Entry, error) {
	l := d.part(q)
	return l.snapshot, append([]core.Entry(nil), l.items...), nil
}

func (d *memDisk) appendNode(records []node.Record) {
	for _, r := range records {
		assert(r.Index == d.nodeLog.last()+1, "node records are contiguous")
		d.nodeLog.items = append(d.nodeLog.items, node.Record{Index: r.Index, Data: append([]byte(nil), r.Data...)})
	}
}

func (d *memDisk) appendPartition(q core.QueueID, entries []core.Entry) {
	l := d.part(q)
	for i := range entries {
		assert(entries[i].Index == l.last()+1, "partition entries are contiguous")
		l.items = append(l.items, entries[i])
	}
}

func (d *memDisk) marks() diskMarks {
	m := diskMarks{node: d.nodeLog.last(), parts: map[core.QueueID]uint64{}}
	for _, q := range d.order {
		m.parts[q] = d.parts[q].last()
	}
	return m
}

func (d *memDisk) dirty() bool {
	if d.nodeLog.last() > d.nodeLog.synced {
		return true
	}
	for _, q := range d.order {
		if l := d.parts[q]; l.last() > l.synced {
			return true
		}
	}
	return false
}

func (d *memDisk) sync(m diskMarks) {
	d.nodeLog.synced = max(d.nodeLog.synced, min(m.node, d.nodeLog.last()))
	for _, q := range d.order {
		l := d.parts[q]
		l.synced = max(l.synced, min(m.parts[q], l.last()))
	}
}

// storedSince lists the publishes in (storedUpTo, upTo] with a payload.
func (d *memDisk) storedSince(q core.QueueID, upTo uint64) []node.StoredPayload {
	l := d.part(q)
	var out []node.StoredPayload
	for index := max(l.storedUpTo, l.snapshotIndex) + 1; index <= upTo && index <= l.last(); index++ {
		e := &l.items[index-l.snapshotIndex-1]
		if e.Kind != core.EntryPublish || e.Body == nil || len(e.Body.Payload) == 0 {
			continue
		}
		out = append(out, node.StoredPayload{Offset: e.Offset, Ref: core.PayloadRef{File: 1, OffsetBytes: index,
			LengthBytes: uint32(len(e.Body.Payload)), Checksum: crc32.ChecksumIEEE(e.Body.Payload)}})
		if l.payloads == nil {
			l.payloads = map[uint64][]byte{}
		}
		l.payloads[index] = e.Body.Payload
	}
	l.storedUpTo = max(l.storedUpTo, upTo)
	return out
}

func (d *memDisk) readPayload(q core.QueueID, ref core.PayloadRef) ([]byte, error) {
	l := d.part(q)
	payload, ok := l.payloads[ref.OffsetBytes]
	if !ok {
		return nil, errors.New("sim: no stored payload at that ref")
	}
	if crc32.ChecksumIEEE(payload) != ref.Checksum || uint32(len(payload)) != ref.LengthBytes {
		return nil, errors.New("sim: stored payload does not match its ref")
	}
	return payload, nil
}

func (d *memDisk) durableUpTo(h *brokerHost, index uint64) bool {
	if h == nil {
		return d.nodeLog.synced >= index
	}
	return d.part(h.queue).synced >= index
}

func (d *memDisk) saveSnapshot(h *brokerHost, req node.SnapshotRequest) error {
	if h == nil {
		cutLog(&d.nodeLog, req)
		return nil
	}
	cutLog(d.part(h.queue), req)
	return nil
}

func cutLog[T any](l *memLog[T], req node.SnapshotRequest) {
	if req.Index <= l.snapshotIndex || req.Index > l.last() {
		return
	}
	drop := req.Index - l.snapshotIndex
	l.items = append([]T(nil), l.items[drop:]...)
	l.snapshot, l.snapshotIndex = req.Data, req.Index
}

// powerLoss drops everything not synced.
func (d *memDisk) powerLoss(rng *Rand) {
	truncate(&d.nodeLog)
	for _, q := range d.order {
		truncate(d.parts[q])
	}
}

// fsyncLost: a failed fsync may have dropped the dirty pages.
func (d *memDisk) fsyncLost(rng *Rand) {
	if rng.Chance(0.5) {
		d.powerLoss(rng)
	}
}

func truncate[T any](l *memLog[T]) {
	if l.last() > l.synced {
		l.items = l.items[:l.synced-l.snapshotIndex]
	}
	l.storedUpTo = min(l.storedUpTo, l.synced)
}
