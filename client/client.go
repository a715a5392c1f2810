package client

// The Client: one broker address, one live engine at a time, a shared route
// cache, and the reconnect policy of SPEC §8.
//
// Invariants:
//   - Operations always use the newest engine; an engine, once closed, is never
//     reused, and nothing in flight on it is replayed.
//   - With auto-reconnect, an operation that finds the engine closed makes one
//     connection attempt (serialised by dialSlot, waited for under the caller's
//     context) before failing.
//   - A reconnect resumes the session of the engine it replaces (session.go);
//     while subscriptions live, losing the engine starts one reconnect attempt
//     at once, so consumers that only read their channel are not stranded; a
//     failed attempt closes those subscriptions with its error.
//   - After Close every operation fails with ErrClientClosed.

import (
	"context"
	"errors"
	"sync"
)

// Client is a connection to one Fibril broker. It is safe for concurrent use.
type Client struct {
	addr   string
	opts   ClientOptions
	routes *routeCache
	// cohorts holds the member id and the assignments of exclusive
	// subscriptions (cohort.go).
	cohorts *cohortTable
	// streams is the catalogue of known streams (stream.go).
	streams *streamCatalogue

	dialSlot chan struct{} // capacity 1: held while (re)connecting

	mu         sync.Mutex
	eng        *engine
	closed     bool
	generation uint64 // engines installed so far: 1 after Dial
}

// ConnectionInfo describes the client's current connection.
type ConnectionInfo struct {
	// Generation counts connections: 1 after Dial, one more per reconnect.
	Generation uint64
	// ResumeOutcome is the current connection's HELLO_OK outcome: ResumeNew
	// after Dial, ResumeResumed when a reconnect kept the broker-side session.
	ResumeOutcome ResumeOutcome
	// Closed is true once the connection has ended (before any reconnect).
	Closed bool
}

// Dial connects to the broker at addr ("host:port"; the port defaults to 9876)
// and performs the handshake. It also warms the route cache with the broker's
// topology.
func Dial(ctx context.Context, addr string, opts ClientOptions) (*Client, error) {
	resolved, err := opts.resolved()
	if err != nil {
		return nil, err
	}
	c := &Client{addr: addr, opts: resolved, routes: newRouteCache(), cohorts: newCohortTable(resolved),
		streams: newStreamCatalogue(), dialSlot: make(chan struct{}, 1)}
	eng, err := connect(ctx, addr, resolved, c.routes, c.cohorts, nil)
	if err != nil {
		return nil, err
	}
	c.install(eng)
	// Best effort: a broker without topology support answers ERROR, which only
	// fails this request; publishes then route to partition 0 until told better.
	if _, err := c.FetchTopology(ctx); err != nil && eng.isClosed() {
		return nil, err
	}
	return c, nil
}

// Close ends the connection after writing frames already queued (ACKs, NACKs).
// Subscriptions close; pending requests fail with ErrClientClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	eng := c.eng
	c.mu.Unlock()
	c.cohorts.close()
	eng.shutdown(ErrClientClosed)
	// An engine lost earlier kept its subscriptions for a resume that will not
	// come now.
	eng.closeSubscriptions(connectionLost(ErrClientClosed))
	return nil
}

// Reconnect replaces the connection with a new one, whatever the state of the
// current one, and returns the broker's resume outcome. Pending requests of the
// old connection fail and are not replayed. Subscriptions carry over through
// RECONCILE_CLIENT; deliveries the application holds settle normally when the
// outcome is ResumeResumed and return ErrStaleDelivery otherwise.
func (c *Client) Reconnect(ctx context.Context) (ResumeOutcome, error) {
	if err := c.acquireDialSlot(ctx); err != nil {
		return 0, err
	}
	defer c.releaseDialSlot()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, ErrClientClosed
	}
	old := c.eng
	c.mu.Unlock()
	old.shutdown(connectionLost(errReconnectRequested))
	eng, err := c.redial(ctx)
	if err != nil {
		return 0, err
	}
	return eng.helloOk.ResumeOutcome, nil
}

// Connection describes the current connection.
func (c *Client) Connection() ConnectionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConnectionInfo{Generation: c.generation, ResumeOutcome: c.eng.helloOk.ResumeOutcome, Closed: c.eng.isClosed()}
}

// install makes eng the current engine. The caller holds the dial slot or is
// Dial.
func (c *Client) install(eng *engine) {
	eng.onLost = c.onEngineLost
	c.eng = eng
	c.generation++
}

// onEngineLost runs once when an engine that kept its subscriptions fails: one
// reconnect attempt now, so the subscriptions resume without waiting for the
// application's next operation.
func (c *Client) onEngineLost(lost *engine) {
	if (len(lost.liveParts()) == 0 && len(lost.liveStreamSubs()) == 0) || c.opts.DisableAutoReconnect {
		return // nothing to resume in the background; the next operation redials
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.HandshakeTimeout)
	defer cancel()
	if err := c.acquireDialSlot(ctx); err != nil {
		lost.closeSubscriptions(connectionLost(err))
		return
	}
	defer c.releaseDialSlot()
	c.mu.Lock()
	current, closed := c.eng, c.closed
	c.mu.Unlock()
	if closed || current != lost {
		return // closed, or another caller already reconnected
	}
	c.opts.Logger.Info("client: resuming after a lost connection", "broker", c.addr, "cause", lost.err())
	_, _ = c.redial(ctx)
}

// errReconnectRequested is the cause recorded on an engine replaced by Reconnect.
var errReconnectRequested = errors.New("reconnect requested by the application")

func (c *Client) acquireDialSlot(ctx context.Context) error {
	select {
	case c.dialSlot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) releaseDialSlot() { <-c.dialSlot }

// redial dials a new engine resuming the current one's session, and installs
// it. The caller holds the dial slot. A failed attempt ends the subscriptions
// the old engine kept: nothing would otherwise wake their consumers.
func (c *Client) redial(ctx context.Context) (*engine, error) {
	c.mu.Lock()
	old := c.eng
	c.mu.Unlock()
	if !old.isClosed() {
		panic("client: redial while the current engine is open")
	}
	// Streams are not reconciled (PROTOCOL §7.5): they are subscribed again
	// once the new engine is installed.
	streams := old.liveStreamSubs()
	eng, err := connect(ctx, c.addr, c.opts, c.routes, c.cohorts, planResume(old))
	if err != nil {
		old.closeSubscriptions(connectionLost(err))
		return nil, err
	}
	attached := make([]*StreamSubscription, 0, len(streams))
	for _, sub := range streams {
		if sub.attach(eng) {
			attached = append(attached, sub)
		}
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.install(eng)
	}
	c.mu.Unlock()
	if closed {
		eng.shutdown(ErrClientClosed)
		eng.closeSubscriptions(connectionLost(ErrClientClosed))
		old.closeSubscriptions(connectionLost(ErrClientClosed))
		return nil, ErrClientClosed
	}
	for _, sub := range attached {
		go sub.resubscribe(eng)
	}
	return eng, nil
}

// engine returns the live engine, reconnecting once if it has closed and
// auto-reconnect is on.
func (c *Client) engine(ctx context.Context) (*engine, error) {
	c.mu.Lock()
	eng, closed := c.eng, c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClientClosed
	}
	if !eng.isClosed() {
		return eng, nil
	}
	if c.opts.DisableAutoReconnect {
		return nil, connectionLost(eng.err())
	}
	if err := c.acquireDialSlot(ctx); err != nil {
		return nil, err
	}
	defer c.releaseDialSlot()
	c.mu.Lock()
	eng, closed = c.eng, c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClientClosed
	}
	if !eng.isClosed() {
		return eng, nil // another goroutine reconnected while we waited
	}
	c.opts.Logger.Info("client: reconnecting", "broker", c.addr, "cause", eng.err())
	return c.redial(ctx)
}

// ServerName returns the server name the broker sent in HELLO_OK.
func (c *Client) ServerName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eng.helloOk.ServerName
}
