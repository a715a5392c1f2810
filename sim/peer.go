package sim

import (
	"fmt"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/transport/wire"
)

// A Peer is one client process speaking the real wire protocol to one
// broker: it encodes frames with transport/wire, writes them as byte
// chunks (sometimes split, as a slow sender's writes are), reassembles what
// arrives into frames and decodes them. It resumes its session after a
// dropped link (HELLO with resume, then RECONCILE_CLIENT), as the Go client
// does. Invariants:
//   - every client operation is recorded as a call when the peer writes it
//     and as a return when the peer decodes its answer, so the history is
//     what the client observed; an answer that never came leaves the call
//     without a return (unknown outcome);
//   - delivery tags belong to a session generation: after any HELLO outcome
//     but resumed they are stale, and the peer never settles them (7.7);
//     after resumed they settle through the new link (late acks);
//   - the handshake is synchronous (PROTOCOL 3.1): HELLO, then AUTH, then
//     RECONCILE_CLIENT, each after the previous answer;
//   - a lost link is re-dialled after ReconnectDelay, forever.
type Peer struct {
	id     uint32
	w      *World
	rng    *Rand
	clock  Clock
	role   peerRole
	broker *Broker
	cutOff bool // on the far side of the current network partition

	link    *Link
	rx      []byte
	state   peerState
	nextReq uint64
	pending map[uint64]*peerOp
	// mode is this link's misbehaviour, drawn at connect.
	mode linkMode
	// tail holds the rest of a split write still to come; later frames
	// queue behind it, so the stream stays in order.
	tail []byte
	wbuf []byte // scratch for encoding one frame
	// unread holds bytes that arrived while the peer was not reading.
	unread         []byte
	notReadingTill int64

	// The session, as HELLO_OK gave it.
	ident    wire.ResumeIdentity
	hasIdent bool
	outcome  wire.ResumeOutcome
	// sessionGen counts sessions: it moves on every outcome but resumed.
	sessionGen uint64
	attachGen  uint64 // counts attachments (HELLO_OKs)
	// lostAtMs is when the peer lost its last link, and lostAuthed whether
	// that link's session was authenticated (so the broker keeps it dormant).
	lostAtMs   int64
	lostAuthed bool
	resuming   bool // this link's HELLO presents the session

	// Producer.
	published           int
	outstandingConfirms int
	roundRobin          []int

	// Consumer.
	subs          []*peerSub
	vanishUntilMs int64
	late          []lateSettle // settles waiting for a link of the same session

	// Stream subscriber (peer_stream.go).
	ssubs []*streamSub

	// Cohort member (peer_cohort.go); nil for other roles. keySeq numbers
	// a producer's publishes per key to cohort queues.
	cohort  *cohortState
	keySeq  map[string]uint64
	lastKey string // the key choosePartition last drew for a cohort queue

	// Declarer.
	declared []bool
	retired  bool // done: never reconnects
}

type peerRole uint8

const (
	roleProducer peerRole = iota + 1
	roleConsumer
	roleDeclarer
	roleRogue // opens only misbehaving links, in the safety phase
	roleStreamProducer
	roleStreamSubscriber
	roleCohortMember // an exclusive consumer of the cohort queues (peer_cohort.go)
)

type peerState uint8

const (
	stateDown peerState = iota
	stateHello
	stateAuth
	stateReconcile
	stateReady
	stateStalled // a misbehaving link waiting to be closed by the broker
)

// linkMode is how a link misbehaves (Faults: stalled and slow clients).
type linkMode uint8

const (
	modeNormal       linkMode = iota
	modeStallHeader           // sends part of the HELLO header, then nothing
	modeNoAuth                // HELLO, then only PINGs, never AUTH
	modeTooLargeHead          // announces a frame over the size cap
)

type opKind uint8

const (
	opPublish opKind = iota + 1
	opSubscribe
	opDeclare
	opReconcile
	opStreamPublish
	opStreamSubscribe
)

type peerOp struct {
	kind    opKind
	op      uint64 // history operation id
	part    int
	msgID   uint64
	confirm bool
	sub     *peerSub
	queue   int
	ssub    *streamSub   // stream subscribe
	spec    *streamSpec  // stream ops
	leaving []leavingSub // a cohort leave's unsubscribes
}

// lateSettle is a settle made while the link was down, sent once the same
// session is attached again.
type lateSettle struct {
	sub         *peerSub
	subGen      uint64
	acks        []batchedAck
	act         checker.SettleAction
	notBeforeMs int64
}

func newPeer(w *World, id uint32, role peerRole, b *Broker, rng *Rand) *Peer {
	p := &Peer{id: id, w: w, rng: rng, role: role, broker: b}
	p.clock = drawClock(rng, &w.faults)
	if role == roleConsumer {
		for i, spec := range w.catalogue {
			if spec.queue.Cohort == "" { // only members subscribe to cohort queues
				p.subs = append(p.subs, &peerSub{part: i})
			}
		}
	}
	if role == roleDeclarer {
		p.declared = make([]bool, len(w.scenario.Queues)+len(w.scenario.Streams))
	}
	return p
}

func (p *Peer) nowMs() int64 { return p.clock.NowMs(p.w.nowMs) }

func (p *Peer) start() {
	p.connect()
	switch p.role {
	case roleConsumer, roleCohortMember:
		p.maintain()
	case roleProducer:
		p.w.after(p.rng.RangeInt64(0, p.w.scenario.Workload.PublishIntervalMaxMs), p.produce)
	case roleStreamProducer:
		p.w.after(p.rng.RangeInt64(0, p.w.scenario.Workload.Stream.PublishIntervalMaxMs), p.produceStream)
	case roleStreamSubscriber:
		p.maintainStreams()
	}
}

// connect dials the broker and sends HELLO (resuming the session it had).
func (p *Peer) connect() {
	if p.link != nil || p.w.stopped || p.retired {
		return
	}
	if p.role == roleRogue && p.w.phase != phaseSafety {
		p.retired = true // rogues leave with the faults
		return
	}
	if p.cohort != nil && p.cohort.freshSession {
		p.cohort.freshSession = false
		p.hasIdent = false // a new session; the old one waits out its grace
	}
	l := p.w.fabric.newLink(p, p.broker)
	p.link, p.rx, p.state, p.nextReq = l, nil, stateHello, 0
	p.pending = map[uint64]*peerOp{}
	p.tail, p.unread, p.notReadingTill = nil, nil, 0
	p.mode = p.drawMode()
	p.w.fabric.write(l, toBroker, nil) // the open
	switch p.mode {
	case modeStallHeader:
		p.w.fault("stalled-handshake", "client %d sends part of a HELLO header and stalls", p.id)
		frame := wire.AppendBodyFrame(nil, wire.OpHello, 1, wire.Hello{ClientName: "sim", ProtocolVersion: wire.ProtocolVersion})
		p.w.fabric.write(l, toBroker, frame[:p.rng.RangeInt64(1, wire.HeaderSizeBytes-1)])
		p.expectClose(l, p.w.nodeCfg.HandshakeTimeoutMs, "a stalled handshake")
		return
	case modeTooLargeHead:
		p.w.fault("oversized-frame", "client %d announces a frame over the size cap", p.id)
		h := wire.Header{PayloadSizeBytes: p.w.nodeCfg.FramePayloadBytesMax + 1, Version: wire.ProtocolVersion, Opcode: wire.OpHello, RequestID: 1}
		hdr := wire.EncodeHeader(h)
		p.w.fabric.write(l, toBroker, hdr[:])
		p.expectClose(l, 0, "a frame over the size cap")
		return
	}
	hello := wire.Hello{ClientName: "fibril-sim", ClientVersion: "1", ProtocolVersion: wire.ProtocolVersion}
	p.resuming = p.hasIdent && p.mode == modeNormal
	if p.resuming {
		hello.Resume = wire.Some(p.ident)
	}
	p.writeFrame(wire.OpHello, hello)
	timeoutMs := p.w.scenario.Workload.ConnectTimeoutMs
	p.w.after(timeoutMs, func() {
		if p.link == l && p.state != stateReady && p.state != stateStalled {
			p.drop("connect timeout")
		}
	})
}

func (p *Peer) drawMode() linkMode {
	if p.w.phase != phaseSafety || p.role == roleDeclarer {
		return modeNormal
	}
	if p.role == roleRogue {
		return []linkMode{modeStallHeader, modeNoAuth, modeTooLargeHead}[p.rng.Intn(3)]
	}
	f := &p.w.faults
	switch r := p.rng.Float64(); {
	case r < f.StalledHandshakeRatio:
		return modeStallHeader
	case r < f.StalledHandshakeRatio+f.NoAuthRatio:
		return modeNoAuth
	case r < f.StalledHandshakeRatio+f.NoAuthRatio+f.OversizeFrameRatio:
		return modeTooLargeHead
	}
	return modeNormal
}

// expectClose: a misbehaving link must be closed by the broker within its
// timeout (plus network slack); a broker that holds it open forever is a
// liveness failure (the defect of no handshake or pre-auth timeout).
func (p *Peer) expectClose(l *Link, timeoutMs int64, what string) {
	p.state = stateStalled
	slackMs := 4*p.w.faults.PacketDelayMaxMs + p.w.faults.PacketDelayTailMs + 2*p.w.faults.KeepaliveTimeoutMs +
		p.w.faults.RestartDelayMaxMs + 2000
	p.w.after(timeoutMs+slackMs, func() {
		if p.link == l && !l.closedAtPeer && !l.doomed && p.broker.up && l.incarnation == p.broker.incarnation {
			p.w.rec.add(checker.Event{Kind: checker.KindDeadLock, Client: p.id,
				Text: fmt.Sprintf("client %d: the broker kept %s open for %dms (timeout %dms)", p.id, what, timeoutMs+slackMs, timeoutMs)})
			p.drop("gave up on a stalled link")
		}
	})
}

// writeFrame encodes one frame and writes it, sometimes split in two
// chunks with a pause between them (a slow sender; the broker must wait
// for the whole frame).
func (p *Peer) writeFrame(op wire.Opcode, body wire.Body) uint64 {
	p.nextReq++
	// The fabric copies what it carries: one scratch buffer serves every frame.
	p.wbuf = wire.AppendBodyFrame(p.wbuf[:0], op, p.nextReq, body)
	p.writeBytes(p.wbuf)
	return p.nextReq
}

func (p *Peer) writeBytes(frame []byte) {
	l := p.link
	if len(p.tail) > 0 {
		p.tail = append(p.tail, frame...)
		return
	}
	if p.w.phase == phaseSafety && len(frame) > 1 && p.rng.Chance(p.w.faults.SplitWriteRatio) {
		cut := p.rng.RangeInt64(1, int64(len(frame)-1))
		p.w.fabric.write(l, toBroker, frame[:cut])
		p.tail = append([]byte(nil), frame[cut:]...)
		p.w.after(p.rng.RangeInt64(1, max(p.w.faults.SplitWriteDelayMaxMs, 1)), func() {
			if p.link == l && !l.closedAtPeer {
				tail := p.tail
				p.tail = nil
				p.w.fabric.write(l, toBroker, tail)
			}
		})
		return
	}
	p.w.fabric.write(l, toBroker, frame)
}

// drop closes the current link on purpose.
func (p *Peer) drop(why string) {
	l := p.link
	if l == nil {
		return
	}
	p.w.fabric.peerClose(l)
	p.lost(why)
}

// onLinkLost: the network told the peer its link is gone.
func (p *Peer) onLinkLost(l *Link, why string) {
	if l == p.link {
		p.lost(why)
	}
}

func (p *Peer) lost(why string) {
	p.w.rec.add(checker.Event{Kind: checker.KindDisconnect, Client: p.id, Text: why})
	p.lostAtMs = p.w.nowMs
	// A session the broker closed itself may have ended (a protocol error,
	// a drain) or moved: a late HELLO of a link this peer had abandoned
	// (delayed by retransmissions) resumes the session onto that link and
	// the broker closes this one, and the session's grace then runs from
	// when the abandoned link died (swarm seed 1144 of steady). A session
	// whose link merely dropped stays dormant for the grace.
	p.lostAuthed = (p.state == stateReady || p.state == stateReconcile) && why != whyClosedByBroker
	p.link, p.state, p.pending, p.rx, p.tail, p.unread = nil, stateDown, nil, nil, nil, nil
	p.outstandingConfirms = 0
	for _, s := range p.subs {
		s.pending = false
		s.batch = nil
	}
	for _, s := range p.ssubs {
		s.reset() // streams are not reconciled: gone with the attachment
	}
	w := &p.w.scenario.Workload
	delayMs := p.rng.RangeInt64(w.ReconnectDelayMinMs, w.ReconnectDelayMaxMs)
	if p.cohort != nil && p.cohort.reconnectDelayMs > 0 {
		delayMs, p.cohort.reconnectDelayMs = p.cohort.reconnectDelayMs, 0
	}
	p.w.after(delayMs, p.connect)
}

// onBytes: a chunk arrived. A peer that is not reading keeps it unread, so
// the broker's socket window stays full.
func (p *Peer) onBytes(l *Link, data []byte) {
	if l != p.link {
		return
	}
	if p.w.nowMs < p.notReadingTill {
		p.unread = append(p.unread, data...)
		return
	}
	if len(p.unread) > 0 {
		// The pause ended but its wake-up has not run yet: what waited
		// goes first, so the stream stays in order (a chunk read before
		// the unread bytes reordered DELIVERs: streams seed 249, swarm).
		data = append(p.unread, data...)
		p.unread = nil
	}
	p.read(l, data)
}

func (p *Peer) read(l *Link, data []byte) {
	p.w.fabric.peerRead(l, len(data))
	if len(p.rx) == 0 {
		p.rx = data // the chunk is the fabric's own copy: no need for another
	} else {
		p.rx = append(p.rx, data...)
	}
	for p.link == l && len(p.rx) >= wire.HeaderSizeBytes {
		h, _ := wire.DecodeHeader(p.rx)
		end := wire.HeaderSizeBytes + int(h.PayloadSizeBytes)
		if len(p.rx) < end {
			break
		}
		payload := p.rx[wire.HeaderSizeBytes:end]
		p.onFrame(h, payload)
		if p.link == l {
			p.rx = p.rx[end:]
		}
	}
}

// stopReading makes the peer stop reading for durationMs (a slow consumer).
func (p *Peer) stopReading(durationMs int64) {
	l := p.link
	if l == nil {
		return
	}
	p.notReadingTill = p.w.nowMs + durationMs
	p.w.after(durationMs, func() {
		if p.link == l && len(p.unread) > 0 {
			data := p.unread
			p.unread = nil
			p.read(l, data)
		}
	})
}

// onFrame handles one decoded frame from the broker.
func (p *Peer) onFrame(h wire.Header, payload []byte) {
	body, err := wire.DecodeBody(h.Opcode, payload)
	if err != nil {
		p.w.abort(fmt.Sprintf("client %d: the broker sent a frame that does not decode (%s): %v", p.id, h.Opcode, err))
		return
	}
	switch m := body.(type) {
	case wire.HelloOk:
		p.onHelloOk(h, m)
	case wire.AuthOk:
		p.onAuthOk()
	case wire.Ping:
		p.writeFrame(wire.OpPong, wire.Pong{})
	case wire.Pong, wire.GoingAway:
	case wire.ReconcileResult:
		p.onReconcileResult(h, m)
	case wire.PublishOk:
		p.onPublishOk(h, m)
	case wire.SubscribeOk:
		p.onSubscribeOk(h, m)
	case wire.Deliver:
		if p.role == roleStreamSubscriber {
			p.onStreamDeliver(m)
		} else {
			p.onDeliver(m)
		}
	case wire.SubscriptionClosed:
		if p.role == roleStreamSubscriber {
			p.streamSubClosed(m.SubID)
		} else {
			p.onSubscriptionClosed(m)
		}
	case wire.AssignmentChanged:
		p.onAssignment(m)
	case wire.DeclareQueueOk, wire.DeclarePlexusOk:
		p.onDeclared(h)
	case wire.ErrorBody:
		p.onError(h, m)
	}
}

func (p *Peer) onHelloOk(h wire.Header, m wire.HelloOk) {
	if p.state != stateHello {
		p.w.abort(fmt.Sprintf("client %d: HELLO_OK outside the handshake", p.id))
		return
	}
	if m.Compliance != wire.ComplianceMarker {
		p.w.abort(fmt.Sprintf("client %d: HELLO_OK with compliance marker %q", p.id, m.Compliance))
		return
	}
	p.attachGen++
	p.outcome = m.ResumeOutcome
	p.recordAttach(m.ResumeOutcome)
	switch m.ResumeOutcome {
	case wire.ResumeResumed:
	case wire.ResumeResumedAfterRestart:
		// The same identity in a fresh, empty session (7.7): every tag
		// held is stale, but the subscriptions are remembered and
		// reconciled (restored server-side) after AUTH.
		p.sessionGen++
		p.late = nil
		for _, s := range p.subs {
			s.gen++
			s.batch, s.pending = nil, false
		}
	default:
		// A fresh session: every tag held is stale, every subscription gone.
		p.sessionGen++
		p.late = nil
		for _, s := range p.subs {
			s.clear()
		}
		p.cohortNewSession()
	}
	p.ident = wire.ResumeIdentity{OwnerID: m.OwnerID, ClientID: m.ClientID, ResumeToken: m.ResumeToken}
	p.hasIdent = true
	if p.mode == modeNoAuth {
		p.w.fault("no-auth", "client %d never authenticates", p.id)
		l := p.link
		p.expectClose(l, p.w.nodeCfg.AuthTimeoutMs, "an unauthenticated session")
		p.pingWhileStalled(l)
		return
	}
	p.state = stateAuth
	p.writeFrame(wire.OpAuth, wire.Auth{Username: "fibril", Password: "fibril"})
}

// outcomeNames names resume outcomes in the history (PROTOCOL 7.7).
var outcomeNames = [...]string{"new", "resumed", "resume_not_found", "resume_rejected", "resumed_after_restart"}

// recordAttach records HELLO_OK's outcome, with the claim the checker
// holds the broker to: a resume of an authenticated session sooner than
// the grace surely covers must find it.
func (p *Peer) recordAttach(outcome wire.ResumeOutcome) {
	name := fmt.Sprintf("outcome(%d)", outcome)
	if int(outcome) < len(outcomeNames) {
		name = outcomeNames[outcome]
	}
	ev := checker.Event{Kind: checker.KindAttach, Client: p.id, Outcome: name, Conn: p.link.id}
	if p.resuming && p.lostAuthed {
		// The safety phase's knobs bound what is still on its way now.
		f := &p.w.safetyFaults
		graceMs := p.w.nodeCfg.ReconnectGraceMs
		// The broker may learn of the loss up to one delivery earlier than
		// the peer, and its clock may run fast.
		slackMs := 2*(f.PacketDelayMaxMs+f.PacketDelayTailMs) + graceMs*f.ClockDriftMaxPpm/1_000_000 + 20
		if bound := graceMs - slackMs; bound > 0 {
			ev.AtMs2, ev.Index2 = p.w.nowMs-p.lostAtMs, uint64(bound)
		}
	}
	p.w.rec.add(ev)
}

// pingWhileStalled keeps an unauthenticated link busy with PINGs, which
// must not keep it alive.
func (p *Peer) pingWhileStalled(l *Link) {
	if p.link != l || l.closedAtPeer || p.w.stopped {
		return
	}
	p.writeFrame(wire.OpPing, wire.Ping{})
	p.w.after(1000, func() { p.pingWhileStalled(l) })
}

func (p *Peer) onAuthOk() {
	if p.state != stateAuth {
		return
	}
	// A resumed consumer always reconciles, even with nothing to list: a
	// subscribe whose answer the dropped link lost may exist on the server
	// (it is then closed server-side, close_server_side). After a restart
	// the reconcile restores what the peer remembers (server_restored).
	if (p.role == roleConsumer || p.role == roleCohortMember) && (p.outcome == wire.ResumeResumed || p.outcome == wire.ResumeResumedAfterRestart) {
		p.reconcile()
		return
	}
	p.ready()
}

func (p *Peer) ready() {
	p.state = stateReady
	switch p.role {
	case roleConsumer, roleCohortMember:
		p.flushLate()
		p.subscribeAll()
	case roleDeclarer:
		p.declareAll()
	case roleStreamSubscriber:
		for _, s := range p.ssubs {
			s.reset() // a new attachment holds no stream subscription
		}
		p.subscribeStreams()
	}
}

func (p *Peer) onError(h wire.Header, m wire.ErrorBody) {
	if p.state == stateHello || p.state == stateAuth || p.state == stateReconcile {
		p.drop(fmt.Sprintf("handshake refused: %d %s", m.Code, m.Message))
		return
	}
	op := p.pending[h.RequestID]
	if op == nil {
		return
	}
	delete(p.pending, h.RequestID)
	errText := fmt.Sprintf("%d %s", m.Code, m.Message)
	switch op.kind {
	case opPublish:
		p.publishReturned(op, false, 0, errText)
	case opSubscribe:
		p.subscribeReturned(op, 0, errText)
	case opDeclare:
		// declareAll tries again on the next connection
	case opStreamPublish:
		p.streamPublishReturned(op, false, 0, errText)
	case opStreamSubscribe:
		p.streamSubscribed(op, 0, errText)
	}
}
