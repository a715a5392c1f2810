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
	builtinUser     = "fibril"
	builtinPassword = "fibril"
)

const (
	msgAuthRequired = "authentication required: send AUTH with a user name and password first (the built-in fibril/fibril works from loopback)"
	msgAuthDenied   = "authentication failed: wrong user name or password"
	msgAuthRemote   = "authentication failed: the built-in fibril/fibril login works from loopback only; " +
		"add a user with 'fibril serve --user NAME:PASSWORD' and connect with it"
	msgStreamsUnsupported = "Plexus streams are not supported by this broker yet"
)

// authWait is a password check in flight and the frames waiting for it.
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
		s.keepEarly(in) // its Attach may still be on its way
		return
	}
	s.lastRecvMs = in.NowMs // liveness counts any frame (PROTOCOL 1.5)
	if s.auth.pending {
		s.waitForAuth(in)
		return
	}
	s.handleFrame(in.NowMs, in.Header, in.Payload, in.Err)
}

// waitForAuth queues a frame behind the password check, bounded.
func (s *Session) waitForAuth(in *Frame) {
	a := &s.auth
	if len(a.frames) >= authWaitingFramesMax || a.bytes+len(in.Payload) > authWaitingBytesMax {
		s.transportLost(in.NowMs) // a peer flooding an unauthenticated connection
		return
	}
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
		s.reply(wire.OpPong, hdr.RequestID, &wire.Pong{})
		return
	case wire.OpPong, wire.OpTopologyUpdateAck:
		return
	case wire.OpAuth:
		s.handleAuth(hdr, payload)
		return
	}
	if !s.authed {
		s.reply(wire.OpError, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeUnauthorized, Message: msgAuthRequired})
		s.transportLost(now)
		return
	}
	gen := s.gen
	answeredNow := s.handleRequest(now, hdr, payload)
	// The handshake gate opens once a request other than AUTH has been
	// answered (PROTOCOL 3.1); a reconcile opens it with its result.
	if answeredNow && s.conn != 0 && s.gen == gen {
		s.openGate()
	}
}

// onBrokenStream: the frame could not be read whole.
func (s *Session) onBrokenStream(now int64, hdr wire.Header, err error) {
	if errors.Is(err, wire.ErrFrameTooLarge) {
		s.reply(wire.OpError, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeInvalid,
			Message: fmt.Sprintf("frame of %d bytes exceeds the broker's limit of %d bytes; the connection is closed",
				hdr.PayloadSizeBytes, s.cfg.FramePayloadBytesMax)})
	}
	s.transportLost(now)
}

// handleRequest serves an authenticated request; it reports false only
// when the answer is deferred past the gate (a reconcile with restores).
func (s *Session) handleRequest(now int64, hdr wire.Header, payload []byte) bool {
	var err error
	id := hdr.RequestID
	switch hdr.Opcode {
	case wire.OpPublish:
		var m wire.Publish
		if m, err = wire.DecodePublish(payload); err == nil {
			s.handlePublish(now, id, publishArgs{topic: m.Topic, group: m.Group, partition: m.Partition, confirm: m.RequireConfirm,
				contentType: m.ContentType, headers: m.Headers, publishedMs: m.PublishedMs, payload: m.Payload, ttl: m.TTLMs})
		}
	case wire.OpPublishDelayed:
		var m wire.PublishDelayed
		if m, err = wire.DecodePublishDelayed(payload); err == nil {
			s.handlePublish(now, id, publishArgs{topic: m.Topic, group: m.Group, partition: m.Partition, confirm: m.RequireConfirm,
				contentType: m.ContentType, headers: m.Headers, publishedMs: m.PublishedMs, payload: m.Payload,
				notBeforeMs: m.NotBeforeMs, delayed: true})
		}
	case wire.OpSubscribe:
		var m wire.Subscribe
		if m, err = wire.DecodeSubscribe(payload); err == nil {
			s.handleSubscribe(id, &m)
		}
	case wire.OpAck:
		var m wire.Ack
		if m, err = wire.DecodeAck(payload); err == nil {
			s.handleAck(&m)
		}
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
	case wire.OpDeclarePlexus, wire.OpSubscribeStream:
		if _, err = wire.DecodeBody(hdr.Opcode, payload); err == nil {
			s.reply(wire.OpError, id, &wire.ErrorBody{Code: wire.CodeInvalid, Message: msgStreamsUnsupported})
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
	if s.authed && s.authGen == s.gen {
		s.reply(wire.OpAuthErr, hdr.RequestID, &wire.ErrorBody{Code: wire.CodeUnauthorized, Message: "already authenticated"})
		return
	}
	// A resumed session is authenticated already, but its client sends
	// AUTH on every connect: the check runs again and answers AUTH_OK.
	token := s.newToken()
	s.auth = authWait{pending: true, token: token, gen: s.gen, requestID: hdr.RequestID,
		username: auth.Username, password: auth.Password}
	s.rd.CheckPassword = append(s.rd.CheckPassword, PasswordCheck{Token: token, Username: auth.Username, Password: auth.Password})
}

// onAuthChecked answers the AUTH, then serves the frames that waited.
func (s *Session) onAuthChecked(now int64, in *AuthChecked) {
	if s.ended || !s.auth.pending || in.Token != s.auth.token {
		return // the connection that asked is gone
	}
	sessionAssert(s.auth.gen == s.gen && s.conn != 0, "a password check outlived its attachment")
	wait := s.auth
	s.auth = authWait{}
	ok, msg := s.authVerdict(in, wait.username, wait.password)
	if !ok {
		s.reply(wire.OpAuthErr, wait.requestID, &wire.ErrorBody{Code: wire.CodeUnauthorized, Message: msg})
		s.transportLost(now)
		return
	}
	s.authed, s.authGen, s.authTimerMs = true, s.gen, 0
	s.reply(wire.OpAuthOk, wait.requestID, &wire.AuthOk{})
	s.serveWaiting(now, wait.frames)
}

// authVerdict decides a login from the user store's answer.
func (s *Session) authVerdict(in *AuthChecked, username, password string) (bool, string) {
	if in.Match {
		sessionAssert(in.Known, "a password matched an unknown user")
		return true, ""
	}
	if in.Known || username != builtinUser || !s.cfg.AllowDefaultLoopback {
		return false, msgAuthDenied
	}
	if subtle.ConstantTimeCompare([]byte(password), []byte(builtinPassword)) != 1 {
		return false, msgAuthDenied
	}
	if !s.loopback {
		return false, msgAuthRemote
	}
	return true, ""
}

// serveWaiting serves frames that waited, in order; if one of them starts
// another password check, the rest wait again behind it.
func (s *Session) serveWaiting(now int64, frames []heldFrame) {
	conn := s.conn
	for i := range frames {
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
