package broker

import (
	"sync"

	"github.com/fibril-go/fibril/core/node"
)

// Recycled inputs: a Deliver per envelope and a Frame per frame were a third
// of the broker's allocations per message. Invariants:
//   - an input is recycled only after the Step that took it returned, by
//     the goroutine that stepped it; machines copy what they keep of an
//     input (core/node doc.go: a Frame's payload is valid only during the
//     Step; envelopes are kept by value);
//   - a recycled input holds no reference (its envelope and payload are
//     cleared), so the pool keeps no message alive.

var (
	deliverPool = sync.Pool{New: func() any { return new(node.Deliver) }}
	framePool   = sync.Pool{New: func() any { return new(node.Frame) }}
)

func newDeliver(env node.Envelope) *node.Deliver {
	d := deliverPool.Get().(*node.Deliver)
	d.Envelope = env
	return d
}

func newFrame(in node.Frame) *node.Frame {
	f := framePool.Get().(*node.Frame)
	*f = in
	return f
}

// recycle returns a stepped input to its pool.
func recycle(in node.Input) {
	switch in := in.(type) {
	case *node.Deliver:
		*in = node.Deliver{}
		deliverPool.Put(in)
	case *node.Frame:
		*in = node.Frame{}
		framePool.Put(in)
	}
}
