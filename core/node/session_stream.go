package node

// Streams as a session sees them (PROTOCOL 5.11, 5.14, 7.5; docs/streams.md
// "Through the node"): DECLARE_PLEXUS, SUBSCRIBE_STREAM, DELIVER of stream
// records, ACK of them, and the credit that bounds what a stream partition
// hands out. Invariants:
//   - one stream subscription per (session, stream partition), as for
//     queues (an ACK names only the partition); queue and stream
//     subscriptions together stay within SubscriptionsPerSessionMax;
//   - a stream subscription's DELIVER carries delivery_tag = offset, the
//     record's headers and fibril.speculative: 1 when speculative, and
//     goes out only once SUBSCRIBE_OK did, behind an open gate;
//   - a record is credited back to its partition exactly once, only once
//     its frame is queued on the connection, and only while the outbox is
//     at most half full and within StreamCreditOutboxBytesMax (owed credit
//     waits for Written): a reader that does not read stops its
//     subscriptions, never grows the outbox; a dormant
//     session credits nothing and drops what arrives (the client
//     resubscribes);
//   - held records (announcement or gate pending) stay within the
//     partition's window (SubWindowMax) per subscription;
//   - stream subscriptions are never reconciled nor in the skeleton: an
//     Attach (a resume) ends them all, and so does the session's end;
//     unannounced ones go with their attachment (nobody knows their id).

import (
	"fmt"
	"slices"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/transport/wire"
)

const (
	msgNackOnStream   = "NACK on a stream subscription: streams have only ACK (PROTOCOL 7.5)"
	msgDelayedStream  = "PUBLISH_DELAYED to a stream: streams have no delayed delivery"
	msgQueueOpOnTopic = "the topic is a stream here: use SUBSCRIBE_STREAM"
)

// streamSub is one stream subscription of the session.
type streamSub struct {
	id            uint64
	key           core.QueueID // (topic, "", partition)
	prefetch      uint32       // echoed, not enforced (PROTOCOL 5.11)
	subscribeSent bool
	active        bool // the partition accepted it
	announced     bool // SUBSCRIBE_OK went out
	token         uint64
	held          []stream.Delivery
	owed          int // records queued on the connection, not yet credited
}

// handleDeclarePlexus: the checks that need no catalogue, then
// DeclareStream to the Node, which answers once the stream is durable.
func (s *Session) handleDeclarePlexus(requestID uint64, m *wire.DeclarePlexus) {
	if core.ValidateName(m.Topic) != nil {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: fmt.Sprintf("invalid topic %q: %s", m.Topic, msgNamePattern)})
		return
	}
	count := uint32(1) // absent means 1, minimum 1 (PROTOCOL 5.14)
	if m.PartitionCount.Present && m.PartitionCount.Value > 1 {
		count = m.PartitionCount.Value
	}
	if count > s.cfg.PartitionsPerQueueMax {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid,
			Message: fmt.Sprintf("partition_count %d exceeds the limit of %d", count, s.cfg.PartitionsPerQueueMax)})
		return
	}
	if len(s.pending) >= pendingOpsMax {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInternal, Message: msgTooManyPending})
		return
	}
	// Absent retention bounds are unbounded (0); replication_factor has no
	// meaning standalone.
	msg := &DeclareStream{Token: s.newToken(), Topic: m.Topic, Settings: core.StreamSettings{
		Tier: uint8(m.Durability), MaxAgeMs: m.RetentionAgeMsMax.Value, MaxBytes: m.RetentionBytesMax.Value,
		MaxRecords: m.RetentionRecordsMax.Value, PartitionCount: count}}
	s.pending[msg.Token] = pendingOp{kind: opDeclareStream, gen: s.gen, requestID: requestID}
	s.out(NodeAddr(), msg)
}

// handleSubscribeStream: PROTOCOL 5.11's checks a standalone broker makes,
// then Subscribe to the stream partition (404 from the Node when the stream
// was never declared); SUBSCRIBE_OK waits for the partition's answer.
func (s *Session) handleSubscribeStream(requestID uint64, m *wire.SubscribeStream) {
	refuse := func(code wire.ErrorCode, msg string) {
		s.reply(wire.OpSubscribeErr, requestID, &wire.ErrorBody{Code: code, Message: msg})
	}
	if core.ValidateName(m.Topic) != nil {
		refuse(wire.CodeInvalid, fmt.Sprintf("invalid topic %q: %s", m.Topic, msgNamePattern))
		return
	}
	q := core.QueueID{Topic: m.Topic, Partition: m.Partition}
	if s.streamSubs[q] != nil || s.subs[q] != nil {
		refuse(wire.CodeConflict, "already subscribed")
		return
	}
	if refusal := s.subscriptionRoom(); refusal != "" {
		refuse(wire.CodeInternal, refusal)
		return
	}
	s.subSeq++
	sub := &streamSub{id: uint64(s.init.ID)<<subSeqBits | s.subSeq, key: q, prefetch: m.Prefetch}
	in := &stream.Subscribe{SubID: sub.id, Start: stream.Start{Kind: stream.StartKind(m.Start.Kind), Value: m.Start.Value},
		AutoAck: m.AutoAck}
	if m.DurableName.Present {
		in.DurableName = m.DurableName.Value
	}
	for _, c := range m.Filter {
		in.Filter = append(in.Filter, stream.Clause{Key: c.Key, Pattern: c.Value})
	}
	s.streamSubs[q], s.streamSubsByID[sub.id] = sub, sub
	s.rd.Counted.SubsOpened++
	token := s.newToken()
	s.pending[token] = pendingOp{kind: opStreamSubscribe, gen: s.gen, requestID: requestID, queue: q, subID: sub.id}
	sub.subscribeSent, sub.token = true, token
	s.toPartition(q, queuedRequest{token: token, kind: opStreamSubscribe, sinput: in})
}

// subscriptionRoom says why no subscription may be added ("": one may).
func (s *Session) subscriptionRoom() string {
	switch {
	case len(s.pending) >= pendingOpsMax:
		return msgTooManyPending
	case len(s.subs)+len(s.streamSubs) >= s.cfg.SubscriptionsPerSessionMax:
		return fmt.Sprintf("too many subscriptions on this session (limit %d)", s.cfg.SubscriptionsPerSessionMax)
	case s.subSeq+1 >= 1<<subSeqBits:
		return "this session has used up its subscription ids: reconnect without resuming"
	}
	return ""
}

// streamSettle finds the stream subscription an ACK or NACK names (nil:
// none, or a queue's).
func (s *Session) streamSettle(topic string, group wire.Optional[string], partition uint32) *streamSub {
	if len(s.streamSubs) == 0 || group.Present {
		return nil
	}
	sub := s.streamSubs[core.QueueID{Topic: topic, Partition: partition}]
	if sub == nil || !sub.subscribeSent {
		return nil
	}
	return sub
}

// ackStream routes an ACK of stream records (tags are offsets); like a
// queue ACK it is never answered.
func (s *Session) ackStream(sub *streamSub, tags []uint64) {
	s.toPartition(sub.key, queuedRequest{sinput: &stream.Ack{SubID: sub.id, Offsets: tags}})
}

// onStreamSubscribed: the partition accepted a SUBSCRIBE_STREAM.
func (s *Session) onStreamSubscribed(op pendingOp) {
	sub := s.streamSubsByID[op.subID]
	if sub == nil {
		// Ended while the subscribe was on its way: hand it back.
		s.out(PartitionAddr(op.queue), &StreamRequest{Input: &stream.Unsubscribe{SubID: op.subID}})
		s.replyError(op.gen, wire.OpSubscribeErr, op.requestID, wire.CodeInternal, msgSubscriptionGone)
		return
	}
	sessionAssert(op.gen == s.gen && s.conn != 0, "a stream subscribe answered after its attachment went")
	sub.active = true
	s.replyOn(op.gen, wire.OpSubscribeOk, op.requestID, &wire.SubscribeOk{SubID: sub.id, Topic: sub.key.Topic,
		Partition: sub.key.Partition, Prefetch: sub.prefetch})
	if s.streamSubsByID[sub.id] != sub {
		return // the answer overflowed the outbox: the cut dropped it
	}
	sub.announced = true
	s.flushStreamSub(sub)
}

// onStreamDeliveries encodes stream records into DELIVER frames, holds them
// until they may go out, or drops them while dormant.
func (s *Session) onStreamDeliveries(m *StreamDeliveries) {
	sub := s.streamSubsByID[m.SubID]
	if sub == nil || sub.key != m.Stream {
		s.out(PartitionAddr(m.Stream), &StreamRequest{Input: &stream.Unsubscribe{SubID: m.SubID}})
		return
	}
	if s.conn == 0 {
		return // dormant: never credited; the resume ends the subscription
	}
	sub.held = append(sub.held, m.Items...)
	s.flushStreamSub(sub)
}

// flushStreamSub sends what sub holds while it may, then credits.
func (s *Session) flushStreamSub(sub *streamSub) {
	for len(sub.held) > 0 && s.conn != 0 && s.gateOpen && sub.announced {
		if !s.encodeStreamDeliver(sub, &sub.held[0]) {
			return // cut: the session is dormant (or ended), nothing is credited
		}
		sub.held[0] = stream.Delivery{}
		sub.held = sub.held[1:]
		sub.owed++
	}
	if len(sub.held) == 0 {
		sub.held = nil
	}
	s.creditStream(sub)
}

// creditStream gives back sub's owed window while the outbox is at most
// half full and within StreamCreditOutboxBytesMax.
func (s *Session) creditStream(sub *streamSub) {
	limit := min(s.cfg.OutboxBytesMax/2, s.cfg.StreamCreditOutboxBytesMax)
	if sub.owed == 0 || s.conn == 0 || s.unwrittenBytes+len(s.gated) > limit {
		return
	}
	s.toPartition(sub.key, queuedRequest{sinput: &stream.Credit{SubID: sub.id, Records: sub.owed}})
	sub.owed = 0
}

// creditStreams credits every subscription that owes (after Written).
func (s *Session) creditStreams() {
	if len(s.streamSubs) == 0 {
		return
	}
	for _, id := range s.sortedStreamIDs() {
		if sub := s.streamSubsByID[id]; sub != nil && sub.owed > 0 {
			s.creditStream(sub)
		}
	}
}

// flushStreams sends what stream subscriptions held behind the gate.
func (s *Session) flushStreams() {
	for _, id := range s.sortedStreamIDs() {
		if sub := s.streamSubsByID[id]; sub != nil && len(sub.held) > 0 {
			s.flushStreamSub(sub)
		}
	}
}

// encodeStreamDeliver writes one DELIVER of a stream record.
func (s *Session) encodeStreamDeliver(sub *streamSub, d *stream.Delivery) bool {
	sessionAssert(s.gateOpen && sub.announced && !s.dormant, "a stream DELIVER before its time")
	body := d.Body
	m := &s.deliverM
	*m = wire.Deliver{SubID: sub.id, Topic: sub.key.Topic, Partition: sub.key.Partition,
		Offset: d.Offset, DeliveryTag: d.Offset, PublishedMs: uint64(body.PublishedMs), PublishReceivedMs: uint64(body.ReceivedMs),
		ContentType: wire.ContentType{Kind: wire.ContentKind(body.ContentType.Kind), Custom: body.ContentType.Custom},
		Payload:     body.Payload}
	if len(body.Headers) > 0 || d.Speculative {
		hs := s.headers[:0]
		for _, h := range body.Headers {
			hs = append(hs, wire.KeyValue{Key: h.Key, Value: h.Value})
		}
		if d.Speculative {
			hs = append(hs, wire.KeyValue{Key: wire.HeaderSpeculative, Value: "1"})
		}
		m.Headers, s.headers = hs, hs
	}
	sent := s.emit(s.conn, wire.OpDeliver, s.nextServerReqID(), m)
	m.Payload, m.Headers = nil, nil
	clear(s.headers)
	return sent
}

// dropStreamSub forgets a stream subscription and what it held.
func (s *Session) dropStreamSub(sub *streamSub) {
	sessionAssert(s.streamSubsByID[sub.id] == sub, "dropping a stream subscription twice")
	delete(s.streamSubs, sub.key)
	delete(s.streamSubsByID, sub.id)
	sub.held = nil
	s.rd.Counted.SubsClosed++
}

// unsubscribeStream ends a stream subscription at the partition, behind its
// Subscribe (through toPartition: it may still wait for the Open).
func (s *Session) unsubscribeStream(sub *streamSub) {
	s.dropStreamSub(sub)
	if op, ok := s.pending[sub.token]; ok && op.subID == sub.id {
		delete(s.pending, sub.token) // its answer finds no token
	}
	s.toPartition(sub.key, queuedRequest{sinput: &stream.Unsubscribe{SubID: sub.id}})
}

// endStreamSubs ends every stream subscription (a resume: the client
// resubscribes, PROTOCOL 7.5, 7.8).
func (s *Session) endStreamSubs() {
	for _, id := range s.sortedStreamIDs() {
		s.unsubscribeStream(s.streamSubsByID[id])
	}
}

// dropUnannouncedStreams: the attachment that asked for them is going.
func (s *Session) dropUnannouncedStreams() {
	for _, id := range s.sortedStreamIDs() {
		if sub := s.streamSubsByID[id]; !sub.announced {
			s.unsubscribeStream(sub)
		}
	}
}

// endStreamsAtEnd: the session ends; what left is followed by its
// Unsubscribe, what still waits behind an Open is never sent.
func (s *Session) endStreamsAtEnd() {
	for _, id := range s.sortedStreamIDs() {
		sub := s.streamSubsByID[id]
		s.dropStreamSub(sub)
		if o := s.opens[sub.key]; o != nil && o.opened && sub.subscribeSent {
			s.out(PartitionAddr(sub.key), &StreamRequest{Input: &stream.Unsubscribe{SubID: sub.id}})
		}
	}
}

// closeStreamSub ends a stream subscription broker-side (its partition is
// gone) and tells the client.
func (s *Session) closeStreamSub(sub *streamSub, code wire.ReasonCode, msg string) {
	s.dropStreamSub(sub)
	if s.conn != 0 && sub.announced {
		s.push(wire.OpSubscriptionClosed, s.nextServerReqID(), &wire.SubscriptionClosed{SubID: sub.id, Code: code, Message: msg})
	}
}

func (s *Session) sortedStreamIDs() []uint64 {
	ids := make([]uint64, 0, len(s.streamSubsByID))
	for id := range s.streamSubsByID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// kindRefusal says why r cannot go to a partition of kind k ("": it can).
func kindRefusal(k PartitionKind, r *queuedRequest) (wire.ErrorCode, string) {
	switch {
	case k == KindQueue && r.sinput != nil:
		return wire.CodeInvalid, core.ErrTopicIsQueue.Error()
	case k == KindStream && r.sinput == nil:
		pub, ok := r.input.(*core.Publish)
		if !ok {
			return wire.CodeInvalid, msgQueueOpOnTopic
		}
		if pub.NotBeforeMs != 0 {
			return wire.CodeInvalid, msgDelayedStream
		}
	}
	return 0, ""
}

// checkStreamSubs checks the stream subscriptions' indexes and bounds.
func (s *Session) checkStreamSubs() error {
	id := s.init.ID
	if len(s.streamSubs) != len(s.streamSubsByID) || len(s.subs)+len(s.streamSubs) > s.cfg.SubscriptionsPerSessionMax {
		return fmt.Errorf("session %d: %d stream subscriptions by key, %d by id", id, len(s.streamSubs), len(s.streamSubsByID))
	}
	for key, sub := range s.streamSubs {
		switch {
		case sub.key != key || key.Group != "" || s.streamSubsByID[sub.id] != sub:
			return fmt.Errorf("session %d: stream subscription %d indexed inconsistently", id, sub.id)
		case sub.id>>subSeqBits != uint64(id):
			return fmt.Errorf("session %d: stream subscription id %d not minted here", id, sub.id)
		case s.subs[key] != nil:
			return fmt.Errorf("session %d: a queue and a stream subscription on %v", id, key)
		case !sub.announced && s.conn == 0:
			return fmt.Errorf("session %d: stream subscription %d unannounced with its attachment gone", id, sub.id)
		case len(sub.held) > s.cfg.StreamPartition.SubWindowMax:
			return fmt.Errorf("session %d: stream subscription %d holds %d records, window %d", id, sub.id, len(sub.held), s.cfg.StreamPartition.SubWindowMax)
		case len(sub.held) > 0 && (s.conn == 0 || (s.gateOpen && sub.announced)):
			return fmt.Errorf("session %d: stream subscription %d holds records it could send or drop", id, sub.id)
		case sub.owed < 0 || sub.owed+len(sub.held) > s.cfg.StreamPartition.SubWindowMax:
			return fmt.Errorf("session %d: stream subscription %d owes %d credits", id, sub.id, sub.owed)
		}
	}
	return nil
}
