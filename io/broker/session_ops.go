//go:build !fibril_next

package broker

import (
	"errors"
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// Request handling for an attached session: each client frame becomes a
// reply, a partition input, or both. A returned error closes the socket
// (after a fatal reply, such as 401 before authentication).

// connRef is a session as seen from one attachment (one socket): replies made
// through it, and replies to requests it started, go to that socket only.
// After a resume, late answers to the old socket's requests are dropped: the
// new socket numbers its requests afresh, so they could pass for its own.
type connRef struct {
	*session
	gen uint64
}

func (s connRef) reply(op wire.Opcode, requestID uint64, body wire.Body) {
	s.session.replyOn(s.gen, op, requestID, body)
}

func (s connRef) replyError(op wire.Opcode, requestID uint64, code wire.ErrorCode, msg string) {
	s.session.replyOn(s.gen, op, requestID, &wire.ErrorBody{Code: code, Message: msg})
}

func (s connRef) handle(hdr wire.Header, payload []byte) error {
	s.mu.Lock()
	authed := s.authed
	s.mu.Unlock()
	switch hdr.Opcode {
	case wire.OpPing:
		s.reply(wire.OpPong, hdr.RequestID, &wire.Pong{})
		return nil
	case wire.OpPong, wire.OpTopologyUpdateAck:
		return nil
	case wire.OpAuth:
		return s.handleAuth(hdr, payload, authed)
	}
	if !authed {
		s.b.metrics.authFailures.Add(1)
		s.replyError(wire.OpError, hdr.RequestID, wire.CodeUnauthorized,
			"authentication required: send AUTH with a user name and password first (the built-in fibril/fibril works from loopback)")
		return errConnDone
	}
	// Decode per opcode (no boxing on the publish and settle paths).
	var err error
	switch hdr.Opcode {
	case wire.OpPublish:
		var m wire.Publish
		if m, err = wire.DecodePublish(payload); err == nil {
			s.handlePublish(hdr.RequestID, m.Topic, m.Group, m.Partition, m.RequireConfirm, m.ContentType,
				m.Headers, m.PublishedMs, m.Payload, m.TTLMs, 0)
		}
	case wire.OpPublishDelayed:
		var m wire.PublishDelayed
		if m, err = wire.DecodePublishDelayed(payload); err == nil {
			s.handlePublish(hdr.RequestID, m.Topic, m.Group, m.Partition, m.RequireConfirm, m.ContentType,
				m.Headers, m.PublishedMs, m.Payload, wire.Optional[uint64]{}, int64(m.NotBeforeMs))
		}
	case wire.OpSubscribe:
		var m wire.Subscribe
		if m, err = wire.DecodeSubscribe(payload); err == nil {
			s.handleSubscribe(hdr.RequestID, &m)
		}
	case wire.OpAck:
		var m wire.Ack
		if m, err = wire.DecodeAck(payload); err == nil {
			s.handleSettle(m.Topic, m.Group, m.Partition, func(subID uint64) core.Input {
				return &core.Ack{SubID: subID, Tags: m.Tags}
			})
		}
	case wire.OpNack:
		var m wire.Nack
		if m, err = wire.DecodeNack(payload); err == nil {
			if m.NotBeforeMs.Present && !m.Requeue {
				s.replyError(wire.OpError, hdr.RequestID, wire.CodeInvalid, "nack not_before requires requeue=true")
				return nil
			}
			s.handleSettle(m.Topic, m.Group, m.Partition, func(subID uint64) core.Input {
				return &core.Nack{SubID: subID, Tags: m.Tags, Requeue: m.Requeue, NotBeforeMs: int64(m.NotBeforeMs.Value)}
			})
		}
	case wire.OpDeclareQueue:
		var m wire.DeclareQueue
		if m, err = wire.DecodeDeclareQueue(payload); err == nil {
			s.handleDeclare(hdr.RequestID, &m)
		}
	case wire.OpTopology:
		var m wire.Topology
		if m, err = wire.DecodeTopology(payload); err == nil {
			s.handleTopology(hdr.RequestID, &m)
		}
	case wire.OpReconcileClient:
		var m wire.ReconcileClient
		if m, err = wire.DecodeReconcileClient(payload); err == nil {
			s.handleReconcile(hdr.RequestID, &m)
		}
	case wire.OpDeclarePlexus, wire.OpSubscribeStream:
		if _, err = wire.DecodeBody(hdr.Opcode, payload); err == nil {
			s.replyError(wire.OpError, hdr.RequestID, wire.CodeInvalid, "Plexus streams are not supported by this broker yet")
		}
	default:
		s.b.metrics.protocolErrs.Add(1)
		s.replyError(wire.OpError, hdr.RequestID, wire.CodeInvalid, fmt.Sprintf("unknown opcode %d: not a client request this broker serves", hdr.Opcode))
		return nil
	}
	if err != nil {
		s.b.metrics.protocolErrs.Add(1)
		s.replyError(wire.OpError, hdr.RequestID, wire.CodeInvalid, "malformed frame: "+err.Error())
	}
	return nil
}

func (s connRef) handleAuth(hdr wire.Header, payload []byte, authed bool) error {
	auth, err := wire.DecodeAuth(payload)
	if err != nil {
		s.replyError(wire.OpError, hdr.RequestID, wire.CodeInvalid, "malformed AUTH: "+err.Error())
		return nil
	}
	s.mu.Lock()
	loopback, authedHere := s.loopback, s.authGen == s.gen
	s.mu.Unlock()
	if authed && authedHere {
		s.replyError(wire.OpAuthErr, hdr.RequestID, wire.CodeUnauthorized, "already authenticated")
		return nil
	}
	// A resumed session is already authenticated, but its client sends AUTH
	// on every connect: check the credentials again and answer AUTH_OK
	// (PROTOCOL.md §9), rather than an error that would fail the resume.
	if err := s.b.checkCredentials(auth.Username, auth.Password, loopback); err != nil {
		s.b.metrics.authFailures.Add(1)
		s.replyError(wire.OpAuthErr, hdr.RequestID, wire.CodeUnauthorized, err.Error())
		return errConnDone
	}
	s.mu.Lock()
	s.authed, s.authGen = true, s.gen
	s.mu.Unlock()
	s.reply(wire.OpAuthOk, hdr.RequestID, &wire.AuthOk{})
	return nil
}

// queueOf validates and normalises a (topic, group) pair.
func queueOf(topic string, group wire.Optional[string]) (queueName, error) {
	q := queueName{Topic: topic}
	if group.Present {
		q.Group = core.NormalizeGroup(group.Value)
	}
	if core.ValidateName(q.Topic) != nil {
		return q, fmt.Errorf("invalid topic %q: use 1-128 bytes of [a-z0-9._-], no leading or trailing '.', no '..'", topic)
	}
	if q.Group != "" && core.ValidateName(q.Group) != nil {
		return q, fmt.Errorf("invalid group %q: use 1-128 bytes of [a-z0-9._-], no leading or trailing '.', no '..'", q.Group)
	}
	return q, nil
}

func groupOpt(group string) wire.Optional[string] {
	if group == "" {
		return wire.Optional[string]{}
	}
	return wire.Some(group)
}

// loadError maps a failure to find or load a partition onto the wire.
func (s connRef) loadError(requestID uint64, op wire.Opcode, err error) {
	switch {
	case errors.Is(err, errPartitionRange):
		s.replyError(op, requestID, wire.CodeInvalid, err.Error())
	default:
		s.replyError(op, requestID, wire.CodeInternal, "broker-side failure (retry later): "+err.Error())
	}
}

func (s connRef) handlePublish(requestID uint64, topic string, group wire.Optional[string], partition uint32, confirm bool,
	ct wire.ContentType, headers wire.Headers, publishedMs uint64, payload []byte, ttl wire.Optional[uint64], notBeforeMs int64) {
	q, err := queueOf(topic, group)
	if err != nil {
		s.replyError(wire.OpError, requestID, wire.CodeInvalid, err.Error())
		return
	}
	ct, headers = wire.NormalizeContentType(ct, headers)
	if key, reserved := headers.ReservedKey(); reserved {
		s.replyError(wire.OpError, requestID, wire.CodeInvalid,
			fmt.Sprintf("reserved header %q: keys starting with 'fibril.' (except 'fibril.client.') or 'stroma.' are set by the broker only", key))
		return
	}
	r, err := s.b.runnerForExact(q, partition)
	if err != nil {
		s.loadError(requestID, wire.OpError, err)
		return
	}
	body := &core.Body{Payload: payload, ContentType: core.ContentType{Kind: core.ContentKind(ct.Kind), Custom: ct.Custom}, PublishedMs: int64(publishedMs)}
	if len(headers) > 0 {
		body.Headers = make([]core.Header, len(headers))
		for i, h := range headers {
			body.Headers[i] = core.Header{Key: h.Key, Value: h.Value}
		}
	}
	in := &core.Publish{Confirm: confirm, Body: body, NotBeforeMs: notBeforeMs}
	if ttl.Present {
		if ttl.Value > 1<<62 {
			s.replyError(wire.OpError, requestID, wire.CodeInvalid, "ttl_ms too large")
			return
		}
		in.HasTTL, in.TTLMs = true, int64(ttl.Value)
	}
	kind := replyPublishUnconfirmed
	if confirm {
		kind = replyPublish
	}
	s.b.metrics.published.Add(1)
	r.submit(request{in: in, reply: pendingReply{sess: s.session, gen: s.gen, requestID: requestID, kind: kind}})
}

func (s connRef) handleSubscribe(requestID uint64, sub *wire.Subscribe) {
	q, err := queueOf(sub.Topic, sub.Group)
	if err != nil {
		s.replyError(wire.OpSubscribeErr, requestID, wire.CodeInvalid, err.Error())
		return
	}
	if sub.ConsumerGroup.Present {
		s.replyError(wire.OpSubscribeErr, requestID, wire.CodeInvalid, "exclusive consumer groups are not supported by this broker yet")
		return
	}
	r, err := s.b.runnerForExact(q, sub.Partition)
	if err != nil {
		s.loadError(requestID, wire.OpSubscribeErr, err)
		return
	}
	key := wire.QueueKey{Topic: q.Topic, Partition: sub.Partition, Group: groupOpt(q.Group)}
	bnd := &binding{subID: s.b.nextSubID.Add(1), sess: s.session, gen: s.gen, key: key, prefetch: sub.Prefetch, autoAck: sub.AutoAck, r: r, requestID: requestID}
	s.mu.Lock()
	if _, dup := s.subs[key]; dup {
		s.mu.Unlock()
		s.replyError(wire.OpSubscribeErr, requestID, wire.CodeConflict, "already subscribed")
		return
	}
	s.subs[key] = bnd
	s.mu.Unlock()
	r.submit(request{in: &core.Subscribe{SubID: bnd.subID, Prefetch: sub.Prefetch, AutoAck: sub.AutoAck}, bind: bnd,
		reply: pendingReply{sess: s.session, gen: s.gen, requestID: requestID, kind: replySubscribe, bind: bnd}})
}

// handleSettle routes an ACK or NACK to the session's subscription on that
// queue partition; an unknown subscription is ignored (PROTOCOL.md §5.9).
func (s connRef) handleSettle(topic string, group wire.Optional[string], partition uint32, input func(subID uint64) core.Input) {
	q, err := queueOf(topic, group)
	if err != nil {
		return
	}
	key := wire.QueueKey{Topic: q.Topic, Partition: partition, Group: groupOpt(q.Group)}
	s.mu.Lock()
	bnd := s.subs[key]
	s.mu.Unlock()
	if bnd == nil {
		return
	}
	bnd.r.submit(request{in: input(bnd.subID)})
}

func (s connRef) handleDeclare(requestID uint64, d *wire.DeclareQueue) {
	q, err := queueOf(d.Topic, d.Group)
	if err != nil {
		s.replyError(wire.OpError, requestID, wire.CodeInvalid, err.Error())
		return
	}
	var patch queueSettings
	if d.DLQPolicy.Present {
		p := d.DLQPolicy.Value
		policy := core.DLQPolicy{Kind: core.DLQPolicyKind(p.Kind)}
		if p.Kind == wire.DLQCustom {
			target, err := queueOf(p.Topic, p.Group)
			if err != nil {
				s.replyError(wire.OpError, requestID, wire.CodeInvalid, "invalid dead-letter target: "+err.Error())
				return
			}
			if target == q {
				s.replyError(wire.OpError, requestID, wire.CodeInvalid, core.ErrDeadLetterLoop.Error())
				return
			}
			policy.Target = core.DLQTarget{Topic: target.Topic, Group: target.Group}
		}
		patch.DLQ = &policy
	}
	if d.DLQRetriesMax.Present {
		v := d.DLQRetriesMax.Value
		patch.MaxRetries = &v
	}
	if d.DefaultMessageTTLMs.Present {
		if d.DefaultMessageTTLMs.Value > 1<<62 {
			s.replyError(wire.OpError, requestID, wire.CodeInvalid, "default_message_ttl_ms too large")
			return
		}
		v := int64(d.DefaultMessageTTLMs.Value)
		patch.DefaultTTLMs = &v
	}
	count := uint32(1)
	if d.PartitionCount.Present && d.PartitionCount.Value > 1 {
		count = d.PartitionCount.Value
	}
	if count > maxPartitionsPerQueue {
		s.replyError(wire.OpError, requestID, wire.CodeInvalid, fmt.Sprintf("partition_count %d exceeds the limit of %d", count, maxPartitionsPerQueue))
		return
	}
	// The catalogue is the durable record of the declaration: partitions that
	// are not loaded pick the settings up when they load; loaded ones are told
	// now, and their logs catch up.
	effective, err := s.b.catalog.declare(q, count, patch, s.b.cfg.QueuesMax)
	if err != nil {
		s.replyError(wire.OpError, requestID, wire.CodeInternal, "declare failed (retry later): "+err.Error())
		return
	}
	for p := uint32(0); p < effective; p++ {
		if r := s.b.loadedRunner(core.QueueID{Topic: q.Topic, Group: q.Group, Partition: p}); r != nil {
			r.submit(request{in: &core.Declare{DLQ: patch.DLQ, MaxRetries: patch.MaxRetries, DefaultTTLMs: patch.DefaultTTLMs}})
		}
	}
	s.reply(wire.OpDeclareQueueOk, requestID, &wire.DeclareQueueOk{Status: "stored", PartitionCount: effective})
}

// maxPartitionsPerQueue bounds one declare.
const maxPartitionsPerQueue = 1024

func (s connRef) handleTopology(requestID uint64, t *wire.Topology) {
	snap := wire.TopologyOk{Generation: 1}
	endpoint := wire.Endpoint{Host: s.b.cfg.AdvertiseHost, Port: s.b.cfg.AdvertisePort}
	for _, e := range s.b.catalog.list() {
		if t.Topic.Present && t.Topic.Value != e.Topic {
			continue
		}
		if t.Group.Present && core.NormalizeGroup(t.Group.Value) != e.Group {
			continue
		}
		for p := uint32(0); p < e.Partitions; p++ {
			snap.Queues = append(snap.Queues, wire.TopologyQueue{Topic: e.Topic, Partition: p, Group: groupOpt(e.Group),
				OwnerEndpoints: []wire.Endpoint{endpoint}, PartitioningVersion: 0, PartitionCount: e.Partitions})
		}
	}
	s.reply(wire.OpTopologyOk, requestID, &snap)
}
