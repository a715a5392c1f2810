package node

import (
	"slices"
	"testing"

	"github.com/fibril-go/fibril/transport/wire"
)

// Regression tests for defects a review of the cohort wiring found, each
// failing on the code before its fix (docs/cohorts.md).

func hostOwners(w *streamWorld) []uint64 {
	var out []uint64
	for p := uint32(0); p < cohortParts; p++ {
		h := w.qhosts[qid(cohortTopic, p)]
		if h == nil {
			out = append(out, 999)
			continue
		}
		sub, _ := h.Partition().Owner()
		out = append(out, sub)
	}
	return out
}

// A cohort forgotten (all members left) and created again restarted its
// generations at boot<<32; the Hosts held the higher generation of the
// previous one's last SetOwner and ignored the new ones: no deliveries.
func TestCohortRecreatedGetsDeliveries(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	joinAll(t, w, 1, "g", 10)
	lastAssignment(t, w, 1, nil)
	if got := deliveredParts(t, w, 1); len(got[1]) != cohortParts {
		t.Fatalf("first member got %v", got)
	}
	t.Logf("owners after first join %v", hostOwners(w))
	w.closeConn(1)
	w.advance(w.cfg.ReconnectGraceMs + 1)
	t.Logf("owners after leave %v", hostOwners(w))
	w.connect(2)
	joinAll(t, w, 2, "g", 10)
	a := lastAssignment(t, w, 2, nil)
	t.Logf("assignment %+v owners %v", a, hostOwners(w))
	if got := deliveredParts(t, w, 2); !slices.Equal(got[2], []uint32{0, 1, 2, 3}) {
		t.Fatalf("a recreated cohort's only member got %v, assigned %v", got[2], a.Assigned)
	}
}

// The member id comes back on another session while the first lives
// (dormant): the partitions the member keeps owning were never pointed at
// the new session's subscriptions.
func TestCohortMemberMovesSessions(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	m := joinAll(t, w, 1, "g", 10)
	lastAssignment(t, w, 1, nil)
	w.closeConn(1) // dormant, within grace
	w.connect(2)
	for p := uint32(0); p < cohortParts; p++ {
		w.frame(2, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: p, Prefetch: 10,
			ConsumerGroup: wire.Some("g"), MemberID: wire.Some(m)})
		if ok := w.take(2, wire.OpSubscribeOk); len(ok) != 1 {
			t.Fatalf("p%d: %+v", p, w.frames[2])
		}
	}
	t.Logf("owners with the member on session 2 %v", hostOwners(w))
	w.advance(w.cfg.ReconnectGraceMs + 1) // session 1 ends
	t.Logf("owners after session 1 ended %v", hostOwners(w))
	if got := deliveredParts(t, w, 2); !slices.Equal(got[2], []uint32{0, 1, 2, 3}) {
		t.Fatalf("member on its new session got %v", got[2])
	}
}

// runHolding is run, but envelopes hold() picks are kept back (returned).
func (w *streamWorld) runHolding(hold func(Envelope) bool) []Envelope {
	w.t.Helper()
	var held []Envelope
	for len(w.queue) > 0 {
		env := w.queue[0]
		w.queue = w.queue[1:]
		if hold(env) {
			held = append(held, env)
			continue
		}
		switch {
		case env.To.Kind == AddrSession && w.sessions[env.To.Session] == nil,
			env.To.Kind == AddrPartition && w.hosts[env.To.Queue] == nil && w.qhosts[env.To.Queue] == nil:
			w.step(env.From, &Bounced{NowMs: w.now, Envelope: env})
		default:
			w.step(env.To, &Deliver{NowMs: w.now, Envelope: env})
		}
	}
	return held
}

func (w *streamWorld) frameHolding(conn ConnID, op wire.Opcode, body wire.Body, hold func(Envelope) bool) []Envelope {
	w.t.Helper()
	w.reqID++
	payload := body.AppendTo(nil)
	in := &Frame{NowMs: w.now, Conn: conn, Payload: payload,
		Header: wire.Header{PayloadSizeBytes: uint32(len(payload)), Version: 1, Opcode: op, RequestID: w.reqID}}
	w.step(SessionAddr(w.bound[conn]), in)
	return w.runHolding(hold)
}

// One session, one partition: subscription s1's join is accepted but its
// CohortJoined is slow; s1 is dropped (reconcile), s2 subscribes the same
// partition and its join reaches the Node before s1's late leave. The Node
// overwrote the member's SubID without a SetOwner: the Host kept s1.
func TestCohortResubscribeOvertakesLateLeave(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	isJoined := func(e Envelope) bool { _, ok := e.Msg.(*CohortJoined); return ok }
	held := w.frameHolding(1, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 0, Prefetch: 10,
		ConsumerGroup: wire.Some("g")}, isJoined)
	if len(held) != 1 {
		t.Fatalf("held %d", len(held))
	}
	t.Logf("owners after s1's join %v", hostOwners(w))
	// The client reconciles listing nothing: s1 (unannounced) is unsubscribed.
	w.frame(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore})
	w.take(1, wire.OpReconcileResult)
	w.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 0, Prefetch: 10, ConsumerGroup: wire.Some("g")})
	if ok := w.take(1, wire.OpSubscribeOk); len(ok) != 1 {
		t.Fatalf("s2: %+v", w.frames[1])
	}
	// Now the late CohortJoined of s1 arrives, and its leave after it.
	w.queue = append(w.queue, held...)
	w.run()
	t.Logf("owners after all %v", hostOwners(w))
	got := deliveredParts(t, w, 1)
	if !slices.Contains(got[1], 0) {
		t.Fatalf("s2, the only member's subscription of partition 0, got nothing: %v", got)
	}
}

// On one connection, leaving the cohort (the last member) and joining again
// gave ASSIGNMENT_CHANGED generations below ones already sent.
func TestCohortGenerationNeverGoesBackOnOneConnection(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	joinAll(t, w, 1, "g", 10)
	a := lastAssignment(t, w, 1, nil)
	w.frame(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore}) // drops every subscription
	w.take(1, wire.OpReconcileResult)
	w.take(1, wire.OpAssignmentChanged)
	joinAll(t, w, 1, "g", 10)
	var gens []uint64
	for _, f := range w.take(1, wire.OpAssignmentChanged) {
		gens = append(gens, f.body.(wire.AssignmentChanged).Generation)
	}
	t.Logf("first stream ended at %d, second stream %v, owners %v", a.Generation, gens, hostOwners(w))
	if len(gens) == 0 || gens[0] <= a.Generation {
		t.Fatalf("generation went back on one connection")
	}
}

// A cohort view outlived membership: a notice in flight landed after the
// last joined subscription left while an unjoined exclusive one (later
// refused) existed, and the view was retold on every later connection.
func TestCohortViewEndsWithMembership(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	w.connect(2)
	for _, p := range []uint32{0, 2} {
		w.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: p, Prefetch: 10, ConsumerGroup: wire.Some("g")})
	}
	if len(w.take(1, wire.OpSubscribeOk)) != 2 {
		t.Fatal("conn1")
	}
	s1 := w.sessions[w.bound[1]]
	toS1 := func(e Envelope) bool {
		return e.To == SessionAddr(w.bound[1]) && (isMsg[*AssignmentNotice](e) || isMsg[*CohortJoined](e))
	}
	var held []Envelope
	for _, p := range []uint32{0, 2} {
		held = append(held, w.frameHolding(2, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: p, Prefetch: 10, ConsumerGroup: wire.Some("g")}, toS1)...)
	}
	held = append(held, w.frameHolding(1, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 1, Prefetch: 10, ConsumerGroup: wire.Some("h")}, toS1)...)
	t.Logf("held %d envelopes for session 1", len(held))
	// Reconcile keeping only the pending p1 subscription.
	w.frame(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: []wire.ReconcileSub{
		{Topic: cohortTopic, Partition: 1, Prefetch: 10, ConsumerGroup: wire.Some("h")}}})
	w.queue = append(w.queue, held...)
	w.run()
	// A left cohort's view stays for this connection (a rejoin on it
	// continues its notice stream) but takes no notice, and goes with the
	// connection.
	for key, v := range s1.cohortViews {
		if len(s1.subs) == 0 && !v.left {
			t.Fatalf("a session with no subscription keeps a live view of %v", key)
		}
	}
	w.closeConn(1)
	w.step(NodeAddr(), &ConnOpened{NowMs: w.now, Conn: 11, Loopback: true, Entropy: entropyOf(11)})
	s1.retellAssignments()
	if len(s1.subs) == 0 && len(s1.cohortViews) != 0 {
		t.Fatalf("a new connection still carries %d views of left cohorts", len(s1.cohortViews))
	}
}

func isMsg[T Message](e Envelope) bool { _, ok := e.Msg.(T); return ok }

// A departing member's partitions went to the survivor one leave at a time,
// and each intermediate assignment handed partitions back and forth: the
// survivor, which loses nothing, is never told a revoke.
func TestCohortDepartureRevokesNothingFromTheSurvivor(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	w.connect(2)
	joinAll(t, w, 1, "g", 10)
	joinAll(t, w, 2, "g", 10)
	a1 := lastAssignment(t, w, 1, nil)
	a2 := lastAssignment(t, w, 2, nil)
	t.Logf("before: member 1 %v, member 2 %v", a1.Assigned, a2.Assigned)
	w.closeConn(2)
	w.advance(w.cfg.ReconnectGraceMs + 1)
	for _, f := range w.take(1, wire.OpAssignmentChanged) {
		a := f.body.(wire.AssignmentChanged)
		if len(a.Revoked) != 0 || len(a.Assigned) != cohortParts {
			t.Fatalf("the survivor was told generation %d: assigned %v added %v revoked %v", a.Generation, a.Assigned, a.Added, a.Revoked)
		}
	}
	checkHostOwners(t, w)
}

// checkHostOwners cross-checks every Host's gate owner with what the Node's
// registry last sent it.
func checkHostOwners(t *testing.T, w *streamWorld) {
	t.Helper()
	for key, e := range w.node.cohorts {
		for p, told := range e.told {
			h := w.qhosts[qid(key.topic, uint32(p))]
			if h == nil {
				continue
			}
			if sub, _ := h.Partition().Owner(); sub != told {
				t.Fatalf("partition %d: the Host's owner is %d, the Node last sent %d", p, sub, told)
			}
		}
	}
}

// Regressions the simulator's cohorts scenario found (checker item 7,
// "notice").

// noticesAfter returns conn's ASSIGNMENT_CHANGED frames (and forgets them),
// failing unless each has a generation above the last one the connection
// saw and added/revoked follow what it was told: the stream a client
// reads, which the Go client drops as stale at or below the last
// generation it accepted.
func noticesAfter(t *testing.T, w *streamWorld, conn ConnID, generation uint64, told []uint32) ([]uint32, uint64) {
	t.Helper()
	for _, f := range w.take(conn, wire.OpAssignmentChanged) {
		a := f.body.(wire.AssignmentChanged)
		if a.Generation <= generation {
			t.Fatalf("conn %d: generation %d after %d (a client drops it as stale)", conn, a.Generation, generation)
		}
		want := slices.DeleteFunc(slices.Clone(told), func(p uint32) bool { return slices.Contains(a.Revoked, p) })
		for _, p := range a.Added {
			if slices.Contains(told, p) {
				t.Fatalf("conn %d: partition %d added again (told %v)", conn, p, told)
			}
			want = append(want, p)
		}
		for _, p := range a.Revoked {
			if !slices.Contains(told, p) {
				t.Fatalf("conn %d: partition %d revoked, never told (told %v)", conn, p, told)
			}
		}
		slices.Sort(want)
		if !slices.Equal(want, a.Assigned) {
			t.Fatalf("conn %d: assigned %v, but told %v - revoked %v + added %v is %v", conn, a.Assigned, told, a.Revoked, a.Added, want)
		}
		told, generation = a.Assigned, a.Generation
	}
	return told, generation
}

// A member that leaves its cohort (a reconcile that omits its exclusive
// subscriptions) and joins again on the same connection continues that
// connection's notice stream (PROTOCOL 5.16: one stream per connection and
// cohort): the rejoin's notices revoke and add against what the connection
// was told, with generations above the ones it saw, even though the
// cohort emptied and was forgotten in between. The session used to drop
// what it had told the connection at the leave (the rejoin's first notice
// "added" partitions the client already had, or left out the revoke of
// those it lost), and a recreated cohort started its generations over at
// the boot's floor (the Go client drops those as stale).
func TestCohortRejoinOnOneConnectionContinuesItsNotices(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	joinAll(t, w, 1, "g", 10)
	told, generation := noticesAfter(t, w, 1, 0, nil)
	if len(told) != cohortParts {
		t.Fatalf("the only member is assigned %v", told)
	}
	// Leave: the reconcile lists none of the exclusive subscriptions.
	w.frame(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore})
	if r := w.take(1, wire.OpReconcileResult); len(r) != 1 {
		t.Fatalf("RECONCILE_RESULT: %+v", w.frames[1])
	}
	if len(w.node.cohorts) != 0 {
		t.Fatalf("the cohort outlived its last member: %d cohorts", len(w.node.cohorts))
	}
	// Rejoin on the same connection, first one partition, then the rest.
	w.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 2, Prefetch: 10, ConsumerGroup: wire.Some("g")})
	if ok := w.take(1, wire.OpSubscribeOk); len(ok) != 1 {
		t.Fatalf("SUBSCRIBE_OK: %+v", w.frames[1])
	}
	told, generation = noticesAfter(t, w, 1, generation, told)
	if !slices.Equal(told, []uint32{2}) {
		t.Fatalf("after rejoining partition 2 only: assigned %v", told)
	}
	for _, p := range []uint32{0, 1, 3} {
		w.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: p, Prefetch: 10, ConsumerGroup: wire.Some("g")})
	}
	if told, _ = noticesAfter(t, w, 1, generation, told); len(told) != cohortParts {
		t.Fatalf("after rejoining every partition: assigned %v", told)
	}
}

// A cohort that empties is forgotten; the next one of its queue (another
// session of the same client, after its grace ran out) must not reuse the
// generations its members were told: clients keep a cohort's last
// generation across reconnects and drop notices at or below it.
func TestCohortGenerationsGrowAcrossAForgottenCohort(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	member := joinAll(t, w, 1, "g", 10)
	_, generation := noticesAfter(t, w, 1, 0, nil)
	w.closeConn(1)
	w.advance(w.cfg.ReconnectGraceMs + 1)
	if len(w.node.cohorts) != 0 {
		t.Fatalf("the cohort outlived its last member's session: %d cohorts", len(w.node.cohorts))
	}
	// The client's next session joins again with its member id.
	w.connect(2)
	for p := uint32(0); p < cohortParts; p++ {
		w.frame(2, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: p, Prefetch: 10, ConsumerGroup: wire.Some("g"),
			MemberID: wire.Some(member)})
	}
	if told, _ := noticesAfter(t, w, 2, generation, nil); len(told) != cohortParts {
		t.Fatalf("the member on its new session is assigned %v", told)
	}
}

// A member whose id comes back on another session (its client could not
// resume the old one) moves there, keeping what it owns. The Host of a
// partition it keeps must be told the new session's subscription: the
// assignment did not change, so no owner change named it, and the Host
// went on naming the old session's subscription, delivering the
// partition to nobody for good (the simulator's cohorts seed 198: a
// ledger partition stuck with every member attached).
func TestCohortMovedMemberKeepsReceivingItsPartitions(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	member := joinAll(t, w, 1, "g", 10)
	w.connect(2)
	for p := uint32(0); p < cohortParts; p++ {
		w.frame(2, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: p, Prefetch: 10, ConsumerGroup: wire.Some("g"),
			MemberID: wire.Some(member)})
		if ok := w.take(2, wire.OpSubscribeOk); len(ok) != 1 {
			t.Fatalf("partition %d on the new session: %+v", p, w.frames[2])
		}
	}
	if told, _ := noticesAfter(t, w, 2, 0, nil); len(told) != cohortParts {
		t.Fatalf("the moved member is assigned %v", told)
	}
	got := deliveredParts(t, w, 1, 2)
	if len(got[1]) != 0 || !slices.Equal(got[2], []uint32{0, 1, 2, 3}) {
		t.Fatalf("after the move: the old session got %v, the new one %v (want every partition on the new one)", got[1], got[2])
	}
}

// A stand-by member (nothing assigned) that moves to another session is
// told its assignment there: its first ASSIGNMENT_CHANGED on the new
// connection, although the move changed nothing.
func TestCohortMovedStandByMemberIsToldOnItsNewSession(t *testing.T) {
	w := newCohortWorld(t)
	var members []wire.UUID
	for _, c := range []ConnID{1, 2} {
		w.connect(c)
		w.frame(c, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 3, Prefetch: 5, ConsumerGroup: wire.Some("g")})
		ok := w.take(c, wire.OpSubscribeOk)
		if len(ok) != 1 {
			t.Fatalf("conn %d: %+v", c, w.frames[c])
		}
		members = append(members, ok[0].body.(wire.SubscribeOk).MemberID.Value)
	}
	standBy, a := ConnID(2), lastAssignment(t, w, 2, nil)
	if len(a.Assigned) != 0 {
		standBy = 1
	}
	w.take(1, wire.OpAssignmentChanged)
	w.connect(3)
	w.frame(3, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 3, Prefetch: 5, ConsumerGroup: wire.Some("g"),
		MemberID: wire.Some(members[standBy-1])})
	if ok := w.take(3, wire.OpSubscribeOk); len(ok) != 1 {
		t.Fatalf("conn 3: %+v", w.frames[3])
	}
	if n := len(w.take(3, wire.OpAssignmentChanged)); n != 1 {
		t.Fatalf("the stand-by member moved to conn 3 got %d ASSIGNMENT_CHANGED there, want 1", n)
	}
}

// Regressions from the second review of the batched registry.

// frameNoTick sends a client frame and delivers every envelope, without
// ticking the Node (the Node's Tick comes later, in another batch).
func (w *streamWorld) frameNoTick(conn ConnID, op wire.Opcode, body wire.Body) {
	w.t.Helper()
	w.reqID++
	payload := body.AppendTo(nil)
	in := &Frame{NowMs: w.now, Conn: conn, Payload: payload,
		Header: wire.Header{PayloadSizeBytes: uint32(len(payload)), Version: 1, Opcode: op, RequestID: w.reqID}}
	w.step(SessionAddr(w.bound[conn]), in)
	w.drain()
}

func sub(p uint32, g string) wire.Subscribe {
	return wire.Subscribe{Topic: cohortTopic, Partition: p, Prefetch: 10, ConsumerGroup: wire.Some(g)}
}

// Leave (reconcile omitting the sub) and rejoin within one Node batch:
// the view stays `left` while joined; a resumed connection is told nothing.
func TestCohortLeaveRejoinOneBatchThenResumeIsTold(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	w.frame(1, wire.OpSubscribe, sub(0, "g"))
	if len(w.take(1, wire.OpSubscribeOk)) != 1 {
		t.Fatal("sub")
	}
	told, gen := noticesAfter(t, w, 1, 0, nil)
	t.Logf("told %v gen %d", told, gen)
	hello := w.take(1, wire.OpHelloOk)[0].body.(wire.HelloOk)
	w.frameNoTick(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore})
	w.take(1, wire.OpReconcileResult)
	w.frameNoTick(1, wire.OpSubscribe, sub(0, "g"))
	if len(w.take(1, wire.OpSubscribeOk)) != 1 {
		t.Fatalf("resub %+v", w.frames[1])
	}
	w.run()
	n := w.take(1, wire.OpAssignmentChanged)
	s := w.sessions[w.bound[1]]
	t.Logf("after rejoin: %d notices; view %+v; owners %v", len(n), *s.cohortViews[cohortKey{cohortTopic, ""}], hostOwners(w))
	got := deliveredParts(t, w, 1)
	t.Logf("delivered %v", got)
	// Resume on a new connection.
	w.closeConn(1)
	w.step(NodeAddr(), &ConnOpened{NowMs: w.now, Conn: 2, Loopback: true, Entropy: entropyOf(2)})
	w.frame(2, wire.OpHello, wire.Hello{ClientName: "t", ClientVersion: "1", ProtocolVersion: 1,
		Resume: wire.Some(wire.ResumeIdentity{OwnerID: hello.OwnerID, ClientID: hello.ClientID, ResumeToken: hello.ResumeToken})})
	ok := w.take(2, wire.OpHelloOk)
	if len(ok) != 1 {
		t.Fatalf("hello %+v", w.frames[2])
	}
	t.Logf("resume outcome %v", ok[0].body.(wire.HelloOk).ResumeOutcome)
	w.frame(2, wire.OpAuth, wire.Auth{Username: "u", Password: "p"})
	w.frame(2, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: []wire.ReconcileSub{
		{Topic: cohortTopic, Partition: 0, Prefetch: 10, ConsumerGroup: wire.Some("g")}}})
	for _, f := range w.frames[2] {
		t.Logf("conn2 frame op %d", f.hdr.Opcode)
	}
	a := w.take(2, wire.OpAssignmentChanged)
	t.Logf("views now %d", len(s.cohortViews))
	if len(a) == 0 {
		t.Errorf("the resumed connection of a joined member was told no assignment")
	}
}

// A notice reaches the session between its leave and its rejoin
// (dropped: not joined), and the rejoin lands in the same Node batch as the
// leave: the member is never re-told.
func TestCohortNoticeNotLostAcrossLeaveRejoin(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1) // T: owner
	w.connect(2) // S: stand-by
	w.frame(1, wire.OpSubscribe, sub(0, "g"))
	w.take(1, wire.OpSubscribeOk)
	w.frame(2, wire.OpSubscribe, sub(0, "g"))
	w.take(2, wire.OpSubscribeOk)
	t1, _ := noticesAfter(t, w, 1, 0, nil)
	s2, g2 := noticesAfter(t, w, 2, 0, nil)
	t.Logf("T %v S %v (gen %d)", t1, s2, g2)
	if len(t1) != 1 || len(s2) != 0 {
		t.Fatal("the first subscriber should own partition 0")
	}
	// T leaves (reconcile omitting it): the Node is dirty, no Tick yet.
	w.frameNoTick(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore})
	// S leaves: its session steps, its envelopes are queued, but the Node
	// ticks first (T's leave makes S the owner: notice to S).
	w.reqID++
	rc := wire.ReconcileClient{Policy: wire.ReconcileRestore}
	payload := rc.AppendTo(nil)
	w.step(SessionAddr(w.bound[2]), &Frame{NowMs: w.now, Conn: 2, Payload: payload,
		Header: wire.Header{PayloadSizeBytes: uint32(len(payload)), Version: 1, Opcode: wire.OpReconcileClient, RequestID: w.reqID}})
	w.step(NodeAddr(), &Tick{NowMs: w.now})
	w.drain()
	w.frameNoTick(2, wire.OpSubscribe, sub(0, "g"))
	if len(w.take(2, wire.OpSubscribeOk)) != 1 {
		t.Fatalf("resub %+v", w.frames[2])
	}
	w.run()
	got := deliveredParts(t, w, 1, 2)
	a := w.take(2, wire.OpAssignmentChanged)
	var last []uint32
	for _, f := range a {
		last = f.body.(wire.AssignmentChanged).Assigned
	}
	t.Logf("S delivered %v, notices %d, last assigned %v, owners %v", got[2], len(a), last, hostOwners(w))
	if slices.Contains(got[2], 0) && !slices.Contains(last, 0) {
		t.Errorf("S owns partition 0 and receives it but was never told (lost notice)")
	}
}

// A stand-by S on p0 subscribes p2 (a stand-by there too)
// and drops p0 while that join is on its way: left is set, the join
// succeeds, nothing changes for S so no notice clears left; a resumed
// connection is told nothing.
func TestCohortJoinClearsLeftView(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	w.connect(4)
	w.connect(2)
	w.frame(1, wire.OpSubscribe, sub(0, "g"))
	w.frame(4, wire.OpSubscribe, sub(2, "g"))
	w.frame(2, wire.OpSubscribe, sub(0, "g"))
	for _, f := range w.frames[2] {
		t.Logf("pre op %d %+v", f.hdr.Opcode, f.body)
	}
	tS, _ := noticesAfter(t, w, 2, 0, nil)
	if len(tS) != 0 {
		t.Fatalf("S owns %v: the first subscriber should", tS)
	}
	hello := w.take(2, wire.OpHelloOk)[0].body.(wire.HelloOk)
	isJoin := func(e Envelope) bool { _, ok := e.Msg.(*CohortJoin); return ok }
	held := w.frameHolding(2, wire.OpSubscribe, sub(2, "g"), isJoin)
	if len(held) != 1 {
		t.Fatalf("held %d", len(held))
	}
	for _, f := range w.frames[2] {
		t.Logf("mid op %d", f.hdr.Opcode)
	}
	s := w.sessions[w.bound[2]]
	w.reqID++
	rc := wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: []wire.ReconcileSub{
		{Topic: cohortTopic, Partition: 2, Prefetch: 10, ConsumerGroup: wire.Some("g")}}}
	payload := rc.AppendTo(nil)
	w.step(SessionAddr(w.bound[2]), &Frame{NowMs: w.now, Conn: 2, Payload: payload,
		Header: wire.Header{PayloadSizeBytes: uint32(len(payload)), Version: 1, Opcode: wire.OpReconcileClient, RequestID: w.reqID}})
	for _, f := range w.frames[2] {
		t.Logf("mid2 op %d", f.hdr.Opcode)
	}
	t.Logf("queue %d", len(w.queue))
	w.queue = append(held, w.queue...)
	w.run()
	w.take(2, wire.OpSubscribeOk)
	if s.subs[qid(cohortTopic, 2)] == nil || !s.subs[qid(cohortTopic, 2)].cohortJoined {
		for _, f := range w.frames[2] {
			t.Logf("op %d %+v", f.hdr.Opcode, f.body)
		}
		t.Fatal("p2 sub")
	}
	v := s.cohortViews[cohortKey{cohortTopic, ""}]
	t.Logf("view %+v joined %v notices %d", v, s.joinedCohort(cohortKey{cohortTopic, ""}), len(w.take(2, wire.OpAssignmentChanged)))
	w.closeConn(2)
	resume(t, w, 3, hello)
	w.frame(3, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: []wire.ReconcileSub{
		{Topic: cohortTopic, Partition: 2, Prefetch: 10, ConsumerGroup: wire.Some("g")}}})
	if a := w.take(3, wire.OpAssignmentChanged); len(a) == 0 {
		t.Errorf("a joined member's new connection was told no assignment")
	}
}

func resume(t *testing.T, w *streamWorld, conn ConnID, hello wire.HelloOk) {
	t.Helper()
	w.step(NodeAddr(), &ConnOpened{NowMs: w.now, Conn: conn, Loopback: true, Entropy: entropyOf(byte(conn))})
	w.frame(conn, wire.OpHello, wire.Hello{ClientName: "t", ClientVersion: "1", ProtocolVersion: 1,
		Resume: wire.Some(wire.ResumeIdentity{OwnerID: hello.OwnerID, ClientID: hello.ClientID, ResumeToken: hello.ResumeToken})})
	if ok := w.take(conn, wire.OpHelloOk); len(ok) != 1 || ok[0].body.(wire.HelloOk).ResumeOutcome != 1 {
		t.Fatalf("resume %+v", ok)
	}
	w.frame(conn, wire.OpAuth, wire.Auth{Username: "u", Password: "p"})
}

// The same connection leaves cohort g (forgotten) and joins cohort h on
// the same queue: the first notice of h is computed against g's told set.
func TestCohortNewIDStartsItsOwnStream(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	joinAll(t, w, 1, "g", 10)
	noticesAfter(t, w, 1, 0, nil)
	w.frame(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore})
	w.take(1, wire.OpReconcileResult)
	w.frame(1, wire.OpSubscribe, sub(0, "h"))
	if len(w.take(1, wire.OpSubscribeOk)) != 1 {
		t.Fatalf("%+v", w.frames[1])
	}
	for _, f := range w.take(1, wire.OpAssignmentChanged) {
		a := f.body.(wire.AssignmentChanged)
		t.Logf("cg %s gen %d assigned %v added %v revoked %v", a.ConsumerGroup, a.Generation, a.Assigned, a.Added, a.Revoked)
		if len(a.Revoked) > 0 {
			t.Errorf("first notice of cohort h revokes partitions h never assigned: %v", a.Revoked)
		}
	}
}
