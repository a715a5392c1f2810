package cohort

import (
	"fmt"
	"math"
	"slices"
)

// Assign solves rules 1-4 of docs/cohorts.md as one min-cost flow. The
// invariants it guarantees (doc.go states them for callers):
//   - coverage: a partition has an owner iff some member subscribes to it,
//     and its owner is one of those members;
//   - balance: no chain of hand-overs lowers the price (see price) of the
//     partition a member gives up below the price of the one another takes;
//   - stickiness: among all balanced assignments, the fewest partitions leave
//     a previous owner that is still a member subscribed to them;
//   - determinism: the output depends only on the inputs as sets; ties are
//     broken by member id, then by partition number.
//
// The model. Each covered partition is one unit of flow that must reach the
// sink T through exactly one subscribed member. Giving a member m its j-th
// partition costs weight*price(m, j) on the arc m->T; routing partition p
// through a member other than p's sticky owner costs 1 more. price grows in
// j (convex), so the cheapest flow is balanced; weight exceeds any possible
// count of moves, so balance is paid for first and moves only break its
// ties. Successive shortest paths find that optimum exactly: partitions are
// added one at a time, each along the cheapest path from it to T in the
// residual graph, which may hand other partitions on along the way. The
// flow stays optimal for the partitions added so far after every step, so
// once all are added it is optimal for the whole input.
//
// The residual graph is kept compressed to members: an arc a->b means "a
// owns some partition b subscribes to", and its cost is the cheapest such
// hand-over (-1: the partition goes back to its sticky owner b; 0; +1: it
// leaves its sticky owner a). arcCount holds how many partitions realise
// each (a, b, cost), so an arc's cost is read in O(1) and kept up to date
// in O(subscribers) when a partition moves.

// Assign gives each partition (0..partitionCount-1) an owner among members
// by rules 1-4 of docs/cohorts.md. previous is the owner of each partition
// before this change (nil: none); an owner that is no longer a member or no
// longer subscribed to its partition is ignored. members may come in any
// order. The result has one Owner per partition.
func Assign(partitionCount uint32, members []Member, previous []Owner) ([]Owner, error) {
	return assign(partitionCount, members, previous, variantNone)
}

// assign is Assign with a broken variant for mutant_test.go.
func assign(partitionCount uint32, members []Member, previous []Owner, v variant) ([]Owner, error) {
	if err := validateMembers(partitionCount, members); err != nil {
		return nil, err
	}
	if previous != nil && len(previous) != int(partitionCount) {
		return nil, fmt.Errorf("%w: %d owners for %d partitions", ErrPreviousLength, len(previous), partitionCount)
	}
	s := newSolver(partitionCount, members, previous, v)
	for _, p := range s.insertionOrder() {
		s.place(p)
	}
	return s.result(), nil
}

// insertionOrder lists the covered partitions in the order they are added
// to the flow. Any order gives the same optimum cost; this one makes it
// cheap. Sticky partitions come round-robin over their owners (the first of
// each owner in member order, then the second of each, ...), so after each
// round the flow built so far is the previous assignment cut down evenly,
// which is usually optimal as it stands: each partition then goes straight
// to its owner in O(members). Orphans (no eligible previous owner) come
// last, when the loads they even out are known.
func (s *solver) insertionOrder() []int32 {
	byOwner := make([][]int32, s.n)
	var orphans []int32
	for p := range int32(s.partitionCount) {
		switch {
		case len(s.subscribers[p]) == 0:
			// Uncovered: no member can own it (rule 1 holds vacuously).
		case s.sticky[p] >= 0:
			byOwner[s.sticky[p]] = append(byOwner[s.sticky[p]], p)
		default:
			orphans = append(orphans, p)
		}
	}
	order := make([]int32, 0, s.partitionCount)
	for rank := 0; ; rank++ {
		placed := false
		for m := range byOwner {
			if rank < len(byOwner[m]) {
				order = append(order, byOwner[m][rank])
				placed = true
			}
		}
		if !placed {
			break
		}
	}
	order = append(order, orphans...)
	// Each covered partition exactly once: placed twice would be caught by
	// place, but never placed would leave it without an owner until
	// result, far from the cause.
	covered := 0
	for p := range s.partitionCount {
		if len(s.subscribers[p]) > 0 {
			covered++
		}
	}
	assertTrue(len(order) == covered, "the insertion order misses or repeats a covered partition")
	return order
}

// variant names a deliberately broken solver (mutant_test.go shows that a
// test catches each). variantNone is the only one production uses.
type variant uint8

const (
	variantNone       variant = iota
	variantNoSticky           // previous owners are ignored: every move is free
	variantNoTarget           // targets are ignored: price is the plain count
	variantGreedy             // each partition goes to its cheapest member, never a chain
	variantInputOrder         // members are not sorted: ties follow the caller's order
	variantBumpOnNoop         // (Cohort) the generation grows on a change that moves nothing
	variantOverCover          // (Cohort) a leaver's partitions keep it as owner
)

// solver holds one Assign call's state. Member indexes are positions in the
// sorted member list; index n (one past the last member) is the sink T.
type solver struct {
	partitionCount int
	n              int
	members        []Member
	// subscribers[p]: the members subscribed to p, ascending.
	subscribers [][]int32
	// subscribed[m]: bitset of the partitions m subscribes to.
	subscribed [][]uint64
	// sticky[p]: p's previous owner if it is still eligible, else -1.
	sticky []int32
	owner  []int32
	load   []int64
	// owned[m]: bitset of the partitions m owns now.
	owned [][]uint64
	// arcCount[(a*n+b)*3+cost+1]: partitions owned by a, subscribed by b,
	// whose hand-over a->b costs cost (-1, 0 or +1). arcMin[a*n+b] caches
	// the least such cost, noArc when there is none: the search reads it
	// once per arc, setOwner refreshes it for the pairs it touches.
	arcCount []int32
	arcMin   []int8
	// potential makes every residual arc's reduced cost non-negative, so
	// Dijkstra applies although hand-overs may cost -1 (Johnson's trick).
	potential []int64
	// weight and tier: see price.
	weight, tier int64
	variant      variant
	// Dijkstra scratch, reused across place calls.
	label  []int64
	pred   []int32
	popped []bool
	// sinkReduced[m]: the reduced cost of m->T during one search (loads and
	// potentials do not change within it), the tie-break of nextLabel.
	sinkReduced []int64
}

// newSolver sorts the members, indexes their subscriptions and resolves
// each previous owner to a member index (or -1 when it is not eligible).
func newSolver(partitionCount uint32, input []Member, previous []Owner, v variant) *solver {
	members := slices.Clone(input)
	if v != variantInputOrder {
		slices.SortFunc(members, func(a, b Member) int { return compareIDs(a.ID, b.ID) })
	}
	n, pc := len(members), int(partitionCount)
	// validateMembers ran first: the limits bound every array below.
	assertTrue(n <= MembersMax, "the solver was given more than MembersMax members")
	assertTrue(pc >= 1 && pc <= PartitionsMax, "the solver was given a partition count out of range")
	words := (pc + 63) / 64
	s := &solver{
		partitionCount: pc, n: n, members: members,
		subscribers: make([][]int32, pc), subscribed: make([][]uint64, n),
		sticky: make([]int32, pc), owner: make([]int32, pc), load: make([]int64, n),
		owned: make([][]uint64, n), arcCount: make([]int32, n*n*3), arcMin: make([]int8, n*n),
		potential: make([]int64, n+1),
		label:     make([]int64, n+1), pred: make([]int32, n+1), popped: make([]bool, n+1),
		sinkReduced: make([]int64, n),
		// A move count never exceeds pc, so weight = pc+1 makes one unit of
		// price worth more than every move together; tier = pc+1 puts any
		// partition over a target above every partition within one.
		weight: int64(pc) + 1, tier: int64(pc) + 1, variant: v,
	}
	index := make(map[MemberID]int32, n)
	for m := range members {
		index[members[m].ID] = int32(m)
		s.subscribed[m] = make([]uint64, words)
		s.owned[m] = make([]uint64, words)
		for _, p := range members[m].Partitions {
			s.subscribers[p] = append(s.subscribers[p], int32(m))
			s.subscribed[m][p/64] |= 1 << (p % 64)
		}
	}
	for i := range s.arcMin {
		s.arcMin[i] = noArc
	}
	for p := range pc {
		s.owner[p], s.sticky[p] = -1, -1
		if previous == nil || !previous[p].Assigned {
			continue
		}
		if m, ok := index[previous[p].Member]; ok && s.subscribes(m, int32(p)) {
			s.sticky[p] = m
		}
	}
	return s
}

func (s *solver) subscribes(m, p int32) bool {
	return s.subscribed[m][p/64]&(1<<(p%64)) != 0
}

// price is what member m's j-th partition costs in units of balance: j
// itself, plus tier once j passes m's target. Prices grow in j, which makes
// the cheapest flow the most even one (it minimises the sum of squared
// loads); the tier makes a partition over a target dearer than any within
// one, so a member goes over its target only when no chain can give the
// partition to a member within its own (docs/cohorts.md rule 3).
func (s *solver) price(m int32, j int64) int64 {
	t := int64(s.members[m].Target)
	if t > 0 && j > t && s.variant != variantNoTarget {
		return j + s.tier
	}
	return j
}

// sinkCost is the cost of arc m->T: m taking one more partition.
func (s *solver) sinkCost(m int32) int64 {
	return s.weight * s.price(m, s.load[m]+1)
}

// stickCost is 1 when p going to m would move it off its sticky owner.
func (s *solver) stickCost(p, m int32) int64 {
	if s.sticky[p] < 0 || s.sticky[p] == m || s.variant == variantNoSticky {
		return 0
	}
	return 1
}

// handCost is the cost of handing p (owned by a) on to b.
func (s *solver) handCost(p, a, b int32) int64 {
	return s.stickCost(p, b) - s.stickCost(p, a)
}

// noArc marks a pair (a, b) with no partition a could hand to b.
const noArc = int8(2)

// arcCost is the cheapest hand-over a->b and whether there is one.
func (s *solver) arcCost(a, b int32) (int64, bool) {
	c := s.arcMin[int(a)*s.n+int(b)]
	return int64(c), c != noArc
}

// countArc adds delta partitions to (a, b) at p's hand-over cost and
// refreshes the cached least cost of the pair.
func (s *solver) countArc(p, a, b int32, delta int32) {
	pair := int(a)*s.n + int(b)
	s.arcCount[pair*3+int(s.handCost(p, a, b))+1] += delta
	assertTrue(s.arcCount[pair*3+int(s.handCost(p, a, b))+1] >= 0, "an arc count below zero")
	s.arcMin[pair] = noArc
	for k := range 3 {
		if s.arcCount[pair*3+k] > 0 {
			s.arcMin[pair] = int8(k - 1)
			break
		}
	}
}

// setOwner moves p to member to (from its current owner, if any) and
// keeps loads and arc counts in step.
func (s *solver) setOwner(p, to int32) {
	from := s.owner[p]
	assertTrue(from != to, "a partition handed to the member that owns it")
	assertTrue(s.subscribes(to, p), "a partition handed to a member not subscribed to it")
	for _, x := range s.subscribers[p] {
		if from >= 0 && x != from {
			s.countArc(p, from, x, -1)
		}
		if x != to {
			s.countArc(p, to, x, +1)
		}
	}
	if from >= 0 {
		s.load[from]--
		s.owned[from][p/64] &^= 1 << (p % 64)
	}
	s.load[to]++
	s.owned[to][p/64] |= 1 << (p % 64)
	s.owner[p] = to
}

// result turns the solver's owners into one Owner per partition, checking
// coverage on the way out.
func (s *solver) result() []Owner {
	out := make([]Owner, s.partitionCount)
	var total int64
	for p := range s.partitionCount {
		m := s.owner[p]
		covered := len(s.subscribers[p]) > 0
		assertTrue(covered == (m >= 0), "a covered partition without owner, or an uncovered one with one")
		if m >= 0 {
			assertTrue(s.subscribes(m, int32(p)), "a partition owned by a member not subscribed to it")
			out[p] = Owner{Member: s.members[m].ID, Assigned: true}
			total++
		}
	}
	var loads int64
	for _, l := range s.load {
		loads += l
	}
	assertTrue(loads == total, "member loads do not add up to the owned partitions")
	return out
}

// noLabel marks a node Dijkstra has not reached.
const noLabel = math.MaxInt64
