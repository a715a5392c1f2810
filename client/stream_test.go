package client_test

// Plexus streams against the scripted fake (PROTOCOL §5.11, §5.14, §5.15, §7.5):
// declare, the exact SUBSCRIBE_STREAM encoding, fan-in, ACK as cursor commit,
// 404, resubscribe after a reconnect outside reconcile, and pattern attach.

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/transport/wire"
)

func receiveStream(t *testing.T, sub *client.StreamSubscription, n int) []*client.Delivery {
	t.Helper()
	out := make([]*client.Delivery, 0, n)
	timeout := time.After(testTimeout)
	for len(out) < n {
		select {
		case d, ok := <-sub.Deliveries():
			if !ok {
				t.Fatalf("stream subscription closed after %d of %d: %v", len(out), n, sub.CloseReason())
			}
			out = append(out, d)
		case <-timeout:
			t.Fatalf("got %d of %d stream deliveries", len(out), n)
		}
	}
	return out
}

func TestDeclarePlexus(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{topology: map[topicKey]uint32{{"jobs", ""}: 1}})
	c := fb.dial(t, client.ClientOptions{})
	ctx := testContext(t)

	count, err := c.DeclarePlexus(ctx, client.NewStreamConfig("ticks"))
	if err != nil || count != 1 {
		t.Fatalf("DeclarePlexus: %d, %v", count, err)
	}
	bare := fb.expect(t, wire.OpDeclarePlexus).body.(wire.DeclarePlexus)
	if bare != (wire.DeclarePlexus{Topic: "ticks", Durability: wire.DurabilityDurable}) {
		t.Fatalf("DECLARE_PLEXUS %+v, want durable with every option absent", bare)
	}

	cfg := client.NewStreamConfig("events").PartitionCount(3).Durability(client.DurabilitySpeculative).
		MaxAgeMs(60_000).MaxBytes(1 << 20).MaxRecords(500).ReplicationFactor(2)
	if count, err = c.DeclarePlexus(ctx, cfg); err != nil || count != 3 {
		t.Fatalf("DeclarePlexus events: %d, %v", count, err)
	}
	full := fb.expect(t, wire.OpDeclarePlexus).body.(wire.DeclarePlexus)
	want := wire.DeclarePlexus{Topic: "events", PartitionCount: wire.Some[uint32](3), Durability: wire.DurabilitySpeculative,
		RetentionAgeMsMax: wire.Some[uint64](60_000), RetentionBytesMax: wire.Some[uint64](1 << 20),
		RetentionRecordsMax: wire.Some[uint64](500), ReplicationFactor: wire.Some[uint32](2)}
	if full != want {
		t.Fatalf("DECLARE_PLEXUS %+v, want %+v", full, want)
	}

	// Idempotent: a re-declare answers the existing count.
	if count, err = c.DeclarePlexus(ctx, client.NewStreamConfig("events").PartitionCount(5)); err != nil || count != 3 {
		t.Fatalf("re-declare: %d, %v; want the existing 3", count, err)
	}
	fb.expect(t, wire.OpDeclarePlexus)

	// A queue topic: 400, typed.
	_, err = c.DeclarePlexus(ctx, client.NewStreamConfig("jobs"))
	var brokerErr *client.BrokerError
	if !errors.As(err, &brokerErr) || brokerErr.Code != client.CodeInvalid {
		t.Fatalf("declare over a queue: %v, want BrokerError 400", err)
	}
	if _, err := c.DeclarePlexus(ctx, client.NewStreamConfig("x").PartitionCount(0)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("partition count 0: %v", err)
	}
}

func TestStreamSubscribeEncodesStartFilterAndOptions(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{streams: map[string]uint32{"s": 1}})
	c := fb.dial(t, client.ClientOptions{})
	ctx := testContext(t)
	at := time.UnixMilli(1_700_000_123_456)
	cases := []struct {
		name  string
		start client.StreamStart
		want  wire.StreamStart
	}{
		{"zero value is latest", client.StreamStart{}, wire.StreamStart{Kind: wire.StreamStartLatest}},
		{"latest", client.StartLatest(), wire.StreamStart{Kind: wire.StreamStartLatest}},
		{"earliest", client.StartEarliest(), wire.StreamStart{Kind: wire.StreamStartEarliest}},
		{"offset", client.StartOffset(42), wire.StreamStart{Kind: wire.StreamStartOffset, Value: 42}},
		{"n back", client.StartNBack(7), wire.StreamStart{Kind: wire.StreamStartNBack, Value: 7}},
		{"by time", client.StartByTime(at), wire.StreamStart{Kind: wire.StreamStartByTime, Value: 1_700_000_123_456}},
	}
	for _, tc := range cases {
		sub, err := c.SubscribeStream(ctx, "s", client.StreamOptions{Start: tc.start})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := fb.expect(t, wire.OpSubscribeStream).body.(wire.SubscribeStream)
		if got.Start != tc.want || got.DurableName.Present || len(got.Filter) != 0 || got.AutoAck {
			t.Fatalf("%s: SUBSCRIBE_STREAM %+v, want start %+v", tc.name, got, tc.want)
		}
		_ = sub.Close()
	}

	filter := []client.FilterClause{{Key: "region", Pattern: "eu-*"}, {Key: "kind", Pattern: "order"}, {Key: "a", Pattern: "*"}}
	if _, err := c.SubscribeStream(ctx, "s", client.StreamOptions{Durable: "billing", Filter: filter, AutoAck: true, Prefetch: 9,
		Start: client.StartOffset(3)}); err != nil {
		t.Fatal(err)
	}
	got := fb.expect(t, wire.OpSubscribeStream).body.(wire.SubscribeStream)
	wantFilter := []wire.KeyValue{{Key: "region", Value: "eu-*"}, {Key: "kind", Value: "order"}, {Key: "a", Value: "*"}}
	if got.DurableName != wire.Some("billing") || !slices.Equal(got.Filter, wantFilter) || !got.AutoAck || got.Prefetch != 9 ||
		got.Topic != "s" || got.Partition != 0 {
		t.Fatalf("durable SUBSCRIBE_STREAM %+v", got)
	}
	if _, err := c.SubscribeStream(ctx, "s", client.StreamOptions{Filter: []client.FilterClause{{Pattern: "x"}}}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("empty filter key: %v", err)
	}
}

func TestStreamFanInAckAndSpeculative(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		const partitions, each = 3, 2
		fb := newFakeBroker(t, kind, fakeScript{streams: map[string]uint32{"prices": partitions}, streamRecordsEach: each,
			deliveryHeaders: wire.Headers{{Key: "fibril.speculative", Value: "1"}, {Key: "x", Value: "y"}}})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		sub, err := c.SubscribeStream(ctx, "prices", client.StreamOptions{Durable: "d", Start: client.StartEarliest()})
		if err != nil {
			t.Fatal(err)
		}
		var subscribed []uint32
		for range partitions {
			subscribed = append(subscribed, fb.expect(t, wire.OpSubscribeStream).body.(wire.SubscribeStream).Partition)
		}
		slices.Sort(subscribed)
		if !slices.Equal(subscribed, []uint32{0, 1, 2}) {
			t.Fatalf("subscribed partitions %v", subscribed)
		}
		perPartition := map[uint32][]uint64{}
		for _, d := range receiveStream(t, sub, partitions*each) {
			if d.Topic != "prices" || d.Group != "" || d.Tag != d.Offset || !d.Stream() || !d.Speculative() || d.Headers["x"] != "y" {
				t.Fatalf("stream delivery %+v", d)
			}
			perPartition[d.Partition] = append(perPartition[d.Partition], d.Offset)
		}
		for p := range uint32(partitions) {
			if !slices.Equal(perPartition[p], []uint64{0, 1}) {
				t.Fatalf("partition %d delivered offsets %v, want [0 1] in order", p, perPartition[p])
			}
		}

		fb.pushStreamRecord("prices", 1, 2)
		d := receiveStream(t, sub, 1)[0]
		if d.Speculative() {
			t.Fatal("a record without fibril.speculative reported speculative")
		}
		if err := d.Retry(ctx); !errors.Is(err, client.ErrStreamSettlement) {
			t.Fatalf("Retry on a stream delivery: %v", err)
		}
		if err := d.Fail(ctx); !errors.Is(err, client.ErrStreamSettlement) {
			t.Fatalf("Fail on a stream delivery: %v", err)
		}
		if err := d.RetryAfter(ctx, time.Second); !errors.Is(err, client.ErrStreamSettlement) {
			t.Fatalf("RetryAfter on a stream delivery: %v", err)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		ack := fb.expect(t, wire.OpAck).body.(wire.Ack) // no NACK came before it
		if !ackEqual(ack, wire.Ack{Topic: "prices", Partition: 1, Tags: []uint64{2}}) {
			t.Fatalf("ACK %+v, want prices/1 tag 2 with no group", ack)
		}
	})
}

func TestStreamAutoAckSendsNoAcks(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{streams: map[string]uint32{"s": 1}, streamRecordsEach: 1})
	c := fb.dial(t, client.ClientOptions{})
	ctx := testContext(t)
	sub, err := c.SubscribeStream(ctx, "s", client.StreamOptions{Durable: "n", AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	fb.expect(t, wire.OpSubscribeStream)
	d := receiveStream(t, sub, 1)[0]
	if err := d.Ack(ctx); !errors.Is(err, client.ErrAutoAck) {
		t.Fatalf("Ack on auto-ack: %v", err)
	}
	// The next frame after the ack attempt is this marker, not an ACK.
	if _, err := c.DeclarePlexus(ctx, client.NewStreamConfig("marker")); err != nil {
		t.Fatal(err)
	}
	fb.expect(t, wire.OpDeclarePlexus)
}

func TestStreamNotFound(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{standalone: true})
		c := fb.dial(t, client.ClientOptions{})
		_, err := c.SubscribeStream(testContext(t), "nope", client.StreamOptions{})
		var notFound *client.StreamNotFoundError
		var brokerErr *client.BrokerError
		if !errors.Is(err, client.ErrStreamNotFound) || !errors.As(err, &notFound) || notFound.Topic != "nope" ||
			!errors.As(err, &brokerErr) || brokerErr.Code != client.CodeNotFound {
			t.Fatalf("SubscribeStream of an undeclared stream: %v", err)
		}
		// Learning the count created nothing: no declare of any kind was sent.
		if f := fb.next(t); f.h.Opcode != wire.OpSubscribeStream {
			t.Fatalf("client sent %s", f.h.Opcode)
		}
		if _, err := c.DeclarePlexus(testContext(t), client.NewStreamConfig("marker")); err != nil {
			t.Fatal(err)
		}
		if f := fb.nextAny(t); f.h.Opcode != wire.OpDeclarePlexus {
			t.Fatalf("client sent %s before the marker, want nothing", f.h.Opcode)
		}
	})
}

func TestStreamPartitionsProbedOnStandalone(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{standalone: true, streams: map[string]uint32{"s": 3}, streamRecordsEach: 1})
	c := fb.dial(t, client.ClientOptions{})
	sub, err := c.SubscribeStream(testContext(t), "s", client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for want := range uint32(4) { // 0, 1, 2, then 3 answers 404
		f := fb.nextAny(t)
		if got, ok := f.body.(wire.SubscribeStream); !ok || got.Partition != want {
			t.Fatalf("frame %d: %s %+v, want SUBSCRIBE_STREAM partition %d", want, f.h.Opcode, f.body, want)
		}
	}
	seen := map[uint32]bool{}
	for _, d := range receiveStream(t, sub, 3) {
		seen[d.Partition] = true
	}
	if len(seen) != 3 {
		t.Fatalf("partitions delivered %v", seen)
	}
	if got := c.Streams()["s"]; got != 3 {
		t.Fatalf("catalogue count %d, want 3", got)
	}
}

func TestStreamSubscriptionClosedByBroker(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{streams: map[string]uint32{"s": 2}})
	c := fb.dial(t, client.ClientOptions{})
	sub, err := c.SubscribeStream(testContext(t), "s", client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fb.pushAll(wire.OpSubscriptionClosed, wire.SubscriptionClosed{SubID: 2, Code: wire.ReasonTopicDeleted, Message: "the stream was deleted"})
	for range sub.Deliveries() {
	}
	var closed *client.SubscriptionClosedError
	if !errors.As(sub.CloseReason(), &closed) || closed.Code != client.ReasonTopicDeleted || closed.SubID != 2 {
		t.Fatalf("CloseReason %v", sub.CloseReason())
	}
}

// TestStreamResubscribeAfterReconnect: streams are not in RECONCILE_CLIENT; the
// client subscribes each partition again, durable by name, ephemeral from the
// offset after the last record it delivered, so the application sees no gap
// and no duplicate.
func TestStreamResubscribeAfterReconnect(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{streams: map[string]uint32{"eph": 1, "dur": 1}, streamRecordsEach: 2,
			topology: map[topicKey]uint32{{"jobs", ""}: 1}})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		queue, err := c.SubscribeTopic(ctx, "jobs", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fb.expect(t, wire.OpSubscribe)
		eph, err := c.SubscribeStream(ctx, "eph", client.StreamOptions{Start: client.StartEarliest()})
		if err != nil {
			t.Fatal(err)
		}
		fb.expect(t, wire.OpSubscribeStream)
		dur, err := c.SubscribeStream(ctx, "dur", client.StreamOptions{Durable: "keeper"})
		if err != nil {
			t.Fatal(err)
		}
		fb.expect(t, wire.OpSubscribeStream)
		got := receiveStream(t, eph, 2)
		receiveStream(t, dur, 2)
		fb.setCursor("keeper", "dur", 0, 1) // the broker's cursor: one record acked

		if _, err := c.Reconnect(ctx); err != nil {
			t.Fatal(err)
		}
		reconcile := fb.expect(t, wire.OpReconcileClient).body.(wire.ReconcileClient)
		if len(reconcile.Subscriptions) != 1 || reconcile.Subscriptions[0].Topic != "jobs" {
			t.Fatalf("RECONCILE_CLIENT %+v, want the queue subscription only", reconcile.Subscriptions)
		}
		resubscribed := map[string]wire.SubscribeStream{}
		for range 2 {
			s := fb.expect(t, wire.OpSubscribeStream).body.(wire.SubscribeStream)
			resubscribed[s.Topic] = s
		}
		if s := resubscribed["eph"]; s.DurableName.Present || s.Start != (wire.StreamStart{Kind: wire.StreamStartOffset, Value: 2}) {
			t.Fatalf("ephemeral resubscribe %+v, want start offset 2 (after the last delivered, 1)", s)
		}
		if s := resubscribed["dur"]; s.DurableName != wire.Some("keeper") {
			t.Fatalf("durable resubscribe %+v, want the same name", s)
		}
		// The same channels carry on: ephemeral 2, 3 (no gap, no duplicate);
		// durable from its cursor, 1, 2.
		for _, d := range receiveStream(t, eph, 2) {
			got = append(got, d)
		}
		var offsets []uint64
		for _, d := range got {
			offsets = append(offsets, d.Offset)
		}
		if !slices.Equal(offsets, []uint64{0, 1, 2, 3}) {
			t.Fatalf("ephemeral offsets across the reconnect %v", offsets)
		}
		if d := receiveStream(t, dur, 1)[0]; d.Offset != 1 {
			t.Fatalf("durable resumed at %d, want the cursor 1", d.Offset)
		}
		if queue.CloseReason() != nil {
			t.Fatalf("queue subscription closed: %v", queue.CloseReason())
		}
	})
}

// TestStreamOnlyResumeAfterLostConnection: a client holding only stream
// subscriptions reconnects by itself when the connection drops, sends no
// RECONCILE_CLIENT, and resubscribes.
func TestStreamOnlyResumeAfterLostConnection(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{streams: map[string]uint32{"eph": 1}, streamRecordsEach: 1})
	c := fb.dial(t, client.ClientOptions{})
	sub, err := c.SubscribeStream(testContext(t), "eph", client.StreamOptions{Start: client.StartOffset(5)})
	if err != nil {
		t.Fatal(err)
	}
	fb.expect(t, wire.OpSubscribeStream)
	if d := receiveStream(t, sub, 1)[0]; d.Offset != 5 {
		t.Fatalf("first record at %d, want 5", d.Offset)
	}
	fb.dropConnections()
	if f := fb.nextFrame(t); f.h.Opcode != wire.OpHello {
		t.Fatalf("after the drop the client sent %s, want HELLO", f.h.Opcode)
	}
	f := fb.nextFrame(t) // not RECONCILE_CLIENT: no queue subscription lives
	s, ok := f.body.(wire.SubscribeStream)
	if !ok || s.Start != (wire.StreamStart{Kind: wire.StreamStartOffset, Value: 6}) {
		t.Fatalf("after HELLO: %s %+v, want SUBSCRIBE_STREAM from offset 6", f.h.Opcode, f.body)
	}
	if d := receiveStream(t, sub, 1)[0]; d.Offset != 6 {
		t.Fatalf("record after the reconnect at %d, want 6", d.Offset)
	}
}

func TestStreamPatternAttachesLaterStreams(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{streams: map[string]uint32{"events.a": 1, "other": 1}, streamRecordsEach: 1})
	c := fb.dial(t, client.ClientOptions{})
	ctx := testContext(t)
	sub, err := c.SubscribeStreamPattern(ctx, "events.*", client.StreamOptions{Start: client.StartEarliest(),
		PatternPollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if d := receiveStream(t, sub, 1)[0]; d.Topic != "events.a" {
		t.Fatalf("delivery from %s, want events.a", d.Topic)
	}
	// Declared later by someone else, listed by TOPOLOGY.
	fb.update(func(s *fakeScript) { s.streams["events.b"] = 2 })
	seen := map[string]bool{}
	for _, d := range receiveStream(t, sub, 2) {
		if d.Topic != "events.b" {
			t.Fatalf("delivery from %s, want events.b", d.Topic)
		}
		seen[d.Topic+string(rune('0'+d.Partition))] = true
	}
	if len(seen) != 2 {
		t.Fatalf("events.b partitions seen %v, want both", seen)
	}
	topics := sub.Topics()
	slices.Sort(topics)
	if !slices.Equal(topics, []string{"events.a", "events.b"}) {
		t.Fatalf("attached %v", topics)
	}
}

func TestStreamPatternOnStandaloneSeesOwnDeclares(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{standalone: true, streamRecordsEach: 1})
	c := fb.dial(t, client.ClientOptions{})
	ctx := testContext(t)
	sub, err := c.SubscribeStreamPattern(ctx, "*.log", client.StreamOptions{PatternPollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclarePlexus(ctx, client.NewStreamConfig("app.log")); err != nil {
		t.Fatal(err)
	}
	if d := receiveStream(t, sub, 1)[0]; d.Topic != "app.log" {
		t.Fatalf("delivery from %s", d.Topic)
	}
	if _, err := c.SubscribeStreamPattern(ctx, "Bad*", client.StreamOptions{}); !errors.Is(err, client.ErrInvalidName) {
		t.Fatalf("bad pattern: %v", err)
	}
}

// A publisher to a stream on a standalone broker (TOPOLOGY lists nothing,
// the bare DECLARE_QUEUE is refused: the topic is a stream) learns the
// count by subscribing partitions with a filter that matches nothing, until
// a 404, and key-routes over it.
func TestPublisherLearnsAStreamsCountOnAStandaloneBroker(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{standalone: true, streams: map[string]uint32{"ticks": 3}})
		c := fb.dial(t, client.ClientOptions{})
		if _, err := c.Publisher("ticks").PublishConfirmed(testContext(t), client.Text("t").PartitionKey("sensor-9")); err != nil {
			t.Fatal(err)
		}
		fb.expectOp(t, wire.OpDeclareQueue)
		for want := uint32(0); want < 4; want++ {
			probe := fb.expectOp(t, wire.OpSubscribeStream).body.(wire.SubscribeStream)
			if probe.Topic != "ticks" || probe.Partition != want || len(probe.Filter) != 1 || probe.DurableName.Present ||
				!strings.HasPrefix(probe.Filter[0].Key, "fibril.") {
				t.Fatalf("probe %d: %+v, want an ephemeral subscribe of partition %d filtered on a broker-only header", want, probe, want)
			}
		}
		p := fb.expectOp(t, wire.OpPublish).body.(wire.Publish)
		if want := wire.PartitionForKey([]byte("sensor-9"), 3); p.Partition != want {
			t.Fatalf("keyed publish went to partition %d, want %d of 3", p.Partition, want)
		}
	})
}
