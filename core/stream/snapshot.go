package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/fibril-go/fibril/core"
)

// Snapshots and replay. Invariants:
//   - a snapshot holds durable state only (settings, log position, offsets,
//     the segment table, the cursors), never bodies, subscriptions or
//     pending confirms; cursors are written sorted by name, so equal states
//     give equal bytes;
//   - Load runs the very apply the live partition ran, so snapshot + the
//     entries after it rebuild the live durable state;
//   - a truncation snapshot is the state just after the last dropped index:
//     no segments, oldest = next offset = the first kept record, plus the
//     current cursors (every commit is durable when it is taken, see retain;
//     replaying the later commits again is harmless: the last wins).

var snapshotMagic = [4]byte{'F', 'S', 'S', '1'}

// snapshotState is what a snapshot encodes.
type snapshotState struct {
	epoch, lastIndex   uint64
	settings           core.StreamSettings
	nextOffset, oldest uint64
	segments           []segment
	cursors            map[string]uint64
}

// Snapshot encodes the durable state as of LastIndex. (Storage truncates
// only at a Truncate's index: the records a snapshot does not hold are
// read back from the log.)
func (p *Partition) Snapshot() []byte {
	return encodeSnapshot(&snapshotState{epoch: p.lastEpoch, lastIndex: p.lastIndex, settings: p.settings,
		nextOffset: p.nextOffset, oldest: p.oldest, segments: p.segments.segs, cursors: p.cursors})
}

// truncationSnapshot is the state just after last, the newest dropped
// segment: nothing retained, the cursors clamped to the new oldest offset.
func (p *Partition) truncationSnapshot(last *segment) []byte {
	oldest := last.lastOffset + 1
	assertTrue(last.lastIndex <= p.durableIndex, "a truncation snapshot covers durable entries only")
	// Clamp as SnapshotDone will: the loaded state then equals the live one
	// after it, and no cursor in the snapshot names a dropped record.
	// The durable cursors, not the live ones: a commit after durableIndex
	// may still be lost by a crash, and the snapshot outlives it. The
	// durable commits after last.lastIndex replay over it in order and end
	// at the same values, so replay still equals the durable state.
	cursors := make(map[string]uint64, len(p.durableCursors))
	for name, next := range p.durableCursors {
		cursors[name] = max(next, oldest)
	}
	return encodeSnapshot(&snapshotState{epoch: last.lastEpoch, lastIndex: last.lastIndex, settings: p.settings,
		nextOffset: oldest, oldest: oldest, cursors: cursors})
}

func encodeSnapshot(s *snapshotState) []byte {
	// Map order is random: sort names so equal states give equal bytes.
	names := make([]string, 0, len(s.cursors))
	for name := range s.cursors {
		names = append(names, name)
	}
	sort.Strings(names)
	// Size once: a segment is 64 bytes, a cursor about 12 plus its name.
	dst := make([]byte, 0, 128+64*len(s.segments)+24*len(names))
	// Layout (FSS1, big-endian): magic, epoch and index of the last entry
	// it covers, settings, next offset, oldest offset, the segments (eight
	// u64 each), then the cursors (name, next) sorted by name. Append-only:
	// a new field means a new magic, and the old one stays readable.
	dst = append(dst, snapshotMagic[:]...)
	dst = binary.BigEndian.AppendUint64(dst, s.epoch)
	dst = binary.BigEndian.AppendUint64(dst, s.lastIndex)
	dst = core.AppendStreamSettings(dst, &s.settings)
	dst = binary.BigEndian.AppendUint64(dst, s.nextOffset)
	dst = binary.BigEndian.AppendUint64(dst, s.oldest)
	assertTrue(len(s.segments) <= math.MaxUint32, "the segment count fits its field")
	assertTrue(len(names) <= math.MaxUint32, "the cursor count fits its field")
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s.segments)))
	for i := range s.segments {
		g := &s.segments[i]
		for _, v := range []uint64{g.firstOffset, g.lastOffset, g.firstIndex, g.lastIndex, g.lastEpoch, g.payloadBytes,
			uint64(g.firstAtMs), uint64(g.lastAtMs)} {
			dst = binary.BigEndian.AppendUint64(dst, v)
		}
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(names)))
	for _, name := range names {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(name)))
		dst = append(dst, name...)
		dst = binary.BigEndian.AppendUint64(dst, s.cursors[name])
	}
	return dst
}

// ErrCorruptSnapshot reports snapshot bytes this package did not write.
var ErrCorruptSnapshot = core.ErrCorruptSnapshot

// Load rebuilds a partition from an optional snapshot and the log entries
// after it (all durable). A log that contradicts itself is reported
// (core.ErrInconsistentLog), not applied: the driver quarantines it.
func Load(cfg Config, snapshot []byte, entries []core.Entry) (*Partition, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := newPartition(cfg)
	// No snapshot: the log must start with its declare (checked below).
	if snapshot != nil {
		if err := p.restoreSnapshot(snapshot); err != nil {
			return nil, err
		}
	}
	for i := range entries {
		e := &entries[i]
		if e.Index != p.lastIndex+1 {
			return nil, &core.RecoveryError{Index: e.Index, Err: fmt.Errorf("stream entry %d after %d: %w", e.Index, p.lastIndex, core.ErrNonContiguousLog)}
		}
		if e.Epoch < p.lastEpoch {
			return nil, &core.RecoveryError{Index: e.Index, Err: fmt.Errorf("stream entry %d epoch %d after %d: %w", e.Index, e.Epoch, p.lastEpoch, core.ErrEpochWentBack)}
		}
		if err := p.applyRecovered(e); err != nil {
			return nil, err
		}
	}
	if !p.declared {
		return nil, fmt.Errorf("stream log without a declare: %w", core.ErrInconsistentLog)
	}
	if cfg.Epoch < p.lastEpoch {
		return nil, fmt.Errorf("config epoch %d below the log's %d: %w", cfg.Epoch, p.lastEpoch, core.ErrEpochWentBack)
	}
	for name, next := range p.cursors {
		if next > p.nextOffset {
			return nil, fmt.Errorf("cursor %q at %d beyond the log's %d: %w", name, next, p.nextOffset, core.ErrInconsistentLog)
		}
	}
	// Everything loaded is durable: storage gave it back after a restart.
	p.durableIndex = p.lastIndex
	for name, next := range p.cursors {
		p.durableCursors[name] = next
	}
	p.durableOffsetEnd = p.nextOffset
	return p, nil
}

func (p *Partition) applyRecovered(e *core.Entry) (err error) {
	// apply asserts what a live partition can never log; in replay the
	// same broken rule means a bad log, which is reported, not a crash loop.
	defer func() {
		if r := recover(); r != nil {
			err = &core.RecoveryError{Index: e.Index, Err: fmt.Errorf("stream entry %d (kind %d): %v: %w", e.Index, e.Kind, r, core.ErrInconsistentLog)}
		}
	}()
	p.apply(e)
	return nil
}

func (p *Partition) restoreSnapshot(b []byte) error {
	if len(b) < 4 || string(b[:4]) != string(snapshotMagic[:]) {
		return ErrCorruptSnapshot
	}
	b = b[4:]
	// Short reads set bad and yield zeroes, so the fields read straight
	// through and bad is checked at the few points counts are trusted.
	var bad bool
	u64 := func() uint64 {
		if len(b) < 8 {
			bad = true
			return 0
		}
		v := binary.BigEndian.Uint64(b)
		b = b[8:]
		return v
	}
	u32 := func() uint32 {
		if len(b) < 4 {
			bad = true
			return 0
		}
		v := binary.BigEndian.Uint32(b)
		b = b[4:]
		return v
	}
	p.lastEpoch, p.lastIndex = u64(), u64()
	settings, rest, err := core.DecodeStreamSettings(b)
	if err != nil {
		return ErrCorruptSnapshot
	}
	b = rest
	// A snapshot only exists for a declared stream: it stands for the
	// declare entry it replaced.
	p.settings, p.declared = settings, true
	p.nextOffset, p.oldest = u64(), u64()
	count := u32()
	// Never allocate from an untrusted count the bytes cannot hold.
	if bad || uint64(count)*64 > uint64(len(b)) {
		return ErrCorruptSnapshot
	}
	p.segments.segs = make([]segment, count)
	for i := range p.segments.segs {
		g := &p.segments.segs[i]
		g.firstOffset, g.lastOffset, g.firstIndex, g.lastIndex = u64(), u64(), u64(), u64()
		g.lastEpoch, g.payloadBytes = u64(), u64()
		g.firstAtMs, g.lastAtMs = int64(u64()), int64(u64())
		p.segments.retainedRecords += g.records()
		p.segments.retainedBytes += g.payloadBytes
	}
	names := u32()
	if bad || uint64(names)*12 > uint64(len(b)) {
		return ErrCorruptSnapshot
	}
	for i := uint32(0); i < names && !bad; i++ {
		n := u32()
		if bad || uint64(n) > uint64(len(b)) {
			return ErrCorruptSnapshot
		}
		name := string(b[:n])
		b = b[n:]
		// Duplicate names cannot come from encodeSnapshot (a map's keys).
		if _, dup := p.cursors[name]; dup {
			return ErrCorruptSnapshot
		}
		p.cursors[name] = u64()
	}
	if bad || len(b) != 0 {
		return ErrCorruptSnapshot
	}
	// Cursors may stand past nextOffset here (a truncation snapshot carries
	// commits logged after its index); Load checks them after the replay.
	if err := p.checkLog(); err != nil {
		return errors.Join(ErrCorruptSnapshot, err)
	}
	return nil
}
