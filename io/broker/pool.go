package broker

import (
	"sync"

	"github.com/fibril-go/fibril/core/node"
)

// Mail and recycled inputs: a Deliver per envelope and a Frame per frame
// were a third of the broker's allocations per message. Invariants:
//   - an envelope waits in a mailbox by value (mail), and is stepped in the
//     receiver's own Deliver (one per actor or runner, used only by whoever
//     steps it), cleared right after the Step: no allocation and no pool
//     round trip per envelope;
//   - an input is recycled only after the Step that took it returned, by
//     the goroutine that stepped it; machines copy what they keep of an
//     input (core/node doc.go: a Frame's payload is valid only during the
//     Step; envelopes are kept by value);
//   - a recycled input holds no reference (its envelope and payload are
//     cleared), so neither the pool nor a receiver's Deliver keeps a
//     message alive.

// mail is one mailbox entry: an input, or (in == nil) an envelope to be
// stepped as a Deliver.
type mail struct {
	in  node.Input
	env node.Envelope
}

// input is the Input to step for m, filling scratch for an envelope.
func (m *mail) input(scratch *node.Deliver) node.Input {
	if m.in != nil {
		return m.in
	}
	assertTrue(scratch.Envelope.Msg == nil, "a receiver's Deliver is in use")
	scratch.Envelope = m.env
	return scratch
}

// envelope is the envelope m carries, if it carries one.
func (m *mail) envelope() (node.Envelope, bool) {
	if m.in == nil {
		return m.env, true
	}
	if d, ok := m.in.(*node.Deliver); ok {
		return d.Envelope, true
	}
	return node.Envelope{}, false
}

var framePool = sync.Pool{New: func() any { return new(node.Frame) }}

func newFrame(in node.Frame) *node.Frame {
	f := framePool.Get().(*node.Frame)
	*f = in
	return f
}

// recycle returns a stepped input to its pool, or clears the receiver's
// Deliver it was stepped in.
func recycle(in node.Input, scratch *node.Deliver) {
	switch in := in.(type) {
	case *node.Deliver:
		if in == scratch {
			*in = node.Deliver{}
		}
	case *node.Frame:
		*in = node.Frame{}
		framePool.Put(in)
	}
}
