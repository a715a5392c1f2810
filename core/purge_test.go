package core

import "testing"

// Purge: ready and delayed go, inflight and pending dead letters stay, the
// answer counts what went and waits for its entry, replay removes the same.

func TestPurgeRemovesReadyAndDelayedKeepsInflight(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.publish("leased")
	h.publish("ready1")
	h.publish("ready2")
	h.publishWith(&Publish{Confirm: true, Body: &Body{Payload: []byte("later")}, NotBeforeMs: h.now + 60_000})
	d := h.takeDeliveries()
	if len(d) != 1 {
		t.Fatalf("want one delivery, got %d", len(d))
	}
	h.takeReplies()
	if c := h.p.FastCounts(); c != (Counts{Ready: 2, Inflight: 1, Delayed: 1}) {
		t.Fatalf("counts before the purge: %+v", c)
	}
	h.step(&Purge{NowMs: h.now, Ref: 7})
	r := h.takeReplies()
	if len(r) != 1 || r[0].Kind != ReplyPurged || r[0].Ref != 7 || r[0].Offset != 3 {
		t.Fatalf("want ReplyPurged of 3, got %+v", r)
	}
	if c := h.p.FastCounts(); c != (Counts{Inflight: 1}) {
		t.Fatalf("counts after the purge: %+v", c)
	}
	if c := h.p.Counts(); c != h.p.FastCounts() {
		t.Fatalf("FastCounts %+v differs from Counts %+v", h.p.FastCounts(), c)
	}
	// The inflight message still settles, and nothing purged is delivered.
	h.ack(1, d[0].Tag)
	h.advance(120_000)
	if got := h.takeDeliveries(); len(got) != 0 {
		t.Fatalf("purged messages delivered: %+v", got)
	}
	if h.p.Live() != 0 {
		t.Fatalf("%d live after ack", h.p.Live())
	}
	// Replay of the log gives the same state.
	h.restart()
	if h.p.Live() != 0 {
		t.Fatalf("%d live after replay", h.p.Live())
	}
}

func TestPurgeAnswerWaitsForItsEntry(t *testing.T) {
	h := newHarness(t)
	h.publish("a")
	h.takeReplies()
	h.autoPersist = false
	h.step(&Purge{NowMs: h.now, Ref: 9})
	if r := h.takeReplies(); len(r) != 0 {
		t.Fatalf("purge answered before its entry was durable: %+v", r)
	}
	if c := h.p.FastCounts(); c.Ready != 0 {
		t.Fatalf("the count drops at once, got %+v", c)
	}
	// A crash before the entry is durable keeps the message.
	h.restart()
	if c := h.p.FastCounts(); c.Ready != 1 {
		t.Fatalf("a purge lost by a crash removed the message: %+v", c)
	}
}

func TestPurgeOfEmptyQueueAnswersZeroWithoutEntry(t *testing.T) {
	h := newHarness(t)
	before := h.p.LastIndex()
	h.step(&Purge{NowMs: h.now, Ref: 3})
	r := h.takeReplies()
	if len(r) != 1 || r[0].Kind != ReplyPurged || r[0].Offset != 0 {
		t.Fatalf("want ReplyPurged of 0, got %+v", r)
	}
	if h.p.LastIndex() != before {
		t.Fatal("an empty purge appended an entry")
	}
}

func TestPurgeEntryRoundTrips(t *testing.T) {
	e := Entry{Epoch: 1, Index: 5, Kind: EntryPurge, Offset: 42}
	back, err := DecodeEntry(AppendEntry(nil, &e))
	if err != nil || back.Kind != EntryPurge || back.Offset != 42 || back.Index != 5 {
		t.Fatalf("round trip: %+v %v", back, err)
	}
}

func TestPurgeKeepsPendingDeadLetters(t *testing.T) {
	h := newHarness(t)
	retries := uint32(0)
	h.step(&Declare{NowMs: h.now, DLQ: &DLQPolicy{Kind: DLQCustom, Target: DLQTarget{Topic: "dead"}}, MaxRetries: &retries})
	h.subscribe(1, 1, false)
	h.publish("poison")
	h.publish("ready")
	d := h.takeDeliveries()
	h.nack(1, true, 0, d[0].Tag)
	if c := h.p.FastCounts(); c.PendingDLQ != 1 {
		t.Fatalf("want one pending dead letter, got %+v (deliveries %d)", c, len(h.takeDeliveries()))
	}
	h.takeReplies()
	h.step(&Purge{NowMs: h.now, Ref: 1})
	c := h.p.FastCounts()
	if c.PendingDLQ != 1 {
		t.Fatalf("purge removed a pending dead letter: %+v", c)
	}
}
