package stream

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
)

// Serving records to subscriptions: from the tail ring when it holds the
// subscription's next offset, from the log (Read/ReadDone) otherwise.
// Invariants:
//   - offer is the only place next advances (besides a retention clamp), and
//     it takes exactly next;
//   - a read is issued only for durable records (storage has them) and at
//     most one per subscription is in flight;
//   - a subscription at its window gets nothing and costs nothing.

// serveAll serves every subscription, in id order (deterministic).
func (p *Partition) serveAll() {
	for _, id := range p.subOrder {
		p.serve(p.subs[id])
	}
}

// serve hands out ring records while the window allows, or starts a read
// when next is older than the ring.
func (p *Partition) serve(sub *subscription) {
	end := p.visibleEnd()
	// Bounded: each pass takes one ring record (the ring is bounded) or
	// stops; a delivery also takes window.
	for sub.window < p.cfg.SubWindowMax && sub.next < end {
		rec := p.ring.get(sub.next)
		if rec == nil {
			p.requestRead(sub)
			return
		}
		p.offer(sub, rec.offset, rec.atMs, rec.body)
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

// requestRead asks storage for the entries holding sub.next.
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
	// Tokens are unique per partition, not per subscription: a SubID the
	// driver reuses must not take the answer to its predecessor's read.
	p.readSerial++
	sub.token = p.readSerial
	sub.reading, sub.readFrom = true, from
	p.rd.Reads = append(p.rd.Reads, Read{SubID: sub.id, Token: sub.token, FromIndex: from, MaxEntries: p.cfg.ReadBatchMax})
}

// onReadDone offers the read entries in order until the window fills, the
// subscription reaches the ring (it rejoins the live tail) or the entries
// end; serve then reads on or serves from the ring.
func (p *Partition) onReadDone(in *ReadDone) {
	sub := p.subs[in.SubID]
	if sub == nil || !sub.reading || in.Token != sub.token {
		return // stale: unsubscribed, clamped, or an older read
	}
	sub.reading = false
	if in.Err != nil || len(in.Entries) == 0 {
		sub.readRetryAtMs = p.nowMs + p.cfg.ReadRetryMs
		return
	}
	assertTrue(len(in.Entries) <= p.cfg.ReadBatchMax, "a read returns at most what it asked")
	assertTrue(in.Entries[0].Index == sub.readFrom, "a read starts where it was asked")
	end := p.visibleEnd()
	for i := range in.Entries {
		e := &in.Entries[i]
		assertTrue(e.Index == sub.readFrom+uint64(i), "read entries are contiguous")
		if e.Kind != core.EntryStreamRecord || e.Offset < sub.next {
			sub.readIndex = e.Index + 1
			continue
		}
		if e.Offset >= end || sub.window >= p.cfg.SubWindowMax || p.ring.get(sub.next) != nil {
			break
		}
		p.offer(sub, e.Offset, e.AtMs, e.Body)
		sub.readIndex = e.Index + 1
	}
}
