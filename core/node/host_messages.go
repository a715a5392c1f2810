package node

import "github.com/fibril-go/fibril/core"

// The Host's side of the operator message requests (msg_messages.go).
// Invariants:
//   - a browse, a dead-letter read and a scan only read the partition
//     (core views): no entry, no state change, answered in the same step;
//   - a page is bounded by its limit (at most BrowseItemsMax) and by
//     BrowseAnswerBytesMax of header and preview bytes, and a scan by
//     core.BrowseScanMax offsets per step: the answer says where to go on;
//   - an operator publish or completion answers only once durable (the
//     core's gate), through a Ref of its own kind whose token is the
//     operator's request number (an AdminAddr is its number alone);
//   - a replay copy is a client-grade publish: System is never set, so the
//     reserved-header rule holds for what an operator sends back.

// Kinds of Refs an operator request waits on.
const (
	refAdminPublish  hostRefKind = 3 // OperatorPublish: token = the request number
	refAdminComplete hostRefKind = 4 // CompleteMessage: token = the request number
)

// onOperator handles a relayed operator request.
func (h *Host) onOperator(from Address, msg Message) {
	assertHold(from == NodeAddr(), "operator requests are relayed by the Node")
	switch m := msg.(type) {
	case *BrowseMessages:
		h.send(m.ReplyTo, h.browse(m))
	case *ReadDeadLetters:
		h.send(m.ReplyTo, h.readDeadLetters(m))
	case *ScanDeadLetters:
		h.send(m.ReplyTo, h.scanDeadLetters(m))
	case *OperatorPublish:
		assertHold(m.ReplyTo.Kind == AddrAdmin && m.Body != nil, "an operator publish has a body and a waiter")
		if m.Body.IsStored() {
			// The driver reads a replayed copy back before it leaves the
			// DLQ's partition; a ref of another log cannot go into this one.
			h.send(m.ReplyTo, &OperatorPublished{Queue: h.queue, Err: core.ErrDeadLetterUnresolved})
			return
		}
		ref := h.newRef(hostRef{kind: refAdminPublish, token: m.ReplyTo.Request})
		// Confirm: answered once durable (the ref stays until then).
		h.stepCore(&core.Publish{NowMs: h.nowMs, Ref: ref, Confirm: true, Body: m.Body})
	case *CompleteMessage:
		assertHold(m.ReplyTo.Kind == AddrAdmin, "a completion has a waiter")
		ref := h.newRef(hostRef{kind: refAdminComplete, token: m.ReplyTo.Request})
		h.stepCore(&core.Complete{NowMs: h.nowMs, Ref: ref, Offset: m.Offset})
	}
}

// routeOperatorReply answers the operator waiting on ref for r.
func (h *Host) routeOperatorReply(ref hostRef, r *core.Reply) {
	to := AdminAddr(ref.token)
	switch ref.kind {
	case refAdminPublish:
		assertHold(r.Kind == core.ReplyPublished || r.Kind == core.ReplyError, "a publish answers with a confirm or an error")
		out := &OperatorPublished{Queue: h.queue, Offset: r.Offset}
		if r.Kind == core.ReplyError {
			out.Err = r.Err
		}
		h.send(to, out)
	case refAdminComplete:
		assertHold(r.Kind == core.ReplyCompleted || r.Kind == core.ReplyError, "a completion answers once or fails")
		out := &Completed{Offset: r.Offset}
		if r.Kind == core.ReplyError {
			out.Err = r.Err
		}
		h.send(to, out)
	}
}

// browse builds one page of a BrowseMessages.
func (h *Host) browse(m *BrowseMessages) *MessagesPage {
	limit := min(max(int(m.Limit), 1), BrowseItemsMax)
	preview := min(m.PreviewBytes, BrowsePreviewBytesMax)
	page := &MessagesPage{Queue: h.queue, Partitions: m.Partitions, NextOffset: h.p.NextOffset()}
	bytes := 0
	page.Next = h.p.Browse(m.From, m.Settled, func(v core.MessageView, live bool) bool {
		if live && !m.States.Has(v.State) {
			return true
		}
		if len(page.Items) == limit {
			return false // Next is this offset
		}
		item := BrowseItem{MessageView: v, Live: live}
		cost := 0
		if live {
			item.PayloadLen = uint32(payloadLen(v.Body))
			cost = headerBytes(v.Body)
			if m.Payload {
				item.PreviewBytes = uint32(min(uint64(preview), uint64(payloadLen(v.Body))))
				cost += int(item.PreviewBytes)
			}
		}
		// The first item is always taken, so a page always moves on.
		if len(page.Items) > 0 && bytes+cost > BrowseAnswerBytesMax {
			return false
		}
		bytes += cost
		page.Items = append(page.Items, item)
		return true
	})
	assertHold(len(page.Items) <= limit, "a page holds at most its limit")
	assertHold(page.Next >= m.From || len(page.Items) == 0, "a page never goes back")
	return page
}

// readDeadLetters says, per offset asked, what a replay publishes.
func (h *Host) readDeadLetters(m *ReadDeadLetters) *DeadLetterReads {
	assertHold(len(m.Offsets) <= DeadLetterReadsMax, "a replay reads a bounded number of offsets")
	out := &DeadLetterReads{Queue: h.queue, Items: make([]DeadLetterRead, 0, len(m.Offsets)), Next: h.p.NextOffset()}
	for _, offset := range m.Offsets {
		v, ok := h.p.Message(offset)
		switch {
		case !ok && offset >= h.p.NextOffset():
			out.Items = append(out.Items, DeadLetterRead{Offset: offset, Skip: SkipMissing})
		case !ok:
			out.Items = append(out.Items, DeadLetterRead{Offset: offset, Skip: SkipInactive})
		default:
			out.Items = append(out.Items, replayRead(offset, v.Body))
		}
	}
	return out
}

// scanDeadLetters finds a redrive's next page of matching copies: ready or
// delayed (a consumer holds an inflight one), in offset order.
func (h *Host) scanDeadLetters(m *ScanDeadLetters) *DeadLetterReads {
	limit := min(max(int(m.Limit), 1), DeadLetterReadsMax)
	out := &DeadLetterReads{Queue: h.queue}
	out.Next = h.p.Browse(m.From, false, func(v core.MessageView, _ bool) bool {
		if v.State != core.MessageReady && v.State != core.MessageDelayed {
			return true
		}
		read := replayRead(v.Offset, v.Body)
		if read.Skip != "" || !m.Filter.Matches(read.Info) {
			return true
		}
		if len(out.Items) == limit {
			return false
		}
		out.Items = append(out.Items, read)
		return true
	})
	// A scan from beyond the end (an operator's from_offset) is at its end
	// there: Next never goes back behind what was asked.
	out.Next = max(out.Next, m.From)
	out.Done = out.Next >= h.p.NextOffset()
	assertHold(len(out.Items) <= limit, "a scan page holds at most its limit")
	return out
}

// replayRead is what a replay does with a live dead-letter copy.
func replayRead(offset uint64, body *core.Body) DeadLetterRead {
	info := core.ReadDeadLetter(body)
	if !info.HasSource {
		return DeadLetterRead{Offset: offset, Skip: SkipNoSource, Info: info}
	}
	return DeadLetterRead{Offset: offset, Info: info, Body: core.ReplayBody(body)}
}

// Matches says whether a copy's headers pass the filter.
func (f DeadLetterFilter) Matches(info core.DeadLetterInfo) bool {
	switch {
	case f.Source.Topic != "" && info.Source.Topic != f.Source.Topic:
		return false
	case f.SourceGroup && info.Source.Group != core.NormalizeGroup(f.Source.Group):
		return false
	case f.Reason != "" && info.Reason != f.Reason:
		return false
	case info.DeadLetteredMs < f.FromMs:
		return false
	case f.ToMs != 0 && info.DeadLetteredMs > f.ToMs:
		return false
	}
	return true
}

// payloadLen is a body's payload length, in memory or stored.
func payloadLen(b *core.Body) int {
	if b.IsStored() {
		return int(b.Ref.LengthBytes)
	}
	return len(b.Payload)
}

// headerBytes counts a body's header keys and values.
func headerBytes(b *core.Body) int {
	n := 0
	for _, hd := range b.Headers {
		n += len(hd.Key) + len(hd.Value)
	}
	return n
}
