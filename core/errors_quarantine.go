package core

import "fmt"

// A quarantined partition (SPEC 7 recovery.on_mismatch): its log failed a
// recovery check, the Node parked it, and every operation on it is refused
// with this error until an operator repairs it. Unlike the sentinels it
// names the partition and the damage, so the message alone tells the
// operator what happened and what to do. 500 and not retryable: retrying
// the same request cannot help before the repair.

// QuarantinedError is the refusal of an operation on quarantined partition
// queue, for reason (what recovery found).
func QuarantinedError(queue QueueID, reason string) *Error {
	return newError(CodeInternal, false, fmt.Sprintf(
		"partition %s is quarantined: %s; repair with POST /admin/api/quarantine/repair or fibrilctl admin quarantine repair",
		queue.String(), reason))
}

// RecoveryError reports the first log entry recovery could not take (an
// entry its preceding state contradicts): Index is where a repair cuts the
// log. It wraps the cause (ErrInconsistentLog, ErrNonContiguousLog,
// ErrEpochWentBack), so errors.Is still sees it.
type RecoveryError struct {
	Index uint64
	Err   error
}

func (e *RecoveryError) Error() string { return e.Err.Error() }
func (e *RecoveryError) Unwrap() error { return e.Err }
