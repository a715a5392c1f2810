package core

import (
	"encoding/binary"
	"math"
	"unicode/utf8"
)

// Log entries. A partition's durable state is a deterministic function of its
// ordered entries; every state change goes through exactly one entry and the
// one function that applies it (apply.go). Invariants:
//   - indexes are contiguous from 1, epochs never go back;
//   - an entry is decided by the live partition from its state and the input,
//     and applied without looking at the input or the clock, so replay needs
//     only the entries.

// EntryKind names an entry. Stored on disk: append-only, never renumber.
type EntryKind uint8

const (
	EntryDeclare      EntryKind = 1  // Settings
	EntryGlobalDLQ    EntryKind = 2  // Target (nil clears)
	EntryPublish      EntryKind = 3  // Offset, Body, ExpiresAtMs, AtMs = not_before (0 = ready now)
	EntryLease        EntryKind = 4  // Offset, Tag, AtMs = lease deadline; takes the lowest ready offset
	EntryAutoAck      EntryKind = 5  // Offset, Tag; takes the lowest ready offset and settles it
	EntryAck          EntryKind = 6  // Offset: inflight -> settled
	EntryRequeue      EntryKind = 7  // Offset, Retries, Cause, AtMs = not_before (0 = ready now)
	EntryRelease      EntryKind = 8  // Offset: delayed -> ready
	EntryDeadLetter   EntryKind = 9  // Offset, Cause = reason, AtMs = dead-lettered at, Target
	EntryDiscard      EntryKind = 10 // Offset, Cause = reason: -> settled, no copy
	EntryDeadLettered EntryKind = 11 // Offset: pending dead-letter -> settled

	// Stream partition kinds (docs/streams.md, core/stream): a stream log
	// holds only these three, a queue log never holds them.
	EntryStreamDeclare EntryKind = 12 // Stream: the first entry of a stream partition
	EntryStreamRecord  EntryKind = 13 // Offset, Body, AtMs = publish time
	EntryCursorCommit  EntryKind = 14 // Cursors: durable cursor positions, last commit wins
)

// Stream durability tiers (PROTOCOL 5.14 durability). Stored: append-only.
const (
	TierEphemeral   uint8 = 0
	TierSpeculative uint8 = 1
	TierDurable     uint8 = 2
)

// StreamSettings is what a stream partition was declared with (PROTOCOL
// 5.14). A retention bound of 0 is unbounded.
type StreamSettings struct {
	Tier           uint8
	MaxAgeMs       uint64
	MaxBytes       uint64
	MaxRecords     uint64
	PartitionCount uint32
}

// CursorPos is one durable cursor: the next offset its name will be served.
type CursorPos struct {
	Name string
	Next uint64
}

// RequeueCause says why an inflight message went back (Entry.Cause of a
// Requeue). Append-only.
const (
	CauseNack            uint8 = 1
	CauseLeaseExpired    uint8 = 2
	CauseSubscriptionEnd uint8 = 3
)

// Entry is one log record, stamped (Epoch, Index).
type Entry struct {
	Epoch       uint64
	Index       uint64
	Kind        EntryKind
	Cause       uint8
	Retries     uint32
	Offset      uint64
	Tag         uint64
	AtMs        int64
	ExpiresAtMs int64
	Body        *Body
	Settings    *QueueSettings
	Target      *DLQTarget
	Stream      *StreamSettings // EntryStreamDeclare only
	Cursors     []CursorPos     // EntryCursorCommit only
}

// entryMagic opens every encoded entry; it catches a reader pointed at the
// wrong bytes rather than at a torn record (CRC is the storage layer's job).
const entryMagic = 0xFE

// AppendEntry encodes e after dst. The encoding is deterministic, so equal
// entries give equal bytes.
func AppendEntry(dst []byte, e *Entry) []byte {
	dst = append(dst, entryMagic, byte(e.Kind), e.Cause)
	dst = binary.BigEndian.AppendUint64(dst, e.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, e.Index)
	switch e.Kind {
	case EntryDeclare:
		assertTrue(e.Settings != nil, "declare entry has settings")
		dst = appendSettings(dst, e.Settings)
	case EntryGlobalDLQ:
		dst = appendOptTarget(dst, e.Target)
	case EntryPublish:
		assertTrue(e.Body != nil, "publish entry has a body")
		// An entry carries its payload; a stored body's bytes are the
		// storage's to copy (a dead-letter copy reads them first).
		assertTrue(!e.Body.IsStored(), "a publish entry carries its payload, not a reference")
		dst = binary.BigEndian.AppendUint64(dst, e.Offset)
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.ExpiresAtMs))
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.AtMs))
		dst = appendBody(dst, e.Body)
	case EntryLease, EntryAutoAck:
		dst = binary.BigEndian.AppendUint64(dst, e.Offset)
		dst = binary.BigEndian.AppendUint64(dst, e.Tag)
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.AtMs))
	case EntryRequeue:
		dst = binary.BigEndian.AppendUint64(dst, e.Offset)
		dst = binary.BigEndian.AppendUint32(dst, e.Retries)
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.AtMs))
	case EntryDeadLetter:
		assertTrue(e.Target != nil, "dead-letter entry has a target")
		dst = binary.BigEndian.AppendUint64(dst, e.Offset)
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.AtMs))
		dst = appendOptTarget(dst, e.Target)
	case EntryAck, EntryRelease, EntryDiscard, EntryDeadLettered, EntryPurge:
		dst = binary.BigEndian.AppendUint64(dst, e.Offset)
	case EntryStreamDeclare:
		assertTrue(e.Stream != nil, "stream declare entry has settings")
		dst = AppendStreamSettings(dst, e.Stream)
	case EntryStreamRecord:
		assertTrue(e.Body != nil, "stream record entry has a body")
		assertTrue(!e.Body.IsStored(), "a stream record carries its payload, not a reference")
		dst = binary.BigEndian.AppendUint64(dst, e.Offset)
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.AtMs))
		dst = appendBody(dst, e.Body)
	case EntryCursorCommit:
		// An empty commit is never written: it would say nothing.
		assertTrue(len(e.Cursors) > 0, "cursor commit entry names a cursor")
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(e.Cursors)))
		for _, c := range e.Cursors {
			dst = appendString(dst, c.Name)
			dst = binary.BigEndian.AppendUint64(dst, c.Next)
		}
	default:
		panic("fibril/core invariant violated: encoding an unknown entry kind")
	}
	return dst
}

// DecodeEntry decodes one entry that fills b exactly.
func DecodeEntry(b []byte) (Entry, error) {
	r := reader{b: b}
	var e Entry
	if r.u8() != entryMagic {
		return Entry{}, ErrCorruptEntry
	}
	e.Kind = EntryKind(r.u8())
	e.Cause = r.u8()
	e.Epoch = r.u64()
	e.Index = r.u64()
	switch e.Kind {
	case EntryDeclare:
		s := r.settings()
		e.Settings = &s
	case EntryGlobalDLQ:
		e.Target = r.optTarget()
	case EntryPublish:
		e.Offset = r.u64()
		e.ExpiresAtMs = int64(r.u64())
		e.AtMs = int64(r.u64())
		e.Body = r.body()
	case EntryLease, EntryAutoAck:
		e.Offset = r.u64()
		e.Tag = r.u64()
		e.AtMs = int64(r.u64())
	case EntryRequeue:
		e.Offset = r.u64()
		e.Retries = r.u32()
		e.AtMs = int64(r.u64())
	case EntryDeadLetter:
		e.Offset = r.u64()
		e.AtMs = int64(r.u64())
		e.Target = r.optTarget()
		if e.Target == nil {
			r.bad = true
		}
	case EntryAck, EntryRelease, EntryDiscard, EntryDeadLettered, EntryPurge:
		e.Offset = r.u64()
	case EntryStreamDeclare:
		s := r.streamSettings()
		e.Stream = &s
	case EntryStreamRecord:
		e.Offset = r.u64()
		e.AtMs = int64(r.u64())
		e.Body = r.body()
	case EntryCursorCommit:
		e.Cursors = r.cursors()
	default:
		return Entry{}, ErrCorruptEntry
	}
	if r.bad || len(r.b) != 0 {
		return Entry{}, ErrCorruptEntry
	}
	return e, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

func appendSettings(dst []byte, s *QueueSettings) []byte {
	dst = append(dst, byte(s.DLQ.Kind))
	dst = appendString(dst, s.DLQ.Target.Topic)
	dst = appendString(dst, s.DLQ.Target.Group)
	dst = binary.BigEndian.AppendUint32(dst, s.MaxRetries)
	return binary.BigEndian.AppendUint64(dst, uint64(s.DefaultTTLMs))
}

func appendOptTarget(dst []byte, t *DLQTarget) []byte {
	if t == nil {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	dst = appendString(dst, t.Topic)
	return appendString(dst, t.Group)
}

func appendBody(dst []byte, b *Body) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.PublishedMs))
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.ReceivedMs))
	dst = append(dst, byte(b.ContentType.Kind))
	dst = appendString(dst, b.ContentType.Custom)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b.Headers)))
	for _, h := range b.Headers {
		dst = appendString(dst, h.Key)
		dst = appendString(dst, h.Value)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b.Payload)))
	return append(dst, b.Payload...)
}

// reader decodes big-endian fields; any short read marks it bad and yields
// zeroes, so decoders check bad once at the end.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || len(r.b) < n {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() uint8 {
	b := r.take(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) u32() uint32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func (r *reader) u64() uint64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func (r *reader) str() string {
	n := r.u32()
	if uint64(n) > uint64(len(r.b)) || n > math.MaxInt32 {
		r.bad = true
		return ""
	}
	s := string(r.take(int(n)))
	if !utf8.ValidString(s) {
		r.bad = true
	}
	return s
}

func (r *reader) settings() QueueSettings {
	var s QueueSettings
	s.DLQ.Kind = DLQPolicyKind(r.u8())
	s.DLQ.Target.Topic = r.str()
	s.DLQ.Target.Group = r.str()
	s.MaxRetries = r.u32()
	s.DefaultTTLMs = int64(r.u64())
	if s.DLQ.Kind > DLQCustom {
		r.bad = true
	}
	return s
}

func (r *reader) optTarget() *DLQTarget {
	switch r.u8() {
	case 0:
		return nil
	case 1:
		t := DLQTarget{Topic: r.str(), Group: r.str()}
		return &t
	}
	r.bad = true
	return nil
}

func (r *reader) body() *Body {
	b := &Body{}
	b.PublishedMs = int64(r.u64())
	b.ReceivedMs = int64(r.u64())
	b.ContentType.Kind = ContentKind(r.u8())
	b.ContentType.Custom = r.str()
	if b.ContentType.Kind > ContentCustom {
		r.bad = true
	}
	count := r.u32()
	// Each header takes at least 8 bytes, so a count the remaining bytes
	// cannot hold is corrupt: never allocate from an untrusted count.
	if uint64(count)*8 > uint64(len(r.b)) {
		r.bad = true
		return b
	}
	if count > 0 {
		b.Headers = make([]Header, count)
		for i := range b.Headers {
			b.Headers[i] = Header{Key: r.str(), Value: r.str()}
		}
	}
	n := r.u32()
	if uint64(n) > uint64(len(r.b)) {
		r.bad = true
		return b
	}
	b.Payload = append([]byte(nil), r.take(int(n))...)
	return b
}

// AppendStreamSettings encodes s after dst (entries and stream snapshots).
func AppendStreamSettings(dst []byte, s *StreamSettings) []byte {
	dst = append(dst, s.Tier)
	dst = binary.BigEndian.AppendUint64(dst, s.MaxAgeMs)
	dst = binary.BigEndian.AppendUint64(dst, s.MaxBytes)
	dst = binary.BigEndian.AppendUint64(dst, s.MaxRecords)
	return binary.BigEndian.AppendUint32(dst, s.PartitionCount)
}

// DecodeStreamSettings decodes settings written by AppendStreamSettings at
// the start of b and returns the rest.
func DecodeStreamSettings(b []byte) (StreamSettings, []byte, error) {
	r := reader{b: b}
	s := r.streamSettings()
	if r.bad {
		return StreamSettings{}, nil, ErrCorruptEntry
	}
	return s, r.b, nil
}

func (r *reader) streamSettings() StreamSettings {
	var s StreamSettings
	s.Tier = r.u8()
	s.MaxAgeMs = r.u64()
	s.MaxBytes = r.u64()
	s.MaxRecords = r.u64()
	s.PartitionCount = r.u32()
	if s.Tier > TierDurable || s.PartitionCount == 0 {
		r.bad = true
	}
	return s
}

func (r *reader) cursors() []CursorPos {
	count := r.u32()
	// Each cursor takes at least 12 bytes: never allocate from a count the
	// remaining bytes cannot hold. An empty commit is never written.
	if count == 0 || uint64(count)*12 > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	out := make([]CursorPos, count)
	for i := range out {
		out[i] = CursorPos{Name: r.str(), Next: r.u64()}
	}
	return out
}
