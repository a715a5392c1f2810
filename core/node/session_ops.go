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
	"github.com/fibril-go/fibril/core/cohort"
	"github.com/fibril-go/fibril/transport/wire"
)

// Guide messages (PROTOCOL 6.3).
const (
	msgNamePattern    = "use 1-128 bytes of [a-z0-9._-], no leading or trailing '.', no '..'"
	msgTooManyPending = "broker-side backpressure (retry later): too many requests of this session await an answer"
)

// publishArgs is one PUBLISH or PUBLISH_DELAYED, decoded: the two share
// every step but the TTL (absent on a delayed publish) and not_before.
type publishArgs struct {
	topic       string
	group       wire.Optional[string] // as sent: normalised by queueOf
	partition   uint32                // chosen by the client (PROTOCOL 2.2)
	confirm     bool
	contentType wire.ContentType
	headers     wire.Headers
	publishedMs uint64 // the producer's clock, echoed as is
	payload     []byte // the decoder's copy, owned from here on
	ttl         wire.Optional[uint64]
	notBeforeMs uint64 // PUBLISH_DELAYED only: absolute Unix ms
	delayed     bool
}

// queueOf validates and normalises (topic, group, partition). Group
// "default" and no group are one queue (SPEC 1), so the normalised form is
// what every map key and every message to another machine carries.
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

// queueOf is the package queueOf, remembering the last names it accepted.
func (s *Session) queueOf(topic string, group wire.Optional[string], partition uint32) (core.QueueID, error) {
	// A producer publishes to the same queue frame after frame: one remembered
	// name skips re-validating it on the hot path. The group test compares the
	// normalised form, so "default" and absent hit the same cached entry.
	if s.validNames.Topic != "" && topic == s.validNames.Topic && group.Present == (s.validNames.Group != "") &&
		(!group.Present || core.NormalizeGroup(group.Value) == s.validNames.Group) {
		q := core.QueueID{Topic: topic, Group: s.validNames.Group, Partition: partition}
		sessionAssert(q.Topic != "", "an empty topic was remembered as valid")
		return q, nil
	}
	q, err := queueOf(topic, group, partition)
	if err == nil {
		s.validNames = core.QueueID{Topic: q.Topic, Group: q.Group}
	}
	return q, err
}

// groupOpt is the wire form of a normalised group: the default namespace
// is sent as an absent group, as Fibril does.
func groupOpt(group string) wire.Optional[string] {
	// Sending "default" back would make a client that compares names see two
	// spellings of one queue.
	if group == "" {
		return wire.Optional[string]{}
	}
	return wire.Some(group)
}

// handlePublish: the checks of PROTOCOL 5.3 that need no partition, in its
// order (names, content type then reserved headers, bounds), answered at
// once; then the publish goes to its partition, behind its Open if needed.
// a comes by pointer: it is ~170 bytes, and the copy showed in profiles.
func (s *Session) handlePublish(now int64, requestID uint64, a *publishArgs) {
	q, err := s.queueOf(a.topic, a.group, a.partition)
	if err != nil {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: err.Error()})
		return
	}
	// The content-type header is folded into the content type before the
	// reserved-header check (PROTOCOL 7.12).
	ct, headers := wire.NormalizeContentType(a.contentType, a.headers)
	// Reserved keys are system metadata (PROTOCOL 7.12) set by the broker;
	// a client forging them could fake what the broker says of a message.
	if key, reserved := headers.ReservedKey(); reserved {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: fmt.Sprintf(
			"reserved header %q: keys starting with 'fibril.' (except 'fibril.client.') or 'stroma.' are set by the broker only", key)})
		return
	}
	// Durations and deadlines become int64 ms in the core: a u64 past 2^62
	// would overflow (or go negative) once added to a clock.
	// Only a confirmed publish holds a pending slot; an unconfirmed one costs
	// the session nothing once handed on, so it is never refused for this.
	if a.confirm && len(s.pending) >= pendingOpsMax {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInternal, Message: msgTooManyPending})
		return
	}
	if a.ttl.Present && a.ttl.Value > textPayloadNumberMax {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: "ttl_ms too large"})
		return
	}
	// not_before is absolute Unix ms; past 2^62 it could not become an int64
	// deadline, and a wrapped negative one would deliver at once.
	if a.delayed && a.notBeforeMs > textPayloadNumberMax {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: "not_before too large"})
		return
	}
	// The decoder copied the payload and the header strings out of the
	// frame, so the body outlives this step (Frame.Payload does not). The
	// request, its input and the body share one allocation (hot path).
	pr := &publishRequest{}
	pr.body = core.Body{Payload: a.payload, PublishedMs: int64(a.publishedMs),
		ContentType: core.ContentType{Kind: core.ContentKind(ct.Kind), Custom: ct.Custom}}
	if len(headers) > 0 {
		pr.body.Headers = make([]core.Header, len(headers))
		for i, h := range headers {
			pr.body.Headers[i] = core.Header{Key: h.Key, Value: h.Value}
		}
	}
	pr.in = core.Publish{NowMs: now, Confirm: a.confirm, Body: &pr.body, NotBeforeMs: int64(a.notBeforeMs)}
	if a.ttl.Present {
		pr.in.HasTTL, pr.in.TTLMs = true, int64(a.ttl.Value)
	}
	// Only a confirmed publish carries a token: an unconfirmed one gets no
	// answer from its partition even on error (PROTOCOL 5.3 step 8).
	if a.confirm {
		pr.req.Token = s.newToken()
		s.pending[pr.req.Token] = pendingOp{kind: opPublish, gen: s.gen, requestID: requestID, queue: q}
		// Queued for ordering now, at arrival: confirms leave in arrival order
		// across partitions (PROTOCOL 7.2, session_confirm.go).
		s.confirmQueued(pr.req.Token)
	}
	pr.req.Input = &pr.in
	s.toPartition(q, queuedRequest{token: pr.req.Token, input: &pr.in, req: &pr.req, gen: s.gen, requestID: requestID, kind: opPublish})
}

// publishRequest is a publish's envelope message, input and body, in one
// allocation.
type publishRequest struct {
	req  Request
	in   core.Publish
	body core.Body
}

// handleSubscribe: the checks of PROTOCOL 5.6 a standalone broker makes
// (no streams, no cohorts yet, one subscription per queue partition and
// session), then Subscribe to the partition; SUBSCRIBE_OK waits for its
// answer, and the subscription's deliveries wait for SUBSCRIBE_OK.
func (s *Session) handleSubscribe(requestID uint64, m *wire.Subscribe) {
	q, err := queueOf(m.Topic, m.Group, m.Partition)
	if err != nil {
		s.reply(wire.OpSubscribeErr, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: err.Error()})
		return
	}
	// PROTOCOL 5.6's order: the duplicate check comes before the cohort
	// checks. A pending subscribe counts: a second one would orphan it.
	// One subscription per (session, queue partition): the partition keys
	// its consumers by SubID, but ACKs name only the queue, so two would make
	// an ACK ambiguous.
	if _, dup := s.subs[q]; dup || s.streamSubs[q] != nil {
		s.reply(wire.OpSubscribeErr, requestID, &wire.ErrorBody{Code: wire.CodeConflict, Message: "already subscribed"})
		return
	}
	// Cohorts (PROTOCOL 7.6, session_cohort.go): checks 4 and 5 here,
	// check 3 (one cohort id per queue) at the Node before SUBSCRIBE_OK.
	exclusive, bad := exclusiveOf(m.ConsumerGroup, m.ConsumerTarget)
	if bad != "" {
		s.reply(wire.OpSubscribeErr, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: bad})
		return
	}
	var member cohort.MemberID
	if exclusive != nil {
		id, code, why := s.resolveMember(m.MemberID)
		if code != 0 {
			s.reply(wire.OpSubscribeErr, requestID, &wire.ErrorBody{Code: code, Message: why})
			return
		}
		member = id
	}
	// Prefetch is kept as requested: the partition clamps it, the
	// SUBSCRIBE_OK echoes it unclamped (PROTOCOL 5.7).
	sub, refusal := s.newSub(q, m.Prefetch, m.AutoAck)
	if sub == nil {
		s.reply(wire.OpSubscribeErr, requestID, &wire.ErrorBody{Code: wire.CodeInternal, Message: refusal})
		return
	}
	if exclusive != nil {
		s.memberID = member // established on the session from now on
		exclusive.member = member
		sub.exclusive = exclusive
	}
	token := s.newToken()
	s.pending[token] = pendingOp{kind: opSubscribe, gen: s.gen, requestID: requestID, queue: q, subID: sub.id}
	s.subscribe(sub, token)
}

// newSub registers a subscription and mints its id, or says why not. The
// id is the session id above a per-session sequence: unique broker-wide
// (and across restarts, since session ids never repeat) with no shared
// counter between machines.
func (s *Session) newSub(q core.QueueID, prefetch uint32, autoAck bool) (*sessionSub, string) {
	if len(s.pending) >= pendingOpsMax {
		return nil, msgTooManyPending
	}
	// Every subscription costs held deliveries and a skeleton entry that is
	// persisted; the limit keeps one client from growing both without bound.
	if len(s.subs)+len(s.streamSubs) >= s.cfg.SubscriptionsPerSessionMax {
		return nil, fmt.Sprintf("too many subscriptions on this session (limit %d)", s.cfg.SubscriptionsPerSessionMax)
	}
	// Sequence numbers are never reused within a session (a reused SubID
	// could take a late delivery meant for a closed subscription), so running
	// out is final for this session.
	if s.subSeq+1 >= 1<<subSeqBits {
		return nil, "this session has used up its subscription ids: reconnect without resuming"
	}
	sessionAssert(s.subs[q] == nil, "two subscriptions on one queue partition")
	s.subSeq++
	id := uint64(s.init.ID)<<subSeqBits | s.subSeq
	sessionAssert(id&(1<<subSeqBits-1) == s.subSeq, "subscription sequence overflowed into the session id")
	sub := &sessionSub{id: id, key: q, group: groupOpt(q.Group), prefetch: prefetch, autoAck: autoAck}
	s.subs[q] = sub
	s.subsByID[id] = sub
	s.rd.Counted.SubsOpened++
	sessionAssert(len(s.subs) == len(s.subsByID), "the subscription indexes disagree")
	return sub, ""
}

// subscribe sends (or queues behind the partition's Open) a Subscribe.
func (s *Session) subscribe(sub *sessionSub, token uint64) {
	sessionAssert(s.pending[token].subID == sub.id, "a subscribe sent without its pending token")
	// subscribeSent lets settles route from now on: they queue behind the
	// Subscribe on the same partition path, which keeps them after it.
	sub.subscribeSent, sub.token = true, token
	s.toPartition(sub.key, queuedRequest{token: token, kind: opSubscribe,
		input: &core.Subscribe{SubID: sub.id, Prefetch: sub.prefetch, AutoAck: sub.autoAck, Exclusive: sub.exclusive != nil}})
}

// handleAck routes an ACK to the session's subscription on that queue
// partition; an unknown subscription is ignored (PROTOCOL 5.9).
func (s *Session) handleAck(m *wire.Ack) {
	sub := s.settleTarget(m.Topic, m.Group, m.Partition)
	if sub == nil {
		if ss := s.streamSettle(m.Topic, m.Group, m.Partition); ss != nil {
			s.ackStream(ss, m.Tags)
		}
		return
	}
	// The partition ignores unknown, settled and foreign tags itself (and
	// bounds the batch): the session only routes.
	sessionAssert(s.subsByID[sub.id] == sub, "an ack routed to a dropped subscription")
	// The envelope message and its input in one allocation (hot path).
	// No token: an ACK is never answered (PROTOCOL 5.9), so it holds no
	// pending slot and cannot be refused for backpressure.
	ar := &ackRequest{in: core.Ack{SubID: sub.id, Tags: m.Tags}}
	ar.req.Input = &ar.in
	s.toPartition(sub.key, queuedRequest{input: &ar.in, req: &ar.req})
}

// ackRequest is an ACK's envelope message and input, in one allocation.
type ackRequest struct {
	req Request
	in  core.Ack
}

// handleNack: not_before without requeue is refused before the lookup,
// with the NACK's request id (PROTOCOL 5.10); nothing is settled.
func (s *Session) handleNack(requestID uint64, m *wire.Nack) {
	// not_before only means something for a retry; with requeue false the
	// message is failed, and accepting a deadline would suggest otherwise.
	if m.NotBeforeMs.Present && !m.Requeue {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: core.ErrNotBeforeWithoutRetry.Error()})
		return
	}
	sub := s.settleTarget(m.Topic, m.Group, m.Partition)
	if sub == nil {
		if s.streamSettle(m.Topic, m.Group, m.Partition) != nil {
			s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: msgNackOnStream})
		}
		return
	}
	// A deadline past 2^62 ms is as good as never; clamp rather than wrap.
	notBeforeMs := int64(min(m.NotBeforeMs.Value, textPayloadNumberMax))
	s.toPartition(sub.key, queuedRequest{input: &core.Nack{SubID: sub.id, Tags: m.Tags, Requeue: m.Requeue, NotBeforeMs: notBeforeMs}})
}

// settleTarget finds the subscription an ACK or NACK names. Settles are
// fire-and-forget: a bad name or an unknown subscription is ignored
// (idempotent, PROTOCOL 5.9), never answered with an ERROR the client
// does not wait for.
func (s *Session) settleTarget(topic string, group wire.Optional[string], partition uint32) *sessionSub {
	q, err := s.queueOf(topic, group, partition)
	if err != nil {
		return nil
	}
	// A subscription still waiting for its Open is routed too: the settle
	// queues behind its Subscribe.
	sub := s.subs[q]
	if sub == nil || !sub.subscribeSent {
		return nil
	}
	return sub
}

// handleDeclare: the checks of PROTOCOL 5.12 that need no catalogue, then
// DeclareQueue to the Node, which answers once the declaration is durable.
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
	// Absent or 0 means 1 (the count is raised to at least 1).
	if d.PartitionCount.Present && d.PartitionCount.Value > 1 {
		msg.PartitionCount = d.PartitionCount.Value
	}
	sessionAssert(msg.PartitionCount >= 1, "a declare of no partitions")
	// Checked here as well as in the Node so the 400 comes with this
	// session's message text and costs no Node round trip; the Node's check
	// stays the authority.
	if msg.PartitionCount > s.cfg.PartitionsPerQueueMax {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInvalid,
			Message: fmt.Sprintf("partition_count %d exceeds the limit of %d", msg.PartitionCount, s.cfg.PartitionsPerQueueMax)})
		return
	}
	if len(s.pending) >= pendingOpsMax {
		s.reply(wire.OpError, requestID, &wire.ErrorBody{Code: wire.CodeInternal, Message: msgTooManyPending})
		return
	}
	msg.Token = s.newToken()
	s.pending[msg.Token] = pendingOp{kind: opDeclare, gen: s.gen, requestID: requestID}
	// The Node answers only once the record is durable (node_catalog.go): a
	// DECLARE_QUEUE_OK ("stored", PROTOCOL 5.13) a crash could take back is a lie.
	s.out(NodeAddr(), msg)
}

// dlqPolicyOf checks a declared dead-letter policy; refusal is the 400
// message when it is invalid. A queue dead-lettering into itself would
// loop forever (every copy failing into a new copy), so it is refused.
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

// onDeclared answers a DECLARE_QUEUE with the effective partition count
// (an existing queue keeps its own).
func (s *Session) onDeclared(m *Declared) {
	op, ok := s.pending[m.Token]
	// The token's attachment ended (pending is cleared with it): the answer
	// has nobody to go to, and the declaration stands regardless.
	if !ok {
		return
	}
	sessionAssert(op.kind == opDeclare || op.kind == opDeclareStream, "a Declared for a token that is not a declare")
	delete(s.pending, m.Token)
	if m.Err != nil {
		s.replyError(op.gen, wire.OpError, op.requestID, wire.ErrorCode(m.Err.Code()), m.Err.Error())
		return
	}
	if op.kind == opDeclareStream {
		sessionAssert(m.Partitions >= 1, "a declared stream without partitions")
		s.replyOn(op.gen, wire.OpDeclarePlexusOk, op.requestID, &wire.DeclarePlexusOk{Status: "stored", PartitionCount: m.Partitions})
		return
	}
	sessionAssert(m.Partitions >= 1, "a declared queue without partitions")
	s.replyOn(op.gen, wire.OpDeclareQueueOk, op.requestID, &wire.DeclareQueueOk{Status: "stored", PartitionCount: m.Partitions})
}
