package node

// Regression tests for defects a review found in the Session machine; each
// was seen failing before its fix.

import (
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// A confirm answered out of turn (done, waiting for an earlier one) must
// leave pending when its attachment goes: before the fix it stayed for
// ever, and after enough resumes every confirmed publish got 500.
func TestSessionDoneConfirmLeavesPendingWithItsAttachment(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q1, q2 := qid("a", 0), qid("b", 0)
	h.frame(1, wire.OpPublish, wire.Publish{Topic: "a", RequireConfirm: true, Payload: []byte("x")})
	h.takeOpen(q1, 1, nil)
	r1 := h.takeRequest(q1)
	h.frame(1, wire.OpPublish, wire.Publish{Topic: "b", RequireConfirm: true, Payload: []byte("y")})
	h.takeOpen(q2, 1, nil)
	r2 := h.takeRequest(q2)
	// b answers first: its confirm waits behind a's.
	h.fromPartition(q2, &Response{Token: r2.Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 1}})
	h.connClosed(1) // dormant
	h.fromPartition(q1, &Response{Token: r1.Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 1}})
	h.attach(2, wire.ResumeResumed)
	if n := len(h.s.pending); n != 0 {
		t.Fatalf("pending holds %d entries after both publishes were answered and their attachment is gone: %+v", n, h.s.pending)
	}
}

// A stale ConnClosed (for a connection the session closed itself) must not
// take the place of a newer connection's close that overtook its Attach:
// before the fix the session attached the dead connection, cleared its
// grace and unpaused its subscriptions (auto-ack deliveries into nothing).
func TestSessionEarlyCloseNotLostBehindAStaleOne(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q := qid("q", 0)
	h.subscribe(1, q, 4, true) // auto-ack
	// The heartbeat cut: the session closes connection 1 itself.
	for i := 0; i < 5 && !h.s.dormant; i++ {
		h.tick(h.cfg.HeartbeatIntervalMs)
	}
	if !h.s.dormant {
		t.Fatal("not dormant after silence")
	}
	h.takeOut()
	h.step(&ConnClosed{NowMs: h.now, Conn: 1}) // the driver's stale report of that close
	// Connection 2 closes before its Attach reaches the session (the
	// harness fails any frame sent to it).
	h.connClosed(2)
	h.deliver(&Attach{Conn: 2, Loopback: true, HelloRequestID: 1, Outcome: wire.ResumeResumed})
	if h.s.conn == 2 || !h.s.dormant {
		t.Errorf("session attached connection 2, which the driver already reported closed (dormant=%v)", h.s.dormant)
	}
	for _, r := range h.takeRequests(q) {
		if p, ok := r.Input.(*core.PauseSubscription); ok && !p.Paused {
			t.Errorf("subscription unpaused for a dead connection: auto-ack deliveries would be settled into it")
		}
	}
	// The next connection attaches normally.
	h.attach(3, wire.ResumeResumed)
	if h.s.conn != 3 || h.s.dormant {
		t.Fatalf("connection 3 not attached (conn %d, dormant %v)", h.s.conn, h.s.dormant)
	}
}

// An Attach for a connection older than one the session already heard of
// (a second resume with the same identity that lost the race) is closed,
// and never sent anything.
func TestSessionAttachOfAnOlderConnectionIsClosed(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	h.connClosed(1)                      // dormant
	h.frame(3, wire.OpPing, wire.Ping{}) // conn 3's frame overtakes its Attach
	rd := h.deliver(&Attach{Conn: 2, Loopback: true, HelloRequestID: 1, Outcome: wire.ResumeResumed})
	if len(rd.Close) != 1 || rd.Close[0] != 2 || len(h.takeFrames(2)) != 0 || h.s.conn != 0 {
		t.Fatalf("older connection 2: closes %v, attached %d", rd.Close, h.s.conn)
	}
	h.attach(3, wire.ResumeResumed)
	h.expect(3, wire.OpPong) // the early PING, answered after HELLO_OK
}

// A SUBSCRIBE whose SUBSCRIBE_OK is lost with its connection must not stay
// registered: before the fix its deliveries went out after the resume
// under a sub id the client never learned (auto-ack: settled and lost),
// and the client's retry got 409 for ever.
func TestSessionSubscribeLostWithItsConnectionLeavesNoGhost(t *testing.T) {
	for _, answerFirst := range []bool{true, false} {
		h := newSessHarness(t, nil)
		h.ready(1)
		q := qid("q", 0)
		h.frame(1, wire.OpSubscribe, wire.Subscribe{Topic: "q", Prefetch: 1, AutoAck: true})
		h.takeOpen(q, 1, nil)
		req := h.takeRequest(q)
		subID := req.Input.(*core.Subscribe).SubID
		h.connClosed(1) // dormant; SUBSCRIBE_OK never sent
		if answerFirst {
			h.fromPartition(q, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplySubscribed}})
			h.fromPartition(q, &Deliveries{Queue: q, SubID: subID, Items: []core.Delivery{{SubID: subID, Tag: 5, Offset: 1, Body: sessBody("m")}}})
		}
		h.attach(2, wire.ResumeResumed)
		h.auth(2)
		id := h.frame(2, wire.OpSubscribe, wire.Subscribe{Topic: "q", Prefetch: 1, AutoAck: true})
		if !answerFirst {
			h.fromPartition(q, &Response{Token: req.Token, Reply: core.Reply{Kind: core.ReplySubscribed}})
		}
		var unsubscribed bool
		var retry *Request
		for _, r := range h.takeRequests(q) {
			switch in := r.Input.(type) {
			case *core.Unsubscribe:
				unsubscribed = unsubscribed || in.SubID == subID
			case *core.Subscribe:
				retry = r
			}
		}
		if !unsubscribed {
			t.Errorf("answerFirst=%v: the lost subscription %d was not handed back", answerFirst, subID)
		}
		for _, f := range h.takeFrames(2) {
			switch f.hdr.Opcode {
			case wire.OpSubscribeErr:
				t.Errorf("answerFirst=%v: retried SUBSCRIBE (req %d) refused: %+v", answerFirst, id, f.body)
			case wire.OpDeliver:
				t.Errorf("answerFirst=%v: DELIVER for sub %d, which this client was never told about", answerFirst, f.body.(wire.Deliver).SubID)
			}
		}
		if retry == nil {
			t.Fatalf("answerFirst=%v: the retried SUBSCRIBE did not reach the partition", answerFirst)
		}
		h.fromPartition(q, &Response{Token: retry.Token, Reply: core.Reply{Kind: core.ReplySubscribed}})
		if ok := h.expect(2, wire.OpSubscribeOk).body.(wire.SubscribeOk); ok.SubID == subID {
			t.Fatalf("answerFirst=%v: the retry reuses the lost sub id", answerFirst)
		}
	}
}

// A resumed session's subscriptions are unpaused when the gate opens, not
// at the Attach: before, an auto-ack subscription streamed into held
// deliveries for as long as the gate stayed shut.
func TestSessionResumeUnpausesWhenTheGateOpens(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q := qid("q", 0)
	sub := h.subscribe(1, q, 4, true)
	h.connClosed(1)
	h.takeRequests(q) // the pause
	h.attach(2, wire.ResumeResumed)
	for _, r := range h.takeRequests(q) {
		if p, ok := r.Input.(*core.PauseSubscription); ok && !p.Paused {
			t.Fatal("unpaused at the Attach, behind a closed gate")
		}
	}
	h.auth(2)
	h.frame(2, wire.OpTopology, wire.Topology{})
	h.expect(2, wire.OpTopologyOk)
	r := h.takeRequest(q)
	if p, ok := r.Input.(*core.PauseSubscription); !ok || p.Paused || p.SubID != sub {
		t.Fatalf("the gate opened and the partition got %+v, want an unpause", r.Input)
	}
}

// Held deliveries are bounded by count, not only by payload bytes: empty
// payloads count no bytes, and before the fix an auto-ack subscription of
// a dormant session held any number of them.
func TestSessionHeldDeliveriesBoundedByCount(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q := qid("q", 0)
	sub := h.subscribe(1, q, 4, true)
	h.connClosed(1)
	items := make([]core.Delivery, heldDeliveriesMax+1)
	for i := range items {
		items[i] = core.Delivery{SubID: sub, Tag: uint64(i + 1), Offset: uint64(i), Body: &core.Body{}}
	}
	h.fromPartition(q, &Deliveries{Queue: q, SubID: sub, Items: items[:heldDeliveriesMax]})
	if h.ended {
		t.Fatalf("ended at %d held deliveries, the bound itself", heldDeliveriesMax)
	}
	h.fromPartition(q, &Deliveries{Queue: q, SubID: sub, Items: items[heldDeliveriesMax:]})
	if !h.ended {
		t.Fatalf("a dormant session holds %d empty deliveries, over the bound of %d", h.s.heldCount, heldDeliveriesMax)
	}
}

// When releasing held deliveries reaches the outbox bound, only the one
// that does not fit stays back: before the fix the whole step's frames
// were cut from the buffer after their deliveries had left held, so a
// resumed auto-ack subscription lost them.
func TestSessionOutboxCutKeepsUnsentDeliveriesHeld(t *testing.T) {
	h := newSessHarness(t, func(c *Config) { c.OutboxBytesMax, c.FramePayloadBytesMax = 4<<10, 2<<10 })
	h.ready(1)
	q := qid("q", 0)
	sub := h.subscribe(1, q, 4, true)
	h.connClosed(1)
	// Held: within the bound (4 KiB of payload at most); with their
	// frames' headers and the replies already queued, not all fit.
	const n = 5
	items := make([]core.Delivery, n)
	for i := range items {
		items[i] = core.Delivery{SubID: sub, Tag: uint64(i + 1), Offset: uint64(i), Body: &core.Body{Payload: make([]byte, 780)}}
	}
	h.fromPartition(q, &Deliveries{Queue: q, SubID: sub, Items: items})
	h.attach(2, wire.ResumeResumed)
	h.auth(2)
	h.frame(2, wire.OpTopology, wire.Topology{}) // the gate opens
	sent := 0
	for _, f := range h.takeFrames(2) {
		if f.hdr.Opcode == wire.OpDeliver {
			if d := f.body.(wire.Deliver); d.DeliveryTag != uint64(sent+1) {
				t.Fatalf("delivery %d sent as the %d-th", d.DeliveryTag, sent+1)
			}
			sent++
		}
	}
	if !h.closed[2] || !h.s.dormant {
		t.Fatalf("the outbox bound did not cut connection 2 (closed %v, dormant %v)", h.closed[2], h.s.dormant)
	}
	held := 0
	if s := h.s.subsByID[sub]; s != nil {
		held = len(s.held)
	}
	if sent+held != n {
		t.Fatalf("%d deliveries sent before the cut and %d still held, of %d: the rest were lost", sent, held, n)
	}
	h.attach(3, wire.ResumeResumed)
	h.frame(3, wire.OpTopology, wire.Topology{})
	got := 0
	for _, f := range h.takeFrames(3) {
		if f.hdr.Opcode == wire.OpDeliver {
			if d := f.body.(wire.Deliver); d.DeliveryTag != uint64(sent+got+1) {
				t.Fatalf("after the resume, delivery %d came as the %d-th", d.DeliveryTag, sent+got+1)
			}
			got++
		}
	}
	if sent+got != n {
		t.Fatalf("%d before the cut + %d after the resume, of %d", sent, got, n)
	}
}

// PROTOCOL 5.23: GOING_AWAY's grace_ms is how long the broker keeps
// accepting reconnects and holding sessions. Before the fix a draining
// session ended at once when its transport went (its skeleton with it).
func TestSessionDrainHoldsSessionsForItsGrace(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	h.deliver(&ShuttingDown{GraceMs: 10_000, Message: "upgrade"})
	if ga := h.expect(1, wire.OpGoingAway).body.(wire.GoingAway); ga.GraceMs != 10_000 {
		t.Fatalf("GOING_AWAY %+v", ga)
	}
	h.connClosed(1)
	if h.ended || !h.s.dormant {
		t.Fatal("a session losing its transport inside the drain's grace was not held")
	}
	h.tick(4000)
	h.attach(2, wire.ResumeResumed)
	h.tick(7000) // past the drain's grace
	h.frame(2, wire.OpPing, wire.Ping{})
	h.connClosed(2)
	if !h.ended {
		t.Fatal("a session losing its transport after the drain's grace was held")
	}
}
