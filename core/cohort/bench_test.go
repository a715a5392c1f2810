package cohort

import (
	"testing"
)

// Benchmarks: `go test ./core/cohort -run XXX -bench .`. The 64 x 256 ones
// are the brief's size; the Max ones are the limits (doc.go quotes them).

// benchMembers is n members subscribed to every one of partitions, ids in
// order, no targets.
func benchMembers(n int, partitions uint32) []Member {
	all := make([]uint32, partitions)
	for p := range all {
		all[p] = uint32(p)
	}
	members := make([]Member, n)
	for i := range members {
		members[i].ID[0], members[i].ID[1] = byte(i>>8)+1, byte(i)
		members[i].Partitions = all
	}
	return members
}

// mixedMembers is benchMembers with each member subscribed to about half
// the partitions (a fixed pseudo-random pattern) and every third one with
// a target of 1..20: the shape that makes the searches longest.
func mixedMembers(n int, partitions uint32) []Member {
	members := benchMembers(n, partitions)
	x := uint64(1)
	next := func() uint64 { x = x*6364136223846793005 + 1442695040888963407; return x >> 33 }
	for i := range members {
		var ps []uint32
		for p := range partitions {
			if next()%2 == 0 {
				ps = append(ps, p)
			}
		}
		members[i].Partitions = ps
		if i%3 == 0 {
			members[i].Target = uint32(1 + next()%20)
		}
	}
	return members
}

func benchAssign(b *testing.B, members []Member, partitions uint32, previous []Owner) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Assign(partitions, members, previous); err != nil {
			b.Fatal(err)
		}
	}
}

func mustAssignB(b *testing.B, partitions uint32, members []Member, previous []Owner) []Owner {
	b.Helper()
	out, err := Assign(partitions, members, previous)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkAssign64x256Fresh: 64 members, 256 partitions, no previous
// owners (Assign used directly; a Cohort never starts this way).
func BenchmarkAssign64x256Fresh(b *testing.B) {
	benchAssign(b, benchMembers(64, 256), 256, nil)
}

// BenchmarkAssign64x256Join: a 64th member joins a balanced cohort of 63
// (four partitions move to it).
func BenchmarkAssign64x256Join(b *testing.B) {
	members := benchMembers(64, 256)
	benchAssign(b, members, 256, mustAssignB(b, 256, members[:63], nil))
}

// BenchmarkAssign64x256Leave: one of 64 leaves; its four partitions go to
// the others.
func BenchmarkAssign64x256Leave(b *testing.B) {
	members := benchMembers(64, 256)
	benchAssign(b, members[1:], 256, mustAssignB(b, 256, members, nil))
}

// BenchmarkAssign64x256Update: one of 64 narrows its subscription to a
// quarter of the partitions and sets a target of 2.
func BenchmarkAssign64x256Update(b *testing.B) {
	members := benchMembers(64, 256)
	previous := mustAssignB(b, 256, members, nil)
	members[5].Partitions, members[5].Target = span(0, 64), 2
	benchAssign(b, members, 256, previous)
}

// BenchmarkAssign64x256Mixed: subsets and targets, from the assignment of
// the same members with one more (a leave).
func BenchmarkAssign64x256Mixed(b *testing.B) {
	members := mixedMembers(65, 256)
	benchAssign(b, members[1:], 256, mustAssignB(b, 256, members, nil))
}

// BenchmarkCohort64x256JoinLeave: Cohort.Join then Leave of a 65th member
// (two changes, Change building included).
func BenchmarkCohort64x256JoinLeave(b *testing.B) {
	c, _ := NewCohort("cg", 256, 0)
	members := benchMembers(65, 256)
	for _, m := range members[:64] {
		if _, err := c.Join(m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Join(members[64]); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Leave(members[64].ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAssignMaxJoin: the limits, MembersMax x PartitionsMax, everyone
// on everything, one member joining.
func BenchmarkAssignMaxJoin(b *testing.B) {
	members := benchMembers(MembersMax, PartitionsMax)
	benchAssign(b, members, PartitionsMax, mustAssignB(b, PartitionsMax, members[1:], nil))
}

// BenchmarkAssignMaxMixedShuffled: the limits with subsets and targets,
// and previous owners scattered at random over the members (nothing where
// balance wants it): the slowest shape measured.
func BenchmarkAssignMaxMixedShuffled(b *testing.B) {
	members := mixedMembers(MembersMax, PartitionsMax)
	previous := make([]Owner, PartitionsMax)
	for p := range previous {
		previous[p] = Owner{Member: members[(p*7919)%MembersMax].ID, Assigned: true}
	}
	benchAssign(b, members, PartitionsMax, previous)
}
