package client_test

// CLIENT-SIDE PROTOCOL TESTS.
//
// The broker is being written in parallel, so these tests run the client against
// fakeBroker: a scripted peer built on transport + wire that performs the
// handshake, answers the requests a test needs and records every frame the client
// sends. They check what the client puts on the wire and how it reacts to
// replies and pushes, over TCP and QUIC on loopback. End-to-end tests against the
// real broker come later and live with the broker.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/certs"
	"github.com/fibril-go/fibril/transport/wire"
)

const (
	testTimeout      = 10 * time.Second
	recordedFrameMax = 4096 // frames a test may leave unread before the fake blocks
)

// recorded is one frame the client sent.
type recorded struct {
	h    wire.Header
	body wire.Body
}

type topicKey struct{ topic, group string }

// fakeScript is what the fake does beyond the defaults. Set it before dialing.
type fakeScript struct {
	compliance      string              // HELLO_OK compliance; "" means the real marker
	helloError      *wire.ErrorBody     // answer HELLO with HELLO_ERR carrying this
	credentials     *client.Credentials // require AUTH with these; nil answers AUTH_ERR 400
	topology        map[topicKey]uint32 // partition counts listed by TOPOLOGY
	versions        map[topicKey]uint64 // partitioning versions listed by TOPOLOGY
	deliveriesEach  int                 // DELIVERs sent per partition after SUBSCRIBE_OK
	deliveryHeaders wire.Headers
	deliveryPayload []byte
	deliveryType    wire.ContentType
	redirectTopics  map[string]uint64 // first confirmed publish to topic gets REDIRECT(version)
	reverseConfirms int               // hold PUBLISH_OKs and send each batch of this many reversed
	// resumeAs is the outcome for a HELLO presenting the last identity issued;
	// nil means resumed (the session and its identity carry over).
	resumeAs *wire.ResumeOutcome
	// reconcile answers RECONCILE_CLIENT; nil keeps every listed subscription
	// under its id (matched).
	reconcile func(wire.ReconcileClient) wire.ReconcileResult
	// earlyDeliverSubID, when set, pushes a PING and a DELIVER for this sub id
	// before answering RECONCILE_CLIENT, as Fibril's resumed sessions may (§9.2).
	earlyDeliverSubID uint64
	// standalone answers TOPOLOGY with generation 0 and empty lists, as a
	// standalone broker does (PROTOCOL 5.20), whatever topology holds.
	standalone bool
	// streams are the declared streams and their partition counts; TOPOLOGY
	// lists them unless standalone.
	streams map[string]uint32
	// streamRecordsEach: records sent per SUBSCRIBE_STREAM, from the start
	// offset (Offset(n): n; a durable name: its acked cursor; else 0).
	streamRecordsEach int
	// cohortReject, when set, may refuse an exclusive SUBSCRIBE (one with a
	// consumer_group) with the SUBSCRIBE_ERR it returns; nil lets it through.
	cohortReject func(wire.Subscribe) *wire.ErrorBody
	// omitMemberID answers exclusive SUBSCRIBEs without member_id, as a broker
	// that ignores cohorts would.
	omitMemberID bool
	// mintDelay holds the SUBSCRIBE_OK of an exclusive SUBSCRIBE without
	// member_id this long, so a client that does not wait for the minted id
	// sends its next SUBSCRIBE before the reply.
	mintDelay time.Duration
}

type fakeBroker struct {
	t         *testing.T
	ln        transport.Listener
	transport string
	tls       *client.TLSOptions
	material  *certs.Material // QUIC only

	mu           sync.Mutex
	script       fakeScript
	silent       bool
	conns        []*fakeConn
	offsets      map[wire.QueueKey]uint64
	nextSubID    uint64
	nextTag      uint64
	tagRequestID map[uint64]uint64 // delivery tag → the DELIVER's request id
	redirected   map[string]bool
	heldConfirms []heldConfirm
	hellos       int
	topologyReqs int
	streamSubIDs map[string]uint64   // "topic/partition" → the last SUBSCRIBE_STREAM's sub id
	cursors      map[string]uint64   // "name/topic/partition" → next offset (ACK max+1)
	identity     wire.ResumeIdentity // the last one HELLO_OK issued
	memberIDs    int                 // cohort member ids minted so far

	frames chan recorded
}

type heldConfirm struct {
	conn      *fakeConn
	requestID uint64
	offset    uint64
}

// fakeConn is one accepted connection; writes are serialised by mu.
type fakeConn struct {
	conn          transport.Conn
	mu            sync.Mutex
	lastRequestID uint64 // the fake's own id space for pushes (§7.1)
	// memberID is the cohort member id established on this connection (the
	// nil UUID until an exclusive SUBSCRIBE); only serve's goroutine uses it.
	memberID wire.UUID
}

func (fc *fakeConn) send(op wire.Opcode, requestID uint64, body wire.Body) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	_, _ = fc.conn.Write(wire.AppendBodyFrame(nil, op, requestID, body))
}

func (fc *fakeConn) nextPushID() uint64 {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.lastRequestID++
	return fc.lastRequestID
}

func (fc *fakeConn) push(op wire.Opcode, body wire.Body) uint64 {
	id := fc.nextPushID()
	fc.send(op, id, body)
	return id
}

var transports = []string{client.TransportTCP, client.TransportQUIC}

// forEachTransport runs fn once over plaintext TCP and once over QUIC.
func forEachTransport(t *testing.T, fn func(t *testing.T, kind string)) {
	for _, kind := range transports {
		t.Run(kind, func(t *testing.T) { fn(t, kind) })
	}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newFakeBroker(t *testing.T, kind string, script fakeScript) *fakeBroker {
	t.Helper()
	fb := &fakeBroker{
		t: t, transport: kind, script: script,
		offsets:      make(map[wire.QueueKey]uint64),
		tagRequestID: make(map[uint64]uint64),
		redirected:   make(map[string]bool),
		frames:       make(chan recorded, recordedFrameMax),
	}
	if fb.script.topology == nil {
		fb.script.topology = make(map[topicKey]uint32)
	}
	if fb.script.streams == nil {
		fb.script.streams = make(map[string]uint32)
	}
	fb.streamSubIDs = make(map[string]uint64)
	fb.cursors = make(map[string]uint64)
	lc := transport.ListenConfig{Logger: quietLogger()}
	var err error
	switch kind {
	case client.TransportTCP:
		fb.ln, err = lc.ListenTCP("127.0.0.1:0", nil)
	case client.TransportQUIC:
		m, mErr := certs.LoadOrCreate(t.TempDir())
		if mErr != nil {
			t.Fatalf("certs: %v", mErr)
		}
		fb.material = m
		fb.tls = &client.TLSOptions{CAFile: filepath.Join(m.Dir, certs.CACertFileName)}
		fb.ln, err = lc.ListenQUIC("127.0.0.1:0", m.ServerTLS())
	}
	if err != nil {
		t.Fatalf("listen %s: %v", kind, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := fb.ln.Accept(ctx)
			if err != nil {
				return
			}
			fc := &fakeConn{conn: conn}
			fb.mu.Lock()
			fb.conns = append(fb.conns, fc)
			fb.mu.Unlock()
			go fb.serve(fc)
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = fb.ln.Close()
		<-done
		fb.dropConnections()
	})
	return fb
}

func (fb *fakeBroker) addr() string { return fb.ln.Addr().String() }

// dial connects a client with test defaults; the test may override options.
func (fb *fakeBroker) dial(t *testing.T, opts client.ClientOptions) *client.Client {
	t.Helper()
	c, err := fb.tryDial(t, opts)
	if err != nil {
		t.Fatalf("Dial over %s: %v", fb.transport, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (fb *fakeBroker) tryDial(t *testing.T, opts client.ClientOptions) (*client.Client, error) {
	t.Helper()
	opts.Transport = fb.transport
	if opts.TLS == nil {
		opts.TLS = fb.tls
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	return client.Dial(testContext(t), fb.addr(), opts)
}

// setSilent makes the fake stop answering anything (PING included).
func (fb *fakeBroker) setSilent(silent bool) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.silent = silent
}

func (fb *fakeBroker) isSilent() bool {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.silent
}

// dropConnections closes every accepted connection.
func (fb *fakeBroker) dropConnections() {
	fb.mu.Lock()
	conns := fb.conns
	fb.conns = nil
	fb.mu.Unlock()
	for _, fc := range conns {
		_ = fc.conn.Close()
	}
}

// pushAll sends a push frame on every connection.
func (fb *fakeBroker) pushAll(op wire.Opcode, body wire.Body) uint64 {
	fb.mu.Lock()
	conns := append([]*fakeConn(nil), fb.conns...)
	fb.mu.Unlock()
	var id uint64
	for _, fc := range conns {
		id = fc.push(op, body)
	}
	return id
}

func (fb *fakeBroker) counts() (hellos, topologyRequests int) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.hellos, fb.topologyReqs
}

func (fb *fakeBroker) deliverRequestID(tag uint64) uint64 {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.tagRequestID[tag]
}

// frameSkip says which recorded frames a test's read passes over.
type frameSkip struct {
	handshake bool // HELLO and AUTH
	probes    bool // bare DECLARE_QUEUEs the client sends to learn a count
}

// nextSkipping returns the next recorded frame that skip does not pass
// over; heartbeats and TOPOLOGY requests are always passed over (tests
// check those with expectOp).
func (fb *fakeBroker) nextSkipping(t *testing.T, skip frameSkip) recorded {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for {
		select {
		case f := <-fb.frames:
			switch f.h.Opcode {
			case wire.OpPing, wire.OpPong, wire.OpTopology:
				continue
			case wire.OpHello, wire.OpAuth:
				if skip.handshake {
					continue
				}
			}
			if skip.probes && routingProbe(f) {
				continue
			}
			return f
		case <-timer.C:
			t.Fatal("timed out waiting for a frame from the client")
			return recorded{}
		}
	}
}

// next returns the next recorded frame other than the handshake (HELLO,
// AUTH), heartbeats, TOPOLOGY requests and routing probes.
func (fb *fakeBroker) next(t *testing.T) recorded {
	t.Helper()
	return fb.nextSkipping(t, frameSkip{handshake: true, probes: true})
}

// expect returns the next recorded frame and checks its opcode.
func (fb *fakeBroker) expect(t *testing.T, op wire.Opcode) recorded {
	t.Helper()
	f := fb.next(t)
	if f.h.Opcode != op {
		t.Fatalf("client sent %s (request id %d), want %s", f.h.Opcode, f.h.RequestID, op)
	}
	return f
}

// expectOp waits for a frame with opcode op, skipping all others.
func (fb *fakeBroker) expectOp(t *testing.T, op wire.Opcode) recorded {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for {
		select {
		case f := <-fb.frames:
			if f.h.Opcode == op {
				return f
			}
		case <-timer.C:
			t.Fatalf("timed out waiting for %s", op)
			return recorded{}
		}
	}
}

func (fb *fakeBroker) serve(fc *fakeConn) {
	defer fc.conn.Close()
	r := bufio.NewReader(fc.conn)
	for {
		h, payload, err := wire.ReadFrame(r, wire.PayloadSizeBytesMaxDefault, nil)
		if err != nil {
			return
		}
		body, err := wire.DecodeBody(h.Opcode, payload)
		if err != nil {
			fb.t.Errorf("fake broker: client sent a malformed %s: %v", h.Opcode, err)
			return
		}
		fb.frames <- recorded{h: h, body: body}
		if fb.isSilent() {
			continue
		}
		if !fb.handle(fc, h, body) {
			return
		}
	}
}

// handle answers one frame; false closes the connection.
func (fb *fakeBroker) handle(fc *fakeConn, h wire.Header, body wire.Body) bool {
	switch m := body.(type) {
	case wire.Hello:
		return fb.onHello(fc, h, m)
	case wire.ReconcileClient:
		fb.onReconcile(fc, h, m)
	case wire.Auth:
		return fb.onAuth(fc, h, m)
	case wire.Ping:
		fc.send(wire.OpPong, h.RequestID, wire.Pong{})
	case wire.Topology:
		fc.send(wire.OpTopologyOk, h.RequestID, fb.topologyFor(m))
	case wire.Publish:
		fb.onPublish(fc, h, m.QueueKey(), m.RequireConfirm)
	case wire.PublishDelayed:
		fb.onPublish(fc, h, m.QueueKey(), m.RequireConfirm)
	case wire.DeclareQueue:
		count := max(m.PartitionCount.Or(1), 1)
		fb.mu.Lock()
		if _, isStream := fb.script.streams[m.Topic]; isStream {
			fb.mu.Unlock()
			fc.send(wire.OpError, h.RequestID, wire.ErrorBody{Code: wire.CodeInvalid, Message: "the topic is a stream here"})
			return true
		}
		if known, ok := fb.script.topology[topicKey{m.Topic, m.Group.Or("")}]; ok && !m.PartitionCount.Present {
			count = known // the existing count wins (PROTOCOL 5.12)
		}
		fb.script.topology[topicKey{m.Topic, m.Group.Or("")}] = count
		fb.mu.Unlock()
		fc.send(wire.OpDeclareQueueOk, h.RequestID, wire.DeclareQueueOk{Status: "created", PartitionCount: count})
	case wire.Subscribe:
		fb.onSubscribe(fc, h, m)
	case wire.DeclarePlexus:
		fb.onDeclarePlexus(fc, h, m)
	case wire.SubscribeStream:
		fb.onSubscribeStream(fc, h, m)
	}
	return true
}

func (fb *fakeBroker) onHello(fc *fakeConn, h wire.Header, m wire.Hello) bool {
	fb.mu.Lock()
	fb.hellos++
	script := fb.script
	outcome := wire.ResumeNew
	if resume, ok := m.Resume.Get(); ok {
		outcome = wire.ResumeRejected
		if resume == fb.identity {
			outcome = wire.ResumeResumed
			if script.resumeAs != nil {
				outcome = *script.resumeAs
			}
		}
	}
	if outcome != wire.ResumeResumed {
		// A fresh identity per new session, so a later resume can tell them apart.
		n := byte(fb.hellos)
		fb.identity = wire.ResumeIdentity{OwnerID: wire.UUID{9}, ClientID: wire.UUID{8, n}, ResumeToken: wire.UUID{7, n}}
	}
	identity := fb.identity
	fb.mu.Unlock()
	if script.helloError != nil {
		fc.send(wire.OpHelloErr, h.RequestID, *script.helloError)
		return false
	}
	compliance := script.compliance
	if compliance == "" {
		compliance = wire.ComplianceMarker
	}
	fc.send(wire.OpHelloOk, h.RequestID, wire.HelloOk{
		ProtocolVersion: wire.ProtocolVersion, OwnerID: identity.OwnerID, ClientID: identity.ClientID,
		ResumeToken: identity.ResumeToken, ResumeOutcome: outcome, ServerName: "fake-broker", Compliance: compliance,
	})
	return true
}

func (fb *fakeBroker) onReconcile(fc *fakeConn, h wire.Header, m wire.ReconcileClient) {
	fb.mu.Lock()
	answer, early := fb.script.reconcile, fb.script.earlyDeliverSubID
	fb.mu.Unlock()
	if early != 0 {
		fc.push(wire.OpPing, wire.Ping{})
		fc.push(wire.OpDeliver, wire.Deliver{SubID: early, Topic: "early", DeliveryTag: 1000,
			ContentType: wire.ContentType{Kind: wire.ContentText}, Payload: []byte("early")})
	}
	var result wire.ReconcileResult
	if answer != nil {
		result = answer(m)
	} else {
		for _, sub := range m.Subscriptions {
			result.Entries = append(result.Entries, wire.ReconcileEntry{Client: wire.Some(sub), Server: wire.Some(sub),
				Action: wire.ReconcileKeep, Reason: "matched", Code: 1})
		}
	}
	fc.send(wire.OpReconcileResult, h.RequestID, result)
}

// deliver pushes one DELIVER for subID on every connection and returns its tag.
func (fb *fakeBroker) deliver(subID uint64, topic string, offset uint64, payload string) uint64 {
	fb.mu.Lock()
	fb.nextTag++
	tag := fb.nextTag
	conns := append([]*fakeConn(nil), fb.conns...)
	fb.mu.Unlock()
	for _, fc := range conns {
		id := fc.nextPushID()
		fb.mu.Lock()
		fb.tagRequestID[tag] = id
		fb.mu.Unlock()
		fc.send(wire.OpDeliver, id, wire.Deliver{SubID: subID, Topic: topic, Offset: offset, DeliveryTag: tag,
			ContentType: wire.ContentType{Kind: wire.ContentText}, Payload: []byte(payload)})
	}
	return tag
}

func (fb *fakeBroker) onAuth(fc *fakeConn, h wire.Header, m wire.Auth) bool {
	creds := fb.script.credentials
	switch {
	case creds == nil:
		fc.send(wire.OpAuthErr, h.RequestID, wire.ErrorBody{Code: wire.CodeInvalid, Message: "authentication not applicable"})
		return true
	case m.Username == creds.Username && m.Password == creds.Password:
		fc.send(wire.OpAuthOk, h.RequestID, wire.AuthOk{})
		return true
	}
	fc.send(wire.OpAuthErr, h.RequestID, wire.ErrorBody{Code: wire.CodeUnauthorized, Message: "invalid credentials"})
	return false
}

func (fb *fakeBroker) topologyFor(req wire.Topology) wire.TopologyOk {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.topologyReqs++
	var snap wire.TopologySnapshot
	if fb.script.standalone {
		return wire.TopologyOk(snap)
	}
	for key, count := range fb.script.topology {
		if topic, ok := req.Topic.Get(); ok && topic != key.topic {
			continue
		}
		if group, ok := req.Group.Get(); ok && group != key.group {
			continue
		}
		for p := range count {
			entry := wire.TopologyQueue{
				Topic: key.topic, Partition: p, PartitionCount: count,
				PartitioningVersion: fb.script.versions[key],
				OwnerEndpoints:      []wire.Endpoint{{Host: "127.0.0.1", Port: 9876}},
			}
			if key.group != "" {
				entry.Group = wire.Some(key.group)
			}
			snap.Queues = append(snap.Queues, entry)
		}
	}
	for topic, count := range fb.script.streams {
		if want, ok := req.Topic.Get(); ok && want != topic {
			continue
		}
		for p := range count {
			snap.Streams = append(snap.Streams, wire.TopologyStream{Topic: topic, Partition: p, PartitionCount: count,
				OwnerEndpoints: []wire.Endpoint{{Host: "127.0.0.1", Port: 9876}}})
		}
	}
	return wire.TopologyOk(snap)
}

func (fb *fakeBroker) onPublish(fc *fakeConn, h wire.Header, key wire.QueueKey, confirm bool) {
	fb.mu.Lock()
	if version, ok := fb.script.redirectTopics[key.Topic]; ok && confirm && !fb.redirected[key.Topic] {
		fb.redirected[key.Topic] = true
		fb.mu.Unlock()
		fc.send(wire.OpRedirect, h.RequestID, wire.Redirect{
			Topic: key.Topic, Partition: key.Partition, Group: key.Group,
			OwnerEndpoints: []wire.Endpoint{{Host: "127.0.0.1", Port: 9876}}, PartitioningVersion: version,
		})
		return
	}
	offset := fb.offsets[key]
	fb.offsets[key] = offset + 1
	if !confirm {
		fb.mu.Unlock()
		return
	}
	if batch := fb.script.reverseConfirms; batch > 0 {
		fb.heldConfirms = append(fb.heldConfirms, heldConfirm{conn: fc, requestID: h.RequestID, offset: offset})
		if len(fb.heldConfirms) < batch {
			fb.mu.Unlock()
			return
		}
		held := fb.heldConfirms
		fb.heldConfirms = nil
		fb.mu.Unlock()
		for i := len(held) - 1; i >= 0; i-- {
			held[i].conn.send(wire.OpPublishOk, held[i].requestID, wire.PublishOk{Offset: held[i].offset})
		}
		return
	}
	fb.mu.Unlock()
	fc.send(wire.OpPublishOk, h.RequestID, wire.PublishOk{Offset: offset})
}

func (fb *fakeBroker) onSubscribe(fc *fakeConn, h wire.Header, m wire.Subscribe) {
	fb.mu.Lock()
	script := fb.script
	fb.mu.Unlock()
	ok := wire.SubscribeOk{Topic: m.Topic, Partition: m.Partition, Group: m.Group, Prefetch: m.Prefetch}
	if m.ConsumerGroup.Present {
		memberID, refused := fb.resolveMember(fc, m, script)
		if refused != nil {
			fc.send(wire.OpSubscribeErr, h.RequestID, *refused)
			return
		}
		ok.ConsumerGroup, ok.ConsumerTarget = m.ConsumerGroup, m.ConsumerTarget
		if !script.omitMemberID {
			ok.MemberID = wire.Some(memberID)
		}
		if !m.MemberID.Present && script.mintDelay > 0 {
			time.Sleep(script.mintDelay) // widens the window a racing client would use
		}
	}
	fb.mu.Lock()
	fb.nextSubID++
	subID := fb.nextSubID
	fb.mu.Unlock()
	ok.SubID = subID
	fc.send(wire.OpSubscribeOk, h.RequestID, ok)
	payload := script.deliveryPayload
	if payload == nil {
		payload = []byte("hello")
	}
	contentType := script.deliveryType
	if contentType.Kind == wire.ContentNone && script.deliveryPayload == nil {
		contentType = wire.ContentType{Kind: wire.ContentText}
	}
	for i := range script.deliveriesEach {
		id := fc.nextPushID()
		fb.mu.Lock()
		fb.nextTag++
		tag := fb.nextTag
		fb.tagRequestID[tag] = id
		fb.mu.Unlock()
		fc.send(wire.OpDeliver, id, wire.Deliver{
			SubID: subID, Topic: m.Topic, Group: m.Group, Partition: m.Partition,
			Offset: uint64(i), DeliveryTag: tag, PublishedMs: 1_700_000_000_000, PublishReceivedMs: 1_700_000_000_005,
			ContentType: contentType, Headers: script.deliveryHeaders, Payload: payload,
		})
	}
}

// resolveMember runs PROTOCOL 5.6 checks 4 and 5 and the member id
// resolution for an exclusive SUBSCRIBE on fc: a sent id is used and must
// match the connection's; else the connection's; else a fresh one is minted
// ({0xC0, n}). cohortReject may refuse first.
func (fb *fakeBroker) resolveMember(fc *fakeConn, m wire.Subscribe, script fakeScript) (wire.UUID, *wire.ErrorBody) {
	if script.cohortReject != nil {
		if refused := script.cohortReject(m); refused != nil {
			return wire.UUID{}, refused
		}
	}
	sent, hasSent := m.MemberID.Get()
	switch {
	case hasSent && sent.IsNil():
		return wire.UUID{}, &wire.ErrorBody{Code: wire.CodeInvalid, Message: "nil member id"}
	case hasSent && !fc.memberID.IsNil() && sent != fc.memberID:
		return wire.UUID{}, &wire.ErrorBody{Code: wire.CodeConflict, Message: "member id conflict"}
	case hasSent:
		fc.memberID = sent
	case fc.memberID.IsNil():
		fb.mu.Lock()
		fb.memberIDs++
		fc.memberID = wire.UUID{0xC0, byte(fb.memberIDs)}
		fb.mu.Unlock()
	}
	return fc.memberID, nil
}

// update changes the script of a running fake.
func (fb *fakeBroker) update(change func(*fakeScript)) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	change(&fb.script)
}

// lastIdentity is the resume identity the fake's last HELLO_OK carried.
func (fb *fakeBroker) lastIdentity() wire.ResumeIdentity {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.identity
}

// nextFrame returns the next recorded frame of any kind but heartbeats,
// TOPOLOGY and routing probes, so a test can check the handshake's order.
func (fb *fakeBroker) nextFrame(t *testing.T) recorded {
	t.Helper()
	return fb.nextSkipping(t, frameSkip{probes: true})
}

// routingProbe: a bare DECLARE_QUEUE (no setting) is how the client learns a
// partition count from a broker whose topology lists nothing; tests that
// script other frames skip it like TOPOLOGY.
func routingProbe(f recorded) bool {
	d, ok := f.body.(wire.DeclareQueue)
	return ok && !d.PartitionCount.Present && !d.DLQPolicy.Present && !d.DLQRetriesMax.Present && !d.DefaultMessageTTLMs.Present
}

// nextAny is next without skipping routing probes (a bare DECLARE_QUEUE is
// then the request under test).
func (fb *fakeBroker) nextAny(t *testing.T) recorded {
	t.Helper()
	return fb.nextSkipping(t, frameSkip{handshake: true})
}

// onDeclarePlexus: a topic that is a queue gets 400; an existing stream keeps
// its count (idempotent, PROTOCOL 5.14).
func (fb *fakeBroker) onDeclarePlexus(fc *fakeConn, h wire.Header, m wire.DeclarePlexus) {
	fb.mu.Lock()
	_, isQueue := fb.script.topology[topicKey{m.Topic, ""}]
	count, exists := fb.script.streams[m.Topic]
	if !isQueue && !exists {
		count = max(m.PartitionCount.Or(1), 1)
		fb.script.streams[m.Topic] = count
	}
	fb.mu.Unlock()
	if isQueue {
		fc.send(wire.OpError, h.RequestID, wire.ErrorBody{Code: wire.CodeInvalid, Message: "topic is already a queue"})
		return
	}
	fc.send(wire.OpDeclarePlexusOk, h.RequestID, wire.DeclarePlexusOk{Status: "stored", PartitionCount: count})
}

func streamSubKey(topic string, partition uint32) string {
	return fmt.Sprintf("%s/%d", topic, partition)
}

// onSubscribeStream answers 404 for an unknown stream or partition, else
// SUBSCRIBE_OK and streamRecordsEach records from the resolved start.
func (fb *fakeBroker) onSubscribeStream(fc *fakeConn, h wire.Header, m wire.SubscribeStream) {
	fb.mu.Lock()
	count, ok := fb.script.streams[m.Topic]
	if !ok || m.Partition >= count {
		fb.mu.Unlock()
		fc.send(wire.OpSubscribeErr, h.RequestID, wire.ErrorBody{Code: wire.CodeNotFound, Message: "stream not found; declare it first"})
		return
	}
	fb.nextSubID++
	subID := fb.nextSubID
	fb.streamSubIDs[streamSubKey(m.Topic, m.Partition)] = subID
	var start uint64
	if name, durable := m.DurableName.Get(); durable {
		start = fb.cursors[name+"/"+streamSubKey(m.Topic, m.Partition)]
	} else if m.Start.Kind == wire.StreamStartOffset {
		start = m.Start.Value
	}
	records, headers := fb.script.streamRecordsEach, fb.script.deliveryHeaders
	fb.mu.Unlock()
	fc.send(wire.OpSubscribeOk, h.RequestID, wire.SubscribeOk{SubID: subID, Topic: m.Topic, Partition: m.Partition, Prefetch: m.Prefetch})
	for i := range records {
		fb.sendStreamRecord(fc, subID, m.Topic, m.Partition, start+uint64(i), headers)
	}
}

func (fb *fakeBroker) sendStreamRecord(fc *fakeConn, subID uint64, topic string, partition uint32, offset uint64, headers wire.Headers) {
	fc.push(wire.OpDeliver, wire.Deliver{SubID: subID, Topic: topic, Partition: partition, Offset: offset,
		DeliveryTag: offset, ContentType: wire.ContentType{Kind: wire.ContentText}, Headers: headers,
		Payload: []byte(fmt.Sprintf("%s/%d@%d", topic, partition, offset))})
}

// pushStreamRecord sends one record to the last subscription of (topic,
// partition), on every connection.
func (fb *fakeBroker) pushStreamRecord(topic string, partition uint32, offset uint64) {
	fb.mu.Lock()
	subID := fb.streamSubIDs[streamSubKey(topic, partition)]
	conns := append([]*fakeConn(nil), fb.conns...)
	fb.mu.Unlock()
	for _, fc := range conns {
		fb.sendStreamRecord(fc, subID, topic, partition, offset, nil)
	}
}

// setCursor sets a durable cursor, as acks would have.
func (fb *fakeBroker) setCursor(name, topic string, partition uint32, next uint64) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.cursors[name+"/"+streamSubKey(topic, partition)] = next
}
