package broker

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// tcpListener adapts net.Listener to the broker's Listener for tests.
type tcpListener struct{ l net.Listener }

func (t tcpListener) Accept(ctx context.Context) (Conn, error) {
	c, err := t.l.Accept()
	if err != nil {
		return nil, err
	}
	return c, nil
}
func (t tcpListener) Close() error   { return t.l.Close() }
func (t tcpListener) Addr() net.Addr { return t.l.Addr() }

// testBroker starts a broker on a fresh data dir (or dir) on loopback.
func testBroker(t *testing.T, dir string, tweak func(*Config)) (*Broker, string) {
	t.Helper()
	cfg := DefaultConfig()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg.DataDir = dir
	cfg.HeartbeatInterval = 2 * time.Second
	cfg.Partition.LeaseMs = 2000
	if tweak != nil {
		tweak(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.Serve(tcpListener{l})
	t.Cleanup(func() {
		l.Close()
		b.Close()
	})
	return b, l.Addr().String()
}

// peer is a frame-level test client: it speaks the wire protocol directly so
// the broker is tested byte for byte, independent of our Go client.
type peer struct {
	t      *testing.T
	c      net.Conn
	r      *bufio.Reader
	nextID uint64
	hello  wire.HelloOk
	// frames read while waiting for something else
	backlog []frame
}

type frame struct {
	hdr  wire.Header
	body wire.Body
}

func dialPeer(t *testing.T, addr string) *peer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &peer{t: t, c: c, r: bufio.NewReader(c), nextID: 3}
}

// connect does HELLO (optionally resuming) and AUTH with the built-in pair.
func connect(t *testing.T, addr string) *peer {
	p := dialPeer(t, addr)
	p.handshake(nil)
	p.auth("fibril", "fibril", wire.OpAuthOk)
	return p
}

func (p *peer) handshake(resume *wire.ResumeIdentity) {
	p.t.Helper()
	h := &wire.Hello{ClientName: "test", ClientVersion: "0", ProtocolVersion: 1}
	if resume != nil {
		h.Resume = wire.Some(*resume)
	}
	p.send(wire.OpHello, 1, h)
	f := p.read()
	ok, isOk := f.body.(wire.HelloOk)
	if !isOk {
		p.t.Fatalf("HELLO answered with %v %+v", f.hdr.Opcode, f.body)
	}
	if ok.Compliance != wire.ComplianceMarker {
		p.t.Fatalf("compliance marker %q", ok.Compliance)
	}
	p.hello = ok
}

func (p *peer) auth(user, password string, want wire.Opcode) frame {
	p.t.Helper()
	p.send(wire.OpAuth, 2, &wire.Auth{Username: user, Password: password})
	f := p.read()
	if f.hdr.Opcode != want {
		p.t.Fatalf("AUTH answered with %v %+v, want %v", f.hdr.Opcode, f.body, want)
	}
	return f
}

func (p *peer) send(op wire.Opcode, id uint64, body wire.Body) {
	p.t.Helper()
	if _, err := p.c.Write(wire.AppendBodyFrame(nil, op, id, body)); err != nil {
		p.t.Fatalf("send %v: %v", op, err)
	}
}

func (p *peer) request(op wire.Opcode, body wire.Body) uint64 {
	p.nextID++
	p.send(op, p.nextID, body)
	return p.nextID
}

// read returns the next frame, skipping pings (answered) within 10 s.
func (p *peer) read() frame {
	p.t.Helper()
	f, err := p.tryRead(10 * time.Second)
	if err != nil {
		p.t.Fatalf("read: %v", err)
	}
	return f
}

func (p *peer) tryRead(timeout time.Duration) (frame, error) {
	deadline := time.Now().Add(timeout) // fixed: answered pings must not extend it
	for {
		p.c.SetReadDeadline(deadline)
		hdr, payload, err := wire.ReadFrame(p.r, wire.PayloadSizeBytesMaxDefault, nil)
		if err != nil {
			return frame{}, err
		}
		body, err := wire.DecodeBody(hdr.Opcode, payload)
		if err != nil {
			p.t.Fatalf("broker sent an undecodable %v: %v", hdr.Opcode, err)
		}
		if hdr.Opcode == wire.OpPing {
			p.send(wire.OpPong, hdr.RequestID, &wire.Pong{})
			continue
		}
		return frame{hdr: hdr, body: body}, nil
	}
}

// expect reads until a frame with op arrives (keeping others in backlog).
func (p *peer) expect(op wire.Opcode) frame {
	p.t.Helper()
	for i, f := range p.backlog {
		if f.hdr.Opcode == op {
			p.backlog = append(p.backlog[:i], p.backlog[i+1:]...)
			return f
		}
	}
	for {
		f := p.read()
		if f.hdr.Opcode == op {
			return f
		}
		p.backlog = append(p.backlog, f)
	}
}

// reply waits for the reply to request id.
func (p *peer) reply(id uint64) frame {
	p.t.Helper()
	for i, f := range p.backlog {
		if f.hdr.RequestID == id && f.hdr.Opcode != wire.OpDeliver {
			p.backlog = append(p.backlog[:i], p.backlog[i+1:]...)
			return f
		}
	}
	for {
		f := p.read()
		if f.hdr.RequestID == id && f.hdr.Opcode != wire.OpDeliver {
			return f
		}
		p.backlog = append(p.backlog, f)
	}
}

func (p *peer) publish(topic string, payload string, confirm bool) uint64 {
	p.t.Helper()
	id := p.request(wire.OpPublish, &wire.Publish{Topic: topic, RequireConfirm: confirm, Payload: []byte(payload), PublishedMs: 1})
	if !confirm {
		return 0
	}
	f := p.reply(id)
	ok, isOk := f.body.(wire.PublishOk)
	if !isOk {
		p.t.Fatalf("publish answered with %v %+v", f.hdr.Opcode, f.body)
	}
	return ok.Offset
}

func (p *peer) subscribe(topic string, partition uint32, prefetch uint32, autoAck bool) uint64 {
	p.t.Helper()
	id := p.request(wire.OpSubscribe, &wire.Subscribe{Topic: topic, Partition: partition, Prefetch: prefetch, AutoAck: autoAck})
	f := p.reply(id)
	ok, isOk := f.body.(wire.SubscribeOk)
	if !isOk {
		p.t.Fatalf("subscribe answered with %v %+v", f.hdr.Opcode, f.body)
	}
	return ok.SubID
}

func (p *peer) deliver() *wire.Deliver {
	p.t.Helper()
	d := p.expect(wire.OpDeliver).body.(wire.Deliver)
	return &d
}

// noDelivery asserts nothing is delivered for d.
func (p *peer) noDelivery(d time.Duration) {
	p.t.Helper()
	for _, f := range p.backlog {
		if f.hdr.Opcode == wire.OpDeliver {
			p.t.Fatalf("unexpected delivery %+v", f.body)
		}
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		f, err := p.tryRead(time.Until(deadline))
		if err != nil {
			return
		}
		if f.hdr.Opcode == wire.OpDeliver {
			p.t.Fatalf("unexpected delivery %+v", f.body)
		}
		p.backlog = append(p.backlog, f)
	}
}

func (p *peer) ack(topic string, partition uint32, tags ...uint64) {
	p.send(wire.OpAck, 0, &wire.Ack{Topic: topic, Partition: partition, Tags: tags})
}

func (p *peer) nack(topic string, partition uint32, requeue bool, notBefore wire.Optional[uint64], tags ...uint64) {
	p.send(wire.OpNack, 0, &wire.Nack{Topic: topic, Partition: partition, Tags: tags, Requeue: requeue, NotBeforeMs: notBefore})
}

func header(d *wire.Deliver, key string) string {
	for _, h := range d.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}
