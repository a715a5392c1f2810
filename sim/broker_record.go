package sim

import (
	"slices"
	"sort"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// What the driver records of a Host's steps for the checker: log entries,
// confirms, deliveries handed to sessions, durable settlements, and the
// subscription starts and ends the Host was asked for. Invariants:
//   - events of one step are recorded in the order of its Ready: entries
//     first (so a lease-ending entry precedes the delivery that reuses its
//     credit), then confirms and deliveries, then settlements;
//   - the driver only observes: nothing here changes what the machines do.

// noteRequest records a subscription start or end a Host is about to take.
func (b *Broker) noteRequest(h *brokerHost, msg node.Message) {
	req, ok := msg.(*node.Request)
	if !ok {
		return
	}
	switch in := req.Input.(type) {
	case *core.Subscribe:
		b.w.rec.add(checker.Event{Kind: checker.KindSubStart, Node: b.id, Part: h.shadow.part, Sub: in.SubID,
			Prefetch: in.Prefetch, AutoAck: in.AutoAck, NowMs: h.coreNowMs})
	case *core.Unsubscribe:
		b.w.rec.add(checker.Event{Kind: checker.KindSubEnd, Node: b.id, Part: h.shadow.part, Sub: in.SubID,
			NowMs: h.coreNowMs, Text: "unsubscribe"})
	}
}

// triggerOf names what a Host was stepped with, as the checker knows
// triggers (a client's nack or an unsubscribe may end a lease early; a
// tick may not).
func triggerOf(msg node.Message) string {
	switch m := msg.(type) {
	case *node.Request:
		switch m.Input.(type) {
		case *core.Publish:
			return "publish"
		case *core.Subscribe:
			return "subscribe"
		case *core.Unsubscribe:
			return "unsubscribe"
		case *core.Ack:
			return "ack"
		case *core.Nack:
			return "nack"
		case *core.PauseSubscription:
			return "pause"
		}
		return "request"
	case *node.StoreDeadLetter:
		return "dead_letter"
	case *node.DeadLetterStored:
		return "dead_letter_done"
	case *node.DeadLetterFailed:
		return "dead_letter_failed"
	case *node.DeclareSettings:
		return "declare"
	}
	return "deliver"
}

// recordConfirm notes a partition's confirm of a publish to a session; the
// step's confirms are recorded together, in offset order, by
// recordConfirms.
func (b *Broker) recordConfirm(h *brokerHost, env *node.Envelope, m *node.Response) {
	if m.Reply.Kind == core.ReplyPublished && env.To.Kind == node.AddrSession {
		h.stepConfirms = append(h.stepConfirms, m.Reply.Offset)
	}
}

// recordConfirms records the step's confirms in offset order. The Host
// batches a step's answers per session, so its envelopes list them
// session by session; they happened at one instant, in the order the
// partition made them durable, which is offset order.
func (b *Broker) recordConfirms(h *brokerHost) {
	slices.Sort(h.stepConfirms)
	for _, offset := range h.stepConfirms {
		b.w.rec.add(checker.Event{Kind: checker.KindConfirm, Node: b.id, Part: h.shadow.part, MsgID: h.shadow.msgID(offset),
			Offset: offset, NowMs: h.coreNowMs})
	}
	h.stepConfirms = h.stepConfirms[:0]
}

func (b *Broker) recordHostEffects(h *brokerHost, rd *node.Ready, trigger string) {
	ps := h.shadow
	h.leaseIndexes = h.leaseIndexes[:0]
	for i := range rd.PersistEntries {
		b.recordEntry(h, &rd.PersistEntries[i], trigger)
	}
	h.stepDeliveries = h.stepDeliveries[:0]
	for i := range rd.Out {
		env := &rd.Out[i]
		switch m := env.Msg.(type) {
		case *node.Response:
			b.recordConfirm(h, env, m)
		case *node.Responses:
			for j := range m.Items {
				b.recordConfirm(h, env, &m.Items[j])
			}
		case *node.Deliveries:
			for j := range m.Items {
				h.stepDeliveries = append(h.stepDeliveries, &m.Items[j])
			}
		case *node.SubscriptionEnded:
			b.w.rec.add(checker.Event{Kind: checker.KindSubEnd, Node: b.id, Part: ps.part, Sub: m.SubID,
				NowMs: h.coreNowMs, Text: "ended by the partition"})
		}
	}
	b.recordConfirms(h)
	b.recordDeliveries(h)
	for _, s := range rd.Settled {
		outcome := checker.OutcomeAcked
		switch s.Kind {
		case core.SettledDiscarded:
			outcome = checker.OutcomeDiscarded
		case core.SettledDeadLettered:
			outcome = checker.OutcomeDeadLettered
		}
		reason := ""
		if s.Reason != core.ReasonNone {
			reason = s.Reason.String()
		}
		b.w.rec.add(checker.Event{Kind: checker.KindSettled, Node: b.id, Part: ps.part, MsgID: ps.msgID(s.Offset),
			Offset: s.Offset, NowMs: h.coreNowMs, Outcome: outcome, Reason: reason})
	}
}

func (b *Broker) recordEntry(h *brokerHost, e *core.Entry, trigger string) {
	ps := h.shadow
	switch e.Kind {
	case core.EntryPublish:
		msgID := bodyMsgID(e.Body)
		for uint64(len(ps.msgIDs)) < e.Offset {
			ps.msgIDs = append(ps.msgIDs, 0)
		}
		if uint64(len(ps.msgIDs)) == e.Offset {
			ps.msgIDs = append(ps.msgIDs, msgID)
		} else {
			ps.msgIDs[e.Offset] = msgID
		}
		b.w.rec.add(checker.Event{Kind: checker.KindAccept, Node: b.id, Part: ps.part, MsgID: msgID, Offset: e.Offset,
			Index: e.Index, NowMs: h.coreNowMs, AtMs2: e.AtMs, Trigger: trigger})
	case core.EntryLease, core.EntryAutoAck:
		h.leaseIndexes = append(h.leaseIndexes, leaseMark{offset: e.Offset, index: e.Index, autoAck: e.Kind == core.EntryAutoAck})
	case core.EntryAck, core.EntryRequeue, core.EntryRelease, core.EntryDeadLetter, core.EntryDiscard, core.EntryDeadLettered:
		b.w.rec.add(checker.Event{Kind: checker.KindEntry, Node: b.id, Part: ps.part, MsgID: ps.msgID(e.Offset),
			Offset: e.Offset, Index: e.Index, NowMs: h.coreNowMs, EntryKind: uint8(e.Kind), Cause: e.Cause,
			Retries: e.Retries, AtMs2: e.AtMs, Trigger: trigger})
	}
}

// recordDeliveries records the step's deliveries in the order the core
// made them: the Host groups them per subscription, and tags are minted in
// delivery order.
func (b *Broker) recordDeliveries(h *brokerHost) {
	ps := h.shadow
	items := h.stepDeliveries
	sort.Slice(items, func(i, j int) bool { return items[i].Tag < items[j].Tag })
	for _, d := range items {
		var index uint64
		autoAck := false
		for _, li := range h.leaseIndexes {
			if li.offset == d.Offset {
				index, autoAck = li.index, li.autoAck
			}
		}
		ev := checker.Event{Kind: checker.KindDeliver, Node: b.id, Part: ps.part, MsgID: ps.msgID(d.Offset),
			Offset: d.Offset, Tag: d.Tag, Sub: d.SubID, Retries: d.Retries, Index: index, NowMs: h.coreNowMs,
			Step: b.stats.Steps, AutoAck: autoAck}
		if ps.part > 0 && b.w.catalogue[ps.part-1].queue.DeadLetterSink && d.Body != nil {
			ev.Headers = dlqHeaders(d.Body)
		}
		b.w.rec.add(ev)
		b.w.stats.Deliveries++
	}
}

// leaseMark is one lease entry of the current step.
type leaseMark struct {
	offset, index uint64
	autoAck       bool
}

func (ps *partShadow) msgID(offset uint64) uint64 {
	if offset < uint64(len(ps.msgIDs)) {
		return ps.msgIDs[offset]
	}
	return 0
}

// recordCohortEnvelope records the cohort messages a machine sends, at the
// moment it sends them (checker/cohorts.go): a session's join and leave of
// its cohort, and the Node's SetOwner to a partition.
func (b *Broker) recordCohortEnvelope(env *node.Envelope) {
	switch m := env.Msg.(type) {
	case *node.CohortJoin:
		b.w.rec.add(checker.Event{Kind: checker.KindCohortJoin, Node: b.id, Part: b.w.partIndex(m.Queue) + 1, Sub: m.SubID,
			Text: m.Member.String(), NowMs: b.nowMs()})
	case *node.CohortLeave:
		b.w.rec.add(checker.Event{Kind: checker.KindCohortLeave, Node: b.id, Part: b.w.partIndex(m.Queue) + 1, Sub: m.SubID,
			Text: m.Member.String(), NowMs: b.nowMs()})
	case *node.SetOwner:
		b.w.rec.add(checker.Event{Kind: checker.KindSetOwner, Node: b.id, Part: b.w.partIndex(env.To.Queue) + 1, Sub: m.SubID,
			Index: m.Generation, NowMs: b.nowMs()})
	}
}
