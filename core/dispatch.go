package core

// Deliveries and timers. Invariants:
//   - a subscription never holds more unsettled deliveries than its prefetch;
//   - only messages whose publish entry is durable are delivered, so a
//     consumer never sees a message a crash could take back;
//   - nothing is delivered before its not_before or after its TTL deadline;
//   - sweeps are bounded by ExpiryBatchMax and deliveries by DeliveryBatchMax
//     per step; a sweep cut short asks to be woken at once.

// dispatch hands ready messages to subscriptions with credit, one per
// subscription per round, starting from a rotating position (fair dispatch).
func (p *Partition) dispatch() {
	n := len(p.subOrder)
	if n == 0 || p.readyCount == 0 {
		return
	}
	delivered := 0
	start := p.rrNext % n
	p.rrNext = start + 1
	for {
		progress := false
		for i := 0; i < n; i++ {
			sub := p.subs[p.subOrder[(start+i)%n]]
			if !p.hasCredit(sub) || !p.exclusiveGateAdmits(sub) {
				continue // the exclusive gate only narrows who may receive
			}
			offset, ok := p.nextDeliverable()
			if !ok {
				return
			}
			p.deliver(sub, offset)
			progress = true
			delivered++
			if delivered >= p.cfg.DeliveryBatchMax {
				p.budgetHit = true
				return
			}
		}
		if !progress {
			return
		}
	}
}

func (p *Partition) hasCredit(sub *subscription) bool {
	if sub.paused {
		return false // PROTOCOL 7.7: new deliveries wait for a transport
	}
	if sub.autoAck {
		if sub.stepSerial != p.stepSerial {
			sub.stepSerial, sub.sentInStep = p.stepSerial, 0
		}
		return sub.sentInStep < sub.prefetch
	}
	return uint32(len(sub.inflight)) < sub.prefetch
}

// nextDeliverable returns the lowest ready offset that may be delivered now,
// dead-lettering expired ones on the way.
func (p *Partition) nextDeliverable() (uint64, bool) {
	for {
		offset, ok := p.peekLowestReady()
		if !ok || offset >= p.durableOffsetEnd {
			return 0, false
		}
		m := p.store.get(offset)
		if m.expiresAtMs != 0 && m.expiresAtMs <= p.nowMs {
			p.stats.TTLExpired++
			p.deadLetter(offset, ReasonExpired)
			continue
		}
		return offset, true
	}
}

func (p *Partition) deliver(sub *subscription, offset uint64) {
	m := p.store.get(offset)
	body, retries, tag := m.body, m.retries, p.nextTag
	if sub.autoAck {
		p.appendEntry(Entry{Kind: EntryAutoAck, Offset: offset, Tag: tag})
		sub.sentInStep++
		p.gate(gated{kind: gatedSettlement, settle: Settlement{Offset: offset, Kind: SettledAcked}})
	} else {
		p.appendEntry(Entry{Kind: EntryLease, Offset: offset, Tag: tag, AtMs: p.nowMs + p.cfg.LeaseMs})
		m.subID = sub.id // volatile: who holds the lease in this process
		sub.inflight[tag] = offset
	}
	p.stats.Delivered++
	if retries > 0 {
		p.stats.Redelivered++
	}
	p.rd.Deliveries = append(p.rd.Deliveries, Delivery{SubID: sub.id, Tag: tag, Offset: offset, Retries: retries, Body: body})
}

// runTimers expires leases, releases delays and expires TTLs that are due.
func (p *Partition) runTimers() {
	budget := p.cfg.ExpiryBatchMax
	for len(p.timers) > 0 && p.timers.top().atMs <= p.nowMs {
		if budget == 0 {
			p.budgetHit = true
			return
		}
		t := p.timers.pop()
		m := p.store.get(t.offset)
		if m == nil || m.dueMs != t.atMs {
			continue // stale: the message moved on since this deadline was set
		}
		switch m.state {
		case stateInflight:
			budget--
			p.expireLease(t.offset, m)
		case stateDelayed:
			budget--
			if m.expiresAtMs != 0 && m.expiresAtMs <= p.nowMs {
				p.stats.TTLExpired++
				p.deadLetter(t.offset, ReasonExpired)
			} else {
				p.appendEntry(Entry{Kind: EntryRelease, Offset: t.offset})
			}
		}
	}
	for len(p.ttls) > 0 && p.ttls.top().atMs <= p.nowMs {
		if budget == 0 {
			p.budgetHit = true
			return
		}
		t := p.ttls.pop()
		m := p.store.get(t.offset)
		if m == nil || m.expiresAtMs != t.atMs {
			continue
		}
		// Inflight: never dropped; expiry is decided when it leaves inflight.
		// Pending dead-letter: already leaving.
		if m.state == stateReady || m.state == stateDelayed {
			budget--
			p.stats.TTLExpired++
			p.deadLetter(t.offset, ReasonExpired)
		}
	}
}

func (p *Partition) expireLease(offset uint64, m *message) {
	if sub := p.subs[m.subID]; sub != nil {
		delete(sub.inflight, m.tag) // its tag is now stale
	}
	p.stats.LeaseExpired++
	p.requeue(offset, CauseLeaseExpired, 0)
}

// nextWakeMs is the earliest deadline the partition waits for (0 = none).
func (p *Partition) nextWakeMs() int64 {
	if p.budgetHit {
		return p.nowMs
	}
	var wake int64
	if len(p.timers) > 0 {
		wake = p.timers.top().atMs
	}
	if len(p.ttls) > 0 && (wake == 0 || p.ttls.top().atMs < wake) {
		wake = p.ttls.top().atMs
	}
	return wake
}
