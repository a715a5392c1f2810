package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
)

// Plexus streams against a real server process (SPEC 5, PROTOCOL 7.5), over
// both transports: fan-out, durable cursors across a reconnect and across a
// SIGKILL, every start kind, filters, tiers.

func nextRecord(t testing.TB, sub *client.StreamSubscription, within time.Duration) *client.Delivery {
	t.Helper()
	select {
	case d, ok := <-sub.Deliveries():
		if !ok {
			t.Fatalf("stream subscription closed: %v", sub.CloseReason())
		}
		return d
	case <-time.After(within):
		t.Fatalf("no stream record within %v", within)
	}
	return nil
}

func noRecord(t testing.TB, sub *client.StreamSubscription, within time.Duration) {
	t.Helper()
	select {
	case d := <-sub.Deliveries():
		t.Fatalf("unexpected record at offset %d (%q)", d.Offset, d.Payload)
	case <-time.After(within):
	}
}

// publishRecords publishes n confirmed records "<prefix>-<i>" to topic.
func publishRecords(t testing.TB, ctx context.Context, c *client.Client, topic, prefix string, n int, headers func(i int) map[string]string) {
	t.Helper()
	pub := c.Publisher(topic)
	for i := 0; i < n; i++ {
		m := client.Text(fmt.Sprintf("%s-%d", prefix, i))
		if headers != nil {
			for k, v := range headers(i) {
				m = m.Header(k, v)
			}
		}
		if _, err := pub.PublishConfirmed(ctx, m); err != nil {
			t.Fatalf("publish %d to %s: %v", i, topic, err)
		}
	}
}

// expectRecords reads n records and checks they are offsets from..from+n-1
// with the payloads publishRecords gave them.
func expectRecords(t testing.TB, sub *client.StreamSubscription, prefix string, from uint64, n int, ack bool) {
	t.Helper()
	for i := 0; i < n; i++ {
		d := nextRecord(t, sub, 5*time.Second)
		want := from + uint64(i)
		if d.Offset != want || d.Tag != want || d.Text() != fmt.Sprintf("%s-%d", prefix, want) || !d.Stream() {
			t.Fatalf("record %d: offset %d tag %d %q, want offset %d", i, d.Offset, d.Tag, d.Text(), want)
		}
		if ack {
			if err := d.Ack(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestStreams(t *testing.T) {
	s := startServer(t, t.TempDir())
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := dial(t, s, tr)
			ctx := ctxT(t)
			name := func(n string) string { return n + "-" + tr }

			t.Run("fan-out-to-three", func(t *testing.T) {
				topic := name("fan")
				if n, err := c.DeclarePlexus(ctx, client.NewStreamConfig(topic)); err != nil || n != 1 {
					t.Fatalf("declare: %d %v", n, err)
				}
				var subs []*client.StreamSubscription
				for i := 0; i < 3; i++ {
					sub, err := dial(t, s, tr).SubscribeStream(ctx, topic, client.StreamOptions{Start: client.StartEarliest()})
					if err != nil {
						t.Fatal(err)
					}
					subs = append(subs, sub)
				}
				publishRecords(t, ctx, c, topic, "r", 30, nil)
				for _, sub := range subs {
					expectRecords(t, sub, "r", 0, 30, false)
				}
			})

			t.Run("queue-and-stream-never-both", func(t *testing.T) {
				if _, err := c.DeclareQueue(ctx, client.NewQueueConfig(name("fan"))); err == nil {
					t.Fatal("a queue declared over a stream's topic")
				}
				if _, err := c.SubscribeStream(ctx, name("never-declared"), client.StreamOptions{}); !errorsIs(err, client.ErrStreamNotFound) {
					t.Fatalf("subscribe to an undeclared stream: %v", err)
				}
			})

			t.Run("durable-cursor-across-reconnect", func(t *testing.T) {
				topic := name("cursor")
				if _, err := c.DeclarePlexus(ctx, client.NewStreamConfig(topic)); err != nil {
					t.Fatal(err)
				}
				publishRecords(t, ctx, c, topic, "r", 10, nil)
				reader := dial(t, s, tr)
				sub, err := reader.SubscribeStream(ctx, topic, client.StreamOptions{Durable: "worker"})
				if err != nil {
					t.Fatal(err)
				}
				expectRecords(t, sub, "r", 0, 5, true)
				time.Sleep(300 * time.Millisecond) // the commits reach the log
				reader.Close()
				sub, err = dial(t, s, tr).SubscribeStream(ctx, topic, client.StreamOptions{Durable: "worker"})
				if err != nil {
					t.Fatal(err)
				}
				expectRecords(t, sub, "r", 5, 5, true)
				// Another name is independent: it starts at the oldest record.
				other, err := dial(t, s, tr).SubscribeStream(ctx, topic, client.StreamOptions{Durable: "auditor"})
				if err != nil {
					t.Fatal(err)
				}
				expectRecords(t, other, "r", 0, 10, false)
			})

			t.Run("start-kinds", func(t *testing.T) {
				topic := name("starts")
				if _, err := c.DeclarePlexus(ctx, client.NewStreamConfig(topic)); err != nil {
					t.Fatal(err)
				}
				publishRecords(t, ctx, c, topic, "r", 10, nil)
				open := func(start client.StreamStart) *client.StreamSubscription {
					sub, err := dial(t, s, tr).SubscribeStream(ctx, topic, client.StreamOptions{Start: start})
					if err != nil {
						t.Fatal(err)
					}
					return sub
				}
				latest := open(client.StartLatest())
				earliest := open(client.StartEarliest())
				offset := open(client.StartOffset(7))
				clamped := open(client.StartOffset(1000))
				nBack := open(client.StartNBack(3))
				byTime := open(client.StartByTime(time.Now().Add(-time.Hour)))
				noRecord(t, latest, 300*time.Millisecond)
				expectRecords(t, earliest, "r", 0, 10, false)
				expectRecords(t, offset, "r", 7, 3, false)
				expectRecords(t, nBack, "r", 7, 3, false)
				expectRecords(t, byTime, "r", 0, 10, false)
				noRecord(t, clamped, 300*time.Millisecond)
				publishRecords(t, ctx, c, topic, "r2", 1, nil)
				for _, sub := range []*client.StreamSubscription{latest, clamped, earliest} {
					d := nextRecord(t, sub, 5*time.Second)
					if d.Offset != 10 || d.Text() != "r2-0" {
						t.Fatalf("live record: offset %d %q", d.Offset, d.Text())
					}
				}
			})

			t.Run("filter", func(t *testing.T) {
				topic := name("filtered")
				if _, err := c.DeclarePlexus(ctx, client.NewStreamConfig(topic)); err != nil {
					t.Fatal(err)
				}
				colors := []string{"red", "green", "rose", "", "ruby"}
				publishRecords(t, ctx, c, topic, "r", len(colors), func(i int) map[string]string {
					if colors[i] == "" {
						return nil // no header: never matches
					}
					return map[string]string{"color": colors[i]}
				})
				sub, err := dial(t, s, tr).SubscribeStream(ctx, topic, client.StreamOptions{Start: client.StartEarliest(),
					Filter: []client.FilterClause{{Key: "color", Pattern: "r*"}}})
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range []uint64{0, 2, 4} {
					if d := nextRecord(t, sub, 5*time.Second); d.Offset != want {
						t.Fatalf("filtered record at offset %d, want %d", d.Offset, want)
					}
				}
				noRecord(t, sub, 300*time.Millisecond)
			})

			t.Run("tiers", func(t *testing.T) {
				for _, tier := range []client.Durability{client.DurabilityEphemeral, client.DurabilitySpeculative, client.DurabilityDurable} {
					topic := name(fmt.Sprintf("tier%d", tier))
					if _, err := c.DeclarePlexus(ctx, client.NewStreamConfig(topic).Durability(tier)); err != nil {
						t.Fatal(err)
					}
					sub, err := dial(t, s, tr).SubscribeStream(ctx, topic, client.StreamOptions{Start: client.StartEarliest()})
					if err != nil {
						t.Fatal(err)
					}
					publishRecords(t, ctx, c, topic, "r", 5, nil)
					for i := 0; i < 5; i++ {
						d := nextRecord(t, sub, 5*time.Second)
						if d.Speculative() && tier != client.DurabilitySpeculative {
							t.Fatalf("tier %d: a record flagged speculative", tier)
						}
					}
				}
			})
		})
	}
}

// TestStreamCursorSurvivesKill: records and a durable cursor's commits
// survive a SIGKILL of the broker.
func TestStreamCursorSurvivesKill(t *testing.T) {
	s := startServer(t, t.TempDir())
	c := dial(t, s, client.TransportTCP)
	ctx := ctxT(t)
	if _, err := c.DeclarePlexus(ctx, client.NewStreamConfig("kept")); err != nil {
		t.Fatal(err)
	}
	publishRecords(t, ctx, c, "kept", "r", 20, nil)
	sub, err := c.SubscribeStream(ctx, "kept", client.StreamOptions{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	expectRecords(t, sub, "r", 0, 8, true)
	time.Sleep(300 * time.Millisecond) // the commits reach the log
	c.Close()
	s.kill()
	s.restart()
	c = dial(t, s, client.TransportQUIC)
	sub, err = c.SubscribeStream(ctx, "kept", client.StreamOptions{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	expectRecords(t, sub, "r", 8, 12, true)
}

// TestStreamRetentionByRecords: a stream bounded by max_records drops whole
// sealed segments (4,096 records each by default) from its front while it
// holds more than the bound, and says the same after a restart.
func TestStreamRetentionByRecords(t *testing.T) {
	const segment, bound, total = 4096, 4096, 3*4096 + 100
	s := startServer(t, t.TempDir())
	c := dial(t, s, client.TransportTCP)
	ctx := ctxT(t)
	if _, err := c.DeclarePlexus(ctx, client.NewStreamConfig("bounded").MaxRecords(bound)); err != nil {
		t.Fatal(err)
	}
	pub := c.Publisher("bounded")
	var pending []*client.Confirmation
	for i := 0; i < total; i++ {
		conf, err := pub.PublishWithConfirmation(ctx, client.Text(fmt.Sprintf("r-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, conf)
		if len(pending) == 512 || i == total-1 {
			for _, p := range pending {
				if _, err := p.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			pending = pending[:0]
		}
	}
	oldest := func(transport string) uint64 {
		t.Helper()
		var first uint64
		// Retention runs as its rounds become durable, one truncation at a
		// time: the first record an earliest reader gets moves by segments
		// until the stream is within its bound.
		eventually(t, 10_000, 100, func() bool {
			// A connection each: the protocol has no unsubscribe, and a
			// session holds one stream subscription per partition.
			sub, err := dial(t, s, transport).SubscribeStream(ctx, "bounded", client.StreamOptions{Start: client.StartEarliest()})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			d := nextRecord(t, sub, 5*time.Second)
			first = d.Offset
			return total-first <= bound
		})
		return first
	}
	first := oldest(client.TransportTCP)
	// max_records keeps at most the bound, in whole segments: as many front
	// segments go as the bound needs, and not one more.
	if first%segment != 0 || total-first > bound || total-(first-segment) <= bound {
		t.Fatalf("oldest retained offset %d of %d records: want the segment boundary that leaves at most %d, dropping no more than needed",
			first, total, bound)
	}
	s.restart()
	if again := oldest(client.TransportQUIC); again < first {
		t.Fatalf("after a restart the oldest retained offset went back from %d to %d", first, again)
	}
}
