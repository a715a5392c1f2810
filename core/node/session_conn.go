package node

// The session's transport: attach and resume, the handshake gate, the
// outbox bound, keepalive and timeouts, dormancy and the end. Invariants:
//   - frames go out only to the attached connection, and only before the
//     session closed it: closing detaches at once (the driver's ConnClosed
//     for it is then stale and ignored);
//   - connection ids only grow: a frame, close or Attach for a connection
//     at or below newestConn that is neither attached nor the early one is
//     stale and ignored (an Attach of one is closed unanswered);
//   - pushes wait in gated until the gate opens; replies never wait;
//   - an attachment's queued bytes are forgotten with it (the driver drops
//     a closed connection's outbox);
//   - every timer is armed only in the state it serves (see nextWakeMs) and
//     handled in onTick, once per firing.

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// earlyConn holds frames (and a close) that reached the session before the
// Attach naming their connection. The Node binds a connection and sends
// Attach in one Ready, but the driver delivers frames and envelopes on
// different paths (the simulator delays envelopes on purpose), so a
// client's AUTH can overtake its own HELLO_OK's Attach. Only one such
// connection is remembered, the newest the session heard of: a newer one
// replaces it, and reports about older ones are stale (Session.newestConn),
// so a stale close can never take the slot a newer connection needs.
type earlyConn struct {
	conn   ConnID
	frames []heldFrame
	bytes  int
	closed bool
}

// heldFrame is a copy of a frame kept past its Step (Frame.Payload is only
// valid during the Step that carries it).
type heldFrame struct {
	header  wire.Header
	payload []byte
	err     error
}

// copyFrame keeps a frame past its Step: the payload is copied, since the
// driver reuses its read buffer for the next frame.
func copyFrame(in *Frame) heldFrame {
	return heldFrame{header: in.Header, payload: append([]byte(nil), in.Payload...), err: in.Err}
}

// onAttach gives the session the new connection: HELLO_OK first, then
// whatever the resumed session held.
func (s *Session) onAttach(now int64, m *Attach) {
	sessionAssert(m.Conn != 0, "attach without a connection")
	sessionAssert(m.Conn != s.conn, "a connection attached twice")
	sessionAssert(!s.ended, "an ended session refuses attaches before this")
	if s.early.conn == m.Conn && s.early.closed {
		s.attachClosed()
		return
	}
	if m.Conn <= s.newestConn && m.Conn != s.early.conn {
		s.attachStale(m.Conn)
		return
	}
	s.newestConn = m.Conn
	if s.conn != 0 {
		// A resume replaces the socket: the old one is closed, and its
		// queued replies answer requests the new one never made.
		s.closeConn()
	}
	// A new attachment: replies still owed to the old one are dropped from
	// now on (the new connection numbers its requests afresh, so they
	// could pass for its own).
	s.conn, s.loopback = m.Conn, m.Loopback
	s.gen++
	s.dormant, s.graceTimerMs = false, 0
	s.gateOpen, s.gateTimerMs = false, now+s.cfg.HeartbeatIntervalMs
	s.pingTimerMs, s.lastRecvMs = now+s.cfg.HeartbeatIntervalMs, now
	s.authTimerMs = 0
	if !s.authed {
		s.authTimerMs = now + s.cfg.AuthTimeoutMs
	}
	// The server request-id counter is per connection (PROTOCOL 7.1).
	s.serverReqID = 0
	s.reply(wire.OpHelloOk, m.HelloRequestID, &wire.HelloOk{
		ProtocolVersion: wire.ProtocolVersion, OwnerID: s.init.OwnerID, ClientID: s.init.ClientID,
		ResumeToken: s.init.Token, ResumeOutcome: m.Outcome, ServerName: s.cfg.ServerName,
		Compliance: wire.ComplianceMarker,
	})
	s.rd.Counted.HelloOks[m.Outcome]++
	// Streams are not reconciled (PROTOCOL 7.5, 7.8): a resumed client
	// subscribes again and relies on its durable cursor.
	s.endStreamSubs()
	// A new connection starts its own stream of ASSIGNMENT_CHANGED with the
	// whole current assignment (PROTOCOL 5.16); held behind the gate.
	s.retellAssignments()
	// Subscriptions stay paused until the gate opens (openGate): what
	// arrives before could not be sent, and an auto-ack subscription would
	// only pile up held deliveries; HELLO_OK (and the reconcile) go first.
	s.replayEarly(now, m.Conn)
}

// attachClosed handles an Attach whose connection the driver already
// reported closed (the report overtook the envelope): nothing may be sent
// on it. A fresh session has nobody to wait for and ends; a dormant one
// keeps its grace; an attached one keeps the connection it has.
func (s *Session) attachClosed() {
	s.early = earlyConn{}
	if s.conn == 0 && !s.dormant {
		s.end()
	}
}

// attachStale handles an Attach for a connection older than one the
// session already heard of (two resumes with one identity; the newer won
// the race): it is closed unanswered, and the session keeps its state.
func (s *Session) attachStale(conn ConnID) {
	sessionAssert(conn != s.conn, "the attached connection is never stale")
	sessionAssert(s.newestConn > 0, "a stale connection needs a newer one")
	s.flushSegment()
	s.rd.Close = append(s.rd.Close, conn)
	if s.conn == 0 && !s.dormant && s.early.conn == 0 {
		// Never attached, and no newer Attach on its way: nobody waits
		// for this session.
		s.end()
	}
}

// replayEarly handles frames that arrived for conn before its Attach.
func (s *Session) replayEarly(now int64, conn ConnID) {
	early := s.early
	s.early = earlyConn{}
	if early.conn != conn {
		return
	}
	for i := range early.frames {
		f := &early.frames[i]
		if s.conn != conn {
			return // a frame closed the connection
		}
		s.onFrame(&Frame{NowMs: now, Conn: conn, Header: f.header, Payload: f.payload, Err: f.err})
	}
	if early.closed && s.conn == conn {
		s.transportLost(now)
	}
}

// keepEarly keeps a frame for a connection not attached yet.
func (s *Session) keepEarly(in *Frame) {
	if in.Conn <= s.newestConn && in.Conn != s.early.conn {
		return // stale: a connection the session closed, replaced or passed over
	}
	if in.Conn > s.newestConn {
		s.newestConn = in.Conn
		s.early = earlyConn{conn: in.Conn}
	}
	e := &s.early
	if e.closed || len(e.frames) >= earlyFramesMax || e.bytes+len(in.Payload) > earlyBytesMax {
		return // bounded: the Attach that follows closes on the auth timeout at worst
	}
	e.frames = append(e.frames, copyFrame(in))
	e.bytes += len(in.Payload)
}

// onConnClosed: the driver says a connection is gone.
func (s *Session) onConnClosed(now int64, conn ConnID) {
	if s.ended {
		return
	}
	if conn != s.conn || conn == 0 {
		// Not the attached connection: one whose Attach is still on its
		// way (newer than any seen, or the early one: remember the close,
		// so that the Attach sends nothing on it), or one the session
		// closed or replaced itself (a stale report, ignored: it must not
		// take the early slot from a newer connection).
		switch {
		case conn > s.newestConn:
			s.newestConn = conn
			s.early = earlyConn{conn: conn, closed: true}
		case conn == s.early.conn && conn != 0:
			s.early.closed = true
		}
		return
	}
	s.forgetConn()
	s.afterTransportLoss(now)
}

// transportLost closes the attached connection and goes dormant or ends.
func (s *Session) transportLost(now int64) {
	if s.conn == 0 {
		return
	}
	s.closeConn()
	s.afterTransportLoss(now)
}

// afterTransportLoss: authenticated sessions wait for a resume within the
// grace (PROTOCOL 7.7), pausing their subscriptions so that no new
// delivery is handed to a session nobody reads; the rest end.
func (s *Session) afterTransportLoss(now int64) {
	sessionAssert(s.conn == 0, "transport loss with a connection attached")
	sessionAssert(!s.ended && !s.dormant, "a transport lost twice")
	// An unauthenticated session has nothing a client could resume into,
	// and a draining broker holds sessions only for the drain's grace: it
	// accepts reconnects that long (PROTOCOL 5.23), not past it.
	grace := s.graceMs()
	if !s.authed || grace <= 0 || (s.draining && now >= s.drainDeadlineMs) {
		s.end()
		return
	}
	s.dormant, s.graceTimerMs = true, now+grace
	s.rd.Counted.GraceEntered++
	s.pauseSubscriptions(true)
}

// closeConn asks the driver to close the attached connection after what
// was queued, and forgets it.
func (s *Session) closeConn() {
	sessionAssert(s.conn != 0, "closing no connection")
	s.flushSegment()
	s.rd.Close = append(s.rd.Close, s.conn)
	s.forgetConn()
}

// forgetConn drops everything that belonged to the attachment: the driver
// drops a closed connection's outbox, so the session's count of its bytes
// and its held pushes (PINGs, a GOING_AWAY) go too, and so do the confirm
// order and the subscriptions it was never told about. Held deliveries of
// announced subscriptions stay: they belong to the session and go to the
// next attachment.
func (s *Session) forgetConn() {
	s.conn = 0
	s.gated = s.gated[:0]
	s.unwrittenBytes = 0
	s.gateOpen, s.reconciling = false, 0
	s.gateTimerMs, s.authTimerMs, s.pingTimerMs, s.lastRecvMs = 0, 0, 0, 0
	s.auth = authWait{}
	s.dropConfirms()
	s.dropUnannounced()
	// Stream records held for this attachment are not credited: the
	// subscription ends at the resume, the client resubscribes.
	for _, sub := range s.streamSubsByID {
		sub.held = nil
	}
	s.dropUnannouncedStreams()
}

// end unsubscribes everything (the partitions requeue at once) and tells
// the Node, as the session's last envelope.
func (s *Session) end() {
	sessionAssert(!s.ended, "a session ends once")
	if s.conn != 0 {
		s.closeConn()
	}
	for _, key := range sortedSubKeys(s.subs) {
		sub := s.subs[key]
		s.dropSub(sub)
		// A Subscribe that left (answered or not) is followed by its
		// Unsubscribe (FIFO per pair); one still queued behind an Open is
		// never sent at all.
		if o := s.opens[key]; o != nil && o.opened && sub.subscribeSent {
			s.out(PartitionAddr(key), &Request{Input: &core.Unsubscribe{SubID: sub.id}})
		}
	}
	s.endStreamsAtEnd()
	// Requests queued behind a pending Open die with the session: their
	// Opened reaches an ended session, which ignores it.
	sessionAssert(len(s.subs) == 0 && s.heldBytes == 0 && len(s.streamSubs) == 0, "the end left subscriptions or held deliveries")
	for _, q := range sortedOpenKeys(s.opens) {
		s.forgetOpen(q) // after the Unsubscribes: FIFO per partition
	}
	s.dormant, s.graceTimerMs = false, 0
	s.early = earlyConn{}
	s.ended = true
	s.out(NodeAddr(), &SessionEnded{})
}

// onShuttingDown: the broker drains. GOING_AWAY is a push (request id 0,
// PROTOCOL 5.23). For its grace the session still goes dormant when its
// transport is lost (the broker accepts the reconnect); after it, a lost
// transport ends the session. A later notice never lengthens the grace.
func (s *Session) onShuttingDown(m *ShuttingDown) {
	deadlineMs := s.nowMs + max(m.GraceMs, 0)
	if s.draining {
		deadlineMs = min(deadlineMs, s.drainDeadlineMs)
	}
	s.draining, s.drainDeadlineMs = true, deadlineMs
	sessionAssert(s.drainDeadlineMs <= s.nowMs+max(m.GraceMs, 0), "a drain notice lengthened the grace")
	if s.conn != 0 {
		s.push(wire.OpGoingAway, 0, &wire.GoingAway{GraceMs: uint64(max(s.drainDeadlineMs-s.nowMs, 0)), Message: m.Message})
	}
}

// ---- timers

// onTick handles every timer that fired, in a fixed order: the gate opens
// before a PING is due, so the PING goes out.
func (s *Session) onTick(now int64) {
	if s.ended {
		return
	}
	// graceTimer: the client did not come back in time; its deliveries
	// requeue now (the end unsubscribes).
	if s.dormant && now >= s.graceTimerMs {
		s.rd.Counted.GraceExpired++
		s.end()
		return
	}
	if s.conn == 0 {
		return
	}
	if !s.gateOpen && now >= s.gateTimerMs {
		s.reconciling = 0 // one heartbeat interval is the longest a gate holds
		s.openGate()
	}
	if !s.authed && s.authTimerMs != 0 && now >= s.authTimerMs {
		s.transportLost(now) // a peer that never authenticates
		return
	}
	// pingTimer: the keepalive, and the liveness check on the same tick
	// (PROTOCOL 1.5: the cut falls between 3 and 4 intervals of silence).
	if now >= s.pingTimerMs {
		if now-s.lastRecvMs > silentIntervalsMax*s.cfg.HeartbeatIntervalMs {
			s.transportLost(now) // nothing arrived for 3 intervals
			return
		}
		s.pingTimerMs = now + s.cfg.HeartbeatIntervalMs
		s.push(wire.OpPing, s.nextServerReqID(), &wire.Ping{})
	}
}

// nextWakeMs is the earliest armed timer (0 = none). Each timer is armed
// only in the state it serves, so a stale deadline never wakes the machine.
func (s *Session) nextWakeMs() int64 {
	var wake int64
	arm := func(atMs int64) {
		if atMs != 0 && (wake == 0 || atMs < wake) {
			wake = atMs
		}
	}
	if s.dormant {
		arm(s.graceTimerMs)
	}
	if s.conn != 0 {
		if !s.gateOpen {
			arm(s.gateTimerMs)
		}
		if !s.authed {
			arm(s.authTimerMs)
		}
		arm(s.pingTimerMs)
	}
	return wake
}

// ---- sending

// reply sends a frame answering the current attachment's request now.
func (s *Session) reply(op wire.Opcode, requestID uint64, body wire.Body) {
	if s.conn == 0 {
		return
	}
	s.emit(s.conn, op, requestID, body)
}

// replyOn sends a reply if gen is still the attached connection.
func (s *Session) replyOn(gen uint64, op wire.Opcode, requestID uint64, body wire.Body) {
	if gen != s.gen || s.conn == 0 {
		return // the asking connection is gone; nobody waits for this
	}
	s.emit(s.conn, op, requestID, body)
}

// replyError sends an error body (FER1, PROTOCOL 5.21) on the frame kind
// the request expects, if its attachment is still the current one.
func (s *Session) replyError(gen uint64, op wire.Opcode, requestID uint64, code wire.ErrorCode, msg string) {
	s.replyOn(gen, op, requestID, &wire.ErrorBody{Code: code, Message: msg})
}

// push sends an unsolicited frame, held while the gate is closed: clients
// read exactly one frame after each handshake request and fail on any
// other opcode (PROTOCOL 3.1). Held pushes count against the outbox bound.
func (s *Session) push(op wire.Opcode, requestID uint64, body wire.Body) {
	if s.conn == 0 {
		return
	}
	if s.gateOpen {
		s.emit(s.conn, op, requestID, body)
		return
	}
	s.gated = wire.AppendBodyFrame(s.gated, op, requestID, body)
	s.checkOutbox()
}

// nextServerReqID draws from the connection's own request-id space; clients
// dispatch pushes by opcode, so these ids may collide with theirs.
func (s *Session) nextServerReqID() uint64 {
	s.serverReqID++
	return s.serverReqID
}

// emit encodes one frame into the step's buffer for conn. The buffer is
// reused across steps (the Ready is valid until the next Step), so the
// deliver and confirm paths allocate nothing per frame; consecutive frames
// for one connection form one Send (one write for many frames). A frame
// that does not fit the outbox bound is taken back out and the connection
// is cut; emit reports whether the frame went out (a delivery that did not
// stays held for the next attachment).
func (s *Session) emit(conn ConnID, op wire.Opcode, requestID uint64, body wire.Body) bool {
	sessionAssert(conn == s.conn && conn != 0, "a frame for a connection that is not attached")
	if s.sendConn != conn {
		s.flushSegment()
		s.sendConn, s.sendStart = conn, len(s.buf)
	}
	before := len(s.buf)
	s.buf = wire.AppendBodyFrame(s.buf, op, requestID, body)
	if s.unwrittenBytes+len(s.gated)+len(s.buf)-before > s.cfg.OutboxBytesMax {
		// Only this frame goes: the ones before it fit, and what they
		// carry (deliveries already off held) must still reach the socket
		// the driver flushes before closing it.
		s.buf = s.buf[:before]
		s.cutSlowConn()
		return false
	}
	s.unwrittenBytes += len(s.buf) - before
	sessionAssert(s.unwrittenBytes+len(s.gated) <= s.cfg.OutboxBytesMax, "the outbox outgrew its bound")
	return true
}

// emitRaw appends already encoded frames (released pushes).
func (s *Session) emitRaw(frames []byte) {
	sessionAssert(s.conn != 0, "raw frames with no connection")
	sessionAssert(s.gateOpen, "held pushes released behind a closed gate")
	if s.sendConn != s.conn {
		s.flushSegment()
		s.sendConn, s.sendStart = s.conn, len(s.buf)
	}
	s.buf = append(s.buf, frames...)
	s.unwrittenBytes += len(frames)
}

// flushSegment turns the bytes emitted since the last flush into a Send.
// The full slice expression caps it, so a later append to the buffer can
// never write into bytes the driver holds.
func (s *Session) flushSegment() {
	if s.sendConn != 0 && len(s.buf) > s.sendStart {
		s.rd.Sends = append(s.rd.Sends, Send{Conn: s.sendConn, Bytes: s.buf[s.sendStart:len(s.buf):len(s.buf)]})
	}
	s.sendConn, s.sendStart = 0, len(s.buf)
}

// checkOutbox cuts a connection whose reader is too slow: what is queued
// and unwritten (plus held pushes) must stay within OutboxBytesMax.
func (s *Session) checkOutbox() {
	if s.unwrittenBytes+len(s.gated) <= s.cfg.OutboxBytesMax {
		return
	}
	s.cutSlowConn() // the held pushes go with the attachment
}

// cutSlowConn closes the attached connection for a reader too slow for
// the outbox bound. Frames already in the step's buffer stay: each fit,
// and the driver flushes them before it closes the connection.
func (s *Session) cutSlowConn() {
	sessionAssert(s.conn != 0, "cutting no connection")
	s.closeConn()
	s.afterTransportLoss(s.nowMs)
}

// onWritten gives back outbox room for bytes the socket accepted.
func (s *Session) onWritten(conn ConnID, bytes int) {
	if conn != s.conn || s.conn == 0 {
		return // a closed connection's count no longer matters
	}
	sessionAssert(bytes >= 0, "negative bytes written")
	s.unwrittenBytes -= bytes
	sessionAssert(s.unwrittenBytes >= 0, "more bytes written than the session sent")
	s.creditStreams() // the outbox drained: owed stream credit may go
}

// openGate releases held pushes after the replies sent so far, then the
// deliveries held while dormant or gated. A reconcile waiting for its
// restores keeps the gate shut: its result must be the next frame.
func (s *Session) openGate() {
	if s.gateOpen || s.conn == 0 || s.reconciling > 0 {
		return
	}
	s.gateOpen, s.gateTimerMs = true, 0
	if len(s.gated) > 0 {
		s.emitRaw(s.gated)
		s.gated = s.gated[:0]
	}
	// Deliveries may flow again (paused since the transport was lost).
	s.resumeSubscriptions()
	s.flushHeld()
	s.flushStreams()
}
