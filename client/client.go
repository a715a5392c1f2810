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

	dialSlot chan struct{} // capacity 1: held while (re)connecting

	mu     sync.Mutex
	eng    *engine
	closed bool
}

// Dial connects to the broker at addr ("host:port"; the port defaults to 9876)
// and performs the handshake. It also warms the route cache with the broker's
// topology.
func Dial(ctx context.Context, addr string, opts ClientOptions) (*Client, error) {
	resolved, err := opts.resolved()
	if err != nil {
		return nil, err
	}
	c := &Client{addr: addr, opts: resolved, routes: newRouteCache(), dialSlot: make(chan struct{}, 1)}
	eng, err := connect(ctx, addr, resolved, c.routes)
	if err != nil {
		return nil, err
	}
	c.eng = eng
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
	eng.shutdown(ErrClientClosed)
	return nil
}

// Reconnect replaces the connection with a new one, whatever the state of the
// current one. Subscriptions and pending requests of the old connection end.
func (c *Client) Reconnect(ctx context.Context) error {
	if err := c.acquireDialSlot(ctx); err != nil {
		return err
	}
	defer c.releaseDialSlot()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClientClosed
	}
	old := c.eng
	c.mu.Unlock()
	old.shutdown(connectionLost(errReconnectRequested))
	return c.redial(ctx)
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

// redial dials a new engine and installs it. The caller holds the dial slot.
func (c *Client) redial(ctx context.Context) error {
	eng, err := connect(ctx, c.addr, c.opts, c.routes)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		eng.shutdown(ErrClientClosed)
		return ErrClientClosed
	}
	c.eng = eng
	return nil
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
	if err := c.redial(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eng, nil
}

// ServerName returns the server name the broker sent in HELLO_OK.
func (c *Client) ServerName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eng.helloOk.ServerName
}
