package node

import (
	"flag"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
	"pgregory.net/rapid"
)

// TestSessionAgainstModel drives one Session with random frames, attaches,
// connection losses, ticks, Node answers, partition steps, deliveries
// (including ghosts) and broker-side ends, playing the Node and two
// partitions with small models whose inboxes lag behind the session (as
// envelopes do). After every step it checks what a client and the other
// machines can observe:
//   - no push on a connection before its handshake was answered (or one
//     heartbeat interval passed), and none before a pending reconcile's
//     result;
//   - frames only to the one attached connection, never after its close;
//   - every reply answers an outstanding request of that very connection,
//     at most once;
//   - no DELIVER for a subscription the client was not told about;
//   - a partition gets requests only after its Open succeeded;
//   - a dormant session's subscriptions are paused once their partition
//     caught up, so nothing new is delivered to nobody;
//   - an ended session emits only AttachRefused and Unsubscribe, and once
//     every inbox is drained no partition keeps a subscription of it (no
//     ghost subscriptions);
//   - CheckInvariants after every step (prefetch-bounded held deliveries,
//     outbox bounds, at most one connection).
func TestSessionAgainstModel(t *testing.T) {
	rapid.Check(t, checkSessionModel)
	t.Logf("%d sessions, %d machine steps", sessModelSessions, sessModelSteps)
}

// TestSessionAgainstModelRegressions replays the fail files of defects the
// model found (testdata/), so each stays fixed. announce-ends-session: a
// subscription announced on a shutting-down session whose held deliveries
// then overflowed the outbox; the cut ended the session, and its skeleton
// was changed after it ended.
func TestSessionAgainstModelRegressions(t *testing.T) {
	for _, name := range []string{"session-announce-ends-session.fail"} {
		t.Run(name, func(t *testing.T) {
			prev := flag.Lookup("rapid.failfile").Value.String()
			if err := flag.Set("rapid.failfile", filepath.Join("testdata", name)); err != nil {
				t.Fatal(err)
			}
			defer flag.Set("rapid.failfile", prev)
			rapid.Check(t, checkSessionModel)
		})
	}
}

func checkSessionModel(t *rapid.T) {
	{
		m := newSessModel(t)
		var actions map[string]func(*rapid.T)
		bind := func() {
			actions = map[string]func(*rapid.T){
				"attach":     m.actAttach,
				"close":      m.actClose,
				"frame":      m.actFrame,
				"staleFrame": m.actStaleFrame,
				"staleClose": m.actStaleClose,
				"authAnswer": m.actAuthAnswer,
				"tick":       m.actTick,
				"written":    m.actWritten,
				"nodeStep":   m.actNodeStep,
				"partStep":   m.actPartitionStep,
				"deliver":    m.actDeliver,
				"ghost":      m.actGhost,
				"subEnded":   m.actSubEnded,
				"shutdown":   m.actShutdown,
				"lease":      m.actLeaseExpiry,
			}
		}
		bind()
		// Weighted: client frames and the partitions' work dominate, as in
		// a real session; lifecycle events are rarer. rapid draws small
		// indexes more often than large ones, so the common actions come
		// first and the disruptive ones last.
		names := []string{"frame", "partStep", "nodeStep", "authAnswer", "written", "deliver", "frame", "partStep", "nodeStep",
			"tick", "frame", "deliver", "written", "partStep", "attach", "frame", "tick", "lease", "staleFrame", "staleClose", "close", "ghost",
			"subEnded", "deliver", "shutdown"}
		steps := rapid.IntRange(200, 700).Draw(t, "steps")
		sessions := 1
		for i := 0; i < steps; i++ {
			actions[rapid.SampledFrom(names).Draw(t, "action")](t)
			if m.h.ended {
				// Check the ended session, then go on with a fresh one: most
				// of a run is spent on live sessions.
				m.finish(t)
				m = newSessModel(t)
				bind()
				sessions++
			}
		}
		m.finish(t)
		sessModelSessions += sessions
	}
}

var sessModelQueues = []core.QueueID{{Topic: "a"}, {Topic: "b", Group: "g"}}

type sessModel struct {
	h        *sessHarness
	t        *rapid.T
	nextConn ConnID
	attached ConnID
	conns    map[ConnID]*sessModelConn
	authed   bool // AUTH_OK seen on some connection of the session
	draining bool
	// drainDeadlineMs: the drain's grace ends (draining); until then a
	// lost transport still makes the session dormant (PROTOCOL 5.23).
	drainDeadlineMs int64
	nodeQ           []Message
	parts           map[core.QueueID]*sessModelPartition
	// announced: sub ids the client was told (SUBSCRIBE_OK, RECONCILE_RESULT).
	// A subscription whose answer could not reach its asker (the connection
	// went) must never deliver: no ghost ids, even across a resume.
	announced map[uint64]bool
	opened    map[core.QueueID]bool
	nextTag   uint64
	// lostAtMs: when the session last lost its transport (0: attached).
	lostAtMs int64
	// autoTags: auto-ack deliveries handed to the session and not yet seen
	// in a DELIVER (tag -> sub id): settled at the partition, so each must
	// be sent or still held while its subscription lives.
	autoTags map[uint64]uint64
}

type sessModelConn struct {
	helloAtMs   int64
	answered    bool // a non-AUTH request was answered, or needs no answer
	outstanding map[uint64]wire.Opcode
	reconciling bool
	// deferred: a request that opens the gate waits behind a password check.
	deferred bool
	// confirmed: request ids of confirmed publishes, in arrival order.
	confirmed []uint64
}

type sessModelPartition struct {
	inbox []*Request
	subs  map[uint64]*sessModelSub
}

type sessModelSub struct {
	prefetch uint32
	autoAck  bool
	paused   bool
	inflight int
}

func newSessModel(t *rapid.T) *sessModel {
	grace := int64(3000)
	if sessChance(t, "noGrace", 12) {
		grace = 0
	}
	// A small outbox (one largest frame): held deliveries near the held
	// byte bound no longer fit it with their frame headers, so releasing
	// them at a resume reaches the outbox bound mid-way.
	outboxBytes := 1 << 20
	if sessChance(t, "smallOutbox", 20) {
		outboxBytes = 64 << 10
	}
	h := newSessHarness(t, func(c *Config) {
		c.ReconnectGraceMs = grace
		c.OutboxBytesMax = outboxBytes
		c.FramePayloadBytesMax = 64 << 10
		c.SubscriptionsPerSessionMax = 3
	})
	m := &sessModel{h: h, t: t, conns: map[ConnID]*sessModelConn{}, parts: map[core.QueueID]*sessModelPartition{},
		announced: map[uint64]bool{}, opened: map[core.QueueID]bool{}, autoTags: map[uint64]uint64{}}
	for _, q := range sessModelQueues {
		m.parts[q] = &sessModelPartition{subs: map[uint64]*sessModelSub{}}
	}
	m.parts[core.QueueID{Topic: "a", Partition: 1}] = &sessModelPartition{subs: map[uint64]*sessModelSub{}}
	m.actAttach(t)
	if !sessChance(t, "startUnauthed", 10) {
		m.sendFrame(m.attached, wire.OpAuth, wire.Auth{Username: "alice", Password: "pw"})
		m.actAuthAnswer(t)
	}
	return m
}

// step feeds one input and checks everything it produced.
func (m *sessModel) step(in Input) {
	sessModelSteps++
	wasDormant, wasAttached := m.h.s.dormant, m.h.s.conn != 0
	m.h.step(in)
	if wasAttached && m.h.s.dormant {
		m.lostAtMs = m.h.now
	}
	// Only the held bounds may end a dormant session early (a delivery that
	// does not fit them).
	if wasDormant && m.h.ended && m.h.now < m.lostAtMs+m.h.cfg.ReconnectGraceMs && !sessIsDeliveries(in) {
		m.t.Fatalf("a dormant session ended %d ms into a %d ms grace", m.h.now-m.lostAtMs, m.h.cfg.ReconnectGraceMs)
	}
	gateOpen := m.h.s.conn != 0 && m.h.s.gateOpen
	m.routeOut(gateOpen)
	m.checkFrames()
	m.checkDormantPaused()
	m.checkAutoAckKept()
}

func sessIsDeliveries(in Input) bool {
	d, ok := in.(*Deliver)
	if !ok {
		return false
	}
	_, ok = d.Envelope.Msg.(*Deliveries)
	return ok
}

// checkAutoAckKept: an auto-ack delivery is never dropped while its
// subscription lives (it is sent, or held for the next attachment).
func (m *sessModel) checkAutoAckKept() {
	for _, tag := range sessSortedKeys(m.autoTags) {
		sub := m.h.s.subsByID[m.autoTags[tag]]
		if sub == nil {
			delete(m.autoTags, tag) // gone with its subscription
			continue
		}
		if !slices.ContainsFunc(sub.held, func(d core.Delivery) bool { return d.Tag == tag }) {
			m.t.Fatalf("auto-ack delivery %d of sub %d neither sent nor held: lost", tag, sub.id)
		}
	}
}

func sessSortedKeys(m map[uint64]uint64) []uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// routeOut moves the session's envelopes into the model inboxes;
// gateOpen says whether the step left an attachment with an open gate.
func (m *sessModel) routeOut(gateOpen bool) {
	// Deliveries restart only once they can be sent: before, an auto-ack
	// subscription would just pile them up held. (A step may unpause and
	// pause again, or end: the gate opened, then the outbox bound cut.)
	lastPause := map[uint64]bool{}
	defer func() {
		for _, id := range slices.Sorted(maps.Keys(lastPause)) {
			if !lastPause[id] && !gateOpen {
				m.t.Fatalf("sub %d unpaused behind a closed gate", id)
			}
		}
	}()
	for _, env := range m.h.takeOut() {
		switch msg := env.Msg.(type) {
		case *Request:
			q := env.To.Queue
			switch in := msg.Input.(type) {
			case *core.PauseSubscription:
				lastPause[in.SubID] = in.Paused
			case *core.Unsubscribe:
				lastPause[in.SubID] = true // ended after all (the cut ended the session)
			}
			p := m.parts[q]
			if p == nil {
				m.t.Fatalf("request to unknown partition %v", q)
			}
			// A ghost's Unsubscribe answers the partition that delivered.
			if _, handBack := msg.Input.(*core.Unsubscribe); !m.opened[q] && !handBack {
				m.t.Fatalf("request %s to %v before its Open succeeded", sessTypeName(msg), q)
			}
			p.inbox = append(p.inbox, msg)
		case *Open, *DeclareQueue, *SkeletonChanged, *SessionEnded, *AttachRefused:
			m.nodeQ = append(m.nodeQ, msg)
		default:
			m.t.Fatalf("unexpected envelope %T", msg)
		}
	}
}

// checkFrames checks every frame the session sent in the last step.
func (m *sessModel) checkFrames() {
	for conn, frames := range m.h.sent {
		if len(frames) == 0 {
			continue
		}
		m.h.sent[conn] = nil
		if conn != m.attached {
			m.t.Fatalf("frames to conn %d while %d is attached", conn, m.attached)
		}
		c := m.conns[conn]
		for _, f := range frames {
			m.checkFrame(c, f)
		}
	}
}

func (m *sessModel) checkFrame(c *sessModelConn, f sessFrame) {
	op := f.hdr.Opcode
	switch op {
	case wire.OpDeliver, wire.OpPing, wire.OpSubscriptionClosed, wire.OpGoingAway:
		gateByTime := m.h.now-c.helloAtMs >= m.h.cfg.HeartbeatIntervalMs
		if !gateByTime && (!c.answered || c.reconciling) {
			m.t.Fatalf("push %s before the handshake was answered", op)
		}
		if op == wire.OpDeliver {
			d := f.body.(wire.Deliver)
			delete(m.autoTags, d.DeliveryTag)
			if !m.announced[d.SubID] {
				m.t.Fatalf("DELIVER for sub %d before the client learned of it", d.SubID)
			}
		}
		return
	case wire.OpHelloOk:
		return
	}
	want, ok := c.outstanding[f.hdr.RequestID]
	if !ok {
		m.t.Fatalf("%s answers request %d, not outstanding on this connection", op, f.hdr.RequestID)
	}
	if op == wire.OpPublishOk {
		// PROTOCOL 7.2: confirms leave in arrival order, across queues.
		for _, earlier := range c.confirmed {
			if earlier == f.hdr.RequestID {
				break
			}
			if _, waiting := c.outstanding[earlier]; waiting {
				m.t.Fatalf("PUBLISH_OK for %d overtook the confirm of %d", f.hdr.RequestID, earlier)
			}
		}
	}
	delete(c.outstanding, f.hdr.RequestID)
	if want != wire.OpAuth && want != wire.OpPing && want != wire.OpPong {
		c.answered = true
	}
	switch op {
	case wire.OpAuthOk:
		m.authed = true
		if c.deferred {
			c.answered = true
		}
	case wire.OpSubscribeOk:
		m.announced[f.body.(wire.SubscribeOk).SubID] = true
	case wire.OpReconcileResult:
		c.reconciling = false
		for _, e := range f.body.(wire.ReconcileResult).Entries {
			if e.Server.Present {
				m.announced[e.Server.Value.SubID] = true
			}
		}
	}
}

// ---- actions

func (m *sessModel) actAttach(t *rapid.T) {
	if m.attached != 0 && m.h.closed[m.attached] {
		m.attached = 0
	}
	m.nextConn++
	conn := m.nextConn
	m.conns[conn] = &sessModelConn{helloAtMs: m.h.now, outstanding: map[uint64]wire.Opcode{1: wire.OpHello}}
	ended := m.h.ended
	old := m.attached
	// The client's first frames may overtake the Attach envelope, and so
	// may the driver's report that the peer closed it: then nothing may
	// be sent on it and the session keeps what it had.
	if !ended && sessChance(t, "early", 25) {
		m.sendFrame(conn, wire.OpPing, wire.Ping{})
	}
	// (Not the first: a session that never had a connection just ends.)
	earlyClosed := !ended && conn > 1 && sessChance(t, "earlyClosed", 8)
	if earlyClosed {
		m.h.closed[conn] = true
		m.step(&ConnClosed{NowMs: m.h.now, Conn: conn})
		ended = m.h.ended
	}
	wasDormant := m.h.s.dormant
	if !ended && !earlyClosed {
		m.attached = conn
	}
	m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: NodeAddr(), To: SessionAddr(sessTestID),
		Msg: &Attach{Conn: conn, Loopback: true, HelloRequestID: 1, Outcome: wire.ResumeResumed}}})
	if ended {
		if _, ok := m.nodeQ[len(m.nodeQ)-1].(*AttachRefused); !ok {
			t.Fatal("an ended session did not refuse the attach")
		}
		return
	}
	delete(m.conns[conn].outstanding, 1)
	if earlyClosed {
		if m.h.s.conn == conn || (wasDormant && !m.h.s.dormant && !m.h.ended) {
			t.Fatalf("the session attached connection %d after its close (dormant before %v, after %v)", conn, wasDormant, m.h.s.dormant)
		}
		return
	}
	if old != 0 && !m.h.closed[old] {
		t.Fatal("a resume left the previous connection open")
	}
}

// actStaleClose reports the close of a connection that is not attached
// (one the session closed or replaced itself: the driver's report comes
// later): the session ignores it, and it must not hide the close of a
// newer connection that overtakes its Attach (actAttach's earlyClosed).
func (m *sessModel) actStaleClose(t *rapid.T) {
	if m.nextConn < 1 {
		return
	}
	conn := ConnID(rapid.IntRange(1, int(m.nextConn)).Draw(t, "staleConn"))
	if conn == m.attached && !m.h.closed[conn] {
		return
	}
	m.step(&ConnClosed{NowMs: m.h.now, Conn: conn})
}

func (m *sessModel) actClose(t *rapid.T) {
	if m.attached == 0 {
		return
	}
	conn := m.attached
	m.attached = 0
	m.h.closed[conn] = true
	wasAuthed, wasAttached := m.h.s.authed, m.h.s.conn == conn
	m.step(&ConnClosed{NowMs: m.h.now, Conn: conn})
	inDrainGrace := !m.draining || m.h.now < m.drainDeadlineMs
	if wasAttached && wasAuthed && m.h.cfg.ReconnectGraceMs > 0 && inDrainGrace && !m.h.s.dormant {
		t.Fatal("an authenticated session with grace (and in a drain's grace, if draining) did not go dormant")
	}
	if wasAttached && m.draining && !inDrainGrace && !m.h.ended {
		t.Fatal("a session held past the drain's grace")
	}
}

// actFrame sends one random client frame on the attached connection.
func (m *sessModel) actFrame(t *rapid.T) {
	if m.attached == 0 || m.h.closed[m.attached] {
		return
	}
	op, body := m.drawFrame(t)
	m.sendFrame(m.attached, op, body)
}

func (m *sessModel) sendFrame(conn ConnID, op wire.Opcode, body wire.Body) {
	m.h.reqID++
	id := m.h.reqID
	var payload []byte
	if body != nil {
		payload = body.AppendTo(nil)
	}
	c := m.conns[conn]
	c.outstanding[id] = op
	if p, ok := body.(wire.Publish); ok && p.RequireConfirm {
		c.confirmed = append(c.confirmed, id)
	}
	// Serving any request but AUTH, PING and PONG opens the gate (a
	// RECONCILE_CLIENT with its result); one behind a password check
	// opens it once that check passed.
	switch op {
	case wire.OpAuth, wire.OpPing, wire.OpPong:
	case wire.OpReconcileClient:
		// Its result opens a gate still closed; an open one stays open.
		c.reconciling = !c.answered && !c.deferred
	default:
		if m.h.s.auth.pending {
			c.deferred = true
		} else if m.h.s.authed {
			c.answered = true
		}
	}
	m.step(&Frame{NowMs: m.h.now, Conn: conn, Header: wire.Header{Opcode: op, RequestID: id, PayloadSizeBytes: uint32(len(payload))}, Payload: payload})
}

func (m *sessModel) drawFrame(t *rapid.T) (wire.Opcode, wire.Body) {
	q := rapid.SampledFrom(append(sessModelQueues, core.QueueID{Topic: "a", Partition: 1})).Draw(t, "queue")
	group := groupOpt(q.Group)
	// Ordered by how often a client sends each (rapid favours the front).
	kinds := []string{"publish", "subscribe", "ack", "publish", "nack", "ping", "subscribe", "reconcile", "topology",
		"declare", "pong", "auth", "odd"}
	kind := rapid.SampledFrom(kinds).Draw(t, "op")
	if !m.h.s.authed && !sessChance(t, "strayBeforeAuth", 20) {
		kind = "auth" // clients authenticate first; stray frames before it end the session
	}
	switch kind {
	case "auth":
		pw := "pw"
		if sessChance(t, "badPassword", 15) {
			pw = "bad"
		}
		return wire.OpAuth, wire.Auth{Username: "alice", Password: pw}
	case "ping":
		return wire.OpPing, wire.Ping{}
	case "pong":
		return wire.OpPong, wire.Pong{}
	case "publish":
		topic := q.Topic
		if sessChance(t, "badTopic", 10) {
			topic = "BAD"
		}
		return wire.OpPublish, wire.Publish{Topic: topic, Group: group, Partition: q.Partition,
			RequireConfirm: rapid.Bool().Draw(t, "confirm"), Payload: []byte("p")}
	case "subscribe":
		return wire.OpSubscribe, wire.Subscribe{Topic: q.Topic, Group: group, Partition: q.Partition,
			Prefetch: uint32(rapid.IntRange(0, 3).Draw(t, "prefetch")), AutoAck: rapid.Bool().Draw(t, "autoAck")}
	case "ack":
		return wire.OpAck, wire.Ack{Topic: q.Topic, Group: group, Partition: q.Partition, Tags: []uint64{m.nextTag}}
	case "nack":
		return wire.OpNack, wire.Nack{Topic: q.Topic, Group: group, Partition: q.Partition, Tags: []uint64{m.nextTag},
			Requeue: rapid.Bool().Draw(t, "requeue")}
	case "declare":
		return wire.OpDeclareQueue, wire.DeclareQueue{Topic: q.Topic, Group: group}
	case "topology":
		return wire.OpTopology, wire.Topology{}
	case "reconcile":
		var subs []wire.ReconcileSub
		for _, rq := range sessModelQueues {
			if rapid.Bool().Draw(t, "listed") {
				subs = append(subs, wire.ReconcileSub{SubID: uint64(rapid.IntRange(0, 3).Draw(t, "subID")), Topic: rq.Topic,
					Group: groupOpt(rq.Group), Prefetch: uint32(rapid.IntRange(0, 2).Draw(t, "rprefetch")), AutoAck: rapid.Bool().Draw(t, "rauto")})
			}
		}
		policy := wire.ReconcilePolicy(rapid.IntRange(0, 1).Draw(t, "policy"))
		return wire.OpReconcileClient, wire.ReconcileClient{Policy: policy, Subscriptions: subs}
	default:
		return wire.Opcode(rapid.SampledFrom([]uint16{1, 62, 999}).Draw(t, "odd")), wire.Ping{}
	}
}

// actStaleFrame sends on a connection that is no longer attached: the
// session must ignore it (nothing is sent to a closed connection).
func (m *sessModel) actStaleFrame(t *rapid.T) {
	if m.nextConn < 2 {
		return
	}
	conn := ConnID(rapid.IntRange(1, int(m.nextConn)-1).Draw(t, "oldConn"))
	if conn == m.attached {
		return
	}
	m.sendFrame(conn, wire.OpPing, wire.Ping{})
}

func (m *sessModel) actAuthAnswer(t *rapid.T) {
	if len(m.h.checks) == 0 {
		return
	}
	chk := m.h.checks[0]
	m.h.checks = m.h.checks[1:]
	match := chk.Password == "pw"
	m.step(&AuthChecked{NowMs: m.h.now, Token: chk.Token, Known: true, Match: match})
}

func (m *sessModel) actTick(t *rapid.T) {
	m.h.now += rapid.Int64Range(0, 2500).Draw(t, "dtMs")
	m.step(&Tick{NowMs: m.h.now})
	// A live client heartbeats too (PROTOCOL 1.5); a silent one is cut.
	if m.attached != 0 && !m.h.closed[m.attached] && !sessChance(t, "silent", 10) {
		m.sendFrame(m.attached, wire.OpPing, wire.Ping{})
	}
}

func (m *sessModel) actWritten(t *rapid.T) {
	if m.attached == 0 || m.h.closed[m.attached] || m.h.s.unwrittenBytes == 0 {
		return
	}
	n := m.h.s.unwrittenBytes // a reading client drains its socket
	if rapid.Bool().Draw(t, "partialWrite") {
		n = rapid.IntRange(1, m.h.s.unwrittenBytes).Draw(t, "bytes")
	}
	m.step(&Written{NowMs: m.h.now, Conn: m.attached, Bytes: n})
}

// actNodeStep answers the Node's oldest message.
func (m *sessModel) actNodeStep(t *rapid.T) {
	// Skeletons, ends and refusals need no answer: the Node takes them
	// as they come.
	for len(m.nodeQ) > 0 && !sessNeedsAnswer(m.nodeQ[0]) {
		m.nodeQ = m.nodeQ[1:]
	}
	if len(m.nodeQ) == 0 {
		return
	}
	msg := m.nodeQ[0]
	m.nodeQ = m.nodeQ[1:]
	switch msg := msg.(type) {
	case *Open:
		q := core.QueueID{Topic: msg.Topic, Group: msg.Group, Partition: msg.Partition}
		var err *core.Error
		if q.Partition > 0 || sessChance(t, "openFails", 10) {
			err = core.ErrInvalidSettings
		} else {
			m.opened[q] = true
		}
		m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: NodeAddr(), To: SessionAddr(sessTestID),
			Msg: &Opened{Token: msg.Token, Queue: q, Partitions: 1, Err: err}}})
	case *DeclareQueue:
		m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: NodeAddr(), To: SessionAddr(sessTestID),
			Msg: &Declared{Token: msg.Token, Partitions: 1}}})
	}
}

func sessNeedsAnswer(msg Message) bool {
	switch msg.(type) {
	case *Open, *DeclareQueue:
		return true
	}
	return false
}

// actPartitionStep lets a partition take its oldest request.
func (m *sessModel) actPartitionStep(t *rapid.T) {
	q := rapid.SampledFrom(sessModelQueues).Draw(t, "partition")
	p := m.parts[q]
	if len(p.inbox) == 0 {
		return
	}
	req := p.inbox[0]
	p.inbox = p.inbox[1:]
	reply := core.Reply{Kind: core.ReplyError, Err: core.ErrUnknownSubscription}
	switch in := req.Input.(type) {
	case *core.Publish:
		reply = core.Reply{Kind: core.ReplyPublished, Offset: 1}
		if sessChance(t, "publishFails", 15) {
			reply = core.Reply{Kind: core.ReplyError, Err: core.ErrQueueFull}
		}
	case *core.Subscribe:
		if _, dup := p.subs[in.SubID]; dup {
			t.Fatalf("sub %d subscribed twice", in.SubID)
		}
		if sessChance(t, "subscribeFails", 15) {
			reply = core.Reply{Kind: core.ReplyError, Err: core.ErrTooManySubscriptions}
		} else {
			p.subs[in.SubID] = &sessModelSub{prefetch: max(in.Prefetch, 1), autoAck: in.AutoAck}
			reply = core.Reply{Kind: core.ReplySubscribed}
			// The partition dispatches in the step that subscribes: its
			// deliveries may reach the session ahead of the answer.
			if rapid.Bool().Draw(t, "deliverFirst") {
				m.deliverTo(q, in.SubID)
			}
		}
	case *core.Unsubscribe:
		delete(p.subs, in.SubID)
	case *core.PauseSubscription:
		if sub := p.subs[in.SubID]; sub != nil {
			sub.paused = in.Paused
		}
	case *core.Ack:
		if sub := p.subs[in.SubID]; sub != nil && sub.inflight > 0 {
			sub.inflight--
		}
	case *core.Nack:
		if sub := p.subs[in.SubID]; sub != nil && sub.inflight > 0 {
			sub.inflight--
		}
	}
	if req.Token != 0 {
		m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: PartitionAddr(q), To: SessionAddr(sessTestID),
			Msg: &Response{Token: req.Token, Reply: reply}}})
	}
}

// actDeliver hands a delivery to a registered, unpaused subscription.
func (m *sessModel) actDeliver(t *rapid.T) {
	q := rapid.SampledFrom(sessModelQueues).Draw(t, "dq")
	p := m.parts[q]
	ids := sessSortedModelSubs(p)
	if len(ids) == 0 {
		return
	}
	m.deliverTo(q, rapid.SampledFrom(ids).Draw(t, "sub"))
}

// deliverTo delivers a batch of up to four messages to sub, as far as it
// has credit (a partition dispatches in batches: a resume then releases
// several held ones at once).
func (m *sessModel) deliverTo(q core.QueueID, id uint64) {
	sub := m.parts[q].subs[id]
	n := rapid.IntRange(1, 4).Draw(m.t, "batch")
	var items []core.Delivery
	for len(items) < n && !sub.paused && (sub.autoAck || sub.inflight < int(sub.prefetch)) {
		if !sub.autoAck {
			sub.inflight++
		}
		m.nextTag++
		if sub.autoAck {
			m.autoTags[m.nextTag] = id
		}
		// Some payloads are large, so a client that reports nothing
		// written reaches the outbox bound.
		body := sessBody("d")
		switch {
		case sessChance(m.t, "large", 5):
			body = &core.Body{Payload: make([]byte, 200<<10)}
		case m.h.cfg.OutboxBytesMax < 1<<20 && sessChance(m.t, "medium", 50):
			// Four fit the held bound (64 KiB) but not, with their frame
			// headers and HELLO_OK, the outbox.
			body = &core.Body{Payload: make([]byte, 16<<10-8)}
		}
		items = append(items, core.Delivery{SubID: id, Tag: m.nextTag, Offset: m.nextTag, Body: body})
	}
	if len(items) == 0 {
		return
	}
	m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: PartitionAddr(q), To: SessionAddr(sessTestID),
		Msg: &Deliveries{Queue: q, SubID: id, Items: items}}})
}

// actLeaseExpiry: a lease ran out, so the partition may deliver again.
func (m *sessModel) actLeaseExpiry(t *rapid.T) {
	q := rapid.SampledFrom(sessModelQueues).Draw(t, "lq")
	p := m.parts[q]
	for _, id := range sessSortedModelSubs(p) {
		if p.subs[id].inflight > 0 {
			p.subs[id].inflight--
			return
		}
	}
}

func (m *sessModel) actGhost(t *rapid.T) {
	q := rapid.SampledFrom(sessModelQueues).Draw(t, "gq")
	id := uint64(sessTestID)<<subSeqBits | 1<<20
	m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: PartitionAddr(q), To: SessionAddr(sessTestID),
		Msg: &Deliveries{Queue: q, SubID: id, Items: []core.Delivery{{SubID: id, Tag: 1, Body: sessBody("g")}}}}})
	p := m.parts[q]
	if len(p.inbox) == 0 {
		t.Fatal("a ghost delivery was not handed back")
	}
	last := p.inbox[len(p.inbox)-1]
	if u, ok := last.Input.(*core.Unsubscribe); !ok || u.SubID != id {
		t.Fatalf("a ghost delivery was answered with %s", sessTypeName(last))
	}
	p.inbox = p.inbox[:len(p.inbox)-1]
}

func (m *sessModel) actSubEnded(t *rapid.T) {
	q := rapid.SampledFrom(sessModelQueues).Draw(t, "eq")
	p := m.parts[q]
	ids := sessSortedModelSubs(p)
	if len(ids) == 0 {
		return
	}
	id := rapid.SampledFrom(ids).Draw(t, "endedSub")
	delete(p.subs, id)
	m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: PartitionAddr(q), To: SessionAddr(sessTestID),
		Msg: &SubscriptionEnded{Queue: q, SubID: id, Code: wire.ReasonOwnerMoved}}})
}

func (m *sessModel) actShutdown(t *rapid.T) {
	if !sessChance(t, "drain", 20) {
		return // rare: after its grace, a drain ends the session at its next disconnect
	}
	graceMs := rapid.SampledFrom([]int64{0, 100, 4000}).Draw(t, "drainGraceMs")
	if !m.draining || m.h.now+graceMs < m.drainDeadlineMs {
		m.drainDeadlineMs = m.h.now + graceMs
	}
	m.draining = true
	m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: NodeAddr(), To: SessionAddr(sessTestID),
		Msg: &ShuttingDown{GraceMs: graceMs, Message: "drain"}}})
}

// sessChance draws an event of about pct percent. rapid favours small values
// heavily (about 40% of IntRange(0, 99) lands in 0-9), so the event is the
// top of the range, where the draws are close to uniform.
func sessChance(t *rapid.T, label string, pct int) bool {
	return rapid.IntRange(0, 99).Draw(t, label) >= 100-pct
}

func sessSortedModelSubs(p *sessModelPartition) []uint64 {
	ids := make([]uint64, 0, len(p.subs))
	for id := range p.subs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// checkDormantPaused: once a partition took every request, a dormant
// session's subscriptions there are paused.
func (m *sessModel) checkDormantPaused() {
	if !m.h.s.dormant {
		return
	}
	for _, q := range sessModelQueues {
		p := m.parts[q]
		if len(p.inbox) > 0 {
			continue
		}
		for _, id := range sessSortedModelSubs(p) {
			if !p.subs[id].paused && m.h.s.subsByID[id] != nil {
				m.t.Fatalf("dormant session's sub %d on %v is not paused", id, q)
			}
		}
	}
}

// finish ends the session and drains every inbox: no partition may keep a
// subscription of an ended session.
func (m *sessModel) finish(t *rapid.T) {
	m.checkDormantPaused()
	if m.attached != 0 && !m.h.closed[m.attached] {
		m.actClose(t)
	}
	m.h.now += m.h.cfg.ReconnectGraceMs + 1
	m.step(&Tick{NowMs: m.h.now})
	if !m.h.ended {
		t.Fatal("the session did not end after its grace")
	}
	for round := 0; round < 1000; round++ {
		progress := false
		for len(m.nodeQ) > 0 {
			m.actNodeStep(t)
			progress = true
		}
		for _, q := range sessModelQueues {
			for len(m.parts[q].inbox) > 0 {
				m.drainPartition(q)
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	for _, q := range sessModelQueues {
		if ids := sessSortedModelSubs(m.parts[q]); len(ids) > 0 {
			t.Fatalf("ghost subscriptions %v on %v after the session ended", ids, q)
		}
	}
}

// drainPartition is actPartitionStep without random failures.
func (m *sessModel) drainPartition(q core.QueueID) {
	p := m.parts[q]
	req := p.inbox[0]
	p.inbox = p.inbox[1:]
	reply := core.Reply{Kind: core.ReplyPublished}
	switch in := req.Input.(type) {
	case *core.Subscribe:
		p.subs[in.SubID] = &sessModelSub{prefetch: max(in.Prefetch, 1)}
		reply = core.Reply{Kind: core.ReplySubscribed}
	case *core.Unsubscribe:
		delete(p.subs, in.SubID)
	}
	if req.Token != 0 {
		m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: PartitionAddr(q), To: SessionAddr(sessTestID),
			Msg: &Response{Token: req.Token, Reply: reply}}})
	}
}

var sessModelSessions, sessModelSteps int
