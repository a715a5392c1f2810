package cohort

import "fmt"

// Two more oracles for inputs too big to enumerate, again independent of
// the solver: an optimality certificate for the whole objective, and a
// max-flow test of whether the targets can all be met.

// negativeCycle reports a negative cycle in the residual graph of owners,
// which exists exactly when some covering assignment scores better (less
// excess, then smaller squares, then fewer moves): the optimality condition
// of min-cost flow. The graph is the plain one, with one node per
// partition, per member and the sink; costs weigh excess, squares and
// moves with factors wide enough to make the order lexicographic for the
// small inputs the tests draw (at most 64 partitions).
func (inst *instance) negativeCycle(owners []int) string {
	const moveCost, squareCost, excessCost = 1, 1 << 10, 1 << 24
	pc, n := int(inst.partitionCount), len(inst.members)
	sink := pc + n
	loads := make([]int, n)
	for _, m := range owners {
		if m >= 0 {
			loads[m]++
		}
	}
	// price of member i's j-th partition: the change in squared load (2j-1)
	// plus the excess it adds.
	price := func(i, j int) int64 {
		c := int64(2*j-1) * squareCost
		if t := int(inst.members[i].Target); t > 0 && j > t {
			c += excessCost
		}
		return c
	}
	type arc struct {
		from, to int
		cost     int64
	}
	var arcs []arc
	prev := inst.eligiblePrevious()
	moved := func(p, m int) int64 {
		if prev[p] >= 0 && prev[p] != m {
			return moveCost
		}
		return 0
	}
	for p, subs := range inst.subscribersOf() {
		for _, m := range subs {
			if owners[p] == m {
				arcs = append(arcs, arc{pc + m, p, -moved(p, m)}) // take p back from m
			} else {
				arcs = append(arcs, arc{p, pc + m, moved(p, m)}) // give p to m
			}
		}
	}
	for i := range n {
		arcs = append(arcs, arc{pc + i, sink, price(i, loads[i]+1)})
		if loads[i] > 0 {
			arcs = append(arcs, arc{sink, pc + i, -price(i, loads[i])})
		}
	}
	// Bellman-Ford from a virtual source at distance 0 to every node: a
	// relaxation still possible after V rounds proves a negative cycle.
	dist := make([]int64, sink+1)
	for range sink + 1 {
		changed := false
		for _, a := range arcs {
			if d := dist[a.from] + a.cost; d < dist[a.to] {
				dist[a.to], changed = d, true
			}
		}
		if !changed {
			return ""
		}
	}
	return fmt.Sprintf("the residual graph has a negative cycle (loads %v, owners %v)", loads, owners)
}

// targetsFeasible reports whether some covering assignment gives no member
// more than its target: a max flow from the covered partitions to members
// with capacity target (unbounded without one) that routes all of them.
func (inst *instance) targetsFeasible() bool {
	n := len(inst.members)
	capacity := make([]int, n)
	for i, m := range inst.members {
		capacity[i] = int(m.Target)
		if m.Target == 0 {
			capacity[i] = int(inst.partitionCount)
		}
	}
	subs := inst.subscribersOf()
	holder := make([][]int, n) // partitions routed to each member
	var augment func(p int, seen []bool) bool
	augment = func(p int, seen []bool) bool {
		for _, m := range subs[p] {
			if seen[m] {
				continue
			}
			seen[m] = true
			if len(holder[m]) < capacity[m] {
				holder[m] = append(holder[m], p)
				return true
			}
			for k, q := range holder[m] { // make room: move q elsewhere
				if augment(q, seen) {
					holder[m][k] = p
					return true
				}
			}
		}
		return false
	}
	for p := range subs {
		if len(subs[p]) > 0 && !augment(p, make([]bool, n)) {
			return false
		}
	}
	return true
}
