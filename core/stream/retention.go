package stream

import (
	"math"

	"github.com/fibril-go/fibril/mutant"
)

// Retention (docs/streams.md "Segments"). Invariants:
//   - only whole sealed segments are dropped, oldest first, and only while a
//     bound (age, bytes, records; 0 = unbounded) is crossed; the open
//     segment never is;
//   - only durable segments are dropped, and the truncation snapshot
//     carries the durable cursors (commits up to durableIndex), so it never
//     names a commit a crash could lose; retention runs under steady
//     traffic, when the log is never wholly durable (it once waited for
//     that, and never ran under load: found by review);
//   - the state moves only at SnapshotDone, once storage has the snapshot:
//     until then the dropped records are still readable, and a crash before
//     it simply decides the drop again;
//   - one truncation is pending at a time.

// agedOutAtMs is the first time a segment whose newest record was published
// at lastAtMs is past maxAgeMs (saturating: a huge bound never wraps).
func agedOutAtMs(lastAtMs int64, maxAgeMs uint64) int64 {
	if maxAgeMs >= uint64(math.MaxInt64-lastAtMs) || lastAtMs < 0 {
		return math.MaxInt64
	}
	return lastAtMs + int64(maxAgeMs) + 1
}

// retain decides whether front segments must go and, if so, asks storage
// to save the truncation snapshot (Ready.Truncate).
func (p *Partition) retain() {
	if mutant.On(mutant.StreamNoRetention) {
		return
	}
	s := &p.settings
	if p.truncating != nil {
		return
	}
	if s.MaxAgeMs == 0 && s.MaxBytes == 0 && s.MaxRecords == 0 {
		return
	}
	// Walk from the oldest segment, taking each while a bound is crossed
	// by what would remain with it: several segments may go in one
	// truncation, at most the whole table (bounded).
	records, bytes := p.segments.retainedRecords, p.segments.retainedBytes
	n := 0
	for n < p.segments.len() {
		seg := &p.segments.segs[n]
		if !seg.sealed(&p.cfg) || seg.lastIndex > p.durableIndex {
			break // the open segment never goes, nor one not yet durable
		}
		over := (s.MaxRecords > 0 && records > s.MaxRecords) ||
			(s.MaxBytes > 0 && bytes > s.MaxBytes) ||
			(s.MaxAgeMs > 0 && p.nowMs >= agedOutAtMs(seg.lastAtMs, s.MaxAgeMs))
		if !over && !mutant.On(mutant.StreamEagerRetention) { // the mutant drops what no bound asks
			break
		}
		records -= seg.records()
		bytes -= seg.payloadBytes
		n++
	}
	if n == 0 {
		return
	}
	last := p.segments.segs[n-1]
	assertTrue(last.lastIndex <= p.durableIndex, "only durable records are dropped")
	assertTrue(last.lastOffset < p.nextOffset, "a dropped segment is a retained one")
	p.truncating = &pendingTruncate{upToIndex: last.lastIndex, segments: n, oldest: last.lastOffset + 1}
	p.rd.Truncate = &Truncate{UpToIndex: last.lastIndex, Snapshot: p.truncationSnapshot(&last)}
}

// onSnapshotDone applies the pending truncation: the front segments go, and
// every cursor and subscription behind the new oldest offset is clamped.
func (p *Partition) onSnapshotDone(in *SnapshotDone) {
	t := p.truncating
	assertTrue(t != nil, "SnapshotDone answers a pending Truncate")
	assertTrue(in.Index == t.upToIndex, "SnapshotDone names the pending truncation")
	p.truncating = nil
	p.segments.dropFront(&p.cfg, t.segments)
	p.oldest = t.oldest
	p.ring.dropBelow(p.oldest)
	p.cache.dropBelow(p.oldest)
	p.forgetReadsUpTo(t.upToIndex)
	for _, id := range p.subOrder {
		// A read position in the dropped entries would name an index the
		// log no longer holds: read again from the segment of next.
		if sub := p.subs[id]; sub.readIndex != 0 && sub.readIndex <= t.upToIndex {
			sub.readIndex = 0
		}
	}
	for name, next := range p.cursors {
		if next < p.oldest {
			p.cursors[name] = p.oldest // stored cursors are clamped silently
		}
	}
	for name, next := range p.durableCursors {
		if next < p.oldest {
			p.durableCursors[name] = p.oldest // as the snapshot says
		}
	}
	for _, id := range p.subOrder {
		sub := p.subs[id]
		if sub.next >= p.oldest {
			continue
		}
		p.rd.Notices = append(p.rd.Notices, Notice{SubID: id, Kind: NoticeClamped, From: sub.next, To: p.oldest})
		sub.next = p.oldest
		// A read in flight may name dropped entries: forget it.
		sub.reading, sub.readIndex, sub.token = false, 0, 0
	}
	if p.segments.len() > 0 {
		assertTrue(p.segments.segs[0].firstOffset == p.oldest, "the oldest segment starts at the oldest offset")
	}
}

// forgetReadsUpTo forgets the reads in flight that start at or below
// upToIndex (storage dropped those entries: the answer would be an error,
// and a waiter would back off for nothing), and frees their waiters to read
// again from where they now stand.
func (p *Partition) forgetReadsUpTo(upToIndex uint64) {
	live := p.reads[:0]
	for _, r := range p.reads {
		if r.fromIndex > upToIndex {
			live = append(live, r)
			continue
		}
		for _, id := range p.subOrder {
			if sub := p.subs[id]; sub.reading && sub.token == r.token {
				sub.reading, sub.readIndex, sub.token = false, 0, 0
			}
		}
	}
	clear(p.reads[len(live):])
	p.reads = live
}
