package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/transport/wire"
)

// takeStreamRequests takes every StreamRequest the session sent to q.
func (h *sessHarness) takeStreamRequests(q core.QueueID) []*StreamRequest {
	var reqs []*StreamRequest
	var rest []Envelope
	for _, env := range h.out {
		if r, ok := env.Msg.(*StreamRequest); ok && env.To == PartitionAddr(q) {
			reqs = append(reqs, r)
			continue
		}
		rest = append(rest, env)
	}
	h.out = rest
	return reqs
}

// takeStreamOpen takes the Open the session sent and answers it as a
// stream partition's (err: refused).
func (h *sessHarness) takeStreamOpen(q core.QueueID, partitions uint32, err *core.Error) *Open {
	h.t.Helper()
	var open *Open
	var rest []Envelope
	for _, env := range h.out {
		if o, ok := env.Msg.(*Open); ok && open == nil {
			open = o
			continue
		}
		rest = append(rest, env)
	}
	if open == nil || open.Topic != q.Topic || open.Partition != q.Partition {
		h.t.Fatalf("no Open for %v: %v", q, sessDescribeOut(h.out))
	}
	h.out = rest
	h.deliver(&Opened{Token: open.Token, Queue: q, Partitions: partitions, Kind: KindStream, Err: err})
	return open
}

// subscribeStream sends SUBSCRIBE_STREAM, answers the Open and the
// partition's reply, and returns the Subscribe and the SUBSCRIBE_OK.
func (h *sessHarness) subscribeStream(conn ConnID, m wire.SubscribeStream) (*stream.Subscribe, wire.SubscribeOk) {
	h.t.Helper()
	q := core.QueueID{Topic: m.Topic, Partition: m.Partition}
	id := h.frame(conn, wire.OpSubscribeStream, m)
	if o := h.s.opens[q]; o == nil || !o.opened {
		if open := h.takeStreamOpen(q, m.Partition+1, nil); !open.Stream {
			h.t.Fatal("a SUBSCRIBE_STREAM's Open does not ask for a stream")
		}
	}
	reqs := h.takeStreamRequests(q)
	if len(reqs) != 1 {
		h.t.Fatalf("stream requests: %d", len(reqs))
	}
	in := reqs[0].Input.(*stream.Subscribe)
	h.fromPartition(q, &Response{Token: reqs[0].Token, Reply: core.Reply{Kind: core.ReplySubscribed}})
	f := h.expect(conn, wire.OpSubscribeOk)
	ok := f.body.(wire.SubscribeOk)
	if f.hdr.RequestID != id || ok.SubID != in.SubID {
		h.t.Fatalf("SUBSCRIBE_OK %+v for %d", ok, id)
	}
	return in, ok
}

func TestSessionSubscribeStreamEveryStart(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	starts := []wire.StreamStart{
		{Kind: wire.StreamStartLatest}, {Kind: wire.StreamStartEarliest}, {Kind: wire.StreamStartOffset, Value: 5},
		{Kind: wire.StreamStartNBack, Value: 3}, {Kind: wire.StreamStartByTime, Value: 1234},
	}
	for i, st := range starts {
		in, ok := h.subscribeStream(1, wire.SubscribeStream{Topic: "ticks", Partition: uint32(i), Start: st, Prefetch: 77,
			Filter: []wire.KeyValue{{Key: "k", Value: "v*"}}})
		if in.Start != (stream.Start{Kind: stream.StartKind(st.Kind), Value: st.Value}) || in.DurableName != "" || in.AutoAck ||
			len(in.Filter) != 1 || in.Filter[0] != (stream.Clause{Key: "k", Pattern: "v*"}) {
			t.Fatalf("start %d: %+v", i, in)
		}
		if ok.Group.Present || ok.ConsumerGroup.Present || ok.ConsumerTarget.Present || ok.MemberID.Present || ok.Prefetch != 77 ||
			ok.Topic != "ticks" || ok.Partition != uint32(i) {
			t.Fatalf("SUBSCRIBE_OK %+v", ok)
		}
	}
	in, _ := h.subscribeStream(1, wire.SubscribeStream{Topic: "ticks", Partition: 9, DurableName: wire.Some("c1"), AutoAck: true})
	if in.DurableName != "c1" || !in.AutoAck {
		t.Fatalf("durable: %+v", in)
	}
	// One per partition and session: an ACK names only the partition.
	id := h.frame(1, wire.OpSubscribeStream, wire.SubscribeStream{Topic: "ticks", Partition: 9})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeConflict)
}

func TestSessionSubscribeStreamRefusals(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	id := h.frame(1, wire.OpSubscribeStream, wire.SubscribeStream{Topic: "Bad"})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeInvalid)
	// Undeclared: the Node's 404 becomes SUBSCRIBE_ERR 404.
	q := core.QueueID{Topic: "ticks"}
	id = h.frame(1, wire.OpSubscribeStream, wire.SubscribeStream{Topic: "ticks"})
	h.takeStreamOpen(q, 0, core.ErrStreamNotDeclared)
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeNotFound)
	if len(h.s.streamSubs) != 0 || len(h.s.opens) != 0 {
		t.Fatal("a refused stream subscription stays")
	}
	// The partition refuses it (too many filter clauses): SUBSCRIBE_ERR 400.
	id = h.frame(1, wire.OpSubscribeStream, wire.SubscribeStream{Topic: "ticks"})
	h.takeStreamOpen(q, 1, nil)
	r := h.takeStreamRequests(q)
	h.fromPartition(q, &Response{Token: r[0].Token, Reply: core.Reply{Kind: core.ReplyError, Err: core.ErrInvalidStreamStart}})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeInvalid)
	// A queue's topic: the partition's kind refuses it.
	jobs := core.QueueID{Topic: "jobs"}
	id = h.frame(1, wire.OpSubscribeStream, wire.SubscribeStream{Topic: "jobs"})
	h.takeOpen(jobs, 1, nil) // Kind queue
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeInvalid)
	if len(h.takeStreamRequests(jobs)) != 0 {
		t.Fatal("a stream request reached a queue partition")
	}
	// And a queue SUBSCRIBE on a stream's opened partition is refused too.
	id = h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "ticks", Prefetch: 1})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeInvalid)
	if len(h.takeRequests(q)) != 0 || len(h.s.subs) != 0 {
		t.Fatal("a queue subscribe reached a stream partition")
	}
	// PUBLISH_DELAYED to a stream: 400.
	id = h.frame(1, wire.OpPublishDelayed, wire.PublishDelayed{Topic: "ticks", NotBeforeMs: 5, RequireConfirm: true})
	h.expectError(1, wire.OpError, id, wire.CodeInvalid)
}

func TestSessionStreamDeliverAckNackCredit(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q := core.QueueID{Topic: "ticks", Partition: 2}
	in, _ := h.subscribeStream(1, wire.SubscribeStream{Topic: "ticks", Partition: 2, DurableName: wire.Some("c")})
	body := sessBody("p")
	body.Headers = []core.Header{{Key: "k", Value: "v"}}
	h.fromPartition(q, &StreamDeliveries{Stream: q, SubID: in.SubID, Items: []stream.Delivery{
		{SubID: in.SubID, Offset: 40, Body: body}, {SubID: in.SubID, Offset: 41, Body: sessBody("q"), Speculative: true}}})
	for i, f := range h.takeFrames(1) {
		d := f.body.(wire.Deliver)
		if d.Offset != uint64(40+i) || d.DeliveryTag != d.Offset || d.SubID != in.SubID || d.Group.Present || d.Topic != "ticks" || d.Partition != 2 {
			t.Fatalf("DELIVER %+v", d)
		}
		spec, _ := d.Headers.Get(wire.HeaderSpeculative)
		if i == 0 && (spec != "" || len(d.Headers) != 1 || d.Headers[0].Key != "k") {
			t.Fatalf("headers %+v", d.Headers)
		}
		if i == 1 && spec != "1" {
			t.Fatalf("speculative header %+v", d.Headers)
		}
	}
	reqs := h.takeStreamRequests(q)
	if len(reqs) != 1 {
		t.Fatalf("credit requests: %d", len(reqs))
	}
	if c, ok := reqs[0].Input.(*stream.Credit); !ok || c.SubID != in.SubID || c.Records != 2 || reqs[0].Token != 0 {
		t.Fatalf("credit %+v", reqs[0].Input)
	}
	// ACK goes to the stream partition, with the offsets.
	h.frame(1, wire.OpAck, wire.Ack{Topic: "ticks", Partition: 2, Tags: []uint64{40, 41}})
	reqs = h.takeStreamRequests(q)
	if a, ok := reqs[0].Input.(*stream.Ack); len(reqs) != 1 || !ok || a.SubID != in.SubID || len(a.Offsets) != 2 || a.Offsets[1] != 41 {
		t.Fatalf("ack %+v", reqs)
	}
	h.expectNothing(1)
	// NACK: refused, nothing sent on.
	id := h.frame(1, wire.OpNack, wire.Nack{Topic: "ticks", Partition: 2, Tags: []uint64{40}, Requeue: true})
	h.expectError(1, wire.OpError, id, wire.CodeInvalid)
	if len(h.takeStreamRequests(q)) != 0 {
		t.Fatal("a NACK reached the stream partition")
	}
	// A notice is counted, no frame.
	h.fromPartition(q, &StreamNotice{Stream: q, Notice: stream.Notice{SubID: in.SubID, Kind: stream.NoticeClamped}})
	if h.s.streamNotices != 1 {
		t.Fatal("notice not counted")
	}
	h.expectNothing(1)
	// A batch for a subscription the session does not have is handed back.
	h.fromPartition(q, &StreamDeliveries{Stream: q, SubID: 999, Items: []stream.Delivery{{SubID: 999, Body: sessBody("x")}}})
	if r := h.takeStreamRequests(q); len(r) != 1 || r[0].Input.(*stream.Unsubscribe).SubID != 999 {
		t.Fatalf("ghost: %+v", r)
	}
}

func TestSessionStreamCreditWaitsForTheOutbox(t *testing.T) {
	h := newSessHarness(t, func(c *Config) { c.OutboxBytesMax = int(c.FramePayloadBytesMax) * 2 })
	h.ready(1)
	q := core.QueueID{Topic: "ticks"}
	h.step(&Written{NowMs: h.now, Conn: 1, Bytes: h.s.unwrittenBytes})
	in, _ := h.subscribeStream(1, wire.SubscribeStream{Topic: "ticks"})
	h.step(&Written{NowMs: h.now, Conn: 1, Bytes: h.s.unwrittenBytes})
	big := &core.Body{Payload: make([]byte, h.cfg.OutboxBytesMax/2+10)}
	h.fromPartition(q, &StreamDeliveries{Stream: q, SubID: in.SubID, Items: []stream.Delivery{{SubID: in.SubID, Body: big}}})
	h.expect(1, wire.OpDeliver)
	if len(h.takeStreamRequests(q)) != 0 {
		t.Fatal("credited with the outbox over half full")
	}
	h.step(&Written{NowMs: h.now, Conn: 1, Bytes: h.s.unwrittenBytes})
	if r := h.takeStreamRequests(q); len(r) != 1 || r[0].Input.(*stream.Credit).Records != 1 {
		t.Fatalf("credit after Written: %+v", r)
	}
}

func TestSessionStreamHeldUntilAnnouncedAndDroppedWhileDormant(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q := core.QueueID{Topic: "ticks"}
	id := h.frame(1, wire.OpSubscribeStream, wire.SubscribeStream{Topic: "ticks"})
	h.takeStreamOpen(q, 1, nil)
	r := h.takeStreamRequests(q)
	sub := r[0].Input.(*stream.Subscribe).SubID
	// Delivered before the answer (it cannot: replies precede deliveries in
	// the FIFO, but held all the same if it did).
	h.fromPartition(q, &StreamDeliveries{Stream: q, SubID: sub, Items: []stream.Delivery{{SubID: sub, Body: sessBody("a")}}})
	h.expectNothing(1)
	h.fromPartition(q, &Response{Token: r[0].Token, Reply: core.Reply{Kind: core.ReplySubscribed}})
	if f := h.expect(1, wire.OpSubscribeOk); f.hdr.RequestID != id {
		t.Fatal("SUBSCRIBE_OK")
	}
	h.expect(1, wire.OpDeliver)
	h.takeStreamRequests(q)
	// Dormant: records are dropped, nothing is credited.
	h.connClosed(1)
	h.fromPartition(q, &StreamDeliveries{Stream: q, SubID: sub, Items: []stream.Delivery{{SubID: sub, Offset: 1, Body: sessBody("b")}}})
	if len(h.takeStreamRequests(q)) != 0 {
		t.Fatal("a dormant session credited")
	}
	// The resume ends the stream subscription: the client resubscribes.
	h.attach(2, wire.ResumeResumed)
	reqs := h.takeStreamRequests(q)
	if len(reqs) != 1 || reqs[0].Input.(*stream.Unsubscribe).SubID != sub || len(h.s.streamSubs) != 0 {
		t.Fatalf("resume: %+v", reqs)
	}
	// ACKs of the old subscription go nowhere.
	h.frame(2, wire.OpAck, wire.Ack{Topic: "ticks", Tags: []uint64{0}})
	if len(h.takeStreamRequests(q)) != 0 {
		t.Fatal("an ack of an ended stream subscription was routed")
	}
}

func TestSessionStreamEndUnsubscribes(t *testing.T) {
	h := newSessHarness(t, func(c *Config) { c.ReconnectGraceMs = 0 })
	h.ready(1)
	q := core.QueueID{Topic: "ticks"}
	in, _ := h.subscribeStream(1, wire.SubscribeStream{Topic: "ticks"})
	h.connClosed(1)
	if !h.ended {
		t.Fatal("no grace: the session ends")
	}
	reqs := h.takeStreamRequests(q)
	if len(reqs) != 1 || reqs[0].Input.(*stream.Unsubscribe).SubID != in.SubID {
		t.Fatalf("end: %+v", reqs)
	}
}

func TestSessionDeclarePlexus(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	id := h.frame(1, wire.OpDeclarePlexus, wire.DeclarePlexus{Topic: "ticks", PartitionCount: wire.Some(uint32(3)),
		Durability: wire.DurabilitySpeculative, RetentionRecordsMax: wire.Some(uint64(10))})
	var d *DeclareStream
	for _, env := range h.takeOut() {
		if m, ok := env.Msg.(*DeclareStream); ok {
			d = m
		}
	}
	want := core.StreamSettings{Tier: core.TierSpeculative, MaxRecords: 10, PartitionCount: 3}
	if d == nil || d.Topic != "ticks" || d.Settings != want {
		t.Fatalf("DeclareStream %+v", d)
	}
	h.deliver(&Declared{Token: d.Token, Partitions: 3})
	f := h.expect(1, wire.OpDeclarePlexusOk)
	if ok := f.body.(wire.DeclarePlexusOk); f.hdr.RequestID != id || ok.Status != "stored" || ok.PartitionCount != 3 {
		t.Fatalf("DECLARE_PLEXUS_OK %+v", ok)
	}
	id = h.frame(1, wire.OpDeclarePlexus, wire.DeclarePlexus{Topic: "jobs"})
	for _, env := range h.takeOut() {
		if m, ok := env.Msg.(*DeclareStream); ok {
			if m.Settings.PartitionCount != 1 || m.Settings.Tier != core.TierEphemeral {
				t.Fatalf("defaults %+v", m.Settings)
			}
			h.deliver(&Declared{Token: m.Token, Err: core.ErrTopicIsQueue})
		}
	}
	h.expectError(1, wire.OpError, id, wire.CodeInvalid)
	id = h.frame(1, wire.OpDeclarePlexus, wire.DeclarePlexus{Topic: "Bad"})
	h.expectError(1, wire.OpError, id, wire.CodeInvalid)
}

func TestSessionPublishToStream(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q := core.QueueID{Topic: "ticks", Partition: 1}
	id := h.frame(1, wire.OpPublish, wire.Publish{Topic: "ticks", Partition: 1, RequireConfirm: true, Payload: []byte("x")})
	var open *Open
	for _, env := range h.out {
		if o, ok := env.Msg.(*Open); ok {
			open = o
		}
	}
	if open == nil || open.Stream {
		t.Fatalf("a publish's Open may create a queue: %+v", open)
	}
	h.takeStreamOpen(q, 2, nil)
	req := h.takeRequest(q)
	if _, ok := req.Input.(*core.Publish); !ok {
		t.Fatalf("publish request %+v", req)
	}
	h.fromPartition(q, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 7}})
	f := h.expect(1, wire.OpPublishOk)
	if f.hdr.RequestID != id || f.body.(wire.PublishOk).Offset != 7 {
		t.Fatalf("PUBLISH_OK %+v", f.body)
	}
}
