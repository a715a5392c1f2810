package checker

import "github.com/fibril-go/fibril/core"

// EntryKindName names a core.EntryKind for reports.
func EntryKindName(kind uint8) string {
	switch core.EntryKind(kind) {
	case core.EntryDeclare:
		return "declare"
	case core.EntryGlobalDLQ:
		return "global_dlq"
	case core.EntryPublish:
		return "publish"
	case core.EntryLease:
		return "lease"
	case core.EntryAutoAck:
		return "auto_ack"
	case core.EntryAck:
		return "ack"
	case core.EntryRequeue:
		return "requeue"
	case core.EntryRelease:
		return "release"
	case core.EntryDeadLetter:
		return "dead_letter"
	case core.EntryDiscard:
		return "discard"
	case core.EntryDeadLettered:
		return "dead_lettered"
	}
	return "unknown"
}

// reasonName names a dead-letter reason carried in an entry's Cause.
func reasonName(cause uint8) string { return core.DLQReason(cause).String() }
