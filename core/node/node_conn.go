package node

import (
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/transport/wire"
)

// Connections, handshakes and the session directory. Invariants:
//   - at most ConnectionsMax connections are open at once (one more is
//     answered ERROR 500 and closed without entering conns);
//   - a connection is in exactly one phase: handshaking (no HELLO yet, with
//     a deadline), hello held (a valid HELLO waits for the boot record),
//     bound (its frames go to a session) or closing (Close asked, waiting for
//     ConnClosed); only a handshaking one can time out;
//   - sessions and byClient are one directory seen two ways: same size, each
//     session's client id maps back to it; a session leaves both at once
//     (SessionEnded) and never comes back;
//   - resume tokens are compared in constant time;
//   - a skeleton a live session holds never expires and is recorded again
//     every TTL/skeletonRefreshDivisor; one no live session holds expires
//     at the TTL from its last record (so from within that long of the
//     crash that ended its session).

type connPhase uint8

const (
	connHandshaking connPhase = 1
	connHelloHeld   connPhase = 2
	connBound       connPhase = 3
	connClosing     connPhase = 4
)

type conn struct {
	id       ConnID
	loopback bool
	entropy  [32]byte
	phase    connPhase
	session  SessionID // bound
	// The held HELLO (connHelloHeld): its request id and resume identity.
	helloRequestID uint64
	resume         wire.Optional[wire.ResumeIdentity]
}

// connDeadline is one connection's handshake deadline.
type connDeadline struct {
	atMs int64
	conn ConnID
}

// sessionEntry is one live or dormant session, as the Node knows it.
type sessionEntry struct {
	id       SessionID
	clientID [16]byte
	token    [16]byte
}

// skeletonRefreshDivisor: a live session's skeleton is recorded again every
// ResumeRestartTTLMs/skeletonRefreshDivisor, so its savedAtMs is never
// older than that while the session lives: after a crash its age counts
// from (at most that long before) the crash, not from the last SUBSCRIBE.
const skeletonRefreshDivisor = 4

// deadlinesCompactionSlack: the handshake deadline list keeps entries of
// connections that closed or completed their handshake until they surface;
// it is compacted once it outgrows the connections by this much.
const deadlinesCompactionSlack = 1024

// The first-frame errors of PROTOCOL 3.2, worded as io/broker's handshake.
const (
	msgNotHello = "expected HELLO as the first frame: this port speaks the Fibril wire protocol (default 9876; the admin HTTP API is on 8081)"
)

// onConnOpened admits a connection (or refuses it with ERROR 500 when
// ConnectionsMax are open, or once a drain's grace is over: until then
// clients reconnect, PROTOCOL 5.23) and starts its handshake
// deadline: a peer that connects and stalls must not hold a socket and a
// buffer forever.
func (n *Node) onConnOpened(in *ConnOpened) {
	_, exists := n.conns[in.Conn]
	assertHold(!exists && in.Conn != 0, "the driver never reuses a connection id")
	// A refused connection never enters conns: the driver closes it after
	// the ERROR, and its ConnClosed finds nothing to count down. Request id
	// 0: the peer has asked nothing yet.
	switch {
	// Past the drain's grace the broker is going: a new session would be cut
	// moments later, so the client is sent to retry elsewhere or later.
	case n.draining && n.nowMs >= n.drainDeadlineMs:
		n.sendFrame(in.Conn, wire.OpError, 0, wire.CodeInternal, "broker is shutting down; connect again later")
		n.rd.Close = append(n.rd.Close, in.Conn)
		return
	// Refused with a frame, not a silent close, so the client can tell
	// backpressure (retryable 500, PROTOCOL 6.2) from a network fault.
	case len(n.conns) >= n.cfg.ConnectionsMax:
		n.sendFrame(in.Conn, wire.OpError, 0, wire.CodeInternal,
			fmt.Sprintf("too many connections: this broker accepts at most %d (ConnectionsMax); retry later", n.cfg.ConnectionsMax))
		n.rd.Close = append(n.rd.Close, in.Conn)
		return
	}
	n.conns[in.Conn] = &conn{id: in.Conn, loopback: in.Loopback, entropy: in.Entropy, phase: connHandshaking}
	assertHold(len(n.conns) <= n.cfg.ConnectionsMax, "admission keeps connections within ConnectionsMax")
	// nowMs never goes back, so deadlines are appended in order and the
	// list needs no heap.
	n.deadlines = append(n.deadlines, connDeadline{atMs: n.nowMs + n.cfg.HandshakeTimeoutMs, conn: in.Conn})
	// Compaction costs O(len) but runs only once the stale entries outnumber
	// the live by the slack, so it stays amortised O(1) per connection.
	if len(n.deadlines) > 2*len(n.conns)+deadlinesCompactionSlack {
		n.deadlines = slices.DeleteFunc(n.deadlines, func(d connDeadline) bool {
			c := n.conns[d.conn]
			return c == nil || c.phase != connHandshaking
		})
	}
}

// onConnClosed counts a connection down; an unbound one is forgotten with
// it (a bound one's session hears of it from the driver).
func (n *Node) onConnClosed(in *ConnClosed) {
	c := n.conns[in.Conn]
	if c == nil {
		return // refused at admission, or reported twice
	}
	if c.phase == connHelloHeld {
		n.heldHellos--
		assertHold(n.heldHellos >= 0, "held HELLOs are counted once each")
	}
	delete(n.conns, in.Conn)
}

// expireHandshakes closes connections whose HELLO has not arrived whole in
// HandshakeTimeoutMs (a peer that sends part of a header and stalls).
func (n *Node) expireHandshakes() {
	for len(n.deadlines) > 0 && n.deadlines[0].atMs <= n.nowMs {
		d := n.deadlines[0]
		n.deadlines = n.deadlines[1:]
		if mutant.On(mutant.NoHandshakeTimeout) {
			continue // broken on purpose: a stalled peer holds its connection forever
		}
		// Only a connection still without a whole HELLO times out: one whose
		// HELLO is held waits for the boot record, not for its peer, and a
		// bound one is its session's to time out (auth, heartbeats).
		if c := n.conns[d.conn]; c != nil && c.phase == connHandshaking {
			n.closeConn(c)
		}
	}
	if len(n.deadlines) == 0 {
		n.deadlines = nil // let the backing array go
	}
}

// closeConn asks the driver to close c; it stays counted until the driver
// reports ConnClosed, since the socket is open until then.
func (n *Node) closeConn(c *conn) {
	if c.phase == connHelloHeld {
		n.heldHellos--
	}
	c.phase = connClosing
	n.rd.Close = append(n.rd.Close, c.id)
}

// sendFrame queues one error-bodied frame (ERROR or HELLO_ERR) on a
// connection no session owns yet.
func (n *Node) sendFrame(id ConnID, op wire.Opcode, requestID uint64, code wire.ErrorCode, message string) {
	frame := wire.AppendBodyFrame(nil, op, requestID, &wire.ErrorBody{Code: code, Message: message})
	n.rd.Sends = append(n.rd.Sends, Send{Conn: id, Bytes: frame})
}

// refuse answers a handshake frame with an error and closes the connection.
func (n *Node) refuse(c *conn, op wire.Opcode, requestID uint64, code wire.ErrorCode, message string) {
	n.sendFrame(c.id, op, requestID, code, message)
	n.closeConn(c)
}

// onFrame takes the first frame of an unbound connection (PROTOCOL 3.2,
// checks in order).
func (n *Node) onFrame(in *Frame) {
	c := n.conns[in.Conn]
	if c == nil || c.phase == connClosing {
		return // closed, or closing: what it still sends is dropped
	}
	hdr := in.Header
	switch {
	// A broken frame leaves the stream unframed: nothing after it can be
	// trusted, so the connection is refused rather than resynchronised.
	case in.Err != nil:
		n.refuse(c, wire.OpError, hdr.RequestID, wire.CodeInvalid, "malformed frame: "+in.Err.Error())
		return
	case c.phase == connHelloHeld || c.phase == connBound:
		// A second frame while the HELLO is held, or one read before the
		// driver applied our Bind: either way the peer sent it before
		// HELLO_OK, which no compliant client does (PROTOCOL 3.1: clients
		// read each handshake reply before their next frame).
		n.refuse(c, wire.OpError, hdr.RequestID, wire.CodeInvalid, "request before HELLO_OK: the handshake is synchronous")
		return
	case hdr.Opcode != wire.OpHello:
		n.refuse(c, wire.OpError, hdr.RequestID, wire.CodeInvalid, msgNotHello)
		return
	}
	// Checks 2 and 3 of the table; check 4 (resume) never fails, and check
	// 5 (TLS client certificates) is not offered by this broker.
	hello, err := wire.DecodeHello(in.Payload)
	switch {
	case err != nil:
		n.refuse(c, wire.OpError, hdr.RequestID, wire.CodeInvalid, "malformed HELLO: "+err.Error())
		return
	case hello.ProtocolVersion != wire.ProtocolVersion:
		n.refuse(c, wire.OpHelloErr, hdr.RequestID, wire.CodeUnsupportedVersion,
			fmt.Sprintf("unsupported protocol version %d: this broker speaks version 1", hello.ProtocolVersion))
		return
	}
	// A session answered now could hand out delivery tags of a boot that a
	// crash may still take back: hold the HELLO until the boot record is
	// durable (normally one fsync after start).
	if !n.bootDurable() {
		// Bounded (STYLE 3): if the boot record's fsync stalls, a reconnect storm
		// gets retryable refusals instead of growing held state without limit.
		if n.heldHellos >= hellosHeldMax {
			n.refuse(c, wire.OpError, hdr.RequestID, wire.CodeInternal, "broker is starting; retry")
			return
		}
		// The decoded HELLO is a copy: nothing points into the payload.
		c.phase, c.helloRequestID, c.resume = connHelloHeld, hdr.RequestID, hello.Resume
		n.heldHellos++
		return
	}
	n.resolveHello(c, hdr.RequestID, hello.Resume)
}

// answerHeldHellos runs once the boot record is durable, in connection
// order (ids are minted in accept order).
func (n *Node) answerHeldHellos() {
	if n.heldHellos == 0 {
		return
	}
	ids := make([]ConnID, 0, n.heldHellos)
	for id, c := range n.conns {
		if c.phase == connHelloHeld {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // map order must not decide the order of sessions
	for _, id := range ids {
		c := n.conns[id]
		n.heldHellos--
		c.phase = connHandshaking // counted out: a refusal must not count it again
		n.resolveHello(c, c.helloRequestID, c.resume)
	}
	assertHold(n.heldHellos == 0, "every held HELLO was answered")
}

// resolveHello picks the resume outcome (PROTOCOL 7.7, in the table's order)
// and attaches the connection to a session.
func (n *Node) resolveHello(c *conn, requestID uint64, resume wire.Optional[wire.ResumeIdentity]) {
	assertHold(n.bootDurable(), "no handshake is answered before the boot record is durable")
	assertHold(c.phase == connHandshaking || c.phase == connHelloHeld, "one HELLO per connection is resolved")
	outcome := wire.ResumeNew
	if resume.Present {
		// Every comparison of a secret is constant-time: a peer must not
		// learn a token byte by byte from how long a refusal takes.
		id := resume.Value
		outcome = wire.ResumeNotFound
		// A resume identity minted by another broker (or an earlier owner id)
		// names no session here; rejected, not "not found", so the client knows
		// its identity is foreign (PROTOCOL 7.7).
		if subtle.ConstantTimeCompare(id.OwnerID[:], n.state.ownerID[:]) != 1 {
			outcome = wire.ResumeRejected // another broker
		} else if sid, live := n.byClient[id.ClientID]; live {
			s := n.sessions[sid]
			if subtle.ConstantTimeCompare(s.token[:], id.ResumeToken[:]) == 1 {
				n.attach(c, s, requestID, wire.ResumeResumed)
				return
			}
			// A live client id with a wrong token: someone else may hold the identity,
			// so the live session is never handed over.
			outcome = wire.ResumeRejected
		} else if sk := n.restorableSkeleton(id); sk != nil {
			// Same identity, fresh empty unauthenticated session.
			if s := n.startSession(sk.clientID, sk.token); s != nil {
				n.attach(c, s, requestID, wire.ResumeResumedAfterRestart)
			} else {
				n.refuseNoSessionID(c, requestID)
			}
			return
		}
	}
	n.attachFresh(c, requestID, outcome)
}

// restorableSkeleton is the persisted skeleton a resume after restart may
// use: same client id and token, younger than ResumeRestartTTLMs.
func (n *Node) restorableSkeleton(id wire.ResumeIdentity) *skeleton {
	sk := n.state.skeletons[id.ClientID]
	// TTL 0 disables resume after restart altogether.
	if sk == nil || n.cfg.ResumeRestartTTLMs == 0 {
		return nil
	}
	if subtle.ConstantTimeCompare(sk.token[:], id.ResumeToken[:]) != 1 {
		return nil
	}
	if n.nowMs-sk.savedAtMs >= n.cfg.ResumeRestartTTLMs {
		return nil
	}
	return sk
}

// attachFresh starts a session with a new identity for c.
func (n *Node) attachFresh(c *conn, requestID uint64, outcome wire.ResumeOutcome) {
	clientID, token := n.mintIdentity(c.entropy)
	s := n.startSession(clientID, token)
	if s == nil {
		n.refuseNoSessionID(c, requestID)
		return
	}
	n.attach(c, s, requestID, outcome)
}

// refuseNoSessionID answers a HELLO that found no reserved session id
// (the next reservation is not durable yet, or ids are exhausted).
func (n *Node) refuseNoSessionID(c *conn, requestID uint64) {
	n.refuse(c, wire.OpError, requestID, wire.CodeInternal, "broker is busy starting sessions; retry")
}

// mintIdentity draws a client id and a resume token from the connection's
// entropy. A client id already in use (live or in a skeleton) is perturbed
// with the next session id until it is not, so identities never collide
// even when the entropy does (a simulator seed, a repeated AttachRefused).
func (n *Node) mintIdentity(entropy [32]byte) (clientID, token [16]byte) {
	// The two halves of 32 bytes of entropy: 122 random bits each once the
	// version bits are set, as a UUIDv4.
	copy(clientID[:], entropy[:16])
	copy(token[:], entropy[16:])
	setUUIDv4Bits(&clientID)
	setUUIDv4Bits(&token)
	// Salting with increasing values ends: each salt gives a different id, and
	// only finitely many are taken.
	for salt := uint64(n.lastSessionID) + 1; n.clientIDTaken(clientID); salt++ {
		binary.BigEndian.PutUint64(clientID[8:], binary.BigEndian.Uint64(entropy[8:16])^salt)
		setUUIDv4Bits(&clientID)
	}
	return clientID, token
}

// clientIDTaken says whether a live session or a skeleton holds id.
func (n *Node) clientIDTaken(id [16]byte) bool {
	_, live := n.byClient[id]
	return live || n.state.skeletons[id] != nil
}

// startSession mints the next session id and asks the driver to create
// the Session machine (Ready.Start), or returns nil when no reserved id is
// left: an id is handed out only under a durable reservation, so none
// repeats after a crash.
func (n *Node) startSession(clientID, token [16]byte) *sessionEntry {
	_, taken := n.byClient[clientID]
	assertHold(!taken, "one live session per client id")
	// No id without a durable reservation: an id handed out under a record
	// a crash loses could be handed out again after restart.
	if n.lastSessionID >= n.sessionIDsDurable {
		n.reserveSessionIDs()
		return nil
	}
	n.lastSessionID++
	assertHold(n.lastSessionID <= sessionSeqMax, "session ids stay below 2^40")
	if n.sessionIDsDurable-n.lastSessionID < sessionIDsBlock/2 {
		n.reserveSessionIDs() // ahead of need: durable before they run out
	}
	s := &sessionEntry{id: n.lastSessionID, clientID: clientID, token: token}
	n.sessions[s.id] = s
	n.byClient[clientID] = s.id
	if sk := n.state.skeletons[clientID]; sk != nil {
		// Restored from a skeleton: live again, so kept fresh from now on.
		assertHold(sk.token == token, "a restored session keeps its skeleton's token")
		n.scheduleSkeletonSweep(n.skeletonDueMs(sk))
	}
	n.rd.Start = append(n.rd.Start, SessionInit{ID: s.id, ClientID: clientID, Token: token, OwnerID: n.state.ownerID,
		Runtime: n.sessionRuntime()})
	return s
}

// reserveSessionIDs records a ceiling one block higher, unless one is on
// its way or the ids are exhausted. Written even with storage behind (as
// the boot record): one at a time, so never more than one.
func (n *Node) reserveSessionIDs() {
	if n.sessionIDsReserveIndex != 0 || n.state.sessionIDCeiling >= sessionSeqMax {
		return
	}
	ceiling := min(n.state.sessionIDCeiling+sessionIDsBlock, sessionSeqMax)
	n.sessionIDsReserveIndex = n.appendRecord(&record{kind: recordSessionIDs, sessionIDCeiling: ceiling})
	assertHold(SessionID(n.state.sessionIDCeiling) > n.sessionIDsDurable, "a reservation raises the ceiling")
}

// attach binds c to s and hands s the transport (the session answers
// HELLO_OK).
func (n *Node) attach(c *conn, s *sessionEntry, requestID uint64, outcome wire.ResumeOutcome) {
	assertHold(n.sessions[s.id] == s, "a connection is attached to a live session")
	assertHold(c.phase != connClosing, "a closing connection is never attached")
	// Bind before the Attach reaches the session (Ready order): every frame
	// after the HELLO goes to the session, which answers HELLO_OK itself.
	c.phase, c.session = connBound, s.id
	n.rd.Bind = append(n.rd.Bind, Binding{Conn: c.id, Session: s.id})
	n.send(SessionAddr(s.id), &Attach{Conn: c.id, Loopback: c.loopback, HelloRequestID: requestID, Outcome: outcome})
	// A session attached during a drain is told at once, as the others
	// were, with the grace that is left.
	if n.draining {
		n.send(SessionAddr(s.id), &ShuttingDown{GraceMs: max(n.drainDeadlineMs-n.nowMs, 0), Message: n.drainMessage})
	}
}

// onAttachRefused: the session had ended when our Attach reached it (or it
// was gone: a bounced Attach). The HELLO gets a fresh session.
func (n *Node) onAttachRefused(id ConnID, requestID uint64) {
	c := n.conns[id]
	if c == nil || c.phase != connBound {
		return // the connection closed meanwhile
	}
	n.attachFresh(c, requestID, wire.ResumeNotFound)
}

// onSessionEnded forgets a session and its skeleton.
func (n *Node) onSessionEnded(from Address) {
	assertHold(from.Kind == AddrSession, "only a session ends a session")
	s := n.sessions[from.Session]
	if s == nil {
		return // reported twice
	}
	delete(n.sessions, s.id)
	n.dropSessionCohorts(from)
	assertHold(n.byClient[s.clientID] == s.id, "the directory maps a session's client id to it")
	delete(n.byClient, s.clientID)
	// PROTOCOL 7.7: an ended session's skeleton is forgotten too, durably,
	// so a restart cannot resurrect a session its client saw end.
	if n.state.skeletons[s.clientID] != nil {
		n.appendRecord(&record{kind: recordSkeletonRemoved, removed: s.clientID})
	}
}

// onSkeletonChanged persists a session's subscription set, best effort:
// nothing waits for its durability.
func (n *Node) onSkeletonChanged(from Address, msg *SkeletonChanged) {
	s := n.sessions[from.Session]
	if s == nil || n.cfg.ResumeRestartTTLMs == 0 || n.storageBehind() {
		return // best effort: a skeleton not saved costs a resume after restart at most
	}
	assertHold(len(msg.Subs) <= n.cfg.SubscriptionsPerSessionMax, "a skeleton is bounded by the session's subscriptions")
	// The envelope's slice stays the session's: the record takes a copy,
	// with groups normalised as every stored name is ("default" is "").
	subs := make([]SkeletonSub, 0, len(msg.Subs))
	for _, sub := range msg.Subs {
		sub.Queue.Group = core.NormalizeGroup(sub.Queue.Group)
		if validQueueKey(queueKey{Topic: sub.Queue.Topic, Group: sub.Queue.Group}) != nil {
			continue // never a valid subscription: nothing to restore
		}
		subs = append(subs, sub)
	}
	sk := &skeleton{clientID: s.clientID, token: s.token, savedAtMs: n.nowMs, subs: subs}
	n.appendRecord(&record{kind: recordSkeleton, skeleton: sk})
	n.scheduleSkeletonSweep(n.skeletonDueMs(sk)) // its session is live: a refresh
}

// expireSkeletons keeps live sessions' skeletons fresh and forgets,
// durably, those no session holds once older than the restart TTL. A live
// session's skeleton never expires: its session may still be resumed after
// a restart, however long ago its last SUBSCRIBE was.
func (n *Node) expireSkeletons() {
	ttl := n.cfg.ResumeRestartTTLMs
	if ttl == 0 || n.skeletonSweepAtMs == 0 || n.nowMs < n.skeletonSweepAtMs {
		return
	}
	// One scan handles every skeleton due and finds the next due time; it
	// runs only when one is due, not at every step.
	n.skeletonSweepAtMs = 0
	refreshMs := n.skeletonRefreshMs()
	for _, id := range sortedClientIDs(n.state.skeletons) {
		sk := n.state.skeletons[id]
		_, live := n.byClient[id]
		switch {
		case live && n.nowMs-sk.savedAtMs >= refreshMs:
			// Best effort, as any skeleton: with storage behind, try again
			// one interval later.
			if !n.storageBehind() {
				fresh := &skeleton{clientID: sk.clientID, token: sk.token, savedAtMs: n.nowMs, subs: sk.subs}
				n.appendRecord(&record{kind: recordSkeleton, skeleton: fresh})
			}
			n.scheduleSkeletonSweep(n.nowMs + refreshMs)
		// Removed durably: a skeleton only dropped from memory would come back
		// with the next replay and could be resumed past its TTL.
		case !live && n.nowMs-sk.savedAtMs >= ttl:
			n.appendRecord(&record{kind: recordSkeletonRemoved, removed: id})
		default:
			n.scheduleSkeletonSweep(n.skeletonDueMs(sk))
		}
	}
}

// skeletonRefreshMs is how often a live session's skeleton is recorded
// again (at least every millisecond step, for a tiny TTL).
func (n *Node) skeletonRefreshMs() int64 {
	return max(n.cfg.ResumeRestartTTLMs/skeletonRefreshDivisor, 1)
}

// skeletonDueMs is when sk next needs the sweep: its refresh while a live
// session holds it, its expiry otherwise.
func (n *Node) skeletonDueMs(sk *skeleton) int64 {
	if _, live := n.byClient[sk.clientID]; live {
		return sk.savedAtMs + n.skeletonRefreshMs()
	}
	return sk.savedAtMs + n.cfg.ResumeRestartTTLMs
}

// scheduleSkeletonSweep brings the next sweep forward to atMs if later.
func (n *Node) scheduleSkeletonSweep(atMs int64) {
	assertHold(atMs > 0, "a sweep is scheduled at a real time")
	// Only ever brought forward: the one sweep handles every due skeleton and
	// reschedules the rest, so a later request must not postpone an earlier.
	if n.skeletonSweepAtMs == 0 || atMs < n.skeletonSweepAtMs {
		n.skeletonSweepAtMs = atMs
	}
}

// nextSkeletonExpiryMs is when the next skeleton is due (0: none).
func (n *Node) nextSkeletonExpiryMs() int64 { return n.skeletonSweepAtMs }

// onDrain tells every session the broker is going away. For GraceMs the
// broker still accepts reconnects and sessions are held (PROTOCOL 5.23); a
// second Drain cannot lengthen the first one's grace.
func (n *Node) onDrain(in *Drain) {
	deadlineMs := n.nowMs + max(in.GraceMs, 0)
	if n.draining {
		// The earlier deadline wins: sessions were already told the first grace,
		// and extending it would break what they were promised.
		deadlineMs = min(deadlineMs, n.drainDeadlineMs)
	}
	n.draining, n.drainGraceMs, n.drainMessage, n.drainDeadlineMs = true, in.GraceMs, in.Message, deadlineMs
	assertHold(n.drainDeadlineMs <= n.nowMs+max(in.GraceMs, 0), "a Drain never lengthens the grace")
	graceMs := n.drainDeadlineMs - n.nowMs // what is left of it
	ids := make([]SessionID, 0, len(n.sessions))
	for id := range n.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n.send(SessionAddr(id), &ShuttingDown{GraceMs: max(graceMs, 0), Message: in.Message})
	}
}
