package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fibril-go/fibril/core/node"
)

// Operator requests (the admin API) enter the core as envelopes from an
// AddrAdmin address, like a session's: the decision stays in the machine
// addressed, the driver only carries the request in and the answer out.
// Invariants:
//   - each request has its own number (never 0, never reused in a process)
//     and at most one waiter, registered before its envelope is delivered,
//     so an answer can never arrive for nobody who will read it;
//   - an answer (or a bounce of the request) for a number nobody waits on
//     any more (the caller gave up) is dropped: the machine's decision is
//     already made and durable or not on its own terms;
//   - a waiter's channel holds one answer, so the router never blocks on a
//     slow HTTP handler.

// ErrNoSuchMachine answers a request whose addressee does not exist (a
// partition that is not loaded, a session that ended).
var ErrNoSuchMachine = errors.New("broker: the machine addressed does not exist")

// ErrBrokerClosed answers a request still waiting when the broker closes.
var ErrBrokerClosed = errors.New("broker: closed")

// adminCalls is the table of operator requests in flight.
type adminCalls struct {
	next    atomic.Uint64
	mu      sync.Mutex
	waiting map[uint64]chan adminAnswer
}

// adminAnswer is one message sent to a request's address, or its bounce.
type adminAnswer struct {
	msg     node.Message
	bounced bool
}

// Call delivers msg to the machine at to, as from a fresh AddrAdmin
// address, and waits for the first message sent back to that address. A
// request whose addressee does not exist answers ErrNoSuchMachine; one the
// machine never answers waits until ctx ends.
func (b *Broker) Call(ctx context.Context, to node.Address, msg node.Message) (node.Message, error) {
	req, answers := b.admin.open()
	defer b.admin.close(req)
	env := node.Envelope{From: node.AdminAddr(req), To: to, Msg: msg}
	var w worklist
	if to.Kind == node.AddrPartition {
		b.pushToPartition(b.host(to.Queue), env)
	} else {
		b.route(env, &w)
		b.drainAll(&w)
	}
	select {
	case a := <-answers:
		if a.bounced {
			return nil, fmt.Errorf("%w: %v", ErrNoSuchMachine, to)
		}
		return a.msg, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.ctx.Done():
		return nil, ErrBrokerClosed
	case <-b.failed:
		return nil, fmt.Errorf("broker: stopped: %w", b.Err())
	}
}

func (c *adminCalls) open() (uint64, chan adminAnswer) {
	req := c.next.Add(1)
	ch := make(chan adminAnswer, 1)
	c.mu.Lock()
	if c.waiting == nil {
		c.waiting = make(map[uint64]chan adminAnswer)
	}
	c.waiting[req] = ch
	c.mu.Unlock()
	return req, ch
}

func (c *adminCalls) close(req uint64) {
	c.mu.Lock()
	delete(c.waiting, req)
	c.mu.Unlock()
}

// answer hands what arrived for (or bounced from) request req to its
// waiter; the first answer wins, later ones are dropped.
func (c *adminCalls) answer(req uint64, a adminAnswer) {
	assertTrue(req != 0, "an admin address has a request number")
	c.mu.Lock()
	ch := c.waiting[req]
	c.mu.Unlock()
	if ch == nil {
		return // the caller gave up
	}
	select {
	case ch <- a:
	default: // answered already
	}
}
