//go:build !fibril_next

package broker

import (
	"sync"
)

// outbox holds the frames a session has to send. Producers (the session's
// reader, partition runners) append encoded frames under a short lock; one
// writer goroutine swaps the buffer out and writes it whole, so many frames
// go out in one write (PERFORMANCE-NOTES: never one syscall per frame).
// Invariants:
//   - bytes leave in the order they were appended;
//   - while pushes are held (right after a handshake), pushes wait in held and
//     replies go first (PROTOCOL.md §3.1: no unsolicited frame before the
//     handshake is answered);
//   - the buffer never grows past max: a peer that does not read is cut.
type outbox struct {
	mu       sync.Mutex
	buf      []byte
	held     []byte
	holding  bool
	max      int
	overflow bool
	closed   bool
	notify   chan struct{} // the attached writer's wake-up; nil while dormant
}

func newOutbox(max int) *outbox {
	return &outbox{max: max}
}

// attachWriter gives a new writer its own wake-up channel and closes the
// previous writer's, which makes that writer exit.
func (o *outbox) attachWriter() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.notify != nil {
		close(o.notify)
	}
	o.notify = make(chan struct{}, 1)
	o.notify <- struct{}{} // anything already queued goes out (once released)
	return o.notify
}

// detachWriter stops the current writer.
func (o *outbox) detachWriter() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.notify != nil {
		close(o.notify)
		o.notify = nil
	}
}

// appendFrame encodes a frame with fn; push says whether it is an unsolicited
// push (held during the handshake) or a reply. It reports false when the
// outbox is closed or overflowed.
func (o *outbox) appendFrame(push bool, fn func([]byte) []byte) bool {
	o.mu.Lock()
	if o.closed || o.overflow {
		o.mu.Unlock()
		return false
	}
	if push && o.holding {
		o.held = fn(o.held)
	} else {
		o.buf = fn(o.buf)
	}
	if len(o.buf)+len(o.held) > o.max {
		o.overflow = true
		o.mu.Unlock()
		o.wake()
		return false
	}
	o.mu.Unlock()
	o.wake()
	return true
}

func (o *outbox) wake() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.notify == nil {
		return
	}
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// take swaps the pending bytes for spare (emptied) and returns them.
func (o *outbox) take(spare []byte) (out []byte, overflow bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out = o.buf
	o.buf = spare[:0]
	return out, o.overflow
}

// hold starts holding pushes; what is already queued (deliveries buffered
// while the session was dormant) is held too.
func (o *outbox) hold() {
	o.mu.Lock()
	o.holding = true
	o.held = append(o.held, o.buf...)
	o.buf = o.buf[:0]
	o.mu.Unlock()
}

// release stops holding and queues the held pushes after the replies.
func (o *outbox) release() {
	o.mu.Lock()
	if o.holding {
		o.holding = false
		o.buf = append(o.buf, o.held...)
		o.held = o.held[:0]
	}
	o.mu.Unlock()
	o.wake()
}

// reset forgets queued bytes that belonged to a dead connection: its replies
// answer requests the next connection never made.
func (o *outbox) reset() {
	o.mu.Lock()
	o.buf = o.buf[:0]
	o.held = o.held[:0]
	o.holding = false
	o.overflow = false
	o.mu.Unlock()
}

func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	if o.notify != nil {
		close(o.notify)
		o.notify = nil
	}
	o.mu.Unlock()
}
