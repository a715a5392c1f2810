package transport

// Listener settings, with the defaults PROTOCOL §1.4 and §1.6 call for.
//
// Invariants:
//   - Zero fields mean "use the default"; resolved() never changes the caller's value.
//   - Every per-connection goroutine the listeners start is bounded by
//     HandshakesInflightMax, so a flood of silent clients costs bounded memory.

import (
	"crypto/tls"
	"log/slog"
	"time"
)

const (
	// SniffTimeoutDefault is how long a new TCP connection may take to send its
	// first 20 bytes before it is closed silently (PROTOCOL §1.4).
	SniffTimeoutDefault = 10 * time.Second
	// HandshakeTimeoutDefault bounds the TLS handshake on TCP, and on QUIC the wait
	// for the client's first stream.
	HandshakeTimeoutDefault = 10 * time.Second
	// HandshakesInflightMaxDefault bounds connections between accept and ready
	// (sniffing, TLS handshake, waiting for Accept). Beyond it new connections are
	// closed at once: backpressure, rather than one goroutine per attacker socket.
	HandshakesInflightMaxDefault = 1024

	// QUICKeepAlivePeriodDefault keeps NAT bindings and the idle timer alive between
	// heartbeats; it is below the wire heartbeat (5 s) so QUIC never idles out a
	// connection the protocol still considers alive.
	QUICKeepAlivePeriodDefault = 4 * time.Second
	// QUICMaxIdleTimeoutDefault matches the broker's 3 x heartbeat liveness cut with
	// margin: the wire protocol decides liveness, QUIC only cleans up dead paths.
	QUICMaxIdleTimeoutDefault = 30 * time.Second

	// closeLingerTimeout bounds how long Close keeps draining a socket after sending
	// FIN, so the peer can read our last frames (an ERROR before a close) instead of
	// losing them to a reset caused by unread input.
	closeLingerTimeout = time.Second
	// closeDrainBytesMax bounds what Close reads and discards while lingering.
	closeDrainBytesMax = 256 << 10
)

// ListenConfig holds listener settings. The zero value is valid and uses the
// defaults; ListenTCP and ListenQUIC use the zero value.
type ListenConfig struct {
	// SniffTimeout: see SniffTimeoutDefault. Tests shorten it.
	SniffTimeout time.Duration
	// HandshakeTimeout: see HandshakeTimeoutDefault.
	HandshakeTimeout time.Duration
	// HandshakesInflightMax: see HandshakesInflightMaxDefault.
	HandshakesInflightMax int
	// QUICKeepAlivePeriod and QUICMaxIdleTimeout: see their defaults.
	QUICKeepAlivePeriod time.Duration
	QUICMaxIdleTimeout  time.Duration
	// Logger receives hints (a TLS client on a plaintext listener) and accept
	// errors. Nil means slog.Default().
	Logger *slog.Logger
}

// resolved returns a copy of lc with every zero field set to its default.
func (lc ListenConfig) resolved() ListenConfig {
	if lc.SniffTimeout <= 0 {
		lc.SniffTimeout = SniffTimeoutDefault
	}
	if lc.HandshakeTimeout <= 0 {
		lc.HandshakeTimeout = HandshakeTimeoutDefault
	}
	if lc.HandshakesInflightMax <= 0 {
		lc.HandshakesInflightMax = HandshakesInflightMaxDefault
	}
	if lc.QUICKeepAlivePeriod <= 0 {
		lc.QUICKeepAlivePeriod = QUICKeepAlivePeriodDefault
	}
	if lc.QUICMaxIdleTimeout <= 0 {
		lc.QUICMaxIdleTimeout = QUICMaxIdleTimeoutDefault
	}
	if lc.Logger == nil {
		lc.Logger = slog.Default()
	}
	return lc
}

// ListenTCP listens with the default ListenConfig. tlsConf nil means plaintext.
func ListenTCP(addr string, tlsConf *tls.Config) (Listener, error) {
	return ListenConfig{}.ListenTCP(addr, tlsConf)
}

// ListenQUIC listens with the default ListenConfig. tlsConf is required: QUIC
// always runs TLS 1.3.
func ListenQUIC(addr string, tlsConf *tls.Config) (Listener, error) {
	return ListenConfig{}.ListenQUIC(addr, tlsConf)
}
