package node

import "slices"

// onCohortsRequest answers an operator's CohortsRequest from the registry
// (node_cohort.go). Invariants:
//   - an observation: it changes nothing, so asking never moves a
//     partition or bumps a generation;
//   - a member without a subscription (leaving at the next assignment) is
//     not listed: it takes nothing;
//   - bounded: at most cohortListMax cohorts, each at most cohort.MembersMax
//     members and its partition count, so the answer is bounded by the
//     registry's own limits;
//   - deterministic: cohorts in key order, members in member id order,
//     partitions ascending.

// cohortListMax bounds the cohorts one answer lists.
const cohortListMax = 1024

func (n *Node) onCohortsRequest(from Address) {
	assertHold(from.Kind == AddrAdmin, "operators ask for the cohorts")
	keys := make([]cohortKey, 0, len(n.cohorts))
	for k := range n.cohorts {
		keys = append(keys, k)
	}
	sortCohortKeys(keys)
	out := &CohortList{Cohorts: make([]CohortInfo, 0, min(len(keys), cohortListMax))}
	for _, key := range keys {
		if len(out.Cohorts) >= cohortListMax {
			out.Truncated = true
			break
		}
		e := n.cohorts[key]
		info := CohortInfo{Topic: key.topic, Group: key.group, CohortID: e.c.ID(), Generation: e.c.Generation(),
			PartitionCount: e.c.PartitionCount(), Pending: n.cohortsDirty[key]}
		for _, id := range sortedMemberIDs(e.members) {
			m := e.members[id]
			if len(m.subs) == 0 {
				continue
			}
			mi := CohortMemberInfo{Member: id, Session: m.session.Session, Target: m.target,
				Subscribed: make([]uint32, 0, len(m.subs))}
			for p := range m.subs {
				mi.Subscribed = append(mi.Subscribed, p)
			}
			slices.Sort(mi.Subscribed)
			for _, p := range e.c.Assignment(id) {
				if sub := m.subs[p]; sub != 0 && int(p) < len(e.told) && e.told[p] == sub {
					mi.Owned = append(mi.Owned, p)
				}
			}
			assertHold(len(mi.Owned) <= len(mi.Subscribed), "a member owns only partitions it subscribes to")
			info.Members = append(info.Members, mi)
		}
		out.Cohorts = append(out.Cohorts, info)
	}
	n.send(from, out)
}
