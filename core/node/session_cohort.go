package node

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"

	"github.com/fibril-go/fibril/core/cohort"
	"github.com/fibril-go/fibril/transport/wire"
)

// Exclusive consumer groups as a session sees them (PROTOCOL 5.6, 5.7,
// 5.16, 7.6; docs/cohorts.md "Member ids and the wire"). Invariants:
//   - a session has at most one member id: sent by the client first, or
//     minted at its first exclusive SUBSCRIBE without one; a later one that
//     differs is 409, the nil UUID 400;
//   - an exclusive subscription is subscribed at its partition gated
//     (core.Subscribe.Exclusive) before it joins the cohort, and SUBSCRIBE_OK
//     goes out only once the Node accepted the join: the partition delivers
//     to it only once the Node names it owner;
//   - a joined subscription leaves its cohort when it is dropped;
//   - ASSIGNMENT_CHANGED: per (connection, cohort) the generations sent only
//     grow, added/revoked are against what that connection was last told
//     (also across a leave and a rejoin on it: a left cohort's view keeps
//     what the connection was told, and takes no notice until the rejoin),
//     and a new connection is told the whole current assignment first;
//   - exclusive subscriptions stay out of the skeleton: a restart must not
//     restore one as a shared consumer.

// exclusiveSpec is what an exclusive SUBSCRIBE (or reconcile entry) asks.
type exclusiveSpec struct {
	cohortID  string
	target    uint32
	targetSet bool            // consumer_target was sent (echoed even when 0)
	member    cohort.MemberID // the session's, once resolved
}

// cohortView is what the session knows and told of one cohort.
type cohortView struct {
	cohortID   string
	generation uint64   // the newest notice taken
	assigned   []uint32 // its partitions then
	told       []uint32 // what the current connection was last told
	toldGen    uint64   // ... and under which generation (0: nothing yet)
	left       bool     // the session left the cohort: no notice is taken until it joins again
}

// resolveMember applies PROTOCOL 5.6 checks 4-5 and the resolution rule to
// an exclusive request's member id: the one sent (it must match the
// session's), else the session's, else a fresh one. It returns the code to
// refuse with, or 0.
func (s *Session) resolveMember(sent wire.Optional[wire.UUID]) (cohort.MemberID, wire.ErrorCode, string) {
	if sent.Present {
		id := cohort.MemberID(sent.Value)
		switch {
		case id.IsNil():
			return cohort.MemberID{}, wire.CodeInvalid, "member_id must not be the nil UUID"
		case !s.memberID.IsNil() && id != s.memberID:
			return cohort.MemberID{}, wire.CodeConflict, "one member id per connection: this one already uses another"
		}
		return id, 0, ""
	}
	if !s.memberID.IsNil() {
		return s.memberID, 0, ""
	}
	return s.mintMemberID(), 0, ""
}

// mintMemberID derives a version-4 UUID from the session's secret resume
// token: unique per session (session ids never repeat), unguessable by
// other clients, and deterministic (no randomness of its own: the
// simulator replays it).
func (s *Session) mintMemberID() cohort.MemberID {
	h := sha256.New()
	h.Write([]byte("fibril member id\x00"))
	h.Write(s.init.Token[:])
	h.Write(s.init.ClientID[:])
	var id [8]byte
	binary.BigEndian.PutUint64(id[:], uint64(s.init.ID))
	h.Write(id[:])
	var out cohort.MemberID
	copy(out[:], h.Sum(nil))
	out[6] = out[6]&0x0f | 0x40 // version 4
	out[8] = out[8]&0x3f | 0x80 // RFC 4122 variant
	sessionAssert(!out.IsNil(), "a minted member id is never nil")
	return out
}

// exclusiveOf validates a SUBSCRIBE's cohort fields.
func exclusiveOf(group wire.Optional[string], target wire.Optional[uint32]) (*exclusiveSpec, string) {
	if !group.Present {
		return nil, ""
	}
	if len(group.Value) == 0 || len(group.Value) > cohort.IDBytesMax {
		return nil, "consumer_group must be 1-255 bytes"
	}
	spec := &exclusiveSpec{cohortID: group.Value}
	if target.Present {
		spec.target, spec.targetSet = target.Value, true
	}
	return spec, ""
}

// joinCohort sends the join of an exclusive subscription its partition
// accepted; the subscribe (or restore) finishes at CohortJoined.
func (s *Session) joinCohort(op pendingOp, sub *sessionSub) {
	sessionAssert(sub.exclusive != nil && !sub.cohortJoined, "a join for an exclusive subscription not yet joined")
	token := s.newToken()
	op.then, op.kind = op.kind, opCohortJoin
	s.pending[token] = op
	s.out(NodeAddr(), &CohortJoin{Token: token, Queue: sub.key, Partitions: sub.partitions, CohortID: sub.exclusive.cohortID,
		Member: s.memberID, Target: sub.exclusive.target, SubID: sub.id})
}

// onCohortJoined finishes the subscribe (or restore) the join was part of.
func (s *Session) onCohortJoined(m *CohortJoined) {
	op, ok := s.pending[m.Token]
	if !ok {
		return
	}
	sessionAssert(op.kind == opCohortJoin, "a cohort answer for a token of another kind")
	delete(s.pending, m.Token)
	op.kind = op.then
	sub := s.subsByID[op.subID]
	if sub == nil {
		// It ended while the join was on its way: undo the join (it was
		// dropped unjoined, so no leave went out), and answer as the
		// partition path would.
		if m.Err == nil {
			s.out(NodeAddr(), &CohortLeave{Queue: op.queue, Member: s.memberID, SubID: op.subID})
		}
		if op.kind == opRestore {
			s.restoreDone(op, false)
			return
		}
		s.replyError(op.gen, wire.OpSubscribeErr, op.requestID, wire.CodeInternal, msgSubscriptionGone)
		return
	}
	if m.Err != nil {
		// Another cohort holds the queue (409): the subscription goes.
		s.unsubscribe(sub)
		if op.kind == opRestore {
			s.restoreDone(op, false)
			return
		}
		s.replyError(op.gen, wire.OpSubscribeErr, op.requestID, wire.ErrorCode(m.Err.Code()), m.Err.Error())
		return
	}
	sub.cohortJoined = true
	if v := s.cohortViews[cohortKey{sub.key.Topic, sub.key.Group}]; v != nil {
		// A member again: its view takes notices (a leave and this join may
		// have met at the Node in one batch, with no notice to clear it).
		v.left = false
	}
	s.subscribed(op, sub)
}

// leaveCohort tells the Node a joined subscription is gone.
func (s *Session) leaveCohort(sub *sessionSub) {
	if !sub.cohortJoined {
		return
	}
	sub.cohortJoined = false
	s.out(NodeAddr(), &CohortLeave{Queue: sub.key, Member: s.memberID, SubID: sub.id})
	key := cohortKey{sub.key.Topic, sub.key.Group}
	for _, other := range s.subs {
		if other != sub && other.cohortJoined && other.key.Topic == key.topic && other.key.Group == key.group {
			return // still a member through another partition
		}
	}
	// No longer a member: its notices stop mattering, but what the
	// connection was told stays, so a rejoin on it continues its stream.
	if v := s.cohortViews[key]; v != nil {
		v.left = true
	}
}

// onAssignmentNotice keeps the newest assignment of a cohort and tells the
// connection.
func (s *Session) onAssignmentNotice(m *AssignmentNotice) {
	key := cohortKey{m.Topic, m.Group}
	v := s.cohortViews[key]
	if v == nil || v.left {
		if !s.joinedCohort(key) {
			return // no longer a member: a late notice
		}
		if v == nil {
			v = &cohortView{cohortID: m.CohortID}
			s.cohortViews[key] = v
		}
		v.left = false
	}
	if m.Generation <= v.generation {
		return // stale: envelopes of one sender arrive in order, but be safe
	}
	if v.cohortID != m.CohortID {
		// Another cohort on the queue (the old one emptied and was
		// forgotten): a stream of its own, starting from nothing told.
		v.told, v.toldGen = nil, 0
	}
	v.cohortID, v.generation, v.assigned = m.CohortID, m.Generation, slices.Clone(m.Assigned)
	s.tellAssignment(key, v)
}

func (s *Session) joinedCohort(key cohortKey) bool {
	for _, sub := range s.subs {
		if sub.cohortJoined && sub.key.Topic == key.topic && sub.key.Group == key.group {
			return true
		}
	}
	return false
}

// tellAssignment pushes ASSIGNMENT_CHANGED for v on the current
// connection, if it has not been told this generation yet.
func (s *Session) tellAssignment(key cohortKey, v *cohortView) {
	if s.conn == 0 || v.generation <= v.toldGen {
		return // dormant: the next connection is told (retellAssignments)
	}
	added := difference(v.assigned, v.told)
	revoked := difference(v.told, v.assigned)
	s.push(wire.OpAssignmentChanged, s.nextServerReqID(), &wire.AssignmentChanged{Topic: key.topic, Group: groupOpt(key.group),
		ConsumerGroup: v.cohortID, Generation: v.generation, Assigned: slices.Clone(v.assigned), Added: added, Revoked: revoked})
	v.told, v.toldGen = slices.Clone(v.assigned), v.generation
}

// retellAssignments starts the notice stream of a new connection with the
// whole current assignment of every cohort the session is a member of.
func (s *Session) retellAssignments() {
	keys := make([]cohortKey, 0, len(s.cohortViews))
	for k := range s.cohortViews {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b cohortKey) int {
		if a.topic != b.topic {
			return compareStrings(a.topic, b.topic)
		}
		return compareStrings(a.group, b.group)
	})
	for _, k := range keys {
		v := s.cohortViews[k]
		if v.left {
			delete(s.cohortViews, k) // what an old connection was told is no concern of this one
			continue
		}
		v.told, v.toldGen = nil, 0
		s.tellAssignment(k, v)
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// difference is a minus b, both sorted ascending.
func difference(a, b []uint32) []uint32 {
	var out []uint32
	for _, x := range a {
		if _, found := slices.BinarySearch(b, x); !found {
			out = append(out, x)
		}
	}
	return out
}

// subscribeOk is the SUBSCRIBE_OK of sub (PROTOCOL 5.7): the cohort fields
// echoed, and the resolved member id when exclusive.
func (s *Session) subscribeOk(sub *sessionSub) *wire.SubscribeOk {
	ok := &wire.SubscribeOk{SubID: sub.id, Topic: sub.key.Topic, Partition: sub.key.Partition, Group: sub.group, Prefetch: sub.prefetch}
	if sub.exclusive != nil {
		ok.ConsumerGroup = wire.Some(sub.exclusive.cohortID)
		if sub.exclusive.targetSet {
			ok.ConsumerTarget = wire.Some(sub.exclusive.target)
		}
		ok.MemberID = wire.Some(wire.UUID(sub.exclusive.member))
	}
	return ok
}
