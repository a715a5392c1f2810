package core

import (
	"strconv"
	"strings"
)

// Operator inspection and dead-letter replay (SPEC 2 "Inspection", SPEC 11).
// Invariants:
//   - a browse only reads: it never changes state, appends nothing, and
//     visits at most BrowseScanMax offsets, so a request over a long settled
//     range costs a bounded step;
//   - an operator completion (Complete) settles only a message nobody holds
//     (ready or delayed): an inflight one belongs to its consumer, whose ack
//     would otherwise hit a stale tag; pending dead-letter copies are the
//     dead-letter protocol's. Its reply leaves only once its entry is
//     durable, so "completed" is never taken back by a crash;
//   - the replay copy of a dead letter is the user's message as published:
//     the broker's stroma.dlq.* headers are dropped, everything else kept.

// BrowseScanMax bounds the offsets one browse step visits (live or not).
// Ranges of settled offsets are skipped a chunk (64 offsets) at a time, so
// this also bounds the step's time.
const BrowseScanMax = 1 << 16

// Complete settles the live message at Offset on an operator's request
// (a redrive completing a dead-letter copy it replayed). It is answered,
// once durable, with ReplyCompleted, or at once with ErrNotCompletable.
type Complete struct {
	NowMs  int64
	Ref    uint64
	Offset uint64
}

func (in *Complete) nowMs() int64 { return in.NowMs }

// ErrNotCompletable refuses a Complete of a message that is settled, held
// by a consumer (inflight) or pending its own dead-lettering.
var ErrNotCompletable = newError(CodeConflict, false, "the message is settled, inflight or being dead-lettered: only a ready or delayed message can be completed")

func (p *Partition) onComplete(in *Complete) {
	m := p.store.get(in.Offset)
	if m == nil || (m.state != stateReady && m.state != stateDelayed) {
		p.replyError(in.Ref, ErrNotCompletable, 0)
		return
	}
	// A discard with no reason: the message leaves with no copy, as a
	// discard-policy dead letter would; its stale ready or timer index
	// entries are skipped when they surface (leaveState).
	p.appendEntry(Entry{Kind: EntryDiscard, Offset: in.Offset, Cause: uint8(ReasonNone)})
	assertTrue(p.store.get(in.Offset) == nil, "a completed message is settled")
	p.gate(gated{kind: gatedSettlement, settle: Settlement{Offset: in.Offset, Kind: SettledDiscarded, Reason: ReasonNone}})
	p.gate(gated{kind: gatedReply, reply: Reply{Ref: in.Ref, Kind: ReplyCompleted, Offset: in.Offset}})
}

// Browse visits, in offset order from from, the offsets below NextOffset:
// each live message (visit gets ok=true) and, when settled is true, each
// settled offset (ok=false, the view holds only the offset). It stops when
// visit returns false, after BrowseScanMax offsets, or at NextOffset, and
// returns the offset to continue from (NextOffset when it reached the end).
func (p *Partition) Browse(from uint64, settled bool, visit func(v MessageView, live bool) bool) uint64 {
	if !settled {
		// Nothing live below the settled frontier: start there.
		from = max(from, p.SettledUntil())
	}
	offset, scanned := from, 0
	for offset < p.nextOffset && scanned < BrowseScanMax {
		if !settled && p.store.chunks[offset>>chunkShift] == nil {
			// A whole settled chunk: skip to the next one (one step of
			// the budget, not 64).
			offset = (offset>>chunkShift + 1) << chunkShift
			scanned++
			continue
		}
		v, live := p.Message(offset)
		if !live {
			v = MessageView{Offset: offset}
		}
		scanned++
		if live || settled {
			if !visit(v, live) {
				return offset
			}
		}
		offset++
	}
	next := min(offset, p.nextOffset)
	assertTrue(next >= from || from > p.nextOffset, "a browse never goes back")
	return next
}

// DeadLetterInfo is what a dead-letter copy's stroma.dlq.* headers say.
type DeadLetterInfo struct {
	Source       DLQTarget // the queue it left (Group "" = the default group)
	SourceOffset uint64
	// SourcePartition is the partition the copy left, when the copy says
	// (HasSourcePartition; copies from before the header do not).
	SourcePartition    uint32
	HasSourcePartition bool
	Reason             string
	DeadLetteredMs     int64
	RetryCount         uint32
	HasSource          bool // source_topic present and a valid name
}

// ReadDeadLetter reads the broker's headers of a dead-letter copy.
func ReadDeadLetter(b *Body) DeadLetterInfo {
	var info DeadLetterInfo
	for _, h := range b.Headers {
		switch h.Key {
		case HeaderDLQSourceTopic:
			info.Source.Topic = h.Value
		case HeaderDLQSourceGroup:
			info.Source.Group = NormalizeGroup(h.Value)
		case HeaderDLQSourceOffset:
			info.SourceOffset, _ = strconv.ParseUint(h.Value, 10, 64)
		case HeaderDLQSourcePartition:
			if n, err := strconv.ParseUint(h.Value, 10, 32); err == nil {
				info.SourcePartition, info.HasSourcePartition = uint32(n), true
			}
		case HeaderDLQReason:
			info.Reason = h.Value
		case HeaderDLQDeadLetteredAtMs:
			info.DeadLetteredMs, _ = strconv.ParseInt(h.Value, 10, 64)
		case HeaderDLQRetryCount:
			n, _ := strconv.ParseUint(h.Value, 10, 32)
			info.RetryCount = uint32(n)
		}
	}
	// A copy whose source name is missing or invalid (published by hand
	// into a DLQ, or from an older broker) has nowhere to go back to.
	info.HasSource = ValidateName(info.Source.Topic) == nil &&
		(info.Source.Group == "" || ValidateName(info.Source.Group) == nil)
	return info
}

// ReplayBody is the body a replay publishes back to the source: payload,
// content type and user headers of the copy, without the broker's
// stroma.dlq.* headers (a replayed message is a fresh publish: it must pass
// the reserved-header rule like any client's). Payload and Ref are shared.
func ReplayBody(b *Body) *Body {
	headers := make([]Header, 0, len(b.Headers))
	for _, h := range b.Headers {
		if strings.HasPrefix(h.Key, "stroma.dlq.") {
			continue
		}
		headers = append(headers, h)
	}
	out := &Body{Payload: b.Payload, Headers: headers, ContentType: b.ContentType, PublishedMs: b.PublishedMs, Ref: b.Ref}
	assertTrue(len(out.Headers) <= len(b.Headers), "a replay copy only drops headers")
	return out
}

// ErrQueueUnknown answers an operator request about a queue that was never
// declared (an operator's look never creates one, unlike a client's Open).
var ErrQueueUnknown = newError(CodeNotFound, false, "no such queue: check the topic and group (GET /admin/api/queues lists them)")
