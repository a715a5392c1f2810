package sim

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// What peers do once attached: producers publish, consumers subscribe and
// settle, the declarer declares the scenario's queues. Invariants:
//   - a message id is published once and never retried;
//   - a producer holds at most OutstandingConfirmsMax unanswered confirms;
//   - a consumer settles a tag only within the session that got it, on
//     whichever link that session has now (a settle made while the link is
//     down waits for the session's next attachment: a late ack);
//   - in the liveness phase every delivery is acked, so the run drains.

// maintainIntervalMs is how often a consumer re-subscribes what it lost.
const maintainIntervalMs = 250

// action is what a consumer does with one delivery.
type action uint8

const (
	doAck action = iota
	doRetry
	doRetryAfter
	doFail
	doSilent
	doDisconnect
	doUnsubscribe
	doStopReading
)

type batchedAck struct{ tag, msgID uint64 }

// headerMsgID carries a message's client-visible identity.
const headerMsgID = "x-msg-id"

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

func dlqHeaders(b *core.Body) []checker.Header {
	var out []checker.Header
	for _, h := range b.Headers {
		out = append(out, checker.Header{Key: h.Key, Value: h.Value})
	}
	return out
}

func fnv1a64(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// peerSub is the consumer's subscription to one partition.
type peerSub struct {
	part     int
	id       uint64 // the broker's sub id (0 = none)
	gen      uint64 // bumps whenever the subscription is cleared
	active   bool
	pending  bool
	prefetch uint32
	autoAck  bool
	batch    []batchedAck
	// holdUntilMs: a cohort member that left keeps this one unsubscribed
	// until then (safety phase only).
	holdUntilMs int64
}

func (s *peerSub) clear() {
	s.id, s.active, s.pending, s.batch = 0, false, false, nil
	s.gen++
}

// ---- the declarer

func (p *Peer) declareAll() {
	for i, q := range p.w.scenario.Queues {
		if p.declared[i] {
			continue
		}
		m := wire.DeclareQueue{Topic: q.Topic, DLQRetriesMax: wire.Some(q.MaxRetries),
			PartitionCount: wire.Some(uint32(q.Partitions))}
		switch q.DLQ.Kind {
		case core.DLQCustom:
			m.DLQPolicy = wire.Some(wire.DLQPolicy{Kind: wire.DLQCustom, Topic: q.DLQ.Target.Topic})
		case core.DLQGlobal:
			m.DLQPolicy = wire.Some(wire.DLQPolicy{Kind: wire.DLQGlobal})
		default:
			m.DLQPolicy = wire.Some(wire.DLQPolicy{Kind: wire.DLQDiscard})
		}
		if q.DefaultTTLMs > 0 {
			m.DefaultMessageTTLMs = wire.Some(uint64(q.DefaultTTLMs))
		}
		req := p.writeFrame(wire.OpDeclareQueue, m)
		p.pending[req] = &peerOp{kind: opDeclare, queue: i}
	}
	for i, st := range p.w.scenario.Streams {
		if p.declared[len(p.w.scenario.Queues)+i] {
			continue
		}
		m := wire.DeclarePlexus{Topic: st.Topic, PartitionCount: wire.Some(uint32(st.Partitions)), Durability: wire.Durability(st.Tier)}
		if st.MaxAgeMs > 0 {
			m.RetentionAgeMsMax = wire.Some(st.MaxAgeMs)
		}
		if st.MaxBytes > 0 {
			m.RetentionBytesMax = wire.Some(st.MaxBytes)
		}
		if st.MaxRecords > 0 {
			m.RetentionRecordsMax = wire.Some(st.MaxRecords)
		}
		req := p.writeFrame(wire.OpDeclarePlexus, m)
		p.pending[req] = &peerOp{kind: opDeclare, queue: len(p.w.scenario.Queues) + i}
	}
}

func (p *Peer) onDeclared(h wire.Header) {
	op := p.pending[h.RequestID]
	if op == nil || op.kind != opDeclare {
		return
	}
	delete(p.pending, h.RequestID)
	p.declared[op.queue] = true
	for _, done := range p.declared {
		if !done {
			return
		}
	}
	p.w.declaredAll(p)
}

// ---- producers

// payloadSmall is shared by most messages (the core never mutates a
// payload); a share of messages carries payloadLarge, long enough to be
// worth spilling.
var (
	payloadSmall = []byte("fibril-sim-payload")
	payloadLarge = make([]byte, 512)
)

func (p *Peer) produce() {
	w := &p.w.scenario.Workload
	if p.w.stopped || p.w.phase != phaseSafety || p.published >= w.MessagesPerProducer {
		return
	}
	if p.state == stateReady && p.outstandingConfirms < w.OutstandingConfirmsMax {
		p.publishOne()
	}
	p.w.after(p.rng.RangeInt64(w.PublishIntervalMinMs, w.PublishIntervalMaxMs), p.produce)
}

func (p *Peer) publishOne() {
	w := &p.w.scenario.Workload
	part := p.choosePartition()
	spec := p.w.catalogue[part]
	p.w.nextMsgID++
	msgID := p.w.nextMsgID
	now := p.nowMs()
	confirm := p.rng.Chance(w.ConfirmRatio)
	payload := payloadSmall
	if p.rng.Chance(w.LargePayloadRatio) {
		payload = payloadLarge
	}
	headers := wire.Headers{{Key: headerMsgID, Value: strconv.FormatUint(msgID, 10)}}
	if spec.queue.Cohort != "" {
		headers = append(headers, p.keyedHeaders(p.lastKey)...)
	}
	var notBeforeMs, ttlMs int64
	hasTTL := false
	if p.rng.Chance(w.DelayedRatio) {
		notBeforeMs = now + p.rng.RangeInt64(1, max(w.DelayMaxMs, 1))
	}
	if notBeforeMs == 0 && p.rng.Chance(w.TTLRatio) {
		hasTTL, ttlMs = true, p.rng.RangeInt64(max(w.TTLMinMs, 1), max(w.TTLMaxMs, 1))
	}
	op := p.w.newOp()
	p.w.rec.add(checker.Event{Kind: checker.KindPublishCall, Client: p.id, Op: op, Part: part + 1, MsgID: msgID,
		Confirm: confirm, HasTTL: hasTTL, TTLMs: ttlMs, NotBeforeMs: notBeforeMs})
	p.w.stats.Publishes++
	p.w.stats.ClientOps++
	p.published++
	if confirm {
		p.outstandingConfirms++
	}
	var req uint64
	if notBeforeMs != 0 {
		req = p.writeFrame(wire.OpPublishDelayed, wire.PublishDelayed{Topic: spec.queueID.Topic, Partition: spec.queueID.Partition,
			RequireConfirm: confirm, NotBeforeMs: uint64(notBeforeMs), Headers: headers, PublishedMs: uint64(now), Payload: payload})
	} else {
		m := wire.Publish{Topic: spec.queueID.Topic, Partition: spec.queueID.Partition, RequireConfirm: confirm,
			Headers: headers, PublishedMs: uint64(now), Payload: payload}
		if hasTTL {
			m.TTLMs = wire.Some(uint64(ttlMs))
		}
		req = p.writeFrame(wire.OpPublish, m)
	}
	if confirm {
		p.pending[req] = &peerOp{kind: opPublish, op: op, part: part, msgID: msgID, confirm: true}
	}
}

func (p *Peer) onPublishOk(h wire.Header, m wire.PublishOk) {
	op := p.pending[h.RequestID]
	if op != nil && op.kind == opStreamPublish {
		delete(p.pending, h.RequestID)
		p.streamPublishReturned(op, true, m.Offset, "")
		return
	}
	if op == nil || op.kind != opPublish {
		p.w.abort(fmt.Sprintf("client %d: PUBLISH_OK for request %d it never made", p.id, h.RequestID))
		return
	}
	delete(p.pending, h.RequestID)
	p.publishReturned(op, true, m.Offset, "")
}

func (p *Peer) publishReturned(op *peerOp, ok bool, offset uint64, errText string) {
	p.outstandingConfirms--
	p.w.rec.add(checker.Event{Kind: checker.KindPublishReturn, Client: p.id, Op: op.op, Part: op.part + 1,
		MsgID: op.msgID, Ok: ok, Offset: offset, Err: errText})
}

// choosePartition picks a queue clients publish to, then a partition: by
// key (FNV-1a 64 mod N, as every client library routes) or round robin.
func (p *Peer) choosePartition() int {
	sc := p.w.scenario
	var queues []int
	for i, q := range sc.Queues {
		if !q.DeadLetterSink {
			queues = append(queues, i)
		}
	}
	assert(len(queues) > 0, "a scenario with producers has a queue to publish to")
	q := queues[p.rng.Intn(len(queues))]
	cfg := sc.Queues[q]
	partition := 0
	switch {
	case cfg.Cohort != "":
		// Every publish to a cohort queue is keyed: per-key order across
		// rebalances is what a cohort keeps (keyedHeaders numbers them).
		p.lastKey = "key-" + strconv.Itoa(p.rng.Intn(32))
		partition = int(fnv1a64(p.lastKey) % uint64(cfg.Partitions))
	case cfg.Partitions > 1:
		if p.roundRobin == nil {
			p.roundRobin = make([]int, len(sc.Queues))
		}
		if p.rng.Chance(sc.Workload.KeyedRatio) {
			key := "key-" + strconv.Itoa(p.rng.Intn(32))
			partition = int(fnv1a64(key) % uint64(cfg.Partitions))
		} else {
			partition = p.roundRobin[q] % cfg.Partitions
			p.roundRobin[q]++
		}
	}
	for i, spec := range p.w.catalogue {
		if spec.queueIdx == q && int(spec.queueID.Partition) == partition {
			return i
		}
	}
	panic("fibril/sim invariant violated: every queue partition is in the catalogue")
}

// ---- consumers: subscriptions

func (p *Peer) maintain() {
	if p.w.stopped {
		return
	}
	if p.state == stateReady {
		p.subscribeAll()
	}
	p.w.after(maintainIntervalMs, p.maintain)
}

func (p *Peer) hasSubs() bool {
	for _, s := range p.subs {
		if s.id != 0 && s.active {
			return true
		}
	}
	return false
}

func (p *Peer) subscribeAll() {
	for _, s := range p.subs {
		if s.id == 0 && !s.pending && (p.w.phase != phaseSafety || p.w.nowMs >= s.holdUntilMs) {
			p.subscribe(s)
		}
	}
}

func (p *Peer) subscribe(s *peerSub) {
	w := &p.w.scenario.Workload
	spec := p.w.catalogue[s.part]
	s.active, s.pending = false, true
	s.prefetch = uint32(p.rng.RangeInt64(int64(w.PrefetchMin), int64(w.PrefetchMax)))
	autoAckRatio := w.AutoAckRatio
	if p.cohort != nil {
		autoAckRatio = w.Cohort.AutoAckRatio
	}
	s.autoAck = p.w.phase == phaseSafety && p.rng.Chance(autoAckRatio)
	op := p.w.newOp()
	p.w.rec.add(checker.Event{Kind: checker.KindSubscribeCall, Client: p.id, Op: op, Part: s.part + 1,
		Prefetch: s.prefetch, AutoAck: s.autoAck, Text: p.memberText()})
	p.w.stats.ClientOps++
	m := wire.Subscribe{Topic: spec.queueID.Topic, Partition: spec.queueID.Partition, Prefetch: s.prefetch, AutoAck: s.autoAck}
	if spec.queue.Cohort != "" {
		m = p.cohortSubscribe(s)
	}
	req := p.writeFrame(wire.OpSubscribe, m)
	p.pending[req] = &peerOp{kind: opSubscribe, op: op, part: s.part, sub: s}
}

func (p *Peer) onSubscribeOk(h wire.Header, m wire.SubscribeOk) {
	op := p.pending[h.RequestID]
	if op != nil && op.kind == opStreamSubscribe {
		delete(p.pending, h.RequestID)
		p.streamSubscribed(op, m.SubID, "")
		return
	}
	if op == nil || op.kind != opSubscribe {
		p.w.abort(fmt.Sprintf("client %d: SUBSCRIBE_OK for request %d it never made", p.id, h.RequestID))
		return
	}
	delete(p.pending, h.RequestID)
	p.cohortSubscribed(m)
	p.subscribeReturned(op, m.SubID, "")
}

func (p *Peer) subscribeReturned(op *peerOp, subID uint64, errText string) {
	p.w.rec.add(checker.Event{Kind: checker.KindSubscribeReturn, Client: p.id, Op: op.op, Part: op.part + 1,
		Sub: subID, Ok: errText == "", Err: errText, Text: p.memberText()})
	s := op.sub
	s.pending = false
	if errText == "" {
		s.id, s.active = subID, true
	}
}

// onSubscriptionClosed: the broker ended a subscription (PROTOCOL 7.9).
func (p *Peer) onSubscriptionClosed(m wire.SubscriptionClosed) {
	for _, s := range p.subs {
		if s.id == m.SubID {
			p.w.note(fmt.Sprintf("client %d: subscription %d closed by the broker (%d %s)", p.id, m.SubID, m.Code, m.Message))
			s.clear()
		}
	}
}

// reconcile lists the subscriptions the peer remembers after a resumed
// attachment (PROTOCOL 7.8, policy restore).
func (p *Peer) reconcile() {
	p.state = stateReconcile
	req := p.reconcileFrame()
	p.pending[req] = &peerOp{kind: opReconcile}
}

// reconcileFrame writes a RECONCILE_CLIENT listing every subscription the
// peer holds.
func (p *Peer) reconcileFrame() uint64 {
	var subs []wire.ReconcileSub
	for _, s := range p.subs {
		if s.id == 0 || !s.active {
			continue
		}
		spec := p.w.catalogue[s.part]
		rs := wire.ReconcileSub{SubID: s.id, Topic: spec.queueID.Topic, Partition: spec.queueID.Partition,
			AutoAck: s.autoAck, Prefetch: s.prefetch}
		p.cohortReconcileFields(s, &rs)
		subs = append(subs, rs)
	}
	return p.writeFrame(wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: subs})
}

// unsubscribe ends one subscription the only way the protocol has (7.11): a
// RECONCILE_CLIENT that omits it, so the broker closes it server-side and
// requeues its deliveries. Skipped while a subscribe is on its way (the
// reconcile would close what its SUBSCRIBE_OK is about to report).
func (p *Peer) unsubscribe(s *peerSub) {
	if p.state != stateReady || s.id == 0 {
		return
	}
	for _, other := range p.subs {
		if other.pending {
			return
		}
	}
	for _, op := range p.pending {
		if op.kind == opReconcile {
			return
		}
	}
	op := p.w.newOp()
	p.w.rec.add(checker.Event{Kind: checker.KindUnsubscribeCall, Client: p.id, Op: op, Part: s.part + 1, Sub: s.id})
	p.w.stats.ClientOps++
	s.clear() // its tags die with it
	req := p.reconcileFrame()
	p.pending[req] = &peerOp{kind: opReconcile, op: op, sub: s, part: s.part}
}

func (p *Peer) onReconcileResult(h wire.Header, m wire.ReconcileResult) {
	op := p.pending[h.RequestID]
	if op == nil || op.kind != opReconcile {
		p.w.abort(fmt.Sprintf("client %d: RECONCILE_RESULT it did not ask for", p.id))
		return
	}
	delete(p.pending, h.RequestID)
	if op.sub != nil {
		p.w.rec.add(checker.Event{Kind: checker.KindUnsubscribeReturn, Client: p.id, Op: op.op, Part: op.part + 1, Ok: true})
	}
	for _, l := range op.leaving {
		p.w.rec.add(checker.Event{Kind: checker.KindUnsubscribeReturn, Client: p.id, Op: l.op, Part: l.part + 1, Ok: true})
	}
	// Match every entry against the ids the peer listed before re-keying
	// any: a restarted broker mints ids that may equal other old ones.
	listed := map[uint64]*peerSub{}
	for _, s := range p.subs {
		if s.id != 0 {
			listed[s.id] = s
		}
	}
	kept := map[*peerSub]bool{}
	for _, e := range m.Entries {
		client, ok := e.Client.Get()
		if !ok {
			continue // close_server_side: a subscription the peer did not list
		}
		s := listed[client.SubID]
		if s == nil {
			continue
		}
		server, hasServer := e.Server.Get()
		if e.Action == wire.ReconcileKeep && hasServer {
			if server.SubID != s.id {
				s.id = server.SubID
			}
			kept[s] = true
		}
	}
	for _, s := range p.subs {
		if s.id != 0 && !kept[s] {
			s.clear() // the Go client closes what the result does not keep
		}
	}
	if p.state == stateReconcile {
		p.ready()
	}
}

func (p *Peer) subByID(id uint64) *peerSub {
	for _, s := range p.subs {
		if s.id == id && id != 0 {
			return s
		}
	}
	return nil
}

// subByKey finds the subscription of a delivery by its sub id.
func (p *Peer) subOfDelivery(m *wire.Deliver) *peerSub {
	return p.subByID(m.SubID)
}

// ---- consumers: deliveries and settles

func (p *Peer) onDeliver(m wire.Deliver) {
	s := p.subOfDelivery(&m)
	msgID := uint64(0)
	if v, ok := m.Headers.Get(headerMsgID); ok {
		msgID, _ = strconv.ParseUint(v, 10, 64)
	}
	part := p.w.partIndex(core.QueueID{Topic: m.Topic, Partition: m.Partition}) + 1
	p.w.rec.add(checker.Event{Kind: checker.KindClientDeliver, Client: p.id, Part: part, MsgID: msgID,
		Offset: m.Offset, Tag: m.DeliveryTag, Sub: m.SubID, Text: p.memberText()})
	p.w.stats.ClientOps++
	if s == nil || s.autoAck || p.vanished() {
		return // a subscription the peer no longer has: the lease will expire
	}
	if p.cohort != nil {
		p.onCohortDeliver(s, m.DeliveryTag, msgID)
		return
	}
	act := p.chooseAction()
	if act == doSilent {
		return
	}
	w := &p.w.scenario.Workload
	tag, subGen, sessionGen := m.DeliveryTag, s.gen, p.sessionGen
	p.w.after(p.rng.RangeInt64(w.ProcessMinMs, w.ProcessMaxMs), func() {
		if p.sessionGen != sessionGen || s.gen != subGen || p.vanished() {
			return // the tag is stale (7.7): the message will redeliver
		}
		switch act {
		case doAck:
			p.batchAck(s, tag, msgID)
		case doRetry:
			p.settle(s, []batchedAck{{tag, msgID}}, checker.ActionRetry, 0)
		case doRetryAfter:
			p.settle(s, []batchedAck{{tag, msgID}}, checker.ActionRetry, p.nowMs()+p.rng.RangeInt64(1, max(w.RetryAfterMaxMs, 1)))
		case doFail:
			p.settle(s, []batchedAck{{tag, msgID}}, checker.ActionFail, 0)
		case doDisconnect:
			p.drop("consumer disconnects")
		case doUnsubscribe:
			p.unsubscribe(s)
		case doStopReading:
			p.stopReading(p.rng.RangeInt64(1, max(w.NotReadingMaxMs, 1)))
		}
	})
}

func (p *Peer) chooseAction() action {
	if p.w.phase != phaseSafety {
		return doAck
	}
	w := &p.w.scenario.Workload
	r := p.rng.Float64()
	for _, choice := range []struct {
		ratio float64
		act   action
	}{
		{w.RetryRatio, doRetry}, {w.RetryAfterRatio, doRetryAfter}, {w.FailRatio, doFail},
		{w.SilentRatio, doSilent}, {w.DisconnectRatio, doDisconnect}, {w.UnsubscribeRatio, doUnsubscribe},
		{w.NotReadingRatio, doStopReading},
	} {
		if r < choice.ratio {
			return choice.act
		}
		r -= choice.ratio
	}
	return doAck
}

func (p *Peer) vanished() bool { return p.w.nowMs < p.vanishUntilMs }

// comeBack ends a vanish: the consumer drops its link (its session may
// resume, and its tags with it).
func (p *Peer) comeBack() {
	if p.link != nil && !p.w.stopped {
		p.drop("consumer comes back")
	}
}

// batchAck gathers acks of one subscription for AckBatchWindowMs (or until
// AckBatchMax) and sends them as one ACK, as client libraries do.
func (p *Peer) batchAck(s *peerSub, tag, msgID uint64) {
	w := &p.w.scenario.Workload
	s.batch = append(s.batch, batchedAck{tag: tag, msgID: msgID})
	if len(s.batch) >= w.AckBatchMax {
		p.flushAcks(s)
		return
	}
	if len(s.batch) == 1 {
		gen := s.gen
		p.w.after(w.AckBatchWindowMs, func() {
			switch {
			case s.gen != gen || len(s.batch) == 0:
			case p.vanished():
				s.batch = nil
			default:
				p.flushAcks(s)
			}
		})
	}
}

func (p *Peer) flushAcks(s *peerSub) {
	batch := s.batch
	s.batch = nil
	p.settle(s, batch, checker.ActionAck, 0)
}

// settle records and sends one ACK or NACK, or keeps it for the session's
// next attachment when the link is down.
func (p *Peer) settle(s *peerSub, acks []batchedAck, act checker.SettleAction, notBeforeMs int64) {
	if p.state != stateReady {
		if len(p.late) < lateSettlesMax {
			p.late = append(p.late, lateSettle{sub: s, subGen: s.gen, acks: acks, act: act, notBeforeMs: notBeforeMs})
		}
		return
	}
	p.sendSettle(s, acks, act, notBeforeMs, "")
}

// lateSettlesMax bounds the settles a disconnected consumer keeps.
const lateSettlesMax = 256

func (p *Peer) flushLate() {
	late := p.late
	p.late = nil
	for _, ls := range late {
		if ls.sub.gen == ls.subGen && ls.sub.id != 0 {
			p.sendSettle(ls.sub, ls.acks, ls.act, ls.notBeforeMs, "late")
		}
	}
}

func (p *Peer) sendSettle(s *peerSub, acks []batchedAck, act checker.SettleAction, notBeforeMs int64, trigger string) {
	spec := p.w.catalogue[s.part]
	op := p.w.newOp()
	tags := make([]uint64, len(acks))
	for i, a := range acks {
		tags[i] = a.tag
		p.w.rec.add(checker.Event{Kind: checker.KindSettleCall, Client: p.id, Op: op, Part: s.part + 1, Sub: s.id,
			Tag: a.tag, MsgID: a.msgID, Action: act, NotBeforeMs: notBeforeMs, Trigger: trigger})
		p.w.stats.ClientOps++
		p.w.stats.Settles++
	}
	if act == checker.ActionAck {
		p.writeFrame(wire.OpAck, wire.Ack{Topic: spec.queueID.Topic, Partition: spec.queueID.Partition, Tags: tags})
		return
	}
	m := wire.Nack{Topic: spec.queueID.Topic, Partition: spec.queueID.Partition, Tags: tags, Requeue: act == checker.ActionRetry}
	if notBeforeMs != 0 {
		m.NotBeforeMs = wire.Some(uint64(notBeforeMs))
	}
	p.writeFrame(wire.OpNack, m)
}

// sortedPeers orders peers by id (deterministic iteration).
func sortedPeers(ps []*Peer) []*Peer {
	out := append([]*Peer(nil), ps...)
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}
