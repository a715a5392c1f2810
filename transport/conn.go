package transport

// The two abstractions the broker and the client see: a Conn (one logical wire
// connection: a TCP socket, a TLS session, or the first bidirectional stream of a
// QUIC connection) and a Listener that hands out Conns ready for the frame codec.
//
// Invariants:
//   - A Conn returned by Accept or a Dial function has finished every transport
//     handshake (TLS, QUIC) and, on TCP, the first-bytes sniff; the next byte read is
//     the first byte of the first frame.
//   - Read and Write may run concurrently (one reader goroutine, one writer
//     goroutine); Close may be called from any goroutine, any number of times.
//   - quic-go types never appear in this package's exported API (STYLE §8).

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
)

// DefaultPort is the broker's wire port, for TCP and for QUIC (UDP) alike
// (PROTOCOL §1.1, §1.6). The admin HTTP API uses a different port (8081).
const DefaultPort = 9876

// Conn kinds, as returned by Conn.Kind.
const (
	KindTCP  = "tcp"  // plaintext TCP
	KindTLS  = "tls"  // TLS over TCP
	KindQUIC = "quic" // the first bidirectional stream of a QUIC connection
)

// Conn is one logical wire connection. It hides whether the bytes travel over
// plaintext TCP, TLS or a QUIC stream.
type Conn interface {
	io.Reader
	io.Writer
	// Close ends the logical connection. Bytes already written are still
	// delivered when the transport allows it (a FIN after the data, not a reset).
	Close() error
	RemoteAddr() net.Addr
	// Kind is KindTCP, KindTLS or KindQUIC.
	Kind() string
	// IsLoopback reports whether the peer's address is a loopback address, which
	// the broker uses for the loopback-only default credentials (SPEC §10).
	IsLoopback() bool
}

// Listener hands out Conns that are ready for the frame codec.
type Listener interface {
	// Accept waits for the next ready connection. After Close it returns an error
	// matching net.ErrClosed.
	Accept(ctx context.Context) (Conn, error)
	Addr() net.Addr
	// Close stops accepting and closes connections that were not yet handed out.
	// Connections already returned by Accept are unaffected, as with net.Listener.
	Close() error
}

// tlsStater is implemented by Conns that run over TLS (TCP+TLS and QUIC).
type tlsStater interface {
	tlsConnectionState() (tls.ConnectionState, bool)
}

// TLSState returns the TLS connection state of c (peer certificates for mTLS,
// negotiated version and ALPN), and false for a plaintext connection.
func TLSState(c Conn) (tls.ConnectionState, bool) {
	s, ok := c.(tlsStater)
	if !ok {
		return tls.ConnectionState{}, false
	}
	return s.tlsConnectionState()
}

// WithDefaultPort returns addr with DefaultPort appended when it names no port:
// "localhost" becomes "localhost:9876", "::1" becomes "[::1]:9876", "" becomes
// ":9876".
func WithDefaultPort(addr string) string {
	if addr == "" {
		return ":" + strconv.Itoa(DefaultPort)
	}
	if ip := net.ParseIP(addr); ip != nil {
		return net.JoinHostPort(addr, strconv.Itoa(DefaultPort))
	}
	if len(addr) > 1 && addr[0] == '[' && addr[len(addr)-1] == ']' {
		return addr + ":" + strconv.Itoa(DefaultPort)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		var addrErr *net.AddrError
		if errors.As(err, &addrErr) && addrErr.Err == "missing port in address" {
			return net.JoinHostPort(addr, strconv.Itoa(DefaultPort))
		}
	}
	return addr
}

// IsLoopbackHost reports whether host (no port) is a loopback IP literal or the
// name "localhost", which RFC 6761 reserves for loopback. Other names are not
// resolved: a trust decision must not depend on DNS.
func IsLoopbackHost(host string) bool {
	if host == "localhost" || host == "localhost." {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isLoopbackAddr reports whether a socket address is on the loopback interface.
func isLoopbackAddr(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UDPAddr:
		return a.IP.IsLoopback()
	}
	if addr == nil {
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
