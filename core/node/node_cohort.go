package node

import (
	"fmt"
	"slices"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/cohort"
	"github.com/fibril-go/fibril/mutant"
)

// The Node's cohort registry (docs/cohorts.md, "The registry"): one cohort
// per queue (topic, group), its members and their exclusive subscriptions.
// Joins and leaves only mark a cohort dirty; the Node asks for a Tick at
// once and runs core/cohort once per dirty cohort at it, so a member
// subscribing to every partition of a large queue, or a session ending
// with all of them, costs one assignment rather than one per partition.
// Invariants:
//   - a cohort's id binds its queue while the cohort has a member with a
//     subscription; a join naming another id is refused (409) until then;
//   - a member is one member id on one session, with one exclusive
//     subscription per partition it takes (a member id reappearing on
//     another session moves there: its old subscriptions stop counting);
//   - after each assignment, every partition's Host has been sent the
//     owner core/cohort names, as that member's subscription of the
//     partition (or 0), whenever that differs from what it was last sent,
//     under the cohort's generation; and every member whose set changed (or
//     that is new on its session) has been sent its set;
//   - generations never go back, also across a cohort forgotten and
//     created again (cohortGenHigh) and across restarts (boot<<32);
//   - volatile: after a restart members join again.

// cohortKey names a queue's cohort.
type cohortKey struct{ topic, group string }

// cohortEntry is one cohort.
type cohortEntry struct {
	c       *cohort.Cohort
	members map[cohort.MemberID]*cohortMember
	// told is, per partition, the SubID its Host was last sent (0: none or
	// nobody; a Host starts with no owner).
	told []uint64
}

// cohortMember is one member: its session and its exclusive subscriptions.
type cohortMember struct {
	session Address
	subs    map[uint32]uint64 // partition -> SubID
	target  uint32
	// noticed is the set its session was last sent; renotice asks for a
	// notice even when unchanged (a new member, or one that moved).
	noticed  []uint32
	renotice bool
}

func (m *cohortMember) asMember(id cohort.MemberID) cohort.Member {
	parts := make([]uint32, 0, len(m.subs))
	for p := range m.subs {
		parts = append(parts, p)
	}
	slices.Sort(parts) // deterministic input (Assign reads any order)
	return cohort.Member{ID: id, Partitions: parts, Target: m.target}
}

// onCohortJoin records a session's exclusive subscription as its member's
// and answers at once; the assignment follows at the next Tick.
func (n *Node) onCohortJoin(from Address, msg *CohortJoin) {
	assertHold(from.Kind == AddrSession, "only a session joins a cohort")
	key := cohortKey{msg.Queue.Topic, msg.Queue.Group}
	e := n.cohorts[key]
	if e != nil && e.c.ID() != msg.CohortID && n.liveMembers(e) == 0 {
		// Every member is leaving at the next assignment: the queue is free
		// for another id. The Hosts keep what they were told.
		if !n.recreateCohort(key, e, msg) {
			n.send(from, &CohortJoined{Token: msg.Token, Err: core.ErrCohortPartitions})
			return
		}
	}
	if e == nil {
		e = &cohortEntry{members: map[cohort.MemberID]*cohortMember{}, told: make([]uint64, msg.Partitions)}
		n.cohorts[key] = e
		if !n.recreateCohort(key, e, msg) {
			delete(n.cohorts, key)
			n.send(from, &CohortJoined{Token: msg.Token, Err: core.ErrCohortPartitions})
			return
		}
	}
	if e.c.ID() != msg.CohortID {
		n.send(from, &CohortJoined{Token: msg.Token, Err: core.ErrCohortConflict})
		return
	}
	m := e.members[msg.Member]
	if m == nil {
		if len(e.members) >= cohort.MembersMax {
			n.send(from, &CohortJoined{Token: msg.Token, Err: core.ErrCohortFull})
			return
		}
		m = &cohortMember{subs: map[uint32]uint64{}, renotice: true, session: from}
		e.members[msg.Member] = m
	}
	if m.session != from {
		// The member id came back on another session (its client could
		// not resume the old one): the member moves.
		old := m.session
		m.session, m.subs, m.renotice = from, map[uint32]uint64{}, true
		n.unindexSession(old, key, e)
	}
	if len(m.subs) == 0 {
		// A member back from no subscription (a leave and a rejoin in one
		// batch): its session dropped the notices in between, so it is
		// told again even if its set did not change.
		m.renotice = true
	}
	m.subs[msg.Queue.Partition] = msg.SubID
	m.target = msg.Target
	n.indexSession(from, key)
	n.send(from, &CohortJoined{Token: msg.Token})
	n.markCohortDirty(key)
}

// markCohortDirty queues key for the next assignment; cohortsDueMs is when
// the first one waited since (a fixed wake, so a busy Node's timer is not
// pushed back at every input).
func (n *Node) markCohortDirty(key cohortKey) {
	if len(n.cohortsDirty) == 0 {
		n.cohortsDueMs = max(n.nowMs, 1)
	}
	n.cohortsDirty[key] = true
}

// recreateCohort gives e a fresh cohort object named by msg (its first
// member, or the first after every member left), starting above every
// generation the Node issued.
func (n *Node) recreateCohort(key cohortKey, e *cohortEntry, msg *CohortJoin) bool {
	c, err := cohort.NewCohort(msg.CohortID, msg.Partitions, max(n.state.boot<<32, n.cohortGenHigh))
	if err != nil {
		return false // a partition count past cohort.PartitionsMax
	}
	e.c = c
	if uint32(len(e.told)) != msg.Partitions {
		e.told = make([]uint64, msg.Partitions) // counts never change; belt and braces
	}
	clear(e.members)
	return true
}

// liveMembers counts the members that still have a subscription.
func (n *Node) liveMembers(e *cohortEntry) int {
	live := 0
	for _, m := range e.members {
		if len(m.subs) > 0 {
			live++
		}
	}
	return live
}

// onCohortLeave drops one exclusive subscription from its member.
func (n *Node) onCohortLeave(from Address, msg *CohortLeave) {
	key := cohortKey{msg.Queue.Topic, msg.Queue.Group}
	e := n.cohorts[key]
	if e == nil {
		return // the cohort went already (its members ended)
	}
	m := e.members[msg.Member]
	if m == nil || m.session != from || m.subs[msg.Queue.Partition] != msg.SubID {
		return // stale: the member moved to another session, or resubscribed
	}
	delete(m.subs, msg.Queue.Partition)
	n.markCohortDirty(key)
}

// dropSessionCohorts removes an ended session's members everywhere.
func (n *Node) dropSessionCohorts(session Address) {
	keys := n.sessionCohorts[session.Session]
	delete(n.sessionCohorts, session.Session)
	for key := range keys {
		e := n.cohorts[key]
		if e == nil {
			continue
		}
		for _, m := range e.members {
			if m.session == session {
				clear(m.subs)
				n.markCohortDirty(key)
			}
		}
	}
}

func (n *Node) indexSession(session Address, key cohortKey) {
	keys := n.sessionCohorts[session.Session]
	if keys == nil {
		keys = map[cohortKey]bool{}
		n.sessionCohorts[session.Session] = keys
	}
	keys[key] = true
}

// unindexSession forgets key for session unless another of its members
// is in e.
func (n *Node) unindexSession(session Address, key cohortKey, e *cohortEntry) {
	for _, m := range e.members {
		if m.session == session && len(m.subs) > 0 {
			return
		}
	}
	if keys := n.sessionCohorts[session.Session]; keys != nil {
		delete(keys, key)
		if len(keys) == 0 {
			delete(n.sessionCohorts, session.Session)
		}
	}
}

// cohortsWakeMs asks for a Tick at once while a cohort waits for its
// assignment.
func (n *Node) cohortsWakeMs() int64 {
	if len(n.cohortsDirty) == 0 {
		return 0
	}
	return n.cohortsDueMs
}

// assignCohorts runs the assignment of every dirty cohort, in key order.
func (n *Node) assignCohorts() {
	if len(n.cohortsDirty) == 0 {
		return
	}
	keys := make([]cohortKey, 0, len(n.cohortsDirty))
	for k := range n.cohortsDirty {
		keys = append(keys, k)
	}
	sortCohortKeys(keys)
	clear(n.cohortsDirty)
	for _, key := range keys {
		if e := n.cohorts[key]; e != nil {
			n.assignCohort(key, e)
		}
	}
}

// assignCohort drops members with no subscription, assigns once, and sends
// what the Hosts and members must hear.
func (n *Node) assignCohort(key cohortKey, e *cohortEntry) {
	ids := sortedMemberIDs(e.members)
	members := make([]cohort.Member, 0, len(ids))
	for _, id := range ids {
		m := e.members[id]
		if len(m.subs) == 0 {
			delete(e.members, id)
			n.unindexSession(m.session, key, e)
			continue
		}
		members = append(members, m.asMember(id))
	}
	change, err := e.c.Set(members)
	assertHold(err == nil, "the registry's members are a valid cohort")
	n.cohortGenHigh = max(n.cohortGenHigh, change.Generation)
	gen := e.c.Generation()
	// Owners: compared against what each Host was last sent, not against
	// the change, so a member that resubscribed a partition it keeps (a new
	// SubID) or moved sessions is pointed at its new subscription too.
	dropped := mutantDroppedOwner(e.c.Owners())
	for p, o := range e.c.Owners() {
		var want uint64
		if o.Assigned && uint32(p) != dropped {
			want = e.members[o.Member].subs[uint32(p)]
			assertHold(want != 0, "an owner subscribes to the partition it owns")
		}
		if want != e.told[p] {
			e.told[p] = want
			n.send(PartitionAddr(core.QueueID{Topic: key.topic, Group: key.group, Partition: uint32(p)}),
				&SetOwner{SubID: want, Generation: gen})
		}
	}
	for _, id := range sortedMemberIDs(e.members) {
		m := e.members[id]
		set := e.c.Assignment(id)
		if dropped != noPartition {
			set = slices.DeleteFunc(set, func(p uint32) bool { return p == dropped })
		}
		if m.renotice || !slices.Equal(set, m.noticed) {
			m.noticed, m.renotice = set, false
			n.send(m.session, &AssignmentNotice{Topic: key.topic, Group: key.group, CohortID: e.c.ID(), Generation: gen, Assigned: set})
		}
	}
	if len(e.members) == 0 {
		// Kept while a Host may still name an owner: forgotten once every
		// partition was told nobody.
		for _, subID := range e.told {
			if subID != 0 {
				return
			}
		}
		delete(n.cohorts, key)
	}
}

// noPartition names no partition (mutantDroppedOwner's "none").
const noPartition = ^uint32(0)

// mutantDroppedOwner (mutant CohortDropOwner only) picks the highest
// assigned partition: the caller tells its Host nobody owns it and leaves
// it out of the member's notice, at every assignment (broken on purpose:
// an assignment that leaves a partition uncovered).
func mutantDroppedOwner(owners []cohort.Owner) uint32 {
	if !mutant.On(mutant.CohortDropOwner) {
		return noPartition
	}
	dropped := noPartition
	for p, o := range owners {
		if o.Assigned {
			dropped = uint32(p)
		}
	}
	return dropped
}

func sortCohortKeys(keys []cohortKey) {
	slices.SortFunc(keys, func(a, b cohortKey) int {
		if a.topic != b.topic {
			return compareStrings(a.topic, b.topic)
		}
		return compareStrings(a.group, b.group)
	})
}

func sortedMemberIDs(members map[cohort.MemberID]*cohortMember) []cohort.MemberID {
	ids := make([]cohort.MemberID, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b cohort.MemberID) int {
		for i := range a {
			if a[i] != b[i] {
				return int(a[i]) - int(b[i])
			}
		}
		return 0
	})
	return ids
}

// checkCohorts verifies the registry (CheckInvariants).
func (n *Node) checkCohorts() error {
	for key, e := range n.cohorts {
		if err := e.c.CheckInvariants(); err != nil {
			return err
		}
		if uint32(len(e.told)) != e.c.PartitionCount() {
			return fmt.Errorf("cohort %s/%s: %d partitions told, %d in the cohort", key.topic, key.group, len(e.told), e.c.PartitionCount())
		}
		for id, m := range e.members {
			if n.sessions[m.session.Session] == nil && len(m.subs) > 0 {
				return fmt.Errorf("cohort %s/%s: member %s's session %d has ended", key.topic, key.group, id, m.session.Session)
			}
			if len(m.subs) > 0 && !n.sessionCohorts[m.session.Session][key] {
				return fmt.Errorf("cohort %s/%s: member %s's session %d is not indexed", key.topic, key.group, id, m.session.Session)
			}
		}
		if e.c.Generation() > n.cohortGenHigh && len(n.cohortsDirty) == 0 {
			return fmt.Errorf("cohort %s/%s: generation %d past the Node's high %d", key.topic, key.group, e.c.Generation(), n.cohortGenHigh)
		}
		if len(n.cohortsDirty) == 0 {
			// Settled: the cohort's members are the registry's.
			if e.c.Len() != len(e.members) {
				return fmt.Errorf("cohort %s/%s: %d members in the cohort, %d entries", key.topic, key.group, e.c.Len(), len(e.members))
			}
		}
	}
	return nil
}
