package transport

// The TCP (and TLS over TCP) Conn.
//
// Invariants:
//   - Bytes read during the first-bytes sniff are replayed before any socket byte
//     (prefixConn), so the frame codec and the TLS handshake lose nothing.
//   - Close sends FIN after every byte already written (TLS: close_notify first),
//     then drains input for at most closeLingerTimeout / closeDrainBytesMax before
//     closing, so that unread input does not turn our FIN into a reset that would
//     destroy a final ERROR frame in flight to the peer.
//   - After Close, Read and Write return net.ErrClosed.

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// prefixConn replays sniffed bytes before reading from the socket.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// tcpConn implements Conn over a TCP socket, optionally wrapped in TLS.
type tcpConn struct {
	stream    net.Conn    // what frames are read from and written to (raw, prefixed or TLS)
	raw       net.Conn    // the socket itself
	tlsConn   *tls.Conn   // nil for plaintext
	kind      string      // KindTCP or KindTLS
	closed    atomic.Bool // set first thing in Close
	closeOnce sync.Once
}

func newTCPConn(stream, raw net.Conn, tlsConn *tls.Conn) *tcpConn {
	kind := KindTCP
	if tlsConn != nil {
		kind = KindTLS
	}
	return &tcpConn{stream: stream, raw: raw, tlsConn: tlsConn, kind: kind}
}

func (c *tcpConn) Read(b []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	n, err := c.stream.Read(b)
	if c.closed.Load() {
		// Whatever arrived after Close belongs to the drain, not to the owner.
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *tcpConn) Write(b []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.stream.Write(b)
}

func (c *tcpConn) RemoteAddr() net.Addr { return c.raw.RemoteAddr() }
func (c *tcpConn) Kind() string         { return c.kind }
func (c *tcpConn) IsLoopback() bool     { return isLoopbackAddr(c.raw.RemoteAddr()) }

func (c *tcpConn) tlsConnectionState() (tls.ConnectionState, bool) {
	if c.tlsConn == nil {
		return tls.ConnectionState{}, false
	}
	return c.tlsConn.ConnectionState(), true
}

// Close half-closes, unblocks a pending Read, and finishes the close in the
// background after a bounded drain.
func (c *tcpConn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		// Unblock an owner's Read that is parked in the kernel; it then sees closed.
		_ = c.raw.SetReadDeadline(time.Unix(1, 0))
		_ = c.raw.SetWriteDeadline(time.Now().Add(closeLingerTimeout))
		if c.tlsConn != nil {
			_ = c.tlsConn.CloseWrite() // close_notify; does not touch the socket's FIN
		}
		go lingerAndClose(c.raw)
	})
	return nil
}

// lingerAndClose sends FIN, discards input until the peer closes or the linger
// budget is spent, then closes the socket.
func lingerAndClose(raw net.Conn) {
	if cw, ok := raw.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = raw.SetReadDeadline(time.Now().Add(closeLingerTimeout))
	_, _ = io.CopyN(io.Discard, raw, closeDrainBytesMax)
	_ = raw.Close()
}

// setNoDelay disables Nagle: frames are already batched per write by the
// writers (PERFORMANCE-NOTES), so delaying small writes only adds latency.
func setNoDelay(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
}
