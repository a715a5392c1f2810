package core

import (
	"encoding/binary"
	"fmt"

	"github.com/fibril-go/fibril/mutant"
)

// Snapshots and recovery. Invariants:
//   - a snapshot holds durable state only (what entries built), never
//     subscriptions or pending replies, and encodes it deterministically
//     (messages in offset order), so equal states give equal bytes;
//   - Recover(snapshot, suffix) runs the very apply the live partition ran,
//     so the recovered state equals the live state at the same index.

// snapshotMagic opens a snapshot. FSN2 adds, after each message's body, a
// stored flag and, when set, the body's PayloadRef; FSN1 (no flag) is still
// read.
var (
	snapshotMagic   = [4]byte{'F', 'S', 'N', '2'}
	snapshotMagicV1 = [4]byte{'F', 'S', 'N', '1'}
)

// Per-message flag after the body in FSN2.
const (
	snapshotBodyInline = 0
	snapshotBodyStored = 1
)

// Snapshot encodes the durable state as of LastIndex.
func (p *Partition) Snapshot() []byte {
	// Size the buffer once: growing a buffer of hundreds of MiB by doubling
	// costs several copies and fresh pages for each.
	sizeBytes := 128
	p.store.forEach(func(_ uint64, m *message) {
		sizeBytes += 128 + len(m.body.Payload) + len(m.body.ContentType.Custom)
		for _, h := range m.body.Headers {
			sizeBytes += 8 + len(h.Key) + len(h.Value)
		}
	})
	dst := make([]byte, 0, sizeBytes)
	dst = append(dst, snapshotMagic[:]...)
	dst = binary.BigEndian.AppendUint64(dst, p.lastEpoch)
	dst = binary.BigEndian.AppendUint64(dst, p.lastIndex)
	dst = binary.BigEndian.AppendUint64(dst, p.nextOffset)
	dst = binary.BigEndian.AppendUint64(dst, p.nextTag)
	dst = appendSettings(dst, &p.settings)
	dst = appendOptTarget(dst, p.globalDLQ)
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.store.live))
	p.store.forEach(func(offset uint64, m *message) {
		dst = binary.BigEndian.AppendUint64(dst, offset)
		dst = append(dst, byte(m.state), byte(m.reason))
		dst = binary.BigEndian.AppendUint32(dst, m.retries)
		dst = binary.BigEndian.AppendUint64(dst, uint64(m.expiresAtMs))
		dst = binary.BigEndian.AppendUint64(dst, uint64(m.dueMs))
		dst = binary.BigEndian.AppendUint64(dst, m.tag)
		dst = appendBody(dst, m.body)
		if m.body.IsStored() {
			ref := m.body.Ref
			dst = append(dst, snapshotBodyStored)
			dst = binary.BigEndian.AppendUint64(dst, ref.File)
			dst = binary.BigEndian.AppendUint64(dst, ref.OffsetBytes)
			dst = binary.BigEndian.AppendUint32(dst, ref.LengthBytes)
			dst = binary.BigEndian.AppendUint32(dst, ref.Checksum)
		} else {
			dst = append(dst, snapshotBodyInline)
		}
		if m.state == statePendingDLQ {
			t := p.dlqTargets[offset]
			dst = appendOptTarget(dst, &t)
		}
	})
	return dst
}

// Recover rebuilds a partition from an optional snapshot and the log entries
// after it. Everything it is given is durable. A log that contradicts itself
// (an entry its state cannot take) is reported, not applied: the driver
// quarantines the partition (SPEC §7).
func Recover(cfg Config, snapshot []byte, entries []Entry) (p *Partition, err error) {
	p, err = NewPartition(cfg)
	if err != nil {
		return nil, err
	}
	if snapshot != nil {
		if err := p.restoreSnapshot(snapshot); err != nil {
			return nil, err
		}
	}
	for i := range entries {
		e := &entries[i]
		if e.Index != p.lastIndex+1 {
			return nil, &RecoveryError{Index: e.Index, Err: fmt.Errorf("entry %d after %d: %w", e.Index, p.lastIndex, ErrNonContiguousLog)}
		}
		if e.Epoch < p.lastEpoch {
			return nil, &RecoveryError{Index: e.Index, Err: fmt.Errorf("entry %d epoch %d after %d: %w", e.Index, e.Epoch, p.lastEpoch, ErrEpochWentBack)}
		}
		if e.Kind == EntryAck && i >= len(entries)-mutant.RecentAcksDropped && mutant.On(mutant.RecoveryDropsRecentAcks) {
			p.lastIndex, p.lastEpoch = e.Index, e.Epoch // the mutant loses a recent ack
			continue
		}
		if err := p.applyRecovered(e); err != nil {
			return nil, err
		}
	}
	if cfg.Epoch < p.lastEpoch {
		return nil, fmt.Errorf("config epoch %d below the log's %d: %w", cfg.Epoch, p.lastEpoch, ErrEpochWentBack)
	}
	p.durableIndex = p.lastIndex
	p.durableOffsetEnd = p.nextOffset
	p.nextTag = max(p.nextTag, cfg.TagFloor)
	p.resendDLQ = len(p.dlqTargets) > 0
	return p, nil
}

// ErrInconsistentLog reports a log entry that its preceding state cannot take.
var ErrInconsistentLog = fmt.Errorf("inconsistent log")

func (p *Partition) applyRecovered(e *Entry) (err error) {
	defer func() {
		if r := recover(); r != nil {
			// The index says where a repair cuts (errors_quarantine.go).
			err = &RecoveryError{Index: e.Index, Err: fmt.Errorf("entry %d (kind %d): %v: %w", e.Index, e.Kind, r, ErrInconsistentLog)}
		}
	}()
	p.apply(e)
	return nil
}

func (p *Partition) restoreSnapshot(b []byte) error {
	r := reader{b: b}
	magic := string(r.take(4))
	if magic != string(snapshotMagic[:]) && magic != string(snapshotMagicV1[:]) {
		return ErrCorruptSnapshot
	}
	withRefs := magic == string(snapshotMagic[:])
	p.lastEpoch = r.u64()
	p.lastIndex = r.u64()
	p.nextOffset = r.u64()
	p.nextTag = r.u64()
	p.settings = r.settings()
	p.globalDLQ = r.optTarget()
	count := r.u64()
	if count > uint64(len(r.b)) { // each message takes many bytes
		return ErrCorruptSnapshot
	}
	for i := uint64(0); i < count && !r.bad; i++ {
		offset := r.u64()
		state, reason := msgState(r.u8()), DLQReason(r.u8())
		retries := r.u32()
		expiresAtMs, dueMs := int64(r.u64()), int64(r.u64())
		tag := r.u64()
		body := r.body()
		if withRefs {
			switch r.u8() {
			case snapshotBodyInline:
			case snapshotBodyStored:
				body.Ref = PayloadRef{File: r.u64(), OffsetBytes: r.u64(), LengthBytes: r.u32(), Checksum: r.u32()}
				if len(body.Payload) != 0 || !body.Ref.Stored() {
					return ErrCorruptSnapshot
				}
			default:
				return ErrCorruptSnapshot
			}
		}
		if r.bad || offset >= p.nextOffset || p.store.get(offset) != nil || state < stateReady || state > statePendingDLQ {
			return ErrCorruptSnapshot
		}
		m := p.store.insert(offset, body)
		m.state, m.reason, m.retries = state, reason, retries
		m.expiresAtMs, m.dueMs, m.tag = expiresAtMs, dueMs, tag
		p.indexRestored(offset, m)
		if state == statePendingDLQ {
			t := r.optTarget()
			if t == nil {
				return ErrCorruptSnapshot
			}
			p.dlqTargets[offset] = *t
		}
	}
	if r.bad || len(r.b) != 0 {
		return ErrCorruptSnapshot
	}
	return nil
}

// indexRestored puts a restored message back into the indexes its state uses.
// Snapshots list messages in offset order, so fresh stays sorted.
func (p *Partition) indexRestored(offset uint64, m *message) {
	if m.expiresAtMs != 0 {
		p.withTTL++
		p.pushTTL(timer{atMs: m.expiresAtMs, offset: offset})
	}
	switch m.state {
	case stateReady:
		p.fresh.push(offset)
		p.readyCount++
	case stateDelayed, stateInflight:
		p.timed++
		p.pushTimer(timer{atMs: m.dueMs, offset: offset})
	}
	if m.state == stateInflight {
		p.inflightCount++ // a recovered lease: held by nobody, it keeps the exclusive gate shut
	}
}
