package stream

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// CheckInvariants walks the whole partition and reports the first broken
// invariant. It is O(state): tests and the simulator call it after every
// step; production does not.
func (p *Partition) CheckInvariants() error {
	if err := p.checkLog(); err != nil {
		return err
	}
	if p.durableIndex > p.lastIndex {
		return fmt.Errorf("durable index %d beyond last index %d", p.durableIndex, p.lastIndex)
	}
	if p.durableOffsetEnd > p.nextOffset {
		return fmt.Errorf("durable offset end %d beyond next offset %d", p.durableOffsetEnd, p.nextOffset)
	}
	// Stored cursors lie in the retained window: commits are clamped at
	// apply, and retention clamps the rest at SnapshotDone.
	for name, next := range p.cursors {
		if next < p.oldest || next > p.nextOffset {
			return fmt.Errorf("cursor %q at %d outside [%d, %d]", name, next, p.oldest, p.nextOffset)
		}
	}
	if err := p.checkReads(); err != nil {
		return err
	}
	if err := p.checkRing(); err != nil {
		return err
	}
	// The awaiting queue is exactly the records not yet durable, in order:
	// a confirm can neither be lost nor released early.
	for i := 0; i < p.awaiting.len(); i++ {
		a := p.awaiting.at(i)
		if a.index <= p.durableIndex || a.offset != p.durableOffsetEnd+uint64(i) {
			return fmt.Errorf("awaiting record %d (index %d) is durable or out of order", a.offset, a.index)
		}
	}
	if uint64(p.awaiting.len()) != p.nextOffset-p.durableOffsetEnd {
		return fmt.Errorf("%d records await durability, %d are not durable", p.awaiting.len(), p.nextOffset-p.durableOffsetEnd)
	}
	// A pending truncation ends at a segment boundary still in the table
	// (SnapshotDone drops exactly those segments).
	if t := p.truncating; t != nil && (t.segments > p.segments.len() || t.upToIndex != p.segments.segs[t.segments-1].lastIndex) {
		return fmt.Errorf("pending truncation to %d does not end a segment", t.upToIndex)
	}
	// Commits are flushed at the end of every step: none is left behind
	// in memory, where a crash would lose it silently.
	if len(p.commits) != 0 {
		return fmt.Errorf("%d commits left unlogged after a step", len(p.commits))
	}
	return p.checkSubscriptions()
}

// checkLog checks the offsets and the segment table (also run on a
// restored snapshot).
func (p *Partition) checkLog() error {
	if p.oldest > p.nextOffset {
		return fmt.Errorf("oldest offset %d beyond next offset %d", p.oldest, p.nextOffset)
	}
	// Walk the table once: dense offsets from oldest, growing indexes, at
	// least one entry per record, only the last segment open.
	var records, bytes uint64
	want := p.oldest
	var lastIndex uint64
	for i := range p.segments.segs {
		g := &p.segments.segs[i]
		switch {
		case g.firstOffset != want || g.lastOffset < g.firstOffset:
			return fmt.Errorf("segment %d covers [%d, %d], want it to start at %d", i, g.firstOffset, g.lastOffset, want)
		case g.firstIndex <= lastIndex || g.lastIndex < g.firstIndex || g.lastIndex > p.lastIndex:
			return fmt.Errorf("segment %d has indexes [%d, %d] out of order", i, g.firstIndex, g.lastIndex)
		case g.lastIndex-g.firstIndex < g.records()-1:
			return fmt.Errorf("segment %d holds %d records in fewer entries", i, g.records())
		case i < len(p.segments.segs)-1 && !g.sealed(&p.cfg):
			return fmt.Errorf("segment %d is open but not the last", i)
		case g.lastAtMs < g.firstAtMs:
			return fmt.Errorf("segment %d publish times go back", i)
		}
		records += g.records()
		bytes += g.payloadBytes
		want, lastIndex = g.lastOffset+1, g.lastIndex
	}
	if want != p.nextOffset {
		return fmt.Errorf("segments end at %d, next offset is %d", want, p.nextOffset)
	}
	if records != p.segments.retainedRecords || bytes != p.segments.retainedBytes {
		return fmt.Errorf("retained totals %d records %d bytes, segments hold %d and %d",
			p.segments.retainedRecords, p.segments.retainedBytes, records, bytes)
	}
	return nil
}

func (p *Partition) checkRing() error {
	r := &p.ring
	if r.empty() {
		return nil
	}
	// The ring is a contiguous suffix of the retained records, and its byte
	// count is what its records charge.
	var bytes int64
	for i := 0; i < r.n; i++ {
		rec := r.at(i)
		if rec.offset != r.firstOffset()+uint64(i) || rec.body == nil {
			return fmt.Errorf("ring slot %d holds offset %d: not contiguous", i, rec.offset)
		}
		bytes += recordChargeBytes(rec.body)
	}
	switch {
	case r.at(r.n-1).offset != p.nextOffset-1:
		return fmt.Errorf("ring ends at %d, newest record is %d", r.at(r.n-1).offset, p.nextOffset-1)
	case r.firstOffset() < p.oldest:
		return fmt.Errorf("ring starts at %d, before the oldest retained %d", r.firstOffset(), p.oldest)
	case bytes != r.bytes:
		return fmt.Errorf("ring counts %d bytes, holds %d", r.bytes, bytes)
	case r.n > 1 && r.bytes > p.cfg.TailBytesMax:
		return fmt.Errorf("ring holds %d bytes, over %d", r.bytes, p.cfg.TailBytesMax)
	}
	return nil
}

// checkReads: every waiting subscription waits on a read in flight, read
// tokens are unique, and the read cache holds only durable retained records
// within its budget (serve.go, readcache.go).
func (p *Partition) checkReads() error {
	tokens := make(map[uint64]bool, len(p.reads))
	for _, r := range p.reads {
		if tokens[r.token] || r.token == 0 || r.token > p.readSerial {
			return fmt.Errorf("read token %d repeated or never issued (serial %d)", r.token, p.readSerial)
		}
		tokens[r.token] = true
	}
	for _, id := range p.subOrder {
		if sub := p.subs[id]; sub.reading && !tokens[sub.token] {
			return fmt.Errorf("subscription %d waits on read %d, which is not in flight", id, sub.token)
		}
	}
	c := &p.cache
	var bytes int64
	for _, off := range c.fifo[c.head:] {
		rec, ok := c.recs[off]
		switch {
		case !ok:
			return fmt.Errorf("read cache lists offset %d it does not hold", off)
		case off < p.oldest || off >= p.durableOffsetEnd:
			return fmt.Errorf("read cache holds offset %d outside the durable retained [%d, %d)", off, p.oldest, p.durableOffsetEnd)
		}
		bytes += recordChargeBytes(rec.body)
	}
	switch {
	case len(c.fifo)-c.head != len(c.recs):
		return fmt.Errorf("read cache lists %d offsets, holds %d", len(c.fifo)-c.head, len(c.recs))
	case bytes != c.bytes:
		return fmt.Errorf("read cache counts %d bytes, holds %d", c.bytes, bytes)
	case len(c.recs) > 1 && c.bytes > p.cfg.ReadCacheBytesMax:
		return fmt.Errorf("read cache holds %d bytes, over %d", c.bytes, p.cfg.ReadCacheBytesMax)
	}
	return nil
}

func (p *Partition) checkSubscriptions() error {
	if len(p.subOrder) != len(p.subs) {
		return fmt.Errorf("%d subscriptions in order, %d in map", len(p.subOrder), len(p.subs))
	}
	// Each subscription lies in the retained window with a window in
	// bounds, and the active-name counts (CursorsMax) match the
	// subscriptions' names.
	names := map[string]int{}
	for i, id := range p.subOrder {
		sub := p.subs[id]
		switch {
		case sub == nil:
			return fmt.Errorf("subscription %d ordered but missing", id)
		case i > 0 && p.subOrder[i-1] >= id:
			return fmt.Errorf("subscription order not sorted at %d", id)
		case sub.next < p.oldest || sub.next > p.nextOffset:
			return fmt.Errorf("subscription %d at %d outside [%d, %d]", id, sub.next, p.oldest, p.nextOffset)
		case sub.window < 0 || sub.window > p.cfg.SubWindowMax:
			return fmt.Errorf("subscription %d window %d outside [0, %d]", id, sub.window, p.cfg.SubWindowMax)
		case sub.committed > sub.next:
			return fmt.Errorf("subscription %d committed %d past its next %d", id, sub.committed, sub.next)
		}
		if sub.name != "" {
			names[sub.name]++
		}
	}
	if len(names) != len(p.activeNames) {
		return fmt.Errorf("%d active names counted, %d held", len(p.activeNames), len(names))
	}
	for name, n := range names {
		if p.activeNames[name] != n {
			return fmt.Errorf("name %q held by %d subscriptions, counted %d", name, n, p.activeNames[name])
		}
	}
	// Settings are validated at declare and on decode; this catches a
	// snapshot restore that skipped a check.
	if p.settings.Tier > core.TierDurable {
		return fmt.Errorf("tier %d unknown", p.settings.Tier)
	}
	return nil
}
