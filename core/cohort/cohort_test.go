package cohort

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func newTestCohort(t *testing.T, partitionCount uint32, floor uint64) *Cohort {
	t.Helper()
	c, err := NewCohort("cg", partitionCount, floor)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checked returns a function that takes a change's results, fails the
// test on an error or a broken invariant, and returns the change:
// checked(t, c)(c.Join(m)).
func checked(t *testing.T, c *Cohort) func(Change, error) Change {
	return func(ch Change, err error) Change {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		return ch
	}
}

// The first join takes everything at generation floor+1, and the Change
// says so both per member and per partition.
func TestCohortFirstJoin(t *testing.T) {
	c := newTestCohort(t, 3, 7<<32)
	if c.Generation() != 7<<32 || c.ID() != "cg" || c.PartitionCount() != 3 {
		t.Fatalf("fresh cohort: generation %d, id %q", c.Generation(), c.ID())
	}
	ch := checked(t, c)(c.Join(Member{ID: mid(1), Partitions: []uint32{2, 0, 1}}))
	if ch.Generation != 7<<32+1 || c.Generation() != ch.Generation {
		t.Fatalf("generation %d after the first join", ch.Generation)
	}
	want := []MemberChange{{Member: mid(1), Assigned: []uint32{0, 1, 2}, Added: []uint32{0, 1, 2}}}
	if !equalMemberChanges(ch.Members, want) {
		t.Fatalf("members %+v, want %+v", ch.Members, want)
	}
	if len(ch.Partitions) != 3 || ch.Partitions[0].Old.Assigned || ch.Partitions[2].New != (Owner{Member: mid(1), Assigned: true}) {
		t.Fatalf("partitions %+v", ch.Partitions)
	}
	if got := c.Assignment(mid(1)); !slices.Equal(got, []uint32{0, 1, 2}) {
		t.Fatalf("assignment %v", got)
	}
	if ms := c.Members(); len(ms) != 1 || !slices.Equal(ms[0].Partitions, []uint32{0, 1, 2}) {
		t.Fatalf("members %+v (partitions are kept sorted)", ms)
	}
}

// A second member takes half; only the partitions that moved are listed,
// with old and new owner, and both members get their new sets.
func TestCohortJoinHandsOver(t *testing.T) {
	c := newTestCohort(t, 4, 0)
	checked(t, c)(c.Join(Member{ID: mid(1), Partitions: span(0, 4)}))
	ch := checked(t, c)(c.Join(Member{ID: mid(2), Partitions: span(0, 4)}))
	if ch.Generation != 2 || len(ch.Partitions) != 2 || len(ch.Members) != 2 {
		t.Fatalf("change %+v", ch)
	}
	one, two := ch.Members[0], ch.Members[1]
	if one.Member != mid(1) || len(one.Assigned) != 2 || len(one.Revoked) != 2 || len(one.Added) != 0 {
		t.Fatalf("member 1: %+v", one)
	}
	if two.Member != mid(2) || !slices.Equal(two.Assigned, two.Added) || !slices.Equal(two.Added, one.Revoked) {
		t.Fatalf("member 2: %+v (member 1: %+v)", two, one)
	}
	for _, pc := range ch.Partitions {
		if pc.Old.Member != mid(1) || pc.New.Member != mid(2) {
			t.Fatalf("partition change %+v", pc)
		}
	}
}

// Each change is sticky against the one before: 4 members own 3 of 12
// partitions each; a fifth joining takes 2 (loads 3,3,2,2,2: two moves,
// the fewest), and its leaving moves exactly those 2 again.
func TestCohortChangesAreStickyAgainstTheLastOne(t *testing.T) {
	c := newTestCohort(t, 12, 0)
	for i := byte(1); i <= 4; i++ {
		checked(t, c)(c.Join(Member{ID: mid(i), Partitions: span(0, 12)}))
	}
	ch := checked(t, c)(c.Join(Member{ID: mid(5), Partitions: span(0, 12)}))
	if len(ch.Partitions) != 2 || len(c.Assignment(mid(5))) != 2 {
		t.Fatalf("join moved %d partitions (%+v), want 2", len(ch.Partitions), ch.Partitions)
	}
	ch = checked(t, c)(c.Leave(mid(5)))
	if len(ch.Partitions) != 2 {
		t.Fatalf("leave moved %d partitions, want 2", len(ch.Partitions))
	}
}

// A change that moves nothing keeps the generation and lists nothing: a
// standby member joining a one-partition queue, a target that changes
// nothing, and the standby leaving.
func TestCohortNoopChangesKeepTheGeneration(t *testing.T) {
	c := newTestCohort(t, 1, 10)
	checked(t, c)(c.Join(Member{ID: mid(1), Partitions: []uint32{0}}))
	for _, step := range []func() (Change, error){
		func() (Change, error) { return c.Join(Member{ID: mid(2), Partitions: []uint32{0}}) },
		func() (Change, error) { return c.Update(Member{ID: mid(1), Partitions: []uint32{0}, Target: 5}) },
		func() (Change, error) { return c.Leave(mid(2)) },
	} {
		ch := checked(t, c)(step())
		if ch.Moved() || ch.Generation != 11 || len(ch.Members) != 0 || c.Generation() != 11 {
			t.Fatalf("a change that moved nothing: %+v, generation %d", ch, c.Generation())
		}
	}
}

// Leave: the leaver is listed with an empty set and what it lost; a
// partition only it subscribed to gets no owner (SetOwner to nobody).
func TestCohortLeave(t *testing.T) {
	c := newTestCohort(t, 3, 0)
	checked(t, c)(c.Join(Member{ID: mid(1), Partitions: []uint32{0, 1}}))
	checked(t, c)(c.Join(Member{ID: mid(2), Partitions: []uint32{0, 1, 2}}))
	before := c.Assignment(mid(2))
	ch := checked(t, c)(c.Leave(mid(2)))
	var leaver *MemberChange
	for i := range ch.Members {
		if ch.Members[i].Member == mid(2) {
			leaver = &ch.Members[i]
		}
	}
	if leaver == nil || len(leaver.Assigned) != 0 || !slices.Equal(leaver.Revoked, before) {
		t.Fatalf("leaver listed as %+v, owned %v", leaver, before)
	}
	last := ch.Partitions[len(ch.Partitions)-1]
	if last.Partition != 2 || last.New.Assigned || last.Old.Member != mid(2) {
		t.Fatalf("partition 2 should lose its owner: %+v", ch.Partitions)
	}
	if c.Len() != 1 || !slices.Equal(c.Assignment(mid(1)), []uint32{0, 1}) {
		t.Fatalf("after leave: %d members, member 1 owns %v", c.Len(), c.Assignment(mid(1)))
	}
}

// Update narrows a subscription: what the member no longer subscribes to
// goes to another member; a wider one takes partitions back for balance.
func TestCohortUpdate(t *testing.T) {
	c := newTestCohort(t, 4, 0)
	checked(t, c)(c.Join(Member{ID: mid(1), Partitions: span(0, 4)}))
	checked(t, c)(c.Join(Member{ID: mid(2), Partitions: span(0, 4)}))
	checked(t, c)(c.Update(Member{ID: mid(2), Partitions: []uint32{3}}))
	if got := c.Assignment(mid(2)); !slices.Equal(got, []uint32{3}) {
		t.Fatalf("narrowed to {3}: owns %v", got)
	}
	checked(t, c)(c.Update(Member{ID: mid(2), Partitions: span(0, 4)}))
	if len(c.Assignment(mid(2))) != 2 || !slices.Contains(c.Assignment(mid(2)), 3) {
		t.Fatalf("widened again: owns %v (keeps 3, takes one more)", c.Assignment(mid(2)))
	}
}

// Errors leave the cohort as it was.
func TestCohortRejectsBadInput(t *testing.T) {
	if _, err := NewCohort("", 1, 0); !errors.Is(err, ErrCohortID) {
		t.Fatalf("empty id: %v", err)
	}
	if _, err := NewCohort(string(make([]byte, IDBytesMax+1)), 1, 0); !errors.Is(err, ErrCohortID) {
		t.Fatalf("long id: %v", err)
	}
	if _, err := NewCohort("cg", 0, 0); !errors.Is(err, ErrPartitionCount) {
		t.Fatalf("no partitions: %v", err)
	}
	c := newTestCohort(t, 2, 0)
	checked(t, c)(c.Join(Member{ID: mid(1), Partitions: []uint32{0, 1}}))
	gen, owners := c.Generation(), c.Owners()
	for name, err := range map[string]error{
		"join twice":         second(c.Join(Member{ID: mid(1)})),
		"join nil":           second(c.Join(Member{Partitions: []uint32{0}})),
		"join out of range":  second(c.Join(Member{ID: mid(2), Partitions: []uint32{2}})),
		"join duplicate":     second(c.Join(Member{ID: mid(2), Partitions: []uint32{0, 0}})),
		"update unknown":     second(c.Update(Member{ID: mid(3)})),
		"update bad":         second(c.Update(Member{ID: mid(1), Partitions: []uint32{9}})),
		"leave unknown":      second(c.Leave(mid(3))),
		"leave nil (absent)": second(c.Leave(MemberID{})),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if c.Generation() != gen || !slices.Equal(c.Owners(), owners) || c.Len() != 1 {
		t.Fatalf("a refused change changed the cohort")
	}
	for i := 2; i <= MembersMax; i++ {
		checked(t, c)(c.Join(Member{ID: MemberID{0: 0x10 + byte(i>>8), 1: byte(i)}}))
	}
	if _, err := c.Join(Member{ID: MemberID{0: 0xFF}}); !errors.Is(err, ErrTooManyMembers) {
		t.Fatalf("join past MembersMax: %v", err)
	}
}

// The generation never wraps: a change that would pass uint64 is refused.
func TestCohortGenerationLimit(t *testing.T) {
	c := newTestCohort(t, 1, math.MaxUint64-1)
	checked(t, c)(c.Join(Member{ID: mid(1), Partitions: []uint32{0}}))
	if _, err := c.Leave(mid(1)); !errors.Is(err, ErrGenerationMax) {
		t.Fatalf("generation past uint64: %v", err)
	}
	if c.Len() != 1 || c.Generation() != math.MaxUint64 {
		t.Fatalf("refused change applied")
	}
}

// The cohort keeps no alias of the caller's slices.
func TestCohortCopiesItsInput(t *testing.T) {
	c := newTestCohort(t, 3, 0)
	parts := []uint32{0, 1, 2}
	checked(t, c)(c.Join(Member{ID: mid(1), Partitions: parts}))
	parts[0] = 2
	c.Members()[0].Partitions[1] = 0
	if err := c.CheckInvariants(); err != nil || !slices.Equal(c.Members()[0].Partitions, []uint32{0, 1, 2}) {
		t.Fatalf("aliased: %v %v", err, c.Members())
	}
}

func second(_ Change, err error) error { return err }

func equalMemberChanges(a, b []MemberChange) bool {
	return slices.EqualFunc(a, b, func(x, y MemberChange) bool {
		return x.Member == y.Member && slices.Equal(x.Assigned, y.Assigned) && slices.Equal(x.Added, y.Added) &&
			slices.Equal(x.Revoked, y.Revoked)
	})
}

// TestSetEqualsTheSameChangesOneByOne: Set with a whole member list gives
// the owners the same members reached by Join and Update would, from the
// same previous owners, and bumps the generation once.
func TestSetEqualsTheSameChangesOneByOne(t *testing.T) {
	id := func(b byte) MemberID { return MemberID{15: b} }
	all := []uint32{0, 1, 2, 3, 4, 5, 6, 7}
	one, err := NewCohort("g", 8, 100)
	if err != nil {
		t.Fatal(err)
	}
	batch, _ := NewCohort("g", 8, 100)
	for _, m := range []Member{{ID: id(1), Partitions: all}, {ID: id(2), Partitions: all}} {
		if _, err := one.Join(m); err != nil {
			t.Fatal(err)
		}
		if _, err := batch.Set(append(batch.Members(), m)); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(one.Owners(), batch.Owners()) {
		t.Fatalf("one by one %v, by Set %v", one.Owners(), batch.Owners())
	}
	gen := batch.Generation()
	// Three members in one Set, given out of order: one generation.
	ch, err := batch.Set([]Member{{ID: id(3), Partitions: all}, {ID: id(1), Partitions: all}, {ID: id(2), Partitions: all}})
	if err != nil || ch.Generation != gen+1 || batch.Len() != 3 {
		t.Fatalf("set of three: %v, generation %d after %d, %d members", err, ch.Generation, gen, batch.Len())
	}
	if err := batch.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if _, err := batch.Set([]Member{{ID: id(1)}, {ID: id(1)}}); !errors.Is(err, ErrDuplicateMember) || batch.Len() != 3 {
		t.Fatalf("a repeated id: %v (%d members)", err, batch.Len())
	}
}
