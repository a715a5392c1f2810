package core

import "testing"

// PauseSubscription (PROTOCOL 7.7: while a session has no transport, new
// deliveries wait for one; its unsettled deliveries stay leased).

func TestPausedSubscriptionGetsNoNewDeliveries(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 4, false)
	h.step(&PauseSubscription{NowMs: h.now, SubID: 1, Paused: true})
	h.publish("a")
	h.publish("b")
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatalf("a paused subscription got %d deliveries", len(d))
	}
	if c := h.p.Counts(); c.Ready != 2 {
		t.Fatalf("want both messages ready, got %+v", c)
	}
	h.step(&PauseSubscription{NowMs: h.now, SubID: 1, Paused: false})
	if d := h.takeDeliveries(); len(d) != 2 {
		t.Fatalf("unpausing delivered %d, want 2", len(d))
	}
}

func TestPausedSubscriptionKeepsItsLeasesUntilExpiry(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.publish("a")
	d := h.takeDeliveries()
	if len(d) != 1 {
		t.Fatalf("want one delivery, got %d", len(d))
	}
	h.step(&PauseSubscription{NowMs: h.now, SubID: 1, Paused: true})
	if c := h.p.Counts(); c.Inflight != 1 {
		t.Fatalf("pausing released the lease: %+v", c)
	}
	// A late ack of the held tag still settles (the resumed client's ack).
	h.ack(1, d[0].Tag)
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 0 {
		t.Fatalf("ack while paused: %v", errs)
	}
	h.publish("b")
	h.takeDeliveries()
	h.step(&PauseSubscription{NowMs: h.now, SubID: 1, Paused: false})
	d = h.takeDeliveries()
	if len(d) != 1 {
		t.Fatalf("want b delivered after unpause, got %d", len(d))
	}
	h.step(&PauseSubscription{NowMs: h.now, SubID: 1, Paused: true})
	// Lease expiry still applies while paused, and the paused subscription
	// does not get the message back.
	h.advance(h.cfg.LeaseMs)
	if got := h.takeDeliveries(); len(got) != 0 {
		t.Fatalf("a paused subscription got the expired message back: %+v", got)
	}
	if c := h.p.Counts(); c.Ready != 1 || c.Inflight != 0 {
		t.Fatalf("after expiry while paused: %+v", c)
	}
}

func TestPauseIsNotLoggedAndUnknownIsAnError(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.takeReplies()
	before := h.p.LastIndex()
	h.step(&PauseSubscription{NowMs: h.now, Ref: 7, SubID: 1, Paused: true})
	if h.p.LastIndex() != before {
		t.Fatal("a pause appended an entry")
	}
	if r := h.takeReplies(); len(r) != 0 {
		t.Fatalf("a pause replied %+v", r)
	}
	h.step(&PauseSubscription{NowMs: h.now, Ref: 8, SubID: 9, Paused: true})
	r := h.takeReplies()
	if len(r) != 1 || r[0].Ref != 8 || r[0].Err != ErrUnknownSubscription {
		t.Fatalf("pause of an unknown subscription: %+v", r)
	}
}
