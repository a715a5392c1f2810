package node

import (
	"slices"
	"testing"

	"github.com/fibril-go/fibril/core/cohort"
)

// The operator's cohort listing (CohortsRequest): the Node answers from its
// registry what it assigned and told, and asking changes nothing.

// askCohorts steps an operator's CohortsRequest into the world's Node and
// returns its answer (the envelope to the operator goes nowhere else).
func askCohorts(t *testing.T, w *streamWorld) *CohortList {
	t.Helper()
	from := AdminAddr(5)
	rd := w.node.Step(&Deliver{NowMs: w.now, Envelope: Envelope{From: from, To: NodeAddr(), Msg: &CohortsRequest{}}})
	var got []*CohortList
	for _, env := range rd.Out {
		if l, ok := env.Msg.(*CohortList); ok && env.To == from {
			got = append(got, l)
		} else {
			t.Fatalf("a cohort listing sent %T to %v", env.Msg, env.To)
		}
	}
	if len(got) != 1 || len(rd.Persist) != 0 {
		t.Fatalf("want one CohortList and nothing persisted, got %d answers, %d records", len(got), len(rd.Persist))
	}
	if err := w.node.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	return got[0]
}

func TestNodeListsCohortsWithMembersAndOwners(t *testing.T) {
	w := newCohortWorld(t)
	if l := askCohorts(t, w); len(l.Cohorts) != 0 || l.Truncated {
		t.Fatalf("no cohort yet, got %+v", l)
	}
	w.connect(1)
	m1 := joinAll(t, w, 1, "g", 10)
	a1 := lastAssignment(t, w, 1, nil)
	l := askCohorts(t, w)
	if len(l.Cohorts) != 1 {
		t.Fatalf("one cohort, got %+v", l.Cohorts)
	}
	c := l.Cohorts[0]
	if c.Topic != cohortTopic || c.Group != "" || c.CohortID != "g" || c.PartitionCount != cohortParts ||
		c.Generation != a1.Generation || c.Pending || len(c.Members) != 1 {
		t.Fatalf("cohort %+v, last notice generation %d", c, a1.Generation)
	}
	all := []uint32{0, 1, 2, 3}
	if m := c.Members[0]; m.Member != cohort.MemberID(m1) || !slices.Equal(m.Subscribed, all) || !slices.Equal(m.Owned, all) || m.Session == 0 {
		t.Fatalf("the only member %+v", m)
	}

	// A second member: the listing shows the split the notices told, and
	// the generation they carried.
	w.connect(2)
	m2 := joinAll(t, w, 2, "g", 10)
	a1 = lastAssignment(t, w, 1, a1.Assigned)
	a2 := lastAssignment(t, w, 2, nil)
	c = askCohorts(t, w).Cohorts[0]
	if len(c.Members) != 2 || c.Generation != max(a1.Generation, a2.Generation) {
		t.Fatalf("two members: %+v (notices at %d, %d)", c, a1.Generation, a2.Generation)
	}
	owned := map[cohort.MemberID][]uint32{}
	for _, m := range c.Members {
		owned[m.Member] = m.Owned
		if !slices.Equal(m.Subscribed, all) {
			t.Fatalf("member %v subscribed %v", m.Member, m.Subscribed)
		}
	}
	if !slices.Equal(owned[cohort.MemberID(m1)], a1.Assigned) || !slices.Equal(owned[cohort.MemberID(m2)], a2.Assigned) {
		t.Fatalf("owned %v, notices %v and %v", owned, a1.Assigned, a2.Assigned)
	}
	if bytesLess(c.Members[1].Member, c.Members[0].Member) {
		t.Fatal("members not in id order")
	}
	// Asking again is the same answer: an observation moves nothing.
	if again := askCohorts(t, w).Cohorts[0]; again.Generation != c.Generation {
		t.Fatalf("generation moved from %d to %d by asking", c.Generation, again.Generation)
	}

	// Member 2 goes: the survivor owns everything at a later generation.
	w.closeConn(2)
	w.advance(w.cfg.ReconnectGraceMs + 1)
	c = askCohorts(t, w).Cohorts[0]
	if len(c.Members) != 1 || !slices.Equal(c.Members[0].Owned, all) || c.Generation <= a2.Generation {
		t.Fatalf("after member 2 left: %+v", c)
	}
	// The last member goes: the cohort is forgotten, the listing empty.
	w.closeConn(1)
	w.advance(w.cfg.ReconnectGraceMs + 1)
	if l := askCohorts(t, w); len(l.Cohorts) != 0 {
		t.Fatalf("a cohort without members is listed: %+v", l.Cohorts)
	}
}

func bytesLess(a, b cohort.MemberID) bool { return slices.Compare(a[:], b[:]) < 0 }
