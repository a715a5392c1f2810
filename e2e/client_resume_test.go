package e2e

// The Go client resuming its session against a real `fibril serve` (SPEC §8
// "Client reconnect", PROTOCOL §7.7): a consumer's TCP connection is cut under it
// by a loopback proxy. Within the grace it resumes, settles the delivery it held,
// and that message is not redelivered; past the grace the message redelivers and
// a late settle of the old delivery returns ErrStaleDelivery.

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
)

// cutProxy forwards loopback TCP to a broker; cut closes every connection it
// carries, as a dropped network would, while new connections still pass.
// Between hold and release, new connections wait before the proxy dials the
// broker (a client's dial hangs rather than fails, as over a slow network).
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	held   chan struct{} // closed by release; nil when not holding
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.release(); p.cut() })
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(down)
	}
}

func (p *cutProxy) forward(down net.Conn) {
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	if held != nil {
		<-held
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		down.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, down, up)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, down); up.Close(); down.Close() }()
	go func() { _, _ = io.Copy(down, up); up.Close(); down.Close() }()
}

// hold makes new connections wait, until release, before the proxy dials
// the broker.
func (p *cutProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

func (p *cutProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func dialVia(t *testing.T, p *cutProxy, autoReconnect bool) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, p.addr(), client.ClientOptions{Transport: client.TransportTCP,
		Credentials:          &client.Credentials{Username: "fibril", Password: "fibril"},
		DisableAutoReconnect: !autoReconnect})
	if err != nil {
		t.Fatalf("dial through the proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func publishText(t *testing.T, c *client.Client, topic, text string) {
	t.Helper()
	if _, err := c.Publisher(topic).PublishConfirmed(ctxT(t), client.Text(text)); err != nil {
		t.Fatalf("publish %q: %v", text, err)
	}
}

func TestClientResumesAfterCutConnection(t *testing.T) {
	const graceMs = 1500
	s := startServer(t, t.TempDir(), "--reconnect-grace-ms", "1500", "--lease-ms", "60000")
	ctx := ctxT(t)
	producer := dial(t, s, client.TransportTCP)
	for _, topic := range []string{"resume-within", "resume-after"} {
		if _, err := producer.DeclareQueue(ctx, client.NewQueueConfig(topic)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("within the grace", func(t *testing.T) {
		proxy := newCutProxy(t, s.addr())
		consumer := dialVia(t, proxy, true)
		// Prefetch 1: while the first message is unsettled nothing else arrives,
		// so seeing the second proves the first was acked, not requeued.
		sub, err := consumer.SubscribeTopic(ctx, "resume-within", client.SubscribeOptions{Prefetch: 1})
		if err != nil {
			t.Fatal(err)
		}
		publishText(t, producer, "resume-within", "first")
		held := next(t, sub, 5*time.Second)
		proxy.cut()
		eventually(t, 5000, 10, func() bool {
			info := consumer.Connection()
			return info.Generation == 2 && !info.Closed
		})
		if info := consumer.Connection(); info.ResumeOutcome != client.ResumeResumed {
			t.Fatalf("outcome after the cut: %v, want resumed\nserver log:\n%s", info.ResumeOutcome, s.log.String())
		}
		if err := held.Complete(ctx); err != nil {
			t.Fatalf("Complete of the held delivery after the resume: %v", err)
		}
		publishText(t, producer, "resume-within", "second")
		if d := next(t, sub, 5*time.Second); d.Text() != "second" {
			t.Fatalf("after the resumed ack got %q (offset %d, retries %d), want \"second\"", d.Text(), d.Offset, d.Retries)
		} else if err := d.Complete(ctx); err != nil {
			t.Fatal(err)
		}
		nothing(t, sub, 3*graceMs/2*time.Millisecond)
	})

	t.Run("after the grace", func(t *testing.T) {
		proxy := newCutProxy(t, s.addr())
		consumer := dialVia(t, proxy, false) // stays away until told to reconnect
		sub, err := consumer.SubscribeTopic(ctx, "resume-after", client.SubscribeOptions{Prefetch: 1})
		if err != nil {
			t.Fatal(err)
		}
		publishText(t, producer, "resume-after", "orphan")
		held := next(t, sub, 5*time.Second)
		proxy.cut()
		if _, open := <-sub.Deliveries(); open || !errors.Is(sub.CloseReason(), client.ErrConnectionLost) {
			t.Fatalf("subscription after the cut: open=%v reason=%v", open, sub.CloseReason())
		}
		watcher := dial(t, s, client.TransportTCP)
		wsub, err := watcher.SubscribeTopic(ctx, "resume-after", client.SubscribeOptions{Prefetch: 1})
		if err != nil {
			t.Fatal(err)
		}
		// The grace expires and the message redelivers, to the other consumer.
		again := next(t, wsub, graceMs*time.Millisecond+10*time.Second)
		if again.Text() != "orphan" || again.Offset != held.Offset {
			t.Fatalf("redelivered %q at offset %d, want the held offset %d", again.Text(), again.Offset, held.Offset)
		}
		outcome, err := consumer.Reconnect(ctx)
		if err != nil {
			t.Fatalf("Reconnect after the grace: %v", err)
		}
		if outcome == client.ResumeResumed {
			t.Fatal("the broker resumed a session whose grace had expired")
		}
		if err := held.Complete(ctx); !errors.Is(err, client.ErrStaleDelivery) {
			t.Fatalf("late Complete of the old delivery: %v, want ErrStaleDelivery", err)
		}
		if err := again.Complete(ctx); err != nil {
			t.Fatal(err)
		}
		nothing(t, wsub, 500*time.Millisecond)
	})
}
