package node

// RECONCILE_CLIENT: the client's remembered subscriptions matched against
// the session's, by the table of PROTOCOL 7.8. Invariants:
//   - RECONCILE_RESULT goes out only when every restore it lists has its
//     partition's answer, and before any delivery of a restored
//     subscription (they stay unannounced until then);
//   - the result lists each client entry once and each server subscription
//     the client did not list once (close_server_side, unsubscribed);
//   - entries are sorted by (group, topic, sub_id) of the client view, else
//     the server view, an absent group first.

import (
	"slices"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/cohort"
	"github.com/fibril-go/fibril/transport/wire"
)

// reconcileRun is one RECONCILE_CLIENT waiting for its restores. Each
// restore's entry is written when the restore is issued (as restored) and
// rewritten if its partition refuses it, so the result's entries stay in
// the order they were decided until the final sort.
type reconcileRun struct {
	gen       uint64
	requestID uint64
	entries   []wire.ReconcileEntry
	restored  []*sessionSub
	waiting   int
	// building: the entries are still being decided; a restore refused on
	// the spot (a bound) must not finish the run early.
	building bool
}

// handleReconcile answers at once unless restores are on their way; it
// reports whether the result went out.
func (s *Session) handleReconcile(requestID uint64, rc *wire.ReconcileClient) bool {
	run := &reconcileRun{gen: s.gen, requestID: requestID, building: true}
	// Server subscriptions the client does not list end server-side.
	// A copy: entries are deleted as the client's list names them, and the
	// session's own map must not lose subscriptions while being matched.
	unlisted := make(map[subKey]*sessionSub, len(s.subs))
	for k, v := range s.subs {
		unlisted[k] = v
	}
	seen := make(map[subKey]bool, len(rc.Subscriptions))
	for _, cs := range rc.Subscriptions {
		// A name that does not validate cannot name a server subscription, so
		// the table's "server lacks it, otherwise" row applies (PROTOCOL 7.8).
		q, err := queueOf(cs.Topic, cs.Group, cs.Partition)
		if err != nil {
			run.entries = append(run.entries, closeClient(cs, wire.ReasonServerMissing, "server_missing"))
			continue
		}
		if seen[q] {
			// One subscription per queue partition and session: a repeat
			// would orphan the first.
			run.entries = append(run.entries, closeClient(cs, wire.ReasonServerMismatch, "server_mismatch"))
			continue
		}
		seen[q] = true
		sub := unlisted[q]
		delete(unlisted, q)
		s.reconcileOne(run, rc.Policy, q, cs, sub)
	}
	// Sorted: unsubscribes leave in a deterministic order.
	for _, key := range sortedSubKeys(unlisted) {
		sub := unlisted[key]
		run.entries = append(run.entries, wire.ReconcileEntry{Server: wire.Some(sub.asReconcileSub()),
			Action: wire.ReconcileCloseServerSide, Reason: "client_missing", Code: wire.ReasonClientMissing})
		s.unsubscribe(sub)
	}
	run.building = false
	if run.waiting > 0 {
		// The gate stays shut until the result: a DELIVER of a restored
		// subscription before RECONCILE_RESULT would name a sub id the client has
		// not been told to re-key to.
		if !s.gateOpen {
			s.reconciling++
		}
		return false
	}
	s.finishReconcile(run)
	return true
}

// reconcileOne decides one client entry by the table of PROTOCOL 7.8;
// sub is the server's subscription on the same key, or nil. consumer_group,
// consumer_target and member_id are not compared (PROTOCOL 7.8 compares
// topic, group, partition, ack mode and prefetch); a restore carries them.
func (s *Session) reconcileOne(run *reconcileRun, policy wire.ReconcilePolicy, q core.QueueID, cs wire.ReconcileSub, sub *sessionSub) {
	switch {
	// Matching by (topic, partition, group) as PROTOCOL 7.8 says, not by
	// sub id: the client's ids are from before the reconnect.
	case sub != nil && sub.autoAck == cs.AutoAck && sub.prefetch == cs.Prefetch:
		code, reason := wire.ReasonMatched, "matched"
		if sub.id != cs.SubID {
			code, reason = wire.ReasonServerIDChanged, "server_id_changed"
		}
		run.entries = append(run.entries, wire.ReconcileEntry{Client: wire.Some(cs), Server: wire.Some(sub.asReconcileSub()),
			Action: wire.ReconcileKeep, Reason: reason, Code: code})
	case sub != nil:
		// The settings differ: the client closes its side, and the server's
		// is ended too, so the client's supervised resubscribe is not a 409.
		run.entries = append(run.entries, wire.ReconcileEntry{Client: wire.Some(cs), Server: wire.Some(sub.asReconcileSub()),
			Action: wire.ReconcileCloseClientSide, Reason: "server_mismatch", Code: wire.ReasonServerMismatch})
		s.unsubscribe(sub)
	case policy == wire.ReconcileRestore:
		// Subscribe anew with the client's settings; the entry waits for the
		// partition's answer (and, exclusive, the cohort's: it rejoins
		// with the member id the client names, by SUBSCRIBE's rules).
		exclusive, bad := exclusiveOf(cs.ConsumerGroup, cs.ConsumerTarget)
		var member cohort.MemberID
		if exclusive != nil && bad == "" {
			id, code, _ := s.resolveMember(cs.MemberID)
			if code != 0 {
				bad = "member"
			}
			member = id
		}
		var restored *sessionSub
		if bad == "" {
			restored, _ = s.newSub(q, cs.Prefetch, cs.AutoAck)
		}
		if restored == nil {
			run.entries = append(run.entries, closeClient(cs, wire.ReasonServerRestoreFailed, "server_restore_failed"))
			return
		}
		if exclusive != nil {
			exclusive.member = member
			s.memberID, restored.exclusive = member, exclusive
		}
		token := s.newToken()
		s.pending[token] = pendingOp{kind: opRestore, gen: s.gen, queue: q, subID: restored.id, recon: run, entry: len(run.entries)}
		run.entries = append(run.entries, wire.ReconcileEntry{Client: wire.Some(cs), Server: wire.Some(restored.asReconcileSub()),
			Action: wire.ReconcileKeep, Reason: "server_restored", Code: wire.ReasonServerRestored})
		run.restored = append(run.restored, restored)
		run.waiting++
		s.subscribe(restored, token)
	// Only manual-ack: its unsettled messages redeliver, so recreating loses
	// nothing; an auto-ack one's settled messages are gone either way.
	case !cs.AutoAck:
		// Standalone: this broker owns every partition.
		run.entries = append(run.entries, wire.ReconcileEntry{Client: wire.Some(cs), Action: wire.ReconcileRecreateClientSide,
			Reason: "recreate", Code: wire.ReasonRecreate})
	default:
		run.entries = append(run.entries, closeClient(cs, wire.ReasonServerMissing, "server_missing"))
	}
}

// restoreDone records a restore's outcome and finishes the run after the
// last one. A restore that failed leaves no subscription behind (failOp
// dropped it), so the client closes its side with the typed reason.
func (s *Session) restoreDone(op pendingOp, ok bool) {
	run := op.recon
	sessionAssert(run != nil && run.waiting > 0, "a restore outcome for no waiting reconcile")
	if run.gen != s.gen || s.conn == 0 {
		// The run went with its attachment (its restored subscriptions
		// were dropped then); a late refusal of one it had already lost
		// changes nothing.
		return
	}
	if !ok {
		e := &run.entries[op.entry]
		sessionAssert(e.Client.Present, "a restore entry without its client view")
		*e = closeClient(e.Client.Value, wire.ReasonServerRestoreFailed, "server_restore_failed")
	}
	run.waiting--
	if run.waiting == 0 && !run.building {
		s.finishReconcile(run)
	}
}

// finishReconcile sends the result, then lets restored subscriptions'
// deliveries flow and opens the gate. The result goes to the attachment
// that asked: a run whose attachment went never finishes, since its
// restored subscriptions (unannounced) were dropped with it and their
// tokens forgotten (dropUnannounced), so no ghost is ever announced.
func (s *Session) finishReconcile(run *reconcileRun) {
	sessionAssert(run.waiting == 0, "a reconcile finished with restores pending")
	sessionAssert(!run.building, "a reconcile finished while its entries were decided")
	sessionAssert(len(run.restored) <= len(run.entries), "more restores than reconcile entries")
	sessionAssert(run.gen == s.gen && s.conn != 0, "a reconcile finished after its attachment went")
	// Stable: entries that compare equal (a repeat of one key) keep the
	// order the client listed them in.
	slices.SortStableFunc(run.entries, compareReconcileEntries)
	s.replyOn(run.gen, wire.OpReconcileResult, run.requestID, &wire.ReconcileResult{Entries: run.entries})
	s.countReconcile(run.entries) // session_surface.go
	if s.ended {
		return // the result overflowed the outbox and the cut ended the session
	}
	for _, sub := range run.restored {
		// A restored subscription may have been closed (SubscriptionEnded, a
		// bounce) before the result: announcing it would revive a ghost.
		if s.subsByID[sub.id] == sub && sub.active {
			s.announce(sub)
		}
		if s.ended {
			return // announcing flushed held deliveries over the outbox bound: cut
		}
	}
	s.skeletonChanged()
	if run.gen == s.gen && s.conn != 0 && s.reconciling > 0 {
		s.reconciling--
		s.openGate()
	}
}

// unsubscribe ends a subscription at the client's request (reconcile); its
// deliveries requeue at once.
func (s *Session) unsubscribe(sub *sessionSub) {
	s.dropSub(sub)
	// Through toPartition, not straight out: if the Subscribe still waits
	// behind an Open, the Unsubscribe must queue after it, not overtake it.
	s.toPartition(sub.key, queuedRequest{input: &core.Unsubscribe{SubID: sub.id}})
}

// closeClient is a close_client_side entry with only the client view.
func closeClient(cs wire.ReconcileSub, code wire.ReasonCode, reason string) wire.ReconcileEntry {
	return wire.ReconcileEntry{Client: wire.Some(cs), Action: wire.ReconcileCloseClientSide, Reason: reason, Code: code}
}

// asReconcileSub is the server view of a subscription.
func (sub *sessionSub) asReconcileSub() wire.ReconcileSub {
	rs := wire.ReconcileSub{SubID: sub.id, Topic: sub.key.Topic, Partition: sub.key.Partition, Group: sub.group,
		AutoAck: sub.autoAck, Prefetch: sub.prefetch}
	if sub.exclusive != nil {
		rs.ConsumerGroup = wire.Some(sub.exclusive.cohortID)
		if sub.exclusive.targetSet {
			rs.ConsumerTarget = wire.Some(sub.exclusive.target)
		}
		rs.MemberID = wire.Some(wire.UUID(sub.exclusive.member))
	}
	return rs
}

// compareReconcileEntries orders by (group, topic, sub_id) of the client
// view, else the server view; an absent group sorts first.
func compareReconcileEntries(a, b wire.ReconcileEntry) int {
	view := func(e wire.ReconcileEntry) wire.ReconcileSub {
		if e.Client.Present {
			return e.Client.Value
		}
		return e.Server.Value
	}
	x, y := view(a), view(b)
	switch {
	case x.Group.Present != y.Group.Present:
		if !x.Group.Present {
			return -1
		}
		return 1
	case x.Group.Value != y.Group.Value:
		return stringsCompare(x.Group.Value, y.Group.Value)
	case x.Topic != y.Topic:
		return stringsCompare(x.Topic, y.Topic)
	case x.SubID < y.SubID:
		return -1
	case x.SubID > y.SubID:
		return 1
	}
	return 0
}
