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
		m := p.mustGet(e.Offset, stateInflight, "acked message is inflight")
		_ = m
		p.store.remove(e.Offset)
	case EntryRequeue:
		m := p.mustGet(e.Offset, stateInflight, "requeued message is inflight")
		assertTrue(e.Retries == m.retries+1, "a requeue counts one attempt")
		m.retries, m.tag, m.subID = e.Retries, 0, 0
		p.makeReadyOrDelayed(e.Offset, m, e.AtMs)
	case EntryRelease:
		m := p.mustGet(e.Offset, stateDelayed, "released message is delayed")
		p.makeReadyOrDelayed(e.Offset, m, 0)
	case EntryDeadLetter:
		m := p.store.get(e.Offset)
		assertTrue(m != nil && m.state != statePendingDLQ, "dead-lettered message is live and not yet pending")
		p.leaveReady(m)
		m.state, m.reason, m.tag, m.subID = statePendingDLQ, DLQReason(e.Cause), 0, 0
		m.dueMs = e.AtMs // dead-lettered at, for the stroma.dlq header
		p.dlqTargets[e.Offset] = *e.Target
	case EntryDiscard:
		m := p.store.get(e.Offset)
		assertTrue(m != nil && m.state != statePendingDLQ, "discarded message is live and not pending")
		p.leaveReady(m)
		p.store.remove(e.Offset)
	case EntryDeadLettered:
		p.mustGet(e.Offset, statePendingDLQ, "dead-letter completion for a pending message")
		delete(p.dlqTargets, e.Offset)
		p.store.remove(e.Offset)
	default:
		panic("fibril/core invariant violated: applying an unknown entry kind")
	}
}

func (p *Partition) mustGet(offset uint64, state msgState, why string) *message {
	m := p.store.get(offset)
	assertTrue(m != nil, why+" (message is live)")
	assertTrue(m.state == state, why)
	return m
}

func (p *Partition) applyPublish(e *Entry) {
	assertTrue(e.Offset == p.nextOffset, "offsets are dense")
	p.nextOffset++
	m := p.store.insert(e.Offset, e.Body)
	m.expiresAtMs = e.ExpiresAtMs
	if m.expiresAtMs != 0 {
		p.ttls.push(timer{atMs: m.expiresAtMs, offset: e.Offset})
	}
	if e.AtMs != 0 {
		m.state, m.dueMs = stateDelayed, e.AtMs
		p.timers.push(timer{atMs: e.AtMs, offset: e.Offset})
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
		p.store.remove(offset)
		return
	}
	m.state, m.tag, m.dueMs = stateInflight, e.Tag, e.AtMs
	p.timers.push(timer{atMs: e.AtMs, offset: offset})
}

func (p *Partition) makeReadyOrDelayed(offset uint64, m *message, notBeforeMs int64) {
	if notBeforeMs != 0 {
		m.state, m.dueMs = stateDelayed, notBeforeMs
		p.timers.push(timer{atMs: notBeforeMs, offset: offset})
		return
	}
	m.state, m.dueMs = stateReady, 0
	p.requeued.push(offset)
	p.readyCount++
}

// leaveReady keeps readyCount true when a ready message is dead-lettered or
// discarded; its stale entry in fresh or requeued is skipped when it surfaces.
func (p *Partition) leaveReady(m *message) {
	if m.state == stateReady {
		p.readyCount--
	}
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
		if m := p.store.get(p.requeued.top()); m != nil && m.state == stateReady {
			break
		}
		p.requeued.pop()
	}
	switch {
	case p.fresh.len() == 0 && len(p.requeued) == 0:
		return 0, false
	case p.fresh.len() == 0:
		return p.requeued.top(), true
	case len(p.requeued) == 0:
		return p.fresh.front(), true
	}
	return min(p.fresh.front(), p.requeued.top()), true
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
