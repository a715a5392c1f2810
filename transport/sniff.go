package transport

// First-bytes detection of TLS or plaintext on a TCP listener (PROTOCOL §1.4).
//
// Invariants:
//   - At most sniffBytesMax bytes are read, within the sniff timeout; a timeout, or
//     fewer than 2 bytes before EOF, closes the socket silently.
//   - The sniffed bytes are always replayed to whatever reads next (TLS handshake
//     or frame codec).
//   - A plaintext frame on a TLS listener gets exactly one plaintext ERROR 426 frame
//     echoing the request id at bytes 12..20 (0 if fewer than 20 bytes arrived).

import (
	"encoding/binary"
	"errors"
	"io"
	"net"

	"github.com/fibril-go/fibril/transport/wire"
)

// sniffBytesMax is a frame header's length; a ClientHello is always longer, so
// both kinds of first flight fill it (PROTOCOL §1.4).
const sniffBytesMax = wire.HeaderSizeBytes

// firstFlight classifies the first bytes a client sent.
type firstFlight uint8

const (
	flightOther       firstFlight = iota // neither: closed silently on a TLS listener
	flightClientHello                    // 0x16 0x03: a TLS handshake record
	flightFrame                          // 0x00 0x00: a frame whose small length starts with zeros
)

func classifyFirstFlight(head []byte) firstFlight {
	if len(head) < 2 {
		return flightOther
	}
	switch {
	case head[0] == 0x16 && head[1] == 0x03:
		return flightClientHello
	case head[0] == 0x00 && head[1] == 0x00:
		return flightFrame
	}
	return flightOther
}

// errSniffClosed means the connection was closed silently during the sniff.
var errSniffClosed = errors.New("transport: connection closed during first-bytes sniff")

// readFirstFlight reads until sniffBytesMax bytes arrive or the peer closes. The
// caller has set the read deadline. It returns errSniffClosed (the caller closes)
// on a timeout, a read error, or fewer than 2 bytes before EOF.
func readFirstFlight(c net.Conn) ([]byte, error) {
	head := make([]byte, sniffBytesMax)
	n, err := io.ReadFull(c, head)
	switch {
	case err == nil:
		return head, nil
	case errors.Is(err, io.ErrUnexpectedEOF) && n >= 2:
		// The peer closed early but sent enough to classify; replay what came.
		return head[:n], nil
	}
	return nil, errSniffClosed
}

// sniffedRequestID is the u64 at bytes 12..20 of a sniffed frame header, or 0
// when fewer than 20 bytes arrived.
func sniffedRequestID(head []byte) uint64 {
	if len(head) < wire.HeaderSizeBytes {
		return 0
	}
	return binary.BigEndian.Uint64(head[12:20])
}

// tlsRequiredMessage names the fix, as Fibril's guide does (PROTOCOL §6.3).
const tlsRequiredMessage = "TLS required: this broker listener accepts TLS only. " +
	"Enable TLS in the client and trust the broker certificate " +
	"(a CA file, or a SHA-256 fingerprint pin for self-signed material)."

// tlsRequiredFrame is the one plaintext ERROR 426 frame a plaintext client gets
// from a TLS listener.
func tlsRequiredFrame(requestID uint64) []byte {
	body := wire.ErrorBody{Code: wire.CodeTLSRequired, Message: tlsRequiredMessage}
	return wire.AppendBodyFrame(nil, wire.OpError, requestID, body)
}
