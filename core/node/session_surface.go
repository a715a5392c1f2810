package node

// Operator requests to a session (msg_surface.go). Invariants:
//   - only envelopes from an AdminAddr are taken here, and each is
//     answered exactly once, to its sender, whatever the session's state;
//   - SessionInfoQuery changes nothing; CloseSession ends the session as
//     its grace running out would (end), so every invariant of end holds.

import (
	"slices"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// sessionInfoSubsMax bounds the subscriptions one SessionInfo lists; the
// total is still counted, so a listing can say it is cut.
const sessionInfoSubsMax = 1024

// onAdmin handles an operator envelope; false when env is not one (the
// caller dispatches it as usual). One comparison on the hot path.
func (s *Session) onAdmin(env *Envelope) bool {
	if env.From.Kind != AddrAdmin {
		return false
	}
	switch m := env.Msg.(type) {
	case *SessionInfoQuery:
		s.out(env.From, s.info())
	case *CloseSession:
		s.out(env.From, s.forceClose(m))
	default:
		return false // not ours: the usual dispatch panics on it, loudly
	}
	return true
}

// info lists the session for an operator.
func (s *Session) info() *SessionInfo {
	in := &SessionInfo{Conn: s.conn, Dormant: s.dormant, Authed: s.authed, Ended: s.ended,
		SubsTotal: len(s.subs) + len(s.streamSubs)}
	for _, key := range sortedSubKeys(s.subs) {
		if len(in.Subs) >= sessionInfoSubsMax {
			break
		}
		sub := s.subs[key]
		kind := SubKindQueue
		if sub.exclusive != nil {
			kind = SubKindCohort
		}
		in.Subs = append(in.Subs, SessionSubInfo{SubID: sub.id, Topic: key.Topic, Group: key.Group,
			Partition: key.Partition, Prefetch: sub.prefetch, AutoAck: sub.autoAck, Kind: kind, Held: len(sub.held)})
	}
	for _, key := range sortedStreamKeys(s.streamSubs) {
		if len(in.Subs) >= sessionInfoSubsMax {
			break
		}
		sub := s.streamSubs[key]
		in.Subs = append(in.Subs, SessionSubInfo{SubID: sub.id, Topic: key.Topic, Partition: key.Partition,
			Prefetch: sub.prefetch, AutoAck: true, Kind: SubKindStream, Held: len(sub.held)})
	}
	sessionAssert(len(in.Subs) <= in.SubsTotal, "listed more subscriptions than the session has")
	return in
}

// forceClose ends the session now: the client hears why (when its gate is
// open: a push before it would break PROTOCOL 3.1), the connection closes
// after what was queued, and end() unsubscribes everything so the
// partitions requeue its deliveries at once.
func (s *Session) forceClose(m *CloseSession) *SessionClosed {
	if s.ended {
		return &SessionClosed{AlreadyEnded: true}
	}
	out := &SessionClosed{Conn: s.conn, WasDormant: s.dormant}
	if s.conn != 0 && s.gateOpen {
		s.push(wire.OpGoingAway, 0, &wire.GoingAway{GraceMs: 0, Message: m.Message})
	}
	s.end()
	sessionAssert(s.ended && s.conn == 0, "a force-closed session ended and let its connection go")
	return out
}

// sortedStreamKeys orders stream subscriptions (deterministic listings).
func sortedStreamKeys(subs map[core.QueueID]*streamSub) []core.QueueID {
	keys := make([]core.QueueID, 0, len(subs))
	for k := range subs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareQueueIDs)
	return keys
}

// ReconcileOutcome is a reconcile entry's outcome as SPEC 13 counts it
// (fibril_tcp_reconcile_outcomes_total{outcome}). Append-only.
type ReconcileOutcome uint8

const (
	ReconcileKept ReconcileOutcome = iota
	ReconcileRestored
	ReconcileRecreated
	ReconcileMismatched
	ReconcileRestoreFailed
	ReconcileServerDropped
	ReconcileClientClosed
	// ReconcileOutcomeCount is the number of outcomes.
	ReconcileOutcomeCount
)

// ReconcileOutcomeNames are the label values, by outcome.
var ReconcileOutcomeNames = [ReconcileOutcomeCount]string{"kept", "restored", "recreated", "mismatched",
	"restore_failed", "server_dropped", "client_closed"}

// reconcileOutcome maps an entry's reason code to its counted outcome;
// false for a code that is none of them (not counted).
func reconcileOutcome(code wire.ReasonCode) (ReconcileOutcome, bool) {
	switch code {
	case wire.ReasonMatched, wire.ReasonServerIDChanged:
		return ReconcileKept, true
	case wire.ReasonServerRestored:
		return ReconcileRestored, true
	case wire.ReasonRecreate:
		return ReconcileRecreated, true
	case wire.ReasonServerMismatch:
		return ReconcileMismatched, true
	case wire.ReasonServerRestoreFailed:
		return ReconcileRestoreFailed, true
	case wire.ReasonServerMissing:
		return ReconcileServerDropped, true
	case wire.ReasonClientMissing:
		return ReconcileClientClosed, true
	}
	return 0, false
}

// countReconcile counts one RECONCILE_RESULT and its entries' outcomes.
func (s *Session) countReconcile(entries []wire.ReconcileEntry) {
	s.rd.Counted.Reconciles++
	for i := range entries {
		if o, ok := reconcileOutcome(entries[i].Code); ok {
			s.rd.Counted.ReconcileOutcomes[o]++
		}
	}
}
