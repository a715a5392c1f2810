package node

import (
	"slices"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// The Host's side of operator queue operations. Invariants:
//   - a purge and an operator's publish are stepped into the core like a
//     session's request and answered once, from the core's reply (so once
//     durable), to the AdminAddr that asked;
//   - after PartitionDeleted the Host has no subscription (each was ended
//     and its session told SUBSCRIPTION_CLOSED 20 topic_deleted) and
//     refuses every later request with a retryable error: the driver stops
//     it at once, and a session's retry then finds the partition gone and
//     opens the name afresh;
//   - Observe reads counters only (O(1)): the driver may call it after
//     every step for listings and metrics without slowing the publish path.

// refAdmin: an operator's request waits (token: its AdminAddr request
// number; session: which operation, adminOp).
const refAdmin hostRefKind = 5 // after host_messages.go's 3 and 4

// adminOp says which operator request a refAdmin reference answers.
type adminOp uint8

const (
	adminOpPurge   adminOp = 1
	adminOpPublish adminOp = 2
)

// msgQueueDeleted is the SUBSCRIPTION_CLOSED message of a deleted queue.
const msgQueueDeleted = "the queue was deleted by an operator; publish or declare it to create a fresh one"

// HostObservation is what a driver may read of a Host for listings and
// metrics: observations, never decisions.
type HostObservation struct {
	Counts    core.Counts
	Consumers int
	Published uint64
	Delivered uint64
}

// Observe returns the partition's counts (O(1)).
func (h *Host) Observe() HostObservation {
	published, delivered := h.p.PublishedDelivered()
	return HostObservation{Counts: h.p.FastCounts(), Consumers: len(h.subs), Published: published, Delivered: delivered}
}

// onQueueOp dispatches the operator messages; false when msg is none.
func (h *Host) onQueueOp(from Address, msg Message) bool {
	switch m := msg.(type) {
	case *InflightQuery:
		assertHold(from == NodeAddr(), "the Node asks for inflight counts")
		h.send(from, &InflightCount{Token: m.Token, Inflight: h.p.FastCounts().Inflight})
	case *PartitionDeleted:
		h.onPartitionDeleted()
	case *ObserveQuery:
		assertHold(from.Kind == AddrAdmin, "operators ask for observations")
		h.send(from, &Observation{HostObservation: h.Observe()})
	case *PurgeQueue:
		// Relayed by the Node (node_messages.go), which loaded the partition
		// for it: the operator never sends a Host one directly.
		assertHold(from == NodeAddr(), "the Node relays purges")
		h.onAdminRequest(m.ReplyTo, adminOpPurge, &core.Purge{NowMs: h.nowMs})
	case *AdminPublish:
		assertHold(from == NodeAddr() && m.Body != nil, "the Node relays an operator's publish, with a body")
		h.onAdminRequest(m.ReplyTo, adminOpPublish, &core.Publish{NowMs: h.nowMs, Confirm: true, Body: m.Body, System: true})
	default:
		return false
	}
	return true
}

// onAdminRequest steps an operator's input, its reply routed to from (the
// operator the Node relayed it for).
func (h *Host) onAdminRequest(from Address, op adminOp, in core.Input) {
	assertHold(from.Kind == AddrAdmin && from.Request != 0, "operator requests name an admin address")
	if h.deleted {
		h.answerAdmin(from.Request, op, &core.Reply{Kind: core.ReplyError, Err: core.ErrPartitionLoadFailed})
		return
	}
	ref := h.newRef(hostRef{kind: refAdmin, session: SessionID(op), token: from.Request})
	switch in := in.(type) {
	case *core.Purge:
		in.Ref = ref
	case *core.Publish:
		in.Ref = ref
	}
	h.stepCore(in)
}

// answerAdmin sends the core's reply to an operator's request.
func (h *Host) answerAdmin(req uint64, op adminOp, r *core.Reply) {
	var err *core.Error
	if r.Kind == core.ReplyError {
		err = r.Err
	}
	switch op {
	case adminOpPurge:
		assertHold(err != nil || r.Kind == core.ReplyPurged, "a purge answers purged or an error")
		h.send(AdminAddr(req), &Purged{Count: r.Offset, Err: err})
	case adminOpPublish:
		assertHold(err != nil || r.Kind == core.ReplyPublished, "a publish answers a confirm or an error")
		h.send(AdminAddr(req), &AdminPublished{Queue: h.queue, Offset: r.Offset, Err: err})
	default:
		panic("fibril/core/node invariant violated: an unknown operator request")
	}
}

// onPartitionDeleted ends every subscription, telling each session, and
// marks the Host deleted.
func (h *Host) onPartitionDeleted() {
	h.deleted = true
	ids := make([]uint64, 0, len(h.subs))
	for id := range h.subs {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the same order on every replay of a seed
	for _, id := range ids {
		owner := h.subs[id]
		h.stepCore(&core.Unsubscribe{NowMs: h.nowMs, SubID: id})
		delete(h.subs, id)
		h.send(owner, &SubscriptionEnded{Queue: h.queue, SubID: id, Code: wire.ReasonTopicDeleted, Message: msgQueueDeleted})
	}
	assertHold(len(h.subs) == 0, "a deleted partition has no subscription")
}

// refuseDeleted answers a session's request to a deleted partition with a
// retryable error (the retry finds the partition gone and opens afresh).
func (h *Host) refuseDeleted(from Address, req *Request) {
	if req.Token != 0 {
		h.send(from, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplyError, Err: core.ErrPartitionLoadFailed}})
	}
}
