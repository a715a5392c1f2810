package node

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/transport/wire"
)

// sessHarness drives one Session with frames built by transport/wire and
// decodes everything it sends. After every step it checks the machine's
// invariants and the driver-visible rules: nothing sent to a closed
// connection, nothing after the end but AttachRefused and Unsubscribe.
type sessHarness struct {
	t      sessT
	cfg    Config
	s      *Session
	now    int64
	reqID  uint64
	closed map[ConnID]bool
	sent   map[ConnID][]sessFrame
	out    []Envelope
	checks []PasswordCheck
	ended  bool
	// forgets collects the Forget envelopes (idle eviction), kept out of
	// out so tests of other behaviour need not expect them.
	forgets []Envelope
}

// sessT is what the harness needs of *testing.T, *testing.B and *rapid.T.
type sessT interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// sessFrame is one decoded frame the session sent.
type sessFrame struct {
	hdr  wire.Header
	body wire.Body
}

const sessTestID SessionID = 7

func sessTestConfig() Config {
	cfg := DefaultConfig()
	cfg.ReconnectGraceMs = 5000
	cfg.HeartbeatIntervalMs = 1000
	cfg.AuthTimeoutMs = 3000
	cfg.OutboxBytesMax = 64 << 20
	return cfg
}

func newSessHarness(t sessT, mod func(*Config)) *sessHarness {
	cfg := sessTestConfig()
	if mod != nil {
		mod(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	init := SessionInit{ID: sessTestID, ClientID: [16]byte{1}, Token: [16]byte{2}, OwnerID: [16]byte{3}}
	return &sessHarness{t: t, cfg: cfg, s: NewSession(cfg, init), now: 1_000_000,
		closed: map[ConnID]bool{}, sent: map[ConnID][]sessFrame{}}
}

// step feeds one input and records its effects.
func (h *sessHarness) step(in Input) *Ready {
	h.t.Helper()
	rd := h.s.Step(in)
	if err := h.s.CheckInvariants(); err != nil {
		h.t.Fatalf("after %T: %v", in, err)
	}
	if h.ended && (len(rd.Sends) > 0 || len(rd.Close) > 0 || len(rd.CheckPassword) > 0) {
		h.t.Fatalf("an ended session sent frames, closed or checked a password")
	}
	for _, snd := range rd.Sends {
		if h.closed[snd.Conn] {
			h.t.Fatalf("frames sent to closed connection %d", snd.Conn)
		}
		h.sent[snd.Conn] = append(h.sent[snd.Conn], sessDecodeFrames(h.t, snd.Bytes)...)
	}
	for _, c := range rd.Close {
		h.closed[c] = true
	}
	for _, env := range rd.Out {
		if env.From != SessionAddr(sessTestID) {
			h.t.Fatalf("envelope from %v", env.From)
		}
		if h.ended {
			if !sessIsEndedEnvelope(env.Msg) {
				h.t.Fatalf("an ended session sent %T", env.Msg)
			}
		}
		if _, ok := env.Msg.(*SessionEnded); ok {
			h.ended = true
		}
	}
	for _, env := range rd.Out {
		if _, ok := env.Msg.(*Forget); ok {
			h.forgets = append(h.forgets, env)
			continue
		}
		h.out = append(h.out, env)
	}
	h.checks = append(h.checks, rd.CheckPassword...)
	if h.s.Ended() != h.ended {
		h.t.Fatalf("Ended() is %v but SessionEnded sent is %v", h.s.Ended(), h.ended)
	}
	return rd
}

func sessIsEndedEnvelope(m Message) bool {
	switch m := m.(type) {
	case *AttachRefused, *Forget:
		return true
	case *SessionInfo, *SessionClosed: // operator answers (session_surface.go)
		return true
	case *Request:
		_, ok := m.Input.(*core.Unsubscribe)
		return ok
	case *StreamRequest:
		_, ok := m.Input.(*stream.Unsubscribe)
		return ok
	}
	return false
}

func sessDecodeFrames(t sessT, b []byte) []sessFrame {
	t.Helper()
	var out []sessFrame
	for len(b) > 0 {
		hdr, err := wire.DecodeHeader(b)
		if err != nil {
			t.Fatalf("bad frame header: %v", err)
		}
		end := wire.HeaderSizeBytes + int(hdr.PayloadSizeBytes)
		body, err := wire.DecodeBody(hdr.Opcode, b[wire.HeaderSizeBytes:end])
		if err != nil {
			t.Fatalf("session sent an undecodable %s: %v", hdr.Opcode, err)
		}
		out = append(out, sessFrame{hdr: hdr, body: body})
		b = b[end:]
	}
	return out
}

// ---- inputs

func (h *sessHarness) deliver(msg Message) *Ready {
	return h.step(&Deliver{NowMs: h.now, Envelope: Envelope{From: NodeAddr(), To: SessionAddr(sessTestID), Msg: msg}})
}

func (h *sessHarness) fromPartition(q core.QueueID, msg Message) *Ready {
	return h.step(&Deliver{NowMs: h.now, Envelope: Envelope{From: PartitionAddr(q), To: SessionAddr(sessTestID), Msg: msg}})
}

func (h *sessHarness) attach(conn ConnID, outcome wire.ResumeOutcome) wire.HelloOk {
	h.t.Helper()
	h.deliver(&Attach{Conn: conn, Loopback: true, HelloRequestID: 1, Outcome: outcome})
	f := h.expect(conn, wire.OpHelloOk)
	if f.hdr.RequestID != 1 {
		h.t.Fatalf("HELLO_OK request id %d", f.hdr.RequestID)
	}
	return f.body.(wire.HelloOk)
}

// frame sends a client frame with a fresh request id; it returns that id.
func (h *sessHarness) frame(conn ConnID, op wire.Opcode, body wire.Body) uint64 {
	h.t.Helper()
	h.reqID++
	var payload []byte
	if body != nil {
		payload = body.AppendTo(nil)
	}
	h.step(&Frame{NowMs: h.now, Conn: conn, Header: wire.Header{Opcode: op, RequestID: h.reqID, Version: 1,
		PayloadSizeBytes: uint32(len(payload))}, Payload: payload})
	return h.reqID
}

func (h *sessHarness) tick(dtMs int64) *Ready {
	h.now += dtMs
	return h.step(&Tick{NowMs: h.now})
}

func (h *sessHarness) connClosed(conn ConnID) {
	h.closed[conn] = true
	h.step(&ConnClosed{NowMs: h.now, Conn: conn})
}

// auth authenticates conn with a password the user store accepts.
func (h *sessHarness) auth(conn ConnID) {
	h.t.Helper()
	h.frame(conn, wire.OpAuth, wire.Auth{Username: "alice", Password: "pw"})
	chk := h.takeCheck()
	h.step(&AuthChecked{NowMs: h.now, Token: chk.Token, Known: true, Match: true})
	h.expect(conn, wire.OpAuthOk)
}

// ready attaches conn, authenticates and opens the gate (TOPOLOGY).
func (h *sessHarness) ready(conn ConnID) {
	h.t.Helper()
	h.attach(conn, wire.ResumeNew)
	h.auth(conn)
	h.frame(conn, wire.OpTopology, wire.Topology{})
	h.expect(conn, wire.OpTopologyOk)
}

// ---- effects

func (h *sessHarness) takeFrames(conn ConnID) []sessFrame {
	f := h.sent[conn]
	h.sent[conn] = nil
	return f
}

// expect takes the next frame sent to conn and checks its opcode.
func (h *sessHarness) expect(conn ConnID, op wire.Opcode) sessFrame {
	h.t.Helper()
	fs := h.sent[conn]
	if len(fs) == 0 {
		h.t.Fatalf("expected %s on conn %d, nothing was sent", op, conn)
	}
	h.sent[conn] = fs[1:]
	if fs[0].hdr.Opcode != op {
		h.t.Fatalf("expected %s on conn %d, got %s %+v", op, conn, fs[0].hdr.Opcode, fs[0].body)
	}
	return fs[0]
}

func (h *sessHarness) expectNothing(conn ConnID) {
	h.t.Helper()
	if fs := h.sent[conn]; len(fs) > 0 {
		h.t.Fatalf("expected nothing on conn %d, got %s %+v", conn, fs[0].hdr.Opcode, fs[0].body)
	}
}

func (h *sessHarness) expectError(conn ConnID, op wire.Opcode, requestID uint64, code wire.ErrorCode) wire.ErrorBody {
	h.t.Helper()
	f := h.expect(conn, op)
	e := f.body.(wire.ErrorBody)
	if f.hdr.RequestID != requestID || e.Code != code {
		h.t.Fatalf("expected %s %d for request %d, got %d for %d: %s", op, code, requestID, e.Code, f.hdr.RequestID, e.Message)
	}
	return e
}

func (h *sessHarness) takeCheck() PasswordCheck {
	h.t.Helper()
	if len(h.checks) != 1 {
		h.t.Fatalf("expected one password check, got %d", len(h.checks))
	}
	c := h.checks[0]
	h.checks = nil
	return c
}

func (h *sessHarness) takeOut() []Envelope {
	o := h.out
	h.out = nil
	return o
}

// takeOpen takes the one Open the session sent and answers it.
func (h *sessHarness) takeOpen(q core.QueueID, partitions uint32, err *core.Error) {
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
	if open == nil {
		h.t.Fatalf("no Open sent; out: %v", sessDescribeOut(h.out))
	}
	if open.Topic != q.Topic || open.Group != q.Group || open.Partition != q.Partition {
		h.t.Fatalf("Open %+v for %v", open, q)
	}
	h.out = rest
	h.deliver(&Opened{Token: open.Token, Queue: q, Partitions: partitions, Err: err})
}

// takeRequests takes every Request the session sent to q, in order.
func (h *sessHarness) takeRequests(q core.QueueID) []*Request {
	var reqs []*Request
	var rest []Envelope
	for _, env := range h.out {
		if r, ok := env.Msg.(*Request); ok && env.To == PartitionAddr(q) {
			reqs = append(reqs, r)
			continue
		}
		rest = append(rest, env)
	}
	h.out = rest
	return reqs
}

func (h *sessHarness) takeRequest(q core.QueueID) *Request {
	h.t.Helper()
	reqs := h.takeRequests(q)
	if len(reqs) != 1 {
		h.t.Fatalf("expected one request to %v, got %d (%v)", q, len(reqs), sessDescribeOut(h.out))
	}
	return reqs[0]
}

func sessDescribeOut(out []Envelope) []string {
	var s []string
	for _, env := range out {
		s = append(s, env.To.String()+":"+sessTypeName(env.Msg))
	}
	return s
}

func sessTypeName(v any) string {
	switch v := v.(type) {
	case *Request:
		return "Request/" + sessTypeName(v.Input)
	}
	return sessMsgName(v)
}

func sessMsgName(v any) string {
	s := ""
	switch v.(type) {
	case *core.Publish:
		s = "Publish"
	case *core.Subscribe:
		s = "Subscribe"
	case *core.Unsubscribe:
		s = "Unsubscribe"
	case *core.Ack:
		s = "Ack"
	case *core.Nack:
		s = "Nack"
	case *core.PauseSubscription:
		s = "Pause"
	case *Open:
		s = "Open"
	case *SessionEnded:
		s = "SessionEnded"
	case *SkeletonChanged:
		s = "SkeletonChanged"
	case *DeclareQueue:
		s = "DeclareQueue"
	case *AttachRefused:
		s = "AttachRefused"
	default:
		s = "?"
	}
	return s
}

// subscribe subscribes to q (partition already openable) and returns the
// sub id from SUBSCRIBE_OK.
func (h *sessHarness) subscribe(conn ConnID, q core.QueueID, prefetch uint32, autoAck bool) uint64 {
	h.t.Helper()
	id := h.frame(conn, wire.OpSubscribe, wire.Subscribe{Topic: q.Topic, Partition: q.Partition, Group: groupOpt(q.Group),
		Prefetch: prefetch, AutoAck: autoAck})
	if h.s.opens[q] == nil || !h.s.opens[q].opened {
		h.takeOpen(q, q.Partition+1, nil)
	}
	req := h.takeRequest(q)
	sub := req.Input.(*core.Subscribe)
	h.fromPartition(q, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplySubscribed}})
	f := h.expect(conn, wire.OpSubscribeOk)
	if f.hdr.RequestID != id || f.body.(wire.SubscribeOk).SubID != sub.SubID {
		h.t.Fatalf("SUBSCRIBE_OK %+v for request %d sub %d", f.body, id, sub.SubID)
	}
	return sub.SubID
}

func sessBody(payload string) *core.Body {
	return &core.Body{Payload: []byte(payload), PublishedMs: 11, ReceivedMs: 22}
}
