package e2e

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
)

// TestQueueBehaviours runs the client-visible SPEC §1-2 behaviours over both
// transports against one real server process.
func TestQueueBehaviours(t *testing.T) {
	s := startServer(t, t.TempDir())
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := dial(t, s, tr)
			ctx := ctxT(t)
			q := func(name string) string { return name + "-" + tr }

			t.Run("confirm-deliver-complete", func(t *testing.T) {
				off, err := c.Publisher(q("basic")).PublishConfirmed(ctx, client.Text("hello"))
				if err != nil || off != 0 {
					t.Fatalf("confirm: %d %v", off, err)
				}
				sub, err := c.SubscribeTopic(ctx, q("basic"), client.SubscribeOptions{Prefetch: 4})
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Close()
				d := next(t, sub, 5*time.Second)
				if d.Text() != "hello" || d.Retries != 0 {
					t.Fatalf("delivery %+v", d)
				}
				if err := d.Complete(ctx); err != nil {
					t.Fatal(err)
				}
				nothing(t, sub, 2500*time.Millisecond) // past the 2 s lease: acked is final
			})

			t.Run("retry-header-and-fail-to-dlq", func(t *testing.T) {
				_, err := c.DeclareQueue(ctx, client.NewQueueConfig(q("work")).Dlq(client.DlqCustom(q("work-dlq"), "")).DlqMaxRetries(3))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Publisher(q("work")).PublishConfirmed(ctx, client.Text("job").Header("x-user", "7")); err != nil {
					t.Fatal(err)
				}
				sub, _ := c.SubscribeTopic(ctx, q("work"), client.SubscribeOptions{})
				defer sub.Close()
				d := next(t, sub, 5*time.Second)
				d.Retry(ctx)
				d = next(t, sub, 5*time.Second)
				if d.Retries != 1 || d.Headers["fibril.retries"] != "1" {
					t.Fatalf("retry: %+v", d)
				}
				d.Fail(ctx)
				dlq, _ := c.SubscribeTopic(ctx, q("work-dlq"), client.SubscribeOptions{})
				defer dlq.Close()
				dl := next(t, dlq, 5*time.Second)
				want := map[string]string{"x-user": "7", "stroma.dlq.reason": "terminal_nack", "stroma.dlq.source_topic": q("work"),
					"stroma.dlq.source_offset": "0", "stroma.dlq.retry_count": "1"}
				for k, v := range want {
					if dl.Headers[k] != v {
						t.Errorf("dead-letter header %s = %q, want %q", k, dl.Headers[k], v)
					}
				}
				if dl.Headers["stroma.dlq.dead_lettered_at_ms"] == "" {
					t.Error("no stroma.dlq.dead_lettered_at_ms")
				}
			})

			t.Run("retry-after-timing", func(t *testing.T) {
				c.Publisher(q("later")).PublishConfirmed(ctx, client.Text("x"))
				sub, _ := c.SubscribeTopic(ctx, q("later"), client.SubscribeOptions{})
				defer sub.Close()
				d := next(t, sub, 5*time.Second)
				start := time.Now()
				d.RetryAfter(ctx, 1200*time.Millisecond)
				d = next(t, sub, 5*time.Second)
				if waited := time.Since(start); waited < 1150*time.Millisecond {
					t.Fatalf("retry-after 1200 ms came back after %v", waited)
				}
				d.Complete(ctx)
			})

			t.Run("delayed-publish", func(t *testing.T) {
				sub, _ := c.SubscribeTopic(ctx, q("delayed"), client.SubscribeOptions{})
				defer sub.Close()
				notBefore := time.Now().Add(1500 * time.Millisecond)
				if _, err := c.Publisher(q("delayed")).PublishDelayedConfirmed(ctx, client.Text("d"), notBefore); err != nil {
					t.Fatal(err)
				}
				d := next(t, sub, 5*time.Second)
				if time.Now().Before(notBefore.Add(-20 * time.Millisecond)) {
					t.Fatalf("delivered before not_before")
				}
				d.Complete(ctx)
			})

			t.Run("ttl-expiry-to-dlq", func(t *testing.T) {
				c.DeclareQueue(ctx, client.NewQueueConfig(q("ttl")).Dlq(client.DlqCustom(q("ttl-dlq"), "")))
				if _, err := c.Publisher(q("ttl")).Expiring(time.Second).PublishConfirmed(ctx, client.Text("short")); err != nil {
					t.Fatal(err)
				}
				dlq, _ := c.SubscribeTopic(ctx, q("ttl-dlq"), client.SubscribeOptions{})
				defer dlq.Close()
				dl := next(t, dlq, 5*time.Second)
				if dl.Headers["stroma.dlq.reason"] != "expired" || dl.Text() != "short" {
					t.Fatalf("expired copy %+v", dl)
				}
			})

			t.Run("prefetch-bound", func(t *testing.T) {
				pub := c.Publisher(q("pf"))
				for i := 0; i < 6; i++ {
					pub.PublishConfirmed(ctx, client.Text(strconv.Itoa(i)))
				}
				sub, _ := c.SubscribeTopic(ctx, q("pf"), client.SubscribeOptions{Prefetch: 2})
				defer sub.Close()
				a, b := next(t, sub, 5*time.Second), next(t, sub, 5*time.Second)
				nothing(t, sub, 500*time.Millisecond)
				a.Complete(ctx)
				next(t, sub, 5*time.Second).Complete(ctx)
				b.Complete(ctx)
			})

			t.Run("reserved-headers-rejected", func(t *testing.T) {
				_, err := c.Publisher(q("res")).PublishConfirmed(ctx, client.Text("x").Header("stroma.dlq.reason", "x"))
				var reserved *client.ReservedHeaderError
				if !errors.As(err, &reserved) {
					t.Fatalf("want a reserved-header error, got %v", err)
				}
			})
		})
	}
}

// TestRequeueOnSubscriptionEnd: A takes 100 with prefetch 100 and goes away
// (grace 0 here); B gets all 100 at once.
func TestRequeueOnSubscriptionEnd(t *testing.T) {
	s := startServer(t, t.TempDir(), "--reconnect-grace-ms", "0", "--lease-ms", "60000")
	ctx := ctxT(t)
	pubc := dial(t, s, client.TransportTCP)
	for i := 0; i < 100; i++ {
		if _, err := pubc.Publisher("handoff").PublishConfirmed(ctx, client.Text(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	a := dial(t, s, client.TransportQUIC)
	subA, _ := a.SubscribeTopic(ctx, "handoff", client.SubscribeOptions{Prefetch: 100})
	for i := 0; i < 100; i++ {
		next(t, subA, 5*time.Second)
	}
	a.Close()
	b := dial(t, s, client.TransportQUIC)
	subB, _ := b.SubscribeTopic(ctx, "handoff", client.SubscribeOptions{Prefetch: 100})
	start := time.Now()
	for i := 0; i < 100; i++ {
		d := next(t, subB, 5*time.Second)
		if d.Retries != 1 {
			t.Fatalf("requeued delivery retries %d, want 1", d.Retries)
		}
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("handoff took %v; the 60 s lease must not be what frees them", took)
	}
}

// TestLeaseSurvivesKill: a message leased but not acked before SIGKILL is
// redelivered after restart, once its lease ends.
func TestLeaseSurvivesKill(t *testing.T) {
	s := startServer(t, t.TempDir())
	ctx := ctxT(t)
	c := dial(t, s, client.TransportTCP)
	c.Publisher("leased").PublishConfirmed(ctx, client.Text("m"))
	sub, _ := c.SubscribeTopic(ctx, "leased", client.SubscribeOptions{})
	first := next(t, sub, 5*time.Second)
	time.Sleep(100 * time.Millisecond) // the lease entry reaches the disk
	s.restart()
	c2 := dial(t, s, client.TransportQUIC)
	sub2, _ := c2.SubscribeTopic(context.Background(), "leased", client.SubscribeOptions{})
	d := next(t, sub2, 10*time.Second)
	if d.Offset != first.Offset || d.Retries != 1 {
		t.Fatalf("after restart got offset %d retries %d, want offset %d retries 1", d.Offset, d.Retries, first.Offset)
	}
}
