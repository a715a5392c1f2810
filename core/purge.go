package core

// Operator purge and constant-time counts (issue 12, SPEC 11). Invariants:
//   - a purge removes every message that is ready or delayed when it is
//     decided, and nothing else: inflight messages stay leased and still
//     settle (RabbitMQ's purge), pending dead letters stay pending (their
//     copy is on its way and must land or be retried);
//   - a purge is one entry (EntryPurge) whose Offset is the partition's
//     nextOffset at the decision: apply removes the ready and delayed
//     messages below it, reading only the entry and the state, so replay
//     removes exactly what the live partition removed;
//   - FastCounts reads counters the apply functions keep true (checked by
//     CheckInvariants after every step), so it costs O(1) and a driver may
//     read it after every step without touching the publish path's cost.

// EntryPurge is the entry of an operator purge: Offset = the first offset
// it does not touch (nextOffset when decided). Stored on disk.
const EntryPurge EntryKind = 15

// Purge removes every ready and delayed message (the operator's purge).
// It answers a Reply of kind ReplyPurged whose Offset is how many messages
// went, once the entry is durable.
type Purge struct {
	NowMs int64
	Ref   uint64
}

func (in *Purge) nowMs() int64 { return in.NowMs }

// ReplyPurged answers a Purge: Offset holds the number of messages removed.
const ReplyPurged ReplyKind = 200

// purgeMax bounds the messages one purge entry removes: the apply is O(n)
// in them, and a partition holds at most QueueDepthMax live messages, so
// the bound is the depth cap itself (named here so the loop's cost has a
// stated limit).
func (p *Partition) purgeMax() int { return p.cfg.QueueDepthMax }

// onPurge decides a purge: it counts what will go and appends one entry.
func (p *Partition) onPurge(in *Purge) {
	c := p.FastCounts()
	n := c.Ready + c.Delayed
	assertTrue(n <= p.purgeMax(), "a purge removes at most the queue's depth")
	if n == 0 {
		// Nothing to remove: no entry (an empty entry would be a log record
		// that changes nothing), but the answer still waits behind what came
		// before it, so answers keep their arrival order.
		reply := Reply{Ref: in.Ref, Kind: ReplyPurged}
		if p.lastIndex > p.durableIndex {
			p.gate(gated{kind: gatedReply, reply: reply})
			return
		}
		p.rd.Replies = append(p.rd.Replies, reply)
		return
	}
	p.appendEntry(Entry{Kind: EntryPurge, Offset: p.nextOffset})
	p.stats.Discarded += uint64(n)
	p.gate(gated{kind: gatedReply, reply: Reply{Ref: in.Ref, Kind: ReplyPurged, Offset: uint64(n)}})
}

// applyPurge removes the ready and delayed messages below e.Offset.
func (p *Partition) applyPurge(e *Entry) {
	assertTrue(e.Offset <= p.nextOffset, "a purge covers only offsets already published")
	var gone []uint64
	p.store.forEach(func(offset uint64, m *message) {
		if offset < e.Offset && (m.state == stateReady || m.state == stateDelayed) {
			gone = append(gone, offset)
		}
	})
	for _, offset := range gone {
		m := p.store.get(offset)
		p.leaveState(m)
		p.settleMessage(offset)
	}
	// Stale ready-index and timer entries are skipped when they surface
	// (the store no longer holds their offsets), as after a TTL expiry.
	assertTrue(p.readyCount >= 0, "the ready count never goes negative")
}

// FastCounts is Counts from the counters the partition keeps (O(1)).
func (p *Partition) FastCounts() Counts {
	c := Counts{Ready: p.readyCount, Inflight: p.inflightCount, Delayed: p.timed - p.inflightCount,
		PendingDLQ: len(p.dlqTargets)}
	assertTrue(c.Delayed >= 0, "timed counts inflight and delayed messages")
	return c
}

// Subscriptions is the number of live subscriptions (consumers).
func (p *Partition) Subscriptions() int { return len(p.subs) }

// PublishedDelivered returns two of Stats' counters without copying the
// rest (a driver reads them after every batch).
func (p *Partition) PublishedDelivered() (published, delivered uint64) {
	return p.stats.Published, p.stats.Delivered
}
