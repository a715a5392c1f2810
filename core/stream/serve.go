package stream

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
)

// Serving records to subscriptions: from the tail ring when it holds the
// subscription's next offset, else from the read cache (readcache.go), else
// from the log (Read/ReadDone).
// Invariants:
//   - offer is the only place next advances (besides a retention clamp), and
//     it takes exactly next;
//   - a read is issued only for durable records (storage has them), and a
//     subscription waits on at most one read at a time: its own or one it
//     joined (a read in flight that starts at or before where it would read,
//     close enough to cover it);
//   - a read's records go to the cache, and every subscription waiting on
//     it is served from there;
//   - a subscription at its window gets nothing and costs nothing.

// pendingRead is a Read in flight; subscriptions wait on it by token.
type pendingRead struct {
	token      uint64
	fromIndex  uint64
	maxEntries int
}

// serveAll serves every subscription, in id order (deterministic).
// Once no subscription needs the log (each is in the ring or at the end)
// and no read is in flight, the read cache is dropped: it only ever helps
// readers catching up, and kept it would hold up to ReadCacheBytesMax of
// bodies per partition for good.
func (p *Partition) serveAll() {
	behind := false
	for _, id := range p.subOrder {
		sub := p.subs[id]
		p.serve(sub)
		if sub.next < p.visibleEnd() && p.ring.get(sub.next) == nil {
			behind = true
		}
	}
	if !behind && len(p.reads) == 0 && p.cache.len() > 0 {
		p.cache.reset()
	}
}

// serve hands out ring or cached records while the window allows, or
// starts (or joins) a read when next is in neither.
func (p *Partition) serve(sub *subscription) {
	end := p.visibleEnd()
	// Bounded: each pass takes one record (from the bounded ring or cache)
	// or stops; a delivery also takes window.
	for sub.window < p.cfg.SubWindowMax && sub.next < end {
		if rec := p.ring.get(sub.next); rec != nil {
			p.offer(sub, rec.offset, rec.atMs, rec.body)
			continue
		}
		rec, ok := p.cache.get(sub.next)
		if !ok {
			p.requestRead(sub)
			return
		}
		p.offer(sub, sub.next, rec.atMs, rec.body)
		sub.readIndex = rec.index + 1
	}
}

// offer considers record offset for sub: deliver it if it passes the
// by-time start and the filter, pass over it otherwise.
func (p *Partition) offer(sub *subscription, offset uint64, atMs int64, body *core.Body) {
	assertTrue(offset == sub.next, "a subscription never skips a record")
	assertTrue(offset < p.visibleEnd(), "only visible records are handed out")
	sub.next++
	sub.readIndex = 0 // the ring or the read loop says where next is
	// The mutant hands out records the filter rejects (broken on purpose).
	if atMs < sub.minAtMs || (!mutant.On(mutant.StreamDeliverUnfiltered) && !matches(sub.filter, body.Headers)) {
		return
	}
	p.rd.Deliveries = append(p.rd.Deliveries, Delivery{SubID: sub.id, Offset: offset, Body: body, AtMs: atMs,
		Speculative: p.settings.Tier == core.TierSpeculative && offset >= p.durableOffsetEnd})
	sub.window++
	if sub.autoAck && sub.name != "" {
		p.commit(sub, offset+1) // auto-ack commits at hand-out
	}
}

// requestRead has sub wait for the entries holding sub.next: on a read in
// flight that covers where it would read, else on a new one.
func (p *Partition) requestRead(sub *subscription) {
	if sub.reading || p.nowMs < sub.readRetryAtMs {
		return
	}
	if sub.next >= p.durableOffsetEnd {
		return // not durable yet: storage may not have it; Persisted will wake us
	}
	// Continue where the last read stopped; else start at the segment
	// holding next (the table has no per-record index, so up to a
	// segment's worth of older entries is read and passed over).
	from := sub.readIndex
	if from == 0 {
		seg := p.segments.find(sub.next)
		assertTrue(seg != nil, "a retained offset older than the ring lies in a segment")
		from = seg.firstIndex
	}
	assertTrue(from <= p.durableIndex, "reads name durable entries only")
	// Join a read in flight that starts at or before from and asked for
	// enough entries to reach it: a pack of readers then costs one read.
	// Bounded by the reads in flight (at most one issued per waiting
	// subscription).
	for i := range p.reads {
		r := &p.reads[i]
		if r.fromIndex <= from && from < r.fromIndex+uint64(r.maxEntries) {
			// Remember where it would have read: a short answer (storage
			// caps a read's bytes) must not leave it reading on from
			// below its own segment, where retention may drop entries
			// while its next offset is kept.
			sub.reading, sub.token, sub.readIndex = true, r.token, from
			return
		}
	}
	// Tokens are unique per partition, not per subscription: a SubID the
	// driver reuses must not take the answer to its predecessor's read.
	p.readSerial++
	sub.token = p.readSerial
	sub.reading = true
	p.reads = append(p.reads, pendingRead{token: sub.token, fromIndex: from, maxEntries: p.cfg.ReadBatchMax})
	p.rd.Reads = append(p.rd.Reads, Read{SubID: sub.id, Token: sub.token, FromIndex: from, MaxEntries: p.cfg.ReadBatchMax})
}

// onReadDone caches the read records and offers them to every subscription
// waiting on the read, in id order, until its window fills, it reaches the
// ring (it rejoins the live tail) or the entries end; serve then reads on,
// serves from the ring or cache, or joins another read.
func (p *Partition) onReadDone(in *ReadDone) {
	at := -1
	for i := range p.reads {
		if p.reads[i].token == in.Token {
			at = i
			break
		}
	}
	if at < 0 {
		return // stale: forgotten at a retention step
	}
	read := p.reads[at]
	p.reads = append(p.reads[:at], p.reads[at+1:]...)
	failed := in.Err != nil || len(in.Entries) == 0
	if !failed {
		assertTrue(len(in.Entries) <= read.maxEntries, "a read returns at most what it asked")
		assertTrue(in.Entries[0].Index == read.fromIndex, "a read starts where it was asked")
		for i := range in.Entries {
			e := &in.Entries[i]
			assertTrue(e.Index == read.fromIndex+uint64(i), "read entries are contiguous")
			// Only durable, retained records: storage also returns entries
			// not yet synced, and the oldest may have moved since.
			if e.Kind == core.EntryStreamRecord && e.Offset >= p.oldest && e.Offset < p.durableOffsetEnd {
				p.cache.put(e.Offset, cachedRecord{index: e.Index, atMs: e.AtMs, body: e.Body}, p.cfg.ReadCacheBytesMax)
			}
		}
	}
	for _, id := range p.subOrder {
		sub := p.subs[id]
		if !sub.reading || sub.token != in.Token {
			continue
		}
		sub.reading, sub.token = false, 0
		if failed {
			sub.readRetryAtMs = p.nowMs + p.cfg.ReadRetryMs
			continue
		}
		p.offerRead(sub, in.Entries)
	}
}

// offerRead offers a waiter the read entries from its next on. Entries
// before it (a joined read starts at or before where the waiter would
// read) are passed over, and readIndex follows, so the waiter reads on
// after the stretch even when the cache could not keep it (huge records).
func (p *Partition) offerRead(sub *subscription, entries []core.Entry) {
	end := p.visibleEnd()
	for i := range entries {
		e := &entries[i]
		if e.Kind != core.EntryStreamRecord || e.Offset < sub.next {
			// An entry before next: the read goes on after it (never back
			// behind where the waiter already was).
			sub.readIndex = max(sub.readIndex, e.Index+1)
			continue
		}
		if e.Offset >= end || sub.window >= p.cfg.SubWindowMax || p.ring.get(sub.next) != nil {
			return
		}
		assertTrue(e.Offset == sub.next, "read records are contiguous in offset")
		p.offer(sub, e.Offset, e.AtMs, e.Body)
		sub.readIndex = e.Index + 1
	}
}
