// Package cohort is the pure assignment of a cohort's partitions to its
// members (docs/cohorts.md, "The assignment"; SPEC 4, PROTOCOL 7.6). It
// does no I/O, reads no clock and knows no node types: the Node keeps one
// Cohort per queue, feeds it joins, updates and leaves, and carries out
// each Change (SetOwner per partition, AssignmentNotice per member).
//
// Driver contract:
//   - NewCohort(id, partitionCount, boot<<32) when the first exclusive
//     member of a queue joins; forget the Cohort when its last member leaves.
//   - Join when a member's first exclusive subscription on the queue
//     arrives, Update when its subscribed partitions or its consumer_target
//     change, Leave when its last one ends (or its grace runs out).
//   - For every OwnerChange send SetOwner{Generation: Change.Generation};
//     for every MemberChange send an AssignmentNotice. A change that moved
//     nothing has no entries and keeps the generation.
//   - An error means the input was refused and the cohort is unchanged.
//   - Assign is the same solver as a plain function, for callers that keep
//     their own state; CheckAssignment and Cohort.CheckInvariants are the
//     checks the simulator runs after every change.
//
// What Assign guarantees, given the partition count, the members (id,
// subscribed partitions, target; 0 = none) and the previous owners. Write
// load(m) for the partitions m is given, and price(m, j) for the pair
// (j > target(m) when m has a target, j), compared first element first
// (false before true), then by j: the price of m's j-th partition.
//
//  1. Coverage. A partition has an owner exactly when some member subscribes
//     to it, and its owner is one of those members.
//  2. Balance. There is no chain of hand-overs m0 -> m1 -> ... -> mk
//     (distinct members, each m(i) owning a partition that m(i+1)
//     subscribes to) with price(mk, load(mk)+1) < price(m0, load(m0)). Such
//     a chain would let m0 give one partition up and mk take one, all others
//     keeping their counts, for a cheaper total. In words: a member is over
//     its target only if no chain leads from it to a member that would stay
//     within its own (or has none); and among members on the same side of
//     their targets, a member has two or more partitions more than another
//     only if no chain leads from the first to the second. When every member
//     subscribes to every partition that means the counts differ by at most
//     one (targets aside); with subsets it is the exact form of "balanced
//     over the partitions each member can take": a member subscribed only to
//     partition 3 either owns it or is not behind anyone who owns it.
//     This local rule is equivalent to the global one (TestBalance-
//     InvariantIsOptimality checks it on every assignment of small inputs):
//     no covering assignment has less total excess over targets, nor the
//     same excess and a smaller sum of squared loads. So a target is
//     respected whenever coverage allows it, coverage always wins, and the
//     excess a shortage forces is spread by plain balance.
//  3. Stickiness. Among all assignments that satisfy 1 and 2, Assign
//     returns one with the fewest moves, a move being a partition whose
//     previous owner is still a member subscribed to it and that now has
//     another owner. A partition whose previous owner left or unsubscribed
//     goes where balance wants it and is not counted. So nothing moves
//     unless balance needs it, and then no more than it needs.
//  4. Determinism. The output depends only on the partition count, the
//     members as a set (their order, and the order of their partitions, do
//     not matter) and the previous owners. Among equally good answers the
//     solver prefers lower member ids, then lower partition numbers, at each
//     choice it makes; which optimal answer that yields is a property of the
//     solver (assign.go), not part of the contract.
//
// How: one min-cost flow solved exactly by successive shortest paths
// (assign.go, path.go). Cost, measured on a shared 2-core Xeon VM (see
// bench_test.go): at 64 members x 256 partitions one Assign is about 1.5
// ms (fresh, join, leave or update alike) and a Cohort Join plus Leave
// about 3 ms; at the limits (MembersMax x PartitionsMax, a million
// subscriptions) 60-130 ms, the slowest with subsets, targets and
// scattered previous owners.
//
// Glossary: a member is one exclusive consumer identity (MemberID, one per
// session); a cohort is the members of one queue; an owner is the member a
// partition is delivered to; the generation numbers assignments so that
// late SetOwners and notices can be dropped; a move is a partition taken
// from an owner that could have kept it.
package cohort
