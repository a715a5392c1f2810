package wire

// Malformation tests: every kind of decode error of PROTOCOL.md §2 is produced from
// the golden vectors, and each must be a *DecodeError matching both its sentinel and
// ErrMalformed.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

// trailingOptionalBytes is how many bytes at the end of an encoded body form a
// trailing optional (§2) that a decoder must also accept wholly absent; 0 if none.
func trailingOptionalBytes(body Body) int {
	switch m := body.(type) {
	case Publish:
		return optionalSizeBytes(m.TTLMs.Present, 8)
	case DeclareQueue:
		return optionalSizeBytes(m.DefaultMessageTTLMs.Present, 8)
	case ReconcileResult:
		return 2 * len(m.Entries)
	}
	return 0
}

func optionalSizeBytes(present bool, valueBytes int) int {
	if present {
		return 1 + valueBytes
	}
	return 1
}

// checkMalformed asserts err is a *DecodeError wrapping want.
func checkMalformed(t *testing.T, err, want error) *DecodeError {
	t.Helper()
	if err == nil {
		t.Fatalf("decoded without error, want %v", want)
	}
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v does not match ErrMalformed", err)
	}
	var decodeErr *DecodeError
	if !errors.As(err, &decodeErr) {
		t.Fatalf("err = %T, want *DecodeError", err)
	}
	return decodeErr
}

func TestTruncatedAtEveryOffset(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.name, func(t *testing.T) {
			full, err := DecodeBody(v.op, v.body)
			if err != nil {
				t.Fatalf("full vector: %v", err)
			}
			trailing := trailingOptionalBytes(full)
			for n := range len(v.body) {
				prefix := v.body[:n:n] // no spare capacity: a read past n would panic
				body, err := DecodeBody(v.op, prefix)
				if trailing > 0 && n == len(v.body)-trailing {
					// The trailing optional is wholly absent: valid, and re-encoding
					// writes it back as "absent" (§2).
					if err != nil {
						t.Fatalf("prefix %d (trailing optional absent): %v", n, err)
					}
					if enc := body.AppendTo(nil); !bytes.HasPrefix(enc, prefix) {
						t.Fatalf("prefix %d re-encodes to %x", n, enc)
					}
					continue
				}
				checkMalformed(t, err, ErrTruncated)
			}
		})
	}
}

func TestTruncatedFrame(t *testing.T) {
	for _, v := range loadVectors(t) {
		frame := AppendFrame(nil, v.op, 0, 9, v.body)
		for n := range len(frame) {
			_, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(frame[:n])), PayloadSizeBytesMaxDefault, nil)
			want := io.ErrUnexpectedEOF
			if n == 0 {
				want = io.EOF
			}
			if err != want {
				t.Fatalf("%s: frame cut at %d: err = %v, want %v", v.name, n, err, want)
			}
		}
	}
}

// TestTrailingOptionalsAbsent spells out §2's three exceptions, and that a tag
// without its value is still truncation.
func TestTrailingOptionalsAbsent(t *testing.T) {
	byName := map[string][]byte{}
	for _, v := range loadVectors(t) {
		byName[v.name] = v.body
	}
	publish := byName["publish"]
	m, err := DecodePublish(publish[:len(publish)-9])
	if err != nil || m.TTLMs.Present {
		t.Errorf("PUBLISH without ttl_ms: %+v, %v", m.TTLMs, err)
	}
	_, err = DecodePublish(publish[:len(publish)-8])
	checkMalformed(t, err, ErrTruncated)

	declare := byName["declare"]
	q, err := DecodeDeclareQueue(declare[:len(declare)-9])
	if err != nil || q.DefaultMessageTTLMs.Present {
		t.Errorf("DECLARE_QUEUE without default_message_ttl_ms: %+v, %v", q.DefaultMessageTTLMs, err)
	}

	result := byName["reconcile_result"]
	r, err := DecodeReconcileResult(result[:len(result)-4])
	if err != nil {
		t.Fatalf("RECONCILE_RESULT without code tail: %v", err)
	}
	for i, e := range r.Entries {
		if e.Code != ReasonUnspecified {
			t.Errorf("entry %d: code %v without tail, want unspecified", i, e.Code)
		}
	}
	_, err = DecodeReconcileResult(result[:len(result)-2])
	checkMalformed(t, err, ErrTruncated)
}

func TestTrailingBytesRejected(t *testing.T) {
	for _, v := range loadVectors(t) {
		for _, extra := range []byte{0x00, 0x01, 0xff} {
			body := append(append([]byte(nil), v.body...), extra)
			_, err := DecodeBody(v.op, body)
			decodeErr := checkMalformed(t, err, ErrTrailingBytes)
			if decodeErr.OffsetBytes != len(v.body) {
				t.Errorf("%s: trailing byte reported at %d, want %d", v.name, decodeErr.OffsetBytes, len(v.body))
			}
		}
	}
	_, err := DecodeAuthOk([]byte{0})
	checkMalformed(t, err, ErrTrailingBytes)
}

func TestBadMagicRejected(t *testing.T) {
	for _, v := range loadVectors(t) {
		for i := range 4 {
			body := append([]byte(nil), v.body...)
			body[i] ^= 0x20
			_, err := DecodeBody(v.op, body)
			decodeErr := checkMalformed(t, err, ErrBadMagic)
			if decodeErr.Field != "magic" {
				t.Errorf("%s: field %q, want magic", v.name, decodeErr.Field)
			}
		}
	}
}

// TestDispatchByOpcodeThenMagic: a body sent under another opcode never decodes,
// whatever the overlap of layouts (TOPOLOGY_OK and TOPOLOGY_UPDATE share one).
func TestDispatchByOpcodeThenMagic(t *testing.T) {
	for _, v := range loadVectors(t) {
		for _, op := range ClientOpcodes() {
			if op == OpPing || op == OpPong || op.Magic() == v.op.Magic() {
				continue // PING and PONG ignore their payload (§5.2)
			}
			if _, err := DecodeBody(op, v.body); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s decoded as %s: err = %v", v.name, op, err)
			}
		}
	}
}

// malformedCases flip one byte of a vector. was guards the offsets: it is the byte
// the vector holds there, so a wrong offset fails loudly instead of testing nothing.
var malformedCases = []struct {
	vector string
	offset int
	was    byte
	now    byte
	want   error
	field  string
}{
	{"publish", 14, 0x01, 0x02, ErrBadOptionTag, "group"},
	{"publish", 24, 0x01, 0x02, ErrBadBool, "require_confirm"},
	{"publish", 25, 0x02, 0x05, ErrUnknownContentType, "content_type"},
	{"publish", 25, 0x02, 0xff, ErrUnknownContentType, "content_type"},
	{"publish", 8, 'o', 0xff, ErrInvalidUTF8, "topic"},
	{"publish", 34, 'x', 0xc3, ErrInvalidUTF8, "headers"},
	{"publish", 26, 0x00, 0xff, ErrTruncated, "headers"}, // header count 0xff000001
	{"publish", 50, 0x01, 0x07, ErrBadOptionTag, "partition_key"},
	{"publish", 73, 0x01, 0x02, ErrBadOptionTag, "ttl_ms"},
	{"publish_custom_ct", 20, 'a', 0x80, ErrInvalidUTF8, "content_type"},
	{"publish_delayed", 14, 0x01, 0x02, ErrBadBool, "require_confirm"},
	{"deliver", 59, 0x01, 0x09, ErrUnknownContentType, "content_type"},
	{"deliver", 17, 0x01, 0xfe, ErrBadOptionTag, "group"},
	{"subscribe", 23, 0x00, 0x02, ErrBadBool, "auto_ack"},
	{"subscribe", 24, 0x01, 0x02, ErrBadOptionTag, "consumer_group"},
	{"ack", 14, 0x00, 0x40, ErrTruncated, "tags"}, // tag count 0x40000002
	{"nack", 31, 0x01, 0xff, ErrBadBool, "requeue"},
	{"nack", 32, 0x01, 0x02, ErrBadOptionTag, "not_before"},
	{"nack", 19, 0x00, 0x40, ErrTruncated, "tags"},
	{"assignment", 24, 0x00, 0x10, ErrTruncated, "assigned"},
	{"subscribe_stream", 20, 0x04, 0x05, ErrUnknownEnum, "start"},
	{"subscribe_stream", 37, 'r', 0xc0, ErrInvalidUTF8, "filter"},
	{"declare", 16, 0x02, 0x03, ErrUnknownEnum, "dlq_policy"},
	{"declare", 15, 0x01, 0x02, ErrBadOptionTag, "dlq_policy"},
	{"declare_plexus", 14, 0x01, 0x03, ErrUnknownEnum, "durability"},
	{"hello_ok", 54, 0x01, 0x05, ErrUnknownEnum, "resume_outcome"},
	{"hello", 8, 'p', 0xc0, ErrInvalidUTF8, "client_name"},
	{"hello", 28, 0x01, 0x02, ErrBadOptionTag, "resume"},
	{"reconcile_client", 4, 0x01, 0x02, ErrUnknownEnum, "policy"},
	{"reconcile_client", 27, 0x00, 0x02, ErrBadBool, "sub.auto_ack"},
	{"reconcile_result", 36, 0x01, 0x04, ErrUnknownEnum, "action"},
	{"reconcile_result", 35, 0x00, 0x02, ErrBadOptionTag, "server"},
	{"topology_ok", 34, '1', 0xfe, ErrInvalidUTF8, "endpoint.host"},
	{"topology_ok", 26, 0x00, 0x7f, ErrTruncated, "queue.owner_endpoints"},
	{"topology_ok", 12, 0x00, 0x01, ErrTruncated, "queues"},
	{"topology_req", 10, 0x00, 0x03, ErrBadOptionTag, "group"},
	{"error", 10, 'n', 0xed, ErrInvalidUTF8, "message"},
	{"error", 6, 0x00, 0x01, ErrTruncated, "message"}, // length 0x01000009
	{"redirect", 9, 0x00, 0x00, nil, ""},              // sanity: an unchanged byte decodes
}

func TestMalformedFields(t *testing.T) {
	byName := map[string]vector{}
	for _, v := range loadVectors(t) {
		byName[v.name] = v
	}
	for _, c := range malformedCases {
		v, ok := byName[c.vector]
		if !ok {
			t.Fatalf("no vector %q", c.vector)
		}
		if got := v.body[c.offset]; got != c.was {
			t.Fatalf("%s[%d] = %#x, want %#x: the case's offset is wrong", c.vector, c.offset, got, c.was)
		}
		body := append([]byte(nil), v.body...)
		body[c.offset] = c.now
		t.Run(fmt.Sprintf("%s[%d]=%#x", c.vector, c.offset, c.now), func(t *testing.T) {
			_, err := DecodeBody(v.op, body)
			if c.want == nil {
				if err != nil {
					t.Errorf("unchanged body: %v", err)
				}
				return
			}
			decodeErr := checkMalformed(t, err, c.want)
			if decodeErr.Field != c.field {
				t.Errorf("field %q, want %q (%v)", decodeErr.Field, c.field, err)
			}
			if decodeErr.OffsetBytes > c.offset || decodeErr.Magic != v.op.Magic() {
				t.Errorf("error at %s byte %d", decodeErr.Magic, decodeErr.OffsetBytes)
			}
		})
	}
}

// TestEncodersWriteInvalidValuesForTheDecoderToCatch: encoders are not the gate, so
// tests (and fuzzers) can build bad bodies from structs.
func TestEncodersWriteInvalidValuesForTheDecoderToCatch(t *testing.T) {
	_, err := DecodePublish(Publish{Topic: "t", ContentType: ContentType{Kind: 5}}.AppendTo(nil))
	checkMalformed(t, err, ErrUnknownContentType)
	_, err = DecodePublish(Publish{Topic: "bad\xff"}.AppendTo(nil))
	checkMalformed(t, err, ErrInvalidUTF8)
	_, err = DecodeSubscribeStream(SubscribeStream{Topic: "t", Start: StreamStart{Kind: 9}}.AppendTo(nil))
	checkMalformed(t, err, ErrUnknownEnum)
	_, err = DecodeDeliver(Deliver{Headers: Headers{{"k", "\xc0\x80"}}}.AppendTo(nil))
	checkMalformed(t, err, ErrInvalidUTF8)
}

func TestMalformedErrorMessageNamesField(t *testing.T) {
	_, err := DecodePublish([]byte("FPB1\x00\x00\x00\x05ab"))
	want := "FPB1 topic at byte 4: truncated"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// TestHostileCountsAllocateLittle: a u32 count of 4 billion in a tiny body must fail
// before anything is allocated from it.
func TestHostileCountsAllocateLittle(t *testing.T) {
	hostile := [][]byte{
		[]byte("FAK1\x00\x00\x00\x01t\x00\x00\x00\x00\x00\xff\xff\xff\xff"),
		[]byte("FRR1\xff\xff\xff\xff"),
		[]byte("FTO1\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"),
		[]byte("FRC1\x01\xff\xff\xff\xff"),
	}
	ops := []Opcode{OpAck, OpReconcileResult, OpTopologyOk, OpReconcileClient}
	for i, body := range hostile {
		allocs := testing.AllocsPerRun(10, func() {
			if _, err := DecodeBody(ops[i], body); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s: err = %v", ops[i], err)
			}
		})
		if allocs > 3 { // the *DecodeError, the interface boxing, nothing sized by the count
			t.Errorf("%s: %v allocations", ops[i], allocs)
		}
	}
}
