package client

// Session resume (PROTOCOL §3.1, §7.7, §7.8; SPEC §8 "Client reconnect"): a
// reconnect presents the resume identity of the last HELLO_OK, authenticates
// again, reconciles the queue subscriptions the client still holds, and decides
// whether the deliveries the application holds are still settleable.
//
// Invariants:
//   - A session is the broker-side session the deliveries came from. It outlives
//     an engine only when the broker answered `resumed`; any other outcome marks
//     it stale for good, and a stale session never becomes live again.
//   - A delivery settles only over an engine of its own session; from a stale
//     session it returns ErrStaleDelivery and sends no frame.
//   - RECONCILE_CLIENT lists the remembered subscriptions sorted by sub id, under
//     the ids the old connection used, exclusive ones with their cohort id,
//     target and the client's member id; after the result is applied, every
//     remembered subscription is either registered on the new engine under the
//     broker's id or closed with a *SubscriptionClosedError (code 40 when the
//     result does not mention it).
//   - Pushes that arrive during the handshake are held (at most
//     handshakePushesMax) and dispatched by the reader, first, only after the
//     result is applied, so a DELIVER under a re-keyed id finds its subscription
//     (§9 quirk 2).

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/fibril-go/fibril/transport/wire"
)

// ResumeOutcome is how the broker resolved the resume identity (§7.7).
type ResumeOutcome = wire.ResumeOutcome

// Resume outcomes a HELLO_OK carries.
const (
	ResumeNew                 = wire.ResumeNew
	ResumeResumed             = wire.ResumeResumed
	ResumeNotFound            = wire.ResumeNotFound
	ResumeRejected            = wire.ResumeRejected
	ResumeResumedAfterRestart = wire.ResumeResumedAfterRestart
)

// Reconcile reason codes the client applies (§7.9).
const (
	ReasonMatched         = wire.ReasonCode(1)
	ReasonServerIDChanged = wire.ReasonCode(2)
	ReasonServerRestored  = wire.ReasonCode(3)
	ReasonServerMismatch  = wire.ReasonCode(4)
	ReasonServerMissing   = wire.ReasonCode(6)
	ReasonRecreate        = wire.ReasonCode(8)
)

// handshakePushesMax bounds the pushes held while the handshake is answered: a
// resumed session may send up to its prefetch of DELIVERs early (§9 quirk 2).
const handshakePushesMax = 4096

// session is one broker-side session as the client sees it.
type session struct {
	current atomic.Pointer[engine] // the newest engine of this session
	stale   atomic.Bool            // set once a reconnect did not resume it
	// hadSubs is set once a subscription registered on this session, so a resume
	// reconciles even when none is left (the broker then drops its own).
	hadSubs atomic.Bool
}

// engine returns the newest engine of s, or nil before the first one started.
func (s *session) engine() *engine { return s.current.Load() }

// heldFrame is a push received during the handshake, replayed into dispatch
// once the handshake is done.
type heldFrame struct {
	h       wire.Header
	payload []byte
}

// resumePlan is what a reconnect carries over from the engine it replaces.
type resumePlan struct {
	identity wire.ResumeIdentity
	sess     *session
	parts    []*partitionSub // live remembered subscriptions, sorted by sub id
	// reconcile: send RECONCILE_CLIENT (some subscription lives or lived).
	reconcile bool
}

// planResume collects what a reconnect from old needs; nil when old never
// completed a handshake worth resuming.
func planResume(old *engine) *resumePlan {
	if old == nil || old.sess == nil {
		return nil
	}
	ok := old.helloOk
	plan := &resumePlan{
		identity: wire.ResumeIdentity{OwnerID: ok.OwnerID, ClientID: ok.ClientID, ResumeToken: ok.ResumeToken},
		sess:     old.sess,
		parts:    old.liveParts(),
	}
	plan.reconcile = len(plan.parts) > 0 || old.sess.hadSubs.Load()
	return plan
}

// liveParts returns the partitions of subscriptions not yet closed, sorted by
// sub id so RECONCILE_CLIENT is the same for the same state.
func (e *engine) liveParts() []*partitionSub {
	e.mu.Lock()
	parts := make([]*partitionSub, 0, len(e.subs))
	for _, part := range e.subs {
		parts = append(parts, part)
	}
	e.mu.Unlock()
	live := parts[:0]
	for _, part := range parts {
		if !part.sub.isDetached() {
			live = append(live, part)
		}
	}
	slices.SortFunc(live, func(a, b *partitionSub) int {
		switch {
		case a.subID < b.subID:
			return -1
		case a.subID > b.subID:
			return 1
		}
		return 0
	})
	return live
}

// reconcileRequest builds RECONCILE_CLIENT from the remembered partitions. An
// exclusive subscription's entries carry its cohort id, target and the
// client's member id, so that a restore rejoins the cohort as the same member
// (§7.8 "used when restoring").
func (p *resumePlan) reconcileRequest(policy wire.ReconcilePolicy) wire.ReconcileClient {
	req := wire.ReconcileClient{Policy: policy, Subscriptions: make([]wire.ReconcileSub, 0, len(p.parts))}
	for _, part := range p.parts {
		s := part.sub
		entry := wire.ReconcileSub{
			SubID: part.subID, Topic: s.topic, Partition: part.partition, Group: groupOpt(s.group),
			AutoAck: s.autoAck, Prefetch: s.prefetch,
		}
		if s.isExclusive() {
			entry.ConsumerGroup = wire.Some(s.consumerGroup)
			if s.consumerTarget != 0 {
				entry.ConsumerTarget = wire.Some(s.consumerTarget)
			}
			// The client's id, not the subscription's: one member identity per
			// connection (§5.6 check 5), so every entry names the same one.
			if id, ok := s.client.cohorts.member(); ok {
				entry.MemberID = wire.Some(id)
			}
		}
		req.Subscriptions = append(req.Subscriptions, entry)
	}
	return req
}

// reconcileVerdict is what one remembered partition becomes.
type reconcileVerdict struct {
	keep     bool
	newSubID uint64
	// memberID is the member id of the server view of a kept entry, when it
	// names one: the id the broker resolved for the restored subscription.
	memberID wire.Optional[wire.UUID]
	closeErr *SubscriptionClosedError
}

// verdicts maps each remembered partition to its verdict under result (§7.8).
func (p *resumePlan) verdicts(result wire.ReconcileResult) map[*partitionSub]reconcileVerdict {
	byID := make(map[uint64]*partitionSub, len(p.parts))
	for _, part := range p.parts {
		byID[part.subID] = part
	}
	out := make(map[*partitionSub]reconcileVerdict, len(p.parts))
	for _, entry := range result.Entries {
		view, ok := entry.Client.Get()
		if !ok {
			continue // close_server_side: the broker dropped a subscription we forgot
		}
		part := byID[view.SubID]
		if part == nil {
			continue // not one of ours (or listed twice): nothing to apply
		}
		delete(byID, view.SubID)
		if entry.Action == wire.ReconcileKeep {
			verdict := reconcileVerdict{keep: true, newSubID: view.SubID}
			if server, ok := entry.Server.Get(); ok {
				verdict.newSubID = server.SubID
				if id, ok := server.MemberID.Get(); ok && !id.IsNil() && part.sub.isExclusive() {
					verdict.memberID = server.MemberID
				}
			}
			out[part] = verdict
			continue
		}
		// close_client_side, recreate_client_side, and close_server_side naming
		// our view: the client-side stream ends with the row's code.
		out[part] = reconcileVerdict{closeErr: &SubscriptionClosedError{SubID: view.SubID, Code: entry.Code, Message: entry.Reason}}
	}
	for id, part := range byID {
		out[part] = reconcileVerdict{closeErr: &SubscriptionClosedError{SubID: id, Code: ReasonServerError,
			Message: "not mentioned in RECONCILE_RESULT"}}
	}
	if len(out) != len(p.parts) {
		panic("client: a remembered subscription got no reconcile verdict")
	}
	return out
}

// applyReconcile moves the remembered subscriptions onto e (not yet started):
// kept partitions under the broker's ids, then closes every subscription one of
// whose partitions the result ends. A fanned-in subscription ends whole, as on
// SUBSCRIPTION_CLOSED.
func (e *engine) applyReconcile(p *resumePlan, result wire.ReconcileResult) {
	verdicts := p.verdicts(result)
	var closing []*Subscription
	closeErrs := make(map[*Subscription]error)
	for _, part := range p.parts {
		v := verdicts[part]
		if !v.keep {
			if _, seen := closeErrs[part.sub]; !seen {
				closing = append(closing, part.sub)
				closeErrs[part.sub] = v.closeErr
			}
			continue
		}
		if id, ok := v.memberID.Get(); ok {
			part.sub.client.cohorts.adopt(id)
		}
		part.sub.moveTo(e, part, v.newSubID, v.memberID)
	}
	for _, sub := range closing {
		sub.closeWith(closeErrs[sub])
	}
}

// moveTo re-registers one kept partition of s on e under newSubID, noting the
// member id the broker named for it, if any.
func (s *Subscription) moveTo(e *engine, part *partitionSub, newSubID uint64, memberID wire.Optional[wire.UUID]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.detached {
		return // closed by the application meanwhile
	}
	if s.eng != e {
		// First partition moved: the others are re-added one by one.
		s.eng = e
		s.parts = s.parts[:0]
	}
	if id, ok := memberID.Get(); ok {
		s.memberID = id
	}
	part.subID = newSubID
	s.parts = append(s.parts, part)
	e.mu.Lock()
	defer e.mu.Unlock()
	if prev := e.subs[newSubID]; prev != nil && prev != part {
		panic(fmt.Sprintf("client: reconcile keeps two subscriptions under sub id %d", newSubID))
	}
	e.subs[newSubID] = part
	e.sess.hadSubs.Store(true)
}

// holdPush keeps a push that arrived during the handshake.
func (e *engine) holdPush(h wire.Header, payload []byte) error {
	if len(e.heldFrames) >= handshakePushesMax {
		return fmt.Errorf("%w: more than %d pushes before the handshake was answered", ErrProtocol, handshakePushesMax)
	}
	e.heldFrames = append(e.heldFrames, heldFrame{h: h, payload: slices.Clone(payload)})
	return nil
}

// isHandshakePush reports the frames a broker may push before it answers a
// handshake request (§9 quirk 2): they are held, not treated as the reply.
func isHandshakePush(op wire.Opcode) bool {
	switch op {
	case wire.OpDeliver, wire.OpPing, wire.OpPong, wire.OpSubscriptionClosed, wire.OpTopologyUpdate,
		wire.OpGoingAway, wire.OpAssignmentChanged, wire.OpReconcileServer:
		return true
	}
	return false
}

// dispatchHeld replays the held pushes; the reader's first act.
func (e *engine) dispatchHeld() error {
	held := e.heldFrames
	e.heldFrames = nil
	for _, f := range held {
		if err := e.dispatch(f.h, f.payload); err != nil {
			return err
		}
	}
	return nil
}
