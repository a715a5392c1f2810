package node

// Partitions as a session sees them: opens, requests queued behind them,
// responses by token, deliveries and the subscriptions they belong to.
// Invariants:
//   - a request reaches a partition only after the Node answered its Open;
//     requests queued behind a pending Open keep their order;
//   - every token is in pending until answered once, then forgotten;
//   - a delivery is encoded only for an announced subscription of an
//     attached session with an open gate; otherwise it is held, and a
//     manual-ack subscription holds at most max(prefetch, 1);
//   - a subscription is unannounced only while the attachment that asked
//     for it is attached: it is dropped (and unsubscribed) with it;
//   - a delivery for a subscription the session does not have is handed
//     back at once (Unsubscribe), so the partition requeues it instead of
//     letting its lease burn a retry (the ghost-subscription defect).

import (
	"slices"
	"strconv"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/transport/wire"
)

// Limits and guide messages of the partition path.
const (
	// openWaitingMax bounds requests queued behind one partition's Open.
	// 4096 absorbs a burst of publishes while a partition loads, yet caps what
	// one stuck load can pin in memory; past it the client gets a retryable 500.
	openWaitingMax      = 4096
	msgPartitionGone    = "broker-side failure (retry later): the queue partition is not loaded any more"
	msgOpenBacklog      = "broker-side failure (retry later): too many requests wait for this queue partition to load"
	msgSubscriptionGone = "broker-side failure (retry later): the subscription ended before it started"
	msgTooManyOpens     = "broker-side backpressure (retry later): this session uses too many queue partitions at once"
)

// opKind says what a token answers. Append-only.
type opKind uint8

const (
	// opNone is the zero value, so a pendingOp looked up and not found never
	// passes for a real one.
	opNone      opKind = 0
	opPublish   opKind = 1
	opSubscribe opKind = 2
	opRestore   opKind = 3
	opDeclare   opKind = 4
	// opDeclareStream: a DECLARE_PLEXUS; opStreamSubscribe: a
	// SUBSCRIBE_STREAM (session_stream.go).
	opDeclareStream   opKind = 5
	opStreamSubscribe opKind = 6
	// opCohortJoin: an exclusive subscribe's (or restore's) join of its
	// cohort, answered by the Node (session_cohort.go); then says which.
	opCohortJoin opKind = 7
)

// pendingOp is a request waiting for its answer, keyed by its token in
// Session.pending. gen ties the answer to the attachment that asked: a
// reply is sent only if that attachment is still the current one.
type pendingOp struct {
	kind      opKind
	gen       uint64 // the attachment that asked
	requestID uint64
	queue     core.QueueID
	subID     uint64
	recon     *reconcileRun // opRestore
	entry     int           // opRestore: the entry it completes
	confirm   confirmResult // opPublish: its answer, waiting for its turn
	then      opKind        // opCohortJoin: the subscribe or restore it finishes
}

// sessionSub is one queue subscription of the session. It lives in the
// session, not in the connection, so a resumed client keeps it and its
// delivery tags stay valid (PROTOCOL 7.7). held keeps deliveries that
// cannot go out yet: while dormant, behind the gate, before SUBSCRIBE_OK
// (or RECONCILE_RESULT) announced the subscription.
type sessionSub struct {
	id            uint64
	key           core.QueueID          // normalised (topic, group, partition)
	group         wire.Optional[string] // key.Group as frames carry it
	prefetch      uint32                // as requested (echoed unclamped)
	autoAck       bool
	subscribeSent bool // the Subscribe left (or is queued behind the Open)
	active        bool // the partition accepted it
	announced     bool // SUBSCRIBE_OK or RECONCILE_RESULT went out: deliveries may follow
	paused        bool
	token         uint64 // its Subscribe's (or restore's) token in pending, until answered
	held          []core.Delivery
	// exclusive: a cohort member's subscription (session_cohort.go);
	// cohortJoined once the Node accepted its join; partitions is the
	// queue's count the join names.
	exclusive    *exclusiveSpec
	cohortJoined bool
	partitions   uint32
}

// partitionOpen is the session's Open of one queue partition: the Node
// creates the queue if it was never declared (SPEC 1) and loads the
// partition; until it answers, requests wait here in arrival order.
type partitionOpen struct {
	token      uint64 // the Open's, to tell its answer from a stale one
	opened     bool
	partitions uint32          // the queue's count, from the Node
	kind       PartitionKind   // from the Node: requests of the other kind are refused
	waiting    []queuedRequest // in arrival order; nil once opened
	usedMs     int64           // the last request to it (session_idle.go)
}

// queuedRequest is a partition input on its way; gen and requestID answer
// an unconfirmed publish whose partition cannot be opened (it has no token,
// yet PROTOCOL 5.3 step 8 reports a failure to reach the queue at all).
type queuedRequest struct {
	token     uint64
	input     core.Input
	sinput    stream.Input // a stream partition's input (input is nil then)
	req       *Request     // prebuilt (publishes), else made when sent
	kind      opKind
	gen       uint64
	requestID uint64
}

// forgetIdleOpens forgets opened partitions that no subscription uses, so
// that a session publishing to ever new queues stays bounded. Only at the
// bound, so its sort stays off the common path.
func (s *Session) forgetIdleOpens() {
	for _, q := range sortedOpenKeys(s.opens) {
		// Opens still pending keep their queue of requests; forgetting one would
		// strand those requests unanswered.
		if o := s.opens[q]; o.opened && s.subs[q] == nil && s.streamSubs[q] == nil {
			s.forgetOpen(q)
		}
	}
}

// request is the envelope message of r.
func (r *queuedRequest) request() Message {
	if r.sinput != nil {
		sessionAssert(r.input == nil && r.req == nil, "a request is a queue's or a stream's")
		return &StreamRequest{Token: r.token, Input: r.sinput}
	}
	return r.queueRequest()
}

// queueRequest is the envelope message of a queue partition's r.
func (r *queuedRequest) queueRequest() *Request {
	if r.req != nil {
		sessionAssert(r.req.Token == r.token && r.req.Input == r.input, "a prebuilt request differs from its queue entry")
		return r.req
	}
	return &Request{Token: r.token, Input: r.input}
}

// toPartition sends a request, opening the partition first if needed:
// once per (queue, partition) per session, and again after a failed or
// bounced one. The backlog behind a pending Open is bounded; past it the
// request is refused as retryable rather than queued without limit.
func (s *Session) toPartition(q core.QueueID, r queuedRequest) {
	sessionAssert(!s.ended, "an ended session sends only Unsubscribe, directly")
	o := s.opens[q]
	if o == nil {
		// Checked where a queue enters opens: every later request to it
		// names a key that passed here (a check per request cost as much
		// as the rest of the routing).
		sessionAssert(core.ValidateName(q.Topic) == nil, "an invalid name reached the partition path")
		if len(s.opens) >= opensMax {
			s.forgetIdleOpens()
		}
		if len(s.opens) >= opensMax {
			// Every remembered partition is in use or still opening.
			s.failRequest(r, wire.CodeInternal, msgTooManyOpens)
			return
		}
		// A fresh token per Open: an answer to an earlier, forgotten Open of the
		// same queue must not release this one's requests.
		o = &partitionOpen{token: s.newToken()}
		s.opens[q] = o
		// Only a stream subscribe needs a stream: the Node then creates
		// nothing (404 when undeclared).
		_, streamOnly := r.sinput.(*stream.Subscribe)
		s.out(NodeAddr(), &Open{Token: o.token, Topic: q.Topic, Group: q.Group, Partition: q.Partition, Stream: streamOnly})
	}
	o.usedMs = s.nowMs
	// Once opened, requests go straight out: FIFO per (session, partition)
	// pair keeps them after everything queued before.
	if o.opened {
		s.sendRequest(q, o, r)
		return
	}
	if len(o.waiting) >= openWaitingMax {
		s.failRequest(r, wire.CodeInternal, msgOpenBacklog)
		return
	}
	o.waiting = append(o.waiting, r)
}

// onOpened releases the requests that waited for the Open, in order, or
// fails them all with the Node's error.
func (s *Session) onOpened(now int64, m *Opened) {
	o := s.opens[m.Queue]
	if o == nil || o.token != m.Token || o.opened {
		// An Open the session gave up on: its grant is handed back, or the
		// partition would count this session as its publisher forever.
		s.forgetGrant(m)
		return
	}
	waiting := o.waiting
	o.waiting = nil
	if m.Err != nil {
		// Forget the open: the next use tries again (a partition out of
		// range stays out of range; a load failure may clear).
		delete(s.opens, m.Queue)
		for _, r := range waiting {
			s.failRequest(r, wire.ErrorCode(m.Err.Code()), m.Err.Error())
		}
		return
	}
	sessionAssert(m.Queue.Partition < m.Partitions, "opened a partition out of its queue's range")
	sessionAssert(len(waiting) <= openWaitingMax, "the backlog behind an Open outgrew its bound")
	o.opened, o.partitions, o.kind = true, m.Partitions, m.Kind
	for _, r := range waiting {
		s.sendRequest(m.Queue, o, r)
	}
}

// sendRequest sends r to its opened partition, or refuses it when it is
// of the other kind (a topic is a queue or a stream).
func (s *Session) sendRequest(q core.QueueID, o *partitionOpen, r queuedRequest) {
	if code, msg := kindRefusal(o.kind, &r); msg != "" {
		s.failRequest(r, code, msg)
		return
	}
	s.out(PartitionAddr(q), r.request())
}

// failRequest answers a request that never reached its partition.
func (s *Session) failRequest(r queuedRequest, code wire.ErrorCode, msg string) {
	if r.token != 0 && r.kind == opPublish {
		// Up-front: it skips the confirm order (PROTOCOL 7.2).
		if _, ok := s.pending[r.token]; ok {
			delete(s.pending, r.token)
			s.replyError(r.gen, wire.OpError, r.requestID, code, msg)
			s.releaseConfirms()
		}
		return
	}
	if r.token != 0 {
		s.failOp(r.token, code, msg)
		return
	}
	if r.kind == opPublish {
		// PROTOCOL 5.3 step 8: a failure to hand the message to its queue
		// at all is reported even without a confirm.
		s.replyError(r.gen, wire.OpError, r.requestID, code, msg)
	}
}

// failOp answers a pending token with an error, on the frame its request
// expects (SUBSCRIBE_ERR for a subscribe that decoded, ERROR otherwise,
// PROTOCOL 6.1); a restore's failure becomes its reconcile entry.
func (s *Session) failOp(token uint64, code wire.ErrorCode, msg string) {
	// A done confirm waits only for its turn in the order: a second answer
	// (a bounce crossing the Response) must not overwrite its result.
	op, ok := s.pending[token]
	if !ok || op.confirm.done {
		return
	}
	delete(s.pending, token)
	switch op.kind {
	case opPublish:
		// The durable append failed: a confirm failure, in its turn.
		s.confirmDone(token, op, confirmResult{done: true, failed: true, errCode: code, errMsg: msg})
	// The subscription never became active on the partition, so it is dropped
	// without an Unsubscribe; a later SUBSCRIBE is not refused as a duplicate.
	case opSubscribe:
		if sub := s.subsByID[op.subID]; sub != nil {
			s.dropSub(sub)
		}
		s.replyError(op.gen, wire.OpSubscribeErr, op.requestID, code, msg)
	case opRestore:
		if sub := s.subsByID[op.subID]; sub != nil {
			s.dropSub(sub)
		}
		s.restoreDone(op, false)
	case opStreamSubscribe:
		if sub := s.streamSubsByID[op.subID]; sub != nil {
			s.dropStreamSub(sub) // never active: nothing to unsubscribe
		}
		s.replyError(op.gen, wire.OpSubscribeErr, op.requestID, code, msg)
	default:
		panic("node: a partition request with a token of another kind")
	}
}

// onResponse routes a partition's answer by token. A token the session no
// longer waits for (answered by a bounce already) is ignored: each token is
// answered at most once.
func (s *Session) onResponse(now int64, m *Response) {
	op, ok := s.pending[m.Token]
	if !ok || op.confirm.done {
		return // answered already (a bounce, or this very answer twice)
	}
	if m.Reply.Kind == core.ReplyError {
		sessionAssert(m.Reply.Err != nil, "an error reply without an error")
		s.failOp(m.Token, wire.ErrorCode(m.Reply.Err.Code()), m.Reply.Err.Error())
		return
	}
	switch op.kind {
	case opPublish:
		sessionAssert(m.Reply.Kind == core.ReplyPublished, "a publish answered with another reply")
		s.confirmDone(m.Token, op, confirmResult{done: true, offset: m.Reply.Offset})
	case opSubscribe, opRestore:
		sessionAssert(m.Reply.Kind == core.ReplySubscribed, "a subscribe answered with another reply")
		delete(s.pending, m.Token)
		s.onSubscribed(op)
	case opStreamSubscribe:
		sessionAssert(m.Reply.Kind == core.ReplySubscribed, "a stream subscribe answered with another reply")
		delete(s.pending, m.Token)
		s.onStreamSubscribed(op)
	default:
		panic("node: a response for a token of another kind")
	}
}

// onSubscribed: the partition accepted a subscribe or a restore.
func (s *Session) onSubscribed(op pendingOp) {
	sub := s.subsByID[op.subID]
	if sub == nil {
		// It ended (reconcile closed it, or the partition went away) while
		// the subscribe was on its way: hand it back, never keep a ghost,
		// and tell a waiting client it did not start (retryable).
		s.out(PartitionAddr(op.queue), &Request{Input: &core.Unsubscribe{SubID: op.subID}})
		if op.kind == opRestore {
			s.restoreDone(op, false)
			return
		}
		s.replyError(op.gen, wire.OpSubscribeErr, op.requestID, wire.CodeInternal, msgSubscriptionGone)
		return
	}
	// Only the asking attachment can learn of it: when that attachment
	// went, forgetConn dropped the subscription and its token.
	sessionAssert(op.gen == s.gen && s.conn != 0, "a subscribe answered after its attachment went")
	// Active: the partition knows it, so the end must unsubscribe it.
	sub.active = true
	if sub.exclusive != nil && !sub.cohortJoined {
		// Gated at its partition until the Node names it owner; the
		// answer waits for the cohort to take it (409 otherwise).
		if o := s.opens[sub.key]; o != nil {
			sub.partitions = o.partitions
		}
		s.joinCohort(op, sub)
		return
	}
	s.subscribed(op, sub)
}

// subscribed answers an accepted subscribe (SUBSCRIBE_OK) or restore.
func (s *Session) subscribed(op pendingOp, sub *sessionSub) {
	if op.kind == opRestore {
		s.restoreDone(op, true)
		return
	}
	s.replyOn(op.gen, wire.OpSubscribeOk, op.requestID, s.subscribeOk(sub))
	if s.subsByID[sub.id] != sub {
		// The answer overflowed the outbox: the cut dropped the subscription
		// (unannounced) or ended the session. Nothing to announce.
		return
	}
	s.announce(sub)
	if s.ended {
		// Announcing flushed held deliveries, and one overflowed the outbox
		// of a session already shutting down: the cut ended it (rapid
		// found this). An ended session has no skeleton to change.
		return
	}
	s.skeletonChanged()
}

// announce lets a subscription's deliveries flow (its SUBSCRIBE_OK or
// RECONCILE_RESULT went out first, PROTOCOL 5.6).
func (s *Session) announce(sub *sessionSub) {
	sessionAssert(sub.active, "a subscription announced before its partition accepted it")
	sub.announced = true
	if s.conn != 0 && s.gateOpen && len(sub.held) > 0 {
		s.flushSub(sub)
	}
}

// onDeliveries encodes deliveries straight into DELIVER frames when they
// may go out, and holds them otherwise. A batch for a subscription the
// session does not have is handed back at once.
func (s *Session) onDeliveries(m *Deliveries) {
	sub := s.subsByID[m.SubID]
	if sub == nil || sub.key != m.Queue {
		// Handing it back at once lets the partition requeue now; waiting for the
		// lease to expire would burn a retry count on a message nobody saw.
		s.out(PartitionAddr(m.Queue), &Request{Input: &core.Unsubscribe{SubID: m.SubID}})
		return
	}
	for i := range m.Items {
		d := &m.Items[i]
		sessionAssert(d.SubID == m.SubID, "a delivery batch mixes subscriptions")
		sessionAssert(!d.Body.IsStored() || len(d.Body.Payload) == int(d.Body.Ref.LengthBytes), "a stored body reached the session unread")
		// Held ones go first: order within a subscription is kept. One
		// the outbox bound refused is held for the next attachment.
		sent := s.conn != 0 && s.gateOpen && sub.announced && len(sub.held) == 0 && s.encodeDeliver(sub, d)
		if s.ended || s.subsByID[m.SubID] != sub {
			return // the outbox bound cut the connection and the session ended
		}
		if !sent {
			s.hold(sub, *d)
		}
		if s.ended {
			return // held over its bounds: the session ended
		}
	}
}

// hold keeps a delivery until it can be sent.
func (s *Session) hold(sub *sessionSub, d core.Delivery) {
	sessionAssert(s.subsByID[sub.id] == sub, "holding for a subscription the session dropped")
	sessionAssert(d.SubID == sub.id, "holding a delivery of another subscription")
	// max(prefetch, 1): PROTOCOL 5.6 treats prefetch 0 as 1, and so does the
	// partition's lease limit, so at least one is held.
	if !sub.autoAck && len(sub.held) >= int(max(sub.prefetch, 1)) {
		// The partition never leases more than prefetch to one
		// subscription, so the oldest held one has expired there (a
		// redelivery replaced it): dropping it loses nothing.
		s.heldBytes -= len(sub.held[0].Body.Payload)
		s.heldCount--
		sub.held[0] = core.Delivery{}
		sub.held = sub.held[1:]
	}
	// An auto-ack delivery is already settled: dropping it would lose the
	// message, so auto-ack subscriptions hold every one, bounded in bytes
	// and in count (an empty payload weighs no bytes).
	sub.held = append(sub.held, d)
	s.heldBytes += len(d.Body.Payload)
	s.heldCount++
	// Ending releases every lease at the partitions (their Unsubscribes), so
	// the messages go to other consumers instead of waiting on this one.
	if s.heldBytes > s.cfg.OutboxBytesMax || s.heldCount > heldDeliveriesMax {
		// A session nobody reads cannot hold without bound.
		s.end()
	}
}

// flushHeld sends every announced subscription's held deliveries, in key
// order (determinism: never Go's map order).
func (s *Session) flushHeld() {
	if s.heldBytes == 0 && !s.anyHeld() {
		return
	}
	for _, key := range sortedSubKeys(s.subs) {
		sub := s.subs[key]
		if sub == nil || !sub.announced || len(sub.held) == 0 {
			continue
		}
		// flushSub may cut the connection (outbox bound); stop rather than hold
		// the rest against a connection that is gone.
		if s.conn == 0 || !s.gateOpen {
			return
		}
		s.flushSub(sub)
	}
}

// anyHeld says whether some subscription holds deliveries (empty payloads
// count for no bytes).
func (s *Session) anyHeld() bool {
	for _, sub := range s.subs {
		if len(sub.held) > 0 {
			return true
		}
	}
	return false
}

// flushSub sends one subscription's held deliveries, in order. Each
// leaves the list only once its frame is in the outbox: encoding can cut
// the connection (outbox bound), and the one refused stays held for the
// next attachment, or goes with the session if the cut ended it.
func (s *Session) flushSub(sub *sessionSub) {
	for len(sub.held) > 0 && s.conn != 0 && s.gateOpen {
		if !s.encodeDeliver(sub, &sub.held[0]) {
			return // cut: held is as it was, or dropped with the session
		}
		s.heldBytes -= len(sub.held[0].Body.Payload)
		s.heldCount--
		sub.held[0] = core.Delivery{}
		sub.held = sub.held[1:]
	}
	if len(sub.held) == 0 {
		sub.held = nil // give the drained backing array back
	}
}

// encodeDeliver writes one DELIVER (the hot path: no allocation). The
// message and its header list are session-owned scratch, and the retry
// count uses strconv's small-number strings; fibril.retries appears only
// when the count is above 0 (PROTOCOL 5.8). Request ids come from the
// connection's server counter.
func (s *Session) encodeDeliver(sub *sessionSub, d *core.Delivery) bool {
	sessionAssert(s.gateOpen && sub.announced, "a DELIVER before the gate opened or before SUBSCRIBE_OK")
	sessionAssert(!s.dormant, "a DELIVER from a dormant session")
	body := d.Body
	m := &s.deliverM
	*m = wire.Deliver{SubID: sub.id, Topic: sub.key.Topic, Group: sub.group, Partition: sub.key.Partition,
		Offset: d.Offset, DeliveryTag: d.Tag, PublishedMs: uint64(body.PublishedMs), PublishReceivedMs: uint64(body.ReceivedMs),
		ContentType: wire.ContentType{Kind: wire.ContentKind(body.ContentType.Kind), Custom: body.ContentType.Custom},
		Payload:     body.Payload}
	if len(body.Headers) > 0 || d.Retries > 0 {
		hs := s.headers[:0]
		for _, h := range body.Headers {
			hs = append(hs, wire.KeyValue{Key: h.Key, Value: h.Value})
		}
		if d.Retries > 0 {
			hs = append(hs, wire.KeyValue{Key: wire.HeaderRetries, Value: strconv.FormatUint(uint64(d.Retries), 10)})
		}
		m.Headers, s.headers = hs, hs
	}
	sent := s.emit(s.conn, wire.OpDeliver, s.nextServerReqID(), m)
	// Keep no reference to the payload past the step: the body belongs to
	// the envelope, and a stored one's bytes to the driver.
	m.Payload, m.Headers = nil, nil
	clear(s.headers)
	return sent
}

// onSubscriptionEnded: the partition ended a subscription on its side.
func (s *Session) onSubscriptionEnded(m *SubscriptionEnded) {
	// The Host knows the subscription, so the session still does unless it
	// dropped it itself (its Unsubscribe crossed this message).
	sub := s.subsByID[m.SubID]
	if sub == nil || sub.key != m.Queue {
		return
	}
	s.closeSub(sub, m.Code, m.Message)
}

// closeSub ends a subscription broker-side and tells the client (PROTOCOL
// 7.9: only while the transport is up).
func (s *Session) closeSub(sub *sessionSub, code wire.ReasonCode, msg string) {
	sessionAssert(!s.ended, "an ended session has no subscriptions to close")
	s.dropSub(sub)
	// An unannounced subscription's id was never told to the client, so a
	// SUBSCRIPTION_CLOSED for it would name an id the client cannot match.
	if s.conn != 0 && sub.announced {
		s.push(wire.OpSubscriptionClosed, s.nextServerReqID(), &wire.SubscriptionClosed{SubID: sub.id, Code: code, Message: msg})
	}
	if !s.ended { // the push may overflow the outbox, and the cut end the session
		s.skeletonChanged()
	}
}

// onBounced: an envelope's receiver does not exist. Only a partition can
// be gone (the Node always exists).
func (s *Session) onBounced(now int64, env Envelope) {
	if s.ended {
		return
	}
	var token uint64
	switch req := env.Msg.(type) {
	case *Request:
		token = req.Token
	case *StreamRequest:
		token = req.Token
	default:
		panic("node: only a partition request can bounce")
	}
	sessionAssert(env.To.Kind == AddrPartition, "the Node never bounces a session's envelope")
	q := env.To.Queue
	// The partition was unloaded (or failed): the cached Open is stale, and
	// keeping it would send every later request into the void.
	if o := s.opens[q]; o != nil && o.opened {
		delete(s.opens, q) // the next use opens it again
	}
	// 500 is retryable (PROTOCOL 6.2): the client's retry opens anew.
	if token != 0 {
		s.failOp(token, wire.CodeInternal, msgPartitionGone)
	}
	if sub := s.streamSubs[q]; sub != nil && sub.active {
		s.closeStreamSub(sub, wire.ReasonServerError, "the stream partition is not loaded any more; subscribe again")
	}
	// The partition that held the subscription is gone, and with it the
	// leases: the client must subscribe again to get deliveries.
	if sub := s.subs[q]; sub != nil && sub.active {
		s.closeSub(sub, wire.ReasonServerError, "the queue partition is not loaded any more; subscribe again")
	}
}

// dropSub forgets a subscription and what it held (the partition requeues
// held manual-ack deliveries when it unsubscribes, or when their leases
// expire).
func (s *Session) dropSub(sub *sessionSub) {
	sessionAssert(s.subsByID[sub.id] == sub, "dropping a subscription twice")
	for i := range sub.held {
		s.heldBytes -= len(sub.held[i].Body.Payload)
	}
	s.heldCount -= len(sub.held)
	sub.held = nil
	s.leaveCohort(sub)
	delete(s.subs, sub.key)
	delete(s.subsByID, sub.id)
	s.rd.Counted.SubsClosed++
}

// dropUnannounced ends the subscriptions the current attachment asked for
// and was not told about yet (SUBSCRIBE_OK or RECONCILE_RESULT pending):
// the attachment is going, and nobody else can learn their sub ids, so
// kept they would be ghosts (deliveries under an unknown id, a retried
// SUBSCRIBE refused with 409). Their answers will find no token; what the
// partition already delivered to them is handed back with the
// Unsubscribe (auto-ack ones are settled: the client never had them).
func (s *Session) dropUnannounced() {
	if len(s.subs) == 0 {
		return
	}
	skeleton := false
	for _, key := range sortedSubKeys(s.subs) {
		sub := s.subs[key]
		if sub.announced {
			continue
		}
		if op, ok := s.pending[sub.token]; ok && op.subID == sub.id {
			sessionAssert(op.gen == s.gen, "an unannounced subscription of an older attachment")
			delete(s.pending, sub.token)
		}
		skeleton = skeleton || sub.active
		s.unsubscribe(sub) // behind its Subscribe (FIFO per pair, or behind the Open)
	}
	if skeleton {
		s.skeletonChanged() // a restored one was active, so in the skeleton
	}
}

// pauseSubscriptions stops (or restarts) new deliveries to every
// subscription: a dormant session must not be handed messages (PROTOCOL
// 7.7; with auto-ack they would be settled and lost).
func (s *Session) pauseSubscriptions(paused bool) {
	for _, key := range sortedSubKeys(s.subs) {
		sub := s.subs[key]
		// A subscription not yet sent gets its state with the Subscribe itself;
		// pausing it first would queue a PauseSubscription the partition cannot
		// match to anything.
		if sub.paused == paused || !sub.subscribeSent {
			continue
		}
		// Queued behind the Subscribe (FIFO per pair), so a pending
		// subscribe is paused as soon as the partition knows it.
		sub.paused = paused
		s.toPartition(key, queuedRequest{input: &core.PauseSubscription{SubID: sub.id, Paused: paused}})
	}
}

// resumeSubscriptions restarts deliveries once the resumed session's gate
// opened (before, they could only be held).
func (s *Session) resumeSubscriptions() { s.pauseSubscriptions(false) }

// skeletonChanged tells the Node the session's accepted subscriptions, so
// that a restarted broker can answer resumed_after_restart (PROTOCOL 7.7).
func (s *Session) skeletonChanged() {
	sessionAssert(!s.ended, "an ended session has no skeleton to change")
	msg := &SkeletonChanged{Subs: make([]SkeletonSub, 0, len(s.subs))}
	for _, key := range sortedSubKeys(s.subs) {
		// Only active subscriptions go into the skeleton: one the partition never
		// accepted cannot be restored after a restart.
		// Nor exclusive ones: restored after a restart they would consume
		// as shared consumers; the client's reconcile rejoins them.
		if sub := s.subs[key]; sub.active && sub.exclusive == nil {
			msg.Subs = append(msg.Subs, SkeletonSub{Queue: key, Prefetch: sub.prefetch, AutoAck: sub.autoAck})
		}
	}
	s.out(NodeAddr(), msg)
}

// sortedSubKeys orders subscriptions so that effects never follow Go's map
// order (determinism: the simulator replays a seed byte for byte). It
// allocates, so it is kept off the per-frame paths.
func sortedSubKeys(subs map[subKey]*sessionSub) []subKey {
	keys := make([]subKey, 0, len(subs))
	for k := range subs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareQueueIDs)
	return keys
}

// sortedOpenKeys orders the opens (determinism, as sortedSubKeys).
func sortedOpenKeys(opens map[core.QueueID]*partitionOpen) []core.QueueID {
	keys := make([]core.QueueID, 0, len(opens))
	for k := range opens {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareQueueIDs)
	return keys
}

// compareQueueIDs orders by topic, group, partition.
func compareQueueIDs(a, b core.QueueID) int {
	switch {
	case a.Topic != b.Topic:
		return stringsCompare(a.Topic, b.Topic)
	case a.Group != b.Group:
		return stringsCompare(a.Group, b.Group)
	case a.Partition < b.Partition:
		return -1
	case a.Partition > b.Partition:
		return 1
	}
	return 0
}

// stringsCompare is strings.Compare, kept here so the comparisons read as
// one family.
func stringsCompare(a, b string) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}
