package cohort

import (
	"errors"
	"slices"
	"testing"
)

// Unit tests: one per rule of docs/cohorts.md "The assignment", each on a
// hand-made input whose answer is worked out in the comment.

// mid is member id number i (ids sort by i).
func mid(i byte) MemberID { return MemberID{0: i} }

// span is the partitions from..to-1.
func span(from, to uint32) []uint32 {
	var ps []uint32
	for p := from; p < to; p++ {
		ps = append(ps, p)
	}
	return ps
}

// owned lists, per member id number, the partitions out gives it.
func owned(out []Owner) map[byte][]uint32 {
	m := map[byte][]uint32{}
	for p, o := range out {
		if o.Assigned {
			m[o.Member[0]] = append(m[o.Member[0]], uint32(p))
		}
	}
	return m
}

// previousOf builds previous owners from id number -> partitions.
func previousOf(partitionCount uint32, sets map[byte][]uint32) []Owner {
	prev := make([]Owner, partitionCount)
	for id, ps := range sets {
		for _, p := range ps {
			prev[p] = Owner{Member: mid(id), Assigned: true}
		}
	}
	return prev
}

func mustAssign(t *testing.T, partitionCount uint32, members []Member, previous []Owner) map[byte][]uint32 {
	t.Helper()
	out, err := Assign(partitionCount, members, previous)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckAssignment(partitionCount, members, out); err != nil {
		t.Fatal(err)
	}
	return owned(out)
}

func wantSets(t *testing.T, got map[byte][]uint32, want map[byte][]uint32) {
	t.Helper()
	for id := range got {
		if _, ok := want[id]; !ok && len(got[id]) > 0 {
			t.Fatalf("member %d got %v, want nothing (all: %v)", id, got[id], got)
		}
	}
	for id, ps := range want {
		if !slices.Equal(got[id], ps) {
			t.Fatalf("member %d got %v, want %v (all: %v)", id, got[id], ps, got)
		}
	}
}

// Rule 1: a partition nobody subscribes to has no owner; every other one
// has exactly one owner, subscribed to it.
func TestCoverage(t *testing.T) {
	members := []Member{{ID: mid(1), Partitions: []uint32{0, 1}}, {ID: mid(2), Partitions: []uint32{1, 3}}}
	out, err := Assign(5, members, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out[2].Assigned || out[4].Assigned {
		t.Fatalf("unsubscribed partitions 2 and 4 got owners: %v", out)
	}
	// 0 can only go to 1 and 3 only to 2; 1 to either (1/2 or 2/1 are
	// equally balanced, and which one is the solver's tie, not the rule's).
	got := owned(out)
	if !slices.Contains(got[1], 0) || !slices.Contains(got[2], 3) || len(got[1])+len(got[2]) != 3 {
		t.Fatalf("got %v", got)
	}
	// No members: nothing is owned.
	if out, err := Assign(3, nil, nil); err != nil || slices.ContainsFunc(out, func(o Owner) bool { return o.Assigned }) {
		t.Fatalf("no members: %v %v", out, err)
	}
}

// Rule 2: with the same members, a balanced previous assignment comes back
// unchanged, however uneven in partition numbers it is.
func TestStickinessKeepsABalancedAssignment(t *testing.T) {
	members := []Member{{ID: mid(1), Partitions: span(0, 6)}, {ID: mid(2), Partitions: span(0, 6)}}
	prev := map[byte][]uint32{1: {1, 4, 5}, 2: {0, 2, 3}}
	wantSets(t, mustAssign(t, 6, members, previousOf(6, prev)), prev)
}

// Rules 2-3 on a join: 1 and 2 own three partitions each; 3 joins and
// takes one from each (two moves, the fewest that balance 2/2/2), and 1
// and 2 keep two of their own.
func TestJoinMovesOnlyWhatBalanceNeeds(t *testing.T) {
	members := []Member{{ID: mid(1), Partitions: span(0, 6)}, {ID: mid(2), Partitions: span(0, 6)},
		{ID: mid(3), Partitions: span(0, 6)}}
	got := mustAssign(t, 6, members, previousOf(6, map[byte][]uint32{1: {0, 1, 2}, 2: {3, 4, 5}}))
	kept := func(ps []uint32, from, to uint32) bool {
		return len(ps) == 2 && !slices.ContainsFunc(ps, func(p uint32) bool { return p < from || p >= to })
	}
	if !kept(got[1], 0, 3) || !kept(got[2], 3, 6) || len(got[3]) != 2 || got[3][0] >= 3 || got[3][1] < 3 {
		t.Fatalf("got %v, want 1 and 2 to keep two of theirs each and 3 one of each", got)
	}
}

// Rules 2-3 on a leave: 3 leaves; its two partitions go one to each
// survivor and nobody else's move.
func TestLeaveMovesOnlyTheLeaversPartitions(t *testing.T) {
	members := []Member{{ID: mid(1), Partitions: span(0, 6)}, {ID: mid(2), Partitions: span(0, 6)}}
	got := mustAssign(t, 6, members, previousOf(6, map[byte][]uint32{1: {1, 2}, 2: {4, 5}, 3: {0, 3}}))
	wantSets(t, got, map[byte][]uint32{1: {0, 1, 2}, 2: {3, 4, 5}})
}

// Rule 3 with everyone on everything: counts differ by at most one, and
// the extra partitions go to the lowest ids (rule 4).
func TestBalanceEvenSplit(t *testing.T) {
	members := []Member{{ID: mid(3), Partitions: span(0, 10)}, {ID: mid(1), Partitions: span(0, 10)},
		{ID: mid(2), Partitions: span(0, 10)}}
	got := mustAssign(t, 10, members, nil)
	if len(got[1]) != 4 || len(got[2]) != 3 || len(got[3]) != 3 {
		t.Fatalf("counts %d/%d/%d, want 4/3/3", len(got[1]), len(got[2]), len(got[3]))
	}
}

// Rule 3 with subsets: member 1 can take only partition 3 and gets it;
// member 2 takes the other five (1/5 is the best split there is).
func TestBalanceOverSubsets(t *testing.T) {
	members := []Member{{ID: mid(1), Partitions: []uint32{3}}, {ID: mid(2), Partitions: span(0, 6)}}
	wantSets(t, mustAssign(t, 6, members, previousOf(6, map[byte][]uint32{2: span(0, 6)})),
		map[byte][]uint32{1: {3}, 2: {0, 1, 2, 4, 5}})
}

// Rule 3 through a chain: 3 subscribes only to partition 3, which 2 owns;
// 2 can take partition 2 from 1. Balance needs both hand-overs (1 -> 2 ->
// 3), and no partition 3 cannot use moves.
func TestBalanceThroughAChain(t *testing.T) {
	members := []Member{{ID: mid(1), Partitions: []uint32{0, 1, 2}}, {ID: mid(2), Partitions: []uint32{2, 3}},
		{ID: mid(3), Partitions: []uint32{3}}}
	got := mustAssign(t, 4, members, previousOf(4, map[byte][]uint32{1: {0, 1, 2}, 2: {3}}))
	wantSets(t, got, map[byte][]uint32{1: {0, 1}, 2: {2}, 3: {3}})
}

// Rule 3, the target as a soft cap: 1 wants at most one partition, so 2
// (no target) takes the other five, balance notwithstanding.
func TestTargetIsRespectedWhenOthersCanTake(t *testing.T) {
	members := []Member{{ID: mid(1), Partitions: span(0, 6), Target: 1}, {ID: mid(2), Partitions: span(0, 6)}}
	got := mustAssign(t, 6, members, previousOf(6, map[byte][]uint32{1: {0, 1, 2}, 2: {3, 4, 5}}))
	wantSets(t, got, map[byte][]uint32{1: {0}, 2: {1, 2, 3, 4, 5}})
}

// Rule 3, coverage wins: both want one partition of six; they get three
// each (the excess is spread by balance). And a member under its target
// (3 of target 4) is not pushed over it to even out others.
func TestCoverageWinsOverTargets(t *testing.T) {
	members := []Member{{ID: mid(1), Partitions: span(0, 6), Target: 1}, {ID: mid(2), Partitions: span(0, 6), Target: 1}}
	got := mustAssign(t, 6, members, nil)
	if len(got[1]) != 3 || len(got[2]) != 3 {
		t.Fatalf("counts %d/%d, want 3/3", len(got[1]), len(got[2]))
	}
	members = []Member{{ID: mid(1), Partitions: span(0, 4), Target: 1}, {ID: mid(2), Partitions: span(0, 4), Target: 4}}
	got = mustAssign(t, 4, members, nil)
	if len(got[1]) != 1 || len(got[2]) != 3 {
		t.Fatalf("counts %d/%d, want 1/3", len(got[1]), len(got[2]))
	}
}

// Rule 4: the output does not depend on the order of members or of their
// partitions, and ties go to the lower id: with 3 partitions for 2 members
// and no history, member 1 gets two.
func TestDeterminismAndTies(t *testing.T) {
	a := []Member{{ID: mid(1), Partitions: []uint32{0, 1, 2}}, {ID: mid(2), Partitions: []uint32{0, 1, 2}}}
	b := []Member{{ID: mid(2), Partitions: []uint32{2, 0, 1}}, {ID: mid(1), Partitions: []uint32{1, 2, 0}}}
	outA, _ := Assign(3, a, nil)
	outB, _ := Assign(3, b, nil)
	if !slices.Equal(outA, outB) {
		t.Fatalf("member order changed the output: %v vs %v", outA, outB)
	}
	wantSets(t, owned(outA), map[byte][]uint32{1: {0, 2}, 2: {1}})
	// The caller's slices are not reordered.
	if b[0].ID != mid(2) || b[0].Partitions[0] != 2 {
		t.Fatalf("Assign reordered its input: %v", b)
	}
}

// Previous owners that left, or no longer subscribe, are ignored: their
// partitions are not counted as moves and go where balance wants them.
func TestStalePreviousOwnersAreIgnored(t *testing.T) {
	members := []Member{{ID: mid(1), Partitions: []uint32{0, 1}}, {ID: mid(2), Partitions: []uint32{0, 1}}}
	prev := previousOf(2, map[byte][]uint32{9: {0}}) // 9 is gone
	prev[1] = Owner{Member: mid(1), Assigned: true}
	wantSets(t, mustAssign(t, 2, members, prev), map[byte][]uint32{1: {1}, 2: {0}})
}

// Bad input is refused with an error, never a panic.
func TestAssignRejectsBadInput(t *testing.T) {
	ok := []Member{{ID: mid(1), Partitions: []uint32{0}}}
	cases := []struct {
		name           string
		partitionCount uint32
		members        []Member
		previous       []Owner
		want           error
	}{
		{"no partitions", 0, ok, nil, ErrPartitionCount},
		{"too many partitions", PartitionsMax + 1, ok, nil, ErrPartitionCount},
		{"nil member", 2, []Member{{Partitions: []uint32{0}}}, nil, ErrNilMember},
		{"twice the same member", 2, []Member{ok[0], ok[0]}, nil, ErrDuplicateMember},
		{"partition out of range", 2, []Member{{ID: mid(1), Partitions: []uint32{2}}}, nil, ErrPartitionRange},
		{"partition twice", 2, []Member{{ID: mid(1), Partitions: []uint32{1, 1}}}, nil, ErrDuplicatePartition},
		{"previous of the wrong length", 2, ok, make([]Owner, 1), ErrPreviousLength},
		{"too many members", 2, benchMembers(MembersMax+1, 2), nil, ErrTooManyMembers},
	}
	for _, c := range cases {
		if _, err := Assign(c.partitionCount, c.members, c.previous); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}
