package checker

import (
	"math"

	"github.com/fibril-go/fibril/core"
)

// Item 8, retention and the speculative flag (docs/streams.md "Segments",
// "Tiers"). The checker rebuilds each stream partition's segments from the
// records it saw appended (payload bytes, publish time) and the run's
// segment limits (Meta.StreamSegment*), which is how the core seals them:
// from the records alone, starting at the oldest retained one. Invariants
// it checks:
//   - a truncation (KindStreamTruncate) drops only whole sealed durable
//     segments from the front, each while a bound was crossed by what
//     remained with it: records or payload bytes above max_records /
//     max_bytes, or the segment's newest publish time older than
//     max_age_ms by the core's clock; at most one is pending at a time (a
//     retry asks for the same one again);
//   - the oldest record moves only when a pending truncation is applied
//     (KindStreamSnapshotDone), to the offset after its last segment; a
//     clamp notice moves a subscription to exactly that oldest record;
//   - a recovery finds the oldest record where it was, or where the
//     truncation pending at the crash put it (it may have been saved, and
//     is decided again otherwise), never past it;
//   - at the end of a drained run the retained records, bytes and ages
//     exceed the bounds by at most the newest two segments (one sealed and
//     the open one);
//   - a delivery is flagged speculative exactly when its stream is of the
//     speculative tier and the record was not yet durable when handed out
//     (never on the other tiers), and each client DELIVER carries
//     fibril.speculative: 1 exactly when the partition flagged it.

type streamSegment struct {
	firstOffset, lastOffset uint64
	firstIndex, lastIndex   uint64
	records, bytes          uint64
	lastAtMs                int64
	sealed                  bool
}

type pendingTruncation struct{ upToIndex, newOldest uint64 }

func (c *streamChecker) retentionOn() bool { return c.h.Meta.StreamSegmentRecordsMax != 0 }

// segments groups the retained records of part from oldest (a segment
// boundary) as the core seals them.
func (c *streamChecker) segments(part int, oldest uint64) []streamSegment {
	log := c.logs[part]
	var segs []streamSegment
	for o := oldest; o < uint64(len(log)); o++ {
		r := &log[o]
		if len(segs) == 0 || segs[len(segs)-1].sealed {
			segs = append(segs, streamSegment{firstOffset: o, firstIndex: r.index})
		}
		s := &segs[len(segs)-1]
		s.lastOffset, s.lastIndex, s.lastAtMs = o, r.index, r.atMs
		s.records++
		s.bytes += r.bytes
		s.sealed = s.records >= c.h.Meta.StreamSegmentRecordsMax || (c.h.Meta.StreamSegmentBytesMax > 0 && s.bytes >= c.h.Meta.StreamSegmentBytesMax)
	}
	return segs
}

func totals(segs []streamSegment) (records, bytes uint64) {
	for i := range segs {
		records += segs[i].records
		bytes += segs[i].bytes
	}
	return
}

// agedOut is the first time a segment whose newest record was published at
// lastAtMs is past maxAgeMs (as core/stream's agedOutAtMs).
func agedOut(lastAtMs int64, maxAgeMs uint64) int64 {
	if maxAgeMs >= uint64(math.MaxInt64-lastAtMs) || lastAtMs < 0 {
		return math.MaxInt64
	}
	return lastAtMs + int64(maxAgeMs) + 1
}

func (c *streamChecker) onTruncate(e *Event) {
	if !c.retentionOn() {
		return
	}
	subject := c.h.PartName(e.Part)
	if p := c.pending[e.Part]; p != nil {
		if p.upToIndex != e.Index {
			c.fail("retention", e, subject, "truncation up to index %d asked while the one up to %d is pending", e.Index, p.upToIndex)
		}
		return // a retry of the pending one
	}
	q := c.h.QueueOf(e.Part)
	segs := c.segments(e.Part, c.oldest[e.Part])
	records, bytes := totals(segs)
	n := 0
	for n < len(segs) && segs[n].lastIndex <= e.Index {
		s := &segs[n]
		switch {
		case !s.sealed:
			c.fail("retention", e, subject, "truncation up to index %d drops the open segment [%d, %d]", e.Index, s.firstOffset, s.lastOffset)
		case s.lastIndex > c.durable[e.Part]:
			c.fail("retention", e, subject, "truncation up to index %d drops segment [%d, %d], not durable (durable index %d)", e.Index, s.firstOffset, s.lastOffset, c.durable[e.Part])
		}
		over := (q.MaxRecords > 0 && records > q.MaxRecords) || (q.MaxBytes > 0 && bytes > q.MaxBytes) ||
			(q.MaxAgeMs > 0 && e.NowMs >= agedOut(s.lastAtMs, q.MaxAgeMs))
		if !over {
			c.fail("retention", e, subject, "truncation up to index %d drops segment [%d, %d] with no bound crossed: %d records (max %d), %d bytes (max %d), newest published at %d ms, now %d ms (max age %d)",
				e.Index, s.firstOffset, s.lastOffset, records, q.MaxRecords, bytes, q.MaxBytes, s.lastAtMs, e.NowMs, q.MaxAgeMs)
		}
		records -= s.records
		bytes -= s.bytes
		n++
	}
	switch {
	case n == 0:
		c.fail("retention", e, subject, "truncation up to index %d drops no whole segment (oldest %d)", e.Index, c.oldest[e.Part])
		return
	case segs[n-1].lastIndex != e.Index || (n < len(segs) && segs[n].firstIndex <= e.Index):
		c.fail("retention", e, subject, "truncation up to index %d does not end at a segment's last record (segment [%d, %d] ends at index %d)",
			e.Index, segs[n-1].firstOffset, segs[n-1].lastOffset, segs[n-1].lastIndex)
	}
	c.pending[e.Part] = &pendingTruncation{upToIndex: e.Index, newOldest: segs[n-1].lastOffset + 1}
}

func (c *streamChecker) onSnapshotDone(e *Event) {
	if !c.retentionOn() {
		return
	}
	subject := c.h.PartName(e.Part)
	p := c.pending[e.Part]
	switch {
	case p == nil:
		c.fail("retention", e, subject, "oldest record moved from %d to %d with no truncation pending", c.oldest[e.Part], e.Offset)
	case e.Offset != p.newOldest:
		c.fail("retention", e, subject, "truncation up to index %d applied with oldest %d, want %d", p.upToIndex, e.Offset, p.newOldest)
	}
	c.oldest[e.Part] = e.Offset
	delete(c.pending, e.Part)
}

// onNotice: a clamp moves a subscription to the oldest record, which a
// truncation moved there.
func (c *streamChecker) onNotice(e *Event) {
	if c.retentionOn() && (e.Index2 != c.oldest[e.Part] || e.Index2 <= e.Offset) {
		c.fail("retention", e, c.h.PartName(e.Part), "sub %d clamped from %d to %d, but the oldest retained record is %d", e.Sub, e.Offset, e.Index2, c.oldest[e.Part])
	}
}

// onRecoverOldest: the recovered oldest record is the known one, or the
// one the truncation pending at the crash asked for.
func (c *streamChecker) onRecoverOldest(e *Event) {
	if !c.retentionOn() {
		return
	}
	limit := c.oldest[e.Part]
	if p := c.pending[e.Part]; p != nil {
		limit = max(limit, p.newOldest)
	}
	if e.Index2 > limit || e.Index2 < c.oldest[e.Part] {
		c.fail("retention", e, c.h.PartName(e.Part), "recovered with oldest record %d; retention had dropped up to %d and asked to drop up to %d",
			e.Index2, c.oldest[e.Part], limit)
	}
	c.oldest[e.Part] = e.Index2
	delete(c.pending, e.Part)
}

// onFinalRetention: at the end of a drained run what is retained exceeds
// the bounds by at most the newest two segments.
func (c *streamChecker) onFinalRetention(e *Event) {
	if !c.retentionOn() {
		return
	}
	oldest := c.oldest[e.Part]
	if p := c.pending[e.Part]; p != nil {
		oldest = p.newOldest // asked for: counts as done
	}
	segs := c.segments(e.Part, oldest)
	if len(segs) <= 2 {
		return
	}
	q := c.h.QueueOf(e.Part)
	records, bytes := totals(segs)
	slackRecords, slackBytes := totals(segs[len(segs)-2:])
	subject := c.h.PartName(e.Part)
	if q.MaxRecords > 0 && records-slackRecords > q.MaxRecords {
		c.fail("retention_liveness", e, subject, "retains %d records in %d segments at the end of the run (max_records %d, plus at most %d in the newest two segments)",
			records, len(segs), q.MaxRecords, slackRecords)
	}
	if q.MaxBytes > 0 && bytes-slackBytes > q.MaxBytes {
		c.fail("retention_liveness", e, subject, "retains %d payload bytes in %d segments at the end of the run (max_bytes %d, plus at most %d in the newest two segments)",
			bytes, len(segs), q.MaxBytes, slackBytes)
	}
	if q.MaxAgeMs > 0 {
		for i := range segs[:len(segs)-2] {
			if s := &segs[i]; e.NowMs >= agedOut(s.lastAtMs, q.MaxAgeMs) {
				c.fail("retention_liveness", e, subject, "retains segment [%d, %d], newest published at %d ms, at %d ms (max_age_ms %d)",
					s.firstOffset, s.lastOffset, s.lastAtMs, e.NowMs, q.MaxAgeMs)
				break
			}
		}
	}
}

// speculativeOK judges a node-side delivery's flag.
func (c *streamChecker) speculativeOK(e *Event, subject string) {
	tier := c.h.QueueOf(e.Part).Tier
	if tier != core.TierSpeculative {
		if e.Speculative {
			c.fail("speculative", e, subject, "offset %d handed out flagged speculative on a tier-%d stream", e.Offset, tier)
		}
		return
	}
	notDurable := c.logs[e.Part][e.Offset].index > c.durable[e.Part]
	if e.Speculative != notDurable {
		c.fail("speculative", e, subject, "offset %d (index %d) handed out with speculative=%v, durable index %d", e.Offset,
			c.logs[e.Part][e.Offset].index, e.Speculative, c.durable[e.Part])
	}
}
