package checker

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// The per-message lifecycle model. One porcupine partition per message
// (queue partition + x-msg-id, + offset for dead-letter copies, which may be
// stored more than once). It checks, with crashes resolved exactly from the
// log indexes the node reports:
//   - a message is appended only after its publish call, never after a
//     refused publish, and a publish returns ok only after the node confirmed
//     it; a confirmed publish survives every crash (DESIGN.md item 1);
//   - no delivery after the message was acked or settled, in this process or
//     durably (item 2);
//   - every delivery is backed by a lease entry and starts only when no
//     other lease of the message is live; a lease ends by an ack, requeue or
//     dead-letter entry (by expiry only at or after its deadline), or
//     survives a crash exactly when its entry did and its end did not
//     (item 3);
//   - nothing is settled while one of its leases is live, and no inflight
//     message is dropped by TTL while its lease runs (item 5);
//   - retries count up by exactly one per requeue, never exceed
//     max_retries, and never go back after a crash below what was durable
//     (item 6).
// Client publishes are intervals [call, return] (a publish's effect, the
// append, happens inside it; a confirm must precede an ok return); everything
// the node did is an instant at its history sequence number, so the search
// stays linear.

type lifeOpKind uint8

const (
	lifePublish lifeOpKind = iota + 1
	lifeAccept
	lifeConfirm
	lifeDeliver
	lifeEntry
	lifeSettled
	lifeRecover
)

// publishOutcome is a publish call's result as the client saw it.
type publishOutcome uint8

const (
	publishUnknown publishOutcome = iota // no return: the connection died first
	publishOk
	publishRefused
)

// lifeInput is one operation on one message.
type lifeInput struct {
	kind       lifeOpKind
	seq        uint64 // the event behind it (the call, for a publish)
	copy       bool   // a dead-letter copy: there is no client publish
	maxRetries uint32
	outcome    publishOutcome

	index      uint64
	tag        uint64
	retries    uint32
	nowMs      int64
	deadlineMs int64
	autoAck    bool
	entryKind  core.EntryKind
	cause      uint8
	trigger    string
	settled    string // Settled outcome
}

// leaseHistoryMax bounds the leases a state remembers per process; older
// ones matter only if every newer one is lost in a crash, and forgetting
// them only makes the model more permissive.
const leaseHistoryMax = 8

type leaseRec struct {
	tag        uint64
	deadlineMs int64
	index      uint64 // the lease entry
	endIndex   uint64 // the entry that ended it (0 = open)
	retries    uint32
}

// lifeState is a value: porcupine copies and compares it.
type lifeState struct {
	published    bool
	rejected     bool
	gone         bool // the publish entry was lost in a crash
	confirmed    bool
	publishIndex uint64

	final             bool // durably settled or durably pending dead-letter
	durablePendingDLQ bool
	settledSeen       bool

	// This process (since the last recovery).
	finalIndex    uint64
	finalKind     core.EntryKind
	completeIndex uint64 // dead-lettered completion
	leaseOpen     bool
	expectRetries int32 // exact retries of the next delivery (-1 = unknown)
	floorRetries  uint32
	leases        [leaseHistoryMax]leaseRec
	leaseCount    uint8
}

func initialLifeState() lifeState { return lifeState{expectRetries: -1} }

func (s *lifeState) current() *leaseRec { return &s.leases[s.leaseCount-1] }

func (s *lifeState) pushLease(l leaseRec) {
	if int(s.leaseCount) == leaseHistoryMax {
		copy(s.leases[:], s.leases[1:])
		s.leaseCount--
	}
	s.leases[s.leaseCount] = l
	s.leaseCount++
}

// step applies in to s. A non-empty reason means the operation is illegal
// in this state; the reason names the DESIGN.md item it breaks.
func (s lifeState) step(in *lifeInput) (lifeState, string) {
	switch in.kind {
	case lifePublish:
		return s.stepPublish(in)
	case lifeAccept:
		return s.stepAccept(in)
	case lifeConfirm:
		if s.publishIndex == 0 {
			return s, "(1) the node confirmed a publish that is not in the log"
		}
		s.confirmed = true
		return s, ""
	case lifeDeliver:
		return s.stepDeliver(in)
	case lifeEntry:
		return s.stepEntry(in)
	case lifeSettled:
		return s.stepSettled(in)
	case lifeRecover:
		return s.stepRecover(in)
	}
	return s, "unknown operation"
}

func (s lifeState) stepPublish(in *lifeInput) (lifeState, string) {
	if s.published || s.rejected {
		return s, "a message id was published twice"
	}
	switch in.outcome {
	case publishRefused:
		if s.publishIndex != 0 || s.gone {
			return s, "(1) a publish the broker refused was appended to the log"
		}
		s.rejected = true
	case publishOk:
		if !s.confirmed {
			return s, "(1) a publish returned ok before the node confirmed it"
		}
		s.published = true
	default:
		s.published = true
	}
	return s, ""
}

func (s lifeState) stepAccept(in *lifeInput) (lifeState, string) {
	if in.copy && s.gone {
		s = initialLifeState() // the copy is stored again after its first store was lost
	}
	switch {
	case s.rejected:
		return s, "(1) a publish the broker refused was appended to the log"
	case s.publishIndex != 0 || s.gone:
		return s, "a message was appended twice"
	}
	s.publishIndex = in.index
	return s, ""
}

func (s lifeState) stepDeliver(in *lifeInput) (lifeState, string) {
	switch {
	case s.rejected:
		return s, "(1) delivered a publish the broker refused"
	case s.publishIndex == 0 && s.gone:
		return s, "(1) delivered a message whose publish entry was lost in a crash"
	case s.publishIndex == 0:
		return s, "delivered a message before its publish was appended"
	case s.final:
		return s, "(2) delivered after the message was settled durably"
	case s.finalIndex != 0 && s.finalKind == core.EntryAck:
		return s, "(2) delivered after its ack was accepted"
	case s.finalIndex != 0:
		return s, fmt.Sprintf("(2) delivered after it left the queue (%s entry at index %d)", EntryKindName(uint8(s.finalKind)), s.finalIndex)
	case in.index == 0:
		return s, "(3) a delivery without a lease entry in the log"
	case s.leaseOpen:
		cur := s.current()
		if in.nowMs < cur.deadlineMs {
			return s, fmt.Sprintf("(3) delivered while lease tag %d is live until %d (now %d)", cur.tag, cur.deadlineMs, in.nowMs)
		}
		return s, fmt.Sprintf("(3) delivered again while lease tag %d was never ended in the log (deadline %d, now %d)", cur.tag, cur.deadlineMs, in.nowMs)
	case in.retries > in.maxRetries:
		return s, fmt.Sprintf("(6) delivered with retries %d past max_retries %d", in.retries, in.maxRetries)
	case s.expectRetries >= 0 && in.retries != uint32(s.expectRetries):
		return s, fmt.Sprintf("(6) delivered with retries %d, but its requeue counted %d", in.retries, s.expectRetries)
	case s.expectRetries < 0 && in.retries < s.floorRetries:
		return s, fmt.Sprintf("(6) retries went back to %d after a restart; the log made %d durable", in.retries, s.floorRetries)
	}
	rec := leaseRec{tag: in.tag, deadlineMs: in.deadlineMs, index: in.index, retries: in.retries}
	s.expectRetries = -1
	if in.autoAck {
		rec.endIndex = in.index
		s.finalIndex, s.finalKind = in.index, core.EntryAck
		s.leaseOpen = false
	} else {
		s.leaseOpen = true
	}
	s.pushLease(rec)
	return s, ""
}

func (s lifeState) stepEntry(in *lifeInput) (lifeState, string) {
	if s.publishIndex == 0 {
		return s, "a log entry for a message that is not in the log"
	}
	if s.settledSeen {
		return s, fmt.Sprintf("(2) a %s entry for a message already reported settled for good", EntryKindName(uint8(in.entryKind)))
	}
	switch in.entryKind {
	case core.EntryAck:
		if !s.leaseOpen {
			return s, "(3) an ack entry for a message without a live lease"
		}
		s.current().endIndex = in.index
		s.leaseOpen = false
		s.finalIndex, s.finalKind = in.index, core.EntryAck
	case core.EntryRequeue:
		if !s.leaseOpen {
			return s, "(3) a requeue entry for a message without a live lease"
		}
		cur := s.current()
		if in.retries != cur.retries+1 {
			return s, fmt.Sprintf("(6) a requeue counted retries %d after a delivery at %d", in.retries, cur.retries)
		}
		if in.cause == core.CauseLeaseExpired && in.nowMs < cur.deadlineMs {
			return s, fmt.Sprintf("(3) lease tag %d expired at %d, before its deadline %d", cur.tag, in.nowMs, cur.deadlineMs)
		}
		cur.endIndex = in.index
		s.leaseOpen = false
		s.expectRetries = int32(in.retries)
	case core.EntryRelease:
		if s.leaseOpen {
			return s, "(3) a release entry for a message under a live lease"
		}
	case core.EntryDeadLetter, core.EntryDiscard:
		if s.final || s.finalIndex != 0 {
			return s, "(2) a message left the queue twice"
		}
		if s.leaseOpen {
			// An inflight message leaves only when its lease ends: by a nack,
			// by its subscription ending, or by the lease expiring.
			cur := s.current()
			byClient := in.trigger == "nack" || in.trigger == "unsubscribe"
			if !byClient && in.nowMs < cur.deadlineMs {
				if core.DLQReason(in.cause) == core.ReasonExpired {
					return s, fmt.Sprintf("(5) an inflight message was dropped by TTL while lease tag %d ran until %d (now %d)", cur.tag, cur.deadlineMs, in.nowMs)
				}
				return s, fmt.Sprintf("(3) an inflight message left (%s) while lease tag %d ran until %d (now %d)", reasonName(in.cause), cur.tag, cur.deadlineMs, in.nowMs)
			}
			cur.endIndex = in.index
			s.leaseOpen = false
		}
		s.finalIndex, s.finalKind = in.index, in.entryKind
	case core.EntryDeadLettered:
		pending := s.finalIndex != 0 && s.finalKind == core.EntryDeadLetter || s.durablePendingDLQ
		if !pending || s.completeIndex != 0 {
			return s, "a dead-letter completion without a pending dead-letter entry"
		}
		s.completeIndex = in.index
	}
	return s, ""
}

func (s lifeState) stepSettled(in *lifeInput) (lifeState, string) {
	if s.settledSeen {
		return s, "(2) a message was reported settled twice"
	}
	if s.leaseOpen {
		cur := s.current()
		item := "(3)"
		if in.settled != OutcomeAcked {
			item = "(5)"
		}
		return s, fmt.Sprintf("%s reported %s while lease tag %d is live until %d (now %d)", item, in.settled, cur.tag, cur.deadlineMs, in.nowMs)
	}
	switch in.settled {
	case OutcomeAcked:
		if s.finalIndex == 0 || s.finalKind != core.EntryAck {
			return s, "(2) reported acked without an ack entry in this process"
		}
	case OutcomeDiscarded:
		if s.finalIndex == 0 || s.finalKind != core.EntryDiscard {
			return s, "reported discarded without a discard entry in this process"
		}
	case OutcomeDeadLettered:
		if s.completeIndex == 0 {
			return s, "reported dead-lettered without a completion entry in this process"
		}
	}
	s.settledSeen = true
	s.final = true
	return s, ""
}

// stepRecover resolves a crash: what the log kept up to index N survives.
func (s lifeState) stepRecover(in *lifeInput) (lifeState, string) {
	n := in.index
	if s.publishIndex > n {
		if s.confirmed {
			return s, fmt.Sprintf("(1) a confirmed publish was lost in a crash (appended at index %d, recovered up to %d)", s.publishIndex, n)
		}
		gone := initialLifeState()
		gone.published, gone.gone = s.published, true
		return gone, ""
	}
	if s.finalIndex != 0 && s.finalIndex <= n {
		s.final = true
		s.durablePendingDLQ = s.finalKind == core.EntryDeadLetter
	}
	if s.completeIndex != 0 && s.completeIndex <= n {
		s.durablePendingDLQ = false
	}
	s.finalIndex, s.finalKind, s.completeIndex = 0, 0, 0
	s.expectRetries = -1
	s.leaseOpen = false
	var survivor *leaseRec
	for i := int(s.leaseCount) - 1; i >= 0; i-- {
		if l := &s.leases[i]; l.index != 0 && l.index <= n {
			survivor = l
			break
		}
	}
	var kept leaseRec
	if survivor != nil {
		kept = *survivor
		s.floorRetries = max(s.floorRetries, kept.retries+1)
		if kept.endIndex > n {
			kept.endIndex = 0
		}
	}
	s.leases = [leaseHistoryMax]leaseRec{}
	s.leaseCount = 0
	if survivor != nil {
		s.pushLease(kept)
		s.leaseOpen = kept.endIndex == 0 && !s.final
	}
	return s, ""
}

// describe renders a state for the visualisation.
func (s lifeState) describe() string {
	phase := "unpublished"
	switch {
	case s.rejected:
		phase = "refused"
	case s.gone:
		phase = "lost"
	case s.final:
		phase = "settled"
	case s.finalIndex != 0:
		phase = "leaving@" + fmt.Sprint(s.finalIndex)
	case s.publishIndex != 0:
		phase = "in log@" + fmt.Sprint(s.publishIndex)
	case s.published:
		phase = "published"
	}
	out := phase
	if s.confirmed {
		out += " confirmed"
	}
	if s.leaseOpen {
		cur := s.leases[s.leaseCount-1]
		out += fmt.Sprintf(" lease{tag %d until %d retries %d}", cur.tag, cur.deadlineMs, cur.retries)
	}
	if s.expectRetries >= 0 {
		out += fmt.Sprintf(" next-retries=%d", s.expectRetries)
	} else if s.floorRetries > 0 {
		out += fmt.Sprintf(" retries>=%d", s.floorRetries)
	}
	return out
}

func (in *lifeInput) describe() string {
	switch in.kind {
	case lifePublish:
		return [...]string{"publish -> unknown", "publish -> ok", "publish -> refused"}[in.outcome]
	case lifeAccept:
		return fmt.Sprintf("append @%d", in.index)
	case lifeConfirm:
		return "node confirms"
	case lifeDeliver:
		mode := ""
		if in.autoAck {
			mode = " auto-ack"
		}
		return fmt.Sprintf("deliver tag %d retries %d lease @%d now %d%s", in.tag, in.retries, in.index, in.nowMs, mode)
	case lifeEntry:
		return fmt.Sprintf("%s @%d (%s) now %d", EntryKindName(uint8(in.entryKind)), in.index, in.trigger, in.nowMs)
	case lifeSettled:
		return "settled " + in.settled
	case lifeRecover:
		return fmt.Sprintf("crash; recovered to @%d", in.index)
	}
	return "?"
}
