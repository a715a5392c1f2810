package core

import "strconv"

// Settlement decisions: ack, retry, retry-after, fail, and the dead-letter
// policy. Invariants:
//   - a delivery tag settles at most once: it leaves its subscription's
//     inflight map before any entry is appended, so a repeated or late tag is
//     a typed error (ErrStaleTag), never a second settle;
//   - retries only count up, and a message past MaxRetries or failed follows
//     the dead-letter policy;
//   - an expired message is never dropped while inflight: expiry is decided
//     when it leaves inflight.

func (p *Partition) settleTarget(ref, subID uint64, tags []uint64) *subscription {
	sub := p.subs[subID]
	switch {
	case sub == nil:
		p.replyError(ref, ErrUnknownSubscription, 0)
		return nil
	case len(tags) > p.cfg.SettleBatchMax:
		p.replyError(ref, ErrBatchTooLarge, 0)
		return nil
	case sub.autoAck:
		p.replyError(ref, ErrAutoAckSubscription, 0)
		return nil
	}
	return sub
}

// takeTag removes tag from sub and returns its offset, or reports it stale.
func (p *Partition) takeTag(ref uint64, sub *subscription, tag uint64) (uint64, bool) {
	offset, ok := sub.inflight[tag]
	if !ok {
		p.stats.StaleSettles++
		p.replyError(ref, ErrStaleTag, tag)
		return 0, false
	}
	delete(sub.inflight, tag)
	m := p.store.get(offset)
	assertTrue(m != nil && m.state == stateInflight, "a held tag points at an inflight message")
	assertTrue(m.tag == tag && m.subID == sub.id, "a held tag is the message's current lease")
	return offset, true
}

func (p *Partition) onAck(in *Ack) {
	sub := p.settleTarget(in.Ref, in.SubID, in.Tags)
	if sub == nil {
		return
	}
	for _, tag := range in.Tags {
		offset, ok := p.takeTag(in.Ref, sub, tag)
		if !ok {
			continue
		}
		p.appendEntry(Entry{Kind: EntryAck, Offset: offset})
		p.stats.Acked++
		p.gate(gated{kind: gatedSettlement, settle: Settlement{Offset: offset, Kind: SettledAcked}})
	}
}

func (p *Partition) onNack(in *Nack) {
	if !in.Requeue && in.NotBeforeMs != 0 {
		p.replyError(in.Ref, ErrNotBeforeWithoutRetry, 0) // nothing is settled
		return
	}
	sub := p.settleTarget(in.Ref, in.SubID, in.Tags)
	if sub == nil {
		return
	}
	for _, tag := range in.Tags {
		offset, ok := p.takeTag(in.Ref, sub, tag)
		if !ok {
			continue
		}
		if in.Requeue {
			p.requeue(offset, CauseNack, in.NotBeforeMs)
		} else {
			p.deadLetter(offset, ReasonTerminalNack)
		}
	}
}

// requeue takes an inflight message out of its lease: back to ready (or
// delayed until notBeforeMs), or, when expired or out of retries, to the
// dead-letter policy. Every requeue counts as a delivery attempt, whatever
// its cause, so a message that kills its consumer still reaches the policy.
func (p *Partition) requeue(offset uint64, cause uint8, notBeforeMs int64) {
	m := p.store.get(offset)
	assertTrue(m != nil && m.state == stateInflight, "only an inflight message is requeued")
	switch {
	case m.expiresAtMs != 0 && m.expiresAtMs <= p.nowMs:
		p.stats.TTLExpired++
		p.deadLetter(offset, ReasonExpired)
		return
	case m.retries >= p.settings.MaxRetries:
		p.deadLetter(offset, ReasonRetriesExhausted)
		return
	}
	if notBeforeMs <= p.nowMs {
		notBeforeMs = 0
	}
	p.appendEntry(Entry{Kind: EntryRequeue, Offset: offset, Retries: m.retries + 1, Cause: cause, AtMs: notBeforeMs})
	p.stats.Retried++
}

// deadLetter applies the queue's policy to a message leaving for good.
func (p *Partition) deadLetter(offset uint64, reason DLQReason) {
	var target *DLQTarget
	switch p.settings.DLQ.Kind {
	case DLQCustom:
		t := p.settings.DLQ.Target
		target = &t
	case DLQGlobal:
		target = p.globalDLQ // nil: no global target configured, so discard
	}
	if target == nil {
		p.appendEntry(Entry{Kind: EntryDiscard, Offset: offset, Cause: uint8(reason)})
		p.stats.Discarded++
		p.gate(gated{kind: gatedSettlement, settle: Settlement{Offset: offset, Kind: SettledDiscarded, Reason: reason}})
		return
	}
	p.appendEntry(Entry{Kind: EntryDeadLetter, Offset: offset, Cause: uint8(reason), AtMs: p.nowMs, Target: target})
	p.gate(gated{kind: gatedDeadLetter, offset: offset})
}

func (p *Partition) onDeadLetterDone(in *DeadLetterDone) {
	m := p.store.get(in.Offset)
	if m == nil || m.state != statePendingDLQ {
		p.replyError(0, ErrDeadLetterNotPending, 0) // a repeated completion is harmless
		return
	}
	reason := m.reason
	p.appendEntry(Entry{Kind: EntryDeadLettered, Offset: in.Offset})
	p.stats.DeadLettered++
	p.gate(gated{kind: gatedSettlement, settle: Settlement{Offset: in.Offset, Kind: SettledDeadLettered, Reason: reason}})
}

// emitDeadLetter builds the dead-letter copy: user headers kept, stroma.dlq.*
// added (PROTOCOL.md §7.4).
func (p *Partition) emitDeadLetter(offset uint64, m *message) {
	src := m.body
	headers := make([]Header, 0, len(src.Headers)+7)
	headers = append(headers, src.Headers...)
	headers = append(headers, Header{HeaderDLQSourceTopic, p.cfg.Queue.Topic})
	if p.cfg.Queue.Group != "" {
		headers = append(headers, Header{HeaderDLQSourceGroup, p.cfg.Queue.Group})
	}
	headers = append(headers,
		Header{HeaderDLQSourceOffset, strconv.FormatUint(offset, 10)},
		Header{HeaderDLQSourcePartition, strconv.FormatUint(uint64(p.cfg.Queue.Partition), 10)},
		Header{HeaderDLQRetryCount, strconv.FormatUint(uint64(m.retries), 10)},
		Header{HeaderDLQReason, m.reason.String()},
		Header{HeaderDLQDeadLetteredAtMs, strconv.FormatInt(m.dueMs, 10)},
	)
	body := &Body{Payload: src.Payload, Headers: headers, ContentType: src.ContentType, PublishedMs: src.PublishedMs, Ref: src.Ref}
	p.rd.DeadLetters = append(p.rd.DeadLetters, DeadLetter{Offset: offset, Target: p.dlqTargets[offset], Reason: m.reason, Body: body})
}

// resendPendingDeadLetters re-emits, after recovery, every copy whose
// completion was not logged: at least once into the target.
func (p *Partition) resendPendingDeadLetters() {
	p.store.forEach(func(offset uint64, m *message) {
		if m.state == statePendingDLQ {
			p.emitDeadLetter(offset, m)
		}
	})
}
