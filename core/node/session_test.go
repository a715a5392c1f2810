package node

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

var sessQOrders = core.QueueID{Topic: "orders"}

// ---- attach

func TestSessionAttachAnswersHelloOk(t *testing.T) {
	h := newSessHarness(t, nil)
	ok := h.attach(5, wire.ResumeNew)
	if ok.OwnerID != (wire.UUID{3}) || ok.ClientID != (wire.UUID{1}) || ok.ResumeToken != (wire.UUID{2}) {
		t.Fatalf("identities: %+v", ok)
	}
	if ok.ResumeOutcome != wire.ResumeNew || ok.ServerName != h.cfg.ServerName || ok.Compliance != wire.ComplianceMarker || ok.ProtocolVersion != 1 {
		t.Fatalf("HELLO_OK: %+v", ok)
	}
	h.expectNothing(5)
}

func TestSessionAttachReplacesPreviousConnAndDropsItsReplies(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", RequireConfirm: true, Payload: []byte("x")})
	h.takeOpen(sessQOrders, 1, nil)
	req := h.takeRequest(sessQOrders)
	ok := h.attach(2, wire.ResumeResumed)
	if ok.ResumeOutcome != wire.ResumeResumed || !h.closed[1] {
		t.Fatalf("the resume did not close the old connection (outcome %d)", ok.ResumeOutcome)
	}
	// The confirm answers a request the new connection never made.
	h.fromPartition(sessQOrders, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 9}})
	h.expectNothing(1)
	h.expectNothing(2)
	// The resumed session stays authenticated on the new connection.
	id := h.frame(2, wire.OpPublish, wire.Publish{Topic: "orders", RequireConfirm: true, Payload: []byte("y")})
	req = h.takeRequest(sessQOrders)
	h.fromPartition(sessQOrders, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 10}})
	if f := h.expect(2, wire.OpPublishOk); f.hdr.RequestID != id || f.body.(wire.PublishOk).Offset != 10 {
		t.Fatalf("PUBLISH_OK %+v", f)
	}
}

func TestSessionEndedRefusesAttach(t *testing.T) {
	h := newSessHarness(t, func(c *Config) { c.ReconnectGraceMs = 0 })
	h.ready(1)
	h.connClosed(1)
	if !h.s.Ended() {
		t.Fatal("a session without grace did not end at disconnect")
	}
	h.takeOut()
	h.deliver(&Attach{Conn: 2, Loopback: true, HelloRequestID: 4})
	out := h.takeOut()
	if len(out) != 1 || out[0].To != NodeAddr() {
		t.Fatalf("out: %v", sessDescribeOut(out))
	}
	if r := out[0].Msg.(*AttachRefused); r.Conn != 2 || r.HelloRequestID != 4 || !r.Loopback {
		t.Fatalf("AttachRefused %+v", r)
	}
	h.expectNothing(2)
}

func TestSessionFramesBeforeAttachAreServedAfterHelloOk(t *testing.T) {
	h := newSessHarness(t, nil)
	id := h.frame(3, wire.OpPing, wire.Ping{})
	h.expectNothing(3)
	h.attach(3, wire.ResumeNew)
	if f := h.expect(3, wire.OpPong); f.hdr.RequestID != id {
		t.Fatalf("PONG for %d", f.hdr.RequestID)
	}
}

// ---- handshake gate

func TestSessionGateHoldsPushesUntilARequestIsAnswered(t *testing.T) {
	h := newSessHarness(t, nil)
	h.attach(1, wire.ResumeNew)
	h.auth(1)
	h.deliver(&ShuttingDown{GraceMs: 500, Message: "bye"})
	h.expectNothing(1) // AUTH does not open the gate
	h.frame(1, wire.OpPing, wire.Ping{})
	h.expect(1, wire.OpPong)
	h.expectNothing(1) // nor does PING
	h.frame(1, wire.OpTopology, wire.Topology{})
	h.expect(1, wire.OpTopologyOk)
	if ga := h.expect(1, wire.OpGoingAway).body.(wire.GoingAway); ga.GraceMs != 500 || ga.Message != "bye" {
		t.Fatalf("GOING_AWAY %+v", ga)
	}
}

func TestSessionGateOpensAfterOneHeartbeatInterval(t *testing.T) {
	h := newSessHarness(t, nil)
	h.attach(1, wire.ResumeNew)
	h.auth(1)
	h.deliver(&ShuttingDown{GraceMs: 1, Message: "bye"})
	rd := h.tick(h.cfg.HeartbeatIntervalMs - 1)
	h.expectNothing(1)
	if rd.WakeMs != h.now+1 {
		t.Fatalf("wake %d, want %d", rd.WakeMs, h.now+1)
	}
	h.tick(1)
	h.expect(1, wire.OpGoingAway)
	h.expect(1, wire.OpPing) // the first PING one interval after HELLO_OK
}

func TestSessionGateReconcileResultGoesFirst(t *testing.T) {
	h := newSessHarness(t, nil)
	h.attach(1, wire.ResumeNew)
	h.auth(1)
	h.deliver(&ShuttingDown{GraceMs: 1})
	h.frame(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileConservative})
	h.expect(1, wire.OpReconcileResult)
	h.expect(1, wire.OpGoingAway)
}

// ---- auth

func TestSessionAuthMalformedStaysOpen(t *testing.T) {
	h := newSessHarness(t, nil)
	h.attach(1, wire.ResumeNew)
	id := h.frame(1, wire.OpAuth, wire.Ping{}) // empty payload: no magic
	h.expectError(1, wire.OpError, id, wire.CodeInvalid)
	if h.closed[1] {
		t.Fatal("a malformed AUTH closed the connection")
	}
	h.auth(1)
}

func TestSessionAuthAlreadyAuthenticatedStaysOpen(t *testing.T) {
	h := newSessHarness(t, nil)
	h.attach(1, wire.ResumeNew)
	h.auth(1)
	id := h.frame(1, wire.OpAuth, wire.Auth{Username: "alice", Password: "pw"})
	if e := h.expectError(1, wire.OpAuthErr, id, wire.CodeUnauthorized); e.Message != "already authenticated" {
		t.Fatalf("message %q", e.Message)
	}
	if h.closed[1] || len(h.checks) != 0 {
		t.Fatal("a second AUTH closed the connection or checked a password")
	}
}

func TestSessionAuthResumedSessionRechecks(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	h.connClosed(1)
	h.attach(2, wire.ResumeResumed)
	h.auth(2) // a fresh check answers AUTH_OK, not "already authenticated"
	// A wrong password on the resumed connection is still refused.
	h2 := newSessHarness(t, nil)
	h2.ready(1)
	h2.attach(2, wire.ResumeResumed)
	id := h2.frame(2, wire.OpAuth, wire.Auth{Username: "alice", Password: "bad"})
	h2.step(&AuthChecked{NowMs: h2.now, Token: h2.takeCheck().Token, Known: true})
	h2.expectError(2, wire.OpAuthErr, id, wire.CodeUnauthorized)
	if !h2.closed[2] {
		t.Fatal("a failed re-check kept the connection")
	}
}

func TestSessionAuthDefaultLoginFromLoopbackOnly(t *testing.T) {
	cases := []struct {
		name     string
		loopback bool
		allow    bool
		password string
		known    bool
		ok       bool
	}{
		{"loopback", true, true, "fibril", false, true},
		{"remote", false, true, "fibril", false, false},
		{"disallowed", true, false, "fibril", false, false},
		{"wrong password", true, true, "nope", false, false},
		{"real user named fibril", true, true, "fibril", true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newSessHarness(t, func(cfg *Config) { cfg.AllowDefaultLoopback = c.allow })
			h.deliver(&Attach{Conn: 1, Loopback: c.loopback, HelloRequestID: 1})
			h.expect(1, wire.OpHelloOk)
			id := h.frame(1, wire.OpAuth, wire.Auth{Username: "fibril", Password: c.password})
			chk := h.takeCheck()
			if chk.Username != "fibril" || chk.Password != c.password {
				t.Fatalf("check %+v", chk)
			}
			h.step(&AuthChecked{NowMs: h.now, Token: chk.Token, Known: c.known})
			if c.ok {
				h.expect(1, wire.OpAuthOk)
				return
			}
			e := h.expectError(1, wire.OpAuthErr, id, wire.CodeUnauthorized)
			if !h.closed[1] || !h.ended {
				t.Fatalf("a refused login (%s) left the connection open", e.Message)
			}
		})
	}
}

func TestSessionFramesWaitForPasswordCheckInOrder(t *testing.T) {
	h := newSessHarness(t, nil)
	h.attach(1, wire.ResumeNew)
	h.frame(1, wire.OpAuth, wire.Auth{Username: "alice", Password: "pw"})
	ping := h.frame(1, wire.OpPing, wire.Ping{})
	topo := h.frame(1, wire.OpTopology, wire.Topology{})
	h.expectNothing(1)
	h.step(&AuthChecked{NowMs: h.now, Token: h.takeCheck().Token, Known: true, Match: true})
	h.expect(1, wire.OpAuthOk)
	if f := h.expect(1, wire.OpPong); f.hdr.RequestID != ping {
		t.Fatal("PONG out of order")
	}
	if f := h.expect(1, wire.OpTopologyOk); f.hdr.RequestID != topo {
		t.Fatal("TOPOLOGY_OK out of order")
	}
}

func TestSessionFramesWaitingForPasswordCheckAreBounded(t *testing.T) {
	h := newSessHarness(t, nil)
	h.attach(1, wire.ResumeNew)
	h.frame(1, wire.OpAuth, wire.Auth{Username: "alice", Password: "pw"})
	for i := 0; i < authWaitingFramesMax; i++ {
		h.frame(1, wire.OpPing, wire.Ping{})
	}
	if h.closed[1] {
		t.Fatal("closed at the bound, not past it")
	}
	h.frame(1, wire.OpPing, wire.Ping{})
	if !h.closed[1] || !h.ended {
		t.Fatal("a flood behind the password check was not cut")
	}
}

func TestSessionBeforeAuthOnlyAuthPingPong(t *testing.T) {
	h := newSessHarness(t, nil)
	h.attach(1, wire.ResumeNew)
	id := h.frame(1, wire.OpPing, wire.Ping{})
	if f := h.expect(1, wire.OpPong); f.hdr.RequestID != id {
		t.Fatal("PONG request id")
	}
	h.frame(1, wire.OpPong, wire.Pong{})
	h.expectNothing(1)
	id = h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", Payload: []byte("x")})
	h.expectError(1, wire.OpError, id, wire.CodeUnauthorized)
	if !h.closed[1] || !h.ended {
		t.Fatal("a request before auth did not close the connection")
	}
	if reqs := h.takeRequests(sessQOrders); len(reqs) != 0 {
		t.Fatal("an unauthenticated publish reached a partition")
	}
}

// ---- timeouts and keepalive

func TestSessionAuthTimeoutClosesConnection(t *testing.T) {
	h := newSessHarness(t, nil)
	h.attach(1, wire.ResumeNew)
	for i := int64(0); i < h.cfg.AuthTimeoutMs/500-1; i++ {
		h.tick(500)
		h.frame(1, wire.OpPing, wire.Ping{}) // a peer that only PINGs
	}
	if h.closed[1] {
		t.Fatal("closed before the auth timeout")
	}
	h.tick(500)
	if !h.closed[1] || !h.ended {
		t.Fatal("an unauthenticated connection outlived the auth timeout")
	}
}

func TestSessionKeepalivePingsEveryIntervalAndAnswersPing(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	for i := 0; i < 3; i++ {
		h.tick(h.cfg.HeartbeatIntervalMs)
		f := h.expect(1, wire.OpPing)
		if f.hdr.RequestID != uint64(i+1) {
			t.Fatalf("PING %d has server request id %d", i, f.hdr.RequestID)
		}
		h.frame(1, wire.OpPong, wire.Pong{})
	}
	id := h.frame(1, wire.OpPing, wire.Ping{})
	if f := h.expect(1, wire.OpPong); f.hdr.RequestID != id {
		t.Fatal("PONG does not echo the PING")
	}
}

func TestSessionSilentConnectionIsCut(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	interval := h.cfg.HeartbeatIntervalMs
	for i := 0; i < 3; i++ {
		h.tick(interval)
	}
	if h.closed[1] {
		t.Fatal("cut at 3 silent intervals, not more")
	}
	h.tick(interval)
	if !h.closed[1] {
		t.Fatal("a connection silent for 4 intervals was kept")
	}
	if h.ended || !h.s.dormant {
		t.Fatal("an authenticated session cut for silence should go dormant")
	}
}

// ---- outbox

func TestSessionOutboxBoundCutsSlowConsumer(t *testing.T) {
	h := newSessHarness(t, func(c *Config) { c.OutboxBytesMax = 2 << 20; c.FramePayloadBytesMax = 1 << 20 })
	h.ready(1)
	sub := h.subscribe(1, sessQOrders, 100, true)
	big := string(make([]byte, 650<<10))
	for tag := uint64(1); tag <= 3; tag++ {
		h.fromPartition(sessQOrders, &Deliveries{Queue: sessQOrders, SubID: sub, Items: []core.Delivery{{SubID: sub, Tag: tag, Body: sessBody(big)}}})
	}
	if h.closed[1] {
		t.Fatal("closed below the bound")
	}
	h.step(&Written{NowMs: h.now, Conn: 1, Bytes: 1 << 20})
	h.fromPartition(sessQOrders, &Deliveries{Queue: sessQOrders, SubID: sub, Items: []core.Delivery{{SubID: sub, Tag: 4, Body: sessBody(big)}}})
	if h.closed[1] {
		t.Fatal("Written did not give back outbox room")
	}
	h.fromPartition(sessQOrders, &Deliveries{Queue: sessQOrders, SubID: sub, Items: []core.Delivery{{SubID: sub, Tag: 5, Body: sessBody(big)}}})
	if !h.closed[1] {
		t.Fatal("a consumer that does not read was not cut")
	}
}

// ---- publish

func TestSessionPublishValidation(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	cases := []wire.Publish{
		{Topic: "Bad Topic"},
		{Topic: "orders", Group: wire.Some("..")},
		{Topic: "orders", Headers: wire.Headers{{Key: "fibril.retries", Value: "1"}}},
		{Topic: "orders", Headers: wire.Headers{{Key: "stroma.x", Value: "1"}}},
		{Topic: "orders", TTLMs: wire.Some(uint64(1) << 63)},
	}
	for _, p := range cases {
		id := h.frame(1, wire.OpPublish, p)
		h.expectError(1, wire.OpError, id, wire.CodeInvalid)
	}
	id := h.frame(1, wire.OpPublishDelayed, wire.PublishDelayed{Topic: "orders", NotBeforeMs: 1 << 63})
	h.expectError(1, wire.OpError, id, wire.CodeInvalid)
	if len(h.takeOut()) != 0 {
		t.Fatal("a refused publish left the session")
	}
}

func TestSessionPublishNormalisesAndCopies(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	p := wire.Publish{Topic: "orders", Group: wire.Some("default"), RequireConfirm: true, PublishedMs: 77, TTLMs: wire.Some(uint64(900)),
		Headers: wire.Headers{{Key: "Content-Type", Value: "application/json"}, {Key: "fibril.client.seq", Value: "3"}}, Payload: []byte("body")}
	payload := p.AppendTo(nil)
	h.step(&Frame{NowMs: h.now, Conn: 1, Header: wire.Header{Opcode: wire.OpPublish, RequestID: 50}, Payload: payload})
	for i := range payload {
		payload[i] = 0 // the frame buffer is reused by the driver after the step
	}
	h.takeOpen(sessQOrders, 1, nil) // group "default" is the default namespace
	in := h.takeRequest(sessQOrders).Input.(*core.Publish)
	if string(in.Body.Payload) != "body" || in.Body.PublishedMs != 77 || !in.HasTTL || in.TTLMs != 900 || !in.Confirm || in.System {
		t.Fatalf("publish %+v body %+v", in, in.Body)
	}
	if in.Body.ContentType.Kind != core.ContentJSON || len(in.Body.Headers) != 1 || in.Body.Headers[0].Key != "fibril.client.seq" {
		t.Fatalf("content type not normalised: %+v %+v", in.Body.ContentType, in.Body.Headers)
	}
}

func TestSessionPublishOpensPartitionOnceAndQueuesBehindIt(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	a := h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", RequireConfirm: true, Payload: []byte("a")})
	b := h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", Payload: []byte("b")})
	if reqs := h.takeRequests(sessQOrders); len(reqs) != 0 {
		t.Fatal("a request overtook the partition's Open")
	}
	h.takeOpen(sessQOrders, 1, nil)
	reqs := h.takeRequests(sessQOrders)
	if len(reqs) != 2 || string(reqs[0].Input.(*core.Publish).Body.Payload) != "a" || string(reqs[1].Input.(*core.Publish).Body.Payload) != "b" {
		t.Fatalf("queued requests %v", reqs)
	}
	if reqs[0].Token == 0 || reqs[1].Token != 0 {
		t.Fatal("only a confirmed publish carries a token")
	}
	h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", Payload: []byte("c")})
	if len(h.takeRequests(sessQOrders)) != 1 {
		t.Fatal("an opened partition was not used at once")
	}
	for _, env := range h.takeOut() {
		if _, ok := env.Msg.(*Open); ok {
			t.Fatal("the partition was opened twice")
		}
	}
	h.fromPartition(sessQOrders, &Response{Token: reqs[0].Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 4}})
	if f := h.expect(1, wire.OpPublishOk); f.hdr.RequestID != a || f.body.(wire.PublishOk).Offset != 4 {
		t.Fatalf("PUBLISH_OK %+v", f)
	}
	_ = b
	h.expectNothing(1)
}

func TestSessionOpenErrorAnswersWaitingRequestsAndIsForgotten(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q := core.QueueID{Topic: "orders", Partition: 3}
	a := h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", Partition: 3, RequireConfirm: true})
	b := h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", Partition: 3})
	s := h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "orders", Partition: 3, Prefetch: 1})
	h.takeOpen(q, 0, core.ErrInvalidSettings)
	h.expectError(1, wire.OpError, a, wire.CodeInvalid)
	h.expectError(1, wire.OpError, b, wire.CodeInvalid)
	h.expectError(1, wire.OpSubscribeErr, s, wire.CodeInvalid)
	if len(h.takeRequests(q)) != 0 || len(h.s.subs) != 0 {
		t.Fatal("requests of a failed open were sent or kept")
	}
	h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", Partition: 3})
	h.takeOpen(q, 4, nil) // tried again
	if len(h.takeRequests(q)) != 1 {
		t.Fatal("the retried open did not carry the request")
	}
}

func TestSessionPublishErrorsConfirmedOnly(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	id := h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", RequireConfirm: true})
	h.takeOpen(sessQOrders, 1, nil)
	req := h.takeRequest(sessQOrders)
	h.fromPartition(sessQOrders, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplyError, Err: core.ErrQueueFull}})
	h.expectError(1, wire.OpError, id, wire.CodeInternal)
	// A second answer for the same token is ignored (answered once).
	h.fromPartition(sessQOrders, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplyPublished}})
	h.expectNothing(1)
}

// ---- subscribe and deliver

func TestSessionSubscribeAnswersAndRecordsSkeleton(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q := core.QueueID{Topic: "orders", Group: "eu", Partition: 2}
	id := h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "orders", Group: wire.Some("eu"), Partition: 2, Prefetch: 0, AutoAck: true})
	h.takeOpen(q, 3, nil)
	req := h.takeRequest(q)
	sub := req.Input.(*core.Subscribe)
	if sub.SubID != uint64(sessTestID)<<24|1 || sub.Prefetch != 0 || !sub.AutoAck {
		t.Fatalf("Subscribe %+v", sub)
	}
	h.fromPartition(q, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplySubscribed}})
	ok := h.expect(1, wire.OpSubscribeOk)
	body := ok.body.(wire.SubscribeOk)
	if ok.hdr.RequestID != id || body.SubID != sub.SubID || body.Prefetch != 0 || body.Group != wire.Some("eu") || body.Partition != 2 {
		t.Fatalf("SUBSCRIBE_OK %+v", body)
	}
	out := h.takeOut()
	if len(out) != 1 {
		t.Fatalf("out %v", sessDescribeOut(out))
	}
	sk := out[0].Msg.(*SkeletonChanged)
	if len(sk.Subs) != 1 || sk.Subs[0].Queue != q || !sk.Subs[0].AutoAck {
		t.Fatalf("skeleton %+v", sk)
	}
}

func TestSessionSubscribeRefusals(t *testing.T) {
	h := newSessHarness(t, func(c *Config) { c.SubscriptionsPerSessionMax = 2 })
	h.ready(1)
	// PROTOCOL 5.6 check 4: the nil UUID as member id; an empty cohort id.
	id := h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "orders", ConsumerGroup: wire.Some("c"), MemberID: wire.Some(wire.UUID{})})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeInvalid)
	id = h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "orders", ConsumerGroup: wire.Some("")})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeInvalid)
	id = h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "BAD"})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeInvalid)
	h.subscribe(1, sessQOrders, 1, false)
	h.takeOut()
	id = h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "orders", Group: wire.Some("default")})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeConflict)
	id = h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "orders", ConsumerGroup: wire.Some("c")})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeConflict) // the duplicate check comes first
	h.subscribe(1, core.QueueID{Topic: "b"}, 1, false)
	id = h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "c"})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeInternal)
	for _, env := range h.takeOut() {
		if _, ok := env.Msg.(*Open); ok {
			t.Fatal("a refused subscribe opened its partition")
		}
	}
}

func TestSessionDeliverFrames(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	sub := h.subscribe(1, core.QueueID{Topic: "orders", Group: "eu"}, 5, false)
	body := &core.Body{Payload: []byte("p"), PublishedMs: 5, ReceivedMs: 6, ContentType: core.ContentType{Kind: core.ContentCustom, Custom: "x/y"},
		Headers: []core.Header{{Key: "k", Value: "v"}}}
	h.fromPartition(core.QueueID{Topic: "orders", Group: "eu"}, &Deliveries{Queue: core.QueueID{Topic: "orders", Group: "eu"}, SubID: sub, Items: []core.Delivery{
		{SubID: sub, Tag: 40, Offset: 3, Retries: 2, Body: body},
		{SubID: sub, Tag: 41, Offset: 4, Body: sessBody("q")},
	}})
	f := h.expect(1, wire.OpDeliver)
	d := f.body.(wire.Deliver)
	if d.SubID != sub || d.Topic != "orders" || d.Group != wire.Some("eu") || d.Offset != 3 || d.DeliveryTag != 40 ||
		d.PublishedMs != 5 || d.PublishReceivedMs != 6 || d.ContentType != wire.CustomContentType("x/y") || string(d.Payload) != "p" {
		t.Fatalf("DELIVER %+v", d)
	}
	if v, _ := d.Headers.Get("k"); v != "v" {
		t.Fatal("user header lost")
	}
	if v, _ := d.Headers.Get(wire.HeaderRetries); v != "2" {
		t.Fatalf("fibril.retries %q", v)
	}
	d2 := h.expect(1, wire.OpDeliver).body.(wire.Deliver)
	if _, has := d2.Headers.Get(wire.HeaderRetries); has || len(d2.Headers) != 0 || d2.DeliveryTag != 41 {
		t.Fatalf("second DELIVER %+v", d2)
	}
	if f2 := h.sent[1]; len(f2) != 0 {
		t.Fatal("extra frames")
	}
}

func TestSessionGhostDeliveriesAreHandedBack(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	h.fromPartition(sessQOrders, &Deliveries{Queue: sessQOrders, SubID: 99, Items: []core.Delivery{{SubID: 99, Tag: 1, Body: sessBody("x")}}})
	req := h.takeRequest(sessQOrders)
	if u, ok := req.Input.(*core.Unsubscribe); !ok || u.SubID != 99 || req.Token != 0 {
		t.Fatalf("ghost answered with %+v", req)
	}
	h.expectNothing(1)
}

func TestSessionSubscribeCompletingAfterEndIsUnsubscribed(t *testing.T) {
	h := newSessHarness(t, func(c *Config) { c.ReconnectGraceMs = 0 })
	h.ready(1)
	h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "orders", Prefetch: 1})
	h.takeOpen(sessQOrders, 1, nil)
	req := h.takeRequest(sessQOrders)
	h.connClosed(1)
	out := h.takeOut()
	if len(out) != 2 || sessTypeName(out[0].Msg) != "Request/Unsubscribe" || sessTypeName(out[1].Msg) != "SessionEnded" {
		t.Fatalf("end: %v", sessDescribeOut(out))
	}
	// The Unsubscribe follows the Subscribe (FIFO per pair), so the
	// partition drops it as soon as it accepted it; the late answer finds
	// its token forgotten with its attachment and asks for nothing more.
	if u := out[0].Msg.(*Request).Input.(*core.Unsubscribe); u.SubID != req.Input.(*core.Subscribe).SubID {
		t.Fatalf("unsubscribed %d, subscribed %d", u.SubID, req.Input.(*core.Subscribe).SubID)
	}
	h.fromPartition(sessQOrders, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplySubscribed}})
	if out := h.takeOut(); len(out) != 0 {
		t.Fatalf("a late answer after the end: %v", sessDescribeOut(out))
	}
}

func TestSessionSubscribeQueuedBehindOpenIsNeverSentAfterEnd(t *testing.T) {
	h := newSessHarness(t, func(c *Config) { c.ReconnectGraceMs = 0 })
	h.ready(1)
	h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "orders", Prefetch: 1})
	h.connClosed(1)
	h.takeOpen(sessQOrders, 1, nil)
	if reqs := h.takeRequests(sessQOrders); len(reqs) != 0 {
		t.Fatalf("an ended session sent %v", sessDescribeOut(h.out))
	}
}

// ---- settle

func TestSessionAckNackRouteToTheSubscription(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	sub := h.subscribe(1, sessQOrders, 2, false)
	h.takeOut()
	h.frame(1, wire.OpAck, wire.Ack{Topic: "orders", Group: wire.Some("default"), Tags: []uint64{4, 5}})
	req := h.takeRequest(sessQOrders)
	if a := req.Input.(*core.Ack); a.SubID != sub || len(a.Tags) != 2 || req.Token != 0 {
		t.Fatalf("ack %+v", req)
	}
	h.frame(1, wire.OpNack, wire.Nack{Topic: "orders", Tags: []uint64{6}, Requeue: true, NotBeforeMs: wire.Some(uint64(h.now + 50))})
	if n := h.takeRequest(sessQOrders).Input.(*core.Nack); n.SubID != sub || !n.Requeue || n.NotBeforeMs != h.now+50 {
		t.Fatalf("nack %+v", n)
	}
	h.frame(1, wire.OpAck, wire.Ack{Topic: "other", Tags: []uint64{1}})
	h.frame(1, wire.OpAck, wire.Ack{Topic: "orders", Partition: 1, Tags: []uint64{1}})
	if len(h.takeOut()) != 0 {
		t.Fatal("an ack for an unknown subscription was routed")
	}
	h.expectNothing(1)
	id := h.frame(1, wire.OpNack, wire.Nack{Topic: "orders", Tags: []uint64{6}, NotBeforeMs: wire.Some(uint64(1))})
	h.expectError(1, wire.OpError, id, wire.CodeInvalid)
	if len(h.takeOut()) != 0 {
		t.Fatal("a refused nack was routed")
	}
}

// ---- declare, topology, unsupported

func TestSessionDeclareQueue(t *testing.T) {
	h := newSessHarness(t, func(c *Config) { c.PartitionsPerQueueMax = 8 })
	h.ready(1)
	bad := []wire.DeclareQueue{
		{Topic: "BAD"},
		{Topic: "orders", DLQPolicy: wire.Some(wire.DLQPolicy{Kind: wire.DLQCustom, Topic: "Bad"})},
		{Topic: "orders", DLQPolicy: wire.Some(wire.DLQPolicy{Kind: wire.DLQCustom, Topic: "orders", Group: wire.Some("default")})},
		{Topic: "orders", DefaultMessageTTLMs: wire.Some(uint64(1) << 63)},
		{Topic: "orders", PartitionCount: wire.Some(uint32(9))},
	}
	for _, d := range bad {
		id := h.frame(1, wire.OpDeclareQueue, d)
		h.expectError(1, wire.OpError, id, wire.CodeInvalid)
	}
	if len(h.takeOut()) != 0 {
		t.Fatal("a refused declare reached the Node")
	}
	id := h.frame(1, wire.OpDeclareQueue, wire.DeclareQueue{Topic: "orders", Group: wire.Some("eu"), PartitionCount: wire.Some(uint32(4)),
		DLQPolicy: wire.Some(wire.DLQPolicy{Kind: wire.DLQCustom, Topic: "dead"}), DLQRetriesMax: wire.Some(uint32(2)), DefaultMessageTTLMs: wire.Some(uint64(70))})
	out := h.takeOut()
	dq := out[0].Msg.(*DeclareQueue)
	if out[0].To != NodeAddr() || dq.Topic != "orders" || dq.Group != "eu" || dq.PartitionCount != 4 || dq.DLQ.Target.Topic != "dead" ||
		*dq.MaxRetries != 2 || *dq.DefaultTTLMs != 70 {
		t.Fatalf("DeclareQueue %+v", dq)
	}
	h.deliver(&Declared{Token: dq.Token, Partitions: 2})
	f := h.expect(1, wire.OpDeclareQueueOk)
	if ok := f.body.(wire.DeclareQueueOk); f.hdr.RequestID != id || ok.PartitionCount != 2 || ok.Status != "stored" {
		t.Fatalf("DECLARE_QUEUE_OK %+v", ok)
	}
	id = h.frame(1, wire.OpDeclareQueue, wire.DeclareQueue{Topic: "x"})
	dq = h.takeOut()[0].Msg.(*DeclareQueue)
	if dq.PartitionCount != 1 || dq.DLQ != nil || dq.MaxRetries != nil {
		t.Fatalf("defaults %+v", dq)
	}
	h.deliver(&Declared{Token: dq.Token, Err: core.ErrStorageBehind})
	h.expectError(1, wire.OpError, id, wire.CodeInternal)
}

func TestSessionTopologyIsStandalone(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	id := h.frame(1, wire.OpTopology, wire.Topology{Topic: wire.Some("orders")})
	f := h.expect(1, wire.OpTopologyOk)
	if topo := f.body.(wire.TopologyOk); f.hdr.RequestID != id || topo.Generation != 0 || len(topo.Queues) != 0 || len(topo.Streams) != 0 {
		t.Fatalf("TOPOLOGY_OK %+v", topo)
	}
}

func TestSessionUnsupportedUnknownAndMalformed(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	// Streams are served now (session_stream_test.go): a malformed stream
	// frame is reported malformed.
	id := h.frame(1, wire.OpSubscribeStream, wire.Ping{})
	if e := h.expectError(1, wire.OpError, id, wire.CodeInvalid); !strings.HasPrefix(e.Message, "malformed frame") {
		t.Fatalf("a malformed stream subscribe: %q", e.Message)
	}
	id = h.frame(1, wire.OpHello, wire.Hello{ProtocolVersion: 1})
	h.expectError(1, wire.OpError, id, wire.CodeInvalid)
	id = h.frame(1, wire.Opcode(999), wire.Ping{})
	h.expectError(1, wire.OpError, id, wire.CodeInvalid)
	id = h.frame(1, wire.OpPublish, wire.Ping{})
	h.expectError(1, wire.OpError, id, wire.CodeInvalid)
	if h.closed[1] {
		t.Fatal("a bad frame closed the connection")
	}
}

func TestSessionBrokenStream(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	h.step(&Frame{NowMs: h.now, Conn: 1, Header: wire.Header{PayloadSizeBytes: 1 << 30, RequestID: 33},
		Err: fmt.Errorf("%w: test", wire.ErrFrameTooLarge)})
	e := h.expectError(1, wire.OpError, 33, wire.CodeInvalid)
	if !h.closed[1] || !sessContains(e.Message, fmt.Sprint(h.cfg.FramePayloadBytesMax)) {
		t.Fatalf("too large: closed %v, %q", h.closed[1], e.Message)
	}
	h2 := newSessHarness(t, nil)
	h2.ready(1)
	h2.step(&Frame{NowMs: h2.now, Conn: 1, Err: wire.ErrMalformed})
	h2.expectNothing(1)
	if !h2.closed[1] {
		t.Fatal("a broken stream was kept")
	}
}

func sessContains(s string, parts ...string) bool {
	for _, p := range parts {
		found := false
		for i := 0; i+len(p) <= len(s); i++ {
			if s[i:i+len(p)] == p {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func TestSessionAttachOfAnAlreadyClosedConnection(t *testing.T) {
	h := newSessHarness(t, nil)
	h.connClosed(4) // the driver's report overtook the Attach envelope
	h.deliver(&Attach{Conn: 4, Loopback: true, HelloRequestID: 1})
	h.expectNothing(4)
	if !h.ended {
		t.Fatal("a fresh session whose connection is gone did not end")
	}
	// A dormant session keeps its grace.
	h = newSessHarness(t, nil)
	h.ready(1)
	h.connClosed(1)
	h.connClosed(2)
	h.deliver(&Attach{Conn: 2, Loopback: true, HelloRequestID: 1})
	h.expectNothing(2)
	if h.ended || !h.s.dormant {
		t.Fatal("a dormant session lost its grace to a dead connection")
	}
	h.attach(3, wire.ResumeResumed)
}

func TestSessionSubscribeEndedBeforeItStartedIsRefused(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	id := h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "orders", Prefetch: 1})
	h.takeOpen(sessQOrders, 1, nil)
	req := h.takeRequest(sessQOrders)
	// A reconcile that does not list it closes it server-side.
	h.frame(1, wire.OpReconcileClient, wire.ReconcileClient{})
	h.expect(1, wire.OpReconcileResult)
	h.takeOut()
	h.fromPartition(sessQOrders, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplySubscribed}})
	h.expectError(1, wire.OpSubscribeErr, id, wire.CodeInternal)
	if u := h.takeRequest(sessQOrders).Input.(*core.Unsubscribe); u.SubID != req.Input.(*core.Subscribe).SubID {
		t.Fatal("the late subscription was not handed back")
	}
}

func TestSessionOpensAreBounded(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	for i := 0; i < opensMax; i++ {
		h.frame(1, wire.OpPublish, wire.Publish{Topic: fmt.Sprintf("t%d", i)})
	}
	h.takeOut()
	id := h.frame(1, wire.OpPublish, wire.Publish{Topic: "one-more"})
	h.expectError(1, wire.OpError, id, wire.CodeInternal)
	// A restore refused on the spot still gives one complete result.
	id = h.frame(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: []wire.ReconcileSub{
		{SubID: 1, Topic: "x", Prefetch: 1}, {SubID: 2, Topic: "y", Prefetch: 1}}})
	f := h.expect(1, wire.OpReconcileResult)
	res := f.body.(wire.ReconcileResult).Entries
	if f.hdr.RequestID != id || len(res) != 2 || res[0].Code != wire.ReasonServerRestoreFailed || res[1].Code != wire.ReasonServerRestoreFailed {
		t.Fatalf("result %+v", res)
	}
	h.expectNothing(1)
	if len(h.s.subs) != 0 {
		t.Fatal("a refused restore left a subscription")
	}
	// Opened partitions nobody subscribes to are forgotten at the bound.
	h2 := newSessHarness(t, nil)
	h2.ready(1)
	for i := 0; i < opensMax; i++ {
		q := core.QueueID{Topic: fmt.Sprintf("t%d", i)}
		h2.frame(1, wire.OpPublish, wire.Publish{Topic: q.Topic})
		h2.takeOpen(q, 1, nil)
		h2.takeOut()
	}
	h2.frame(1, wire.OpPublish, wire.Publish{Topic: "one-more"})
	h2.takeOpen(core.QueueID{Topic: "one-more"}, 1, nil)
	if len(h2.s.opens) != 1 {
		t.Fatalf("%d opens kept", len(h2.s.opens))
	}
}

func TestSessionPublishConfirmsLeaveInArrivalOrder(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	qa, qb := core.QueueID{Topic: "a"}, core.QueueID{Topic: "b"}
	a := h.frame(1, wire.OpPublish, wire.Publish{Topic: "a", RequireConfirm: true})
	h.takeOpen(qa, 1, nil)
	b := h.frame(1, wire.OpPublish, wire.Publish{Topic: "b", RequireConfirm: true})
	h.takeOpen(qb, 1, nil)
	// Rejections decided up front skip the order (PROTOCOL 7.2).
	bad := h.frame(1, wire.OpPublish, wire.Publish{Topic: "a", RequireConfirm: true, Headers: wire.Headers{{Key: "stroma.x", Value: "1"}}})
	h.expectError(1, wire.OpError, bad, wire.CodeInvalid)
	c := h.frame(1, wire.OpPublish, wire.Publish{Topic: "a", RequireConfirm: true})
	ra, rb := h.takeRequests(qa), h.takeRequest(qb)
	// b's partition answers first: its confirm waits for a's.
	h.fromPartition(qb, &Response{Token: rb.Token, Reply: core.Reply{Kind: core.ReplyError, Err: core.ErrQueueFull}})
	h.expectNothing(1)
	h.fromPartition(qa, &Response{Token: ra[1].Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 8}})
	h.expectNothing(1)
	h.fromPartition(qa, &Response{Token: ra[0].Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 7}})
	if f := h.expect(1, wire.OpPublishOk); f.hdr.RequestID != a || f.body.(wire.PublishOk).Offset != 7 {
		t.Fatalf("first confirm %+v", f)
	}
	h.expectError(1, wire.OpError, b, wire.CodeInternal)
	if f := h.expect(1, wire.OpPublishOk); f.hdr.RequestID != c || f.body.(wire.PublishOk).Offset != 8 {
		t.Fatalf("third confirm %+v", f)
	}
	// A partition that cannot be opened is an up-front rejection too.
	d := h.frame(1, wire.OpPublish, wire.Publish{Topic: "a", RequireConfirm: true})
	e := h.frame(1, wire.OpPublish, wire.Publish{Topic: "c", RequireConfirm: true})
	h.takeOpen(core.QueueID{Topic: "c"}, 0, core.ErrInvalidSettings)
	h.expectError(1, wire.OpError, e, wire.CodeInvalid)
	h.fromPartition(qa, &Response{Token: h.takeRequest(qa).Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 9}})
	if f := h.expect(1, wire.OpPublishOk); f.hdr.RequestID != d {
		t.Fatal("the confirm after a skipped rejection did not follow")
	}
	if len(h.s.pending) != 0 || len(h.s.confirms) != 0 {
		t.Fatalf("%d pending, %d in the confirm order", len(h.s.pending), len(h.s.confirms))
	}
}
