package core

// Ready is the batch of effects of one Step, in contract order:
//  1. Persist: append these entries to the log, in order, after all earlier
//     ones; report durability back with a Persisted input.
//  2. Deliveries and Replies: send now. Anything that promises durability
//     (publish confirms, declare replies, settlements, dead-letter copies)
//     is already gated: it appears only in the Ready of the step that saw its
//     entries durable.
//  3. NextWakeMs: send a Tick no later than this (0 = nothing scheduled).
//
// A Ready and everything it points to is valid until the next Step; the
// driver copies what it keeps.
type Ready struct {
	Persist     []Entry
	Deliveries  []Delivery
	Replies     []Reply
	Settled     []Settlement
	DeadLetters []DeadLetter
	NextWakeMs  int64
}

// Delivery hands one message to one subscription.
type Delivery struct {
	SubID   uint64
	Tag     uint64
	Offset  uint64
	Retries uint32 // shown as fibril.retries when > 0
	Body    *Body
}

// ReplyKind says what a Reply answers. Append-only.
type ReplyKind uint8

const (
	ReplyError        ReplyKind = 0
	ReplyPublished    ReplyKind = 1 // durable; Offset is the message offset
	ReplyDeclared     ReplyKind = 2 // durable
	ReplySubscribed   ReplyKind = 3
	ReplyGlobalDLQ    ReplyKind = 4 // durable
	ReplyUnsubscribed ReplyKind = 5
	ReplyCompleted    ReplyKind = 6 // durable; an operator's Complete (operator.go)
)

// Reply answers the input that carried Ref.
type Reply struct {
	Ref    uint64
	Kind   ReplyKind
	Offset uint64
	Err    *Error // ReplyError only
	Tag    uint64 // ReplyError on a settle: the offending tag
}

// SettleKind says how a message left the queue for good. Append-only.
type SettleKind uint8

const (
	SettledAcked        SettleKind = 1
	SettledDiscarded    SettleKind = 2
	SettledDeadLettered SettleKind = 3
)

// Settlement reports, once durable, that a message is settled for good.
type Settlement struct {
	Offset uint64
	Kind   SettleKind
	Reason DLQReason // discarded or dead-lettered only
}

// DeadLetter asks the driver to publish Body to Target (confirmed) and then
// send DeadLetterDone{Offset}. Body carries the stroma.dlq.* headers.
type DeadLetter struct {
	Offset uint64
	Target DLQTarget
	Reason DLQReason
	Body   *Body
}

func (rd *Ready) reset() {
	for i := range rd.Persist {
		rd.Persist[i] = Entry{} // drop references to bodies
	}
	for i := range rd.Deliveries {
		rd.Deliveries[i].Body = nil
	}
	for i := range rd.DeadLetters {
		rd.DeadLetters[i] = DeadLetter{}
	}
	rd.Persist = rd.Persist[:0]
	rd.Deliveries = rd.Deliveries[:0]
	rd.Replies = rd.Replies[:0]
	rd.Settled = rd.Settled[:0]
	rd.DeadLetters = rd.DeadLetters[:0]
	rd.NextWakeMs = 0
}
