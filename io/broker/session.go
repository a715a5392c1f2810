//go:build !fibril_next

package broker

import (
	"bufio"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// A session is a client's logical connection. It outlives its socket for the
// reconnect grace (PROTOCOL.md §7.7). Invariants:
//   - at most one socket is attached at a time; a resume replaces it;
//   - subscriptions live in the session, so a resumed client keeps them and
//     its delivery tags stay valid (late acks are accepted);
//   - while dormant, replies are dropped (nobody waits for them) and
//     deliveries are kept, bounded by each subscription's prefetch;
//   - when the session ends, every subscription is unsubscribed, which
//     requeues its unsettled deliveries at once.
type session struct {
	b        *Broker
	id       uint64
	clientID wire.UUID
	token    wire.UUID
	out      *outbox

	mu         sync.Mutex
	conn       Conn
	attachGen  uint64
	authed     bool
	authGen    uint64 // the attachment whose AUTH was accepted
	loopback   bool
	subs       map[wire.QueueKey]*binding
	graceTimer *time.Timer
	ended      bool

	serverRequestID atomic.Uint64
	lastRecvNs      atomic.Int64
}

// binding ties one queue subscription to its session and runner.
type binding struct {
	subID     uint64
	sess      *session
	gen       uint64        // the attachment that subscribed (for SUBSCRIBE_OK)
	key       wire.QueueKey // normalised group
	prefetch  uint32        // as requested (echoed in SUBSCRIBE_OK)
	autoAck   bool
	r         *runner
	requestID uint64
	// registered is set by the runner once the core accepted the subscription.
	registered bool
}

func newUUID() wire.UUID {
	var u wire.UUID
	if _, err := rand.Read(u[:]); err != nil {
		panic("broker: no randomness: " + err.Error())
	}
	return u
}

func (b *Broker) newSession() *session {
	s := &session{b: b, id: b.nextSessionID.Add(1), clientID: newUUID(), token: newUUID(),
		out: newOutbox(b.cfg.OutboxBytesMax), subs: map[wire.QueueKey]*binding{}}
	b.sessMu.Lock()
	b.sessions[s.clientID] = s
	b.sessMu.Unlock()
	return s
}

// resume finds a dormant (or still attached) session for id, checking its
// token in constant time.
func (b *Broker) resume(id wire.ResumeIdentity) (*session, wire.ResumeOutcome) {
	if id.OwnerID != b.ownerID {
		return nil, wire.ResumeRejected // another broker, or this one before a restart
	}
	b.sessMu.Lock()
	s := b.sessions[id.ClientID]
	b.sessMu.Unlock()
	if s == nil {
		return nil, wire.ResumeNotFound
	}
	if subtle.ConstantTimeCompare(s.token[:], id.ResumeToken[:]) != 1 {
		return nil, wire.ResumeRejected
	}
	return s, wire.ResumeResumed
}

func isLoopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UDPAddr:
		return a.IP.IsLoopback()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// attach makes c the session's socket and starts its writer. A previous
// socket, if any, is closed, and what was queued for it is dropped (its
// replies answer requests the new socket never made). It fails for a session
// that has ended.
func (s *session) attach(c Conn) (uint64, bool) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return 0, false
	}
	old := s.conn
	s.conn = c
	s.attachGen++
	gen := s.attachGen
	s.loopback = isLoopback(c.RemoteAddr())
	if s.graceTimer != nil {
		s.graceTimer.Stop()
		s.graceTimer = nil
	}
	s.mu.Unlock()
	if old != nil {
		old.Close()
		s.out.reset()
	}
	// Each attachment has its own wake-up channel, so a previous writer can
	// neither take this socket's wake-ups nor its bytes.
	notify := s.out.attachWriter()
	s.out.hold()
	s.b.wg.Add(1)
	go s.writeLoop(c, gen, notify)
	return gen, true
}

func (s *session) current(gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attachGen == gen && !s.ended
}

// writeLoop writes the outbox to c until c is replaced or fails.
func (s *session) writeLoop(c Conn, gen uint64, notify <-chan struct{}) {
	defer s.b.wg.Done()
	var spare []byte
	for {
		if _, open := <-notify; !open || !s.current(gen) {
			return
		}
		buf, overflow := s.out.take(spare)
		if len(buf) > 0 {
			if _, err := c.Write(buf); err != nil {
				c.Close()
				return
			}
		}
		spare = buf
		if overflow {
			s.b.log.Warn("client does not read fast enough; disconnecting", "session", s.id)
			c.Close()
			return
		}
	}
}

// detach handles the socket going away: dormant for the grace, or the end.
func (s *session) detach(gen uint64) {
	s.mu.Lock()
	if s.attachGen != gen || s.ended {
		s.mu.Unlock()
		return // a resume already replaced this socket
	}
	s.conn = nil
	s.attachGen++ // stops the writer
	grace := s.b.cfg.ReconnectGraceMs
	keep := s.authed && grace > 0 && !s.b.closing.Load()
	if keep {
		s.graceTimer = time.AfterFunc(time.Duration(grace)*time.Millisecond, func() { s.graceExpired(gen + 1) })
	}
	s.mu.Unlock()
	s.out.reset()
	s.out.detachWriter()
	if keep {
		s.b.metrics.graceEntered.Add(1)
		return
	}
	s.end()
}

func (s *session) graceExpired(gen uint64) {
	s.mu.Lock()
	expired := s.attachGen == gen && s.conn == nil && !s.ended
	s.mu.Unlock()
	if expired {
		s.b.metrics.graceExpired.Add(1)
		s.end()
	}
}

// end unsubscribes everything and forgets the session.
func (s *session) end() {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	subs := make([]*binding, 0, len(s.subs))
	for _, bnd := range s.subs {
		subs = append(subs, bnd)
	}
	s.subs = map[wire.QueueKey]*binding{}
	conn := s.conn
	s.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	s.out.close()
	for _, bnd := range subs {
		bnd.r.submit(request{in: &core.Unsubscribe{SubID: bnd.subID}})
	}
	s.b.sessMu.Lock()
	delete(s.b.sessions, s.clientID)
	s.b.sessMu.Unlock()
}

// replyOn queues a reply for the attachment gen; it is dropped when that
// socket is gone (dormant, replaced by a resume, or ended).
func (s *session) replyOn(gen uint64, op wire.Opcode, requestID uint64, body wire.Body) {
	s.mu.Lock()
	current := s.attachGen == gen && s.conn != nil && !s.ended
	s.mu.Unlock()
	if !current {
		return
	}
	s.out.appendFrame(false, func(dst []byte) []byte { return wire.AppendBodyFrame(dst, op, requestID, body) })
}

// push queues an unsolicited frame with the next server request id.
func (s *session) push(op wire.Opcode, body wire.Body) {
	id := s.serverRequestID.Add(1)
	s.out.appendFrame(true, func(dst []byte) []byte { return wire.AppendBodyFrame(dst, op, id, body) })
}

func (s *session) goingAway(msg string) {
	s.out.appendFrame(true, func(dst []byte) []byte {
		return wire.AppendBodyFrame(dst, wire.OpGoingAway, 0, &wire.GoingAway{GraceMs: uint64(s.b.cfg.ReconnectGraceMs), Message: msg})
	})
}

// deliver encodes one DELIVER (runner goroutine).
func (s *session) deliver(bnd *binding, d *core.Delivery) {
	s.b.metrics.delivered.Add(1)
	if d.Retries > 0 {
		s.b.metrics.redelivered.Add(1)
	}
	body := d.Body
	msg := wire.Deliver{
		SubID: bnd.subID, Topic: bnd.key.Topic, Group: bnd.key.Group, Partition: bnd.key.Partition,
		Offset: d.Offset, DeliveryTag: d.Tag, PublishedMs: uint64(body.PublishedMs), PublishReceivedMs: uint64(body.ReceivedMs),
		ContentType: wire.ContentType{Kind: wire.ContentKind(body.ContentType.Kind), Custom: body.ContentType.Custom},
		Payload:     body.Payload,
	}
	if len(body.Headers) > 0 || d.Retries > 0 {
		msg.Headers = make(wire.Headers, 0, len(body.Headers)+1)
		for _, h := range body.Headers {
			msg.Headers = append(msg.Headers, wire.KeyValue{Key: h.Key, Value: h.Value})
		}
		if d.Retries > 0 {
			msg.Headers = append(msg.Headers, wire.KeyValue{Key: wire.HeaderRetries, Value: strconv.FormatUint(uint64(d.Retries), 10)})
		}
	}
	s.push(wire.OpDeliver, &msg)
}

// replyFromCore answers a publish or declare from the core's reply.
func (s *session) replyFromCore(pr pendingReply, rep *core.Reply) {
	if rep.Kind == core.ReplyError {
		if pr.kind == replyPublishUnconfirmed {
			// Nobody waits for an answer, and an unmatched ERROR is fatal to
			// the client's connection (PROTOCOL.md §6): count it instead.
			s.b.metrics.unconfirmedRefused.Add(1)
			return
		}
		s.replyOn(pr.gen, wire.OpError, pr.requestID, &wire.ErrorBody{Code: wire.ErrorCode(rep.Err.Code()), Message: rep.Err.Error()})
		return
	}
	if pr.kind == replyPublish && rep.Kind == core.ReplyPublished {
		s.replyOn(pr.gen, wire.OpPublishOk, pr.requestID, &wire.PublishOk{Offset: rep.Offset})
	}
}

func (s *session) subscribed(bnd *binding) {
	s.replyOn(bnd.gen, wire.OpSubscribeOk, bnd.requestID, &wire.SubscribeOk{SubID: bnd.subID, Topic: bnd.key.Topic,
		Partition: bnd.key.Partition, Group: bnd.key.Group, Prefetch: bnd.prefetch})
}

func (s *session) subscribeFailed(bnd *binding, err *core.Error) {
	s.mu.Lock()
	if s.subs[bnd.key] == bnd {
		delete(s.subs, bnd.key)
	}
	s.mu.Unlock()
	s.replyOn(bnd.gen, wire.OpSubscribeErr, bnd.requestID, &wire.ErrorBody{Code: wire.ErrorCode(err.Code()), Message: err.Error()})
}

// errConnDone ends a connection's read loop after a fatal protocol reply.
var errConnDone = errors.New("connection done")

// handshakeTimeout bounds the wait for HELLO: a peer that connects and stalls
// must not hold a goroutine and a socket forever.
const handshakeTimeout = 10 * time.Second

type readDeadliner interface{ SetReadDeadline(time.Time) error }

// serveConn runs one socket: the handshake, then the request loop.
func serveConn(b *Broker, c Conn) {
	b.metrics.connections.Add(1)
	r := bufio.NewReaderSize(c, 64<<10)
	var frameBuf []byte
	deadliner, canDeadline := c.(readDeadliner)
	if canDeadline {
		deadliner.SetReadDeadline(time.Now().Add(handshakeTimeout))
	}
	hdr, payload, err := wire.ReadFrame(r, b.cfg.FramePayloadBytesMax, frameBuf)
	if err != nil {
		writeDirect(c, wire.OpError, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: "malformed frame: " + err.Error()})
		c.Close()
		return
	}
	if canDeadline {
		deadliner.SetReadDeadline(time.Time{}) // from now on, heartbeats decide
	}
	s, gen, err := handshake(b, c, hdr, payload)
	if err != nil {
		c.Close()
		return
	}
	cr := connRef{session: s, gen: gen}
	stopWatch := s.watchLiveness(c, gen)
	defer stopWatch()
	gateTimer := time.AfterFunc(b.cfg.HeartbeatInterval, func() { s.releaseGate(gen) })
	defer gateTimer.Stop()
	gated := true
	for {
		hdr, payload, err = wire.ReadFrame(r, b.cfg.FramePayloadBytesMax, frameBuf)
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) {
				cr.replyError(wire.OpError, hdr.RequestID, wire.CodeInvalid,
					fmt.Sprintf("frame of %d bytes exceeds the broker's limit of %d bytes; the connection is closed", hdr.PayloadSizeBytes, b.cfg.FramePayloadBytesMax))
				s.flushAndClose(c)
			}
			break // EOF or a reset: either way the client may come back within the grace
		}
		frameBuf = payload[:0]
		s.lastRecvNs.Store(time.Now().UnixNano())
		if gated && hdr.Opcode != wire.OpAuth && hdr.Opcode != wire.OpPing && hdr.Opcode != wire.OpPong {
			if hdr.Opcode == wire.OpReconcileClient {
				err = cr.handle(hdr, payload)
				s.releaseGate(gen)
			} else {
				s.releaseGate(gen)
				err = cr.handle(hdr, payload)
			}
			gated = false
		} else {
			err = cr.handle(hdr, payload)
		}
		if err != nil {
			s.flushAndClose(c)
			break
		}
	}
	c.Close()
	s.detach(gen)
}

// releaseGate lets held pushes out, if gen is still the attached socket.
func (s *session) releaseGate(gen uint64) {
	if s.current(gen) {
		s.out.release()
	}
}

// flushAndClose gives the writer a moment to send a final error frame.
func (s *session) flushAndClose(c Conn) {
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		s.out.mu.Lock()
		pending := len(s.out.buf)
		s.out.mu.Unlock()
		if pending == 0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	c.Close()
}

// writeDirect writes one frame on a socket that has no session yet.
func writeDirect(c Conn, op wire.Opcode, requestID uint64, body wire.Body) {
	_, _ = c.Write(wire.AppendBodyFrame(nil, op, requestID, body))
}

// handshake answers the first frame (PROTOCOL.md §3.2) and returns the
// attached session.
func handshake(b *Broker, c Conn, hdr wire.Header, payload []byte) (*session, uint64, error) {
	if hdr.Opcode != wire.OpHello {
		writeDirect(c, wire.OpError, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeInvalid,
			Message: "expected HELLO as the first frame: this port speaks the Fibril wire protocol (default 9876; the admin HTTP API is on 8081)"})
		return nil, 0, errConnDone
	}
	hello, err := wire.DecodeHello(payload)
	if err != nil {
		writeDirect(c, wire.OpError, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: "malformed HELLO: " + err.Error()})
		return nil, 0, errConnDone
	}
	if hello.ProtocolVersion != wire.ProtocolVersion {
		writeDirect(c, wire.OpHelloErr, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeUnsupportedVersion,
			Message: fmt.Sprintf("unsupported protocol version %d: this broker speaks version 1", hello.ProtocolVersion)})
		return nil, 0, errConnDone
	}
	outcome := wire.ResumeNew
	var s *session
	var gen uint64
	if hello.Resume.Present {
		var resumed *session
		resumed, outcome = b.resume(hello.Resume.Value)
		if resumed != nil {
			// The session may have ended (grace expired) since the lookup.
			if g, ok := resumed.attach(c); ok {
				s, gen = resumed, g
				b.metrics.resumed.Add(1)
			} else {
				outcome = wire.ResumeNotFound
			}
		}
	}
	if s == nil {
		s = b.newSession()
		gen, _ = s.attach(c)
	}
	// HELLO_OK goes out before the writer has anything to write (pushes are
	// held, and no request has been read), so nothing can precede it.
	writeDirect(c, wire.OpHelloOk, hdr.RequestID, &wire.HelloOk{ProtocolVersion: wire.ProtocolVersion, OwnerID: b.ownerID,
		ClientID: s.clientID, ResumeToken: s.token, ResumeOutcome: outcome, ServerName: b.cfg.ServerName, Compliance: wire.ComplianceMarker})
	return s, gen, nil
}

// watchLiveness pings every heartbeat interval and cuts a socket silent for
// three intervals (PROTOCOL.md §1.5).
func (s *session) watchLiveness(c Conn, gen uint64) (stop func()) {
	interval := s.b.cfg.HeartbeatInterval
	s.lastRecvNs.Store(time.Now().UnixNano())
	done := make(chan struct{})
	ticker := time.NewTicker(interval)
	go func() {
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				if !s.current(gen) {
					return
				}
				if time.Since(time.Unix(0, s.lastRecvNs.Load())) > 3*interval {
					s.b.log.Info("closing a silent connection", "session", s.id)
					c.Close()
					return
				}
				s.push(wire.OpPing, &wire.Ping{})
			}
		}
	}()
	return func() { close(done) }
}
