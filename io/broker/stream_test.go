package broker

import (
	"strconv"
	"testing"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// Stream partitions through the broker, at the frame level: DECLARE_PLEXUS,
// PUBLISH to a stream, SUBSCRIBE_STREAM and its DELIVERs, ACK of a durable
// cursor, and restarts over the same data directory.

func (p *peer) declarePlexus(m wire.DeclarePlexus) frame {
	p.t.Helper()
	return p.reply(p.request(wire.OpDeclarePlexus, &m))
}

// declareStream declares a one-partition stream and fails unless it is ok.
func (p *peer) declareStream(m wire.DeclarePlexus) {
	p.t.Helper()
	f := p.declarePlexus(m)
	ok, isOk := f.body.(wire.DeclarePlexusOk)
	if !isOk || ok.PartitionCount != 1 {
		p.t.Fatalf("DECLARE_PLEXUS %q answered with %v %+v", m.Topic, f.hdr.Opcode, f.body)
	}
}

func (p *peer) subscribeStream(m wire.SubscribeStream) frame {
	p.t.Helper()
	return p.reply(p.request(wire.OpSubscribeStream, &m))
}

func (p *peer) mustSubscribeStream(m wire.SubscribeStream) uint64 {
	p.t.Helper()
	f := p.subscribeStream(m)
	ok, isOk := f.body.(wire.SubscribeOk)
	if !isOk || ok.Topic != m.Topic || ok.Group.Present {
		p.t.Fatalf("SUBSCRIBE_STREAM %q answered with %v %+v", m.Topic, f.hdr.Opcode, f.body)
	}
	return ok.SubID
}

// publishMany pipelines n confirmed publishes, build(offset) each, and waits for
// every PUBLISH_OK, checking the offsets run on from first.
func (p *peer) publishMany(topic string, first uint64, n int, build func(i int) *wire.Publish) {
	p.t.Helper()
	// At most publishPipelineMax in flight: a fresh partition loads on its
	// first publish, and a session refuses (retryable) what queues behind
	// that load past its bound (openWaitingMax), which a slow CI machine
	// reaches with 5,000 publishes sent at once.
	for start := 0; start < n; start += publishPipelineMax {
		count := min(publishPipelineMax, n-start)
		ids := make([]uint64, count)
		for i := range count {
			m := build(int(first) + start + i)
			m.Topic, m.RequireConfirm, m.PublishedMs = topic, true, 1
			ids[i] = p.request(wire.OpPublish, m)
		}
		for i, id := range ids {
			f := p.reply(id)
			want := first + uint64(start+i)
			ok, isOk := f.body.(wire.PublishOk)
			if !isOk || ok.Offset != want {
				p.t.Fatalf("publish %d answered with %v %+v, want offset %d", start+i, f.hdr.Opcode, f.body, want)
			}
		}
	}
}

// publishPipelineMax bounds publishMany's publishes in flight.
const publishPipelineMax = 1024

func record(i int) *wire.Publish {
	return &wire.Publish{Payload: []byte("r" + strconv.Itoa(i))}
}

// streamDeliveries reads n DELIVERs of sub and checks they are the records
// from offset first on, in order, tagged with their offsets.
func (p *peer) streamDeliveries(sub uint64, first uint64, n int) []*wire.Deliver {
	p.t.Helper()
	out := make([]*wire.Deliver, 0, n)
	for i := range n {
		d := p.deliver()
		want := first + uint64(i)
		if d.SubID != sub || d.Offset != want || d.DeliveryTag != want || d.Group.Present {
			p.t.Fatalf("delivery %d: sub %d offset %d tag %d, want sub %d offset %d", i, d.SubID, d.Offset, d.DeliveryTag, sub, want)
		}
		out = append(out, d)
	}
	return out
}

// checkPayloads says the deliveries carry record(offset)'s payload.
func checkPayloads(t *testing.T, ds []*wire.Deliver) {
	t.Helper()
	for _, d := range ds {
		if want := "r" + strconv.FormatUint(d.Offset, 10); string(d.Payload) != want {
			t.Fatalf("offset %d carries %q, want %q", d.Offset, d.Payload, want)
		}
	}
}

// settle makes sure every frame p sent before is stepped by its session:
// what the session forwarded is queued at the partition before anything
// sent after this returns.
func (p *peer) settle() {
	p.t.Helper()
	if f := p.reply(p.request(wire.OpPing, &wire.Ping{})); f.hdr.Opcode != wire.OpPong {
		p.t.Fatalf("PING answered with %v", f.hdr.Opcode)
	}
}

func errorCode(t *testing.T, f frame, op wire.Opcode) wire.ErrorCode {
	t.Helper()
	e, ok := f.body.(wire.ErrorBody)
	if !ok || f.hdr.Opcode != op {
		t.Fatalf("want %v, got %v %+v", op, f.hdr.Opcode, f.body)
	}
	return e.Code
}

func TestStreamDeclareAndRefusals(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	decl := wire.DeclarePlexus{Topic: "events", Durability: wire.DurabilityDurable}
	p.declareStream(decl)
	p.declareStream(decl) // idempotent
	other := decl
	other.RetentionRecordsMax = wire.Some[uint64](5)
	if code := errorCode(t, p.declarePlexus(other), wire.OpError); code != wire.CodeInvalid {
		t.Fatalf("a re-declare with other settings: code %d", code)
	}
	p.publish("jobs", "x", true) // an implicit queue
	if code := errorCode(t, p.declarePlexus(wire.DeclarePlexus{Topic: "jobs", Durability: wire.DurabilityDurable}), wire.OpError); code != wire.CodeInvalid {
		t.Fatalf("DECLARE_PLEXUS on a queue's topic: code %d", code)
	}
	if code := errorCode(t, p.subscribeStream(wire.SubscribeStream{Topic: "nope", Prefetch: 10}), wire.OpSubscribeErr); code != wire.CodeNotFound {
		t.Fatalf("SUBSCRIBE_STREAM on an undeclared stream: code %d", code)
	}
	if code := errorCode(t, p.subscribeStream(wire.SubscribeStream{Topic: "jobs", Prefetch: 10}), wire.OpSubscribeErr); code != wire.CodeInvalid {
		t.Fatalf("SUBSCRIBE_STREAM on a queue: code %d", code)
	}
	// The stream still works after all that.
	p.publishMany("events", 0, 3, record)
	sub := p.mustSubscribeStream(wire.SubscribeStream{Topic: "events", Start: wire.StreamStart{Kind: wire.StreamStartEarliest}, Prefetch: 10})
	checkPayloads(t, p.streamDeliveries(sub, 0, 3))
}

func TestStreamFanOutInOffsetOrder(t *testing.T) {
	const n = 300
	_, addr := testBroker(t, "", nil)
	pub := connect(t, addr)
	pub.declareStream(wire.DeclarePlexus{Topic: "fan", Durability: wire.DurabilityDurable})
	var subs []*peer
	var ids []uint64
	for range 3 {
		s := connect(t, addr)
		ids = append(ids, s.mustSubscribeStream(wire.SubscribeStream{Topic: "fan", Prefetch: 100}))
		subs = append(subs, s)
	}
	pub.publishMany("fan", 0, n, record)
	for i, s := range subs {
		checkPayloads(t, s.streamDeliveries(ids[i], 0, n))
		s.noDelivery(200 * time.Millisecond)
	}
}

func TestStreamDurableCursorAcrossResubscribeAndRestart(t *testing.T) {
	dir := t.TempDir()
	b, addr := testBroker(t, dir, nil)
	p := connect(t, addr)
	p.declareStream(wire.DeclarePlexus{Topic: "orders", Durability: wire.DurabilityDurable})
	p.publishMany("orders", 0, 10, record)
	durable := wire.SubscribeStream{Topic: "orders", DurableName: wire.Some("billing"), Prefetch: 10}
	sub := p.mustSubscribeStream(durable)
	ds := p.streamDeliveries(sub, 0, 10)
	for _, d := range ds[:5] {
		p.ack("orders", 0, d.DeliveryTag)
	}
	p.settle()

	again := connect(t, addr)
	sub = again.mustSubscribeStream(durable)
	checkPayloads(t, again.streamDeliveries(sub, 5, 5))
	again.noDelivery(200 * time.Millisecond)

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, addr = testBroker(t, dir, nil)
	p = connect(t, addr)
	sub = p.mustSubscribeStream(durable)
	checkPayloads(t, p.streamDeliveries(sub, 5, 5))
	all := connect(t, addr)
	sub = all.mustSubscribeStream(wire.SubscribeStream{Topic: "orders", Start: wire.StreamStart{Kind: wire.StreamStartEarliest}, Prefetch: 10})
	checkPayloads(t, all.streamDeliveries(sub, 0, 10))
	// The offsets go on where the log left them.
	p.publishMany("orders", 10, 2, record)
	checkPayloads(t, all.streamDeliveries(sub, 10, 2))
}

func TestStreamStartKinds(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	p.declareStream(wire.DeclarePlexus{Topic: "ticks", Durability: wire.DurabilityDurable})
	p.publishMany("ticks", 0, 5, record)
	time.Sleep(30 * time.Millisecond)
	mark := uint64(time.Now().UnixMilli())
	time.Sleep(30 * time.Millisecond)
	p.publishMany("ticks", 5, 5, record)

	cases := []struct {
		name  string
		start wire.StreamStart
		first uint64
	}{
		{"earliest", wire.StreamStart{Kind: wire.StreamStartEarliest}, 0},
		{"offset", wire.StreamStart{Kind: wire.StreamStartOffset, Value: 7}, 7},
		{"n back", wire.StreamStart{Kind: wire.StreamStartNBack, Value: 3}, 7},
		{"by time", wire.StreamStart{Kind: wire.StreamStartByTime, Value: mark}, 5},
		{"latest", wire.StreamStart{Kind: wire.StreamStartLatest}, 10},
	}
	var peers []*peer
	var subs []uint64
	for _, c := range cases {
		s := connect(t, addr)
		subs = append(subs, s.mustSubscribeStream(wire.SubscribeStream{Topic: "ticks", Start: c.start, Prefetch: 10}))
		peers = append(peers, s)
	}
	p.publishMany("ticks", 10, 2, record)
	for i, c := range cases {
		ds := peers[i].streamDeliveries(subs[i], c.first, int(12-c.first))
		checkPayloads(t, ds)
		peers[i].noDelivery(100 * time.Millisecond)
		t.Logf("%s: offsets %d..%d", c.name, ds[0].Offset, ds[len(ds)-1].Offset)
	}
}

func TestStreamFilter(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	p.declareStream(wire.DeclarePlexus{Topic: "paint", Durability: wire.DurabilityDurable})
	colors := []string{"red", "blue", "rose"}
	p.publishMany("paint", 0, 30, func(i int) *wire.Publish {
		m := record(i)
		m.Headers = wire.Headers{{Key: "color", Value: colors[i%3]}}
		return m
	})
	s := connect(t, addr)
	sub := s.mustSubscribeStream(wire.SubscribeStream{Topic: "paint", Start: wire.StreamStart{Kind: wire.StreamStartEarliest},
		Filter: []wire.KeyValue{{Key: "color", Value: "r*"}}, Prefetch: 10})
	for i := range 30 {
		if i%3 == 1 {
			continue // blue
		}
		d := s.deliver()
		if d.SubID != sub || d.Offset != uint64(i) || header(d, "color") != colors[i%3] {
			t.Fatalf("want offset %d (%s), got offset %d color %q", i, colors[i%3], d.Offset, header(d, "color"))
		}
	}
	s.noDelivery(200 * time.Millisecond)
}
