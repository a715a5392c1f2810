package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
)

func TestDecodeHeaderFields(t *testing.T) {
	raw := []byte{
		0x00, 0x00, 0x01, 0x02, // payload_len 258
		0x00, 0x07, // version 7: ignored on receipt, but decoded as is
		0x00, 0xff, // ERROR
		0xde, 0xad, 0xbe, 0xef, // flags
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // request id
		0xaa, // payload byte: DecodeHeader does not look at it
	}
	h, err := DecodeHeader(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := Header{PayloadSizeBytes: 258, Version: 7, Opcode: OpError, Flags: 0xdeadbeef, RequestID: 0x0102030405060708}
	if h != want {
		t.Fatalf("header %+v, want %+v", h, want)
	}
	if enc := EncodeHeader(h); !bytes.Equal(enc[:], raw[:HeaderSizeBytes]) {
		t.Fatalf("EncodeHeader %x", enc)
	}
	if err := h.CheckVersion(); !errors.Is(err, ErrBadVersion) {
		t.Fatalf("CheckVersion: %v", err)
	}
	h.Version = ProtocolVersion
	if err := h.CheckVersion(); err != nil {
		t.Fatalf("CheckVersion: %v", err)
	}
	for n := range HeaderSizeBytes {
		_, err := DecodeHeader(raw[:n])
		checkMalformed(t, err, ErrTruncated)
	}
}

func TestReadFrameIgnoresVersionAndFlags(t *testing.T) {
	frame := AppendHeader(nil, Header{PayloadSizeBytes: 0, Version: 9, Opcode: OpPing, Flags: 5, RequestID: 3})
	h, payload, err := ReadFrame(bufio.NewReader(bytes.NewReader(frame)), 0, nil)
	if err != nil || len(payload) != 0 || h.Version != 9 || h.Flags != 5 {
		t.Fatalf("h=%+v payload=%x err=%v", h, payload, err)
	}
}

func TestReadFrameTooLarge(t *testing.T) {
	const limit = 16
	ok := AppendFrame(nil, OpPublishOk, 0, 1, bytes.Repeat([]byte{1}, limit))
	tooLarge := AppendFrame(nil, OpPublishOk, 0, 42, bytes.Repeat([]byte{1}, limit+1))
	r := bufio.NewReader(bytes.NewReader(append(ok, tooLarge...)))
	if _, payload, err := ReadFrame(r, limit, nil); err != nil || len(payload) != limit {
		t.Fatalf("frame at the limit: %d bytes, %v", len(payload), err)
	}
	h, payload, err := ReadFrame(r, limit, nil)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	if errors.Is(err, ErrMalformed) {
		t.Fatalf("ErrFrameTooLarge must be told apart from malformed bodies: it closes the connection")
	}
	if h.RequestID != 42 || h.PayloadSizeBytes != limit+1 || payload != nil {
		t.Fatalf("header %+v (the broker echoes its request id), payload %x", h, payload)
	}
	// A header alone announcing 4 GiB is refused without reading or allocating.
	huge := AppendHeader(nil, Header{PayloadSizeBytes: 1<<32 - 1, Version: 1, Opcode: OpPublish, RequestID: 7})
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(huge)), PayloadSizeBytesMaxDefault, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("4 GiB frame: %v", err)
	}
}

// TestReadFrameAllocatesForBytesReceived: a header announcing 1 GiB followed by a few
// bytes and EOF must not make ReadFrame allocate the gigabyte.
func TestReadFrameAllocatesForBytesReceived(t *testing.T) {
	frame := AppendHeader(nil, Header{PayloadSizeBytes: 1 << 30, Version: 1, Opcode: OpPublish})
	frame = append(frame, "FPB1 a few bytes"...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(frame)), PayloadSizeBytesMaxInterop, nil)
	runtime.ReadMemStats(&after)
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes for a 16-byte payload", grew)
	}
}

func TestReadFrameLargePayloadGrowsInChunks(t *testing.T) {
	payload := make([]byte, 3*readChunkBytes+123)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	frame := AppendFrame(nil, OpDeliver, 0, 5, payload)
	_, got, err := ReadFrame(bufio.NewReader(bytes.NewReader(frame)), PayloadSizeBytesMaxDefault, make([]byte, 10))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("payload mismatch (%d bytes), err %v", len(got), err)
	}
}

// TestReadFrameTinyBufio: bufio allows a 16-byte buffer, smaller than a header.
func TestReadFrameTinyBufio(t *testing.T) {
	var stream []byte
	for _, v := range loadVectors(t) {
		stream = AppendFrame(stream, v.op, 0, 11, v.body)
	}
	r := bufio.NewReaderSize(bytes.NewReader(stream), 16)
	var buf []byte
	for _, v := range loadVectors(t) {
		h, payload, err := ReadFrame(r, PayloadSizeBytesMaxDefault, buf)
		if err != nil || h.Opcode != v.op || !bytes.Equal(payload, v.body) {
			t.Fatalf("%s: h=%+v err=%v", v.name, h, err)
		}
		buf = payload
	}
	if _, _, err := ReadFrame(r, PayloadSizeBytesMaxDefault, buf); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

// repeatingReader serves the same bytes forever, without allocating.
type repeatingReader struct {
	data []byte
	off  int
}

func (r *repeatingReader) Read(p []byte) (int, error) {
	n := copy(p, r.data[r.off:])
	r.off = (r.off + n) % len(r.data)
	return n, nil
}

func TestReadFrameReusesBufferWithoutAllocating(t *testing.T) {
	frame := AppendFrame(nil, OpDeliver, 0, 3, expectedVectors["deliver"].AppendTo(nil))
	r := bufio.NewReader(&repeatingReader{data: frame})
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		_, payload, err := ReadFrame(r, PayloadSizeBytesMaxDefault, buf)
		if err != nil || &payload[0] != &buf[:1][0] {
			t.Fatalf("err %v, or the payload did not reuse buf", err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ReadFrame allocated %v times per frame", allocs)
	}
}

func TestAppendBodyFrameWithoutAllocating(t *testing.T) {
	publish := expectedVectors["publish"].(Publish)
	var body Body = publish
	dst := make([]byte, 0, 512)
	allocs := testing.AllocsPerRun(100, func() {
		dst = AppendBodyFrame(dst[:0], OpPublish, 1, body)
		dst = publish.AppendTo(dst[:0])
	})
	if allocs != 0 {
		t.Fatalf("encoding allocated %v times", allocs)
	}
}
