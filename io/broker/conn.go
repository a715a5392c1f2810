package broker

import (
	"bufio"
	"crypto/rand"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/transport/wire"
)

// Connections: sockets to frames and back. Invariants:
//   - one reader goroutine per connection turns bytes into Frame inputs, to
//     the Node until the Node binds the connection to a session, then to
//     that session; while unbound it reads no further frame until the
//     binding (or a close) happened, so no frame reaches the wrong machine;
//   - one writer goroutine per connection writes whatever the machines
//     queued (Ready.Sends), many frames per write, and reports each write
//     as Written to the bound session; a Close is carried out after the
//     bytes queued before it are written;
//   - ConnClosed reaches the Node (and the bound session) exactly once, after
//     the socket is closed and the writer has stopped, after the
//     connection's last Frame;
//   - the reader is the client backpressure path: before each frame it
//     waits while a partition it fed is over its inbox limit.

// connReadBufferBytes is the reader's socket buffer.
const connReadBufferBytes = 64 << 10

// connQueuedBytesSlack is how far past OutboxBytesMax the driver lets a
// connection's unwritten bytes grow before it cuts the connection itself:
// the session bounds its outbox (and closes a slow consumer first); this
// only stops a machine bug from growing memory without bound.
const connQueuedBytesSlack = 1 << 20

type conn struct {
	b        *Broker
	id       node.ConnID
	sock     Conn
	loopback bool
	// confirms samples publish-to-confirm latency (confirm_latency.go).
	confirms confirmSampler

	bound    atomic.Pointer[actor]
	bindCh   chan struct{} // closed once bound
	bindOnce sync.Once

	mu       sync.Mutex
	buf      []byte
	closeReq bool // close once buf is written
	shut     bool // the socket is closed
	notify   chan struct{}
	closed   chan struct{} // closed with the socket
	wrote    chan struct{} // closed when the writer exits

	// pressure is a partition this connection's session fed past its inbox
	// limit; the reader waits for it before the next frame.
	pressure atomic.Pointer[hostRunner]
	// unreported counts bytes written and not yet told to the session;
	// writtenQueued says a Written input is on its way (it takes the count
	// when stepped), so many writes cost one step.
	unreported    atomic.Int64
	writtenQueued atomic.Bool
	// wakeQueued says a worklist will wake the writer when it is drained.
	wakeQueued atomic.Bool
	// work is the reader goroutine's worklist, reused across frames.
	work worklist
	// seen is what an operator listing shows of it (admin_surface.go).
	seen connSeen
}

// HandleConn serves one connection on its own goroutines.
func (b *Broker) HandleConn(sock Conn) {
	if b.stopped() {
		sock.Close()
		return
	}
	c := &conn{
		b: b, id: node.ConnID(b.nextConnID.Add(1)), sock: sock, loopback: isLoopback(sock.RemoteAddr()),
		bindCh: make(chan struct{}), notify: make(chan struct{}, 1),
		closed: make(chan struct{}), wrote: make(chan struct{}),
	}
	c.seen.observeOpen(sock)
	b.connMu.Lock()
	if b.closingConns {
		b.connMu.Unlock()
		sock.Close()
		return
	}
	b.conns[c.id] = c
	b.metrics.connectionsOpen.Add(1)
	b.connMu.Unlock()
	b.metrics.connections.Add(1)
	b.wg.Add(2)
	go c.writeLoop()
	go c.readLoop()
}

func (b *Broker) connByID(id node.ConnID) *conn {
	b.connMu.RLock()
	defer b.connMu.RUnlock()
	return b.conns[id]
}

// boundTo is the session the connection's frames go to (nil: the Node).
func (c *conn) boundTo() *actor { return c.bound.Load() }

// bindConn carries out a Ready.Bind.
func (b *Broker) bindConn(bind node.Binding) {
	c := b.connByID(bind.Conn)
	a := b.session(bind.Session)
	if c == nil || a == nil {
		return // the connection closed meanwhile; its ConnClosed is on the way
	}
	c.bound.Store(a)
	a.conn.Store(c)
	a.seen.Store(&c.seen)
	c.bindOnce.Do(func() { close(c.bindCh) })
}

// applySends queues Ready.Sends and then carries out Ready.Close.
// The writers are woken when w is drained (drainAll).
// The session's bound connection is taken from the actor rather than
// looked up under the shared lock: it is the same object, and one that
// closed refuses the bytes itself (enqueue), as a missing one would.
func (b *Broker) applySends(a *actor, sends []node.Send, closes []node.ConnID, w *worklist) {
	bound := a.conn.Load()
	for i := range sends {
		c := bound
		if c == nil || c.id != sends[i].Conn {
			c = b.connByID(sends[i].Conn)
		}
		if c != nil && c.enqueue(sends[i].Bytes) {
			if c.wakeQueued.CompareAndSwap(false, true) {
				w.wakes = append(w.wakes, c)
			}
		}
	}
	for _, id := range closes {
		if c := b.connByID(id); c != nil {
			c.closeAfterFlush()
		}
	}
}

// enqueue copies bytes into the outbox (the Ready is valid only until the
// machine's next step); true when the writer has something new to write.
func (c *conn) enqueue(bytes []byte) bool {
	c.confirms.onEnqueue(bytes, c.b.clock.sinceBootNs(), &c.b.metrics.confirmSeconds)
	c.mu.Lock()
	if c.shut || c.closeReq {
		c.mu.Unlock()
		return false
	}
	c.buf = append(c.buf, bytes...)
	over := len(c.buf) > c.b.cfg.OutboxBytesMax+connQueuedBytesSlack
	c.mu.Unlock()
	if over {
		c.b.log.Warn("connection outbox over its bound; closing", "conn", uint64(c.id))
		c.shutdown()
		return false
	}
	return true
}

func (c *conn) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// closeAfterFlush closes the socket once what is queued now is written.
func (c *conn) closeAfterFlush() {
	c.mu.Lock()
	c.closeReq = true
	c.mu.Unlock()
	c.wake()
}

// shutdown closes the socket now (idempotent).
func (c *conn) shutdown() {
	c.mu.Lock()
	if c.shut {
		c.mu.Unlock()
		return
	}
	c.shut = true
	c.buf = nil
	c.mu.Unlock()
	c.sock.Close()
	close(c.closed)
	c.wake()
}

// writeLoop writes the outbox until the connection closes.
func (c *conn) writeLoop() {
	defer c.b.wg.Done()
	defer close(c.wrote)
	var spare []byte
	for {
		select {
		case <-c.notify:
		case <-c.closed:
			return
		}
		c.mu.Lock()
		out, closeNow := c.buf, c.closeReq
		c.buf = spare[:0]
		shut := c.shut
		c.mu.Unlock()
		if shut {
			return
		}
		if len(out) > 0 {
			n, err := c.sock.Write(out)
			c.b.metrics.bytesOut.Add(uint64(n))
			if err != nil {
				c.shutdown()
				return
			}
			c.reportWritten(len(out))
		}
		spare = out
		if closeNow {
			c.mu.Lock()
			more := len(c.buf) > 0 // appended before closeReq was seen
			c.mu.Unlock()
			if !more {
				c.shutdown()
				return
			}
			c.wake()
		}
	}
}

// reportWritten tells the bound session the socket took n more bytes:
// one Written input at a time carries whatever accumulated by its step.
func (c *conn) reportWritten(n int) {
	a := c.boundTo()
	if a == nil {
		return // the Node's own frames (errors before a close) are not bounded
	}
	c.unreported.Add(int64(n))
	if c.writtenQueued.CompareAndSwap(false, true) {
		c.b.deliverTo(a, &node.Written{Conn: c.id})
	}
}

// takeWritten fills a Written input, when stepped, with the bytes written
// since the last one.
func (b *Broker) takeWritten(in *node.Written) {
	c := b.connByID(in.Conn)
	if c == nil {
		return // closed: the session no longer counts it
	}
	c.writtenQueued.Store(false)
	in.Bytes = int(c.unreported.Swap(0))
}

// readLoop reads frames until the connection ends, then reports it closed.
func (c *conn) readLoop() {
	defer c.b.wg.Done()
	defer c.finish()
	var entropy [32]byte
	if _, err := rand.Read(entropy[:]); err != nil {
		panic("broker: no randomness: " + err.Error())
	}
	c.b.deliverTo(c.b.nodeActor, &node.ConnOpened{Conn: c.id, Loopback: c.loopback, Entropy: entropy})
	r := bufio.NewReaderSize(countingReader{c.sock, &c.b.metrics.bytesIn}, connReadBufferBytes)
	var buf []byte
	for {
		if h := c.pressure.Swap(nil); h != nil {
			h.waitRoom(c.closed)
		}
		hdr, payload, err := wire.ReadFrame(r, c.b.cfg.FramePayloadBytesMax, buf)
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) || errors.Is(err, wire.ErrMalformed) {
				c.b.metrics.protocolErrs.Add(1)
				// The stream is broken: the machine answers and closes.
				c.toMachine(newFrame(node.Frame{Conn: c.id, Header: hdr, Err: err}))
				<-c.closed
			}
			return
		}
		c.confirms.onRead(hdr, c.b.clock.sinceBootNs()) // confirm_latency.go
		if hdr.Opcode == wire.OpHello && c.boundTo() == nil {
			c.seen.observeHello(payload) // before the step: the payload is reused after
		}
		stepped, ok := c.toMachine(newFrame(node.Frame{Conn: c.id, Header: hdr, Payload: payload}))
		if !ok {
			return
		}
		if stepped {
			buf = payload[:0] // the machine is done with it
		} else {
			buf = nil // queued: the frame owns the buffer until its step
		}
		if c.boundTo() == nil {
			// The Node answers the first frame with a Bind or a Close; the
			// next frame must reach whichever machine that decides.
			select {
			case <-c.bindCh:
			case <-c.closed:
				return
			}
		}
	}
}

// toMachine pushes in to the bound session, or to the Node while unbound.
// stepped says the input was stepped before toMachine returned (so the
// frame's buffer is free again); ok is false when the session is gone.
func (c *conn) toMachine(in node.Input) (stepped, ok bool) {
	a := c.boundTo()
	if a == nil {
		a = c.b.nodeActor
	}
	claimed, ok := a.push(in)
	if !ok {
		return false, false
	}
	if claimed {
		// Our input is the first of the batch this goroutine drains now.
		c.work.add(a)
		c.b.drainAll(&c.work)
	} else {
		a.waitRoom(c.closed)
	}
	return claimed, true
}

// finish closes the socket, waits for the writer, and reports the
// connection closed to the Node and the bound session.
func (c *conn) finish() {
	c.shutdown()
	<-c.wrote
	c.b.connMu.Lock()
	delete(c.b.conns, c.id)
	c.b.metrics.connectionsOpen.Add(-1)
	c.b.connMu.Unlock()
	if a := c.boundTo(); a != nil {
		c.b.deliverTo(a, &node.ConnClosed{Conn: c.id})
	}
	c.b.deliverTo(c.b.nodeActor, &node.ConnClosed{Conn: c.id})
}

func isLoopback(addr net.Addr) bool {
	if addr == nil {
		return false
	}
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UDPAddr:
		return a.IP.IsLoopback()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
