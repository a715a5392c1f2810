package sim

import (
	"slices"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/core/stream"
)

// What the driver records of a StreamHost's steps for the checker
// (checker/streams.go, DESIGN.md item 8). Invariants:
//   - a step's events are recorded in an order the checker can judge
//     without knowing the core: an applied truncation (SnapshotDone, with
//     the new oldest offset), records appended (payload bytes, publish
//     time), the durable index if it moved, a truncation asked for, then a subscription the
//     step took, deliveries, clamp notices, cursor commits (an auto-ack
//     commit follows the delivery it commits), confirms, and last the
//     subscriptions the step ended;
//   - the driver only observes: nothing here changes what the machines do.

// noteStreamRequest remembers the Subscribe a StreamHost is about to take:
// its start is known only from the step's reply.
func (b *Broker) noteStreamRequest(sh *brokerStreamHost, msg node.Message) {
	sh.pendingSub = nil
	if req, ok := msg.(*node.StreamRequest); ok {
		if in, ok := req.Input.(*stream.Subscribe); ok {
			sh.pendingSub = in
		}
	}
}

func (b *Broker) recordStreamEffects(sh *brokerStreamHost, rd *node.Ready, in node.Input, oldestBefore uint64) {
	ss, rec := sh.shadow, b.w.rec
	base := checker.Event{Node: b.id, Part: ss.part, NowMs: sh.coreNowMs}
	p := sh.m.Partition()
	if p.Oldest() != oldestBefore {
		// Only an applied truncation moves the oldest record.
		ev := base
		ev.Kind, ev.Offset = checker.KindStreamSnapshotDone, p.Oldest()
		if sd, ok := in.(*node.SnapshotDone); ok {
			ev.Index = sd.Index
		}
		rec.add(ev)
	}
	for i := range rd.PersistEntries {
		e := &rd.PersistEntries[i]
		if e.Kind == core.EntryStreamRecord {
			ev := base
			ev.Kind, ev.Offset, ev.Index, ev.MsgID, ev.Headers = checker.KindStreamRecord, e.Offset, e.Index, bodyMsgID(e.Body), dlqHeaders(e.Body)
			if e.Body != nil {
				ev.Bytes = uint64(len(e.Body.Payload))
			}
			ev.AtMs2 = e.AtMs
			rec.add(ev)
			ss.maxAtMs = max(ss.maxAtMs, e.AtMs)
		}
	}
	if d := p.DurableIndex(); d != ss.durableRec {
		ev := base
		ev.Kind, ev.Index = checker.KindStreamDurable, d
		rec.add(ev)
		ss.durableRec = d
	}
	if rd.Snapshot != nil {
		ev := base
		ev.Kind, ev.Index = checker.KindStreamTruncate, rd.Snapshot.Index
		rec.add(ev)
	}
	var confirms []uint64
	subscribed, start := false, uint64(0)
	for i := range rd.Out {
		env := &rd.Out[i]
		replies := []node.Response(nil)
		switch m := env.Msg.(type) {
		case *node.Response:
			replies = []node.Response{*m}
		case *node.Responses:
			replies = m.Items
		}
		for _, r := range replies {
			switch r.Reply.Kind {
			case core.ReplyPublished:
				if env.To.Kind == node.AddrSession {
					confirms = append(confirms, r.Reply.Offset)
				}
			case core.ReplySubscribed:
				subscribed, start = true, r.Reply.Offset
			}
		}
	}
	if in := sh.pendingSub; in != nil && subscribed && p.HasSubscription(in.SubID) {
		ev := base
		ev.Kind, ev.Sub, ev.Offset, ev.Text, ev.AutoAck = checker.KindStreamSubStart, in.SubID, start, in.DurableName, in.AutoAck
		ev.Index, ev.Index2 = p.NextOffset(), p.Oldest()
		for _, cl := range in.Filter {
			ev.Headers = append(ev.Headers, checker.Header{Key: cl.Key, Value: cl.Pattern})
		}
		rec.add(ev)
	}
	sh.pendingSub = nil
	// Notices first: a clamp happens before the step serves, though the
	// StreamHost routes its notices after the deliveries.
	for i := range rd.Out {
		if m, ok := rd.Out[i].Msg.(*node.StreamNotice); ok {
			ev := base
			ev.Kind, ev.Sub, ev.Offset, ev.Index2 = checker.KindStreamNotice, m.Notice.SubID, m.Notice.From, m.Notice.To
			rec.add(ev)
		}
	}
	for i := range rd.Out {
		if m, ok := rd.Out[i].Msg.(*node.StreamDeliveries); ok {
			for j := range m.Items {
				d := &m.Items[j]
				ev := base
				ev.Kind, ev.Sub, ev.Offset, ev.MsgID, ev.Speculative = checker.KindStreamDeliver, m.SubID, d.Offset, bodyMsgID(d.Body), d.Speculative
				rec.add(ev)
				b.w.stats.Deliveries++
			}
			sh.lastDeliveryAtMs = b.w.nowMs
		}
	}
	for i := range rd.PersistEntries {
		e := &rd.PersistEntries[i]
		if e.Kind != core.EntryCursorCommit {
			continue
		}
		for _, c := range e.Cursors {
			ev := base
			ev.Kind, ev.Text, ev.Offset, ev.Index = checker.KindStreamCommit, c.Name, c.Next, e.Index
			rec.add(ev)
		}
	}
	slices.Sort(confirms)
	for _, offset := range confirms {
		ev := base
		ev.Kind, ev.Offset = checker.KindStreamConfirm, offset
		rec.add(ev)
	}
	// Subscriptions the step ended: unsubscribes, and a bounced session's.
	now := p.SubscriptionIDs()
	for _, id := range sh.subs {
		if !slices.Contains(now, id) {
			ev := base
			ev.Kind, ev.Sub = checker.KindStreamSubEnd, id
			rec.add(ev)
		}
	}
	sh.subs = now
}

// recordStreamRecovery records what a stream partition's recovery found:
// the cursors of the scenario's durable names, then its offsets.
func (b *Broker) recordStreamRecovery(ss *streamShadow, p *stream.Partition) {
	base := checker.Event{Node: b.id, Part: ss.part}
	for _, name := range b.w.streamNames {
		if next, ok := p.Cursor(name); ok {
			ev := base
			ev.Kind, ev.Trigger, ev.Index, ev.Text, ev.Offset = checker.KindStreamCommit, "recover", p.LastIndex(), name, next
			b.w.rec.add(ev)
		}
	}
	ev := base
	ev.Kind, ev.Offset, ev.Index, ev.Index2 = checker.KindStreamRecover, p.NextOffset(), p.LastIndex(), p.Oldest()
	b.w.rec.add(ev)
	ev = base
	ev.Kind, ev.Index = checker.KindStreamDurable, p.DurableIndex()
	b.w.rec.add(ev)
	ss.durableRec = p.DurableIndex()
	ss.appended, ss.synced = p.LastIndex(), p.LastIndex()
}
