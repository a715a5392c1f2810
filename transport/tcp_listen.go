package transport

// The TCP listener: accept loop, then per-connection sniff and TLS handshake.
//
// Invariants:
//   - The accept loop never reads from a socket: each connection's sniff and TLS
//     handshake run in their own goroutine, so one slow client cannot delay others.
//   - At most HandshakesInflightMax connections are between accept and Accept; a
//     connection over that bound is closed at once (and logged).
//   - Every accepted socket is either handed out exactly once or closed.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// acceptRetryDelayMax caps the backoff after a transient accept error (EMFILE).
const acceptRetryDelayMax = time.Second

type tcpListener struct {
	ln      net.Listener
	tlsConf *tls.Config // nil: plaintext listener
	cfg     ListenConfig

	handoff
}

// ListenTCP listens for Fibril wire connections on TCP. tlsConf nil means a
// plaintext listener. Every connection is sniffed per PROTOCOL §1.4 before it is
// handed out.
func (lc ListenConfig) ListenTCP(addr string, tlsConf *tls.Config) (Listener, error) {
	cfg := lc.resolved()
	ln, err := net.Listen("tcp", WithDefaultPort(addr))
	if err != nil {
		return nil, fmt.Errorf("transport: listen tcp %s: %w", addr, err)
	}
	if tlsConf != nil {
		tlsConf = tlsConf.Clone()
		if tlsConf.MinVersion < tls.VersionTLS12 {
			tlsConf.MinVersion = tls.VersionTLS12 // Fibril clients require 1.2+ (§1.1)
		}
	}
	l := &tcpListener{
		ln:      ln,
		tlsConf: tlsConf,
		cfg:     cfg,
		handoff: newHandoff("tcp", cfg.HandshakesInflightMax),
	}
	go l.acceptLoop()
	return l, nil
}

func (l *tcpListener) Addr() net.Addr { return l.ln.Addr() }

func (l *tcpListener) Accept(ctx context.Context) (Conn, error) { return l.accept(ctx) }

// Close stops the accept loop and waits for the per-connection handlers, which
// close any connection not yet handed out.
func (l *tcpListener) Close() error { return l.close(l.ln.Close) }

func (l *tcpListener) acceptLoop() {
	defer close(l.done)
	retryDelay := 5 * time.Millisecond
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				l.acceptErr = err
				return
			}
			// Transient (out of file descriptors, aborted handshake): back off and
			// retry rather than stop serving.
			l.cfg.Logger.Warn("transport: tcp accept failed; retrying", "err", err, "retry_in", retryDelay)
			select {
			case <-time.After(retryDelay):
			case <-l.closed:
				return
			}
			retryDelay = min(2*retryDelay, acceptRetryDelayMax)
			continue
		}
		retryDelay = 5 * time.Millisecond
		select {
		case l.slots <- struct{}{}:
		default:
			l.cfg.Logger.Warn("transport: too many connections in handshake; closing new connection",
				"remote", nc.RemoteAddr().String(), "handshakes_inflight_max", l.cfg.HandshakesInflightMax)
			_ = nc.Close()
			continue
		}
		l.handlers.Add(1)
		go l.handle(nc)
	}
}

// handle prepares one connection off the accept loop and hands it to Accept.
func (l *tcpListener) handle(nc net.Conn) {
	defer l.handlers.Done()
	defer func() { <-l.slots }()
	setNoDelay(nc)
	// Close must not wait out a 10 s sniff or handshake: it poisons the socket's
	// deadline, which ends the read in progress.
	stopAbort := abortOnClose(l.closed, nc)
	conn := l.prepare(nc)
	if !stopAbort() {
		if conn != nil {
			_ = conn.Close()
		}
		return
	}
	if conn == nil {
		return
	}
	select {
	case l.ready <- conn:
	case <-l.closed:
		_ = conn.Close()
	}
}

// prepare sniffs the first bytes and returns a ready Conn, or nil after closing
// the socket.
func (l *tcpListener) prepare(nc net.Conn) Conn {
	log := l.cfg.Logger.With("remote", nc.RemoteAddr().String())
	_ = nc.SetReadDeadline(time.Now().Add(l.cfg.SniffTimeout))
	head, err := readFirstFlight(nc)
	if err != nil {
		log.Debug("transport: closing connection silently during sniff")
		_ = nc.Close()
		return nil
	}
	flight := classifyFirstFlight(head)
	replay := &prefixConn{Conn: nc, prefix: head}

	if l.tlsConf == nil {
		if flight == flightClientHello {
			log.Info("transport: a TLS ClientHello reached the plaintext listener; closing. " +
				"Enable TLS on the broker (tls.enabled) or connect without TLS.")
			go lingerAndClose(nc)
			return nil
		}
		_ = nc.SetReadDeadline(time.Time{})
		return newTCPConn(replay, nc, nil)
	}

	switch flight {
	case flightFrame:
		log.Info("transport: plaintext client on the TLS listener; answered ERROR 426")
		_ = nc.SetWriteDeadline(time.Now().Add(l.cfg.SniffTimeout))
		_, _ = nc.Write(tlsRequiredFrame(sniffedRequestID(head)))
		go lingerAndClose(nc)
		return nil
	case flightOther:
		log.Debug("transport: unrecognised first bytes on the TLS listener; closing silently")
		_ = nc.Close()
		return nil
	}
	return l.handshakeTLS(nc, replay, log)
}

// handshakeTLS runs the server TLS handshake within HandshakeTimeout. crypto/tls
// closes the socket itself when the context ends mid-handshake.
func (l *tcpListener) handshakeTLS(nc net.Conn, replay *prefixConn, log *slog.Logger) Conn {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.HandshakeTimeout)
	defer cancel()
	_ = nc.SetReadDeadline(time.Time{})
	tc := tls.Server(replay, l.tlsConf)
	if err := tc.HandshakeContext(ctx); err != nil {
		log.Debug("transport: TLS handshake failed", "err", err)
		_ = nc.Close()
		return nil
	}
	return newTCPConn(tc, nc, tc)
}

// abortOnClose poisons nc's deadlines when closed is closed, until stop is called.
// stop reports false when the poison was applied: the connection is then unusable.
func abortOnClose(closed <-chan struct{}, nc net.Conn) (stop func() bool) {
	done := make(chan struct{})
	aborted := make(chan bool, 1)
	go func() {
		select {
		case <-closed:
			_ = nc.SetDeadline(time.Unix(1, 0))
			aborted <- true
		case <-done:
			aborted <- false
		}
	}()
	return func() bool {
		close(done)
		return !<-aborted
	}
}
