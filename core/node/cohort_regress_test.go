package node

import (
	"slices"
	"testing"

	"github.com/fibril-go/fibril/transport/wire"
)

// Regressions the simulator's cohorts scenario found (checker item 7,
// "notice"), in the wired world of cohort_test.go.

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
