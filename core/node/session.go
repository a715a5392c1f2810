package node

// The Session machine: everything one client session decides (PROTOCOL 3,
// 5, 6, 7.1-7.3, 7.7-7.9), as a pure state machine. Invariants:
//   - at most one connection is attached (conn != 0); a dormant session has
//     none and a grace deadline; an ended session has neither, no
//     subscriptions and emits nothing but AttachRefused and Unsubscribe;
//   - a reply goes only to the attachment that asked: every pending token
//     remembers its attachment (gen) and is dropped when that attachment is
//     gone; every token is answered at most once;
//   - no push (DELIVER, PING, SUBSCRIPTION_CLOSED, GOING_AWAY) reaches a
//     connection before its handshake gate opened (PROTOCOL 3.1);
//   - nothing is sent to a connection after the session closed it or the
//     driver reported it closed;
//   - the bytes queued for the attached connection and not yet written stay
//     within Config.OutboxBytesMax: past it the connection is cut;
//   - deliveries held (dormant, gate closed, subscription not yet announced)
//     are bounded by the subscription's prefetch for manual-ack
//     subscriptions, and overall by OutboxBytesMax in bytes and by
//     heldDeliveriesMax in count;
//   - subscriptions are paused from the transport's loss until the next
//     attachment's gate opens, never behind an open gate;
//   - every map and queue has a named bound (constants below or Config).

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/cohort"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/transport/wire"
)

const (
	// subSeqBits is how many low bits of a SubID count the session's
	// subscriptions; the session id fills the bits above (SubIDs are unique
	// broker-wide without a shared counter).
	// 24 bits: 16M subscriptions per session, leaving 40 bits for session ids
	// (sessionSeqMax in node.go) in a u64 SubID.
	subSeqBits = 24
	// sessionIDMax keeps uint64(SessionID)<<subSeqBits from overflowing.
	sessionIDMax = SessionID(1)<<(64-subSeqBits) - 1
	// authWaitingFramesMax bounds the frames a connection may send while its
	// password check runs (they wait, in order); one more closes it.
	// 64 lets a client pipeline its first requests behind AUTH while the
	// argon2id check runs, yet bounds what an unauthenticated peer can make
	// the broker buffer.
	authWaitingFramesMax = 64
	// authWaitingBytesMax bounds those frames' payload bytes.
	authWaitingBytesMax = 1 << 20
	// earlyFramesMax bounds frames that arrive for a connection before the
	// Attach that names it (the driver delivers envelopes and frames on
	// different paths, so they may cross).
	earlyFramesMax = 16
	// earlyBytesMax bounds those frames' payload bytes.
	earlyBytesMax = 1 << 20
	// silentIntervalsMax: a connection silent for more than this many
	// heartbeat intervals is cut (PROTOCOL 1.5).
	// 3 tolerates two lost or late PINGs before calling the peer dead.
	silentIntervalsMax = 3
	// graceMutantDivisor shortens the grace under mutant.EarlyGraceRequeue.
	graceMutantDivisor = 10
	// pendingOpsMax bounds requests awaiting an answer (confirmed
	// publishes, subscribes, restores, declares); past it a request is
	// refused as retryable (backpressure, not growth).
	pendingOpsMax = 1 << 16
	// opensMax bounds the partitions a session remembers as opened; past
	// it, opened partitions without a subscription are forgotten (the next
	// use opens them again).
	opensMax = 4096
	// heldDeliveriesMax bounds the deliveries a session holds (dormant,
	// gate closed, not yet announced), all subscriptions together: an
	// empty payload counts no bytes, so the byte bound alone would let an
	// auto-ack subscription hold any number; past it the session ends.
	heldDeliveriesMax = 1 << 16
	// textPayloadNumberMax bounds u64 wire fields that become int64 deadlines
	// or durations (ttl_ms, not_before, default TTL).
	textPayloadNumberMax = 1 << 62
)

// Session is one client session. See the file comment for its invariants.
type Session struct {
	cfg  Config
	init SessionInit
	self Address

	// Attachment (0: none). gen counts attachments; a reply is sent only
	// when the token's gen is still the current attachment, which is how
	// "replies only to the attachment that asked" holds across resumes.
	conn     ConnID
	gen      uint64
	loopback bool
	// authed is the session's auth state (it survives a resume); authGen is
	// the attachment whose AUTH was checked ("already authenticated").
	authed  bool
	authGen uint64
	auth    authWait
	early   earlyConn
	// newestConn is the newest connection the session heard of (attached,
	// framed or reported closed). The driver mints ConnIDs in accept order,
	// and a client resumes on a newer connection, so anything at or below
	// it that is not attached (or in early) is stale and ignored.
	newestConn ConnID

	// Lifecycle. nowMs is the current step's time.
	nowMs    int64
	dormant  bool
	draining bool
	ended    bool
	// drainDeadlineMs (draining): until then a lost transport still makes
	// the session dormant, since the broker accepts reconnects for the
	// drain's grace (PROTOCOL 5.23); after it, the session ends at once.
	drainDeadlineMs int64

	// Timers, absolute ms (0 = not armed). See onTick.
	graceTimerMs int64 // dormant: the session ends
	gateTimerMs  int64 // attached, gate closed: the gate opens
	authTimerMs  int64 // attached, not authenticated: the conn is cut
	pingTimerMs  int64 // attached: PING and the liveness check
	lastRecvMs   int64 // attached: when the last frame arrived
	gateOpen     bool
	// reconciling counts this attachment's reconciles waiting for restores:
	// the gate stays closed until their results went out (PROTOCOL 3.1).
	reconciling    int
	gated          []byte // pushes encoded while the gate was closed
	unwrittenBytes int    // sent to conn, not yet reported Written
	serverReqID    uint64 // the connection's server request-id counter

	// Subscriptions, by key and by id; held deliveries live on each.
	subs     map[subKey]*sessionSub
	subsByID map[uint64]*sessionSub
	// memberID is the session's cohort member id (zero: none yet);
	// cohortViews what it knows and told of each cohort it is a member of
	// (session_cohort.go).
	memberID    cohort.MemberID
	cohortViews map[cohortKey]*cohortView
	subSeq      uint64
	// heldBytes counts payload bytes of held deliveries (all subscriptions),
	// heldCount the deliveries.
	heldBytes int
	heldCount int
	// Stream subscriptions (session_stream.go), by partition and by id;
	// streamNotices counts the partitions' notices (retention clamps).
	streamSubs     map[core.QueueID]*streamSub
	streamSubsByID map[uint64]*streamSub
	streamNotices  uint64

	// Partitions and correlation.
	opens     map[core.QueueID]*partitionOpen
	pending   map[uint64]pendingOp
	nextToken uint64
	// confirms orders the attachment's publish confirms (session_confirm.go).
	confirms     []uint64
	confirmsHead int

	// Effects of the current step; buf is reused across steps (hot path).
	rd        Ready
	buf       []byte
	sendConn  ConnID
	sendStart int
	deliverM  wire.Deliver
	publishOk wire.PublishOk
	headers   wire.Headers
	// validNames is the last (topic, group) queueOf accepted: a stream of
	// publishes and acks to one queue checks its names once, not per frame
	// (a third of a publish's name work, measured). Equal strings pass or
	// fail alike, so it decides nothing.
	validNames core.QueueID
	// publishIn is the PUBLISH decode target, reused: between steps it
	// holds only the last topic and group strings (wire.DecodePublishInto).
	publishIn wire.Publish
	ackIn     wire.Ack
}

// subKey names a queue subscription: (topic, partition, normalised group).
type subKey = core.QueueID

// NewSession starts a session with its identities; it has no transport
// until an Attach arrives.
func NewSession(cfg Config, init SessionInit) *Session {
	sessionAssert(init.ID != 0, "session id 0 is never minted")
	sessionAssert(init.ID <= sessionIDMax, "session id does not fit beside the subscription sequence")
	sessionAssert(cfg.HeartbeatIntervalMs > 0 && cfg.OutboxBytesMax > 0, "session config not validated")
	if init.Runtime != nil {
		// The Node's live runtime values win over the driver's startup copy.
		cfg.ReconnectGraceMs = init.Runtime.ReconnectGraceMs
	}
	return &Session{
		cfg:            cfg,
		init:           init,
		self:           SessionAddr(init.ID),
		subs:           make(map[subKey]*sessionSub),
		subsByID:       make(map[uint64]*sessionSub),
		cohortViews:    make(map[cohortKey]*cohortView),
		streamSubs:     make(map[core.QueueID]*streamSub),
		streamSubsByID: make(map[uint64]*streamSub),
		opens:          make(map[core.QueueID]*partitionOpen),
		pending:        make(map[uint64]pendingOp),
	}
}

// Ended says the session is over: it sent SessionEnded and the driver may
// drop it.
func (s *Session) Ended() bool { return s.ended }

// Step applies one input and returns its effects (valid until the next
// Step: the Ready and its Sends bytes are reused).
func (s *Session) Step(in Input) *Ready {
	s.resetReady()
	now := in.nowMs()
	s.nowMs = now
	switch in := in.(type) {
	case *Tick:
		s.onTick(now)
	case *Deliver:
		if !s.onAdmin(&in.Envelope) { // operator requests (session_surface.go)
			s.onEnvelope(now, in.Envelope.Msg)
		}
	case *Bounced:
		s.onBounced(now, in.Envelope)
	case *Frame:
		s.onFrame(in)
	case *ConnClosed:
		s.onConnClosed(now, in.Conn)
	case *Written:
		s.onWritten(in.Conn, in.Bytes)
	case *AuthChecked:
		s.onAuthChecked(now, in)
	default:
		panic(fmt.Sprintf("node: a session does not take %T", in))
	}
	s.finishStep()
	return &s.rd
}

// resetReady empties the Ready for the next step, dropping its references
// (envelopes hold bodies and passwords) without freeing its slices.
func (s *Session) resetReady() {
	for i := range s.rd.Out {
		s.rd.Out[i] = Envelope{}
	}
	for i := range s.rd.CheckPassword {
		s.rd.CheckPassword[i] = PasswordCheck{}
	}
	s.rd.Sends = s.rd.Sends[:0]
	s.rd.Close = s.rd.Close[:0]
	s.rd.Out = s.rd.Out[:0]
	s.rd.CheckPassword = s.rd.CheckPassword[:0]
	s.rd.WakeMs = 0
	s.rd.Counted = SessionCounted{}
	s.buf = s.buf[:0]
	s.sendConn, s.sendStart = 0, 0
}

// finishStep closes the step's last send segment and computes the wake-up.
func (s *Session) finishStep() {
	s.flushSegment()
	s.rd.WakeMs = s.nextWakeMs()
	if s.ended {
		sessionAssert(s.rd.WakeMs == 0, "an ended session asks for no tick")
	}
}

// onEnvelope dispatches an envelope from the Node or a partition Host.
func (s *Session) onEnvelope(now int64, msg Message) {
	if s.ended {
		s.onEnvelopeEnded(msg)
		return
	}
	switch m := msg.(type) {
	case *Attach:
		s.onAttach(now, m)
	case *Opened:
		s.onOpened(now, m)
	case *Declared:
		s.onDeclared(m)
	case *SessionRuntime:
		s.cfg.ReconnectGraceMs = m.ReconnectGraceMs // the grace of disconnects from now on
	case *ShuttingDown:
		s.onShuttingDown(m)
	case *Response:
		s.onResponse(now, m)
	case *Responses:
		for i := range m.Items {
			s.onResponse(now, &m.Items[i])
		}
	case *Deliveries:
		s.onDeliveries(m)
	case *SubscriptionEnded:
		s.onSubscriptionEnded(m)
	case *StreamDeliveries:
		s.onStreamDeliveries(m)
	case *StreamNotice:
		// The wire has no frame for it (docs/streams.md): counted.
		s.streamNotices++
	case *CohortJoined:
		s.onCohortJoined(m)
	case *AssignmentNotice:
		s.onAssignmentNotice(m)
	case *ReleaseIdle:
		s.onReleaseIdle(m)
	default:
		panic(fmt.Sprintf("node: a session does not take a %T envelope", msg))
	}
}

// onEnvelopeEnded is all an ended session still does: refuse attaches and
// hand back deliveries (and late subscriptions) so partitions requeue.
func (s *Session) onEnvelopeEnded(msg Message) {
	switch m := msg.(type) {
	case *Opened:
		s.forgetGrant(m) // session_idle.go
	case *Attach:
		s.out(NodeAddr(), &AttachRefused{Conn: m.Conn, Loopback: m.Loopback, HelloRequestID: m.HelloRequestID})
	case *Deliveries:
		s.out(PartitionAddr(m.Queue), &Request{Input: &core.Unsubscribe{SubID: m.SubID}})
	case *StreamDeliveries:
		s.out(PartitionAddr(m.Stream), &StreamRequest{Input: &stream.Unsubscribe{SubID: m.SubID}})
	case *Response:
		s.onResponseEnded(m)
	case *Responses:
		for i := range m.Items {
			s.onResponseEnded(&m.Items[i])
		}
	}
}

// onResponseEnded: a subscribe that completed after the end would be a
// ghost, so it is undone; every other answer has nobody to go to.
func (s *Session) onResponseEnded(m *Response) {
	if m.Reply.Kind != core.ReplySubscribed {
		return
	}
	if op, ok := s.pending[m.Token]; ok {
		delete(s.pending, m.Token)
		if op.kind == opStreamSubscribe {
			s.out(PartitionAddr(op.queue), &StreamRequest{Input: &stream.Unsubscribe{SubID: op.subID}})
			return
		}
		s.out(PartitionAddr(op.queue), &Request{Input: &core.Unsubscribe{SubID: op.subID}})
	}
}

// out queues one envelope from this session.
func (s *Session) out(to Address, msg Message) {
	s.rd.Out = append(s.rd.Out, Envelope{From: s.self, To: to, Msg: msg})
}

// newToken mints a correlation token (never 0: 0 means "no response").
func (s *Session) newToken() uint64 {
	s.nextToken++
	sessionAssert(s.nextToken != 0, "token counter wrapped")
	return s.nextToken
}

// graceMs is the reconnect grace in force. The mutant shortens it, which
// requeues deliveries a resuming client could still have settled: the
// grace tests and the simulator sweep must catch that.
func (s *Session) graceMs() int64 {
	if mutant.On(mutant.EarlyGraceRequeue) {
		return s.cfg.ReconnectGraceMs / graceMutantDivisor
	}
	return s.cfg.ReconnectGraceMs
}

// CheckInvariants checks the machine's own invariants; the simulator calls
// it after every step.
func (s *Session) CheckInvariants() error {
	if err := s.checkLifecycle(); err != nil {
		return err
	}
	if err := s.checkSubscriptions(); err != nil {
		return err
	}
	if err := s.checkConfirms(); err != nil {
		return err
	}
	if err := s.checkStreamSubs(); err != nil {
		return err
	}
	if len(s.pending) > pendingOpsMax || len(s.opens) > opensMax {
		return fmt.Errorf("session %d: %d pending requests, %d opens: over their bounds", s.init.ID, len(s.pending), len(s.opens))
	}
	for token, op := range s.pending {
		if token == 0 || token > s.nextToken {
			return fmt.Errorf("session %d: pending token %d was never minted", s.init.ID, token)
		}
		if op.gen > s.gen {
			return fmt.Errorf("session %d: token %d belongs to a future attachment", s.init.ID, token)
		}
		// One whose subscription is gone only waits to be handed back.
		if (op.kind == opSubscribe || op.kind == opRestore) && s.subsByID[op.subID] != nil && (op.gen != s.gen || s.conn == 0) {
			return fmt.Errorf("session %d: subscribe token %d outlived its attachment", s.init.ID, token)
		}
		if op.kind == opStreamSubscribe && s.streamSubsByID[op.subID] != nil && (op.gen != s.gen || s.conn == 0) {
			return fmt.Errorf("session %d: stream subscribe token %d outlived its attachment", s.init.ID, token)
		}
	}
	return nil
}

// checkLifecycle checks the attachment, dormancy, outbox and auth state.
func (s *Session) checkLifecycle() error {
	id := s.init.ID
	switch {
	case s.ended && (s.conn != 0 || len(s.subs) != 0 || len(s.streamSubs) != 0 || s.dormant):
		return fmt.Errorf("session %d: ended but still attached, dormant or subscribed", id)
	case s.dormant && (s.conn != 0 || s.graceTimerMs == 0):
		return fmt.Errorf("session %d: dormant with a connection or without a grace deadline", id)
	case s.conn == 0 && (len(s.gated) != 0 || s.unwrittenBytes != 0):
		return fmt.Errorf("session %d: outbox bytes with no connection", id)
	case s.gateOpen && len(s.gated) != 0:
		return fmt.Errorf("session %d: pushes held behind an open gate", id)
	case s.reconciling < 0 || (s.reconciling > 0 && s.gateOpen):
		return fmt.Errorf("session %d: pushes held behind an open gate", id)
	case s.unwrittenBytes < 0:
		return fmt.Errorf("session %d: more bytes written than sent", id)
	case s.unwrittenBytes+len(s.gated) > s.cfg.OutboxBytesMax:
		return fmt.Errorf("session %d: outbox over its bound (%d bytes)", id, s.unwrittenBytes+len(s.gated))
	case s.auth.pending && (s.auth.gen != s.gen || s.conn == 0):
		return fmt.Errorf("session %d: a password check pending for a gone attachment", id)
	case !s.auth.pending && len(s.auth.frames) != 0:
		return fmt.Errorf("session %d: frames wait for no password check", id)
	case len(s.auth.frames) > authWaitingFramesMax || s.auth.bytes > authWaitingBytesMax:
		return fmt.Errorf("session %d: too many frames wait for the password check", id)
	case s.conn > s.newestConn || s.early.conn > s.newestConn:
		return fmt.Errorf("session %d: connection %d (early %d) newer than the newest seen %d", id, s.conn, s.early.conn, s.newestConn)
	case s.early.conn != 0 && (s.early.conn == s.conn || s.early.conn != s.newestConn):
		return fmt.Errorf("session %d: early connection %d is attached or not the newest (%d)", id, s.early.conn, s.newestConn)
	case s.heldBytes < 0 || s.heldBytes > s.cfg.OutboxBytesMax:
		return fmt.Errorf("session %d: held delivery bytes %d out of bounds", id, s.heldBytes)
	}
	return nil
}

// checkSubscriptions checks both subscription indexes, the held bounds and
// the held byte count (recounted from scratch).
func (s *Session) checkSubscriptions() error {
	id := s.init.ID
	if len(s.subs) != len(s.subsByID) || len(s.subs) > s.cfg.SubscriptionsPerSessionMax {
		return fmt.Errorf("session %d: %d subscriptions by key, %d by id", id, len(s.subs), len(s.subsByID))
	}
	heldBytes, heldCount := 0, 0
	for key, sub := range s.subs {
		if sub.key != key || s.subsByID[sub.id] != sub {
			return fmt.Errorf("session %d: subscription %d indexed inconsistently", id, sub.id)
		}
		if sub.id>>subSeqBits != uint64(id) {
			return fmt.Errorf("session %d: subscription id %d not minted here", id, sub.id)
		}
		if !sub.autoAck && len(sub.held) > int(max(sub.prefetch, 1)) {
			return fmt.Errorf("session %d: subscription %d holds %d deliveries over prefetch %d", id, sub.id, len(sub.held), sub.prefetch)
		}
		if s.conn != 0 && s.gateOpen && sub.announced && len(sub.held) != 0 {
			return fmt.Errorf("session %d: subscription %d holds deliveries it could send", id, sub.id)
		}
		if !sub.announced && s.conn == 0 {
			return fmt.Errorf("session %d: subscription %d unannounced with its attachment gone (a ghost)", id, sub.id)
		}
		if sub.paused && s.conn != 0 && s.gateOpen {
			return fmt.Errorf("session %d: subscription %d paused behind an open gate", id, sub.id)
		}
		for i := range sub.held {
			heldBytes += len(sub.held[i].Body.Payload)
		}
		heldCount += len(sub.held)
	}
	if heldBytes != s.heldBytes || heldCount != s.heldCount {
		return fmt.Errorf("session %d: held bytes %d, counted %d; held deliveries %d, counted %d", id, s.heldBytes, heldBytes, s.heldCount, heldCount)
	}
	if s.heldCount > heldDeliveriesMax {
		return fmt.Errorf("session %d: %d held deliveries, over their bound", id, s.heldCount)
	}
	return nil
}

// errorf is fmt.Errorf, named for the invariant checks.
func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// sessionAssert panics when cond is false: only a bug can break these.
func sessionAssert(cond bool, why string) {
	if !cond {
		panic("fibril/core/node session invariant violated: " + why)
	}
}
