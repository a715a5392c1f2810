package client_test

// Session resume against the scripted fake (PROTOCOL §3.1, §7.7, §7.8; SPEC §8
// "Client reconnect"): the resume identity, AUTH and RECONCILE_CLIENT on a
// reconnect, the result applied, stale deliveries after an unresumed session,
// no replay of in-flight operations, and auto-reconnect off.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/transport/wire"
)

// waitGeneration waits until the client has installed its generation-th
// connection.
func waitGeneration(t *testing.T, c *client.Client, generation uint64) client.ConnectionInfo {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		info := c.Connection()
		if info.Generation >= generation && !info.Closed {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection %+v, want generation %d", info, generation)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func receiveOne(t *testing.T, sub *client.Subscription) *client.Delivery {
	t.Helper()
	select {
	case d, ok := <-sub.Deliveries():
		if !ok {
			t.Fatalf("subscription closed: %v", sub.CloseReason())
		}
		return d
	case <-time.After(testTimeout):
		t.Fatal("no delivery")
	}
	return nil
}

func waitClosed(t *testing.T, sub *client.Subscription) error {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		select {
		case _, ok := <-sub.Deliveries():
			if !ok {
				return sub.CloseReason()
			}
		case <-deadline:
			t.Fatalf("subscription to %s still open", sub.Topic())
		}
	}
}

func TestResumeSendsIdentityAuthAndReconcile(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		creds := &client.Credentials{Username: "u", Password: "p"}
		fb := newFakeBroker(t, kind, fakeScript{credentials: creds, deliveriesEach: 1,
			topology: map[topicKey]uint32{{"jobs", ""}: 1}})
		c := fb.dial(t, client.ClientOptions{Credentials: creds})
		ctx := testContext(t)
		sub, err := c.SubscribeTopic(ctx, "jobs", client.SubscribeOptions{Prefetch: 3})
		if err != nil {
			t.Fatal(err)
		}
		held := receiveOne(t, sub)
		fb.expectOp(t, wire.OpSubscribe)
		first := fb.lastIdentity()
		// The broker re-keys the subscription on resume (server_id_changed).
		fb.update(func(s *fakeScript) {
			s.reconcile = func(m wire.ReconcileClient) wire.ReconcileResult {
				server := m.Subscriptions[0]
				server.SubID = 50
				return wire.ReconcileResult{Entries: []wire.ReconcileEntry{{Client: wire.Some(m.Subscriptions[0]),
					Server: wire.Some(server), Action: wire.ReconcileKeep, Reason: "server_id_changed", Code: 2}}}
			}
		})
		fb.dropConnections()

		// The reconnect starts by itself: a subscription is live.
		hello := fb.nextFrame(t)
		resume, ok := hello.body.(wire.Hello).Resume.Get()
		if hello.h.Opcode != wire.OpHello || !ok || resume != first {
			t.Fatalf("first frame of the reconnect: %s %+v, want HELLO resuming %+v", hello.h.Opcode, hello.body, first)
		}
		if auth := fb.nextFrame(t); auth.h.Opcode != wire.OpAuth || auth.body.(wire.Auth).Username != "u" || auth.h.RequestID != 2 {
			t.Fatalf("second frame: %s id %d, want AUTH id 2 with the same credentials", auth.h.Opcode, auth.h.RequestID)
		}
		rec := fb.nextFrame(t)
		if rec.h.Opcode != wire.OpReconcileClient || rec.h.RequestID != 3 {
			t.Fatalf("third frame: %s id %d, want RECONCILE_CLIENT id 3", rec.h.Opcode, rec.h.RequestID)
		}
		want := wire.ReconcileClient{Policy: wire.ReconcileConservative, Subscriptions: []wire.ReconcileSub{
			{SubID: 1, Topic: "jobs", Partition: 0, Prefetch: 3}}}
		if got := rec.body.(wire.ReconcileClient); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("RECONCILE_CLIENT %+v, want %+v", got, want)
		}
		if info := waitGeneration(t, c, 2); info.ResumeOutcome != client.ResumeResumed {
			t.Fatalf("outcome %v, want resumed", info.ResumeOutcome)
		}

		// Deliveries keep flowing into the same channel, under the new sub id.
		tag := fb.deliver(50, "jobs", 1, "after the resume")
		if d := receiveOne(t, sub); d.Tag != tag || d.Text() != "after the resume" {
			t.Fatalf("delivery after the resume: tag %d %q, want tag %d", d.Tag, d.Text(), tag)
		}
		// The held delivery settles normally over the new connection.
		if err := held.Complete(ctx); err != nil {
			t.Fatalf("Complete of a delivery held across a resume: %v", err)
		}
		ack := fb.expect(t, wire.OpAck)
		if ack.h.RequestID != fb.deliverRequestID(held.Tag) || fmt.Sprint(ack.body.(wire.Ack).Tags) != fmt.Sprint([]uint64{held.Tag}) {
			t.Fatalf("ACK id %d tags %v, want id %d tag %d", ack.h.RequestID, ack.body.(wire.Ack).Tags,
				fb.deliverRequestID(held.Tag), held.Tag)
		}
	})
}

func TestReconcileResultApplied(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{topology: map[topicKey]uint32{
		{"a", ""}: 1, {"b", ""}: 1, {"c", ""}: 1, {"d", ""}: 1}})
	c := fb.dial(t, client.ClientOptions{ReconcileRestore: true})
	ctx := testContext(t)
	subs := map[string]*client.Subscription{}
	for _, topic := range []string{"a", "b", "c", "d"} {
		sub, err := c.SubscribeTopic(ctx, topic, client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		subs[topic] = sub
	}
	fb.update(func(s *fakeScript) {
		s.reconcile = func(m wire.ReconcileClient) wire.ReconcileResult {
			byTopic := map[string]wire.ReconcileSub{}
			for _, sub := range m.Subscriptions {
				byTopic[sub.Topic] = sub
			}
			kept := byTopic["a"]
			kept.SubID = 10
			return wire.ReconcileResult{Entries: []wire.ReconcileEntry{
				{Client: wire.Some(byTopic["a"]), Server: wire.Some(kept), Action: wire.ReconcileKeep, Reason: "server_id_changed", Code: 2},
				{Client: wire.Some(byTopic["b"]), Server: wire.Some(byTopic["b"]), Action: wire.ReconcileCloseClientSide, Reason: "server_mismatch", Code: 4},
				{Client: wire.Some(byTopic["c"]), Action: wire.ReconcileRecreateClientSide, Reason: "recreate", Code: 8},
				// "d" is not mentioned; a server-only row is the broker's business.
				{Server: wire.Some(wire.ReconcileSub{SubID: 99, Topic: "x"}), Action: wire.ReconcileCloseServerSide, Reason: "client_missing", Code: 7},
			}}
		}
	})
	fb.expectOp(t, wire.OpSubscribe)
	fb.dropConnections()
	rec := fb.expectOp(t, wire.OpReconcileClient).body.(wire.ReconcileClient)
	if rec.Policy != wire.ReconcileRestore || len(rec.Subscriptions) != 4 {
		t.Fatalf("RECONCILE_CLIENT %+v, want policy restore and 4 subscriptions", rec)
	}
	for i, sub := range rec.Subscriptions {
		if sub.SubID != uint64(i+1) {
			t.Fatalf("RECONCILE_CLIENT lists sub ids out of order: %+v", rec.Subscriptions)
		}
	}
	waitGeneration(t, c, 2)
	for topic, code := range map[string]client.ReasonCode{"b": 4, "c": 8, "d": 40} {
		var closed *client.SubscriptionClosedError
		if err := waitClosed(t, subs[topic]); !errors.As(err, &closed) || closed.Code != code {
			t.Fatalf("subscription %s: CloseReason %v, want code %d", topic, err, code)
		}
	}
	if subs["a"].CloseReason() != nil {
		t.Fatalf("kept subscription closed: %v", subs["a"].CloseReason())
	}
	fb.deliver(10, "a", 0, "kept")
	if d := receiveOne(t, subs["a"]); d.Text() != "kept" {
		t.Fatalf("delivery on the re-keyed subscription: %q", d.Text())
	}
}

// staleSettleViolation holds a delivery across a reconnect the broker does not
// resume and reports how settling it broke the rules, or nil.
func staleSettleViolation(t *testing.T, kind string) error {
	notFound := wire.ResumeNotFound
	fb := newFakeBroker(t, kind, fakeScript{deliveriesEach: 1, resumeAs: &notFound,
		topology: map[topicKey]uint32{{"jobs", ""}: 1}})
	c := fb.dial(t, client.ClientOptions{})
	ctx := testContext(t)
	sub, err := c.SubscribeTopic(ctx, "jobs", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := receiveOne(t, sub)
	fb.expectOp(t, wire.OpSubscribe)
	fb.dropConnections()
	fb.expectOp(t, wire.OpReconcileClient)
	if info := waitGeneration(t, c, 2); info.ResumeOutcome != client.ResumeNotFound {
		t.Fatalf("outcome %v, want resume_not_found", info.ResumeOutcome)
	}
	for name, settle := range map[string]func(context.Context) error{"Complete": held.Complete, "Retry": held.Retry, "Fail": held.Fail} {
		if err := settle(ctx); !errors.Is(err, client.ErrStaleDelivery) {
			return fmt.Errorf("%s of a stale delivery: %v, want ErrStaleDelivery", name, err)
		}
	}
	// Nothing was sent for it: the next frame is the publish below.
	if _, err := c.Publisher("jobs").PublishConfirmed(ctx, client.Text("x")); err != nil {
		t.Fatal(err)
	}
	if f := fb.next(t); f.h.Opcode != wire.OpPublish {
		return fmt.Errorf("client sent %s for a stale delivery", f.h.Opcode)
	}
	return nil
}

func TestStaleDeliveryAfterUnresumedSession(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		if err := staleSettleViolation(t, kind); err != nil {
			t.Fatal(err)
		}
	})
}

// The stale-delivery check must fail on a client that settles stale deliveries.
func TestStaleDeliveryMutantIsCaught(t *testing.T) {
	mutant.Active = mutant.ClientSettleStale
	defer func() { mutant.Active = "" }()
	if err := staleSettleViolation(t, client.TransportTCP); err == nil {
		t.Fatal("the stale-delivery check passed on a client that settles stale deliveries")
	}
}

func TestInFlightOpsNotReplayed(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		// The route is known from Dial, so the publish goes out at once.
		fb := newFakeBroker(t, kind, fakeScript{topology: map[topicKey]uint32{{"jobs", ""}: 1}})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)
		fb.setSilent(true)
		result := make(chan error, 1)
		go func() {
			_, err := c.Publisher("jobs").PublishConfirmed(ctx, client.Text("in flight"))
			result <- err
		}()
		fb.expectOp(t, wire.OpPublish)
		fb.setSilent(false)
		fb.dropConnections()
		if err := <-result; !errors.Is(err, client.ErrConnectionLost) {
			t.Fatalf("in-flight publish on a dropped connection: %v, want ErrConnectionLost", err)
		}
		if _, err := c.DeclareQueue(ctx, client.NewQueueConfig("other")); err != nil {
			t.Fatalf("DeclareQueue after the drop: %v", err)
		}
		if hello := fb.expectOp(t, wire.OpHello); !hello.body.(wire.Hello).Resume.Present {
			t.Fatal("the reconnect did not present the resume identity")
		}
		if f := fb.nextAny(t); f.h.Opcode != wire.OpDeclareQueue {
			t.Fatalf("first request on the new connection: %s, want DECLARE_QUEUE (nothing replayed)", f.h.Opcode)
		}
	})
}

func TestAutoReconnectOff(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{deliveriesEach: 1, topology: map[topicKey]uint32{{"jobs", ""}: 1}})
	c := fb.dial(t, client.ClientOptions{DisableAutoReconnect: true})
	ctx := testContext(t)
	sub, err := c.SubscribeTopic(ctx, "jobs", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := receiveOne(t, sub)
	fb.dropConnections()
	if err := waitClosed(t, sub); !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("CloseReason with auto-reconnect off: %v, want ErrConnectionLost", err)
	}
	for range 2 {
		if _, err := c.DeclareQueue(ctx, client.NewQueueConfig("q")); !errors.Is(err, client.ErrConnectionLost) {
			t.Fatalf("DeclareQueue with auto-reconnect off: %v, want ErrConnectionLost", err)
		}
		if err := held.Complete(ctx); !errors.Is(err, client.ErrConnectionLost) {
			t.Fatalf("Complete with auto-reconnect off: %v, want ErrConnectionLost", err)
		}
	}
	if hellos, _ := fb.counts(); hellos != 1 {
		t.Fatalf("%d HELLOs with auto-reconnect off, want 1", hellos)
	}
	outcome, err := c.Reconnect(ctx)
	if err != nil || outcome != client.ResumeResumed {
		t.Fatalf("Reconnect: %v, %v; want resumed", outcome, err)
	}
	// The session had a subscription: the reconcile lists none, so the broker
	// drops its side.
	if rec := fb.expectOp(t, wire.OpReconcileClient).body.(wire.ReconcileClient); len(rec.Subscriptions) != 0 {
		t.Fatalf("RECONCILE_CLIENT lists %+v, want none", rec.Subscriptions)
	}
	if err := held.Complete(ctx); err != nil {
		t.Fatalf("Complete after a resumed Reconnect: %v", err)
	}
	if ack := fb.expect(t, wire.OpAck); ack.body.(wire.Ack).Tags[0] != held.Tag {
		t.Fatalf("ACK tags %v, want %d", ack.body.(wire.Ack).Tags, held.Tag)
	}
}

// SUBSCRIPTION_CLOSED with a code this client does not know keeps the code and
// message in CloseReason (§7.9), ends the whole fanned-in subscription, and a
// later resume no longer lists it.
func TestSubscriptionClosedUnknownCodeNotReconciled(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{topology: map[topicKey]uint32{{"two", ""}: 2, {"one", ""}: 1}})
	c := fb.dial(t, client.ClientOptions{})
	ctx := testContext(t)
	two, err := c.SubscribeTopic(ctx, "two", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	one, err := c.SubscribeTopic(ctx, "one", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fb.pushAll(wire.OpSubscriptionClosed, wire.SubscriptionClosed{SubID: 2, Code: 77, Message: "future reason"})
	var closed *client.SubscriptionClosedError
	if err := waitClosed(t, two); !errors.As(err, &closed) || closed.Code != 77 || closed.SubID != 2 || closed.Message != "future reason" {
		t.Fatalf("CloseReason %v, want code 77 for sub 2 with its message", err)
	}
	fb.dropConnections()
	rec := fb.expectOp(t, wire.OpReconcileClient).body.(wire.ReconcileClient)
	if len(rec.Subscriptions) != 1 || rec.Subscriptions[0].Topic != "one" || rec.Subscriptions[0].SubID != 3 {
		t.Fatalf("RECONCILE_CLIENT lists %+v, want only sub 3 of \"one\"", rec.Subscriptions)
	}
	waitGeneration(t, c, 2)
	if one.CloseReason() != nil {
		t.Fatalf("the other subscription closed: %v", one.CloseReason())
	}
}

// Pushes a resumed session sends before RECONCILE_RESULT are held, not taken for
// the reply, and delivered under the re-keyed id once the result is applied.
func TestEarlyPushesDuringResumeAreHeld(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{topology: map[topicKey]uint32{{"early", ""}: 1}})
	c := fb.dial(t, client.ClientOptions{})
	ctx := testContext(t)
	sub, err := c.SubscribeTopic(ctx, "early", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fb.update(func(s *fakeScript) {
		s.earlyDeliverSubID = 7
		s.reconcile = func(m wire.ReconcileClient) wire.ReconcileResult {
			server := m.Subscriptions[0]
			server.SubID = 7
			return wire.ReconcileResult{Entries: []wire.ReconcileEntry{{Client: wire.Some(m.Subscriptions[0]),
				Server: wire.Some(server), Action: wire.ReconcileKeep, Reason: "server_id_changed", Code: 2}}}
		}
	})
	fb.dropConnections()
	if d := receiveOne(t, sub); d.Text() != "early" || d.Tag != 1000 {
		t.Fatalf("got %q tag %d, want the early DELIVER", d.Text(), d.Tag)
	}
	if info := waitGeneration(t, c, 2); info.ResumeOutcome != client.ResumeResumed {
		t.Fatalf("outcome %v", info.ResumeOutcome)
	}
	fb.expectOp(t, wire.OpPong) // the held PING was answered
}
