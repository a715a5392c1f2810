package cohort

import (
	"fmt"
	"slices"

	"pgregory.net/rapid"
)

// The oracle: plain, slow, independent re-statements of what Assign
// promises (doc.go), written from the rules rather than from the solver.
// Nothing here shares code with assign.go or path.go.

// instance is one input of Assign.
type instance struct {
	partitionCount uint32
	members        []Member
	previous       []Owner
}

// score is what the rules rank an assignment by, most important first:
// the partitions given over targets, the sum of squared loads (balance),
// then the moves (partitions taken off a still-eligible previous owner).
type score struct{ excess, squares, moves int }

func (a score) balanceLess(b score) bool {
	return a.excess < b.excess || a.excess == b.excess && a.squares < b.squares
}

func (a score) sameBalance(b score) bool { return a.excess == b.excess && a.squares == b.squares }

func (a score) String() string {
	return fmt.Sprintf("excess %d, squares %d, moves %d", a.excess, a.squares, a.moves)
}

// memberIndex maps ids to positions in inst.members (input order).
func (inst *instance) memberIndex() map[MemberID]int {
	idx := map[MemberID]int{}
	for i, m := range inst.members {
		idx[m.ID] = i
	}
	return idx
}

// subscribersOf lists, per partition, the input positions of its subscribers.
func (inst *instance) subscribersOf() [][]int {
	subs := make([][]int, inst.partitionCount)
	for i, m := range inst.members {
		for _, p := range m.Partitions {
			subs[p] = append(subs[p], i)
		}
	}
	return subs
}

// eligiblePrevious is, per partition, the input position of its previous
// owner when that owner is still a member subscribed to it, else -1.
func (inst *instance) eligiblePrevious() []int {
	idx, subs := inst.memberIndex(), inst.subscribersOf()
	prev := make([]int, inst.partitionCount)
	for p := range prev {
		prev[p] = -1
		if inst.previous == nil || !inst.previous[p].Assigned {
			continue
		}
		if m, ok := idx[inst.previous[p].Member]; ok && slices.Contains(subs[p], m) {
			prev[p] = m
		}
	}
	return prev
}

// scoreOf rates owners (input positions per partition, -1 none).
func (inst *instance) scoreOf(owners []int) score {
	loads := make([]int, len(inst.members))
	for _, m := range owners {
		if m >= 0 {
			loads[m]++
		}
	}
	var sc score
	for i, l := range loads {
		sc.squares += l * l
		if t := int(inst.members[i].Target); t > 0 && l > t {
			sc.excess += l - t
		}
	}
	for p, prev := range inst.eligiblePrevious() {
		if prev >= 0 && owners[p] != prev {
			sc.moves++
		}
	}
	return sc
}

// positions turns Assign's output into input positions per partition.
func (inst *instance) positions(out []Owner) []int {
	idx := inst.memberIndex()
	owners := make([]int, len(out))
	for p, o := range out {
		owners[p] = -1
		if o.Assigned {
			owners[p] = idx[o.Member]
		}
	}
	return owners
}

// everyAssignment calls fn with every covering assignment (each covered
// partition to each of its subscribers in turn). fn must not keep owners.
func (inst *instance) everyAssignment(fn func(owners []int)) {
	subs := inst.subscribersOf()
	owners := make([]int, inst.partitionCount)
	var walk func(p int)
	walk = func(p int) {
		if p == len(owners) {
			fn(owners)
			return
		}
		if len(subs[p]) == 0 {
			owners[p] = -1
			walk(p + 1)
			return
		}
		for _, m := range subs[p] {
			owners[p] = m
			walk(p + 1)
		}
	}
	walk(0)
}

// bruteBest is the best score over every covering assignment: the least
// balance, then the fewest moves among assignments of that balance.
func (inst *instance) bruteBest() score {
	var best score
	first := true
	inst.everyAssignment(func(owners []int) {
		sc := inst.scoreOf(owners)
		if first || sc.balanceLess(best) || sc.sameBalance(best) && sc.moves < best.moves {
			best, first = sc, false
		}
	})
	return best
}

// priceKey is the price of member i's j-th partition as doc.go defines it:
// (over target, j), compared lexicographically.
func (inst *instance) priceKey(i, j int) [2]int {
	if t := int(inst.members[i].Target); t > 0 && j > t {
		return [2]int{1, j}
	}
	return [2]int{0, j}
}

func keyLess(a, b [2]int) bool { return a[0] < b[0] || a[0] == b[0] && a[1] < b[1] }

// improvingChain looks for the chain the balance invariant forbids: members
// m0 -> m1 -> ... -> mk, each handing the next a partition it owns and the
// next subscribes to, with price(m0, load m0) > price(mk, load mk + 1). It
// returns a description of one, or "" when there is none.
func (inst *instance) improvingChain(owners []int) string {
	n := len(inst.members)
	loads := make([]int, n)
	for _, m := range owners {
		if m >= 0 {
			loads[m]++
		}
	}
	subs := inst.subscribersOf()
	// reach[a][b]: b is reachable from a by hand-overs (a != b).
	reach := make([][]bool, n)
	for a := range reach {
		reach[a] = make([]bool, n)
		for p, o := range owners {
			if o == a {
				for _, b := range subs[p] {
					reach[a][b] = b != a
				}
			}
		}
	}
	for k := range n { // transitive closure (Warshall)
		for a := range n {
			for b := range n {
				reach[a][b] = reach[a][b] || a != b && reach[a][k] && reach[k][b]
			}
		}
	}
	for a := range n {
		for b := range n {
			if reach[a][b] && loads[a] > 0 && keyLess(inst.priceKey(b, loads[b]+1), inst.priceKey(a, loads[a])) {
				return fmt.Sprintf("member %d (load %d, target %d) could hand on to member %d (load %d, target %d)",
					a, loads[a], inst.members[a].Target, b, loads[b], inst.members[b].Target)
			}
		}
	}
	return ""
}

// drawID draws one of a few member ids (small, so that joins collide with
// members and previous owners name members).
func drawID(t *rapid.T, label string) MemberID {
	var id MemberID
	id[0] = byte(rapid.IntRange(1, 9).Draw(t, label))
	id[15] = byte(rapid.IntRange(0, 1).Draw(t, label+"Low"))
	return id
}

// drawSubset draws a subscribed set over partitionCount partitions, in a
// drawn order; often everything, as real members subscribe (PROTOCOL 7.6).
func drawSubset(t *rapid.T, partitionCount uint32, label string) []uint32 {
	var parts []uint32
	all := rapid.IntRange(0, 2).Draw(t, label+"All") == 0
	for p := range partitionCount {
		if all || rapid.Bool().Draw(t, label) {
			parts = append(parts, p)
		}
	}
	perm := rapid.Permutation(parts).Draw(t, label+"Order")
	return perm
}

// drawTarget is mostly none, else small enough to matter.
func drawTarget(t *rapid.T, label string) uint32 {
	if rapid.IntRange(0, 2).Draw(t, label+"Has") > 0 {
		return 0
	}
	return uint32(rapid.IntRange(1, 3).Draw(t, label))
}

// drawInstance draws an input of at most membersMax members and
// partitionsMax partitions, with a previous assignment that may name
// members that left, members not subscribed, or nobody.
func drawInstance(t *rapid.T, membersMax, partitionsMax int) instance {
	// Draws past the maximum are clamped to it, so that about half the
	// inputs are full size, where moves, chains and targets interact most.
	inst := instance{partitionCount: uint32(min(partitionsMax, rapid.IntRange(1, 2*partitionsMax).Draw(t, "partitions")))}
	n := min(membersMax, rapid.IntRange(0, 2*membersMax).Draw(t, "members"))
	seen := map[MemberID]bool{}
	for len(inst.members) < n {
		id := drawID(t, "id")
		if seen[id] {
			continue
		}
		seen[id] = true
		inst.members = append(inst.members, Member{ID: id, Partitions: drawSubset(t, inst.partitionCount, "sub"),
			Target: drawTarget(t, "target")})
	}
	switch rapid.IntRange(0, 2).Draw(t, "previousKind") {
	case 1: // arbitrary: any id or none per partition
		inst.previous = make([]Owner, inst.partitionCount)
		for p := range inst.previous {
			if rapid.IntRange(0, 4).Draw(t, "prevSet") > 0 {
				inst.previous[p] = Owner{Member: drawID(t, "prev"), Assigned: true}
			}
		}
	case 2: // what a real change starts from: the assignment of a membership
		// one step away (a member more, less, or with another subset)
		inst.previous = neighbourAssignment(t, inst)
	}
	return inst
}

// neighbourAssignment is Assign's answer for inst's members after one
// drawn change: one left, one more joined, or one's subset redrawn.
func neighbourAssignment(t *rapid.T, inst instance) []Owner {
	others := slices.Clone(inst.members)
	switch op := rapid.IntRange(0, 2).Draw(t, "neighbour"); {
	case op == 0 && len(others) > 0:
		others = slices.Delete(others, 0, 1)
	case op == 1 || len(others) == 0:
		id := drawID(t, "neighbourID")
		if !slices.ContainsFunc(others, func(m Member) bool { return m.ID == id }) {
			others = append(others, Member{ID: id, Partitions: drawSubset(t, inst.partitionCount, "neighbourSub")})
		}
	default:
		i := rapid.IntRange(0, len(others)-1).Draw(t, "neighbourIndex")
		others[i].Partitions = drawSubset(t, inst.partitionCount, "neighbourSub")
	}
	prev, err := Assign(inst.partitionCount, others, nil)
	if err != nil {
		t.Fatal(err)
	}
	return prev
}
