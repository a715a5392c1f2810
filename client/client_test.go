package client_test

// CLIENT-SIDE PROTOCOL TESTS against the scripted fakeBroker (see
// fakebroker_test.go): handshake, auth, publish, routing, subscriptions,
// settlements, heartbeats and TLS mismatches, over TCP and QUIC on loopback.
// End-to-end tests against the real broker come later.

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/certs"
	"github.com/fibril-go/fibril/transport/wire"
)

func TestHandshakeHelloAuthAndRequestIDs(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		creds := &client.Credentials{Username: "alice", Password: "s3cret"}
		fb := newFakeBroker(t, kind, fakeScript{credentials: creds})
		c := fb.dial(t, client.ClientOptions{
			Credentials: creds, ClientName: "handshake-test", HeartbeatInterval: 20 * time.Millisecond,
		})
		hello := fb.expectOp(t, wire.OpHello)
		if hello.h.RequestID != 1 {
			t.Fatalf("HELLO request id %d, want 1", hello.h.RequestID)
		}
		body := hello.body.(wire.Hello)
		if body.ClientName != "handshake-test" || body.ProtocolVersion != 1 || body.Resume.Present {
			t.Fatalf("HELLO %+v", body)
		}
		auth := fb.expectOp(t, wire.OpAuth)
		if auth.h.RequestID != 2 || auth.body.(wire.Auth) != (wire.Auth{Username: "alice", Password: "s3cret"}) {
			t.Fatalf("AUTH id %d body %+v", auth.h.RequestID, auth.body)
		}
		if c.ServerName() != "fake-broker" {
			t.Fatalf("ServerName %q", c.ServerName())
		}
		// Every later request, PINGs included, numbers from 4 upward.
		ping := fb.expectOp(t, wire.OpPing)
		if ping.h.RequestID < 4 {
			t.Fatalf("PING request id %d, want >= 4", ping.h.RequestID)
		}
		if _, err := c.Publisher("t").PublishConfirmed(testContext(t), client.Text("x")); err != nil {
			t.Fatalf("PublishConfirmed: %v", err)
		}
		if pub := fb.expectOp(t, wire.OpPublish); pub.h.RequestID < 4 || pub.h.RequestID == ping.h.RequestID {
			t.Fatalf("PUBLISH request id %d (PING had %d)", pub.h.RequestID, ping.h.RequestID)
		}
	})
}

func TestComplianceMarkerMismatch(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{compliance: "v=1;x"})
		_, err := fb.tryDial(t, client.ClientOptions{})
		if !errors.Is(err, client.ErrComplianceMismatch) {
			t.Fatalf("Dial: %v, want ErrComplianceMismatch", err)
		}
		if !strings.Contains(err.Error(), "compliance marker mismatch") || client.IsRetryable(err) {
			t.Fatalf("error %q (retryable=%v)", err, client.IsRetryable(err))
		}
	})
}

func TestHelloErr(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{
		helloError: &wire.ErrorBody{Code: wire.CodeUnsupportedVersion, Message: "unsupported protocol version"},
	})
	_, err := fb.tryDial(t, client.ClientOptions{})
	var brokerErr *client.BrokerError
	if !errors.As(err, &brokerErr) || brokerErr.Code != 1 || brokerErr.Opcode != "HELLO_ERR" {
		t.Fatalf("Dial: %v, want HELLO_ERR code 1", err)
	}
}

func TestAuthFailure(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{credentials: &client.Credentials{Username: "alice", Password: "right"}})
		_, err := fb.tryDial(t, client.ClientOptions{Credentials: &client.Credentials{Username: "alice", Password: "wrong"}})
		var brokerErr *client.BrokerError
		if !errors.As(err, &brokerErr) || brokerErr.Code != client.CodeUnauthorized || brokerErr.Opcode != "AUTH_ERR" {
			t.Fatalf("Dial with a wrong password: %v, want AUTH_ERR 401", err)
		}
		if !errors.Is(err, client.ErrUnauthorized) || client.IsRetryable(err) {
			t.Fatalf("401 must match ErrUnauthorized and not be retryable: %v", err)
		}
	})
}

func TestPublishConfirmedOffsets(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		pub := c.Publisher("orders")
		before := time.Now().UnixMilli()
		for want := range uint64(3) {
			offset, err := pub.PublishConfirmed(ctx, client.Text("hello").Header("x-a", "1"))
			if err != nil {
				t.Fatalf("PublishConfirmed: %v", err)
			}
			if offset != want {
				t.Fatalf("offset %d, want %d", offset, want)
			}
			f := fb.expect(t, wire.OpPublish).body.(wire.Publish)
			if f.Topic != "orders" || f.Group.Present || f.Partition != 0 || !f.RequireConfirm ||
				f.ContentType.Kind != wire.ContentText || string(f.Payload) != "hello" || f.TTLMs.Present {
				t.Fatalf("PUBLISH %+v", f)
			}
			if v, _ := f.Headers.Get("x-a"); v != "1" {
				t.Fatalf("headers %+v", f.Headers)
			}
			if int64(f.PublishedMs) < before || int64(f.PublishedMs) > time.Now().UnixMilli() {
				t.Fatalf("published %d not in [%d, now]", f.PublishedMs, before)
			}
		}
		if err := pub.Publish(ctx, client.JSON(map[string]int{"n": 1})); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		f := fb.expect(t, wire.OpPublish).body.(wire.Publish)
		if f.RequireConfirm || f.ContentType.Kind != wire.ContentJSON || string(f.Payload) != `{"n":1}` {
			t.Fatalf("unconfirmed PUBLISH %+v", f)
		}
		// "default" and "" are one namespace and travel as an absent group.
		if _, err := c.PublisherGrouped("orders", "default").PublishConfirmed(ctx, client.Raw([]byte{1})); err != nil {
			t.Fatal(err)
		}
		if f := fb.expect(t, wire.OpPublish).body.(wire.Publish); f.Group.Present || f.ContentType.Kind != wire.ContentNone {
			t.Fatalf("PUBLISH %+v", f)
		}
	})
}

// Confirms come back in the reverse order of the publishes; each Confirmation
// still gets its own offset, matched by request id.
func TestPipelinedConfirmations(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		const publishes = 200
		fb := newFakeBroker(t, kind, fakeScript{reverseConfirms: 50})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		pub := c.Publisher("pipe")
		confs := make([]*client.Confirmation, publishes)
		for i := range confs {
			conf, err := pub.PublishWithConfirmation(ctx, client.Text("m"))
			if err != nil {
				t.Fatalf("PublishWithConfirmation %d: %v", i, err)
			}
			confs[i] = conf
		}
		for i, conf := range slices.Backward(confs) {
			offset, err := conf.Wait(ctx)
			if err != nil || offset != uint64(i) {
				t.Fatalf("confirmation %d: offset %d, %v", i, offset, err)
			}
			if again, _ := conf.Wait(ctx); again != offset {
				t.Fatalf("second Wait gave %d, first %d", again, offset)
			}
		}
	})
}

func TestDelayedPublish(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		pub := c.Publisher("later")
		notBefore := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
		if err := pub.PublishDelayed(ctx, client.Text("d").Header("k", "v"), notBefore); err != nil {
			t.Fatalf("PublishDelayed: %v", err)
		}
		f := fb.expect(t, wire.OpPublishDelayed).body.(wire.PublishDelayed)
		if f.NotBeforeMs != uint64(notBefore.UnixMilli()) || f.RequireConfirm || f.Topic != "later" || string(f.Payload) != "d" {
			t.Fatalf("PUBLISH_DELAYED %+v, want not_before %d", f, notBefore.UnixMilli())
		}
		offset, err := pub.PublishDelayedConfirmed(ctx, client.Text("d2"), notBefore)
		if err != nil || offset != 1 {
			t.Fatalf("PublishDelayedConfirmed: %d, %v", offset, err)
		}
		if f := fb.expect(t, wire.OpPublishDelayed).body.(wire.PublishDelayed); !f.RequireConfirm || f.NotBeforeMs != uint64(notBefore.UnixMilli()) {
			t.Fatalf("confirmed PUBLISH_DELAYED %+v", f)
		}
		// PUBLISH_DELAYED has no ttl field: an expiring publisher refuses it.
		if err := pub.Expiring(time.Second).PublishDelayed(ctx, client.Text("x"), notBefore); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("expiring delayed publish: %v, want ErrInvalidArgument", err)
		}
	})
}

func TestExpiringPublisherSetsTTL(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		pub := c.Publisher("ttl")
		if _, err := pub.Expiring(1500*time.Millisecond).PublishConfirmed(ctx, client.Text("x")); err != nil {
			t.Fatal(err)
		}
		if f := fb.expect(t, wire.OpPublish).body.(wire.Publish); f.TTLMs != wire.Some(uint64(1500)) {
			t.Fatalf("ttl_ms %+v, want 1500", f.TTLMs)
		}
		if err := pub.Publish(ctx, client.Text("y")); err != nil {
			t.Fatal(err)
		}
		if f := fb.expect(t, wire.OpPublish).body.(wire.Publish); f.TTLMs.Present {
			t.Fatalf("the base publisher sent ttl_ms %+v", f.TTLMs)
		}
		if err := pub.Expiring(0).Publish(ctx, client.Text("z")); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("zero TTL: %v", err)
		}
	})
}

func TestKeyRoutingByTopology(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		key := topicKey{"orders", ""}
		fb := newFakeBroker(t, kind, fakeScript{
			topology: map[topicKey]uint32{key: 4},
			versions: map[topicKey]uint64{key: 5},
		})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		pub := c.Publisher("orders")
		for _, k := range []string{"order-42", "a", "hello world", "partition-key"} {
			if _, err := pub.PublishConfirmed(ctx, client.Text(k).PartitionKey(k)); err != nil {
				t.Fatal(err)
			}
			f := fb.expect(t, wire.OpPublish).body.(wire.Publish)
			want := wire.PartitionForKey([]byte(k), 4)
			if f.Partition != want || string(f.PartitionKey.Or(nil)) != k || f.PartitioningVersion != 5 {
				t.Fatalf("key %q: partition %d key %q version %d; want partition %d version 5",
					k, f.Partition, f.PartitionKey.Or(nil), f.PartitioningVersion, want)
			}
		}
		// The canonical value of PROTOCOL §2.2: "order-42" mod 4 = 0.
		if wire.PartitionForKey([]byte("order-42"), 4) != 0 {
			t.Fatal("order-42 does not map to partition 0 of 4")
		}
		var partitions []uint32
		for range 8 {
			if err := pub.Publish(ctx, client.Text("rr")); err != nil {
				t.Fatal(err)
			}
			f := fb.expect(t, wire.OpPublish).body.(wire.Publish)
			if f.PartitionKey.Present {
				t.Fatal("a keyless publish carried a partition key")
			}
			partitions = append(partitions, f.Partition)
		}
		if !slices.Equal(partitions, []uint32{0, 1, 2, 3, 0, 1, 2, 3}) {
			t.Fatalf("keyless partitions %v, want round-robin", partitions)
		}
	})
}

// A TOPOLOGY_UPDATE push is applied and acknowledged with its generation, echoing
// the push's request id.
func TestTopologyUpdatePush(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{})
	c := fb.dial(t, client.ClientOptions{})
	var update wire.TopologySnapshot
	update.Generation = 3
	for p := range uint32(2) {
		update.Queues = append(update.Queues, wire.TopologyQueue{Topic: "pushed", Partition: p, PartitionCount: 2, PartitioningVersion: 8})
	}
	id := fb.pushAll(wire.OpTopologyUpdate, wire.TopologyUpdate(update))
	ack := fb.expectOp(t, wire.OpTopologyUpdateAck)
	if ack.h.RequestID != id || ack.body.(wire.TopologyUpdateAck).Generation != 3 {
		t.Fatalf("TOPOLOGY_UPDATE_ACK id %d body %+v, want id %d generation 3", ack.h.RequestID, ack.body, id)
	}
	key := "partition-key" // FNV-1a mod 2 = 1
	if _, err := c.Publisher("pushed").PublishConfirmed(testContext(t), client.Text("x").PartitionKey(key)); err != nil {
		t.Fatal(err)
	}
	f := fb.expect(t, wire.OpPublish).body.(wire.Publish)
	if f.Partition != wire.PartitionForKey([]byte(key), 2) || f.PartitioningVersion != 8 {
		t.Fatalf("PUBLISH partition %d version %d after the push", f.Partition, f.PartitioningVersion)
	}
}

func TestDeclareQueue(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		cfg := client.NewQueueConfig("jobs").Group("g").PartitionCount(3).
			Dlq(client.DlqCustom("jobs-dlq", "")).DlqMaxRetries(7).DefaultMessageTTL(30 * time.Second)
		count, err := c.DeclareQueue(ctx, cfg)
		if err != nil || count != 3 {
			t.Fatalf("DeclareQueue: %d, %v", count, err)
		}
		f := fb.expect(t, wire.OpDeclareQueue).body.(wire.DeclareQueue)
		want := wire.DeclareQueue{
			Topic: "jobs", Group: wire.Some("g"),
			DLQPolicy:      wire.Some(wire.DLQPolicy{Kind: wire.DLQCustom, Topic: "jobs-dlq"}),
			DLQRetriesMax:  wire.Some(uint32(7)),
			PartitionCount: wire.Some(uint32(3)), DefaultMessageTTLMs: wire.Some(uint64(30000)),
		}
		if f != want {
			t.Fatalf("DECLARE_QUEUE %+v, want %+v", f, want)
		}
		// The declared count routes the next keyed publish without a TOPOLOGY round trip.
		_, topologyBefore := fb.counts()
		if _, err := c.PublisherGrouped("jobs", "g").PublishConfirmed(ctx, client.Text("j").PartitionKey("hello world")); err != nil {
			t.Fatal(err)
		}
		p := fb.expect(t, wire.OpPublish).body.(wire.Publish)
		if p.Partition != wire.PartitionForKey([]byte("hello world"), 3) || p.Group != wire.Some("g") {
			t.Fatalf("PUBLISH partition %d group %+v", p.Partition, p.Group)
		}
		if _, topologyAfter := fb.counts(); topologyAfter != topologyBefore {
			t.Fatalf("publish after DeclareQueue sent %d TOPOLOGY requests", topologyAfter-topologyBefore)
		}
		// Minimal declaration: everything absent.
		if _, err := c.DeclareQueue(ctx, client.NewQueueConfig("plain")); err != nil {
			t.Fatal(err)
		}
		if f := fb.expectOp(t, wire.OpDeclareQueue).body.(wire.DeclareQueue); f != (wire.DeclareQueue{Topic: "plain"}) {
			t.Fatalf("minimal DECLARE_QUEUE %+v", f)
		}
		if _, err := c.DeclareQueue(ctx, client.NewQueueConfig("Bad Name")); !errors.Is(err, client.ErrInvalidName) {
			t.Fatalf("bad name: %v", err)
		}
	})
}

func TestReservedHeadersRefused(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		pub := c.Publisher("h")
		for _, key := range []string{"fibril.retries", "fibril.speculative", "stroma.dlq.reason"} {
			_, err := pub.PublishConfirmed(ctx, client.Text("x").Header(key, "1"))
			var reserved *client.ReservedHeaderError
			if !errors.Is(err, client.ErrReservedHeader) || !errors.As(err, &reserved) || reserved.Key != key {
				t.Fatalf("header %q: %v, want *ReservedHeaderError", key, err)
			}
			if err := pub.PublishDelayed(ctx, client.Text("x").Header(key, "1"), time.Now()); !errors.Is(err, client.ErrReservedHeader) {
				t.Fatalf("delayed with header %q: %v", key, err)
			}
		}
		// fibril.client.* is the carve-out; and nothing refused reached the wire.
		if _, err := pub.PublishConfirmed(ctx, client.Text("ok").Header("fibril.client.producer_id", "p1")); err != nil {
			t.Fatalf("fibril.client.* header: %v", err)
		}
		f := fb.expect(t, wire.OpPublish).body.(wire.Publish)
		if v, _ := f.Headers.Get("fibril.client.producer_id"); v != "p1" || string(f.Payload) != "ok" {
			t.Fatalf("first PUBLISH on the wire %+v, want the allowed one", f)
		}
	})
}

func TestRedirectFollowedForConfirmedPublish(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{redirectTopics: map[string]uint64{"moved": 9, "stuck": 9}})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		offset, err := c.Publisher("moved").PublishConfirmed(ctx, client.Text("x"))
		if err != nil || offset != 0 {
			t.Fatalf("PublishConfirmed through a redirect: %d, %v", offset, err)
		}
		first := fb.expect(t, wire.OpPublish).body.(wire.Publish)
		second := fb.expect(t, wire.OpPublish).body.(wire.Publish)
		if first.PartitioningVersion != 0 || second.PartitioningVersion != 9 {
			t.Fatalf("versions %d then %d, want 0 then 9", first.PartitioningVersion, second.PartitioningVersion)
		}

		noRedirects := fb.dial(t, client.ClientOptions{MaxRedirects: -1})
		_, err = noRedirects.Publisher("stuck").PublishConfirmed(ctx, client.Text("x"))
		var redirectErr *client.RedirectError
		if !errors.As(err, &redirectErr) || !client.IsRetryable(err) || redirectErr.Owners[0] != "127.0.0.1:9876" {
			t.Fatalf("with MaxRedirects -1: %v, want a retryable *RedirectError", err)
		}
	})
}

func TestSubscribeFanInAndSettlements(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		const partitions, perPartition = 3, 2
		fb := newFakeBroker(t, kind, fakeScript{
			topology:        map[topicKey]uint32{{"work", "g"}: partitions},
			deliveriesEach:  perPartition,
			deliveryHeaders: wire.Headers{{Key: "fibril.retries", Value: "2"}, {Key: "x-user", Value: "u"}},
		})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		sub, err := c.SubscribeTopic(ctx, "work", client.SubscribeOptions{Group: "g", Prefetch: 4})
		if err != nil {
			t.Fatalf("SubscribeTopic: %v", err)
		}
		var subscribed []uint32
		for range partitions {
			s := fb.expect(t, wire.OpSubscribe).body.(wire.Subscribe)
			if s.Topic != "work" || s.Group != wire.Some("g") || s.Prefetch != 4 || s.AutoAck || s.ConsumerGroup.Present {
				t.Fatalf("SUBSCRIBE %+v", s)
			}
			subscribed = append(subscribed, s.Partition)
		}
		slices.Sort(subscribed)
		if !slices.Equal(subscribed, []uint32{0, 1, 2}) {
			t.Fatalf("subscribed partitions %v", subscribed)
		}

		deliveries := receive(t, sub, partitions*perPartition)
		seenTags := map[uint64]bool{}
		perPart := map[uint32]int{}
		for _, d := range deliveries {
			if d.Topic != "work" || d.Group != "g" || d.Retries != 2 || d.Headers["x-user"] != "u" ||
				d.ContentType != wire.MIMEText || d.Text() != "hello" ||
				!d.PublishedAt.Equal(time.UnixMilli(1_700_000_000_000)) || !d.ReceivedAt.Equal(time.UnixMilli(1_700_000_000_005)) {
				t.Fatalf("delivery %+v", d)
			}
			if seenTags[d.Tag] {
				t.Fatalf("tag %d delivered twice", d.Tag)
			}
			seenTags[d.Tag] = true
			perPart[d.Partition]++
		}
		if len(perPart) != partitions {
			t.Fatalf("deliveries came from partitions %v, want all %d fanned in", perPart, partitions)
		}

		complete, retry, retryAfter, fail := deliveries[0], deliveries[1], deliveries[2], deliveries[3]
		if err := complete.Complete(ctx); err != nil {
			t.Fatal(err)
		}
		ack := fb.expect(t, wire.OpAck)
		wantAck := wire.Ack{Topic: "work", Group: wire.Some("g"), Partition: complete.Partition, Tags: []uint64{complete.Tag}}
		if !ackEqual(ack.body.(wire.Ack), wantAck) || ack.h.RequestID != fb.deliverRequestID(complete.Tag) {
			t.Fatalf("ACK id %d %+v, want id %d %+v", ack.h.RequestID, ack.body, fb.deliverRequestID(complete.Tag), wantAck)
		}
		if err := complete.Complete(ctx); !errors.Is(err, client.ErrAlreadySettled) {
			t.Fatalf("second Complete: %v", err)
		}

		if err := retry.Retry(ctx); err != nil {
			t.Fatal(err)
		}
		checkNack(t, fb, retry, true, false, 0)

		before := time.Now()
		if err := retryAfter.RetryAfter(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		checkNack(t, fb, retryAfter, true, true, before.Add(2*time.Second).UnixMilli())

		if err := fail.Fail(ctx); err != nil {
			t.Fatal(err)
		}
		checkNack(t, fb, fail, false, false, 0)

		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		if _, open := <-sub.Deliveries(); open {
			t.Fatal("Deliveries still open after Close")
		}
		if !errors.Is(sub.CloseReason(), client.ErrSubscriptionClosed) {
			t.Fatalf("CloseReason after Close: %v", sub.CloseReason())
		}
	})
}

func TestAutoAckDeliveriesCannotBeSettled(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{deliveriesEach: 1})
	c := fb.dial(t, client.ClientOptions{})
	sub, err := c.SubscribeTopic(testContext(t), "auto", client.SubscribeOptions{AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := fb.expect(t, wire.OpSubscribe).body.(wire.Subscribe); !s.AutoAck || s.Prefetch != 1 {
		t.Fatalf("SUBSCRIBE %+v, want auto-ack with the default prefetch 1", s)
	}
	d := receive(t, sub, 1)[0]
	if err := d.Complete(testContext(t)); !errors.Is(err, client.ErrAutoAck) {
		t.Fatalf("Complete on auto-ack: %v", err)
	}
}

func TestSubscriptionClosedByBroker(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{topology: map[topicKey]uint32{{"gone", ""}: 2}})
		c := fb.dial(t, client.ClientOptions{})
		sub, err := c.SubscribeTopic(testContext(t), "gone", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sub.CloseReason() != nil {
			t.Fatalf("CloseReason of an open subscription: %v", sub.CloseReason())
		}
		fb.pushAll(wire.OpSubscriptionClosed, wire.SubscriptionClosed{SubID: 1, Code: wire.ReasonTopicDeleted, Message: "the queue was deleted"})
		select {
		case _, open := <-sub.Deliveries():
			if open {
				t.Fatal("got a delivery, want the channel closed")
			}
		case <-time.After(testTimeout):
			t.Fatal("Deliveries not closed after SUBSCRIPTION_CLOSED")
		}
		var closed *client.SubscriptionClosedError
		if !errors.As(sub.CloseReason(), &closed) || closed.Code != client.ReasonTopicDeleted || closed.SubID != 1 {
			t.Fatalf("CloseReason %v, want topic_deleted for sub 1", sub.CloseReason())
		}
		// The connection stays up.
		if _, err := c.Publisher("gone").PublishConfirmed(testContext(t), client.Text("x")); err != nil {
			t.Fatalf("publish after SUBSCRIPTION_CLOSED: %v", err)
		}
	})
}

func TestHeartbeatTimeout(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{})
		interval := 50 * time.Millisecond
		c := fb.dial(t, client.ClientOptions{HeartbeatInterval: interval, DisableAutoReconnect: true})
		sub, err := c.SubscribeTopic(testContext(t), "quiet", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fb.setSilent(true)
		start := time.Now()
		_, err = c.Publisher("quiet").PublishConfirmed(testContext(t), client.Text("never confirmed"))
		elapsed := time.Since(start)
		if !errors.Is(err, client.ErrHeartbeatTimeout) || !errors.Is(err, client.ErrConnectionLost) {
			t.Fatalf("PublishConfirmed against a silent broker: %v, want a heartbeat timeout", err)
		}
		if elapsed < 2*interval || elapsed > testTimeout/2 {
			t.Fatalf("heartbeat timeout after %v with a %v interval", elapsed, interval)
		}
		message := strings.ToLower(err.Error())
		for _, want := range []string{"heartbeat timeout", "network stall", "reconnect"} {
			if !strings.Contains(message, want) {
				t.Fatalf("error %q lacks %q (error_guides.json)", err, want)
			}
		}
		if !client.IsRetryable(err) {
			t.Fatal("a heartbeat timeout must be retryable")
		}
		if _, open := <-sub.Deliveries(); open || !errors.Is(sub.CloseReason(), client.ErrHeartbeatTimeout) {
			t.Fatalf("subscription after heartbeat timeout: open=%v reason=%v", open, sub.CloseReason())
		}
		if err := c.Publisher("quiet").Publish(testContext(t), client.Text("x")); !errors.Is(err, client.ErrConnectionLost) {
			t.Fatalf("publish with auto-reconnect disabled: %v", err)
		}
	})
}

// A plaintext client on a TLS listener gets ERROR 426 at HELLO.
func TestTLSRequiredByBroker(t *testing.T) {
	m, err := certs.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := transport.ListenConfig{Logger: quietLogger()}.ListenTCP("127.0.0.1:0", m.ServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = client.Dial(testContext(t), ln.Addr().String(), client.ClientOptions{Transport: client.TransportTCP, Logger: quietLogger()})
	var brokerErr *client.BrokerError
	if !errors.Is(err, client.ErrTLSRequiredByBroker) || !errors.As(err, &brokerErr) || brokerErr.Code != client.CodeTLSRequired {
		t.Fatalf("Dial plaintext to a TLS listener: %v, want ErrTLSRequiredByBroker (426)", err)
	}
	if client.IsRetryable(err) {
		t.Fatal("426 must not be retryable")
	}
}

// A TLS client on a plaintext listener sees its handshake end early.
func TestTLSNotSupportedByBroker(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{})
	m, err := certs.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = fb.tryDial(t, client.ClientOptions{TLS: &client.TLSOptions{PinnedSHA256: m.CAFingerprintSHA256}})
	if !errors.Is(err, client.ErrTLSNotSupportedByBroker) || client.IsRetryable(err) {
		t.Fatalf("Dial TLS to a plaintext listener: %v, want ErrTLSNotSupportedByBroker", err)
	}
}

func TestConnectionRefusedGuide(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, err = client.Dial(testContext(t), addr, client.ClientOptions{Transport: client.TransportTCP, Logger: quietLogger()})
	if !errors.Is(err, client.ErrConnectionRefused) || !client.IsRetryable(err) {
		t.Fatalf("Dial to a closed port: %v", err)
	}
	message := strings.ToLower(err.Error())
	for _, want := range []string{"connection refused", "broker port", "9876", "8081"} {
		if !strings.Contains(message, want) {
			t.Fatalf("error %q lacks %q (error_guides.json)", err, want)
		}
	}
}

func TestDecodeJSONGuide(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{
		deliveriesEach: 1, deliveryPayload: []byte("not json"), deliveryType: wire.ContentType{Kind: wire.ContentJSON},
	})
	c := fb.dial(t, client.ClientOptions{})
	sub, err := c.SubscribeTopic(testContext(t), "j", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, sub, 1)[0]
	var v map[string]any
	if err := d.DecodeJSON(&v); err == nil || !strings.Contains(strings.ToLower(err.Error()), "failed to deserialize") {
		t.Fatalf("DecodeJSON of a non-JSON body: %v", err)
	}
}

// After the broker drops the connection, the next operation reconnects once
// (a new HELLO); in-flight work is not replayed.
func TestAutoReconnect(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		fb.dropConnections()
		deadline := time.Now().Add(testTimeout)
		for {
			_, err := c.Publisher("r").PublishConfirmed(ctx, client.Text("x"))
			if err == nil {
				break
			}
			if !client.IsRetryable(err) || time.Now().After(deadline) {
				t.Fatalf("publish after a dropped connection: %v", err)
			}
		}
		if hellos, _ := fb.counts(); hellos != 2 {
			t.Fatalf("%d HELLOs, want 2 (one reconnect)", hellos)
		}
	})
}

// An ERROR that matches no request is connection-fatal (§6.1).
func TestUnmatchedErrorIsFatal(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{})
	c := fb.dial(t, client.ClientOptions{DisableAutoReconnect: true})
	sub, err := c.SubscribeTopic(testContext(t), "f", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fb.pushAll(wire.OpError, wire.ErrorBody{Code: wire.CodeInternal, Message: "boom"})
	if _, open := <-sub.Deliveries(); open {
		t.Fatal("subscription survived a connection-fatal ERROR")
	}
	var brokerErr *client.BrokerError
	if !errors.As(sub.CloseReason(), &brokerErr) || brokerErr.Code != client.CodeInternal {
		t.Fatalf("CloseReason %v, want the unmatched ERROR 500", sub.CloseReason())
	}
}

func TestIsRetryable(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{&client.BrokerError{Code: 500}, true},
		{&client.BrokerError{Code: 503}, true},
		{&client.BrokerError{Code: 400}, false},
		{&client.BrokerError{Code: 401}, false},
		{&client.BrokerError{Code: 404}, false},
		{&client.BrokerError{Code: 409}, false},
		{&client.BrokerError{Code: 426}, false},
		{client.ErrConnectionLost, true},
		{client.ErrHeartbeatTimeout, true},
		{&client.RedirectError{}, true},
		{client.ErrTLSNotSupportedByBroker, false},
		{client.ErrComplianceMismatch, false},
		{&client.ReservedHeaderError{Key: "fibril.x"}, false},
		{context.Canceled, false},
		{nil, false},
	}
	for _, tc := range cases {
		if got := client.IsRetryable(tc.err); got != tc.want {
			t.Errorf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !errors.Is(&client.BrokerError{Code: 426}, client.ErrTLSRequiredByBroker) {
		t.Error("426 does not match ErrTLSRequiredByBroker")
	}
}

// receive reads n deliveries or fails.
func receive(t *testing.T, sub *client.Subscription, n int) []*client.Delivery {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	var out []*client.Delivery
	for len(out) < n {
		select {
		case d, ok := <-sub.Deliveries():
			if !ok {
				t.Fatalf("Deliveries closed after %d of %d: %v", len(out), n, sub.CloseReason())
			}
			out = append(out, d)
		case <-timer.C:
			t.Fatalf("received %d of %d deliveries", len(out), n)
		}
	}
	return out
}

func ackEqual(a, b wire.Ack) bool {
	return a.Topic == b.Topic && a.Group == b.Group && a.Partition == b.Partition && slices.Equal(a.Tags, b.Tags)
}

// checkNack expects the next frame to be the NACK settling d.
func checkNack(t *testing.T, fb *fakeBroker, d *client.Delivery, requeue, hasNotBefore bool, notBeforeMinMs int64) {
	t.Helper()
	f := fb.expect(t, wire.OpNack)
	nack := f.body.(wire.Nack)
	if f.h.RequestID != fb.deliverRequestID(d.Tag) {
		t.Fatalf("NACK request id %d, want the DELIVER's %d", f.h.RequestID, fb.deliverRequestID(d.Tag))
	}
	if nack.Topic != d.Topic || nack.Group != wire.Some(d.Group) || nack.Partition != d.Partition ||
		!slices.Equal(nack.Tags, []uint64{d.Tag}) || nack.Requeue != requeue || nack.NotBeforeMs.Present != hasNotBefore {
		t.Fatalf("NACK %+v for delivery tag %d (requeue %v, not_before %v)", nack, d.Tag, requeue, hasNotBefore)
	}
	if hasNotBefore {
		nb := int64(nack.NotBeforeMs.Value)
		if nb < notBeforeMinMs || nb > time.Now().Add(2*time.Second).UnixMilli() {
			t.Fatalf("not_before %d, want about now + 2 s (>= %d)", nb, notBeforeMinMs)
		}
	}
}

// A slow consumer blocks the reader (backpressure); that is not broker silence,
// so the heartbeat must not cut the connection meanwhile.
func TestSlowConsumerIsNotAHeartbeatTimeout(t *testing.T) {
	const deliveries = 50
	interval := 20 * time.Millisecond
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{deliveriesEach: deliveries})
	c := fb.dial(t, client.ClientOptions{HeartbeatInterval: interval, DisableAutoReconnect: true})
	sub, err := c.SubscribeTopic(testContext(t), "slow", client.SubscribeOptions{AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	// The scenario itself: a consumer that does not read for 10 intervals while
	// its one-slot channel is full.
	time.Sleep(10 * interval)
	got := receive(t, sub, deliveries)
	if len(got) != deliveries || sub.CloseReason() != nil {
		t.Fatalf("got %d deliveries, close reason %v", len(got), sub.CloseReason())
	}
	if _, err := c.Publisher("slow").PublishConfirmed(testContext(t), client.Text("x")); err != nil {
		t.Fatalf("connection did not survive a slow consumer: %v", err)
	}
}

// With no TLS options, a QUIC dial to a loopback broker trusts the CA that the
// broker published for its port (transport/doc.go, "local trust").
func TestLocalTrustForLoopbackQUIC(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	fb := newFakeBroker(t, client.TransportQUIC, fakeScript{})
	port := fb.ln.Addr().(*net.UDPAddr).Port
	if _, err := fb.tryDial(t, client.ClientOptions{TLS: &client.TLSOptions{}}); err == nil {
		t.Fatal("dial succeeded before the broker published local trust")
	} else if certErr := (*client.CertificateError)(nil); !errors.As(err, &certErr) {
		t.Fatalf("untrusted broker: %v (%T), want *CertificateError", err, err)
	}
	if _, err := certs.PublishLocalTrust(fb.material, port); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(testContext(t), fb.addr(), client.ClientOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Dial with local trust: %v", err)
	}
	_ = c.Close()
}

// TestKeyRoutingOnAStandaloneBroker: a standalone broker's TOPOLOGY lists
// nothing (generation 0, PROTOCOL 5.20), so the client learns a queue's
// partition count from a bare DECLARE_QUEUE and routes a keyed publish to
// the key's partition of a queue declared by someone else (before, it took
// "not listed" for one partition and sent every key to partition 0).
func TestKeyRoutingOnAStandaloneBroker(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{standalone: true, topology: map[topicKey]uint32{{"orders", ""}: 4}})
		c := fb.dial(t, client.ClientOptions{})
		if _, err := c.Publisher("orders").PublishConfirmed(testContext(t), client.Text("o").PartitionKey("customer-7")); err != nil {
			t.Fatal(err)
		}
		probe := fb.expectOp(t, wire.OpDeclareQueue).body.(wire.DeclareQueue)
		if probe != (wire.DeclareQueue{Topic: "orders"}) {
			t.Fatalf("routing probe %+v, want a bare DECLARE_QUEUE", probe)
		}
		p := fb.expect(t, wire.OpPublish).body.(wire.Publish)
		if want := wire.PartitionForKey([]byte("customer-7"), 4); p.Partition != want {
			t.Fatalf("keyed publish went to partition %d, want %d of 4", p.Partition, want)
		}
	})
}
