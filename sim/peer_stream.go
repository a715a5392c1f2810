package sim

import (
	"strconv"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/transport/wire"
)

// What stream clients do once attached (docs/streams.md): stream producers
// PUBLISH records keyed over a stream's partitions; stream subscribers hold
// one SUBSCRIBE_STREAM per stream partition, durable (a name of their own
// per partition) or ephemeral (a start drawn at each subscribe), some
// filtered on the record header "k", some auto-ack; they ack each record
// after a while, read slowly now and then, and drop their links. Streams
// are not reconciled: after any new attachment every stream subscription is
// gone and the subscriber subscribes again, a durable one resuming from its
// cursor. Invariants:
//   - a record id is published once and never retried;
//   - a subscriber acks a tag only on the link and subscription that
//     delivered it;
//   - in the liveness phase subscribers ack at once and never drop links.

// headerKey is the header stream filters test.
const headerKey = "k"

var streamKeyValues = []string{"a1", "a2", "b1", "b2", "c3"}

// streamFilters are the patterns a filtered subscription may use on "k".
var streamFilters = []string{"a*", "*1", "b2", "*"}

// streamSub is a stream subscriber's subscription to one stream partition.
type streamSub struct {
	spec    *streamSpec
	name    string // durable name; "" = ephemeral
	filter  []wire.KeyValue
	autoAck bool
	id      uint64
	active  bool
	pending bool
}

func (s *streamSub) reset() { s.id, s.active, s.pending = 0, false, false }

// newStreamSubs draws subscriber i's subscriptions, one per stream
// partition; durability, filter and auto-ack are fixed for the run, so a
// durable name always has the same reader.
func (p *Peer) newStreamSubs(i int) {
	sw := &p.w.scenario.Workload.Stream
	for j, spec := range p.w.streamCat {
		s := &streamSub{spec: spec}
		if p.rng.Chance(sw.DurableRatio) {
			s.name = durableName(i, j)
			s.autoAck = p.rng.Chance(sw.AutoAckRatio)
		}
		if p.rng.Chance(sw.FilterRatio) {
			s.filter = []wire.KeyValue{{Key: headerKey, Value: streamFilters[p.rng.Intn(len(streamFilters))]}}
		}
		p.ssubs = append(p.ssubs, s)
	}
}

// ---- stream producers

func (p *Peer) produceStream() {
	sw := &p.w.scenario.Workload.Stream
	if p.w.stopped || p.w.phase != phaseSafety || p.published >= sw.RecordsPerProducer {
		return
	}
	if p.state == stateReady && p.outstandingConfirms < p.w.scenario.Workload.OutstandingConfirmsMax {
		p.publishStream()
	}
	p.w.after(p.rng.RangeInt64(1, max(sw.PublishIntervalMaxMs, 1)), p.produceStream)
}

func (p *Peer) publishStream() {
	sw := &p.w.scenario.Workload.Stream
	st := p.w.scenario.Streams[p.rng.Intn(len(p.w.scenario.Streams))]
	key := "key-" + strconv.Itoa(p.rng.Intn(16))
	partition := uint32(fnv1a64(key) % uint64(st.Partitions))
	var spec *streamSpec
	for _, s := range p.w.streamCat {
		if s.queueID.Topic == st.Topic && s.queueID.Partition == partition {
			spec = s
		}
	}
	p.w.nextMsgID++
	msgID := p.w.nextMsgID
	confirm := p.rng.Chance(sw.ConfirmRatio)
	op := p.w.newOp()
	p.w.rec.add(checker.Event{Kind: checker.KindStreamPublishCall, Client: p.id, Op: op, Part: spec.part, MsgID: msgID, Confirm: confirm})
	p.w.stats.Publishes++
	p.w.stats.ClientOps++
	p.published++
	headers := wire.Headers{{Key: headerMsgID, Value: strconv.FormatUint(msgID, 10)},
		{Key: headerKey, Value: streamKeyValues[p.rng.Intn(len(streamKeyValues))]}}
	req := p.writeFrame(wire.OpPublish, wire.Publish{Topic: st.Topic, Partition: partition, RequireConfirm: confirm,
		Headers: headers, PublishedMs: uint64(p.nowMs()), PartitionKey: wire.Some([]byte(key)), Payload: payloadSmall})
	if confirm {
		p.outstandingConfirms++
		p.pending[req] = &peerOp{kind: opStreamPublish, op: op, msgID: msgID, confirm: true, spec: spec}
	}
}

func (p *Peer) streamPublishReturned(op *peerOp, ok bool, offset uint64, errText string) {
	p.outstandingConfirms--
	p.w.rec.add(checker.Event{Kind: checker.KindStreamPublishReturn, Client: p.id, Op: op.op, Part: op.spec.part,
		MsgID: op.msgID, Ok: ok, Offset: offset, Err: errText})
}

// ---- stream subscribers

func (p *Peer) maintainStreams() {
	if p.w.stopped {
		return
	}
	if p.state == stateReady {
		p.subscribeStreams()
	}
	p.w.after(maintainIntervalMs, p.maintainStreams)
}

func (p *Peer) subscribeStreams() {
	for _, s := range p.ssubs {
		if !s.active && !s.pending {
			p.subscribeStream(s)
		}
	}
}

func (p *Peer) subscribeStream(s *streamSub) {
	m := wire.SubscribeStream{Topic: s.spec.queueID.Topic, Partition: s.spec.queueID.Partition, Filter: s.filter,
		Prefetch: 16, AutoAck: s.autoAck}
	if s.name != "" {
		m.DurableName = wire.Some(s.name)
	} else {
		// Every start kind but by-time (whose reply names a segment's first
		// offset rather than the first record it delivers).
		switch p.rng.Intn(4) {
		case 0:
			m.Start = wire.StreamStart{Kind: wire.StreamStartLatest}
		case 1:
			m.Start = wire.StreamStart{Kind: wire.StreamStartEarliest}
		case 2:
			m.Start = wire.StreamStart{Kind: wire.StreamStartOffset, Value: uint64(p.rng.Intn(200))}
		default:
			m.Start = wire.StreamStart{Kind: wire.StreamStartNBack, Value: uint64(p.rng.Intn(60))}
		}
	}
	s.pending = true
	p.w.stats.ClientOps++
	req := p.writeFrame(wire.OpSubscribeStream, m)
	p.pending[req] = &peerOp{kind: opStreamSubscribe, ssub: s, spec: s.spec}
}

func (p *Peer) streamSubscribed(op *peerOp, subID uint64, errText string) {
	s := op.ssub
	s.pending = false
	if errText != "" {
		return // subscribed again by maintainStreams
	}
	s.id, s.active = subID, true
	p.w.rec.add(checker.Event{Kind: checker.KindStreamClientSub, Client: p.id, Part: s.spec.part, Sub: subID, Text: s.name})
}

func (p *Peer) onStreamDeliver(m wire.Deliver) {
	var s *streamSub
	for _, x := range p.ssubs {
		if x.active && x.id == m.SubID {
			s = x
		}
	}
	if s == nil {
		return // a subscription this client no longer holds
	}
	msgID, speculative := uint64(0), false
	for _, h := range m.Headers {
		switch h.Key {
		case headerMsgID:
			msgID, _ = strconv.ParseUint(h.Value, 10, 64)
		case wire.HeaderSpeculative:
			speculative = speculative || h.Value == "1"
		}
	}
	p.w.rec.add(checker.Event{Kind: checker.KindStreamClientDeliver, Client: p.id, Part: s.spec.part, Sub: m.SubID,
		Offset: m.Offset, Tag: m.DeliveryTag, MsgID: msgID, Speculative: speculative})
	p.w.stats.ClientOps++
	sw := &p.w.scenario.Workload.Stream
	safety := p.w.phase == phaseSafety
	if !s.autoAck {
		l, subID, tag := p.link, s.id, m.DeliveryTag
		delay := int64(0)
		if safety {
			delay = p.rng.RangeInt64(0, sw.AckDelayMaxMs)
		}
		p.w.after(delay, func() {
			if p.link == l && s.active && s.id == subID && p.state == stateReady {
				p.writeFrame(wire.OpAck, wire.Ack{Topic: s.spec.queueID.Topic, Partition: s.spec.queueID.Partition, Tags: []uint64{tag}})
			}
		})
	}
	switch {
	case !safety:
	case p.rng.Chance(sw.ReconnectRatio):
		p.drop("stream subscriber reconnects")
	case p.rng.Chance(sw.SlowRatio) && p.notReadingTill <= p.w.nowMs:
		p.w.fault("slow-consumer", "stream client %d stops reading", p.id)
		p.stopReading(p.rng.RangeInt64(50, 400))
	}
}

// streamSubClosed: the broker ended a stream subscription (PROTOCOL 7.9).
func (p *Peer) streamSubClosed(subID uint64) {
	for _, s := range p.ssubs {
		if s.id == subID {
			s.reset()
		}
	}
}
