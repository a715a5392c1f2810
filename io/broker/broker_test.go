package broker

import (
	"strconv"
	"testing"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

func TestHandshakeAndPingPong(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	id := p.request(wire.OpPing, &wire.Ping{})
	if f := p.reply(id); f.hdr.Opcode != wire.OpPong {
		t.Fatalf("PING answered with %v", f.hdr.Opcode)
	}
}

func TestFirstFrameMustBeHello(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := dialPeer(t, addr)
	p.send(wire.OpPublish, 7, &wire.Publish{Topic: "t"})
	f := p.read()
	e, ok := f.body.(wire.ErrorBody)
	if !ok || e.Code != wire.CodeInvalid || f.hdr.RequestID != 7 {
		t.Fatalf("want ERROR 400 echoing id 7, got %v %+v", f.hdr.Opcode, f.body)
	}
	if _, err := p.tryRead(2 * time.Second); err == nil {
		t.Fatal("connection stayed open after a non-HELLO first frame")
	}
}

func TestWrongProtocolVersionGetsHelloErr(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := dialPeer(t, addr)
	p.send(wire.OpHello, 1, &wire.Hello{ClientName: "x", ProtocolVersion: 2})
	f := p.read()
	if e, ok := f.body.(wire.ErrorBody); !ok || f.hdr.Opcode != wire.OpHelloErr || e.Code != wire.CodeUnsupportedVersion {
		t.Fatalf("want HELLO_ERR code 1, got %v %+v", f.hdr.Opcode, f.body)
	}
}

func TestRequestBeforeAuthGets401AndClose(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := dialPeer(t, addr)
	p.handshake(nil)
	id := p.request(wire.OpPublish, &wire.Publish{Topic: "t", Payload: []byte("x")})
	f := p.read()
	if e, ok := f.body.(wire.ErrorBody); !ok || e.Code != wire.CodeUnauthorized || f.hdr.RequestID != id {
		t.Fatalf("want ERROR 401, got %v %+v", f.hdr.Opcode, f.body)
	}
	if _, err := p.tryRead(2 * time.Second); err == nil {
		t.Fatal("connection stayed open after 401")
	}
}

func TestWrongPasswordGetsAuthErrAndClose(t *testing.T) {
	_, addr := testBroker(t, "", func(c *Config) { c.Users = []UserSeed{{Name: "alice", Password: "s3cret"}} })
	p := dialPeer(t, addr)
	p.handshake(nil)
	f := p.auth("alice", "wrong", wire.OpAuthErr)
	if e := f.body.(wire.ErrorBody); e.Code != wire.CodeUnauthorized {
		t.Fatalf("code %d", e.Code)
	}
	if _, err := p.tryRead(2 * time.Second); err == nil {
		t.Fatal("connection stayed open after bad credentials")
	}
	ok := dialPeer(t, addr)
	ok.handshake(nil)
	ok.auth("alice", "s3cret", wire.OpAuthOk)
	again := ok.auth("alice", "s3cret", wire.OpAuthErr) // already authenticated: stays open
	_ = again
	id := ok.request(wire.OpPing, &wire.Ping{})
	if f := ok.reply(id); f.hdr.Opcode != wire.OpPong {
		t.Fatal("connection closed after a repeated AUTH")
	}
}

func TestDefaultCredentialsWorkFromLoopback(t *testing.T) {
	b, addr := testBroker(t, "", nil)
	// The store knows no user fibril: the Session machine applies the
	// built-in rule (loopback only, SPEC §10) on an unknown name.
	if known, match := b.users.lookup("fibril", "fibril"); known || match {
		t.Fatalf("lookup of the built-in pair: known %v match %v", known, match)
	}
	p := dialPeer(t, addr)
	p.handshake(nil)
	p.auth("fibril", "fibril", wire.OpAuthOk)
}

func TestPublishConfirmDeliverAck(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	for i := 0; i < 3; i++ {
		if off := p.publish("jobs", "m"+strconv.Itoa(i), true); off != uint64(i) {
			t.Fatalf("offset %d, want %d", off, i)
		}
	}
	c := connect(t, addr)
	c.subscribe("jobs", 0, 10, false)
	for i := 0; i < 3; i++ {
		d := c.deliver()
		if string(d.Payload) != "m"+strconv.Itoa(i) || d.Offset != uint64(i) {
			t.Fatalf("delivery %d: %+v", i, d)
		}
		c.ack("jobs", 0, d.DeliveryTag)
	}
	c.noDelivery(3 * time.Second) // past the 2 s lease: acked is final
}

func TestRetryCarriesRetriesHeaderAndFailDeadLetters(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	id := p.request(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "work",
		DLQPolicy: wire.Some(wire.DLQPolicy{Kind: wire.DLQCustom, Topic: "work-dlq"}), DLQRetriesMax: wire.Some[uint32](1)})
	if f := p.reply(id); f.hdr.Opcode != wire.OpDeclareQueueOk {
		t.Fatalf("declare: %v %+v", f.hdr.Opcode, f.body)
	}
	p.publish("work", "x", true)
	p.subscribe("work", 0, 1, false)
	d := p.deliver()
	p.nack("work", 0, true, wire.Optional[uint64]{}, d.DeliveryTag)
	d = p.deliver()
	if header(d, "fibril.retries") != "1" {
		t.Fatalf("retry without fibril.retries=1: %+v", d.Headers)
	}
	p.nack("work", 0, true, wire.Optional[uint64]{}, d.DeliveryTag) // past max_retries 1
	p.subscribe("work-dlq", 0, 1, false)
	dl := p.deliver()
	if dl.Topic != "work-dlq" || header(dl, "stroma.dlq.reason") != "retries_exhausted" || header(dl, "stroma.dlq.source_topic") != "work" {
		t.Fatalf("dead-letter copy: %+v", dl)
	}
}

func TestRetryAfterTiming(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	p.publish("later", "x", true)
	p.subscribe("later", 0, 1, false)
	d := p.deliver()
	notBefore := uint64(time.Now().Add(1200 * time.Millisecond).UnixMilli())
	p.nack("later", 0, true, wire.Some(notBefore), d.DeliveryTag)
	again := p.deliver()
	if got := uint64(time.Now().UnixMilli()); got < notBefore {
		t.Fatalf("redelivered at %d, before not_before %d", got, notBefore)
	}
	if again.Offset != d.Offset {
		t.Fatal("a different message came back")
	}
}

func TestNackNotBeforeWithoutRequeueIs400(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	id := p.request(wire.OpNack, &wire.Nack{Topic: "t", Tags: []uint64{1}, Requeue: false, NotBeforeMs: wire.Some[uint64](5)})
	if f := p.reply(id); f.hdr.Opcode != wire.OpError || f.body.(wire.ErrorBody).Code != wire.CodeInvalid {
		t.Fatalf("got %v %+v", f.hdr.Opcode, f.body)
	}
}

func TestReservedHeaderAndBadNamesRejected(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	id := p.request(wire.OpPublish, &wire.Publish{Topic: "t", RequireConfirm: true, Headers: wire.Headers{{Key: "stroma.dlq.reason", Value: "x"}}})
	if f := p.reply(id); f.hdr.Opcode != wire.OpError || f.body.(wire.ErrorBody).Code != wire.CodeInvalid {
		t.Fatalf("reserved header: %v %+v", f.hdr.Opcode, f.body)
	}
	id = p.request(wire.OpPublish, &wire.Publish{Topic: "Bad Topic", RequireConfirm: true})
	if f := p.reply(id); f.hdr.Opcode != wire.OpError || f.body.(wire.ErrorBody).Code != wire.CodeInvalid {
		t.Fatalf("bad topic: %v %+v", f.hdr.Opcode, f.body)
	}
	// The connection is still usable.
	if off := p.publish("t", "ok", true); off != 0 {
		t.Fatalf("offset %d", off)
	}
}

func TestMalformedAndUnknownFramesKeepTheConnection(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	good := wire.AppendBodyFrame(nil, wire.OpPublish, 50, &wire.Publish{Topic: "t", RequireConfirm: true})
	trailing := append([]byte(nil), good...)
	trailing = append(trailing, 0xFF)
	trailing[3]++ // payload length includes the trailing byte
	p.c.Write(trailing)
	if f := p.reply(50); f.hdr.Opcode != wire.OpError || f.body.(wire.ErrorBody).Code != wire.CodeInvalid {
		t.Fatalf("trailing bytes: %v %+v", f.hdr.Opcode, f.body)
	}
	p.c.Write(wire.AppendFrame(nil, wire.Opcode(777), 0, 51, nil))
	if f := p.reply(51); f.hdr.Opcode != wire.OpError {
		t.Fatalf("unknown opcode: %v", f.hdr.Opcode)
	}
	if off := p.publish("t", "still fine", true); off != 0 {
		t.Fatalf("offset %d", off)
	}
}

func TestOversizedFrameGets400AndClose(t *testing.T) {
	_, addr := testBroker(t, "", func(c *Config) { c.FramePayloadBytesMax = 4096; c.OutboxBytesMax = 1 << 20 })
	p := connect(t, addr)
	big := wire.AppendBodyFrame(nil, wire.OpPublish, 9, &wire.Publish{Topic: "t", Payload: make([]byte, 10_000)})
	p.c.Write(big[:wire.HeaderSizeBytes])
	f := p.read()
	if f.hdr.Opcode != wire.OpError || f.hdr.RequestID != 9 {
		t.Fatalf("got %v %+v", f.hdr.Opcode, f.body)
	}
	if _, err := p.tryRead(2 * time.Second); err == nil {
		t.Fatal("connection stayed open after an oversized frame")
	}
}

func TestPrefetchBoundAndRequeueOnDisconnect(t *testing.T) {
	_, addr := testBroker(t, "", func(c *Config) { c.ReconnectGraceMs = 0 })
	p := connect(t, addr)
	for i := 0; i < 5; i++ {
		p.publish("pf", "m", true)
	}
	a := connect(t, addr)
	a.subscribe("pf", 0, 2, false)
	a.deliver()
	a.deliver()
	a.noDelivery(500 * time.Millisecond)
	a.c.Close() // grace 0: its two deliveries requeue at once
	b := connect(t, addr)
	b.subscribe("pf", 0, 10, false)
	seen := map[uint64]bool{}
	for i := 0; i < 5; i++ {
		seen[b.deliver().Offset] = true
	}
	if len(seen) != 5 {
		t.Fatalf("B got %v", seen)
	}
}

func TestResumeWithinGraceAcceptsLateAcks(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	p.publish("g", "m", true)
	p.subscribe("g", 0, 1, false)
	d := p.deliver()
	id := wire.ResumeIdentity{OwnerID: p.hello.OwnerID, ClientID: p.hello.ClientID, ResumeToken: p.hello.ResumeToken}
	p.c.Close()
	q := dialPeer(t, addr)
	q.handshake(&id)
	if q.hello.ResumeOutcome != wire.ResumeResumed {
		t.Fatalf("outcome %d, want resumed", q.hello.ResumeOutcome)
	}
	q.ack("g", 0, d.DeliveryTag) // late ack on the resumed session
	q.noDelivery(3 * time.Second)
	other := connect(t, addr)
	other.subscribe("g", 0, 1, false)
	other.noDelivery(1 * time.Second)
}

func TestGraceExpiryRequeues(t *testing.T) {
	_, addr := testBroker(t, "", func(c *Config) { c.ReconnectGraceMs = 300; c.Partition.LeaseMs = 60_000 })
	p := connect(t, addr)
	p.publish("ge", "m", true)
	p.subscribe("ge", 0, 1, false)
	p.deliver()
	p.c.Close()
	q := connect(t, addr)
	q.subscribe("ge", 0, 1, false)
	d := q.deliver() // after the 300 ms grace, not the 60 s lease
	if header(d, "fibril.retries") != "1" {
		t.Fatalf("requeue after grace counts an attempt: %+v", d.Headers)
	}
}

// TestTopologyStandaloneIsGenerationZero: a standalone broker answers
// TOPOLOGY with generation 0 and both lists empty (PROTOCOL 5.20). The old
// broker listed owners with generation 1, which Fibril's Python and
// TypeScript clients read as a move: every subscription ended after a second.
func TestTopologyStandaloneIsGenerationZero(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	id := p.request(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "orders", PartitionCount: wire.Some[uint32](4)})
	if f := p.reply(id); f.body.(wire.DeclareQueueOk).PartitionCount != 4 {
		t.Fatalf("declare: %+v", f.body)
	}
	id = p.request(wire.OpTopology, &wire.Topology{Topic: wire.Some("orders")})
	topo := p.reply(id).body.(wire.TopologyOk)
	if topo.Generation != 0 || len(topo.Queues) != 0 || len(topo.Streams) != 0 {
		t.Fatalf("standalone topology %+v, want generation 0 and empty lists", topo)
	}
	id = p.request(wire.OpPublish, &wire.Publish{Topic: "orders", Partition: 9, RequireConfirm: true})
	if f := p.reply(id); f.hdr.Opcode != wire.OpError {
		t.Fatalf("publish to partition 9 of 4: %v", f.hdr.Opcode)
	}
}

func TestRestartKeepsConfirmedAndLeases(t *testing.T) {
	dir := t.TempDir()
	b, addr := testBroker(t, dir, nil)
	p := connect(t, addr)
	for i := 0; i < 10; i++ {
		p.publish("dur", "m"+strconv.Itoa(i), true)
	}
	p.subscribe("dur", 0, 1, false)
	first := p.deliver()
	b.Close()
	_, addr2 := testBroker(t, dir, nil)
	c := connect(t, addr2)
	c.subscribe("dur", 0, 20, false)
	got := map[uint64]bool{}
	for i := 0; i < 10; i++ {
		d := c.deliver() // the leased one comes after its 2 s lease
		if d.DeliveryTag <= first.DeliveryTag || d.DeliveryTag < 2<<bootTagShift {
			t.Fatalf("tag %d after a restart: tags of the second run start at %d", d.DeliveryTag, uint64(2)<<bootTagShift)
		}
		got[d.Offset] = true
	}
	if len(got) != 10 || !got[first.Offset] {
		t.Fatalf("after restart got %v", got)
	}
}
