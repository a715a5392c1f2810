package core

import "errors"

// Protocol outcomes. Each is a sentinel with a stable wire code (PROTOCOL.md
// §6.1), handed back in Ready.Replies; the transport maps Code() onto the
// ERROR frame. Errors from the environment (a failed fsync) never appear here:
// the drivers handle those.

// Error is a protocol outcome with a stable code and a retry hint.
type Error struct {
	code      uint16
	retryable bool
	msg       string
}

func (e *Error) Error() string { return e.msg }

// Code is the wire error code: 400, 401, 404, 409 or 500.
func (e *Error) Code() uint16 { return e.code }

// Retryable says whether the same request may succeed later unchanged.
func (e *Error) Retryable() bool { return e.retryable }

func newError(code uint16, retryable bool, msg string) *Error {
	return &Error{code: code, retryable: retryable, msg: msg}
}

// Wire codes (PROTOCOL.md §6.1). Append-only.
const (
	CodeInvalid      uint16 = 400
	CodeUnauthorized uint16 = 401
	CodeNotFound     uint16 = 404
	CodeConflict     uint16 = 409
	CodeInternal     uint16 = 500
)

var (
	ErrInvalidName           = newError(CodeInvalid, false, "invalid name: use 1-128 bytes of [a-z0-9._-], no leading or trailing '.', no '..'")
	ErrReservedHeader        = newError(CodeInvalid, false, "reserved header: keys starting with 'fibril.' (except 'fibril.client.') or 'stroma.' are set by the broker only")
	ErrPayloadTooLarge       = newError(CodeInvalid, false, "payload too large: see Config.PayloadBytesMax")
	ErrHeadersTooLarge       = newError(CodeInvalid, false, "headers too large: see Config.HeaderCountMax and Config.HeaderBytesMax")
	ErrNotBeforeWithoutRetry = newError(CodeInvalid, false, "nack not_before requires requeue=true")
	ErrBatchTooLarge         = newError(CodeInvalid, false, "too many delivery tags in one settle: see Config.SettleBatchMax")
	ErrDeadLetterLoop        = newError(CodeInvalid, false, "invalid dead-letter target: a queue cannot dead-letter into itself")
	ErrInvalidSettings       = newError(CodeInvalid, false, "invalid queue settings")
	ErrAlreadySubscribed     = newError(CodeConflict, false, "already subscribed")
	ErrUnknownSubscription   = newError(CodeNotFound, false, "unknown subscription")
	ErrTooManySubscriptions  = newError(CodeInternal, true, "too many subscriptions on this partition: see Config.SubscriptionsMax")
	ErrQueueFull             = newError(CodeInternal, true, "queue full: see Config.QueueDepthMax; consume or retry later")
	ErrStorageBehind         = newError(CodeInternal, true, "storage is behind: too many entries await fsync (Config.UnpersistedEntriesMax); retry later")
	ErrStaleTag              = newError(CodeInvalid, false, "stale delivery tag: unknown, already settled, or issued to another subscription")
	ErrAutoAckSubscription   = newError(CodeInvalid, false, "settle on an auto-ack subscription: its deliveries are settled when sent")
	ErrDeadLetterNotPending  = newError(CodeInvalid, false, "dead-letter completion for a message that is not pending dead-lettering")
	ErrTooManyCursors        = newError(CodeInternal, true, "too many durable cursors on this stream partition: see stream.Config.CursorsMax")
	ErrStreamSettings        = newError(CodeInvalid, false, "stream settings differ from the declared ones, or are invalid")
	ErrInvalidStreamStart    = newError(CodeInvalid, false, "invalid stream subscription: unknown start kind, too many filter clauses or a durable name over 255 bytes")
	ErrCohortConflict        = newError(CodeConflict, false, "the queue has another exclusive consumer group: one cohort per queue (PROTOCOL 5.6)")
	ErrCohortFull            = newError(CodeInternal, true, "the exclusive consumer group is full: see cohort.MembersMax")
	ErrCohortPartitions      = newError(CodeInvalid, false, "exclusive consumer groups cover queues of at most 4096 partitions (cohort.PartitionsMax)")
)

// Recovery errors: the drivers cut the log before the first bad record (SPEC §7).
var (
	ErrCorruptEntry     = errors.New("corrupt log entry")
	ErrCorruptSnapshot  = errors.New("corrupt snapshot")
	ErrNonContiguousLog = errors.New("log entries are not contiguous")
	ErrEpochWentBack    = errors.New("log entry epoch went back")
)
