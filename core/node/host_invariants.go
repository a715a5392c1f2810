package node

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// The Host's cross-checks. Invariants this file checks:
//   - the core partition's own invariants hold;
//   - the Host routes exactly the core's subscriptions, each to a session;
//   - every reference was minted here and names a known waiter kind;
//   - every tracked dead-letter copy's source is still pending, in one known
//     state, with its backoff inside [DeadLetterRetryMinMs, DeadLetterRetryMaxMs];
//   - the copy counters match and no slot stays free while copies wait.

// CheckInvariants checks the partition and the Host's routing and
// dead-letter state, and reports the first broken invariant. O(state):
// for the simulator and the tests.
func (h *Host) CheckInvariants() error {
	// The core's checks first: routing errors are meaningless over a broken
	// partition, and its message states are what the checks below rely on.
	if err := h.p.CheckInvariants(); err != nil {
		return err
	}
	// Routing: the Host knows the owner of exactly the core's subscriptions
	// (a ghost on either side would drop deliveries or leak leases).
	ids := h.p.SubscriptionIDs()
	if len(ids) != len(h.subs) {
		return fmt.Errorf("core has %d subscriptions, the Host routes %d", len(ids), len(h.subs))
	}
	for _, id := range ids {
		owner, ok := h.subs[id]
		if !ok || owner.Kind != AddrSession {
			return fmt.Errorf("subscription %d has no owning session (%v)", id, owner)
		}
	}
	// References were minted here and say who waits.
	for ref, r := range h.refs {
		// Ref 0 means "no reference"; one past nextRef could collide with the next
		// minted, and an answer would then reach the wrong waiter.
		if ref == 0 || ref > h.nextRef {
			return fmt.Errorf("reference %d beyond the last minted %d", ref, h.nextRef)
		}
		if r.kind != refSession && r.kind != refDeadLetter && r.kind != refAdminPublish && r.kind != refAdminComplete && r.kind != refAdmin {
			return fmt.Errorf("reference %d of kind %d", ref, r.kind)
		}
	}
	return h.checkDeadLetters()
}

// checkDeadLetters: every tracked copy is filed under its offset, its
// message is still pending (so no source is settled before its copy is
// stored), its state is known and its backoff within bounds; the counters
// match; the slots are within DeadLettersInflightMax and none is left free
// while copies wait.
func (h *Host) checkDeadLetters() error {
	// Recounted from dlq rather than trusted: the counters drive slot admission,
	// and a drifted one would stall dead-lettering or overrun its limit.
	waiting, sent, retrying := 0, 0, 0
	for offset, c := range h.dlq {
		if c.letter.Offset != offset {
			return fmt.Errorf("dead-letter copy of %d filed under %d", c.letter.Offset, offset)
		}
		// Never settled before its copy is stored: a tracked copy's source
		// is still pending.
		if v, live := h.p.Message(offset); !live || v.State != core.MessagePendingDLQ {
			return fmt.Errorf("dead-letter copy of %d tracked, but the message is not pending (live %v, %v)", offset, live, v.State)
		}
		switch c.state {
		case copyWaiting:
			waiting++
		case copySent:
			sent++
		case copyRetrying:
			retrying++
			// Below the minimum the retry would hammer a target that just refused;
			// above the maximum a recovered target would wait longer than promised.
			if c.backoffMs < h.cfg.DeadLetterRetryMinMs || c.backoffMs > h.cfg.DeadLetterRetryMaxMs {
				return fmt.Errorf("copy of %d backs off %d ms, outside [%d, %d]", offset, c.backoffMs, h.cfg.DeadLetterRetryMinMs, h.cfg.DeadLetterRetryMaxMs)
			}
		default:
			return fmt.Errorf("copy of %d in state %d", offset, c.state)
		}
	}
	switch {
	case sent+retrying != h.dlqActive || retrying != h.dlqRetrying:
		return fmt.Errorf("copies: %d sent, %d retrying; counted %d active, %d retrying", sent, retrying, h.dlqActive, h.dlqRetrying)
	case h.dlqActive > h.cfg.DeadLettersInflightMax:
		return fmt.Errorf("%d copies on their way, limit %d", h.dlqActive, h.cfg.DeadLettersInflightMax)
	case waiting+h.dlqStoredWaiting != len(h.dlqWaiting)-h.dlqHead:
		return fmt.Errorf("%d copies waiting and %d stored, %d listed", waiting, h.dlqStoredWaiting, len(h.dlqWaiting)-h.dlqHead)
	// A free slot with copies waiting means pumpDeadLetters was not called
	// after a slot was released: those copies would wait forever.
	case waiting > 0 && h.dlqActive < h.cfg.DeadLettersInflightMax:
		return fmt.Errorf("%d copies wait while %d of %d slots are taken", waiting, h.dlqActive, h.cfg.DeadLettersInflightMax)
	}
	return nil
}
