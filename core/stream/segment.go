package stream

import "github.com/fibril-go/fibril/core"

// Segments and the tail ring: the only per-record memory of a partition.
// Invariants:
//   - segments cover the retained offsets [oldest, nextOffset) densely, in
//     order, with strictly increasing log indexes; only the last one may be
//     open (below both seal bounds);
//   - retainedRecords and retainedBytes are the sums over the segments;
//   - the ring holds a contiguous run of the newest records, ending at
//     nextOffset-1 and starting at or after oldest; it is over TailBytesMax
//     only when it holds a single record.

// segment is one logical segment: 64 bytes for up to SegmentRecordsMax records.
type segment struct {
	// Offsets say what it holds; indexes say where a read starts and
	// where a truncation ends.
	firstOffset, lastOffset uint64
	firstIndex, lastIndex   uint64
	lastEpoch               uint64 // epoch of lastIndex: a truncation snapshot names it
	payloadBytes            uint64
	// Publish times: age retention looks at lastAtMs, by-time starts too.
	firstAtMs, lastAtMs int64
}

func (s *segment) records() uint64 { return s.lastOffset - s.firstOffset + 1 }

// sealed says the segment takes no more records.
func (s *segment) sealed(cfg *Config) bool {
	return s.records() >= cfg.SegmentRecordsMax || s.payloadBytes >= cfg.SegmentBytesMax
}

// segmentTable is the ordered segments. Dropping from the front re-slices;
// compact copies once the dead prefix outgrows the live part, so the table
// costs O(retained segments).
type segmentTable struct {
	segs            []segment
	retainedRecords uint64
	retainedBytes   uint64
}

func (t *segmentTable) len() int { return len(t.segs) }

func (t *segmentTable) last() *segment {
	if len(t.segs) == 0 {
		return nil
	}
	return &t.segs[len(t.segs)-1]
}

// add records the record at (offset, index) into the open segment, opening
// a new one when there is none or the last is sealed.
func (t *segmentTable) add(cfg *Config, offset, index, epoch uint64, payloadBytes uint64, atMs int64) {
	last := t.last()
	// Sealing is decided from the records alone (counts, bytes, config),
	// so replay after a truncation snapshot seals at the same offsets.
	if last == nil || last.sealed(cfg) {
		t.segs = append(t.segs, segment{firstOffset: offset, firstIndex: index, firstAtMs: atMs, lastOffset: offset - 1})
		last = t.last()
	}
	assertTrue(offset == last.lastOffset+1, "records join their segment densely")
	assertTrue(index > last.lastIndex, "record indexes grow")
	last.lastOffset = offset
	last.lastIndex = index
	last.lastEpoch = epoch
	last.lastAtMs = atMs
	last.payloadBytes += payloadBytes
	t.retainedRecords++
	t.retainedBytes += payloadBytes
}

// dropFront drops the first n segments.
func (t *segmentTable) dropFront(cfg *Config, n int) {
	assertTrue(n <= len(t.segs), "drop only segments the table has")
	for i := 0; i < n; i++ {
		s := &t.segs[i]
		assertTrue(s.sealed(cfg), "the open segment is never dropped")
		t.retainedRecords -= s.records()
		t.retainedBytes -= s.payloadBytes
	}
	// Re-slicing keeps the dropped prefix's array alive; copy once it is
	// mostly dead so the table's memory follows retention.
	t.segs = t.segs[n:]
	if cap(t.segs) > 64 && len(t.segs) < cap(t.segs)/4 {
		t.segs = append([]segment(nil), t.segs...)
	}
}

// find returns the segment holding offset, or nil.
func (t *segmentTable) find(offset uint64) *segment {
	// Binary search on lastOffset: segments are sorted and dense, so the
	// first whose last offset reaches offset holds it (or none does).
	lo, hi := 0, len(t.segs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.segs[mid].lastOffset < offset {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(t.segs) || t.segs[lo].firstOffset > offset {
		return nil
	}
	return &t.segs[lo]
}

// firstAtOrAfter returns the first segment whose last AtMs is at least atMs
// (AtMs never goes back, so the segments are sorted by it), or nil.
func (t *segmentTable) firstAtOrAfter(atMs int64) *segment {
	lo, hi := 0, len(t.segs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.segs[mid].lastAtMs < atMs {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(t.segs) {
		return nil
	}
	return &t.segs[lo]
}

// ringRecordChargeBytes is what the ring charges per record on top of its
// payload and headers, so records with empty payloads still bound the count.
const ringRecordChargeBytes = 64

// ringRecord is one record kept in memory.
type ringRecord struct {
	offset uint64
	atMs   int64
	body   *core.Body
}

func recordChargeBytes(b *core.Body) int64 {
	n := int64(len(b.Payload)) + ringRecordChargeBytes
	for _, h := range b.Headers {
		n += int64(len(h.Key) + len(h.Value))
	}
	return n
}

// tailRing is a circular buffer of the newest records, bounded in bytes.
type tailRing struct {
	buf   []ringRecord
	head  int
	n     int
	bytes int64
}

func (r *tailRing) empty() bool { return r.n == 0 }

func (r *tailRing) at(i int) *ringRecord { return &r.buf[(r.head+i)%len(r.buf)] }

// firstOffset is the ring's oldest offset (the ring must not be empty).
func (r *tailRing) firstOffset() uint64 {
	assertTrue(r.n > 0, "an empty ring has no first offset")
	return r.at(0).offset
}

// get returns the record at offset if the ring holds it.
func (r *tailRing) get(offset uint64) *ringRecord {
	if r.n == 0 {
		return nil
	}
	first := r.at(0).offset
	if offset < first || offset-first >= uint64(r.n) {
		return nil
	}
	rec := r.at(int(offset - first))
	assertTrue(rec.offset == offset, "the ring is contiguous")
	return rec
}

// push appends the newest record and evicts the oldest while over budget,
// always keeping the newest.
func (r *tailRing) push(rec ringRecord, budgetBytes int64) {
	// The ring grows by doubling up to what TailBytesMax lets it hold,
	// then stays: eviction keeps n bounded by budget / charge.
	if r.n == len(r.buf) {
		r.grow()
	}
	*r.at(r.n) = rec
	r.n++
	r.bytes += recordChargeBytes(rec.body)
	// The newest record always stays, even over budget: live subscribers
	// of a stream of huge records still get them without a read.
	for r.n > 1 && r.bytes > budgetBytes {
		r.popFront()
	}
}

func (r *tailRing) grow() {
	next := make([]ringRecord, max(16, 2*len(r.buf)))
	for i := 0; i < r.n; i++ {
		next[i] = *r.at(i)
	}
	r.buf, r.head = next, 0
}

func (r *tailRing) popFront() {
	assertTrue(r.n > 0, "pop from a non-empty ring")
	rec := r.at(0)
	r.bytes -= recordChargeBytes(rec.body)
	// Clear the slot: the body may be large, and only the log needs it now.
	*rec = ringRecord{}
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	assertTrue(r.bytes >= 0, "ring bytes never go negative")
}

// dropBelow evicts the records below offset (after retention).
func (r *tailRing) dropBelow(offset uint64) {
	for r.n > 0 && r.at(0).offset < offset {
		r.popFront()
	}
}
