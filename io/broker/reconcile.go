//go:build !fibril_next

package broker

import (
	"sort"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// handleReconcile matches the subscriptions a reconnecting client remembers
// against the session's (PROTOCOL.md §7.8) and answers RECONCILE_RESULT
// before any push (the caller releases held pushes after it).
func (s connRef) handleReconcile(requestID uint64, rc *wire.ReconcileClient) {
	s.mu.Lock()
	serverSubs := make(map[wire.QueueKey]*binding, len(s.subs))
	for k, v := range s.subs {
		serverSubs[k] = v
	}
	s.mu.Unlock()
	var entries []wire.ReconcileEntry
	seen := make(map[wire.QueueKey]bool, len(rc.Subscriptions))
	for _, cs := range rc.Subscriptions {
		q, err := queueOf(cs.Topic, cs.Group)
		if err != nil {
			entries = append(entries, closeClient(cs, wire.ReasonServerMissing, "server_missing"))
			continue
		}
		key := wire.QueueKey{Topic: q.Topic, Partition: cs.Partition, Group: groupOpt(q.Group)}
		if seen[key] {
			// One subscription per queue partition and session: a repeat
			// would orphan the first binding.
			entries = append(entries, closeClient(cs, wire.ReasonServerMismatch, "server_mismatch"))
			continue
		}
		seen[key] = true
		bnd := serverSubs[key]
		delete(serverSubs, key)
		switch {
		case bnd != nil && bnd.autoAck == cs.AutoAck && bnd.prefetch == cs.Prefetch:
			code, reason := wire.ReasonMatched, "matched"
			if bnd.subID != cs.SubID {
				code, reason = wire.ReasonServerIDChanged, "server_id_changed"
			}
			entries = append(entries, wire.ReconcileEntry{Client: wire.Some(cs), Server: wire.Some(bnd.asReconcileSub()),
				Action: wire.ReconcileKeep, Reason: reason, Code: code})
		case bnd != nil:
			entries = append(entries, wire.ReconcileEntry{Client: wire.Some(cs), Server: wire.Some(bnd.asReconcileSub()),
				Action: wire.ReconcileCloseClientSide, Reason: "server_mismatch", Code: wire.ReasonServerMismatch})
			s.unsubscribe(bnd)
		case rc.Policy == wire.ReconcileRestore:
			if restored := s.restore(q, cs); restored != nil {
				entries = append(entries, wire.ReconcileEntry{Client: wire.Some(cs), Server: wire.Some(restored.asReconcileSub()),
					Action: wire.ReconcileKeep, Reason: "server_restored", Code: wire.ReasonServerRestored})
			} else {
				entries = append(entries, closeClient(cs, wire.ReasonServerRestoreFailed, "server_restore_failed"))
			}
		case !cs.AutoAck:
			entries = append(entries, wire.ReconcileEntry{Client: wire.Some(cs), Action: wire.ReconcileRecreateClientSide,
				Reason: "recreate", Code: wire.ReasonRecreate})
		default:
			entries = append(entries, closeClient(cs, wire.ReasonServerMissing, "server_missing"))
		}
	}
	for _, bnd := range serverSubs {
		entries = append(entries, wire.ReconcileEntry{Server: wire.Some(bnd.asReconcileSub()), Action: wire.ReconcileCloseServerSide,
			Reason: "client_missing", Code: wire.ReasonClientMissing})
		s.unsubscribe(bnd)
	}
	sort.SliceStable(entries, func(i, j int) bool { return reconcileLess(entries[i], entries[j]) })
	s.reply(wire.OpReconcileResult, requestID, &wire.ReconcileResult{Entries: entries})
}

func closeClient(cs wire.ReconcileSub, code wire.ReasonCode, reason string) wire.ReconcileEntry {
	return wire.ReconcileEntry{Client: wire.Some(cs), Action: wire.ReconcileCloseClientSide, Reason: reason, Code: code}
}

// reconcileLess sorts by (group, topic, sub_id) of the client view, else the
// server view; an absent group sorts first.
func reconcileLess(a, b wire.ReconcileEntry) bool {
	view := func(e wire.ReconcileEntry) wire.ReconcileSub {
		if e.Client.Present {
			return e.Client.Value
		}
		return e.Server.Value
	}
	x, y := view(a), view(b)
	if x.Group.Present != y.Group.Present {
		return !x.Group.Present
	}
	if x.Group.Value != y.Group.Value {
		return x.Group.Value < y.Group.Value
	}
	if x.Topic != y.Topic {
		return x.Topic < y.Topic
	}
	return x.SubID < y.SubID
}

func (bnd *binding) asReconcileSub() wire.ReconcileSub {
	return wire.ReconcileSub{SubID: bnd.subID, Topic: bnd.key.Topic, Partition: bnd.key.Partition, Group: bnd.key.Group,
		AutoAck: bnd.autoAck, Prefetch: bnd.prefetch}
}

// unsubscribe ends one subscription broker-side; its deliveries requeue.
func (s connRef) unsubscribe(bnd *binding) {
	s.mu.Lock()
	if s.subs[bnd.key] == bnd {
		delete(s.subs, bnd.key)
	}
	s.mu.Unlock()
	bnd.r.submit(request{in: &core.Unsubscribe{SubID: bnd.subID}})
}

// restore subscribes anew for a client-only subscription and waits for the
// core's answer.
func (s connRef) restore(q queueName, cs wire.ReconcileSub) *binding {
	r, err := s.b.runnerForExact(q, cs.Partition)
	if err != nil {
		return nil
	}
	key := wire.QueueKey{Topic: q.Topic, Partition: cs.Partition, Group: groupOpt(q.Group)}
	bnd := &binding{subID: s.b.nextSubID.Add(1), sess: s.session, gen: s.gen, key: key, prefetch: cs.Prefetch, autoAck: cs.AutoAck, r: r}
	result := make(chan bool, 1)
	s.mu.Lock()
	if _, taken := s.subs[key]; taken {
		s.mu.Unlock()
		return nil
	}
	s.subs[key] = bnd
	s.mu.Unlock()
	if !r.submit(request{in: &core.Subscribe{SubID: bnd.subID, Prefetch: cs.Prefetch, AutoAck: cs.AutoAck}, bind: bnd,
		reply: pendingReply{kind: replyInternal, internal: func(rep *core.Reply) {
			if rep.Kind != core.ReplyError {
				bnd.registered = true
			}
			result <- rep.Kind != core.ReplyError
		}}}) {
		result <- false // the runner is stopping
	}
	if !<-result {
		s.mu.Lock()
		delete(s.subs, key)
		s.mu.Unlock()
		return nil
	}
	return bnd
}
