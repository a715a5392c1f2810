package node

import (
	"fmt"
	"slices"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/cohort"
	"github.com/fibril-go/fibril/mutant"
)

// The Node's cohort registry (docs/cohorts.md, "The registry"): one cohort
// per queue (topic, group) with live members, run through core/cohort on
// every membership change; the results go out as SetOwner to each moved
// partition's Host and AssignmentNotice to each member whose set changed.
// Invariants:
//   - a cohort exists exactly while it has members; its id is the one its
//     first member named, and a join naming another is refused (409);
//   - a member is one member id of one session, with one exclusive
//     subscription per partition it takes; the cohort.Cohort's members are
//     exactly these, each subscribed to the partitions of its subscriptions;
//   - every partition's owner, as the Host was last told, is the
//     subscription of the member core/cohort names (or 0), under the
//     cohort's generation; generations start at boot<<32, so a restarted
//     broker never repeats one a client saw, and a new cohort starts above
//     every generation a forgotten one reached, so a queue whose cohort
//     emptied never repeats one either (clients drop notices at or below
//     the last generation they saw, across their reconnects);
//   - volatile: after a restart members join again (their subscriptions do
//     not survive one), so nothing here is logged.

// cohortKey names a queue's cohort.
type cohortKey struct{ topic, group string }

// cohortEntry is one live cohort.
type cohortEntry struct {
	c       *cohort.Cohort
	members map[cohort.MemberID]*cohortMember
}

// cohortMember is one member: its session and its exclusive subscriptions.
type cohortMember struct {
	session Address
	subs    map[uint32]uint64 // partition -> SubID
	target  uint32
}

func (m *cohortMember) asMember(id cohort.MemberID) cohort.Member {
	parts := make([]uint32, 0, len(m.subs))
	for p := range m.subs {
		parts = append(parts, p)
	}
	slices.Sort(parts) // deterministic input (Assign reads any order)
	return cohort.Member{ID: id, Partitions: parts, Target: m.target}
}

// onCohortJoin adds a session's exclusive subscription to its queue's
// cohort, creating the cohort for its first member.
func (n *Node) onCohortJoin(from Address, msg *CohortJoin) {
	assertHold(from.Kind == AddrSession, "only a session joins a cohort")
	key := cohortKey{msg.Queue.Topic, msg.Queue.Group}
	e := n.cohorts[key]
	if e == nil {
		c, err := cohort.NewCohort(msg.CohortID, msg.Partitions, max(n.state.boot<<32, n.cohortGenerationMax))
		if err != nil {
			// The session checked id and count; a refusal here is ours.
			n.send(from, &CohortJoined{Token: msg.Token, Err: core.ErrInvalidSettings})
			return
		}
		e = &cohortEntry{c: c, members: map[cohort.MemberID]*cohortMember{}}
		n.cohorts[key] = e
	}
	if e.c.ID() != msg.CohortID {
		n.send(from, &CohortJoined{Token: msg.Token, Err: core.ErrCohortConflict})
		return
	}
	m := e.members[msg.Member]
	fresh := m == nil
	moved := m != nil && m.session != from
	if moved {
		// The member id came back on another session (its client could
		// not resume the old one): the member moves, and the old session's
		// subscriptions stop counting (they own nothing from now on).
		m.session, m.subs = from, map[uint32]uint64{}
	}
	if fresh {
		if e.c.Len() >= cohort.MembersMax {
			n.send(from, &CohortJoined{Token: msg.Token, Err: core.ErrCohortFull})
			n.forgetEmptyCohort(key, e)
			return
		}
		m = &cohortMember{session: from, subs: map[uint32]uint64{}}
		e.members[msg.Member] = m
	}
	m.subs[msg.Queue.Partition] = msg.SubID
	m.target = msg.Target
	var change cohort.Change
	var err error
	if fresh {
		change, err = e.c.Join(m.asMember(msg.Member))
	} else {
		change, err = e.c.Update(m.asMember(msg.Member))
	}
	assertHold(err == nil, "a validated join is accepted by the cohort")
	n.send(from, &CohortJoined{Token: msg.Token})
	n.applyCohortChange(key, e, change)
	if moved && !partitionListed(change, msg.Queue.Partition) && slices.Contains(e.c.Assignment(msg.Member), msg.Queue.Partition) {
		// The member kept this partition across its move: no owner
		// changed, but the Host still names the old session's
		// subscription, which owns nothing from now on.
		n.send(PartitionAddr(msg.Queue), &SetOwner{SubID: msg.SubID, Generation: e.c.Generation()})
	}
	// The first notice of a member (or of a member on the session it
	// moved to) reflects its assignment even when the join moved nothing
	// (a stand-by member of a one-partition queue).
	if (fresh || moved) && !memberListed(change, msg.Member) {
		n.noticeMember(key, e, msg.Member)
	}
}

func partitionListed(change cohort.Change, partition uint32) bool {
	for _, pc := range change.Partitions {
		if pc.Partition == partition {
			return true
		}
	}
	return false
}

// onCohortLeave drops one exclusive subscription from its member; the
// member leaves with its last one, the cohort with its last member.
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
	n.refreshMember(key, e, msg.Member, m)
}

// refreshMember runs the cohort after m's subscriptions changed.
func (n *Node) refreshMember(key cohortKey, e *cohortEntry, id cohort.MemberID, m *cohortMember) {
	var change cohort.Change
	var err error
	if len(m.subs) == 0 {
		delete(e.members, id)
		change, err = e.c.Leave(id)
	} else {
		change, err = e.c.Update(m.asMember(id))
	}
	assertHold(err == nil, "a known member's change is accepted by the cohort")
	n.applyCohortChange(key, e, change)
	n.forgetEmptyCohort(key, e)
}

// dropSessionCohorts removes an ended session from every cohort.
func (n *Node) dropSessionCohorts(session Address) {
	for _, key := range n.sortedCohortKeys() {
		e := n.cohorts[key]
		for _, id := range sortedMemberIDs(e.members) {
			if m := e.members[id]; m.session == session {
				clear(m.subs)
				n.refreshMember(key, e, id, m)
			}
		}
	}
}

// forgetEmptyCohort drops a cohort with no members: its id binds the queue
// only while someone uses it.
func (n *Node) forgetEmptyCohort(key cohortKey, e *cohortEntry) {
	if e.c.Len() == 0 {
		assertHold(len(e.members) == 0, "a cohort with no members has no member entries")
		n.cohortGenerationMax = max(n.cohortGenerationMax, e.c.Generation())
		delete(n.cohorts, key)
	}
}

// applyCohortChange sends the owners and notices a change calls for.
func (n *Node) applyCohortChange(key cohortKey, e *cohortEntry, change cohort.Change) {
	dropped := n.mutantDroppedOwner(&change)
	for _, pc := range change.Partitions {
		var subID uint64
		if pc.New.Assigned && pc.Partition != dropped {
			owner := e.members[pc.New.Member]
			assertHold(owner != nil, "an owner is a member")
			subID = owner.subs[pc.Partition]
			assertHold(subID != 0, "an owner subscribes to the partition it owns")
		}
		n.send(PartitionAddr(core.QueueID{Topic: key.topic, Group: key.group, Partition: pc.Partition}),
			&SetOwner{SubID: subID, Generation: change.Generation})
	}
	for _, mc := range change.Members {
		if m := e.members[mc.Member]; m != nil {
			n.send(m.session, &AssignmentNotice{Topic: key.topic, Group: key.group, CohortID: e.c.ID(),
				Generation: change.Generation, Assigned: mc.Assigned})
		}
	}
}

// mutantDroppedOwner (mutant CohortDropOwner only) picks the highest
// partition the change hands to a member and takes it out of that
// member's notice; the caller then tells its Host nobody owns it.
func (n *Node) mutantDroppedOwner(change *cohort.Change) uint32 {
	none := ^uint32(0)
	if !mutant.On(mutant.CohortDropOwner) {
		return none
	}
	dropped := none
	for _, pc := range change.Partitions {
		if pc.New.Assigned {
			dropped = pc.Partition
		}
	}
	for i := range change.Members {
		mc := &change.Members[i]
		mc.Assigned = slices.DeleteFunc(slices.Clone(mc.Assigned), func(p uint32) bool { return p == dropped })
	}
	return dropped
}

// noticeMember sends a member its current assignment.
func (n *Node) noticeMember(key cohortKey, e *cohortEntry, id cohort.MemberID) {
	m := e.members[id]
	assertHold(m != nil, "a notice goes to a member")
	n.send(m.session, &AssignmentNotice{Topic: key.topic, Group: key.group, CohortID: e.c.ID(),
		Generation: e.c.Generation(), Assigned: e.c.Assignment(id)})
}

func memberListed(change cohort.Change, id cohort.MemberID) bool {
	for _, mc := range change.Members {
		if mc.Member == id {
			return true
		}
	}
	return false
}

func (n *Node) sortedCohortKeys() []cohortKey {
	keys := make([]cohortKey, 0, len(n.cohorts))
	for k := range n.cohorts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b cohortKey) int {
		if a.topic != b.topic {
			if a.topic < b.topic {
				return -1
			}
			return 1
		}
		if a.group < b.group {
			return -1
		}
		if a.group > b.group {
			return 1
		}
		return 0
	})
	return keys
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

// checkCohorts verifies the registry against each cohort (CheckInvariants).
func (n *Node) checkCohorts() error {
	for key, e := range n.cohorts {
		if err := e.c.CheckInvariants(); err != nil {
			return err
		}
		if e.c.Len() != len(e.members) || e.c.Len() == 0 {
			return fmt.Errorf("cohort %s/%s: %d members in the cohort, %d entries", key.topic, key.group, e.c.Len(), len(e.members))
		}
		for _, cm := range e.c.Members() {
			m := e.members[cm.ID]
			if m == nil || len(m.subs) != len(cm.Partitions) {
				return fmt.Errorf("cohort %s/%s: member %s's partitions disagree with its subscriptions", key.topic, key.group, cm.ID)
			}
			if n.sessions[m.session.Session] == nil {
				return fmt.Errorf("cohort %s/%s: member %s's session %d has ended", key.topic, key.group, cm.ID, m.session.Session)
			}
		}
	}
	return nil
}
