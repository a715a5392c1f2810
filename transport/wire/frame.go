package wire

// Invariants:
//   - A frame is a 20-byte big-endian header then payload_len bytes (PROTOCOL.md §1.2).
//   - Senders always write version 1 and flags 0. Receivers ignore both, as Fibril and
//     every client do; Header.CheckVersion exists for callers that want strictness.
//   - ReadFrame never allocates more than about twice the bytes actually received, so
//     a header announcing a huge payload costs nothing until the payload arrives.
//   - On ErrFrameTooLarge the stream is left just after the header: it cannot be
//     resynchronised, so the caller answers ERROR 400 with the header's request id and
//     closes (§1.3).

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

const (
	// HeaderSizeBytes is the fixed frame header length.
	HeaderSizeBytes = 20
	// ProtocolVersion is the only version: written in every header and HELLO.
	ProtocolVersion uint16 = 1

	// PayloadSizeBytesMaxDefault is the recommended receive cap of §1.3. Fibril itself
	// has no maximum; this is ours, and callers pass it (or their own) to ReadFrame.
	PayloadSizeBytesMaxDefault uint32 = 64 << 20
	// PayloadSizeBytesMaxInterop is the largest payload every Fibril client can
	// handle: the C# client reads payload_len as a signed 32-bit integer (§1.3).
	PayloadSizeBytesMaxInterop uint32 = math.MaxInt32

	// readChunkBytes is the first payload allocation when the caller's buffer is too
	// small; it then doubles as bytes arrive, bounding memory by what the peer sent.
	readChunkBytes = 64 << 10
)

// Header is the fixed 20-byte frame header.
type Header struct {
	PayloadSizeBytes uint32 // wire: payload_len, excluding the header
	Version          uint16 // 1 when sent, ignored on receipt
	Opcode           Opcode
	Flags            uint32 // 0 when sent, ignored on receipt (reserved)
	RequestID        uint64 // correlation id (§7.1)
}

// CheckVersion returns ErrBadVersion unless h.Version is 1. Fibril never checks this,
// so a broker that wants to serve Fibril clients byte-compatibly need not call it.
func (h Header) CheckVersion() error {
	if h.Version != ProtocolVersion {
		return &DecodeError{Field: "version", OffsetBytes: 4, Err: ErrBadVersion}
	}
	return nil
}

// AppendHeader appends the 20-byte encoding of h to dst.
func AppendHeader(dst []byte, h Header) []byte {
	dst = binary.BigEndian.AppendUint32(dst, h.PayloadSizeBytes)
	dst = binary.BigEndian.AppendUint16(dst, h.Version)
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.Opcode))
	dst = binary.BigEndian.AppendUint32(dst, h.Flags)
	return binary.BigEndian.AppendUint64(dst, h.RequestID)
}

// EncodeHeader returns the 20-byte encoding of h, without allocating.
func EncodeHeader(h Header) [HeaderSizeBytes]byte {
	var out [HeaderSizeBytes]byte
	AppendHeader(out[:0], h)
	return out
}

// DecodeHeader decodes the first 20 bytes of b; bytes after them (the payload) are
// not examined. It fails only when b is shorter than a header.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSizeBytes {
		return Header{}, &DecodeError{Field: headerFieldAt(len(b)), OffsetBytes: len(b), Err: ErrTruncated}
	}
	return Header{
		PayloadSizeBytes: binary.BigEndian.Uint32(b[0:4]),
		Version:          binary.BigEndian.Uint16(b[4:6]),
		Opcode:           Opcode(binary.BigEndian.Uint16(b[6:8])),
		Flags:            binary.BigEndian.Uint32(b[8:12]),
		RequestID:        binary.BigEndian.Uint64(b[12:20]),
	}, nil
}

// headerFieldAt names the header field that covers byte offset.
func headerFieldAt(offset int) string {
	switch {
	case offset < 4:
		return "payload_len"
	case offset < 6:
		return "version"
	case offset < 8:
		return "opcode"
	case offset < 12:
		return "flags"
	}
	return "request_id"
}

// AppendFrame appends a whole frame (version 1) carrying an already-encoded body.
func AppendFrame(dst []byte, op Opcode, flags uint32, requestID uint64, body []byte) []byte {
	if uint64(len(body)) > math.MaxUint32 {
		panic("wire: frame body does not fit in payload_len")
	}
	dst = AppendHeader(dst, Header{
		PayloadSizeBytes: uint32(len(body)),
		Version:          ProtocolVersion,
		Opcode:           op,
		Flags:            flags,
		RequestID:        requestID,
	})
	return append(dst, body...)
}

// AppendBodyFrame appends a whole frame (version 1, flags 0) and encodes body straight
// into dst after the header, so no intermediate body buffer is needed.
func AppendBodyFrame(dst []byte, op Opcode, requestID uint64, body Body) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Version: ProtocolVersion, Opcode: op, RequestID: requestID})
	dst = body.AppendTo(dst)
	payloadSizeBytes := len(dst) - start - HeaderSizeBytes
	if uint64(payloadSizeBytes) > math.MaxUint32 {
		panic("wire: frame body does not fit in payload_len")
	}
	binary.BigEndian.PutUint32(dst[start:start+4], uint32(payloadSizeBytes))
	return dst
}

// ReadFrame reads one frame. The payload is returned in buf's backing array when it
// fits (pass the previous payload back as buf to reuse it), so it is only valid until
// the next call with the same buffer; decoded bodies copy what they keep.
//
// Errors: io.EOF when the stream ends cleanly between frames; io.ErrUnexpectedEOF
// inside a frame; ErrFrameTooLarge (with the decoded header, for its request id) when
// payload_len exceeds maxPayloadBytes; any other read error as is.
func ReadFrame(r *bufio.Reader, maxPayloadBytes uint32, buf []byte) (Header, []byte, error) {
	h, err := readHeader(r, buf)
	if err != nil {
		return Header{}, nil, err
	}
	if h.PayloadSizeBytes > maxPayloadBytes {
		return h, nil, fmt.Errorf("%w: payload_len %d, limit %d (request id %d)",
			ErrFrameTooLarge, h.PayloadSizeBytes, maxPayloadBytes, h.RequestID)
	}
	payload, err := readPayload(r, int(h.PayloadSizeBytes), buf)
	if err != nil {
		return Header{}, nil, err
	}
	return h, payload, nil
}

// readHeader peeks at the header in bufio's own buffer, which costs no allocation. A
// reader smaller than a header (bufio allows 16 bytes) falls back to copying via buf.
func readHeader(r *bufio.Reader, buf []byte) (Header, error) {
	raw, err := r.Peek(HeaderSizeBytes)
	if errors.Is(err, bufio.ErrBufferFull) {
		if cap(buf) < HeaderSizeBytes {
			buf = make([]byte, HeaderSizeBytes)
		}
		raw = buf[:HeaderSizeBytes]
		if _, err = io.ReadFull(r, raw); err != nil {
			return Header{}, err
		}
		return DecodeHeader(raw)
	}
	if err != nil {
		if len(raw) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Header{}, err
	}
	h, _ := DecodeHeader(raw) // cannot fail: raw holds a whole header
	if _, err := r.Discard(HeaderSizeBytes); err != nil {
		return Header{}, err
	}
	return h, nil
}

// readPayload reads sizeBytes into buf when it has room; otherwise it grows a new
// buffer chunk by chunk as the bytes arrive.
func readPayload(r io.Reader, sizeBytes int, buf []byte) ([]byte, error) {
	if cap(buf) >= sizeBytes {
		buf = buf[:sizeBytes]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, unexpectedEOF(err)
		}
		return buf, nil
	}
	grown := make([]byte, 0, min(sizeBytes, readChunkBytes))
	for len(grown) < sizeBytes {
		if len(grown) == cap(grown) {
			next := make([]byte, len(grown), min(sizeBytes, 2*cap(grown)))
			copy(next, grown)
			grown = next
		}
		start := len(grown)
		grown = grown[:cap(grown)]
		if _, err := io.ReadFull(r, grown[start:]); err != nil {
			return nil, unexpectedEOF(err)
		}
	}
	return grown, nil
}

// unexpectedEOF turns a clean EOF inside a frame into io.ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
