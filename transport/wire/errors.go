package wire

// Invariants:
//   - Every body or header decode failure is a *DecodeError that wraps exactly one of
//     the sentinels below, so callers classify with errors.Is and still print the field.
//   - errors.Is(err, ErrMalformed) holds for every *DecodeError: that is the broker's cue
//     to answer ERROR 400 "malformed frame: <err>" (PROTOCOL.md §2, §6.1).
//   - ErrFrameTooLarge and ErrUnknownOpcode are deliberately not ErrMalformed: the first
//     must close the connection (§1.3), the second gets its own guide message (§4.1).

import (
	"errors"
	"fmt"
)

// Sentinel errors. Decode errors arrive wrapped in *DecodeError; match them with errors.Is.
var (
	// ErrMalformed matches every *DecodeError (see DecodeError.Is).
	ErrMalformed = errors.New("malformed frame")

	ErrTruncated          = errors.New("truncated")
	ErrTrailingBytes      = errors.New("trailing bytes after the last field")
	ErrBadMagic           = errors.New("wrong magic for the opcode")
	ErrInvalidUTF8        = errors.New("str is not valid UTF-8")
	ErrBadBool            = errors.New("bool is neither 0 nor 1")
	ErrBadOptionTag       = errors.New("opt tag is neither 0 nor 1")
	ErrUnknownContentType = errors.New("unknown content_type kind")
	// ErrUnknownEnum covers the closed u8 enums other than content_type: stream_start
	// and dlq_policy kinds (which decide the layout that follows) and the value enums
	// resume_outcome, reconcile policy and action, and plexus durability.
	ErrUnknownEnum = errors.New("unknown enum value")

	// ErrBadVersion is returned by Header.CheckVersion only. Fibril and its clients
	// ignore the header version on receipt (§1.2), so the frame readers do not check it.
	ErrBadVersion = errors.New("frame version is not 1")
	// ErrFrameTooLarge: a header announced more payload than the reader's limit (§1.3).
	ErrFrameTooLarge = errors.New("frame payload exceeds the size limit")
	// ErrUnknownOpcode: DecodeBody was asked for an opcode with no client-protocol body.
	ErrUnknownOpcode = errors.New("unknown opcode")
)

// DecodeError says where a frame failed to decode. Err is one of the sentinels above.
type DecodeError struct {
	// Magic is the expected body magic ("FPB1"), or "" for the frame header.
	Magic string
	// Field is the wire name of the field being read ("topic", "ttl_ms"), or "" when
	// the failure is after the last field (trailing bytes).
	Field string
	// OffsetBytes is the offset into the payload (or header) where the field starts.
	OffsetBytes int
	Err         error
}

func (e *DecodeError) Error() string {
	where := e.Magic
	if where == "" {
		where = "frame header"
	}
	if e.Field == "" {
		return fmt.Sprintf("%s at byte %d: %v", where, e.OffsetBytes, e.Err)
	}
	return fmt.Sprintf("%s %s at byte %d: %v", where, e.Field, e.OffsetBytes, e.Err)
}

// Unwrap exposes the sentinel, so errors.Is(err, ErrTruncated) works.
func (e *DecodeError) Unwrap() error { return e.Err }

// Is makes every decode error match ErrMalformed as well as its own sentinel.
func (e *DecodeError) Is(target error) bool { return target == ErrMalformed }
