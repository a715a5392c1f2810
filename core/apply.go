package core

// apply is the only place durable state changes. It reads nothing but the
// entry and the state: no input, no clock, no subscriptions. Invariants it
// asserts: entries are contiguous and stamped with a non-decreasing epoch;
// each kind finds the message in the state its decision saw.
func (p *Partition) apply(e *Entry) {
	assertTrue(e.Index == p.lastIndex+1, "entries are applied in contiguous index order")
	assertTrue(e.Epoch >= p.lastEpoch, "epochs never go back")
	p.lastIndex, p.lastEpoch = e.Index, e.Epoch
	switch e.Kind {
	case EntryDeclare:
		p.settings = *e.Settings
	case EntryGlobalDLQ:
		if e.Target == nil {
			p.globalDLQ = nil
		} else {
			t := *e.Target
			p.globalDLQ = &t
		}
	case EntryPublish:
		p.applyPublish(e)
	case EntryLease, EntryAutoAck:
		p.applyTake(e)
	case EntryAck:
		p.mustGet(e.Offset, stateInflight, "acked message is inflight")
		p.timed--
		p.inflightCount--
		p.settleMessage(e.Offset)
	case EntryRequeue:
		m := p.mustGet(e.Offset, stateInflight, "requeued message is inflight")
		assertTrue(e.Retries == m.retries+1, "a requeue counts one attempt")
		m.retries, m.tag, m.subID = e.Retries, 0, 0
		p.timed--
		p.inflightCount--
		p.makeReadyOrDelayed(e.Offset, m, e.AtMs)
	case EntryRelease:
		m := p.mustGet(e.Offset, stateDelayed, "released message is delayed")
		p.timed--
		p.makeReadyOrDelayed(e.Offset, m, 0)
	case EntryDeadLetter:
		m := p.store.get(e.Offset)
		assertTrue(m != nil && m.state != statePendingDLQ, "dead-lettered message is live and not yet pending")
		p.leaveState(m)
		m.state, m.reason, m.tag, m.subID = statePendingDLQ, DLQReason(e.Cause), 0, 0
		m.dueMs = e.AtMs // dead-lettered at, for the stroma.dlq header
		p.dlqTargets[e.Offset] = *e.Target
	case EntryDiscard:
		m := p.store.get(e.Offset)
		assertTrue(m != nil && m.state != statePendingDLQ, "discarded message is live and not pending")
		p.leaveState(m)
		p.settleMessage(e.Offset)
	case EntryDeadLettered:
		p.mustGet(e.Offset, statePendingDLQ, "dead-letter completion for a pending message")
		delete(p.dlqTargets, e.Offset)
		p.settleMessage(e.Offset)
	case EntryPurge: // purge.go
		p.applyPurge(e)
	default:
		panic("fibril/core invariant violated: applying an unknown entry kind")
	}
}

func (p *Partition) mustGet(offset uint64, state msgState, why string) *message {
	m := p.store.get(offset)
	assertTrue(m != nil, why)
	assertTrue(m.state == state, why)
	return m
}

func (p *Partition) applyPublish(e *Entry) {
	assertTrue(e.Offset == p.nextOffset, "offsets are dense")
	p.nextOffset++
	m := p.store.insert(e.Offset, e.Body)
	m.expiresAtMs = e.ExpiresAtMs
	if m.expiresAtMs != 0 {
		p.withTTL++
		p.pushTTL(timer{atMs: m.expiresAtMs, offset: e.Offset})
	}
	if e.AtMs != 0 {
		m.state, m.dueMs = stateDelayed, e.AtMs
		p.timed++
		p.pushTimer(timer{atMs: e.AtMs, offset: e.Offset})
		return
	}
	m.state = stateReady
	p.fresh.push(e.Offset) // offsets only grow, so fresh stays sorted
	p.readyCount++
}

// applyTake moves the lowest ready offset out of ready: into a lease, or
// settled at once for auto-ack. The decision picked that same offset, so
// replay takes the same one.
func (p *Partition) applyTake(e *Entry) {
	offset, ok := p.popLowestReady()
	assertTrue(ok && offset == e.Offset, "a delivery takes the lowest ready offset")
	m := p.store.get(offset)
	p.readyCount--
	if e.Tag >= p.nextTag {
		p.nextTag = e.Tag + 1
	}
	if e.Kind == EntryAutoAck {
		p.settleMessage(offset)
		return
	}
	m.state, m.tag, m.dueMs = stateInflight, e.Tag, e.AtMs
	p.timed++
	p.inflightCount++
	p.pushTimer(timer{atMs: e.AtMs, offset: offset})
}

func (p *Partition) makeReadyOrDelayed(offset uint64, m *message, notBeforeMs int64) {
	if notBeforeMs != 0 {
		m.state, m.dueMs = stateDelayed, notBeforeMs
		p.timed++
		p.pushTimer(timer{atMs: notBeforeMs, offset: offset})
		return
	}
	m.state, m.dueMs = stateReady, 0
	p.requeued.push(readyOffset(offset))
	p.readyCount++
}

// leaveState keeps the counts true when a message is dead-lettered or
// discarded from any state; its stale index entries are skipped when they
// surface.
func (p *Partition) leaveState(m *message) {
	switch m.state {
	case stateReady:
		p.readyCount--
	case stateInflight:
		p.timed--
		p.inflightCount--
	case stateDelayed:
		p.timed--
	}
	assertTrue(p.inflightCount >= 0, "the inflight count never goes negative")
}

// settleMessage removes a message for good.
func (p *Partition) settleMessage(offset uint64) {
	if m := p.store.get(offset); m.expiresAtMs != 0 {
		p.withTTL--
	}
	p.store.remove(offset)
}

// Timer heaps are cleaned lazily: an acked lease leaves its entry behind until
// its deadline. So that a fast queue does not hold LeaseMs worth of dead
// entries, a heap is compacted once dead entries outnumber live ones by far.
const timerCompactionSlack = 1024

func (p *Partition) pushTimer(t timer) {
	p.timers.push(t)
	if len(p.timers) > 2*p.timed+timerCompactionSlack {
		p.timers = compactTimers(p.timers, func(t timer) bool {
			m := p.store.get(t.offset)
			return m != nil && m.dueMs == t.atMs && (m.state == stateInflight || m.state == stateDelayed)
		})
	}
}

func (p *Partition) pushTTL(t timer) {
	p.ttls.push(t)
	if len(p.ttls) > 2*p.withTTL+timerCompactionSlack {
		p.ttls = compactTimers(p.ttls, func(t timer) bool {
			m := p.store.get(t.offset)
			return m != nil && m.expiresAtMs == t.atMs
		})
	}
}

// compactTimers keeps the live entries and restores the heap order.
func compactTimers(h timerHeap, live func(timer) bool) timerHeap {
	kept := h[:0]
	for _, t := range h {
		if live(t) {
			kept = append(kept, t)
		}
	}
	clear(h[len(kept):])
	kept.heapify()
	return kept
}

// peekLowestReady returns the lowest ready offset, dropping stale entries
// (messages that left ready by expiry) on the way.
func (p *Partition) peekLowestReady() (uint64, bool) {
	for p.fresh.len() > 0 {
		if m := p.store.get(p.fresh.front()); m != nil && m.state == stateReady {
			break
		}
		p.fresh.pop()
	}
	for len(p.requeued) > 0 {
		if m := p.store.get(uint64(p.requeued.top())); m != nil && m.state == stateReady {
			break
		}
		p.requeued.pop()
	}
	switch {
	case p.fresh.len() == 0 && len(p.requeued) == 0:
		return 0, false
	case p.fresh.len() == 0:
		return uint64(p.requeued.top()), true
	case len(p.requeued) == 0:
		return p.fresh.front(), true
	}
	return min(p.fresh.front(), uint64(p.requeued.top())), true
}

func (p *Partition) popLowestReady() (uint64, bool) {
	offset, ok := p.peekLowestReady()
	if !ok {
		return 0, false
	}
	if p.fresh.len() > 0 && p.fresh.front() == offset {
		p.fresh.pop()
	} else {
		p.requeued.pop()
	}
	return offset, true
}
