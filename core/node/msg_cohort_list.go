package node

import "github.com/fibril-go/fibril/core/cohort"

// The operator's view of the cohort registry (GET /admin/api/cohorts): an
// observation only, answered by the Node from its registry
// (node_cohort_list.go).

// ---- operator -> Node

// CohortsRequest asks the Node for every cohort it holds; it answers
// CohortList.
type CohortsRequest struct{}

// CohortList is the registry: cohorts in (topic, group) order, at most
// cohortListMax of them (Truncated says more exist).
type CohortList struct {
	Cohorts   []CohortInfo
	Truncated bool
}

// CohortInfo is one cohort. Pending: a join or leave is waiting for the
// next assignment (the Node runs it at its next Tick, at once), so Owned
// may change without any member joining or leaving again.
type CohortInfo struct {
	Topic, Group   string // the queue (group normalised)
	CohortID       string // consumer_group
	Generation     uint64
	PartitionCount uint32
	Pending        bool
	Members        []CohortMemberInfo // in member id order
}

// CohortMemberInfo is one member with a subscription. Subscribed: the
// partitions it holds an exclusive subscription of; Owned: those the
// assignment gives it and whose Host was told its subscription owns them
// (what the gates deliver by). Target is consumer_target, 0 = none.
type CohortMemberInfo struct {
	Member     cohort.MemberID
	Session    SessionID
	Subscribed []uint32
	Owned      []uint32
	Target     uint32
}

func (*CohortsRequest) message() {}
func (*CohortList) message()     {}
