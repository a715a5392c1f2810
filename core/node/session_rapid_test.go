package node

import (
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
	rapid.Check(t, func(t *rapid.T) {
		m := newSessModel(t)
		var actions map[string]func(*rapid.T)
		bind := func() {
			actions = map[string]func(*rapid.T){
				"attach":     m.actAttach,
				"close":      m.actClose,
				"frame":      m.actFrame,
				"staleFrame": m.actStaleFrame,
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
			"tick", "frame", "deliver", "written", "partStep", "attach", "frame", "tick", "lease", "staleFrame", "close", "ghost",
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
	})
	t.Logf("%d sessions, %d machine steps", sessModelSessions, sessModelSteps)
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
	nodeQ    []Message
	parts    map[core.QueueID]*sessModelPartition
	// announced: sub ids the client was told (SUBSCRIBE_OK, RECONCILE_RESULT),
	// or whose answer the session could not give (the asker was gone).
	announced map[uint64]bool
	opened    map[core.QueueID]bool
	nextTag   uint64
	// lostAtMs: when the session last lost its transport (0: attached).
	lostAtMs int64
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
	h := newSessHarness(t, func(c *Config) {
		c.ReconnectGraceMs = grace
		c.OutboxBytesMax = 1 << 20
		c.FramePayloadBytesMax = 64 << 10
		c.SubscriptionsPerSessionMax = 3
	})
	m := &sessModel{h: h, t: t, conns: map[ConnID]*sessModelConn{}, parts: map[core.QueueID]*sessModelPartition{},
		announced: map[uint64]bool{}, opened: map[core.QueueID]bool{}}
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
	for token := range m.h.s.pending {
		m.markUnannounceable(token)
	}
	wasDormant, wasAttached := m.h.s.dormant, m.h.s.conn != 0
	m.h.step(in)
	if wasAttached && m.h.s.dormant {
		m.lostAtMs = m.h.now
	}
	if wasDormant && m.h.ended && m.h.now < m.lostAtMs+m.h.cfg.ReconnectGraceMs {
		m.t.Fatalf("a dormant session ended %d ms into a %d ms grace", m.h.now-m.lostAtMs, m.h.cfg.ReconnectGraceMs)
	}
	m.routeOut()
	m.checkFrames()
	m.checkDormantPaused()
}

// routeOut moves the session's envelopes into the model inboxes.
func (m *sessModel) routeOut() {
	for _, env := range m.h.takeOut() {
		switch msg := env.Msg.(type) {
		case *Request:
			q := env.To.Queue
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
	// The client's first frames may overtake the Attach envelope.
	if !ended && sessChance(t, "early", 25) {
		m.sendFrame(conn, wire.OpPing, wire.Ping{})
	}
	if !ended {
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
	if old != 0 && !m.h.closed[old] {
		t.Fatal("a resume left the previous connection open")
	}
}

func (m *sessModel) actClose(t *rapid.T) {
	if m.attached == 0 {
		return
	}
	conn := m.attached
	m.attached = 0
	m.h.closed[conn] = true
	wasAuthed := m.h.s.authed
	m.step(&ConnClosed{NowMs: m.h.now, Conn: conn})
	if wasAuthed && m.h.cfg.ReconnectGraceMs > 0 && !m.draining && !m.h.ended && !m.h.s.dormant {
		t.Fatal("an authenticated session with grace neither went dormant nor ended")
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

// deliverTo delivers one message to sub if it has credit.
func (m *sessModel) deliverTo(q core.QueueID, id uint64) {
	sub := m.parts[q].subs[id]
	if sub.paused || (!sub.autoAck && sub.inflight >= int(sub.prefetch)) {
		return
	}
	if !sub.autoAck {
		sub.inflight++
	}
	m.nextTag++
	// Some payloads are large, so a client that reports nothing written
	// reaches the outbox bound.
	body := sessBody("d")
	if sessChance(m.t, "large", 5) {
		body = &core.Body{Payload: make([]byte, 200<<10)}
	}
	m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: PartitionAddr(q), To: SessionAddr(sessTestID),
		Msg: &Deliveries{Queue: q, SubID: id, Items: []core.Delivery{{SubID: id, Tag: m.nextTag, Offset: m.nextTag, Body: body}}}}})
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
	if !sessChance(t, "drain", 4) {
		return // rare: a drain ends the session at its next disconnect
	}
	m.draining = true
	m.step(&Deliver{NowMs: m.h.now, Envelope: Envelope{From: NodeAddr(), To: SessionAddr(sessTestID),
		Msg: &ShuttingDown{GraceMs: 100, Message: "drain"}}})
}

// markUnannounceable: a subscribe (or restore) answered while its asker is
// gone can never be announced to it; deliveries may still reach the new
// connection (which drops them and reconciles).
func (m *sessModel) markUnannounceable(token uint64) {
	op, ok := m.h.s.pending[token]
	if !ok || (op.gen == m.h.s.gen && m.h.s.conn != 0) {
		return
	}
	m.announced[op.subID] = true
	if op.recon != nil {
		for _, sub := range op.recon.restored {
			m.announced[sub.id] = true
		}
	}
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
