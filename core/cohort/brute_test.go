package cohort

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// propBruteForce: Assign's output scores exactly as well as the best
// covering assignment (balance first, then moves), on inputs small enough
// to enumerate. When no member has a target it also has the smallest
// largest load of any assignment (a consequence of the sum of squares
// being least, checked rather than assumed).
func propBruteForce(v variant) func(*rapid.T) {
	return func(t *rapid.T) {
		inst := drawInstance(t, 4, 6)
		out, err := assign(inst.partitionCount, inst.members, inst.previous, v)
		if err != nil {
			t.Fatal(err)
		}
		owners := inst.positions(out)
		got, want := inst.scoreOf(owners), inst.bruteBest()
		if got != want {
			t.Fatalf("assign scored %v, the best is %v (owners %v)", got, want, owners)
		}
		if slices.ContainsFunc(inst.members, func(m Member) bool { return m.Target > 0 }) {
			return
		}
		least := len(owners) + 1
		inst.everyAssignment(func(o []int) { least = min(least, maxLoad(o, len(inst.members))) })
		if got := maxLoad(owners, len(inst.members)); got != least {
			t.Fatalf("largest load %d, the least possible is %d", got, least)
		}
	}
}

func maxLoad(owners []int, n int) int {
	if n == 0 {
		return 0
	}
	loads := make([]int, n+1)
	for _, m := range owners {
		loads[m+1]++ // index 0 counts the unowned, which do not matter
	}
	return slices.Max(loads[1:])
}

// TestAssignMatchesBruteForce: on every input of up to 4 members x 6
// partitions (subsets, targets, previous owners that left or unsubscribed,
// previous assignments from a neighbouring membership), Assign's output
// has the best balance any covering assignment has and, among those, the
// fewest moves: rules 2 and 3 exactly, not approximately.
func TestAssignMatchesBruteForce(t *testing.T) {
	rapid.Check(t, propBruteForce(variantNone))
}

// TestBalanceInvariantIsOptimality checks the claim doc.go makes about the
// balance invariant: an assignment has no improving chain exactly when no
// covering assignment has a better balance (less excess over targets, then
// a smaller sum of squared loads). So the local rule (CheckAssignment's) is
// the global optimum, for every assignment of small inputs, not only
// Assign's.
func TestBalanceInvariantIsOptimality(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		inst := drawInstance(t, 4, 5)
		best := inst.bruteBest()
		inst.everyAssignment(func(owners []int) {
			optimal := inst.scoreOf(owners).sameBalance(best)
			chain := inst.improvingChain(owners)
			if optimal != (chain == "") {
				t.Fatalf("owners %v: optimal %v but chain %q (best %v)", owners, optimal, chain, best)
			}
			out := make([]Owner, len(owners))
			for p, m := range owners {
				if m >= 0 {
					out[p] = Owner{Member: inst.members[m].ID, Assigned: true}
				}
			}
			if err := CheckAssignment(inst.partitionCount, inst.members, out); (err == nil) != optimal {
				t.Fatalf("owners %v: optimal %v but CheckAssignment says %v", owners, optimal, err)
			}
		})
	})
}

// propDeterminism: the same input in another order (members shuffled, each
// member's partitions shuffled) gives the same output, and so does the
// same input again.
func propDeterminism(v variant) func(*rapid.T) {
	return func(t *rapid.T) {
		inst := drawInstance(t, 6, 10)
		out, err := assign(inst.partitionCount, inst.members, inst.previous, v)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := assign(inst.partitionCount, inst.members, inst.previous, v)
		other := rapid.Permutation(inst.members).Draw(t, "memberOrder")
		for i := range other {
			other[i].Partitions = rapid.Permutation(other[i].Partitions).Draw(t, "partitionOrder")
		}
		reordered, _ := assign(inst.partitionCount, other, inst.previous, v)
		if !slices.Equal(out, again) || !slices.Equal(out, reordered) {
			t.Fatalf("same input, different outputs:\n%v\n%v\n%v", out, again, reordered)
		}
	}
}

// TestAssignDeterminism: rule 4.
func TestAssignDeterminism(t *testing.T) {
	rapid.Check(t, propDeterminism(variantNone))
}

// TestAssignAgainstCertificate: inputs too big to enumerate (up to 8
// members x 24 partitions) are held to the same optimum through the
// negative-cycle certificate, and to the balance invariant and the target
// rule through their own oracles.
func TestAssignAgainstCertificate(t *testing.T) {
	rapid.Check(t, propCertificate(variantNone))
}

func propCertificate(v variant) func(*rapid.T) {
	return func(t *rapid.T) {
		inst := drawInstance(t, 8, 24)
		out, err := assign(inst.partitionCount, inst.members, inst.previous, v)
		if err != nil {
			t.Fatal(err)
		}
		owners := inst.positions(out)
		for _, msg := range []string{inst.coverage(out), inst.improvingChain(owners), inst.negativeCycle(owners)} {
			if msg != "" {
				t.Fatal(msg)
			}
		}
		if inst.targetsFeasible() && inst.scoreOf(owners).excess > 0 {
			t.Fatalf("over a target though every target can be met")
		}
	}
}
