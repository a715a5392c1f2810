package transport

// The QUIC mapping (PROTOCOL §1.6): one QUIC connection carries one logical wire
// connection on the first bidirectional stream the client opens.
//
// Invariants:
//   - ALPN is exactly "fibril/1" and TLS is 1.3; a client offering another ALPN
//     fails the TLS handshake. 0-RTT is off (publishes are not idempotent).
//   - A client may open one bidirectional stream and no unidirectional stream
//     (MaxIncomingStreams 1): further streams are a negotiated extension we do not
//     offer yet. The server opens none.
//   - Closing the stream or the connection is a disconnect; Close sends FIN, waits
//     (bounded) for the peer to close so queued data is not cut off by
//     CONNECTION_CLOSE, then closes the connection.
//   - quic-go stays behind this file: nothing exported mentions it.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

// ALPN is the application protocol both QUIC ends must offer.
const ALPN = "fibril/1"

// QUIC application error codes carried by CONNECTION_CLOSE and stream cancels.
const (
	quicCodeClosed   quic.ApplicationErrorCode = 0 // orderly disconnect
	quicCodeNoStream quic.ApplicationErrorCode = 1 // no stream opened within the handshake timeout
	quicCodeShutdown quic.ApplicationErrorCode = 2 // the listener closed before Accept
)

func quicConfig(cfg ListenConfig, server bool) *quic.Config {
	conf := &quic.Config{
		KeepAlivePeriod:       cfg.QUICKeepAlivePeriod,
		MaxIdleTimeout:        cfg.QUICMaxIdleTimeout,
		HandshakeIdleTimeout:  cfg.HandshakeTimeout / 2, // quic-go aborts after twice this
		MaxIncomingUniStreams: -1,
		Allow0RTT:             false,
	}
	if server {
		conf.MaxIncomingStreams = 1
	} else {
		conf.MaxIncomingStreams = -1
	}
	return conf
}

type quicListener struct {
	ln  *quic.Listener
	cfg ListenConfig

	handoff
}

// ListenQUIC listens for Fibril wire connections over QUIC on UDP. tlsConf is
// required (its NextProtos and MinVersion are overridden on a copy).
func (lc ListenConfig) ListenQUIC(addr string, tlsConf *tls.Config) (Listener, error) {
	if tlsConf == nil {
		return nil, errors.New("transport: listen quic: QUIC needs TLS material (use transport/certs)")
	}
	cfg := lc.resolved()
	conf := tlsConf.Clone()
	conf.NextProtos = []string{ALPN}
	conf.MinVersion = tls.VersionTLS13
	ln, err := quic.ListenAddr(WithDefaultPort(addr), conf, quicConfig(cfg, true))
	if err != nil {
		return nil, fmt.Errorf("transport: listen quic %s: %w", addr, err)
	}
	l := &quicListener{
		ln:      ln,
		cfg:     cfg,
		handoff: newHandoff("quic", cfg.HandshakesInflightMax),
	}
	go l.acceptLoop()
	return l, nil
}

func (l *quicListener) Addr() net.Addr { return l.ln.Addr() }

func (l *quicListener) Accept(ctx context.Context) (Conn, error) { return l.accept(ctx) }

func (l *quicListener) Close() error { return l.close(l.ln.Close) }

func (l *quicListener) acceptLoop() {
	defer close(l.done)
	for {
		qc, err := l.ln.Accept(context.Background())
		if err != nil {
			// quic-go's Accept fails only once the listener is closed.
			l.acceptErr = err
			return
		}
		select {
		case l.slots <- struct{}{}:
		default:
			l.cfg.Logger.Warn("transport: too many QUIC connections waiting for their stream; closing new connection",
				"remote", qc.RemoteAddr().String(), "handshakes_inflight_max", l.cfg.HandshakesInflightMax)
			_ = qc.CloseWithError(quicCodeShutdown, "busy")
			continue
		}
		l.handlers.Add(1)
		go l.handle(qc)
	}
}

// handle waits for the client's first stream off the accept loop.
func (l *quicListener) handle(qc *quic.Conn) {
	defer l.handlers.Done()
	defer func() { <-l.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.HandshakeTimeout)
	defer cancel()
	go func() {
		select {
		case <-l.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	// quic-go reports a stream once its first byte arrives; Fibril clients send
	// HELLO at once, so this is quick for real clients.
	stream, err := qc.AcceptStream(ctx)
	if err != nil {
		l.cfg.Logger.Debug("transport: QUIC client opened no stream; closing",
			"remote", qc.RemoteAddr().String(), "err", err)
		_ = qc.CloseWithError(quicCodeNoStream, "no stream opened")
		return
	}
	conn := newQUICConn(qc, stream)
	select {
	case l.ready <- conn:
	case <-l.closed:
		_ = qc.CloseWithError(quicCodeShutdown, "listener closed")
	}
}

// DialQUIC connects over QUIC and opens the first bidirectional stream. tlsConf
// is required; ALPN and TLS 1.3 are set on a copy. An address without a port
// gets DefaultPort.
func DialQUIC(ctx context.Context, addr string, tlsConf *tls.Config) (Conn, error) {
	if tlsConf == nil {
		return nil, errors.New("transport: dial quic: QUIC needs a TLS config (use transport/certs.ClientTLSConfig)")
	}
	addr = WithDefaultPort(addr)
	conf := clientTLSConfig(tlsConf, addr, true)
	qc, err := quic.DialAddr(ctx, addr, conf, quicConfig(ListenConfig{}.resolved(), false))
	if err != nil {
		if isCertificateFailure(err) {
			return nil, &CertificateError{Addr: addr, Err: err}
		}
		return nil, fmt.Errorf("transport: dial quic %s: %w", addr, err)
	}
	stream, err := qc.OpenStreamSync(ctx)
	if err != nil {
		_ = qc.CloseWithError(quicCodeClosed, "")
		return nil, fmt.Errorf("transport: open quic stream to %s: %w", addr, err)
	}
	return newQUICConn(qc, stream), nil
}

// quicConn is a Conn over the first bidirectional stream of a QUIC connection.
type quicConn struct {
	conn      *quic.Conn
	stream    *quic.Stream
	sawEOF    atomic.Bool // the peer finished its side: nothing of ours is left to protect
	closed    atomic.Bool
	closeOnce sync.Once
}

func newQUICConn(conn *quic.Conn, stream *quic.Stream) *quicConn {
	return &quicConn{conn: conn, stream: stream}
}

func (c *quicConn) Read(b []byte) (int, error) {
	n, err := c.stream.Read(b)
	if err == nil {
		return n, nil
	}
	if c.closed.Load() {
		return n, net.ErrClosed
	}
	if errors.Is(err, io.EOF) {
		c.sawEOF.Store(true)
		return n, io.EOF
	}
	// An orderly close by the peer reads as a clean end of stream.
	var appErr *quic.ApplicationError
	if errors.As(err, &appErr) && appErr.Remote && appErr.ErrorCode == quicCodeClosed {
		c.sawEOF.Store(true)
		return n, io.EOF
	}
	return n, err
}

func (c *quicConn) Write(b []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.stream.Write(b)
}

func (c *quicConn) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }
func (c *quicConn) Kind() string         { return KindQUIC }
func (c *quicConn) IsLoopback() bool     { return isLoopbackAddr(c.conn.RemoteAddr()) }

func (c *quicConn) tlsConnectionState() (tls.ConnectionState, bool) {
	return c.conn.ConnectionState().TLS, true
}

// Close finishes our side of the stream and closes the connection once the peer
// has closed too, or after closeLingerTimeout.
func (c *quicConn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		_ = c.stream.Close() // FIN after the queued data
		c.stream.CancelRead(quic.StreamErrorCode(quicCodeClosed))
		if c.sawEOF.Load() {
			_ = c.conn.CloseWithError(quicCodeClosed, "")
			return
		}
		go func() {
			timer := time.NewTimer(closeLingerTimeout)
			defer timer.Stop()
			select {
			case <-c.conn.Context().Done():
			case <-timer.C:
			}
			_ = c.conn.CloseWithError(quicCodeClosed, "")
		}()
	})
	return nil
}
