package node

// Client frames: dispatch by opcode, the auth rules of PROTOCOL 3.3, and
// the frames that wait while a password check runs. Invariants:
//   - frames of one connection are handled one at a time in arrival order,
//     including those that waited behind a password check;
//   - before the session is authenticated only AUTH, PING and PONG are
//     served; anything else gets ERROR 401 and the connection is closed;
//   - a malformed body never closes the connection (ERROR 400), a broken
//     stream always does.

import (
	"crypto/subtle"
	"errors"
	"fmt"

	"github.com/fibril-go/fibril/transport/wire"
)

// The built-in login (SPEC 10): loopback only, while no user of that name
// exists, and only when the config allows it.
const (
	// Loopback only: a well-known password is harmless on a developer's own
	// machine and an open door on any network interface.
	builtinUser     = "fibril"
	builtinPassword = "fibril"
)

// Guide messages (PROTOCOL 6.3): each names the likely fix.
const (
	msgAuthRequired = "authentication required: send AUTH with a user name and password first (the built-in fibril/fibril works from loopback)"
	msgAuthDenied   = "authentication failed: wrong user name or password"
	msgAuthRemote   = "authentication failed: the built-in fibril/fibril login works from loopback only; " +
		"add a user with 'fibril serve --user NAME:PASSWORD' and connect with it"
)

// authWait is a password check in flight and the frames waiting for it.
// The check (argon2id) runs off the machine's step, as a driver job; the
// frames behind it wait so that they are served in arrival order and with
// the auth state the AUTH decides (PROTOCOL 7.2: one at a time, in order).
type authWait struct {
	pending   bool
	token     uint64
	gen       uint64
	requestID uint64
	username  string
	password  string
	frames    []heldFrame
	bytes     int
}

// onFrame takes one frame read from a connection.
func (s *Session) onFrame(in *Frame) {
	if s.ended {
		return
	}
	if in.Conn != s.conn || s.conn == 0 {
		// Not the attached connection: a stale one (the session closed or
		// replaced it; the driver had read ahead), or one whose Attach is
		// still on its way. Nothing is ever answered on a stale one.
		s.keepEarly(in)
		return
	}
	s.lastRecvMs = in.NowMs // liveness counts any frame (PROTOCOL 1.5)
	if s.auth.pending {
		// Queued, not served: serving a request before the AUTH is decided would
		// run it under the old (unauthenticated) state and break arrival order.
		s.waitForAuth(in)
		return
	}
	s.handleFrame(in.NowMs, in.Header, in.Payload, in.Err)
}

// waitForAuth queues a frame behind the password check, bounded: an
// unauthenticated peer must not make the broker buffer without limit.
func (s *Session) waitForAuth(in *Frame) {
	a := &s.auth
	if len(a.frames) >= authWaitingFramesMax || a.bytes+len(in.Payload) > authWaitingBytesMax {
		s.transportLost(in.NowMs) // a peer flooding an unauthenticated connection
		return
	}
	// Copied: the driver's read buffer behind in.Payload is reused after this
	// step, and the frame may wait several steps for the password check.
	a.frames = append(a.frames, copyFrame(in))
	a.bytes += len(in.Payload)
}

// handleFrame serves one frame of the attached connection.
func (s *Session) handleFrame(now int64, hdr wire.Header, payload []byte, err error) {
	sessionAssert(s.conn != 0, "a frame served with no connection")
	sessionAssert(!s.auth.pending, "a frame served while the password check runs")
	if err != nil {
		s.onBrokenStream(now, hdr, err)
		return
	}
	switch hdr.Opcode {
	case wire.OpPing:
		// Answered at once, echoing its id, authenticated or not (1.5).
		s.reply(wire.OpPong, hdr.RequestID, &wire.Pong{})
		return
	case wire.OpPong, wire.OpTopologyUpdateAck:
		// Liveness was counted on arrival; neither needs an answer, and a
		// standalone broker never pushes topology to be acked.
		return
	case wire.OpAuth:
		s.handleAuth(hdr, payload)
		return
	}
	// PROTOCOL 3.3: before auth only AUTH, PING and PONG are served; the
	// 401 goes out, then the connection closes (and, unauthenticated, the
	// session ends: there is nothing to resume into).
	if !s.authed {
		s.reply(wire.OpError, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeUnauthorized, Message: msgAuthRequired})
		s.transportLost(now)
		return
	}
	// A request may end the attachment (the outbox bound); the gate is
	// opened only for the attachment that asked.
	gen := s.gen
	answeredNow := s.handleRequest(now, hdr, payload)
	// The handshake gate opens once a request other than AUTH has been
	// answered (PROTOCOL 3.1); a reconcile opens it with its result.
	if answeredNow && s.conn != 0 && s.gen == gen {
		s.openGate()
	}
}

// onBrokenStream: the frame could not be read whole. A frame over the cap
// leaves the stream just after its header, which cannot be resynchronised
// (PROTOCOL 1.3): the 400 names the limit, then the connection closes. A
// malformed header gets no reply: its request id cannot be trusted.
func (s *Session) onBrokenStream(now int64, hdr wire.Header, err error) {
	// Only an oversize frame gets an answer: its header decoded, so its request
	// id is trustworthy and the client learns the limit instead of a bare close.
	if errors.Is(err, wire.ErrFrameTooLarge) {
		s.reply(wire.OpError, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeInvalid,
			Message: fmt.Sprintf("frame of %d bytes exceeds the broker's limit of %d bytes; the connection is closed",
				hdr.PayloadSizeBytes, s.cfg.FramePayloadBytesMax)})
	}
	s.transportLost(now)
}

// handleRequest serves an authenticated request; it reports false only
// when the answer is deferred past the gate (a reconcile with restores).
// Each opcode decodes into its own concrete type: no boxing on the publish
// and settle paths. A body that does not decode gets ERROR 400 and the
// connection stays open (PROTOCOL 6.1).
func (s *Session) handleRequest(now int64, hdr wire.Header, payload []byte) bool {
	var err error
	id := hdr.RequestID
	switch hdr.Opcode {
	case wire.OpPublish:
		// Decoded into the session's own struct, so a producer's topic
		// string is kept across frames rather than allocated per publish.
		m := &s.publishIn
		if err = wire.DecodePublishInto(payload, m); err == nil {
			s.handlePublish(now, id, &publishArgs{topic: m.Topic, group: m.Group, partition: m.Partition, confirm: m.RequireConfirm,
				contentType: m.ContentType, headers: m.Headers, publishedMs: m.PublishedMs, payload: m.Payload, ttl: m.TTLMs})
		}
		// Keep only the names: the body belongs to the request now.
		m.Payload, m.Headers, m.PartitionKey, m.ContentType = nil, nil, wire.Optional[[]byte]{}, wire.ContentType{}
	case wire.OpPublishDelayed:
		var m wire.PublishDelayed
		if m, err = wire.DecodePublishDelayed(payload); err == nil {
			s.handlePublish(now, id, &publishArgs{topic: m.Topic, group: m.Group, partition: m.Partition, confirm: m.RequireConfirm,
				contentType: m.ContentType, headers: m.Headers, publishedMs: m.PublishedMs, payload: m.Payload,
				notBeforeMs: m.NotBeforeMs, delayed: true})
		}
	case wire.OpSubscribe:
		var m wire.Subscribe
		if m, err = wire.DecodeSubscribe(payload); err == nil {
			s.handleSubscribe(id, &m)
		}
	case wire.OpAck:
		m := &s.ackIn // reused, as publishIn
		if err = wire.DecodeAckInto(payload, m); err == nil {
			s.handleAck(m)
		}
		m.Tags = nil // the request owns them now
	case wire.OpNack:
		var m wire.Nack
		if m, err = wire.DecodeNack(payload); err == nil {
			s.handleNack(id, &m)
		}
	case wire.OpDeclareQueue:
		var m wire.DeclareQueue
		if m, err = wire.DecodeDeclareQueue(payload); err == nil {
			s.handleDeclare(id, &m)
		}
	case wire.OpTopology:
		if _, err = wire.DecodeTopology(payload); err == nil {
			// Standalone: generation 0 and both lists empty (PROTOCOL 5.20);
			// clients then route everything to this connection.
			s.reply(wire.OpTopologyOk, id, &wire.TopologyOk{})
		}
	case wire.OpReconcileClient:
		var m wire.ReconcileClient
		if m, err = wire.DecodeReconcileClient(payload); err == nil {
			return s.handleReconcile(id, &m)
		}
	case wire.OpDeclarePlexus:
		var m wire.DeclarePlexus
		if m, err = wire.DecodeDeclarePlexus(payload); err == nil {
			s.handleDeclarePlexus(id, &m)
		}
	case wire.OpSubscribeStream:
		var m wire.SubscribeStream
		if m, err = wire.DecodeSubscribeStream(payload); err == nil {
			s.handleSubscribeStream(id, &m)
		}
	default:
		// A second HELLO is an unknown opcode too (PROTOCOL 3.2).
		s.reply(wire.OpError, id, &wire.ErrorBody{Code: wire.CodeInvalid,
			Message: fmt.Sprintf("unknown opcode %d: not a client request this broker serves", uint16(hdr.Opcode))})
		return true
	}
	if err != nil {
		s.reply(wire.OpError, id, &wire.ErrorBody{Code: wire.CodeInvalid, Message: "malformed frame: " + err.Error()})
	}
	return true
}

// handleAuth starts a password check (PROTOCOL 3.3).
func (s *Session) handleAuth(hdr wire.Header, payload []byte) {
	auth, err := wire.DecodeAuth(payload)
	if err != nil {
		s.reply(wire.OpError, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeInvalid, Message: "malformed AUTH: " + err.Error()})
		return
	}
	// "Already authenticated" is per attachment: a resumed session's client
	// sends AUTH again on its new connection and must get AUTH_OK.
	if s.authed && s.authGen == s.gen {
		s.reply(wire.OpAuthErr, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeUnauthorized, Message: "already authenticated"})
		return
	}
	// A resumed session is authenticated already, but its client sends
	// AUTH on every connect: the check runs again and answers AUTH_OK.
	// Everything the connection sends from now on waits for the answer.
	sessionAssert(!s.auth.pending, "a second password check while one runs")
	// A fresh token per check: the answer of an earlier check (from an
	// attachment that is gone) must not decide this one.
	token := s.newToken()
	s.auth = authWait{pending: true, token: token, gen: s.gen, requestID: hdr.RequestID,
		username: auth.Username, password: auth.Password}
	s.rd.CheckPassword = append(s.rd.CheckPassword, PasswordCheck{Token: token, Username: auth.Username, Password: auth.Password})
}

// onAuthChecked answers the AUTH, then serves the frames that waited.
func (s *Session) onAuthChecked(now int64, in *AuthChecked) {
	// The connection that asked may be gone (closed, replaced by a resume,
	// cut by the auth timeout): its answer no longer matters.
	if s.ended || !s.auth.pending || in.Token != s.auth.token {
		return
	}
	sessionAssert(s.auth.gen == s.gen && s.conn != 0, "a password check outlived its attachment")
	wait := s.auth
	s.auth = authWait{}
	ok, msg := s.authVerdict(in, wait.username, wait.password)
	// Bad credentials: AUTH_ERR 401, then close (PROTOCOL 3.3). The frames
	// that waited are never served.
	if !ok {
		s.reply(wire.OpAuthErr, wait.requestID, &wire.ErrorBody{Code: wire.CodeUnauthorized, Message: msg})
		s.transportLost(now)
		return
	}
	// Authenticated for the session (it survives a resume) and on this
	// attachment; the auth timeout is disarmed.
	s.authed, s.authGen, s.authTimerMs = true, s.gen, 0
	s.reply(wire.OpAuthOk, wait.requestID, &wire.AuthOk{})
	s.serveWaiting(now, wait.frames)
}

// authVerdict decides a login from the user store's answer. The built-in
// fibril/fibril works only while no real user of that name exists, only
// from loopback, and only when configured; the remote refusal says why, so
// a new user knows to add a user. The comparison is constant-time, like
// the store's own (no timing hint about the built-in password).
func (s *Session) authVerdict(in *AuthChecked, username, password string) (bool, string) {
	if in.Match {
		sessionAssert(in.Known, "a password matched an unknown user")
		return true, ""
	}
	// A real user named "fibril" shadows the built-in: once an operator sets
	// a password, the default one must stop working.
	if in.Known || username != builtinUser || !s.cfg.AllowDefaultLoopback {
		return false, msgAuthDenied
	}
	if subtle.ConstantTimeCompare([]byte(password), []byte(builtinPassword)) != 1 {
		return false, msgAuthDenied
	}
	// Checked after the password so that a wrong password from afar gets the
	// plain denial: the remote hint is only for someone who knows the default.
	if !s.loopback {
		return false, msgAuthRemote
	}
	return true, ""
}

// serveWaiting serves frames that waited, in order; if one of them starts
// another password check, the rest wait again behind it.
func (s *Session) serveWaiting(now int64, frames []heldFrame) {
	sessionAssert(len(frames) <= authWaitingFramesMax, "more frames waited than the bound allows")
	conn := s.conn
	for i := range frames {
		// A served frame may have cut the connection (outbox bound, a 401): the
		// rest belonged to it and must not be served on another.
		if s.conn != conn || s.conn == 0 {
			return
		}
		if s.auth.pending {
			s.auth.frames = append(s.auth.frames, frames[i:]...)
			for j := i; j < len(frames); j++ {
				s.auth.bytes += len(frames[j].payload)
			}
			return
		}
		f := &frames[i]
		s.handleFrame(now, f.header, f.payload, f.err)
	}
}
