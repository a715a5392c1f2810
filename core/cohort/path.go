package cohort

import "math/bits"

// One step of successive shortest paths: add a partition to the flow along
// the cheapest path to the sink. Invariants:
//   - before and after place, every residual arc has a non-negative reduced
//     cost (cost + potential[from] - potential[to]); search asserts it on
//     every sink arc and relax on every hand-over arc it relaxes, so a flow
//     that stopped being optimal panics here instead of yielding a quietly
//     unbalanced assignment;
//   - a path is simple and starts at a member subscribed to the new
//     partition; each hop a->b hands b a partition a owned before the step,
//     so only the path's last member gains a partition and nobody loses one;
//   - potential[T] is 0 between steps (they are shifted after each update),
//     which keeps them within a few path costs of zero; a search first
//     raises it as far as the sink's arcs allow (tightenSink), so that the
//     cheapest direct arc has reduced cost 0 and the search can stop as
//     soon as it pops that member. Any value in that range is valid, so
//     this changes how fast the search ends, never its answer.

// place adds partition p (subscribed, not yet owned) to the flow.
func (s *solver) place(p int32) {
	assertTrue(s.owner[p] < 0, "a partition placed twice")
	assertTrue(len(s.subscribers[p]) > 0, "an uncovered partition placed")
	if s.variant == variantGreedy {
		s.placeGreedy(p)
		return
	}
	s.search(p)
	path := s.path()
	// The hand-overs are chosen on the graph the search saw, before any
	// partition moves: a hop must hand on a partition its member held.
	hops := s.hops(path)
	s.updatePotentials()
	// The moved potentials make every arc of the path tight; the last one,
	// into the sink, is checked here (the others are re-checked by relax
	// once their reverses exist).
	last := path[len(path)-1]
	assertTrue(s.sinkCost(last)+s.potential[last]-s.potential[s.n] == 0, "the path's sink arc is not tight after the update")
	s.setOwner(p, path[0])
	for i, q := range hops {
		s.setOwner(q, path[i+1])
	}
}

// search runs Dijkstra from p over reduced costs until the sink is popped.
// p itself is not a node: the members subscribed to it start with the
// label of the arc p->m (stickCost, less m's potential), which is the same
// as a super-source with non-negative arcs shifted by a constant.
func (s *solver) search(p int32) {
	sink := int32(s.n)
	s.tightenSink()
	for v := range s.label {
		s.label[v], s.pred[v], s.popped[v] = noLabel, -1, false
	}
	for m := range int32(s.n) {
		s.sinkReduced[m] = s.sinkCost(m) + s.potential[m] - s.potential[sink]
		assertTrue(s.sinkReduced[m] >= 0, "a sink arc with negative reduced cost")
	}
	for _, m := range s.subscribers[p] {
		s.label[m] = s.stickCost(p, m) - s.potential[m]
	}
	for {
		v := s.nextLabel()
		assertTrue(v >= 0, "the sink is unreachable from a subscribed partition")
		s.popped[v] = true
		if v == sink {
			return
		}
		if l := s.label[v] + s.sinkReduced[v]; l < s.label[sink] {
			s.label[sink], s.pred[sink] = l, v
		}
		if s.load[v] == 0 {
			continue // owns nothing: no hand-over arcs out of it
		}
		lv := s.label[v]
		for b := range int32(s.n) {
			// Reduced costs are non-negative: a node already labelled at
			// or below v's cannot improve through v, so skip the arc read.
			if b == v || s.popped[b] || s.label[b] <= lv {
				continue
			}
			if cost, ok := s.arcCost(v, b); ok {
				s.relax(v, b, cost)
			}
		}
	}
}

// nextLabel is the unpopped node with the smallest label. On a tie the
// sink comes first (nothing popped after it can make it cheaper, so the
// search stops), then the member whose own sink arc is cheapest (the one
// most likely to end the search: without this, members that already took
// a partition this round would all be popped before the one that takes
// the next), then the lowest member index (rule 4: member order).
func (s *solver) nextLabel() int32 {
	best, v := int64(noLabel), int32(-1)
	if sink := s.n; !s.popped[sink] && s.label[sink] != noLabel {
		best, v = s.label[sink], int32(sink)
	}
	for m := range int32(s.n) {
		if s.popped[m] || s.label[m] > best || s.label[m] == noLabel {
			continue
		}
		if s.label[m] < best || v != int32(s.n) && s.sinkReduced[m] < s.sinkReduced[v] {
			best, v = s.label[m], m
		}
	}
	return v
}

// relax offers node to the label of from plus the arc's reduced cost. Only
// a strictly cheaper label replaces the one there, so on a tie the node
// keeps the predecessor popped first, which is the lower member index.
func (s *solver) relax(from, to int32, cost int64) {
	reduced := cost + s.potential[from] - s.potential[to]
	assertTrue(reduced >= 0, "a residual arc with negative reduced cost: the flow is not optimal")
	if l := s.label[from] + reduced; l < s.label[to] {
		s.label[to], s.pred[to] = l, from
	}
}

// path lists the members from the first (subscribed to the new partition)
// to the last (the one that takes a partition more), read off pred.
func (s *solver) path() []int32 {
	var path []int32
	for v := s.pred[s.n]; v >= 0; v = s.pred[v] {
		path = append(path, v)
		assertTrue(len(path) <= s.n, "a cycle in the shortest-path tree")
	}
	assertTrue(len(path) > 0, "the sink was popped with no predecessor")
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	return path
}

// hops picks, for each hop a->b of path, the partition a hands to b: one
// realising the arc's cost, the lowest partition number among them (rule 4).
func (s *solver) hops(path []int32) []int32 {
	hops := make([]int32, 0, len(path)-1)
	for i := 0; i+1 < len(path); i++ {
		a, b := path[i], path[i+1]
		cost, ok := s.arcCost(a, b)
		assertTrue(ok, "a path hop along an arc that does not exist")
		q := s.handOver(a, b, cost)
		assertTrue(q >= 0, "an arc count with no partition behind it")
		hops = append(hops, q)
	}
	return hops
}

// handOver is the lowest partition owned by a, subscribed by b, whose
// hand-over a->b costs cost, or -1.
func (s *solver) handOver(a, b int32, cost int64) int32 {
	for w, word := range s.owned[a] {
		for word &= s.subscribed[b][w]; word != 0; word &= word - 1 {
			p := int32(w*64 + bits.TrailingZeros64(word))
			if s.handCost(p, a, b) == cost {
				return p
			}
		}
	}
	return -1
}

// updatePotentials adds each node's distance (capped at the sink's) to its
// potential. Arcs that existed keep non-negative reduced costs, the arcs of
// the path get reduced cost 0, so their reverses (and the hand-over arcs
// the moved partitions bring) stay non-negative too. Nodes the search never
// reached, or reached no sooner than the sink, all move by the sink's
// distance, which changes no reduced cost between them.
func (s *solver) updatePotentials() {
	sinkLabel := s.label[s.n]
	assertTrue(sinkLabel != noLabel, "potentials updated without a path")
	for v := range s.potential {
		s.potential[v] += min(s.label[v], sinkLabel)
	}
	shift := s.potential[s.n]
	for v := range s.potential {
		s.potential[v] -= shift
	}
}

// placeGreedy is variantGreedy: the subscriber with the cheapest direct arc
// takes p, and nothing is ever handed on. It balances only when every member
// subscribes to everything and moves whatever that costs.
func (s *solver) placeGreedy(p int32) {
	best, to := int64(noLabel), int32(-1)
	for _, m := range s.subscribers[p] {
		if c := s.sinkCost(m) + s.stickCost(p, m); c < best {
			best, to = c, m
		}
	}
	assertTrue(to >= 0, "a placed partition without subscribers")
	s.setOwner(p, to)
}

// tightenSink raises the sink's potential as far as its arcs allow. An arc
// m->T (m takes one more) needs potential[T] <= sinkCost(m)+potential[m]:
// the least of those is hi. A reverse arc T->m (a loaded m gives its last
// one back) needs potential[T] >= weight*price(m, load)+potential[m]: the
// greatest is lo. Every value in [lo, hi] keeps all reduced costs
// non-negative; hi makes the cheapest sink arc tight.
func (s *solver) tightenSink() {
	hi, lo := int64(noLabel), int64(-noLabel)
	for m := range int32(s.n) {
		hi = min(hi, s.sinkCost(m)+s.potential[m])
		if s.load[m] > 0 {
			lo = max(lo, s.weight*s.price(m, s.load[m])+s.potential[m])
		}
	}
	// The current value is valid (the last update kept every arc
	// non-negative), so the range is never empty.
	assertTrue(lo <= s.potential[s.n], "a reverse sink arc with negative reduced cost")
	assertTrue(s.potential[s.n] <= hi, "a sink arc with negative reduced cost")
	s.potential[s.n] = hi
}
