package wire

// Invariants:
//   - ErrorCode values are HTTP-like and fixed by Fibril (PROTOCOL.md §6.1); only the
//     numbers are contract, never the messages.
//   - ReasonCode is an open u16 namespace (§7.9): unknown values must be carried
//     through unchanged, so nothing here rejects them.

import "strconv"

// ErrorCode is the u16 code of an FER1 error body (ERROR, HELLO_ERR, AUTH_ERR,
// SUBSCRIBE_ERR).
type ErrorCode uint16

const (
	// CodeUnsupportedVersion is sent only as HELLO_ERR, for HELLO protocol_version != 1.
	CodeUnsupportedVersion ErrorCode = 1
	CodeInvalid            ErrorCode = 400 // malformed, unknown opcode, bad argument
	CodeUnauthorized       ErrorCode = 401
	CodeNotFound           ErrorCode = 404 // stream partition missing
	CodeConflict           ErrorCode = 409 // conflict, or not owner and owner unknown
	CodeTLSRequired        ErrorCode = 426 // plaintext HELLO on a TLS listener
	CodeInternal           ErrorCode = 500
)

// IsRetryable applies the clients' shared rule (§6.2): 409 and every code >= 500 are
// retried; everything else, including 401 and 426, is not.
func (c ErrorCode) IsRetryable() bool { return c == CodeConflict || c >= 500 }

func (c ErrorCode) String() string {
	switch c {
	case CodeUnsupportedVersion:
		return "unsupported_version"
	case CodeInvalid:
		return "invalid"
	case CodeUnauthorized:
		return "unauthorized"
	case CodeNotFound:
		return "not_found"
	case CodeConflict:
		return "conflict"
	case CodeTLSRequired:
		return "tls_required"
	case CodeInternal:
		return "internal"
	}
	return "code(" + strconv.Itoa(int(c)) + ")"
}

// ReasonCode is a typed close reason, shared by RECONCILE_RESULT and
// SUBSCRIPTION_CLOSED (§7.9). Append-only; unknown values are preserved.
type ReasonCode uint16

const (
	ReasonUnspecified         ReasonCode = 0
	ReasonMatched             ReasonCode = 1
	ReasonServerIDChanged     ReasonCode = 2
	ReasonServerRestored      ReasonCode = 3
	ReasonServerMismatch      ReasonCode = 4
	ReasonServerRestoreFailed ReasonCode = 5
	ReasonServerMissing       ReasonCode = 6
	ReasonClientMissing       ReasonCode = 7
	ReasonRecreate            ReasonCode = 8
	ReasonTopicDeleted        ReasonCode = 20
	ReasonOwnerMoved          ReasonCode = 21
	ReasonBrokerShutdown      ReasonCode = 22
	ReasonCohortRemoved       ReasonCode = 23
	ReasonLagged              ReasonCode = 24
	ReasonServerError         ReasonCode = 40
)

func (r ReasonCode) String() string {
	switch r {
	case ReasonUnspecified:
		return "unspecified"
	case ReasonMatched:
		return "matched"
	case ReasonServerIDChanged:
		return "server_id_changed"
	case ReasonServerRestored:
		return "server_restored"
	case ReasonServerMismatch:
		return "server_mismatch"
	case ReasonServerRestoreFailed:
		return "server_restore_failed"
	case ReasonServerMissing:
		return "server_missing"
	case ReasonClientMissing:
		return "client_missing"
	case ReasonRecreate:
		return "recreate"
	case ReasonTopicDeleted:
		return "topic_deleted"
	case ReasonOwnerMoved:
		return "owner_moved"
	case ReasonBrokerShutdown:
		return "broker_shutdown"
	case ReasonCohortRemoved:
		return "cohort_removed"
	case ReasonLagged:
		return "lagged"
	case ReasonServerError:
		return "server_error"
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}
