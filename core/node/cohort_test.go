package node

import (
	"fmt"
	"slices"
	"testing"

	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/transport/wire"
)

// Exclusive consumer groups through the Node, Sessions and Hosts
// (docs/cohorts.md), in the wired world of wiring_stream_test.go.

const cohortTopic, cohortParts = "orders", 4

func newCohortWorld(t *testing.T) *streamWorld {
	w := newStreamWorld(t)
	w.connect(9)
	w.frame(9, wire.OpDeclareQueue, wire.DeclareQueue{Topic: cohortTopic, PartitionCount: wire.Some(uint32(cohortParts))})
	if ok := w.take(9, wire.OpDeclareQueueOk); len(ok) != 1 {
		t.Fatalf("DECLARE_QUEUE_OK: %+v", w.frames[9])
	}
	return w
}

// joinAll subscribes conn exclusively to every partition; it returns the
// member id of its SUBSCRIBE_OKs (all the same).
func joinAll(t *testing.T, w *streamWorld, conn ConnID, group string, prefetch uint32) wire.UUID {
	t.Helper()
	var member wire.UUID
	for p := uint32(0); p < cohortParts; p++ {
		sub := wire.Subscribe{Topic: cohortTopic, Partition: p, Prefetch: prefetch, ConsumerGroup: wire.Some(group)}
		if p > 0 {
			sub.MemberID = wire.Some(member)
		}
		w.frame(conn, wire.OpSubscribe, sub)
		ok := w.take(conn, wire.OpSubscribeOk)
		if len(ok) != 1 {
			t.Fatalf("conn %d partition %d: SUBSCRIBE_OK %+v", conn, p, w.frames[conn])
		}
		body := ok[0].body.(wire.SubscribeOk)
		if !body.MemberID.Present || body.ConsumerGroup != wire.Some(group) {
			t.Fatalf("SUBSCRIBE_OK without the cohort fields: %+v", body)
		}
		if p > 0 && body.MemberID.Value != member {
			t.Fatalf("member id changed from %v to %v on one connection", member, body.MemberID.Value)
		}
		member = body.MemberID.Value
	}
	return member
}

// lastAssignment returns the newest ASSIGNMENT_CHANGED conn received (and
// forgets them), checking generations grow and added/revoked follow.
func lastAssignment(t *testing.T, w *streamWorld, conn ConnID, told []uint32) wire.AssignmentChanged {
	t.Helper()
	var last wire.AssignmentChanged
	for _, f := range w.take(conn, wire.OpAssignmentChanged) {
		a := f.body.(wire.AssignmentChanged)
		if a.Generation <= last.Generation {
			t.Fatalf("conn %d: generation %d after %d", conn, a.Generation, last.Generation)
		}
		for _, p := range a.Added {
			if slices.Contains(told, p) {
				t.Fatalf("conn %d: partition %d added again (had %v)", conn, p, told)
			}
		}
		for _, p := range a.Revoked {
			if !slices.Contains(told, p) {
				t.Fatalf("conn %d: partition %d revoked, never assigned (had %v)", conn, p, told)
			}
		}
		told = a.Assigned
		last = a
	}
	return last
}

// deliveredParts publishes one message to each partition and returns the
// partitions each conn received a DELIVER of (and settles them).
func deliveredParts(t *testing.T, w *streamWorld, conns ...ConnID) map[ConnID][]uint32 {
	t.Helper()
	for p := uint32(0); p < cohortParts; p++ {
		w.frame(9, wire.OpPublish, wire.Publish{Topic: cohortTopic, Partition: p, RequireConfirm: true, Payload: []byte(fmt.Sprint("m", p))})
	}
	got := map[ConnID][]uint32{}
	for _, c := range conns {
		for _, f := range w.take(c, wire.OpDeliver) {
			d := f.body.(wire.Deliver)
			got[c] = append(got[c], d.Partition)
			w.frame(c, wire.OpAck, wire.Ack{Topic: cohortTopic, Partition: d.Partition, Tags: []uint64{d.DeliveryTag}})
		}
		slices.Sort(got[c])
	}
	return got
}

func TestCohortSplitsPartitionsAndSurvivorsTakeOver(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	w.connect(2)
	m1 := joinAll(t, w, 1, "g", 10)
	m2 := joinAll(t, w, 2, "g", 10)
	if m1 == m2 {
		t.Fatal("two connections minted one member id")
	}
	a1, a2 := lastAssignment(t, w, 1, nil), lastAssignment(t, w, 2, nil)
	if len(a1.Assigned) != 2 || len(a2.Assigned) != 2 || a1.ConsumerGroup != "g" {
		t.Fatalf("not balanced: %v and %v", a1.Assigned, a2.Assigned)
	}
	both := append(slices.Clone(a1.Assigned), a2.Assigned...)
	slices.Sort(both)
	if !slices.Equal(both, []uint32{0, 1, 2, 3}) {
		t.Fatalf("assignments overlap or leave a gap: %v and %v", a1.Assigned, a2.Assigned)
	}
	// Each partition is delivered to its owner only.
	got := deliveredParts(t, w, 1, 2)
	if !slices.Equal(got[1], a1.Assigned) || !slices.Equal(got[2], a2.Assigned) {
		t.Fatalf("deliveries %v, assignments %v and %v", got, a1.Assigned, a2.Assigned)
	}
	// Member 2 goes (its connection closes, its grace runs out): member 1
	// takes everything.
	w.closeConn(2)
	w.advance(w.cfg.ReconnectGraceMs + 1)
	a := lastAssignment(t, w, 1, a1.Assigned)
	if !slices.Equal(a.Assigned, []uint32{0, 1, 2, 3}) || a.Generation <= a1.Generation {
		t.Fatalf("after member 2 left: %+v", a)
	}
	if got := deliveredParts(t, w, 1); !slices.Equal(got[1], []uint32{0, 1, 2, 3}) {
		t.Fatalf("after the take-over member 1 got %v", got[1])
	}
}

func TestCohortHandOverWaitsForTheOldOwnersDeliveries(t *testing.T) {
	if err := scenarioHandOverWaits(t); err != nil {
		t.Fatal(err)
	}
	// The gate that opens early (mutant GateOpenEarly) fails it.
	mutant.Active = mutant.GateOpenEarly
	defer func() { mutant.Active = "" }()
	if scenarioHandOverWaits(t) == nil {
		t.Fatal("the hand-over check passed with a gate that opens before the old owner settled")
	}
}

func scenarioHandOverWaits(t *testing.T) error {
	w := newCohortWorld(t)
	w.connect(1)
	joinAll(t, w, 1, "g", 10)
	lastAssignment(t, w, 1, nil)
	// Member 1 owns every partition and holds a delivery of each, unacked.
	for p := uint32(0); p < cohortParts; p++ {
		w.frame(9, wire.OpPublish, wire.Publish{Topic: cohortTopic, Partition: p, RequireConfirm: true, Payload: []byte("first")})
	}
	held := w.take(1, wire.OpDeliver)
	if len(held) != cohortParts {
		t.Fatalf("member 1 got %d deliveries", len(held))
	}
	w.connect(2)
	joinAll(t, w, 2, "g", 10)
	a2 := lastAssignment(t, w, 2, nil)
	if len(a2.Assigned) != 2 {
		t.Fatalf("member 2 assigned %v", a2.Assigned)
	}
	// New messages on member 2's partitions wait: member 1 still holds
	// deliveries of them (per-key order across the hand-over).
	for _, p := range a2.Assigned {
		w.frame(9, wire.OpPublish, wire.Publish{Topic: cohortTopic, Partition: p, RequireConfirm: true, Payload: []byte("second")})
	}
	if d := w.take(2, wire.OpDeliver); len(d) != 0 {
		return fmt.Errorf("member 2 got %d deliveries while member 1 held its partitions' first messages", len(d))
	}
	if d := w.take(1, wire.OpDeliver); len(d) != 0 {
		return fmt.Errorf("member 1 got %d deliveries of partitions it no longer owns", len(d))
	}
	// Member 1 settles: the gate opens for member 2.
	for _, f := range held {
		d := f.body.(wire.Deliver)
		w.frame(1, wire.OpAck, wire.Ack{Topic: cohortTopic, Partition: d.Partition, Tags: []uint64{d.DeliveryTag}})
	}
	var parts []uint32
	for _, f := range w.take(2, wire.OpDeliver) {
		d := f.body.(wire.Deliver)
		if string(d.Payload) != "second" {
			t.Fatalf("member 2 got %q", d.Payload)
		}
		parts = append(parts, d.Partition)
	}
	slices.Sort(parts)
	if !slices.Equal(parts, a2.Assigned) {
		return fmt.Errorf("after member 1 settled, member 2 got partitions %v, assigned %v", parts, a2.Assigned)
	}
	return nil
}

func TestCohortRules409And400(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	w.connect(2)
	m1 := joinAll(t, w, 1, "g", 10)
	// PROTOCOL 5.6 check 3: another cohort id on the same queue.
	w.frame(2, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 0, ConsumerGroup: wire.Some("other")})
	if e := w.take(2, wire.OpSubscribeErr); len(e) != 1 || e[0].body.(wire.ErrorBody).Code != wire.CodeConflict {
		t.Fatalf("another cohort id: %+v", w.frames[2])
	}
	// The refused subscription is gone: the same partition subscribes again.
	w.frame(2, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 0, ConsumerGroup: wire.Some("g")})
	ok := w.take(2, wire.OpSubscribeOk)
	if len(ok) != 1 {
		t.Fatalf("after the 409 the right cohort id: %+v", w.frames[2])
	}
	m2 := ok[0].body.(wire.SubscribeOk).MemberID.Value
	// Check 5: another member id on a connection that has one.
	w.frame(2, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 1, ConsumerGroup: wire.Some("g"), MemberID: wire.Some(m1)})
	if e := w.take(2, wire.OpSubscribeErr); len(e) != 1 || e[0].body.(wire.ErrorBody).Code != wire.CodeConflict || m1 == m2 {
		t.Fatalf("another member id: %+v", w.frames[2])
	}
	// Check 4: the nil UUID.
	w.frame(2, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 2, ConsumerGroup: wire.Some("g"), MemberID: wire.Some(wire.UUID{})})
	if e := w.take(2, wire.OpSubscribeErr); len(e) != 1 || e[0].body.(wire.ErrorBody).Code != wire.CodeInvalid {
		t.Fatalf("nil member id: %+v", w.frames[2])
	}
	// Once every member leaves, the cohort is forgotten: another id may
	// take the queue.
	w.closeConn(1)
	w.closeConn(2)
	w.advance(w.cfg.ReconnectGraceMs + 1)
	w.connect(3)
	joinAll(t, w, 3, "fresh", 10)
}

func TestCohortMemberOnOnePartitionStandsBy(t *testing.T) {
	w := newCohortWorld(t)
	w.connect(1)
	w.connect(2)
	for _, c := range []ConnID{1, 2} {
		w.frame(c, wire.OpSubscribe, wire.Subscribe{Topic: cohortTopic, Partition: 3, Prefetch: 5, ConsumerGroup: wire.Some("g")})
		if ok := w.take(c, wire.OpSubscribeOk); len(ok) != 1 {
			t.Fatalf("conn %d: %+v", c, w.frames[c])
		}
	}
	a1, a2 := lastAssignment(t, w, 1, nil), lastAssignment(t, w, 2, nil)
	// One active, one standing by; the stand-by is told its empty set.
	if len(a1.Assigned)+len(a2.Assigned) != 1 || a2.Generation == 0 {
		t.Fatalf("one partition, two members: %+v and %+v", a1, a2)
	}
}

// closeConn reports conn closed to the Node and its session.
func (w *streamWorld) closeConn(conn ConnID) {
	w.t.Helper()
	w.step(NodeAddr(), &ConnClosed{NowMs: w.now, Conn: conn})
	if sid, ok := w.bound[conn]; ok {
		w.step(SessionAddr(sid), &ConnClosed{NowMs: w.now, Conn: conn})
	}
	w.run()
}

// advance moves time and ticks every machine.
func (w *streamWorld) advance(ms int64) {
	w.t.Helper()
	w.now += ms
	w.step(NodeAddr(), &Tick{NowMs: w.now})
	ids := make([]SessionID, 0, len(w.sessions))
	for id := range w.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if s := w.sessions[id]; s != nil {
			w.step(SessionAddr(id), &Tick{NowMs: w.now})
		}
	}
	w.run()
}
