package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// handoff is what TCP and QUIC listeners share: an accept loop prepares
// connections off to the side (sniffing, handshakes) and hands each ready one
// to Accept. Invariants: at most HandshakesInflightMax connections sit between
// the loop and Accept (slots); Close stops the loop, then waits for every
// per-connection handler, which closes what was never handed out.
type handoff struct {
	ready     chan Conn     // prepared connections waiting for Accept (unbuffered)
	slots     chan struct{} // one token per connection between accept and Accept
	closed    chan struct{} // closed by Close
	closeOnce sync.Once
	acceptErr error         // set before done is closed, when the accept loop stopped on its own
	done      chan struct{} // closed when the accept loop returns
	handlers  sync.WaitGroup
	kind      string // for errors: "tcp" or "quic"
}

func newHandoff(kind string, handshakesInflightMax int) handoff {
	return handoff{kind: kind, ready: make(chan Conn), slots: make(chan struct{}, handshakesInflightMax),
		closed: make(chan struct{}), done: make(chan struct{})}
}

func (h *handoff) accept(ctx context.Context) (Conn, error) {
	select {
	case c := <-h.ready:
		return c, nil
	case <-h.closed:
		return nil, fmt.Errorf("transport: accept: %w", net.ErrClosed)
	case <-h.done:
		select {
		case <-h.closed: // the loop stopped because of Close
			return nil, fmt.Errorf("transport: accept: %w", net.ErrClosed)
		default:
		}
		return nil, fmt.Errorf("transport: %s accept loop stopped: %w", h.kind, h.acceptErr)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close stops accepting through closeListener and waits for the loop and the
// handlers.
func (h *handoff) close(closeListener func() error) error {
	var err error
	h.closeOnce.Do(func() {
		close(h.closed)
		err = closeListener()
		<-h.done
		h.handlers.Wait()
	})
	return err
}
