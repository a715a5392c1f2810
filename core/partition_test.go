package core

import (
	"errors"
	"strconv"
	"testing"
)

func TestConfirmWaitsForDurability(t *testing.T) {
	h := newHarness(t)
	h.autoPersist = false
	h.publish("a")
	if got := h.takeReplies(); len(got) != 0 {
		t.Fatalf("confirm released before durable: %+v", got)
	}
	h.persist()
	got := h.takeReplies()
	if len(got) != 1 || got[0].Kind != ReplyPublished || got[0].Offset != 0 {
		t.Fatalf("want one confirm for offset 0 after durable, got %+v", got)
	}
}

func TestUnconfirmedPublishHasNoReply(t *testing.T) {
	h := newHarness(t)
	h.publishWith(&Publish{Body: &Body{Payload: []byte("x")}})
	if got := h.takeReplies(); len(got) != 0 {
		t.Fatalf("unconfirmed publish replied: %+v", got)
	}
}

func TestDeliverOnlyAfterPublishIsDurable(t *testing.T) {
	h := newHarness(t)
	h.autoPersist = false
	h.subscribe(1, 10, false)
	h.publish("a")
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatalf("delivered a message whose publish is not durable: %+v", d)
	}
	h.persist()
	if d := h.takeDeliveries(); len(d) != 1 {
		t.Fatalf("want the durable message delivered, got %d", len(d))
	}
}

func TestReadyInflightAckedIsFinal(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	off := h.publish("a")
	d := h.takeDeliveries()
	if len(d) != 1 || d[0].Offset != off {
		t.Fatalf("want delivery of %d, got %+v", off, d)
	}
	if v, _ := h.p.Message(off); v.State != MessageInflight {
		t.Fatalf("delivered message is %v, want inflight", v.State)
	}
	h.ack(1, d[0].Tag)
	if _, live := h.p.Message(off); live {
		t.Fatal("acked message still live")
	}
	if len(h.settled) != 1 || h.settled[0].Kind != SettledAcked {
		t.Fatalf("want a durable ack settlement, got %+v", h.settled)
	}
	// Acked is final: no lease expiry, restart or duplicate ack brings it back.
	h.advance(h.cfg.LeaseMs * 3)
	h.restart()
	h.subscribe(2, 10, false)
	h.advance(h.cfg.LeaseMs * 3)
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatalf("acked message delivered again: %+v", d)
	}
}

func TestDuplicateAndLateAcksAreTypedStaleErrors(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.publish("a")
	tag := h.takeDeliveries()[0].Tag
	h.ack(1, tag)
	h.takeReplies()
	h.ack(1, tag) // duplicate
	errs := h.errorsOf(h.takeReplies())
	if len(errs) != 1 || errs[0] != ErrStaleTag {
		t.Fatalf("duplicate ack: want ErrStaleTag, got %v", errs)
	}
	if h.p.Stats().Acked != 1 {
		t.Fatalf("acked %d times, want 1", h.p.Stats().Acked)
	}
}

func TestLateAckAfterLeaseExpiryIsStale(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.publish("a")
	first := h.takeDeliveries()[0]
	h.advance(h.cfg.LeaseMs)
	second := h.takeDeliveries()
	if len(second) != 1 || second[0].Tag == first.Tag {
		t.Fatalf("want a redelivery with a new tag, got %+v", second)
	}
	h.ack(1, first.Tag)
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrStaleTag {
		t.Fatalf("late ack of an expired lease: want ErrStaleTag, got %v", errs)
	}
	if v, ok := h.p.Message(first.Offset); !ok || v.State != MessageInflight || v.Tag != second[0].Tag {
		t.Fatal("a stale ack settled the current lease")
	}
}

func TestSettledUntilIsMonotonicAndRangesCoalesce(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 10, false)
	for i := 0; i < 6; i++ {
		h.publish("m")
	}
	ds := h.takeDeliveries()
	// Ack out of order: 1, 2, 4 then 0.
	h.ack(1, ds[1].Tag, ds[2].Tag, ds[4].Tag)
	if got := h.p.SettledUntil(); got != 0 {
		t.Fatalf("settled_until %d, want 0 while offset 0 is live", got)
	}
	want := []OffsetRange{{1, 3}, {4, 5}}
	if got := h.p.SettledRanges(); !equalRanges(got, want) {
		t.Fatalf("settled ranges %v, want %v", got, want)
	}
	h.ack(1, ds[0].Tag)
	if got := h.p.SettledUntil(); got != 3 {
		t.Fatalf("settled_until %d, want 3", got)
	}
	h.ack(1, ds[3].Tag, ds[5].Tag)
	if got := h.p.SettledUntil(); got != 6 {
		t.Fatalf("settled_until %d, want 6", got)
	}
}

func equalRanges(a, b []OffsetRange) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLeaseExpiryReturnsToReady(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.publish("a")
	h.takeDeliveries()
	h.advance(h.cfg.LeaseMs - 1)
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatal("redelivered before the lease ended")
	}
	if h.lastWake != h.now+1 {
		t.Fatalf("next wake %d, want the lease deadline %d", h.lastWake, h.now+1)
	}
	h.advance(1)
	d := h.takeDeliveries()
	if len(d) != 1 || d[0].Retries != 1 {
		t.Fatalf("want one redelivery with retries=1, got %+v", d)
	}
}

func TestLeaseSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	off := h.publish("a")
	h.takeDeliveries()
	h.advance(1000)
	h.restart()
	v, ok := h.p.Message(off)
	if !ok || v.State != MessageInflight {
		t.Fatalf("lease lost on restart: %+v", v)
	}
	h.subscribe(2, 1, false)
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatal("leased message delivered before its deadline after restart")
	}
	h.advance(h.cfg.LeaseMs - 1000)
	if d := h.takeDeliveries(); len(d) != 1 || d[0].SubID != 2 {
		t.Fatalf("want redelivery to the new subscription at the old deadline, got %+v", d)
	}
}

func TestPrefetchBoundsUnsettledDeliveries(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 3, false)
	for i := 0; i < 10; i++ {
		h.publish("m")
	}
	d := h.takeDeliveries()
	if len(d) != 3 {
		t.Fatalf("delivered %d with prefetch 3", len(d))
	}
	h.ack(1, d[0].Tag)
	if d := h.takeDeliveries(); len(d) != 1 {
		t.Fatalf("one ack frees one slot, got %d deliveries", len(d))
	}
}

func TestPrefetchZeroIsOne(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 0, false)
	h.publish("a")
	h.publish("b")
	if d := h.takeDeliveries(); len(d) != 1 {
		t.Fatalf("prefetch 0 delivered %d, want 1", len(d))
	}
}

func TestUnsubscribeRequeuesAtOnce(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 100, false)
	for i := 0; i < 100; i++ {
		h.publish("m")
	}
	if d := h.takeDeliveries(); len(d) != 100 {
		t.Fatalf("A took %d, want 100", len(d))
	}
	h.subscribe(2, 100, false)
	h.step(&Unsubscribe{NowMs: h.now, SubID: 1})
	d := h.takeDeliveries()
	if len(d) != 100 {
		t.Fatalf("B got %d at once, want 100", len(d))
	}
	for _, x := range d {
		if x.SubID != 2 || x.Retries != 1 {
			t.Fatalf("requeued delivery %+v: want sub 2, retries 1 (an attempt)", x)
		}
	}
}

func TestAutoAckSettlesOnDelivery(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 2, true)
	off := h.publish("a")
	d := h.takeDeliveries()
	if len(d) != 1 {
		t.Fatalf("want one delivery, got %d", len(d))
	}
	if _, live := h.p.Message(off); live {
		t.Fatal("auto-ack delivery left the message live")
	}
	h.ack(1, d[0].Tag)
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrAutoAckSubscription {
		t.Fatalf("ack on auto-ack: want ErrAutoAckSubscription, got %v", errs)
	}
}

func TestAutoAckDeliversAtMostPrefetchPerStep(t *testing.T) {
	h := newHarness(t)
	h.autoPersist = false
	h.subscribe(1, 4, true)
	for i := 0; i < 10; i++ {
		h.publish("m")
	}
	h.collect(h.p.Step(&Persisted{NowMs: h.now, UpToIndex: h.p.LastIndex()}))
	if d := h.takeDeliveries(); len(d) != 4 {
		t.Fatalf("auto-ack step delivered %d, want prefetch 4", len(d))
	}
}

func TestRetryCountsUpAndIsShown(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.publish("a")
	for want := uint32(0); want < 3; want++ {
		d := h.takeDeliveries()
		if len(d) != 1 || d[0].Retries != want {
			t.Fatalf("delivery %d: want retries %d, got %+v", want, want, d)
		}
		h.nack(1, true, 0, d[0].Tag)
	}
}

func declare(h *harness, policy *DLQPolicy, maxRetries *uint32, ttl *int64) {
	h.t.Helper()
	h.step(&Declare{NowMs: h.now, Ref: 99, DLQ: policy, MaxRetries: maxRetries, DefaultTTLMs: ttl})
}

func u32(v uint32) *uint32 { return &v }
func i64(v int64) *int64   { return &v }

func TestRetriesExhaustedDeadLettersWithHeaders(t *testing.T) {
	h := newHarnessWith(t, DefaultConfig(QueueID{Topic: "orders", Group: "eu"}))
	declare(h, &DLQPolicy{Kind: DLQCustom, Target: DLQTarget{Topic: "orders-dlq"}}, u32(2), nil)
	h.subscribe(1, 1, false)
	off := h.publishWith(&Publish{Body: &Body{Payload: []byte("p"), Headers: []Header{{"x-user", "1"}}}})
	for i := 0; i < 3; i++ {
		d := h.takeDeliveries()
		if len(d) != 1 {
			t.Fatalf("attempt %d: no delivery", i)
		}
		h.nack(1, true, 0, d[0].Tag)
	}
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatal("delivered past max_retries")
	}
	if len(h.deadLetters) != 1 {
		t.Fatalf("want one dead-letter copy, got %d", len(h.deadLetters))
	}
	dl := h.deadLetters[0]
	want := map[string]string{
		"x-user": "1", HeaderDLQSourceTopic: "orders", HeaderDLQSourceGroup: "eu",
		HeaderDLQSourceOffset: strconv.FormatUint(off, 10), HeaderDLQRetryCount: "2",
		HeaderDLQReason: "retries_exhausted", HeaderDLQDeadLetteredAtMs: strconv.FormatInt(h.now, 10),
		HeaderDLQSourcePartition: strconv.FormatUint(uint64(h.p.cfg.Queue.Partition), 10),
	}
	for k, v := range want {
		if got, _ := headerValue(dl.Body, k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if dl.Target != (DLQTarget{Topic: "orders-dlq"}) {
		t.Fatalf("target %+v", dl.Target)
	}
	if v, _ := h.p.Message(off); v.State != MessagePendingDLQ {
		t.Fatalf("message %v before the copy is stored, want pending_dlq", v.State)
	}
	h.step(&DeadLetterDone{NowMs: h.now, Offset: off})
	if _, live := h.p.Message(off); live {
		t.Fatal("message live after its dead-letter copy was stored")
	}
}

func TestFailDeadLettersAsTerminalNack(t *testing.T) {
	h := newHarness(t)
	declare(h, &DLQPolicy{Kind: DLQCustom, Target: DLQTarget{Topic: "dlq"}}, nil, nil)
	h.subscribe(1, 1, false)
	h.publish("a")
	h.nack(1, false, 0, h.takeDeliveries()[0].Tag)
	if len(h.deadLetters) != 1 {
		t.Fatal("fail did not dead-letter")
	}
	if r, _ := headerValue(h.deadLetters[0].Body, HeaderDLQReason); r != "terminal_nack" {
		t.Fatalf("reason %q", r)
	}
	if _, ok := headerValue(h.deadLetters[0].Body, HeaderDLQSourceGroup); ok {
		t.Fatal("source_group set for an ungrouped source")
	}
}

func TestDefaultPolicyDiscardsAfterFiveRetries(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	off := h.publish("a")
	attempts := 0
	for {
		d := h.takeDeliveries()
		if len(d) == 0 {
			break
		}
		attempts++
		h.nack(1, true, 0, d[0].Tag)
	}
	if attempts != 6 {
		t.Fatalf("delivered %d times, want 1 + 5 retries", attempts)
	}
	if _, live := h.p.Message(off); live || len(h.deadLetters) != 0 {
		t.Fatal("discard policy kept the message or copied it")
	}
	if len(h.settled) != 1 || h.settled[0].Kind != SettledDiscarded || h.settled[0].Reason != ReasonRetriesExhausted {
		t.Fatalf("settlement %+v", h.settled)
	}
}

func TestGlobalPolicyUsesGlobalTargetOrDiscards(t *testing.T) {
	h := newHarness(t)
	declare(h, &DLQPolicy{Kind: DLQGlobal}, u32(0), nil)
	h.subscribe(1, 1, false)
	h.publish("a")
	h.nack(1, true, 0, h.takeDeliveries()[0].Tag)
	if len(h.deadLetters) != 0 || h.settled[len(h.settled)-1].Kind != SettledDiscarded {
		t.Fatal("global policy without a target must discard")
	}
	h.step(&SetGlobalDLQ{NowMs: h.now, Target: &DLQTarget{Topic: "global-dlq"}})
	h.publish("b")
	h.nack(1, true, 0, h.takeDeliveries()[0].Tag)
	if len(h.deadLetters) != 1 || h.deadLetters[0].Target.Topic != "global-dlq" {
		t.Fatalf("global policy with a target: %+v", h.deadLetters)
	}
}

func TestDeadLetterIntoItselfIsRefused(t *testing.T) {
	h := newHarness(t)
	declare(h, &DLQPolicy{Kind: DLQCustom, Target: DLQTarget{Topic: "orders"}}, nil, nil)
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrDeadLetterLoop {
		t.Fatalf("want ErrDeadLetterLoop, got %v", errs)
	}
	declare(h, &DLQPolicy{Kind: DLQCustom, Target: DLQTarget{Topic: "Bad Name"}}, nil, nil)
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrInvalidName {
		t.Fatalf("want ErrInvalidName, got %v", errs)
	}
}

func TestRedeclareKeepsOmittedFields(t *testing.T) {
	h := newHarness(t)
	declare(h, nil, u32(7), i64(500))
	declare(h, &DLQPolicy{Kind: DLQGlobal}, nil, nil)
	s := h.p.Settings()
	if s.MaxRetries != 7 || s.DefaultTTLMs != 500 || s.DLQ.Kind != DLQGlobal {
		t.Fatalf("settings %+v", s)
	}
}

func TestPendingDeadLetterIsResentAfterRestart(t *testing.T) {
	h := newHarness(t)
	declare(h, &DLQPolicy{Kind: DLQCustom, Target: DLQTarget{Topic: "dlq"}}, nil, nil)
	h.subscribe(1, 1, false)
	off := h.publish("a")
	h.nack(1, false, 0, h.takeDeliveries()[0].Tag)
	h.deadLetters = nil
	h.restart()
	h.advance(1)
	if len(h.deadLetters) != 1 || h.deadLetters[0].Offset != off {
		t.Fatalf("pending copy not resent after restart: %+v", h.deadLetters)
	}
}

func TestDelayedPublishNeverEarly(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 10, false)
	h.publishWith(&Publish{Body: &Body{Payload: []byte("d")}, NotBeforeMs: h.now + 2000})
	if h.lastWake != h.now+2000 {
		t.Fatalf("wake %d, want not_before %d", h.lastWake, h.now+2000)
	}
	h.advance(1999)
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatal("delivered before not_before")
	}
	h.advance(1)
	if d := h.takeDeliveries(); len(d) != 1 {
		t.Fatal("not delivered at not_before")
	}
}

func TestDelayedPublishSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	off := h.publishWith(&Publish{Body: &Body{Payload: []byte("d")}, NotBeforeMs: h.now + 2000})
	h.restart()
	h.subscribe(1, 10, false)
	if v, _ := h.p.Message(off); v.State != MessageDelayed || v.DueMs != h.now+2000 {
		t.Fatalf("delay lost on restart: %+v", v)
	}
	h.advance(2000)
	if d := h.takeDeliveries(); len(d) != 1 {
		t.Fatal("delayed message not delivered after restart")
	}
}

func TestRetryAfterHoldsNoPrefetchSlot(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.publish("a")
	h.publish("b")
	d := h.takeDeliveries()
	h.nack(1, true, h.now+5000, d[0].Tag)
	d2 := h.takeDeliveries()
	if len(d2) != 1 || d2[0].Offset != 1 {
		t.Fatalf("the slot freed by retry-after should take the next message, got %+v", d2)
	}
	h.ack(1, d2[0].Tag)
	h.advance(4999)
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatal("retry-after delivered early")
	}
	h.advance(1)
	if d := h.takeDeliveries(); len(d) != 1 || d[0].Offset != 0 || d[0].Retries != 1 {
		t.Fatalf("retry-after not delivered at its deadline: %+v", d)
	}
}

func TestNackNotBeforeWithoutRequeueSettlesNothing(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	off := h.publish("a")
	tag := h.takeDeliveries()[0].Tag
	h.nack(1, false, h.now+10, tag)
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrNotBeforeWithoutRetry {
		t.Fatalf("want ErrNotBeforeWithoutRetry, got %v", errs)
	}
	if v, _ := h.p.Message(off); v.State != MessageInflight {
		t.Fatal("a refused nack settled the message")
	}
}

func TestPerMessageTTLBeatsQueueDefault(t *testing.T) {
	h := newHarness(t)
	declare(h, nil, nil, i64(10_000))
	a := h.publishWith(&Publish{Body: &Body{}, HasTTL: true, TTLMs: 1000})
	b := h.publish("default")
	va, _ := h.p.Message(a)
	vb, _ := h.p.Message(b)
	if va.ExpiresAtMs != h.now+1000 || vb.ExpiresAtMs != h.now+10_000 {
		t.Fatalf("deadlines %d and %d", va.ExpiresAtMs, vb.ExpiresAtMs)
	}
	// The deadline is fixed at publish: redeclaring does not move it.
	declare(h, nil, nil, i64(1))
	if vb2, _ := h.p.Message(b); vb2.ExpiresAtMs != vb.ExpiresAtMs {
		t.Fatal("redeclare moved an existing deadline")
	}
}

func TestExpiredMessageIsNeverDeliveredAndGoesToDLQ(t *testing.T) {
	h := newHarness(t)
	declare(h, &DLQPolicy{Kind: DLQCustom, Target: DLQTarget{Topic: "dlq"}}, nil, nil)
	h.publishWith(&Publish{Body: &Body{}, HasTTL: true, TTLMs: 1000})
	h.now += 1000 // no Tick: the subscribe itself must not deliver it
	h.subscribe(1, 1, false)
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatal("expired message delivered")
	}
	if len(h.deadLetters) != 1 {
		t.Fatal("expired message not dead-lettered")
	}
	if r, _ := headerValue(h.deadLetters[0].Body, HeaderDLQReason); r != "expired" {
		t.Fatalf("reason %q", r)
	}
}

func TestExpiryWithoutConsumerFiresOnTimer(t *testing.T) {
	h := newHarness(t)
	h.publishWith(&Publish{Body: &Body{}, HasTTL: true, TTLMs: 1000})
	if h.lastWake != h.now+1000 {
		t.Fatalf("wake %d, want TTL deadline", h.lastWake)
	}
	h.advance(1000)
	if len(h.settled) != 1 || h.settled[0].Reason != ReasonExpired {
		t.Fatalf("want a discard for expiry, got %+v", h.settled)
	}
}

func TestTTLNeverDropsInflight(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	off := h.publishWith(&Publish{Body: &Body{}, HasTTL: true, TTLMs: 1000})
	d := h.takeDeliveries()
	h.advance(5000)
	if v, ok := h.p.Message(off); !ok || v.State != MessageInflight {
		t.Fatal("TTL dropped an inflight message")
	}
	h.ack(1, d[0].Tag)
	if len(h.settled) != 1 || h.settled[0].Kind != SettledAcked {
		t.Fatalf("ack after TTL: %+v", h.settled)
	}
	// A retried expired message leaves with reason expired instead.
	off2 := h.publishWith(&Publish{Body: &Body{}, HasTTL: true, TTLMs: 1000})
	d = h.takeDeliveries()
	h.advance(2000)
	h.nack(1, true, 0, d[0].Tag)
	if _, live := h.p.Message(off2); live || h.settled[len(h.settled)-1].Reason != ReasonExpired {
		t.Fatalf("retry of an expired message: %+v", h.settled)
	}
}

func TestReservedHeadersRejected(t *testing.T) {
	for _, key := range []string{"fibril.retries", "stroma.dlq.reason", "fibril.x"} {
		h := newHarness(t)
		h.publishWith(&Publish{Body: &Body{Headers: []Header{{key, "1"}}}})
		if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrReservedHeader {
			t.Fatalf("%s: want ErrReservedHeader, got %v", key, errs)
		}
		if h.p.NextOffset() != 0 {
			t.Fatalf("%s: rejected publish was stored", key)
		}
	}
	h := newHarness(t)
	h.publishWith(&Publish{Body: &Body{Headers: []Header{{"fibril.client.producer_id", "p"}}}})
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 0 {
		t.Fatalf("fibril.client.* must be accepted: %v", errs)
	}
}

func TestPayloadAndHeaderLimits(t *testing.T) {
	cfg := DefaultConfig(QueueID{Topic: "t"})
	cfg.PayloadBytesMax, cfg.HeaderCountMax, cfg.HeaderBytesMax = 4, 2, 8
	h := newHarnessWith(t, cfg)
	cases := []struct {
		body *Body
		want *Error
	}{
		{&Body{Payload: []byte("12345")}, ErrPayloadTooLarge},
		{&Body{Headers: []Header{{"a", "1"}, {"b", "2"}, {"c", "3"}}}, ErrHeadersTooLarge},
		{&Body{Headers: []Header{{"abcd", "12345"}}}, ErrHeadersTooLarge},
	}
	for _, c := range cases {
		h.publishWith(&Publish{Body: c.body})
		if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != c.want {
			t.Fatalf("want %v, got %v", c.want, errs)
		}
	}
	h.publishWith(&Publish{Body: &Body{Payload: []byte("1234"), Headers: []Header{{"ab", "123456"}}}})
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 0 {
		t.Fatalf("at the limits must pass: %v", errs)
	}
}

func TestNames(t *testing.T) {
	valid := []string{"a", "orders", "_dlq.x", "a-b_c.d", string(make128('a'))}
	invalid := []string{"", ".a", "a.", "a..b", "A", "a b", "é", string(make128('a')) + "a"}
	for _, n := range valid {
		if ValidateName(n) != nil {
			t.Errorf("%q should be valid", n)
		}
	}
	for _, n := range invalid {
		if ValidateName(n) == nil {
			t.Errorf("%q should be invalid", n)
		}
	}
	if NormalizeGroup("default") != "" {
		t.Error("group default is the default namespace")
	}
	if _, err := NewPartition(DefaultConfig(QueueID{Topic: "Bad"})); !errors.Is(err, ErrInvalidName) {
		t.Errorf("a partition with an invalid topic: %v", err)
	}
}

func make128(c byte) []byte {
	b := make([]byte, 128)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestDeliveryTagsAreUniqueAcrossRestarts(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 10, false)
	for i := 0; i < 5; i++ {
		h.publish("m")
	}
	seen := map[uint64]bool{}
	for _, d := range h.takeDeliveries() {
		seen[d.Tag] = true
	}
	h.restart()
	h.subscribe(2, 10, false)
	h.advance(h.cfg.LeaseMs)
	for _, d := range h.takeDeliveries() {
		if seen[d.Tag] {
			t.Fatalf("tag %d reused after restart", d.Tag)
		}
		seen[d.Tag] = true
	}
	if len(seen) != 10 {
		t.Fatalf("want 10 distinct tags, got %d", len(seen))
	}
}

func TestQueueDepthAndStorageBackpressure(t *testing.T) {
	cfg := DefaultConfig(QueueID{Topic: "t"})
	cfg.QueueDepthMax, cfg.UnpersistedEntriesMax = 2, 3
	h := newHarnessWith(t, cfg)
	h.publish("a")
	h.publish("b")
	h.takeReplies()
	h.publish("c")
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrQueueFull || !errs[0].Retryable() {
		t.Fatalf("want retryable ErrQueueFull, got %v", errs)
	}
	cfg.QueueDepthMax = 100
	h = newHarnessWith(t, cfg)
	h.autoPersist = false
	for i := 0; i < 4; i++ {
		h.publish("x")
	}
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrStorageBehind {
		t.Fatalf("want ErrStorageBehind, got %v", errs)
	}
}

func TestCompetingConsumersShareFairly(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 100, false)
	h.subscribe(2, 100, false)
	h.autoPersist = false
	for i := 0; i < 10; i++ {
		h.publish("m")
	}
	h.persist()
	perSub := map[uint64]int{}
	for _, d := range h.takeDeliveries() {
		perSub[d.SubID]++
	}
	if perSub[1] != 5 || perSub[2] != 5 {
		t.Fatalf("unfair split %v", perSub)
	}
}

func TestFirstDeliveriesInLogOrder(t *testing.T) {
	h := newHarness(t)
	for i := 0; i < 50; i++ {
		h.publish("m")
	}
	h.subscribe(1, 1000, false)
	for i, d := range h.takeDeliveries() {
		if d.Offset != uint64(i) {
			t.Fatalf("delivery %d is offset %d", i, d.Offset)
		}
	}
}

func TestClockSteppingBackDoesNotShortenDelays(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.publishWith(&Publish{Body: &Body{}, NotBeforeMs: h.now + 100})
	h.now -= 50_000 // the driver's clock jumps back
	h.step(&Tick{NowMs: h.now})
	h.now += 50_099
	h.step(&Tick{NowMs: h.now})
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatal("delivered early")
	}
	h.advance(1)
	if d := h.takeDeliveries(); len(d) != 1 {
		t.Fatal("not delivered at not_before")
	}
}

func TestUnknownSubscriptionAndDoubleSubscribe(t *testing.T) {
	h := newHarness(t)
	h.ack(7, 1)
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrUnknownSubscription {
		t.Fatalf("want ErrUnknownSubscription, got %v", errs)
	}
	h.subscribe(1, 1, false)
	h.subscribe(1, 1, false)
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrAlreadySubscribed {
		t.Fatalf("want ErrAlreadySubscribed, got %v", errs)
	}
}

func TestSettleBatchLimit(t *testing.T) {
	cfg := DefaultConfig(QueueID{Topic: "t"})
	cfg.SettleBatchMax = 2
	h := newHarnessWith(t, cfg)
	h.subscribe(1, 5, false)
	h.ack(1, 1, 2, 3)
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrBatchTooLarge {
		t.Fatalf("want ErrBatchTooLarge, got %v", errs)
	}
}

func TestExpirySweepIsBounded(t *testing.T) {
	cfg := DefaultConfig(QueueID{Topic: "t"})
	cfg.ExpiryBatchMax = 3
	h := newHarnessWith(t, cfg)
	for i := 0; i < 10; i++ {
		h.publishWith(&Publish{Body: &Body{}, HasTTL: true, TTLMs: 10})
	}
	h.autoPersist = false
	h.now += 10
	h.step(&Tick{NowMs: h.now})
	if n := len(h.log) - h.durable; n != 3 {
		t.Fatalf("one step expired %d, want ExpiryBatchMax 3", n)
	}
	if h.lastWake != h.now {
		t.Fatalf("a cut-short sweep must ask to be woken now, got %d", h.lastWake)
	}
}

// TestExpiredNeverDeliveredEvenWhenTheSweepIsCutShort: the TTL sweep is
// bounded, so dispatch itself must refuse expired messages it reaches.
func TestExpiredNeverDeliveredEvenWhenTheSweepIsCutShort(t *testing.T) {
	cfg := DefaultConfig(QueueID{Topic: "t"})
	cfg.ExpiryBatchMax = 1
	h := newHarnessWith(t, cfg)
	for i := 0; i < 5; i++ {
		h.publishWith(&Publish{Body: &Body{}, HasTTL: true, TTLMs: 100})
	}
	h.now += 100
	h.subscribe(1, 10, false)
	if d := h.takeDeliveries(); len(d) != 0 {
		t.Fatalf("delivered %d expired messages", len(d))
	}
}

// TestDeadLetterCopyCanBeStoredInItsTarget: the copy carries stroma.dlq.*
// headers, which only a system publish may set.
func TestDeadLetterCopyCanBeStoredInItsTarget(t *testing.T) {
	h := newHarness(t)
	declare(h, &DLQPolicy{Kind: DLQCustom, Target: DLQTarget{Topic: "orders-dlq"}}, nil, nil)
	h.subscribe(1, 1, false)
	h.publish("a")
	h.nack(1, false, 0, h.takeDeliveries()[0].Tag)
	copyBody := h.deadLetters[0].Body
	target := newHarnessWith(t, DefaultConfig(QueueID{Topic: "orders-dlq"}))
	target.publishWith(&Publish{Confirm: true, Body: copyBody})
	if errs := target.errorsOf(target.takeReplies()); len(errs) != 1 || errs[0] != ErrReservedHeader {
		t.Fatalf("a client publish with the copy's headers must be refused: %v", errs)
	}
	target.publishWith(&Publish{Confirm: true, Body: copyBody, System: true})
	if r := target.takeReplies(); len(r) != 1 || r[0].Kind != ReplyPublished {
		t.Fatalf("the system publish of a dead-letter copy: %+v", r)
	}
}

// TestTagFloorKeepsTagsUniqueAcrossLostTails: a tag handed out from a log tail
// the crash lost is not handed out again when the driver raises the floor.
func TestTagFloorKeepsTagsUniqueAcrossLostTails(t *testing.T) {
	h := newHarness(t)
	h.publish("a")
	h.autoPersist = false
	h.subscribe(1, 1, false)
	lost := h.takeDeliveries()[0].Tag // its lease entry never becomes durable
	cfg := h.cfg
	cfg.TagFloor = 1 << 40
	p, err := Recover(cfg, nil, h.log[:h.durable])
	if err != nil {
		t.Fatal(err)
	}
	p.Step(&Subscribe{NowMs: h.now, SubID: 2, Prefetch: 1})
	rd := p.Step(&Tick{NowMs: h.now})
	_ = rd
	var tag uint64
	if v, ok := p.Message(0); ok && v.State == MessageInflight {
		tag = v.Tag
	}
	if tag == lost || tag < cfg.TagFloor {
		t.Fatalf("tag %d after recovery; lost tag %d, floor %d", tag, lost, cfg.TagFloor)
	}
}
