package node

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/cohort"
)

// Messages of exclusive consumer groups (docs/cohorts.md). The Node keeps
// the cohorts; sessions join and leave them per partition subscription; the
// Node tells each partition's Host its owner and each member's session its
// assignment.

// ---- Session -> Node

// CohortJoin asks for an exclusive subscription (SubID, already accepted by
// its partition, gated) to join the cohort CohortID of its queue as member
// Member. Answered by CohortJoined with Token: ErrCohortConflict when the
// queue's live cohort has another id.
type CohortJoin struct {
	Token      uint64
	Queue      core.QueueID // normalised (topic, group, partition)
	Partitions uint32       // the queue's partition count (from Opened)
	CohortID   string
	Member     cohort.MemberID
	Target     uint32 // consumer_target, 0 = none
	SubID      uint64
}

// CohortLeave says the session's exclusive subscription SubID of Queue
// ended: the member no longer takes that partition (and leaves the cohort
// with its last one). Unanswered; a stale one (another SubID) is ignored.
type CohortLeave struct {
	Queue  core.QueueID
	Member cohort.MemberID
	SubID  uint64
}

// ---- Node -> Session

// CohortJoined answers CohortJoin.
type CohortJoined struct {
	Token uint64
	Err   *core.Error
}

// AssignmentNotice tells a member's session its current partitions of a
// cohort; the session turns it into ASSIGNMENT_CHANGED (PROTOCOL 5.16),
// with added and revoked against what it last told its connection.
type AssignmentNotice struct {
	Topic      string
	Group      string // normalised
	CohortID   string
	Generation uint64
	Assigned   []uint32
}

// ---- Node -> Host

// SetOwner names the partition's exclusive owner (core.SetOwner): SubID 0
// is nobody.
type SetOwner struct {
	SubID      uint64
	Generation uint64
}

func (*CohortJoin) message()       {}
func (*CohortLeave) message()      {}
func (*CohortJoined) message()     {}
func (*AssignmentNotice) message() {}
func (*SetOwner) message()         {}
