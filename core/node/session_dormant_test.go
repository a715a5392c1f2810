package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/transport/wire"
)

// ---- transport loss, dormancy, resume, end

func TestSessionDormantPausesSubscriptionsAndHoldsDeliveries(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	sub := h.subscribe(1, sessQOrders, 2, true)
	h.takeOut()
	h.connClosed(1)
	if h.ended || !h.s.dormant {
		t.Fatal("an authenticated session with grace did not go dormant")
	}
	req := h.takeRequest(sessQOrders)
	if p, ok := req.Input.(*core.PauseSubscription); !ok || !p.Paused || p.SubID != sub {
		t.Fatalf("dormancy sent %+v, want a pause", req.Input)
	}
	// Deliveries sent before the pause reached the partition are held.
	h.fromPartition(sessQOrders, &Deliveries{Queue: sessQOrders, SubID: sub, Items: []core.Delivery{
		{SubID: sub, Tag: 1, Offset: 0, Body: sessBody("a")}, {SubID: sub, Tag: 2, Offset: 1, Body: sessBody("b")}}})
	if len(h.takeRequests(sessQOrders)) != 0 {
		t.Fatal("held deliveries were handed back")
	}
	h.attach(2, wire.ResumeResumed)
	req = h.takeRequest(sessQOrders)
	if p, ok := req.Input.(*core.PauseSubscription); !ok || p.Paused || p.SubID != sub {
		t.Fatalf("resume sent %+v, want an unpause", req.Input)
	}
	h.expectNothing(2) // behind the handshake gate
	h.frame(2, wire.OpReconcileClient, wire.ReconcileClient{Subscriptions: []wire.ReconcileSub{
		{SubID: sub, Topic: "orders", AutoAck: true, Prefetch: 2}}})
	if res := h.expect(2, wire.OpReconcileResult).body.(wire.ReconcileResult); len(res.Entries) != 1 || res.Entries[0].Code != wire.ReasonMatched {
		t.Fatalf("reconcile %+v", res)
	}
	for _, tag := range []uint64{1, 2} {
		if d := h.expect(2, wire.OpDeliver).body.(wire.Deliver); d.DeliveryTag != tag {
			t.Fatalf("held delivery %d came out as %d", tag, d.DeliveryTag)
		}
	}
}

func TestSessionHeldManualDeliveriesAreBoundedByPrefetch(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	sub := h.subscribe(1, sessQOrders, 1, false)
	h.connClosed(1)
	h.takeOut()
	// A lease expired before the pause landed and the message came back.
	for tag := uint64(1); tag <= 3; tag++ {
		h.fromPartition(sessQOrders, &Deliveries{Queue: sessQOrders, SubID: sub, Items: []core.Delivery{{SubID: sub, Tag: tag, Body: sessBody("m")}}})
	}
	if got := len(h.s.subsByID[sub].held); got != 1 {
		t.Fatalf("holds %d deliveries with prefetch 1", got)
	}
	h.attach(2, wire.ResumeResumed)
	h.tick(h.cfg.HeartbeatIntervalMs)
	if d := h.expect(2, wire.OpDeliver).body.(wire.Deliver); d.DeliveryTag != 3 {
		t.Fatalf("kept tag %d, want the newest", d.DeliveryTag)
	}
}

func TestSessionGraceExpiryEndsAndRequeues(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	sub := h.subscribe(1, sessQOrders, 1, false)
	h.connClosed(1)
	h.takeOut()
	// Under mutant.EarlyGraceRequeue the grace ends at a tenth of this.
	rd := h.tick(h.cfg.ReconnectGraceMs - 1)
	if h.ended || rd.WakeMs != h.now+1 {
		t.Fatalf("ended %v before the grace ran out (wake %d, now %d)", h.ended, rd.WakeMs, h.now)
	}
	h.tick(1)
	out := h.takeOut()
	if !h.ended || len(out) != 2 || sessTypeName(out[0].Msg) != "Request/Unsubscribe" || sessTypeName(out[1].Msg) != "SessionEnded" {
		t.Fatalf("grace expiry: ended %v, out %v", h.ended, sessDescribeOut(out))
	}
	if u := out[0].Msg.(*Request).Input.(*core.Unsubscribe); u.SubID != sub {
		t.Fatal("unsubscribed the wrong subscription")
	}
	// A late delivery is handed back at once.
	h.fromPartition(sessQOrders, &Deliveries{Queue: sessQOrders, SubID: sub, Items: []core.Delivery{{SubID: sub, Tag: 9, Body: sessBody("x")}}})
	if r := h.takeRequest(sessQOrders); r.Input.(*core.Unsubscribe).SubID != sub {
		t.Fatal("a delivery after the end was not handed back")
	}
	h.tick(h.cfg.ReconnectGraceMs)
	if len(h.takeOut()) != 0 {
		t.Fatal("an ended session kept acting")
	}
}

func TestSessionResumeWithinGraceKeepsSubscriptionsAndLateAcks(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	sub := h.subscribe(1, sessQOrders, 1, false)
	h.connClosed(1)
	h.takeOut()
	h.tick(h.cfg.ReconnectGraceMs / 2)
	h.attach(2, wire.ResumeResumed)
	h.takeOut()
	for elapsed := int64(0); elapsed < h.cfg.ReconnectGraceMs; elapsed += h.cfg.HeartbeatIntervalMs {
		h.tick(h.cfg.HeartbeatIntervalMs) // the grace timer is disarmed
		h.frame(2, wire.OpPong, wire.Pong{})
	}
	if h.ended {
		t.Fatal("a resumed session ended on its old grace deadline")
	}
	h.frame(2, wire.OpAck, wire.Ack{Topic: "orders", Tags: []uint64{1}})
	if a := h.takeRequest(sessQOrders).Input.(*core.Ack); a.SubID != sub {
		t.Fatal("a late ack after resume was not routed")
	}
}

func TestSessionLossEndsWithoutAuthGraceOrWhileDraining(t *testing.T) {
	t.Run("unauthenticated", func(t *testing.T) {
		h := newSessHarness(t, nil)
		h.attach(1, wire.ResumeNew)
		h.connClosed(1)
		if !h.ended {
			t.Fatal("an unauthenticated session went dormant")
		}
	})
	t.Run("no grace", func(t *testing.T) {
		h := newSessHarness(t, func(c *Config) { c.ReconnectGraceMs = 0 })
		h.ready(1)
		h.connClosed(1)
		if !h.ended {
			t.Fatal("grace 0 did not end the session")
		}
	})
	t.Run("draining", func(t *testing.T) {
		h := newSessHarness(t, nil)
		h.ready(1)
		h.deliver(&ShuttingDown{GraceMs: 100, Message: "upgrade"})
		if ga := h.expect(1, wire.OpGoingAway); ga.hdr.RequestID != 0 {
			t.Fatal("GOING_AWAY uses request id 0")
		}
		h.connClosed(1)
		if !h.ended {
			t.Fatal("a draining session went dormant")
		}
	})
}

func TestSessionSubscriptionEndedPushesSubscriptionClosed(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	sub := h.subscribe(1, sessQOrders, 1, false)
	h.takeOut()
	h.fromPartition(sessQOrders, &SubscriptionEnded{Queue: sessQOrders, SubID: sub, Code: wire.ReasonTopicDeleted, Message: "gone"})
	sc := h.expect(1, wire.OpSubscriptionClosed).body.(wire.SubscriptionClosed)
	if sc.SubID != sub || sc.Code != wire.ReasonTopicDeleted || sc.Message != "gone" {
		t.Fatalf("SUBSCRIPTION_CLOSED %+v", sc)
	}
	h.frame(1, wire.OpAck, wire.Ack{Topic: "orders", Tags: []uint64{1}})
	if len(h.takeRequests(sessQOrders)) != 0 {
		t.Fatal("an ended subscription still routes acks")
	}
	// While dormant nothing is pushed (PROTOCOL 7.9).
	sub = h.subscribe(1, sessQOrders, 1, false)
	h.connClosed(1)
	h.fromPartition(sessQOrders, &SubscriptionEnded{Queue: sessQOrders, SubID: sub, Code: wire.ReasonServerError})
	if _, still := h.s.subsByID[sub]; still {
		t.Fatal("the subscription survived its end")
	}
}

func TestSessionBouncedRequestAnswers500AndReopens(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	sub := h.subscribe(1, sessQOrders, 1, false)
	h.takeOut()
	id := h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", RequireConfirm: true})
	req := h.takeRequest(sessQOrders)
	h.step(&Bounced{NowMs: h.now, Envelope: Envelope{From: SessionAddr(sessTestID), To: PartitionAddr(sessQOrders), Msg: req}})
	h.expectError(1, wire.OpError, id, wire.CodeInternal)
	if sc := h.expect(1, wire.OpSubscriptionClosed).body.(wire.SubscriptionClosed); sc.SubID != sub || sc.Code != wire.ReasonServerError {
		t.Fatalf("SUBSCRIPTION_CLOSED %+v", sc)
	}
	h.takeOut()
	h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders"})
	h.takeOpen(sessQOrders, 1, nil) // the open was forgotten
	if len(h.takeRequests(sessQOrders)) != 1 {
		t.Fatal("the publish did not follow the new open")
	}
}

// ---- reconcile

func TestSessionReconcileTable(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	matched := h.subscribe(1, core.QueueID{Topic: "a"}, 1, false)
	changed := h.subscribe(1, core.QueueID{Topic: "b"}, 1, false)
	mismatch := h.subscribe(1, core.QueueID{Topic: "c"}, 1, false)
	unlisted := h.subscribe(1, core.QueueID{Topic: "d", Group: "g"}, 1, false)
	h.takeOut()
	id := h.frame(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileConservative, Subscriptions: []wire.ReconcileSub{
		{SubID: 500, Topic: "z", Prefetch: 1},                // missing, manual: recreate
		{SubID: 501, Topic: "y", Prefetch: 1, AutoAck: true}, // missing, auto-ack: server_missing
		{SubID: mismatch, Topic: "c", Prefetch: 9},
		{SubID: 77, Topic: "b", Prefetch: 1},
		{SubID: matched, Topic: "a", Group: wire.Some("default"), Prefetch: 1},
		{SubID: 502, Topic: "a", Prefetch: 1}, // a repeat
		{SubID: 503, Topic: "BAD"},
	}})
	f := h.expect(1, wire.OpReconcileResult)
	if f.hdr.RequestID != id {
		t.Fatal("request id")
	}
	res := f.body.(wire.ReconcileResult).Entries
	type row struct {
		topic  string
		action wire.ReconcileAction
		code   wire.ReasonCode
	}
	// Sorted by the client view's (group, topic, sub_id), an absent group
	// first: the matched entry was listed as group "default".
	want := []row{
		{"BAD", wire.ReconcileCloseClientSide, wire.ReasonServerMissing},
		{"a", wire.ReconcileCloseClientSide, wire.ReasonServerMismatch},
		{"b", wire.ReconcileKeep, wire.ReasonServerIDChanged},
		{"c", wire.ReconcileCloseClientSide, wire.ReasonServerMismatch},
		{"y", wire.ReconcileCloseClientSide, wire.ReasonServerMissing},
		{"z", wire.ReconcileRecreateClientSide, wire.ReasonRecreate},
		{"a", wire.ReconcileKeep, wire.ReasonMatched},
		{"d", wire.ReconcileCloseServerSide, wire.ReasonClientMissing},
	}
	if len(res) != len(want) {
		t.Fatalf("%d entries: %+v", len(res), res)
	}
	for i, w := range want {
		e := res[i]
		v := e.Client.Value
		if !e.Client.Present {
			v = e.Server.Value
		}
		if v.Topic != w.topic || e.Action != w.action || e.Code != w.code || e.Reason != w.code.String() {
			t.Fatalf("entry %d: %s %d %d %q, want %+v", i, v.Topic, e.Action, e.Code, e.Reason, w)
		}
	}
	if res[2].Server.Value.SubID != changed {
		t.Fatal("server_id_changed must carry the server's id")
	}
	unsubscribed := map[uint64]bool{}
	for _, env := range h.takeOut() {
		if r, ok := env.Msg.(*Request); ok {
			unsubscribed[r.Input.(*core.Unsubscribe).SubID] = true
		}
	}
	if len(unsubscribed) != 2 || !unsubscribed[mismatch] || !unsubscribed[unlisted] {
		t.Fatalf("unsubscribed %v", unsubscribed)
	}
}

func TestSessionReconcileRestoreAnswersAfterEveryRestore(t *testing.T) {
	h := newSessHarness(t, nil)
	h.attach(1, wire.ResumeResumedAfterRestart)
	h.auth(1)
	qa, qb := core.QueueID{Topic: "a"}, core.QueueID{Topic: "b"}
	h.frame(1, wire.OpReconcileClient, wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: []wire.ReconcileSub{
		{SubID: 3, Topic: "b", Prefetch: 4}, {SubID: 2, Topic: "a", Prefetch: 1, AutoAck: true}}})
	h.takeOpen(qb, 1, nil)
	h.takeOpen(qa, 1, nil)
	ra, rb := h.takeRequest(qa), h.takeRequest(qb)
	subA := ra.Input.(*core.Subscribe)
	h.fromPartition(qa, &Response{Token: ra.Token, Reply: core.Reply{Kind: core.ReplySubscribed}})
	// A delivery of a restored subscription waits for the result.
	h.fromPartition(qa, &Deliveries{Queue: qa, SubID: subA.SubID, Items: []core.Delivery{{SubID: subA.SubID, Tag: 1, Body: sessBody("x")}}})
	h.expectNothing(1)
	h.fromPartition(qb, &Response{Token: rb.Token, Reply: core.Reply{Kind: core.ReplyError, Err: core.ErrTooManySubscriptions}})
	res := h.expect(1, wire.OpReconcileResult).body.(wire.ReconcileResult).Entries
	if len(res) != 2 || res[0].Code != wire.ReasonServerRestored || res[0].Server.Value.SubID != subA.SubID || !res[0].Server.Value.AutoAck ||
		res[1].Code != wire.ReasonServerRestoreFailed || res[1].Action != wire.ReconcileCloseClientSide {
		t.Fatalf("result %+v", res)
	}
	if d := h.expect(1, wire.OpDeliver).body.(wire.Deliver); d.SubID != subA.SubID {
		t.Fatal("the held delivery did not follow the result")
	}
	var sk *SkeletonChanged
	for _, env := range h.takeOut() {
		if m, ok := env.Msg.(*SkeletonChanged); ok {
			sk = m
		}
	}
	if sk == nil || len(sk.Subs) != 1 || sk.Subs[0].Queue != qa {
		t.Fatalf("skeleton after reconcile: %+v", sk)
	}
}

// graceEndsAfterMs drops an authenticated session's connection and ticks
// in 100 ms steps until it ends; it returns how long it stayed dormant.
func graceEndsAfterMs(t *testing.T) int64 {
	h := newSessHarness(t, nil)
	h.ready(1)
	h.subscribe(1, sessQOrders, 1, false)
	h.connClosed(1)
	lostAtMs := h.now
	for !h.ended {
		if h.now-lostAtMs > 10*h.cfg.ReconnectGraceMs {
			t.Fatal("the grace never expired")
		}
		h.tick(100)
	}
	return h.now - lostAtMs
}

func TestSessionGraceLastsItsConfiguredLength(t *testing.T) {
	if got, want := graceEndsAfterMs(t), sessTestConfig().ReconnectGraceMs; got != want {
		t.Fatalf("dormant for %d ms, the grace is %d ms", got, want)
	}
}

// TestSessionMutantEarlyGraceRequeueIsCaught shows the grace tests can
// fail: with the grace at a tenth of its length, the session requeues a
// resuming client's deliveries early.
func TestSessionMutantEarlyGraceRequeueIsCaught(t *testing.T) {
	mutant.Active = mutant.EarlyGraceRequeue
	defer func() { mutant.Active = "" }()
	if got, want := graceEndsAfterMs(t), sessTestConfig().ReconnectGraceMs; got >= want {
		t.Fatalf("under %s the session still stayed dormant %d ms", mutant.EarlyGraceRequeue, got)
	}
}
