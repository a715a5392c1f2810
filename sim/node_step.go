package sim

import (
	"fmt"
	"strconv"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
)

// Stepping a partition and carrying out its Ready. Invariants:
//   - Ready effects are handled in contract order: Persist (to the page
//     cache, in order), then replies, settlements, deliveries and
//     dead-letter copies, then the wake-up;
//   - history events of one step are recorded in the same order, so a
//     lease-ending entry always precedes the delivery that reuses the credit
//     or the message it freed;
//   - nothing from a Ready is kept past the next Step but copies.

// headerMsgID carries a message's client-visible identity.
const headerMsgID = "x-msg-id"

func (n *Node) step(ps *nodePart, in core.Input, trigger string) {
	assert(n.up && ps.m != nil, "only a running node steps its partitions")
	n.stepSerial++
	n.stats.Steps++
	if now := inputNowMs(in); now > ps.coreNowMs {
		ps.coreNowMs = now
	}
	rd := ps.m.Step(in)
	if n.w.checkInvariants {
		if err := ps.m.CheckInvariants(); err != nil {
			n.w.abort(fmt.Sprintf("core invariant broken on node %d %s after %s: %v", n.id, ps.cfg.Queue, trigger, err))
			return
		}
	}
	n.persist(ps, rd, trigger)
	n.routeReplies(ps, rd)
	n.routeSettled(ps, rd)
	n.routeDeliveries(ps, rd)
	n.forwardDeadLetters(ps, rd)
	n.scheduleWake(ps, rd.NextWakeMs)
}

func inputNowMs(in core.Input) int64 {
	switch in := in.(type) {
	case *core.Tick:
		return in.NowMs
	case *core.Persisted:
		return in.NowMs
	case *core.Declare:
		return in.NowMs
	case *core.SetGlobalDLQ:
		return in.NowMs
	case *core.Publish:
		return in.NowMs
	case *core.Subscribe:
		return in.NowMs
	case *core.Unsubscribe:
		return in.NowMs
	case *core.Ack:
		return in.NowMs
	case *core.Nack:
		return in.NowMs
	case *core.DeadLetterDone:
		return in.NowMs
	}
	panic("fibril/sim invariant violated: unknown input type")
}

// persist writes the step's entries to the page cache and records the ones
// the checkers follow.
func (n *Node) persist(ps *nodePart, rd *core.Ready, trigger string) {
	ps.leaseIndexes = ps.leaseIndexes[:0]
	if len(rd.Persist) == 0 {
		return
	}
	for i := range rd.Persist {
		e := &rd.Persist[i]
		assert(e.Index == ps.appendedIndex+1, "the core hands out contiguous indexes")
		ps.appendedIndex = e.Index
		n.encodeBuf = core.AppendEntry(n.encodeBuf[:0], e)
		n.disk.Append(uint16(ps.idx), n.encodeBuf)
		ps.shadow = append(ps.shadow, *e)
		n.stats.Entries++
		n.recordEntry(ps, e, trigger)
	}
	n.wantSync()
}

func (n *Node) recordEntry(ps *nodePart, e *core.Entry, trigger string) {
	part := ps.idx + 1
	switch e.Kind {
	case core.EntryPublish:
		msgID := bodyMsgID(e.Body)
		for uint64(len(ps.msgIDs)) < e.Offset {
			ps.msgIDs = append(ps.msgIDs, 0) // never happens with dense offsets; keeps indexing safe
		}
		if uint64(len(ps.msgIDs)) == e.Offset {
			ps.msgIDs = append(ps.msgIDs, msgID)
		} else {
			ps.msgIDs[e.Offset] = msgID
		}
		n.w.rec.add(checker.Event{Kind: checker.KindAccept, Node: n.id, Part: part, MsgID: msgID, Offset: e.Offset,
			Index: e.Index, NowMs: ps.coreNowMs, AtMs2: e.AtMs, Trigger: trigger})
	case core.EntryLease, core.EntryAutoAck:
		ps.leaseIndexes = append(ps.leaseIndexes, offsetIndex{offset: e.Offset, index: e.Index})
	case core.EntryAck, core.EntryRequeue, core.EntryRelease, core.EntryDeadLetter, core.EntryDiscard, core.EntryDeadLettered:
		n.w.rec.add(checker.Event{Kind: checker.KindEntry, Node: n.id, Part: part, MsgID: ps.msgID(e.Offset),
			Offset: e.Offset, Index: e.Index, NowMs: ps.coreNowMs, EntryKind: uint8(e.Kind), Cause: e.Cause,
			Retries: e.Retries, AtMs2: e.AtMs, Trigger: trigger})
	}
}

func (ps *nodePart) msgID(offset uint64) uint64 {
	if offset < uint64(len(ps.msgIDs)) {
		return ps.msgIDs[offset]
	}
	return 0
}

// bodyMsgID reads the x-msg-id header (0 when absent or malformed).
func bodyMsgID(b *core.Body) uint64 {
	for _, h := range b.Headers {
		if h.Key == headerMsgID {
			id, err := strconv.ParseUint(h.Value, 10, 64)
			if err != nil {
				return 0
			}
			return id
		}
	}
	return 0
}

func (n *Node) routeReplies(ps *nodePart, rd *core.Ready) {
	for i := range rd.Replies {
		r := &rd.Replies[i]
		ref := n.refs[r.Ref]
		if ref == nil {
			continue // ref 0 (dead-letter completions) or a ref of a finished request
		}
		switch ref.kind {
		case refPublish:
			n.replyPublish(ps, ref, r)
			delete(n.refs, r.Ref)
		case refSubscribe, refUnsubscribe:
			if r.Kind == core.ReplyError {
				ref.failed = r.Err.Error()
			}
		case refSettle:
			if r.Kind == core.ReplyError && r.Tag != 0 {
				ref.staleTags = append(ref.staleTags, r.Tag)
			} else if r.Kind == core.ReplyError {
				ref.failed = r.Err.Error()
			}
		case refDeclare:
			delete(n.refs, r.Ref)
		case refDeadLetter:
			n.deadLetterStored(ref, r)
			delete(n.refs, r.Ref)
		}
	}
}

func (n *Node) replyPublish(ps *nodePart, ref *nodeRef, r *core.Reply) {
	if r.Kind == core.ReplyError {
		n.reply(ref.conn, &message{op: ref.op, errText: r.Err.Error()})
		return
	}
	assert(r.Kind == core.ReplyPublished, "a publish is answered by a confirm or an error")
	n.w.rec.add(checker.Event{Kind: checker.KindConfirm, Node: n.id, Part: ps.idx + 1, MsgID: ps.msgID(r.Offset),
		Offset: r.Offset, NowMs: ps.coreNowMs})
	n.reply(ref.conn, &message{op: ref.op, ok: true, offset: r.Offset})
}

func (n *Node) routeSettled(ps *nodePart, rd *core.Ready) {
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
		n.w.rec.add(checker.Event{Kind: checker.KindSettled, Node: n.id, Part: ps.idx + 1, MsgID: ps.msgID(s.Offset),
			Offset: s.Offset, NowMs: ps.coreNowMs, Outcome: outcome, Reason: reason})
	}
}

func (n *Node) routeDeliveries(ps *nodePart, rd *core.Ready) {
	for i := range rd.Deliveries {
		d := rd.Deliveries[i] // a copy: the Ready is reused by the next Step
		if d.Body = n.loadStored(ps, d.Offset, d.Body); d.Body == nil {
			return
		}
		var index uint64
		autoAck := false
		for _, li := range ps.leaseIndexes {
			if li.offset == d.Offset {
				index = li.index
			}
		}
		sub := n.subs[d.SubID]
		if sub != nil {
			autoAck = sub.autoAck
		}
		ev := checker.Event{Kind: checker.KindDeliver, Node: n.id, Part: ps.idx + 1, MsgID: ps.msgID(d.Offset),
			Offset: d.Offset, Tag: d.Tag, Sub: d.SubID, Retries: d.Retries, Index: index, NowMs: ps.coreNowMs,
			Step: n.stepSerial, AutoAck: autoAck}
		if ps.spec.queue.DeadLetterSink {
			ev.Headers = dlqHeaders(d.Body)
		}
		n.w.rec.add(ev)
		n.w.stats.Deliveries++
		if sub == nil || sub.conn.closedAtNode {
			continue // recorded: the core delivered it, whoever should have got it
		}
		n.w.net.send(sub.conn, toClient, &message{kind: msgDelivery, part: ps.idx, sub: d.SubID, delivery: d})
	}
}

func dlqHeaders(b *core.Body) []checker.Header {
	var out []checker.Header
	for _, h := range b.Headers {
		out = append(out, checker.Header{Key: h.Key, Value: h.Value})
	}
	return out
}
