package sim

import (
	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/transport/wire"
)

// A broker's connections: bytes in, frames to the machines, bytes out.
// This is the plumbing io/broker does with sockets. Invariants:
//   - frames of one connection reach the machines in the order they were
//     read: the Node until the connection is bound, then its session;
//   - a frame is handed over only once it arrived whole; a header that
//     announces more than FramePayloadBytesMax is handed over as Frame.Err,
//     and nothing more is read from that connection;
//   - the outbox is taken by the socket in order, at most socketWindowBytes
//     unread by the peer at a time; each take is reported (Written) to the
//     bound session, which bounds its outbox;
//   - ConnClosed reaches the Node, and the bound session, once per
//     connection.

// onAccept: a peer opened a link to this broker.
func (b *Broker) onAccept(l *Link) {
	if !b.up {
		b.w.fabric.brokerClose(l, "connection refused: broker down")
		return
	}
	b.nextConnID++
	c := &brokerConn{id: b.nextConnID, link: l}
	l.bconn, l.incarnation = c.id, b.incarnation
	b.conns[c.id] = c
	b.stepNode(&node.ConnOpened{NowMs: b.nowMs(), Conn: node.ConnID(c.id), Loopback: true, Entropy: b.entropy()}, "conn_opened")
}

// onBytes: a chunk arrived on l. Whole frames go to the machines, one Step
// each, in order.
func (b *Broker) onBytes(l *Link, data []byte) {
	if data == nil {
		b.onAccept(l)
		return
	}
	c := b.connOf(l)
	if c == nil || c.broken {
		return
	}
	if len(c.rx) == 0 {
		c.rx = data // the chunk is the fabric's own copy: no need for another
	} else {
		c.rx = append(c.rx, data...)
	}
	for b.up && b.conns[c.id] == c && !c.broken {
		if len(c.rx) < wire.HeaderSizeBytes {
			break
		}
		h, err := wire.DecodeHeader(c.rx)
		assert(err == nil, "a whole header always decodes")
		if h.PayloadSizeBytes > b.cfg.FramePayloadBytesMax {
			c.broken = true
			b.stepFrame(c, &node.Frame{NowMs: b.nowMs(), Conn: node.ConnID(c.id), Header: h, Err: wire.ErrFrameTooLarge})
			break
		}
		end := wire.HeaderSizeBytes + int(h.PayloadSizeBytes)
		if len(c.rx) < end {
			break // the rest of the frame is still on its way
		}
		b.stepFrame(c, &node.Frame{NowMs: b.nowMs(), Conn: node.ConnID(c.id), Header: h, Payload: c.rx[wire.HeaderSizeBytes:end]})
		if b.conns[c.id] == c {
			c.rx = c.rx[end:]
		}
	}
	if b.conns != nil && b.conns[c.id] == c && len(c.rx) == 0 {
		c.rx = nil // let a large buffer go
	}
}

// connOf returns the live connection behind l, or nil.
func (b *Broker) connOf(l *Link) *brokerConn {
	if !b.up || l.incarnation != b.incarnation || l.bconn == 0 {
		return nil
	}
	c := b.conns[l.bconn]
	if c == nil || c.link != l {
		return nil
	}
	return c
}

// stepFrame routes one frame: to the bound session, else to the Node.
func (b *Broker) stepFrame(c *brokerConn, f *node.Frame) {
	if c.session != 0 {
		if s := b.sessions[c.session]; s != nil {
			b.stepSession(s, f, "frame")
			return
		}
		return // the session ended: the Node closes the connection
	}
	b.stepNode(f, "frame")
}

// flush hands the socket what fits of c's outbox, then closes c if a close
// was asked and everything before it is out.
func (b *Broker) flush(c *brokerConn) {
	l := c.link
	if l.doomed || l.closedAtBroker {
		c.outbox = nil
		return
	}
	taken := 0
	for len(c.outbox) > 0 && l.inFlightToPeerBytes < socketWindowBytes {
		n := min(len(c.outbox), socketWindowBytes-l.inFlightToPeerBytes, chunkBytesMax)
		b.w.fabric.write(l, toPeer, c.outbox[:n])
		c.outbox = c.outbox[n:]
		taken += n
	}
	if len(c.outbox) == 0 {
		c.outbox = nil
	}
	if taken > 0 && c.session != 0 {
		b.written(c, taken)
	}
	if c.closing && len(c.outbox) == 0 {
		b.w.fabric.brokerClose(l, whyClosedByBroker)
		b.connClosed(c)
	}
}

// queueSend puts bytes a machine sent (valid only until its next Step) in
// c's outbox and flushes it. With nothing queued before them they are
// flushed from where they are, and only what the socket did not take is
// copied: the fabric copies each chunk it carries anyway, so copying every
// frame into the outbox first was an allocation and a copy per frame for
// nothing. flush steps no machine, so the bytes stay valid throughout.
func (b *Broker) queueSend(c *brokerConn, bytes []byte) {
	if len(c.outbox) > 0 {
		c.outbox = append(c.outbox, bytes...)
		b.flush(c)
		return
	}
	c.outbox = bytes
	b.flush(c)
	if len(c.outbox) > 0 {
		c.outbox = append([]byte(nil), c.outbox...)
	}
}

// whyClosedByBroker is why a peer's link ended when a machine closed it
// (Ready.Close): the session may have ended, so the peer claims nothing
// about finding it again.
const whyClosedByBroker = "closed by the broker"

// chunkBytesMax bounds one write to the network, as a socket write of a
// large buffer goes out in segments.
const chunkBytesMax = 64 << 10

// written reports bytes the socket took to the bound session, in an event
// of its own (the session may be the machine whose Ready is being applied).
func (b *Broker) written(c *brokerConn, bytes int) {
	id, conn := c.session, node.ConnID(c.id)
	b.later(0, func() {
		if s := b.sessions[id]; s != nil {
			b.stepSession(s, &node.Written{NowMs: b.nowMs(), Conn: conn, Bytes: bytes}, "written")
		}
	})
}

// onWindow: the peer read bytes, so the socket has room again.
func (b *Broker) onWindow(l *Link) {
	if c := b.connOf(l); c != nil && len(c.outbox) > 0 {
		b.flush(c)
	}
}

// onLinkLost: the link died (reset, closed by the peer, keepalive).
func (b *Broker) onLinkLost(l *Link) {
	if c := b.connOf(l); c != nil {
		b.connClosed(c)
	}
}

// connClosed forgets c and tells the Node and the bound session, each in
// an event of its own.
func (b *Broker) connClosed(c *brokerConn) {
	if b.conns[c.id] != c {
		return
	}
	delete(b.conns, c.id)
	b.w.rec.add(checker.Event{Kind: checker.KindConnClosed, Node: b.id, Client: c.link.peer.id, Conn: c.link.id})
	conn, sid := node.ConnID(c.id), c.session
	b.later(0, func() {
		b.stepNode(&node.ConnClosed{NowMs: b.nowMs(), Conn: conn}, "conn_closed")
	})
	if sid != 0 {
		b.later(0, func() {
			if s := b.sessions[sid]; s != nil {
				b.stepSession(s, &node.ConnClosed{NowMs: b.nowMs(), Conn: conn}, "conn_closed")
			}
		})
	}
}
