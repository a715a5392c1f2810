package e2e

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/transport/wire"
)

// rawConn is a hand-driven socket for feeding the broker bad bytes.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func rawDial(t *testing.T, s *server) *rawConn {
	c, err := net.Dial("tcp", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

func (rc *rawConn) write(b []byte) { rc.c.Write(b) }

// readFrame returns the next frame, or an error when the broker closed.
func (rc *rawConn) readFrame() (wire.Header, []byte, error) {
	rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	return wire.ReadFrame(rc.r, wire.PayloadSizeBytesMaxDefault, nil)
}

func (rc *rawConn) expectError(code wire.ErrorCode) {
	rc.t.Helper()
	for {
		h, payload, err := rc.readFrame()
		if err != nil {
			rc.t.Fatalf("want ERROR %d, got %v", code, err)
		}
		if h.Opcode == wire.OpPing {
			continue
		}
		e, derr := wire.DecodeErrorBody(payload)
		if derr != nil || e.Code != code {
			rc.t.Fatalf("want ERROR %d, got %v %+v", code, h.Opcode, e)
		}
		return
	}
}

func (rc *rawConn) expectClosed() {
	rc.t.Helper()
	for {
		h, _, err := rc.readFrame()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				rc.t.Fatal("connection still open, want closed")
			}
			return
		}
		if h.Opcode != wire.OpPing {
			continue
		}
	}
}

func (rc *rawConn) login() {
	rc.write(wire.AppendBodyFrame(nil, wire.OpHello, 1, &wire.Hello{ClientName: "raw", ProtocolVersion: 1}))
	if h, _, err := rc.readFrame(); err != nil || h.Opcode != wire.OpHelloOk {
		rc.t.Fatalf("hello: %v %v", h.Opcode, err)
	}
	rc.write(wire.AppendBodyFrame(nil, wire.OpAuth, 2, &wire.Auth{Username: "fibril", Password: "fibril"}))
	if h, _, err := rc.readFrame(); err != nil || h.Opcode != wire.OpAuthOk {
		rc.t.Fatalf("auth: %v %v", h.Opcode, err)
	}
}

// TestBadInputLeavesOthersUntouched feeds one bad connection after another
// while a good client keeps publishing and consuming: each bad one gets the
// protocol's error or a clean close, the broker never hangs or dies, and
// stored data is intact.
func TestBadInputLeavesOthersUntouched(t *testing.T) {
	s := startServer(t, t.TempDir())
	good := dial(t, s, client.TransportQUIC)
	ctx := ctxT(t)
	pub := good.Publisher("steady")
	publish := func(i int) {
		if _, err := pub.PublishConfirmed(ctx, client.Text(strconv.Itoa(i))); err != nil {
			t.Fatalf("good client publish %d: %v", i, err)
		}
	}
	n := 0

	t.Run("truncated frame then close", func(t *testing.T) {
		rc := rawDial(t, s)
		rc.login()
		frame := wire.AppendBodyFrame(nil, wire.OpPublish, 9, &wire.Publish{Topic: "steady", Payload: []byte("x")})
		rc.write(frame[:len(frame)-3])
		rc.c.(*net.TCPConn).CloseWrite()
		rc.expectClosed()
	})
	publish(n)
	n++

	t.Run("bad magic", func(t *testing.T) {
		rc := rawDial(t, s)
		rc.login()
		frame := wire.AppendBodyFrame(nil, wire.OpPublish, 9, &wire.Publish{Topic: "steady", Payload: []byte("x")})
		copy(frame[wire.HeaderSizeBytes:], "XXXX")
		rc.write(frame)
		rc.expectError(wire.CodeInvalid)
	})
	publish(n)
	n++

	t.Run("garbage instead of a hello", func(t *testing.T) {
		rc := rawDial(t, s)
		rc.write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		rc.expectClosed()
	})
	publish(n)
	n++

	t.Run("unknown opcode and trailing bytes", func(t *testing.T) {
		rc := rawDial(t, s)
		rc.login()
		rc.write(wire.AppendFrame(nil, wire.Opcode(4242), 0, 11, []byte{1, 2, 3}))
		rc.expectError(wire.CodeInvalid)
		frame := wire.AppendBodyFrame(nil, wire.OpTopology, 12, &wire.Topology{})
		frame = append(frame, 0)
		frame[3]++
		rc.write(frame)
		rc.expectError(wire.CodeInvalid)
	})
	publish(n)
	n++

	t.Run("oversized payload", func(t *testing.T) {
		rc := rawDial(t, s)
		rc.login()
		big := wire.AppendBodyFrame(nil, wire.OpPublish, 13, &wire.Publish{Topic: "steady", RequireConfirm: true, Payload: make([]byte, 17<<20)})
		rc.write(big)
		rc.expectError(wire.CodeInvalid) // over the 16 MiB payload limit
	})
	publish(n)
	n++

	t.Run("wrong password", func(t *testing.T) {
		rc := rawDial(t, s)
		rc.write(wire.AppendBodyFrame(nil, wire.OpHello, 1, &wire.Hello{ClientName: "raw", ProtocolVersion: 1}))
		rc.readFrame()
		rc.write(wire.AppendBodyFrame(nil, wire.OpAuth, 2, &wire.Auth{Username: "fibril", Password: "nope"}))
		rc.expectError(wire.CodeUnauthorized)
		rc.expectClosed()
	})
	publish(n)
	n++

	// Stored data is untouched: everything the good client confirmed arrives, in order.
	sub, err := good.SubscribeTopic(ctx, "steady", client.SubscribeOptions{Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		d := next(t, sub, 5*time.Second)
		if d.Text() != strconv.Itoa(i) {
			t.Fatalf("delivery %d is %q", i, d.Text())
		}
		d.Complete(ctx)
	}
}

// TestPlaintextOnTLSPortGets426 runs the broker with TLS on TCP: a plaintext
// HELLO gets the 426 error frame, and a TLS client works.
func TestPlaintextOnTLSPortGets426(t *testing.T) {
	s := startServer(t, t.TempDir(), "--tcp-tls")
	rc := rawDial(t, s)
	rc.write(wire.AppendBodyFrame(nil, wire.OpHello, 77, &wire.Hello{ClientName: "raw", ProtocolVersion: 1}))
	h, payload, err := rc.readFrame()
	if err != nil {
		t.Fatal(err)
	}
	e, _ := wire.DecodeErrorBody(payload)
	if h.Opcode != wire.OpError || e.Code != wire.CodeTLSRequired || h.RequestID != 77 {
		t.Fatalf("want ERROR 426 echoing 77, got %v %+v id %d", h.Opcode, e, h.RequestID)
	}
	rc.expectClosed()
	// The Go client over TCP without TLS gets the typed error.
	_, err = client.Dial(context.Background(), s.addr(), client.ClientOptions{Transport: client.TransportTCP,
		Credentials: &client.Credentials{Username: "fibril", Password: "fibril"}, DisableAutoReconnect: true})
	if err == nil || !errorsIs(err, client.ErrTLSRequiredByBroker) {
		t.Fatalf("want ErrTLSRequiredByBroker, got %v", err)
	}
	// With TLS (local trust published by the broker), it works.
	c, err := client.Dial(context.Background(), s.addr(), client.ClientOptions{Transport: client.TransportTCP,
		TLS: &client.TLSOptions{}, Credentials: &client.Credentials{Username: "fibril", Password: "fibril"}, DisableAutoReconnect: true})
	if err != nil {
		t.Fatalf("TLS over TCP: %v", err)
	}
	defer c.Close()
	if _, err := c.Publisher("tls").PublishConfirmed(context.Background(), client.Text("x")); err != nil {
		t.Fatal(err)
	}
}

// TestKeyRoutingAndPartitions: 1000 messages with one key land on one
// partition in order; keyless ones spread over all partitions.
func TestKeyRoutingAndPartitions(t *testing.T) {
	s := startServer(t, t.TempDir())
	c := dial(t, s, client.TransportTCP)
	ctx := ctxT(t)
	if n, err := c.DeclareQueue(ctx, client.NewQueueConfig("orders").PartitionCount(4)); err != nil || n != 4 {
		t.Fatalf("declare: %d %v", n, err)
	}
	pub := c.Publisher("orders")
	for i := 0; i < 1000; i++ {
		if _, err := pub.PublishConfirmed(ctx, client.Text(strconv.Itoa(i)).PartitionKey("order-42")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 40; i++ {
		pub.PublishConfirmed(ctx, client.Text("keyless"))
	}
	want := wire.PartitionForKey([]byte("order-42"), 4)
	sub, _ := c.SubscribeTopic(ctx, "orders", client.SubscribeOptions{Prefetch: 2000})
	next42 := 0
	keylessPartitions := map[uint32]int{}
	for i := 0; i < 1040; i++ {
		d := next(t, sub, 5*time.Second)
		if d.Text() == "keyless" {
			keylessPartitions[d.Partition]++
		} else {
			if d.Partition != want {
				t.Fatalf("keyed message on partition %d, want %d", d.Partition, want)
			}
			if d.Text() != strconv.Itoa(next42) {
				t.Fatalf("keyed message %q out of order, want %d", d.Text(), next42)
			}
			next42++
		}
		d.Complete(ctx)
	}
	if len(keylessPartitions) != 4 {
		t.Fatalf("keyless messages reached partitions %v, want all 4", keylessPartitions)
	}
}
