package node

// Client requests that become partition or Node inputs: PUBLISH,
// PUBLISH_DELAYED, SUBSCRIBE, ACK, NACK and DECLARE_QUEUE. Invariants:
//   - every name is validated and every group normalised before anything
//     leaves the session, so no invalid name reaches a partition or the
//     catalogue;
//   - rejections decided here are answered at once with the request's id;
//     a partition's answer comes back as a Response on the request's token;
//   - an unconfirmed publish gets no answer from its partition (it carries
//     no token): an unmatched ERROR is fatal to every client (PROTOCOL 6.1).

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

const (
	msgNamePattern = "use 1-128 bytes of [a-z0-9._-], no leading or trailing '.', no '..'"
	msgCohorts     = "exclusive consumer groups are not supported by this broker yet"
)

// publishArgs is one PUBLISH or PUBLISH_DELAYED, decoded.
type publishArgs struct {
	topic       string
	group       wire.Optional[string]
	partition   uint32
	confirm     bool
	contentType wire.ContentType
	headers     wire.Headers
	publishedMs uint64
	payload     []byte
	ttl         wire.Optional[uint64]
	notBeforeMs uint64
	delayed     bool
}

// queueOf validates and normalises (topic, group, partition).
func queueOf(topic string, group wire.Optional[string], partition uint32) (core.QueueID, error) {
	q := core.QueueID{Topic: topic, Partition: partition}
	if group.Present {
		q.Group = core.NormalizeGroup(group.Value)
	}
	if core.ValidateName(q.Topic) != nil {
		return q, fmt.Errorf("invalid topic %q: %s", topic, msgNamePattern)
	}
	if q.Group != "" && core.ValidateName(q.Group) != nil {
		return q, fmt.Errorf("invalid group %q: %s", q.Group, msgNamePattern)
	}
	return q, nil
}

// groupOpt is the wire form of a normalised group.
func groupOpt(group string) wire.Optional[string] {
	if group == "" {
		return wire.Optional[string]{}
	}
	return wire.Some(group)
}

func (s *Session) handlePublish(now int64, requestID uint64, a publishArgs) {
	q, err := queueOf(a.topic, a.group, a.partition)
	if err != nil {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: err.Error()})
		return
	}
	ct, headers := wire.NormalizeContentType(a.contentType, a.headers)
	if key, reserved := headers.ReservedKey(); reserved {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: fmt.Sprintf(
			"reserved header %q: keys starting with 'fibril.' (except 'fibril.client.') or 'stroma.' are set by the broker only", key)})
		return
	}
	if a.ttl.Present && a.ttl.Value > textPayloadNumberMax {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: "ttl_ms too large"})
		return
	}
	if a.delayed && a.notBeforeMs > textPayloadNumberMax {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: "not_before too large"})
		return
	}
	// The decoder copied the payload and the header strings out of the
	// frame, so the body outlives this step (Frame.Payload does not).
	body := &core.Body{Payload: a.payload, PublishedMs: int64(a.publishedMs),
		ContentType: core.ContentType{Kind: core.ContentKind(ct.Kind), Custom: ct.Custom}}
	if len(headers) > 0 {
		body.Headers = make([]core.Header, len(headers))
		for i, h := range headers {
			body.Headers[i] = core.Header{Key: h.Key, Value: h.Value}
		}
	}
	in := &core.Publish{NowMs: now, Confirm: a.confirm, Body: body, NotBeforeMs: int64(a.notBeforeMs)}
	if a.ttl.Present {
		in.HasTTL, in.TTLMs = true, int64(a.ttl.Value)
	}
	var token uint64
	if a.confirm {
		token = s.newToken()
		s.pending[token] = pendingOp{kind: opPublish, gen: s.gen, requestID: requestID, queue: q}
	}
	s.toPartition(q, queuedRequest{token: token, input: in, gen: s.gen, requestID: requestID, kind: opPublish})
}

func (s *Session) handleSubscribe(requestID uint64, m *wire.Subscribe) {
	q, err := queueOf(m.Topic, m.Group, m.Partition)
	if err != nil {
		s.reply(wire.OpSubscribeErr, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: err.Error()})
		return
	}
	if m.ConsumerGroup.Present {
		s.reply(wire.OpSubscribeErr, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: msgCohorts})
		return
	}
	if _, dup := s.subs[q]; dup {
		s.reply(wire.OpSubscribeErr, requestID, &wire.ErrorBody{Code: wire.CodeConflict, Message: "already subscribed"})
		return
	}
	sub, refusal := s.newSub(q, m.Prefetch, m.AutoAck)
	if sub == nil {
		s.reply(wire.OpSubscribeErr, requestID, &wire.ErrorBody{Code: wire.CodeInternal, Message: refusal})
		return
	}
	token := s.newToken()
	s.pending[token] = pendingOp{kind: opSubscribe, gen: s.gen, requestID: requestID, queue: q, subID: sub.id}
	s.subscribe(sub, token)
}

// newSub registers a subscription and mints its id, or says why not.
func (s *Session) newSub(q core.QueueID, prefetch uint32, autoAck bool) (*sessionSub, string) {
	if len(s.subs) >= s.cfg.SubscriptionsPerSessionMax {
		return nil, fmt.Sprintf("too many subscriptions on this session (limit %d)", s.cfg.SubscriptionsPerSessionMax)
	}
	if s.subSeq+1 >= 1<<subSeqBits {
		return nil, "this session has used up its subscription ids: reconnect without resuming"
	}
	s.subSeq++
	id := uint64(s.init.ID)<<subSeqBits | s.subSeq
	sessionAssert(id&(1<<subSeqBits-1) == s.subSeq, "subscription sequence overflowed into the session id")
	sub := &sessionSub{id: id, key: q, group: groupOpt(q.Group), prefetch: prefetch, autoAck: autoAck}
	s.subs[q] = sub
	s.subsByID[id] = sub
	return sub, ""
}

// subscribe sends (or queues behind the partition's Open) a Subscribe.
func (s *Session) subscribe(sub *sessionSub, token uint64) {
	sub.subscribeSent = true
	s.toPartition(sub.key, queuedRequest{token: token, kind: opSubscribe,
		input: &core.Subscribe{SubID: sub.id, Prefetch: sub.prefetch, AutoAck: sub.autoAck}})
}

// handleAck routes an ACK to the session's subscription on that queue
// partition; an unknown subscription is ignored (PROTOCOL 5.9).
func (s *Session) handleAck(m *wire.Ack) {
	sub := s.settleTarget(m.Topic, m.Group, m.Partition)
	if sub == nil {
		return
	}
	s.toPartition(sub.key, queuedRequest{input: &core.Ack{SubID: sub.id, Tags: m.Tags}})
}

func (s *Session) handleNack(requestID uint64, m *wire.Nack) {
	if m.NotBeforeMs.Present && !m.Requeue {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: core.ErrNotBeforeWithoutRetry.Error()})
		return
	}
	sub := s.settleTarget(m.Topic, m.Group, m.Partition)
	if sub == nil {
		return
	}
	notBeforeMs := int64(min(m.NotBeforeMs.Value, textPayloadNumberMax))
	s.toPartition(sub.key, queuedRequest{input: &core.Nack{SubID: sub.id, Tags: m.Tags, Requeue: m.Requeue, NotBeforeMs: notBeforeMs}})
}

// settleTarget finds the subscription an ACK or NACK names.
func (s *Session) settleTarget(topic string, group wire.Optional[string], partition uint32) *sessionSub {
	q, err := queueOf(topic, group, partition)
	if err != nil {
		return nil
	}
	sub := s.subs[q]
	if sub == nil || !sub.subscribeSent {
		return nil
	}
	return sub
}

func (s *Session) handleDeclare(requestID uint64, d *wire.DeclareQueue) {
	q, err := queueOf(d.Topic, d.Group, 0)
	if err != nil {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: err.Error()})
		return
	}
	msg := &DeclareQueue{Topic: q.Topic, Group: q.Group, PartitionCount: 1}
	if d.DLQPolicy.Present {
		policy, refusal := dlqPolicyOf(q, d.DLQPolicy.Value)
		if refusal != "" {
			s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: refusal})
			return
		}
		msg.DLQ = &policy
	}
	if d.DLQRetriesMax.Present {
		v := d.DLQRetriesMax.Value
		msg.MaxRetries = &v
	}
	if d.DefaultMessageTTLMs.Present {
		if d.DefaultMessageTTLMs.Value > textPayloadNumberMax {
			s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: "default_message_ttl_ms too large"})
			return
		}
		v := int64(d.DefaultMessageTTLMs.Value)
		msg.DefaultTTLMs = &v
	}
	if d.PartitionCount.Present && d.PartitionCount.Value > 1 {
		msg.PartitionCount = d.PartitionCount.Value
	}
	if msg.PartitionCount > s.cfg.PartitionsPerQueueMax {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid,
			Message: fmt.Sprintf("partition_count %d exceeds the limit of %d", msg.PartitionCount, s.cfg.PartitionsPerQueueMax)})
		return
	}
	msg.Token = s.newToken()
	s.pending[msg.Token] = pendingOp{kind: opDeclare, gen: s.gen, requestID: requestID}
	s.out(NodeAddr(), msg)
}

// dlqPolicyOf checks a declared dead-letter policy; refusal is the 400
// message when it is invalid.
func dlqPolicyOf(q core.QueueID, p wire.DLQPolicy) (core.DLQPolicy, string) {
	policy := core.DLQPolicy{Kind: core.DLQPolicyKind(p.Kind)}
	if p.Kind != wire.DLQCustom {
		return policy, ""
	}
	target, err := queueOf(p.Topic, p.Group, 0)
	if err != nil {
		return policy, "invalid dead-letter target: " + err.Error()
	}
	if target.Topic == q.Topic && target.Group == q.Group {
		return policy, core.ErrDeadLetterLoop.Error()
	}
	policy.Target = core.DLQTarget{Topic: target.Topic, Group: target.Group}
	return policy, ""
}

func (s *Session) onDeclared(m *Declared) {
	op, ok := s.pending[m.Token]
	if !ok {
		return
	}
	sessionAssert(op.kind == opDeclare, "a Declared for a token that is not a declare")
	delete(s.pending, m.Token)
	if m.Err != nil {
		s.replyError(op.gen, wire.OpError, op.requestID, wire.ErrorCode(m.Err.Code()), m.Err.Error())
		return
	}
	sessionAssert(m.Partitions >= 1, "a declared queue without partitions")
	s.replyOn(op.gen, wire.OpDeclareQueueOk, op.requestID, &wire.DeclareQueueOk{Status: "stored", PartitionCount: m.Partitions})
}
