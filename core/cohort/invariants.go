package cohort

import (
	"fmt"
	"slices"
)

// The checks here restate the guarantees of doc.go directly, without the
// flow model, so that a bug in the solver is not also a bug in its check.
// They are O(members³ + subscriptions): tests and the simulator run them
// after every change; production does not.

// CheckAssignment reports the first way owners breaks coverage or the
// balance invariant for these members: a partition with no owner that a
// member subscribes to, an owner that is not a member subscribed to its
// partition, or a chain of hand-overs that would lower the price of the
// partition given up below the price of the one taken (doc.go). It does
// not judge stickiness, which depends on the previous owners.
func CheckAssignment(partitionCount uint32, members []Member, owners []Owner) error {
	// The same input rules as Assign: a check that accepted what Assign
	// refuses would judge assignments Assign can never produce.
	if err := validateMembers(partitionCount, members); err != nil {
		return err
	}
	if len(owners) != int(partitionCount) {
		return fmt.Errorf("%d owners for %d partitions", len(owners), partitionCount)
	}
	// Positions in the caller's order: the check must not depend on the
	// solver's sorting to be right.
	index := make(map[MemberID]int, len(members))
	for i, m := range members {
		index[m.ID] = i
	}
	subscribers := make([][]int, partitionCount)
	for i, m := range members {
		for _, p := range m.Partitions {
			subscribers[p] = append(subscribers[p], i)
		}
	}
	owner := make([]int, partitionCount)
	loads := make([]int64, len(members))
	for p, o := range owners {
		owner[p] = -1
		if !o.Assigned {
			// Rule 1 one way: nobody owns p only if nobody can. A stray
			// id under Assigned false would be read as an owner by a
			// careless caller, so it is refused too.
			if len(subscribers[p]) > 0 || !o.Member.IsNil() {
				return fmt.Errorf("partition %d: no owner, %d members subscribe to it (or a stray id %v)", p, len(subscribers[p]), o.Member)
			}
			continue
		}
		// Rule 1 the other way: the owner can take p.
		i, ok := index[o.Member]
		if !ok || !slices.Contains(subscribers[p], i) {
			return fmt.Errorf("partition %d: owner %v is not a member subscribed to it", p, o.Member)
		}
		owner[p], loads[i] = i, loads[i]+1
	}
	return checkChains(members, subscribers, owner, loads)
}

// checkChains looks for an improving chain: from member a (load la) through
// hand-overs to member b with price(b, lb+1) < price(a, la). It computes
// who can reach whom by hand-overs, then compares prices pairwise.
func checkChains(members []Member, subscribers [][]int, owner []int, loads []int64) error {
	n := len(members)
	next := make([][]bool, n) // next[a][b]: a owns a partition b subscribes to
	for a := range next {
		next[a] = make([]bool, n)
	}
	for p, a := range owner {
		for _, b := range subscribers[p] {
			if a >= 0 && b != a {
				next[a][b] = true
			}
		}
	}
	// One breadth-first search per member that owns something: chains are
	// walks over next, and a shortest one is simple, so reachability is
	// all the rule needs (the intermediate members keep their counts).
	reached := make([]bool, n)
	queue := make([]int, 0, n)
	for a := range n {
		if loads[a] == 0 {
			continue // gives nothing up, so starts no chain
		}
		clear(reached)
		reached[a], queue = true, append(queue[:0], a)
		for len(queue) > 0 {
			v := queue[0]
			queue = queue[1:]
			for b := range n {
				if next[v][b] && !reached[b] {
					reached[b], queue = true, append(queue, b)
				}
			}
		}
		for b := range n {
			if b != a && reached[b] && priceLess(members[b], loads[b]+1, members[a], loads[a]) {
				return fmt.Errorf("unbalanced: member %v (%d partitions, target %d) could hand one on to member %v (%d, target %d)",
					members[a].ID, loads[a], members[a].Target, members[b].ID, loads[b], members[b].Target)
			}
		}
	}
	return nil
}

// priceLess compares the price of member x's jx-th partition with member
// y's jy-th: over target or not first, then the count (doc.go).
func priceLess(x Member, jx int64, y Member, jy int64) bool {
	over := func(m Member, j int64) bool { return m.Target > 0 && j > int64(m.Target) }
	ox, oy := over(x, jx), over(y, jy)
	if ox != oy {
		return oy
	}
	return jx < jy
}

// CheckInvariants reports the first broken invariant of the cohort (see
// Cohort): member order and validity, coverage and balance of the owners,
// and that the owners are a fixed point of Assign (re-running it with
// them as the previous owners moves nothing: it is what a change made).
func (c *Cohort) CheckInvariants() error {
	// The bounds first: everything after indexes by them.
	if len(c.members) > MembersMax || len(c.owners) != int(c.partitionCount) {
		return fmt.Errorf("%d members, %d owners for %d partitions", len(c.members), len(c.owners), c.partitionCount)
	}
	for i, m := range c.members {
		if i > 0 && compareIDs(c.members[i-1].ID, m.ID) >= 0 {
			return fmt.Errorf("members out of order at %d", i)
		}
		if !slices.IsSorted(m.Partitions) {
			return fmt.Errorf("member %v: partitions not sorted", m.ID)
		}
	}
	if err := CheckAssignment(c.partitionCount, c.members, c.owners); err != nil {
		return err
	}
	// The fixed point: the owners are balanced and keep every partition
	// where it is, so the fewest-moves balanced answer is themselves. If
	// re-running moves anything, the owners were not what a change made
	// (or the solver is not deterministic).
	again, err := Assign(c.partitionCount, c.members, c.owners)
	if err != nil {
		return err
	}
	if !slices.Equal(again, c.owners) {
		return fmt.Errorf("the owners are not a fixed point of Assign: re-running it moves partitions")
	}
	return nil
}
