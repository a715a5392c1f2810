package client

// Connecting: dial the transport, then the synchronous handshake of PROTOCOL §3:
// HELLO (request id 1, with the resume identity on a reconnect), then AUTH
// (request id 2) when credentials are set, then on a reconnect that remembers
// subscriptions RECONCILE_CLIENT (request id 3), each answered by one reply
// frame before the engine's goroutines start.
//
// Invariants:
//   - Nothing but the handshake touches the connection until it succeeds.
//   - A failed handshake closes the connection and changes no subscription or
//     session: only a completed handshake applies the reconcile result and
//     decides the old session's staleness.
//   - HELLO_OK must carry protocol version 1 and exactly wire.ComplianceMarker.

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/wire"
)

// connect dials addr and runs the handshake; the returned engine is started.
// plan is nil on the first connect, else what the replaced engine carries over.
func connect(ctx context.Context, addr string, opts ClientOptions, routes *routeCache, cohorts *cohortTable,
	plan *resumePlan) (*engine, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.HandshakeTimeout)
		defer cancel()
	}
	conn, err := dialTransport(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	e := newEngine(conn, opts, routes, cohorts)
	// The handshake reads block; closing the connection is what unblocks them
	// when ctx ends.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	result, err := e.handshake(opts, plan)
	if !stop() {
		// ctx ended and closed the connection: whatever the handshake saw is a
		// consequence of that.
		return nil, fmt.Errorf("client: handshake with %s: %w", addr, ctx.Err())
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	e.adoptSession(plan, result)
	e.start() // the reader dispatches the held pushes first
	return e, nil
}

// adoptSession joins the old session when the broker resumed it, else starts a
// new one and marks the old one stale (§7.7), then applies the reconcile result.
func (e *engine) adoptSession(plan *resumePlan, result wire.ReconcileResult) {
	if plan != nil && e.helloOk.ResumeOutcome == wire.ResumeResumed {
		e.sess = plan.sess
	} else {
		e.sess = &session{}
		if plan != nil {
			plan.sess.stale.Store(true)
		}
	}
	if plan != nil && plan.reconcile {
		e.applyReconcile(plan, result)
	}
	if e.sess.stale.Load() {
		panic("client: a new engine joined a stale session")
	}
	e.sess.current.Store(e)
}

// dialTransport opens the transport connection and maps its failures to the
// client's typed errors.
func dialTransport(ctx context.Context, addr string, opts ClientOptions) (transport.Conn, error) {
	addr = transport.WithDefaultPort(addr)
	var conn transport.Conn
	var err error
	switch opts.Transport {
	case TransportTCP:
		if opts.TLS == nil {
			conn, err = transport.DialTCP(ctx, addr, nil)
			break
		}
		tlsConf, confErr := opts.TLS.clientConfig(addr)
		if confErr != nil {
			return nil, fmt.Errorf("client: TLS options: %w", confErr)
		}
		conn, err = transport.DialTCP(ctx, addr, tlsConf)
	case TransportQUIC:
		tlsConf, confErr := opts.TLS.clientConfig(addr)
		if confErr != nil {
			return nil, fmt.Errorf("client: TLS options: %w", confErr)
		}
		conn, err = transport.DialQUIC(ctx, addr, tlsConf)
	}
	if err == nil {
		return conn, nil
	}
	var certErr *CertificateError
	switch {
	case errors.As(err, &certErr):
		return nil, err
	case errors.Is(err, transport.ErrTLSNotSupported):
		return nil, fmt.Errorf("%w (%v)", ErrTLSNotSupportedByBroker, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return nil, fmt.Errorf("%w (%s: %v)", ErrConnectionRefused, addr, err)
	case opts.Transport == TransportQUIC && ctx.Err() == nil:
		return nil, fmt.Errorf("client: no QUIC connection to %s (is a broker listening on that UDP port? "+
			"The broker port, default 9876, serves QUIC on UDP and TCP; the admin port 8081 serves neither; "+
			"Transport \"tcp\" uses TCP): %w", addr, err)
	}
	return nil, fmt.Errorf("client: connect to %s over %s: %w", addr, opts.Transport, err)
}

// handshake performs HELLO, with credentials AUTH, and with a plan that
// remembers subscriptions RECONCILE_CLIENT, whose result it returns.
func (e *engine) handshake(opts ClientOptions, plan *resumePlan) (wire.ReconcileResult, error) {
	if err := e.hello(opts, plan); err != nil {
		return wire.ReconcileResult{}, err
	}
	if err := e.authenticate(opts); err != nil {
		return wire.ReconcileResult{}, err
	}
	if plan == nil || !plan.reconcile {
		return wire.ReconcileResult{}, nil
	}
	policy := wire.ReconcileConservative
	if opts.ReconcileRestore {
		policy = wire.ReconcileRestore
	}
	h, body, err := e.exchange(wire.OpReconcileClient, reconcileRequestID, plan.reconcileRequest(policy))
	if err != nil {
		return wire.ReconcileResult{}, err
	}
	switch h.Opcode {
	case wire.OpReconcileResult:
		return body.(wire.ReconcileResult), nil
	case wire.OpError:
		return wire.ReconcileResult{}, brokerError(h.Opcode, body.(wire.ErrorBody))
	}
	return wire.ReconcileResult{}, fmt.Errorf("%w: %s in reply to RECONCILE_CLIENT", ErrProtocol, h.Opcode)
}

// hello sends HELLO (with the resume identity of plan) and checks HELLO_OK.
func (e *engine) hello(opts ClientOptions, plan *resumePlan) error {
	hello := wire.Hello{
		ClientName:      opts.ClientName,
		ClientVersion:   Version,
		ProtocolVersion: wire.ProtocolVersion,
	}
	if plan != nil {
		hello.Resume = wire.Some(plan.identity)
	}
	h, body, err := e.exchange(wire.OpHello, helloRequestID, hello)
	if err != nil {
		return err
	}
	switch h.Opcode {
	case wire.OpHelloOk:
		ok := body.(wire.HelloOk)
		if ok.ProtocolVersion != wire.ProtocolVersion {
			return fmt.Errorf("%w: HELLO_OK negotiated protocol version %d, want %d",
				ErrProtocol, ok.ProtocolVersion, wire.ProtocolVersion)
		}
		if ok.Compliance != wire.ComplianceMarker {
			return fmt.Errorf("%w: the broker sent %q, want %q; refusing to talk to it",
				ErrComplianceMismatch, ok.Compliance, wire.ComplianceMarker)
		}
		e.helloOk = ok
	case wire.OpHelloErr, wire.OpError:
		return brokerError(h.Opcode, body.(wire.ErrorBody))
	default:
		return fmt.Errorf("%w: %s in reply to HELLO", ErrProtocol, h.Opcode)
	}
	return nil
}

// authenticate sends AUTH when credentials are set, on every connect: a resumed
// session is authenticated already, and the broker re-checks and answers AUTH_OK.
func (e *engine) authenticate(opts ClientOptions) error {
	if opts.Credentials == nil {
		return nil
	}
	auth := wire.Auth{Username: opts.Credentials.Username, Password: opts.Credentials.Password}
	h, body, err := e.exchange(wire.OpAuth, authRequestID, auth)
	if err != nil {
		return err
	}
	switch h.Opcode {
	case wire.OpAuthOk:
		return nil
	case wire.OpAuthErr, wire.OpError:
		return brokerError(h.Opcode, body.(wire.ErrorBody))
	}
	return fmt.Errorf("%w: %s in reply to AUTH", ErrProtocol, h.Opcode)
}

// exchange writes one handshake frame and reads its one reply back. Pushes a
// resumed session sends early are held for dispatch after the handshake.
func (e *engine) exchange(op wire.Opcode, requestID uint64, body wire.Body) (wire.Header, wire.Body, error) {
	frame := wire.AppendBodyFrame(nil, op, requestID, body)
	if _, err := e.conn.Write(frame); err != nil {
		return wire.Header{}, nil, fmt.Errorf("client: send %s: %w", op, err)
	}
	var h wire.Header
	var payload []byte
	for {
		var err error
		h, payload, err = wire.ReadFrame(e.reader, wire.PayloadSizeBytesMaxDefault, nil)
		if err != nil {
			return wire.Header{}, nil, fmt.Errorf("client: the broker ended the connection during %s: %w", op, err)
		}
		if !isHandshakePush(h.Opcode) {
			break
		}
		if err := e.holdPush(h, payload); err != nil {
			return wire.Header{}, nil, err
		}
	}
	decoded, err := wire.DecodeBody(h.Opcode, payload)
	if err != nil {
		return h, nil, fmt.Errorf("%w: reply to %s: %w", ErrProtocol, op, err)
	}
	return h, decoded, nil
}
