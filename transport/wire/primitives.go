package wire

// Invariants:
//   - All integers are big-endian; there is no padding or alignment (PROTOCOL.md §2).
//   - The decoder never slices or allocates past the input: every length or count is
//     checked against the bytes that remain before anything is made from it, so a
//     hostile u32 count costs at most a proportional allocation, never 4 GiB.
//   - The decoder's error is sticky: after the first failure every read returns the
//     zero value and the first error is the one reported.
//   - Decoded []byte and string values are copies, so a frame buffer can be reused as
//     soon as Decode returns.
//   - Encoders write the values they are given, even invalid enums, so tests can build
//     malformed bodies with them; the decoder is the gate. Only a length that cannot fit
//     in a u32 panics, because no caller can mean it.

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"unicode/utf8"
)

// UUID is 16 raw bytes in RFC 4122 order. The wire treats it as opaque.
type UUID [16]byte

// IsNil reports whether u is the all-zero UUID (which §5.6 rejects as a member id).
func (u UUID) IsNil() bool { return u == UUID{} }

// String gives the canonical 8-4-4-4-12 form.
func (u UUID) String() string {
	var text [36]byte
	hex.Encode(text[0:8], u[0:4])
	text[8] = '-'
	hex.Encode(text[9:13], u[4:6])
	text[13] = '-'
	hex.Encode(text[14:18], u[6:8])
	text[18] = '-'
	hex.Encode(text[19:23], u[8:10])
	text[23] = '-'
	hex.Encode(text[24:36], u[10:16])
	return string(text[:])
}

// Optional is the wire's opt<T>. The zero value is absent. A struct rather than a
// pointer so that optional fields cost no allocation and stay comparable.
type Optional[T any] struct {
	Value   T
	Present bool
}

// Some returns a present Optional holding v.
func Some[T any](v T) Optional[T] { return Optional[T]{Value: v, Present: true} }

// Get returns the value and whether it is present.
func (o Optional[T]) Get() (T, bool) { return o.Value, o.Present }

// Or returns the value if present, else fallback.
func (o Optional[T]) Or(fallback T) T {
	if o.Present {
		return o.Value
	}
	return fallback
}

// KeyValue is one header entry or one stream filter clause.
type KeyValue struct {
	Key   string
	Value string
}

// ---- encoding ----

func appendU8(dst []byte, v uint8) []byte   { return append(dst, v) }
func appendU16(dst []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(dst, v) }
func appendU32(dst []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(dst, v) }
func appendU64(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// appendLen writes a u32 length or count prefix.
func appendLen(dst []byte, n int) []byte {
	if uint64(n) > math.MaxUint32 {
		panic("wire: length does not fit in a u32 prefix")
	}
	return appendU32(dst, uint32(n))
}

func appendStr(dst []byte, s string) []byte {
	dst = appendLen(dst, len(s))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = appendLen(dst, len(b))
	return append(dst, b...)
}

func appendUUID(dst []byte, u UUID) []byte { return append(dst, u[:]...) }

// appendOpt writes an opt<T> tag and, when present, the value.
func appendOpt[T any](dst []byte, o Optional[T], write func([]byte, T) []byte) []byte {
	if !o.Present {
		return append(dst, 0)
	}
	return write(append(dst, 1), o.Value)
}

// appendList writes a list<T>: a u32 count, then each element.
func appendList[T any](dst []byte, items []T, write func([]byte, T) []byte) []byte {
	dst = appendLen(dst, len(items))
	for _, item := range items {
		dst = write(dst, item)
	}
	return dst
}

func appendKeyValue(dst []byte, kv KeyValue) []byte {
	dst = appendStr(dst, kv.Key)
	return appendStr(dst, kv.Value)
}

// ---- decoding ----

// decoder reads one body. It is a value on the caller's stack; methods take a pointer.
type decoder struct {
	b     []byte
	off   int
	magic string // expected magic, for error messages
	err   error
}

// fail records the first error only; later failures are consequences of it.
func (d *decoder) fail(field string, offset int, err error) {
	if d.err == nil {
		d.err = &DecodeError{Magic: d.magic, Field: field, OffsetBytes: offset, Err: err}
	}
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

// atEnd reports a clean end of input. Trailing optionals (§2) are read only when false.
func (d *decoder) atEnd() bool { return d.err == nil && d.off == len(d.b) }

// take returns the next n bytes, aliasing the input, or nil after recording ErrTruncated.
func (d *decoder) take(field string, n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(d.remaining()) {
		d.fail(field, d.off, ErrTruncated)
		return nil
	}
	s := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return s
}

// checkMagic consumes the 4-byte magic and compares it with the expected one.
func (d *decoder) checkMagic() {
	got := d.take("magic", 4)
	if got != nil && string(got) != d.magic {
		d.fail("magic", 0, ErrBadMagic)
	}
}

// finish rejects trailing bytes and returns the first error, if any.
func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("", d.off, ErrTrailingBytes)
	}
	return d.err
}

func (d *decoder) u8(field string) uint8 {
	if s := d.take(field, 1); s != nil {
		return s[0]
	}
	return 0
}

func (d *decoder) u16(field string) uint16 {
	if s := d.take(field, 2); s != nil {
		return binary.BigEndian.Uint16(s)
	}
	return 0
}

func (d *decoder) u32(field string) uint32 {
	if s := d.take(field, 4); s != nil {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}

func (d *decoder) u64(field string) uint64 {
	if s := d.take(field, 8); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

func (d *decoder) boolean(field string) bool {
	start := d.off
	switch v := d.u8(field); {
	case d.err != nil:
		return false
	case v > 1:
		d.fail(field, start, ErrBadBool)
		return false
	default:
		return v == 1
	}
}

// enumU8 reads a closed u8 enum whose valid values are 0..highest.
func (d *decoder) enumU8(field string, highest uint8) uint8 {
	start := d.off
	v := d.u8(field)
	if d.err == nil && v > highest {
		d.fail(field, start, ErrUnknownEnum)
		return 0
	}
	return v
}

// optTag reads an opt<T> tag and reports whether a value follows.
func (d *decoder) optTag(field string) bool {
	start := d.off
	switch v := d.u8(field); {
	case d.err != nil:
		return false
	case v > 1:
		d.fail(field, start, ErrBadOptionTag)
		return false
	default:
		return v == 1
	}
}

// rawBytes reads a u32 length and that many bytes, aliasing the input.
func (d *decoder) rawBytes(field string) []byte {
	start := d.off
	n := d.u32(field)
	if d.err != nil {
		return nil
	}
	s := d.take(field, uint64(n))
	if d.err != nil {
		// Report the field's start, not the byte after the length prefix.
		d.err.(*DecodeError).OffsetBytes = start
	}
	return s
}

// bytes reads a bytes field as a copy; an empty field decodes as nil.
func (d *decoder) bytes(field string) []byte {
	s := d.rawBytes(field)
	if len(s) == 0 {
		return nil
	}
	return append([]byte(nil), s...)
}

func (d *decoder) str(field string) string {
	start := d.off
	s := d.rawBytes(field)
	if d.err != nil {
		return ""
	}
	if !utf8.Valid(s) {
		d.fail(field, start, ErrInvalidUTF8)
		return ""
	}
	return string(s)
}

// strReuse is str, but returns prev itself when the field holds exactly
// prev's bytes: no allocation for a string that repeats frame after frame.
// The bytes are checked as str checks them either way.
func (d *decoder) strReuse(field string, prev string) string {
	start := d.off
	s := d.rawBytes(field)
	if d.err != nil {
		return ""
	}
	if !utf8.Valid(s) {
		d.fail(field, start, ErrInvalidUTF8)
		return ""
	}
	if len(s) > 0 && string(s) == prev {
		return prev
	}
	return string(s)
}

func (d *decoder) uuid(field string) UUID {
	var u UUID
	copy(u[:], d.take(field, 16))
	return u
}

// count reads a u32 list count and checks that count elements of at least
// elementBytesMin bytes each could fit in what remains, so that the caller may
// allocate count elements up front without trusting the peer.
func (d *decoder) count(field string, elementBytesMin int) int {
	start := d.off
	n := d.u32(field)
	if d.err != nil {
		return 0
	}
	if uint64(n)*uint64(elementBytesMin) > uint64(d.remaining()) {
		d.fail(field, start, ErrTruncated)
		return 0
	}
	return int(n)
}

// decodeOpt reads an opt<T> whose value is read by read.
func decodeOpt[T any](d *decoder, field string, read func(*decoder, string) T) Optional[T] {
	if !d.optTag(field) {
		return Optional[T]{}
	}
	v := read(d, field)
	if d.err != nil {
		return Optional[T]{}
	}
	return Some(v)
}

// decodeList reads a list<T>; elementBytesMin is the smallest encoding of one T.
// An empty list decodes as nil.
func decodeList[T any](d *decoder, field string, elementBytesMin int, read func(*decoder, string) T) []T {
	n := d.count(field, elementBytesMin)
	if n == 0 {
		return nil
	}
	items := make([]T, 0, n)
	for range n {
		item := read(d, field)
		if d.err != nil {
			return nil
		}
		items = append(items, item)
	}
	return items
}

// u64List is decodeList of u64 written out (no function value: the
// decoder stays on the stack).
func (d *decoder) u64List(field string) []uint64 {
	n := d.count(field, 8)
	if n == 0 {
		return nil
	}
	items := make([]uint64, 0, n)
	for range n {
		item := d.u64(field)
		if d.err != nil {
			return nil
		}
		items = append(items, item)
	}
	return items
}

func (d *decoder) keyValue(field string) KeyValue {
	key := d.str(field)
	value := d.str(field)
	return KeyValue{Key: key, Value: value}
}

// keyValueBytesMin is the smallest (str, str) pair: two empty strings.
const keyValueBytesMin = 8
