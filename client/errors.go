package client

// Typed errors. Broker replies become *BrokerError; client-local failures are
// sentinels whose messages name the fix (PROTOCOL §6.4, error_guides.json).
//
// Invariants:
//   - A *BrokerError matches errors.Is(err, ErrTLSRequiredByBroker) exactly when its
//     code is 426, and ErrUnauthorized exactly when it is 401.
//   - Connection failures wrap ErrConnectionLost together with their cause, so both
//     errors.Is(err, ErrConnectionLost) and errors.Is(err, ErrHeartbeatTimeout) hold.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/wire"
)

// Error codes carried by *BrokerError (PROTOCOL §6.1).
const (
	CodeInvalid      = uint16(wire.CodeInvalid)
	CodeUnauthorized = uint16(wire.CodeUnauthorized)
	CodeNotFound     = uint16(wire.CodeNotFound)
	CodeConflict     = uint16(wire.CodeConflict)
	CodeTLSRequired  = uint16(wire.CodeTLSRequired)
	CodeInternal     = uint16(wire.CodeInternal)
)

// BrokerError is an error the broker sent (ERROR, HELLO_ERR, AUTH_ERR or
// SUBSCRIBE_ERR).
type BrokerError struct {
	Code    uint16
	Message string
	Opcode  string // the frame that carried it, e.g. "AUTH_ERR"
}

func (e *BrokerError) Error() string {
	return fmt.Sprintf("fibril broker error %d (%s): %s", e.Code, e.Opcode, e.Message)
}

// Is lets errors.Is match the sentinels that stand for a broker code.
func (e *BrokerError) Is(target error) bool {
	switch target {
	case ErrTLSRequiredByBroker:
		return e.Code == CodeTLSRequired
	case ErrUnauthorized:
		return e.Code == CodeUnauthorized
	}
	return false
}

func brokerError(op wire.Opcode, body wire.ErrorBody) *BrokerError {
	return &BrokerError{Code: uint16(body.Code), Message: body.Message, Opcode: op.String()}
}

var (
	// ErrTLSRequiredByBroker: the broker's listener accepts TLS only and answered
	// the plaintext HELLO with ERROR 426. Set ClientOptions.TLS.
	ErrTLSRequiredByBroker = errors.New("the broker requires TLS: set ClientOptions.TLS " +
		"(a CA file or a fingerprint pin for self-signed material)")
	// ErrTLSNotSupportedByBroker: the TLS handshake ended early, which is how a
	// plaintext listener answers. Connect without TLS or enable TLS on the broker.
	ErrTLSNotSupportedByBroker = errors.New("the broker listener is probably plaintext: " +
		"the TLS handshake ended early; use Transport \"tcp\" without TLS, or enable TLS on the broker")
	// ErrUnauthorized matches a 401 from the broker.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrComplianceMismatch: HELLO_OK carried another compliance marker than the
	// protocol constant; every Fibril client refuses such a broker (§3.2).
	ErrComplianceMismatch = errors.New("compliance marker mismatch")
	// ErrProtocol: the broker sent something the protocol does not allow here.
	ErrProtocol = errors.New("protocol violation")
	// ErrConnectionRefused carries the connection_refused guide.
	ErrConnectionRefused = errors.New("connection refused: no Fibril broker is listening there. " +
		"Clients connect to the broker port (wire protocol, default 9876), " +
		"not to the admin HTTP port (default 8081)")
	// ErrHeartbeatTimeout carries the heartbeat_timeout guide.
	ErrHeartbeatTimeout = errors.New("heartbeat timeout: nothing received from the broker for " +
		"3 heartbeat intervals, most likely a network stall or an overloaded broker; " +
		"the client will reconnect before the next operation unless auto-reconnect is disabled")
	// ErrConnectionLost: the connection ended; in-flight operations fail with it
	// and are never replayed.
	ErrConnectionLost = errors.New("connection to the broker lost")
	// ErrClientClosed: the Client was closed.
	ErrClientClosed = errors.New("client closed")
	// ErrReservedHeader: user code may not set fibril.* (except fibril.client.*)
	// or stroma.* headers (§7.12).
	ErrReservedHeader = errors.New("reserved header")
	// ErrInvalidName: topic and group names are 1-128 bytes of [a-z0-9._-], with no
	// leading or trailing '.' and no "..".
	ErrInvalidName = errors.New("invalid name")
	// ErrInvalidArgument: a bad option value (zero TTL, empty message, ...).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrMessageTooLarge: the encoded frame exceeds the protocol's size cap.
	ErrMessageTooLarge = errors.New("message too large")
	// ErrStaleDelivery: the delivery came over a connection that has ended; its tag
	// is dead, nothing was sent, and the broker will redeliver the message.
	ErrStaleDelivery = errors.New("stale delivery: its connection has ended; the broker will redeliver it")
	// ErrAlreadySettled: the delivery was already completed, retried or failed.
	ErrAlreadySettled = errors.New("delivery already settled")
	// ErrAutoAck: deliveries of an auto-ack subscription are settled by the broker.
	ErrAutoAck = errors.New("delivery belongs to an auto-ack subscription; the broker settled it")
	// ErrSubscriptionClosed: the subscription was closed by the application.
	ErrSubscriptionClosed = errors.New("subscription closed")
	// ErrStreamSettlement: Retry, RetryAfter and Fail on a stream delivery. A
	// stream has no redelivery or dead-lettering: Ack commits a durable cursor,
	// and not acking leaves the cursor where it is.
	ErrStreamSettlement = errors.New("stream deliveries are settled only by Ack: streams have no retry or dead-letter path")
	// ErrStreamNotFound matches a *StreamNotFoundError.
	ErrStreamNotFound = errors.New("stream not found: declare it first with DeclarePlexus")
	// ErrCohortConflict matches a *CohortError for SUBSCRIBE_ERR 409.
	ErrCohortConflict = errors.New("exclusive subscribe conflict: the queue has another cohort id " +
		"(one cohort per queue: use a separate group for an unrelated consumer set), " +
		"or this connection has another member id, or the partition is already subscribed on it")
	// ErrCohortInvalid matches a *CohortError for SUBSCRIBE_ERR 400.
	ErrCohortInvalid = errors.New("exclusive subscribe refused as invalid: a nil member id, a plexus stream, " +
		"or a broker without exclusive consumer groups")
)

// CohortError: an exclusive SUBSCRIBE (one with a consumer group) answered
// SUBSCRIBE_ERR 409 or 400 (PROTOCOL §5.6 checks 2-5, §6.1). errors.Is matches
// ErrCohortConflict for 409 and ErrCohortInvalid for 400; errors.As also finds
// the *BrokerError, whose message says which check failed. Neither is
// retryable (IsRetryable).
type CohortError struct {
	Topic         string
	Group         string // "" is the default namespace
	Partition     uint32
	ConsumerGroup string
	// MemberID is the member id the SUBSCRIBE carried; the nil UUID when it
	// carried none (the first exclusive subscribe of the client).
	MemberID UUID
	Broker   *BrokerError
}

func (e *CohortError) Error() string {
	member := "none"
	if !e.MemberID.IsNil() {
		member = e.MemberID.String()
	}
	return fmt.Sprintf("exclusive subscribe to %s partition %d (cohort %q, member id %s): %v",
		e.Topic, e.Partition, e.ConsumerGroup, member, e.Broker)
}

func (e *CohortError) Is(target error) bool {
	switch target {
	case ErrCohortConflict:
		return e.Broker.Code == CodeConflict
	case ErrCohortInvalid:
		return e.Broker.Code == CodeInvalid
	}
	return false
}

func (e *CohortError) Unwrap() error { return e.Broker }

// StreamNotFoundError: SUBSCRIBE_STREAM answered SUBSCRIBE_ERR 404, the stream
// (or the partition) does not exist (PROTOCOL §5.11). errors.Is matches
// ErrStreamNotFound; errors.As also finds the *BrokerError.
type StreamNotFoundError struct {
	Topic     string
	Partition uint32
	Broker    *BrokerError
}

func (e *StreamNotFoundError) Error() string {
	return fmt.Sprintf("stream %s partition %d not found (declare it first with DeclarePlexus): %v", e.Topic, e.Partition, e.Broker)
}

func (e *StreamNotFoundError) Is(target error) bool { return target == ErrStreamNotFound }

func (e *StreamNotFoundError) Unwrap() error { return e.Broker }

// CertificateError is the transport's untrusted-certificate error: its message
// says how to trust the broker (CA file or fingerprint pin).
type CertificateError = transport.CertificateError

// ReservedHeaderError names the refused header key.
type ReservedHeaderError struct{ Key string }

func (e *ReservedHeaderError) Error() string {
	return fmt.Sprintf("reserved header %q: fibril.* (except fibril.client.*) and stroma.* are set by the broker", e.Key)
}

func (e *ReservedHeaderError) Is(target error) bool { return target == ErrReservedHeader }

// RedirectError: the broker redirected the request more often than MaxRedirects
// allows, or redirected a request this client does not follow (subscribe). It is
// retryable.
type RedirectError struct {
	Topic     string
	Partition uint32
	Owners    []string // host:port, in priority order
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("broker redirected %s/%d to %v", e.Topic, e.Partition, e.Owners)
}

// SubscriptionClosedError is the CloseReason of a subscription the broker ended
// with SUBSCRIPTION_CLOSED (§5.24, §7.9).
type SubscriptionClosedError struct {
	SubID   uint64
	Code    ReasonCode
	Message string
}

func (e *SubscriptionClosedError) Error() string {
	return fmt.Sprintf("subscription %d closed by the broker: %s (%d): %s", e.SubID, e.Code, uint16(e.Code), e.Message)
}

// IsRetryable reports whether repeating the operation may succeed: connection
// failures, redirects and broker codes >= 500. 400, 401, 404, 409 and 426 are
// not, nor are local validation, TLS trust and compliance errors.
//
// PROTOCOL §6.2 has Fibril's clients also retry 409 (a not-owner reply in a
// cluster); this client follows its brief and does not, because on a standalone
// broker 409 means a real conflict ("already subscribed", cohort).
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var brokerErr *BrokerError
	if errors.As(err, &brokerErr) {
		return brokerErr.Code >= CodeInternal
	}
	var redirectErr *RedirectError
	if errors.As(err, &redirectErr) {
		return true
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.Is(err, ErrClientClosed), errors.Is(err, ErrStaleDelivery),
		errors.Is(err, ErrComplianceMismatch), errors.Is(err, ErrTLSNotSupportedByBroker),
		errors.Is(err, ErrProtocol):
		return false
	case errors.Is(err, ErrConnectionLost), errors.Is(err, ErrConnectionRefused),
		errors.Is(err, ErrHeartbeatTimeout):
		return true
	}
	var certErr *CertificateError
	if errors.As(err, &certErr) {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
