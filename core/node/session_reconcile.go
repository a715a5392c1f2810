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
	"github.com/fibril-go/fibril/transport/wire"
)

// reconcileRun is one RECONCILE_CLIENT waiting for its restores.
type reconcileRun struct {
	gen       uint64
	requestID uint64
	entries   []wire.ReconcileEntry
	restored  []*sessionSub
	waiting   int
}

// handleReconcile answers at once unless restores are on their way; it
// reports whether the result went out.
func (s *Session) handleReconcile(requestID uint64, rc *wire.ReconcileClient) bool {
	run := &reconcileRun{gen: s.gen, requestID: requestID}
	unlisted := make(map[subKey]*sessionSub, len(s.subs))
	for k, v := range s.subs {
		unlisted[k] = v
	}
	seen := make(map[subKey]bool, len(rc.Subscriptions))
	for _, cs := range rc.Subscriptions {
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
	for _, key := range sortedSubKeys(unlisted) {
		sub := unlisted[key]
		run.entries = append(run.entries, wire.ReconcileEntry{Server: wire.Some(sub.asReconcileSub()),
			Action: wire.ReconcileCloseServerSide, Reason: "client_missing", Code: wire.ReasonClientMissing})
		s.unsubscribe(sub)
	}
	if run.waiting > 0 {
		return false
	}
	s.finishReconcile(run)
	return true
}

// reconcileOne decides one client entry; sub is the server's, or nil.
func (s *Session) reconcileOne(run *reconcileRun, policy wire.ReconcilePolicy, q core.QueueID, cs wire.ReconcileSub, sub *sessionSub) {
	switch {
	case sub != nil && sub.autoAck == cs.AutoAck && sub.prefetch == cs.Prefetch:
		code, reason := wire.ReasonMatched, "matched"
		if sub.id != cs.SubID {
			code, reason = wire.ReasonServerIDChanged, "server_id_changed"
		}
		run.entries = append(run.entries, wire.ReconcileEntry{Client: wire.Some(cs), Server: wire.Some(sub.asReconcileSub()),
			Action: wire.ReconcileKeep, Reason: reason, Code: code})
	case sub != nil:
		run.entries = append(run.entries, wire.ReconcileEntry{Client: wire.Some(cs), Server: wire.Some(sub.asReconcileSub()),
			Action: wire.ReconcileCloseClientSide, Reason: "server_mismatch", Code: wire.ReasonServerMismatch})
		s.unsubscribe(sub)
	case policy == wire.ReconcileRestore:
		restored, _ := s.newSub(q, cs.Prefetch, cs.AutoAck)
		if restored == nil {
			run.entries = append(run.entries, closeClient(cs, wire.ReasonServerRestoreFailed, "server_restore_failed"))
			return
		}
		token := s.newToken()
		s.pending[token] = pendingOp{kind: opRestore, gen: s.gen, queue: q, subID: restored.id, recon: run, entry: len(run.entries)}
		run.entries = append(run.entries, wire.ReconcileEntry{Client: wire.Some(cs), Server: wire.Some(restored.asReconcileSub()),
			Action: wire.ReconcileKeep, Reason: "server_restored", Code: wire.ReasonServerRestored})
		run.restored = append(run.restored, restored)
		run.waiting++
		s.subscribe(restored, token)
	case !cs.AutoAck:
		// Standalone: this broker owns every partition.
		run.entries = append(run.entries, wire.ReconcileEntry{Client: wire.Some(cs), Action: wire.ReconcileRecreateClientSide,
			Reason: "recreate", Code: wire.ReasonRecreate})
	default:
		run.entries = append(run.entries, closeClient(cs, wire.ReasonServerMissing, "server_missing"))
	}
}

// restoreDone records a restore's outcome and finishes the run after the
// last one.
func (s *Session) restoreDone(op pendingOp, ok bool) {
	run := op.recon
	sessionAssert(run != nil && run.waiting > 0, "a restore outcome for no waiting reconcile")
	if !ok {
		e := &run.entries[op.entry]
		sessionAssert(e.Client.Present, "a restore entry without its client view")
		*e = closeClient(e.Client.Value, wire.ReasonServerRestoreFailed, "server_restore_failed")
	}
	run.waiting--
	if run.waiting == 0 {
		s.finishReconcile(run)
	}
}

// finishReconcile sends the result, then lets restored subscriptions'
// deliveries flow and opens the gate.
func (s *Session) finishReconcile(run *reconcileRun) {
	sessionAssert(run.waiting == 0, "a reconcile finished with restores pending")
	slices.SortStableFunc(run.entries, compareReconcileEntries)
	s.replyOn(run.gen, wire.OpReconcileResult, run.requestID, &wire.ReconcileResult{Entries: run.entries})
	for _, sub := range run.restored {
		if s.subsByID[sub.id] == sub && sub.active {
			s.announce(sub)
		}
	}
	s.skeletonChanged()
	if run.gen == s.gen && s.conn != 0 {
		s.openGate()
	}
}

// unsubscribe ends a subscription at the client's request (reconcile); its
// deliveries requeue at once.
func (s *Session) unsubscribe(sub *sessionSub) {
	s.dropSub(sub)
	s.toPartition(sub.key, queuedRequest{input: &core.Unsubscribe{SubID: sub.id}})
}

func closeClient(cs wire.ReconcileSub, code wire.ReasonCode, reason string) wire.ReconcileEntry {
	return wire.ReconcileEntry{Client: wire.Some(cs), Action: wire.ReconcileCloseClientSide, Reason: reason, Code: code}
}

func (sub *sessionSub) asReconcileSub() wire.ReconcileSub {
	return wire.ReconcileSub{SubID: sub.id, Topic: sub.key.Topic, Partition: sub.key.Partition, Group: sub.group,
		AutoAck: sub.autoAck, Prefetch: sub.prefetch}
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
