package checker

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// Hand-built histories: each check must stay quiet on a good history and
// fire on a minimal bad one. Partition 1 is jobs/0 (max_retries 2,
// dead-letters into jobs-dlq), partition 2 is jobs-dlq/0; leases last
// 1000 ms; the node clock starts at 10_000.

const (
	jobs    = 1
	lease   = int64(1000)
	clock0  = int64(10_000)
	deliver = KindDeliver
)

type builder struct{ h History }

func newBuilder() *builder {
	return &builder{h: History{Meta: Meta{Format: FormatVersion, Scenario: "unit", LeaseMs: lease, PrefetchMax: 100,
		Queues: []QueueSpec{
			{Topic: "jobs", Partitions: 1, MaxRetries: 2, DLQKind: uint8(core.DLQCustom), DLQTarget: "jobs-dlq"},
			{Topic: "jobs-dlq", Partitions: 1, MaxRetries: 5, DeadLetterSink: true},
		},
		Partitions: []PartitionSpec{{Queue: 0, Topic: "jobs"}, {Queue: 1, Topic: "jobs-dlq"}}}}}
}

func (b *builder) add(e Event) *builder {
	e.Seq = uint64(len(b.h.Events) + 1)
	if e.Part == 0 && e.Kind != KindFault && e.Kind != KindPhase && e.Kind != KindNote {
		e.Part = jobs
	}
	b.h.Events = append(b.h.Events, e)
	return b
}

// published: msg 1 published with confirm at offset 0 (log index 1), confirmed.
func (b *builder) published(call Event) *builder {
	call.Kind, call.Client, call.Op, call.MsgID, call.Confirm = KindPublishCall, 1, 1, 1, true
	b.add(call)
	b.add(Event{Kind: KindAccept, MsgID: 1, Offset: 0, Index: 1, NowMs: clock0})
	b.add(Event{Kind: KindConfirm, MsgID: 1, Offset: 0, NowMs: clock0})
	return b.add(Event{Kind: KindPublishReturn, Client: 1, Op: 1, MsgID: 1, Offset: 0, Ok: true})
}

func (b *builder) subscribed(sub uint64, prefetch uint32) *builder {
	return b.add(Event{Kind: KindSubscribeCall, Client: 2, Op: 100 + sub, Sub: sub, Prefetch: prefetch})
}

func (b *builder) delivered(tag uint64, retries uint32, index uint64, nowMs int64) *builder {
	return b.add(Event{Kind: deliver, MsgID: 1, Offset: 0, Tag: tag, Sub: 1, Retries: retries, Index: index, NowMs: nowMs, Step: index})
}

func (b *builder) entry(kind core.EntryKind, index uint64, nowMs int64, mod func(*Event)) *builder {
	e := Event{Kind: KindEntry, MsgID: 1, Offset: 0, Index: index, NowMs: nowMs, EntryKind: uint8(kind), Trigger: "tick"}
	if mod != nil {
		mod(&e)
	}
	return b.add(e)
}

func (b *builder) acked(index uint64, nowMs int64) *builder {
	b.entry(core.EntryAck, index, nowMs, func(e *Event) { e.Trigger = "ack" })
	return b.add(Event{Kind: KindSettled, MsgID: 1, Offset: 0, NowMs: nowMs, Outcome: OutcomeAcked})
}

func (b *builder) crash(synced, recovered uint64) *builder {
	b.add(Event{Kind: KindCrash, Index: recovered, Index2: synced, NowMs: clock0})
	return b.add(Event{Kind: KindRecover, Index: recovered, Index2: synced, GotHash: "h", WantHash: "h"})
}

func (b *builder) final(outcome, reason string) *builder {
	b.add(Event{Kind: KindPhase, Text: "final"})
	return b.add(Event{Kind: KindFinal, MsgID: 1, Offset: 0, Outcome: outcome, Reason: reason})
}

// expect checks that h passes (item < 0) or fails with a violation of item
// whose detail contains want.
func expect(t *testing.T, b *builder, item int, want string) {
	t.Helper()
	r := Check(&b.h, Options{})
	if item < 0 {
		if !r.OK() {
			t.Fatalf("want no violations, got:\n%s", r.Summary(10))
		}
		return
	}
	for _, v := range r.Violations {
		if v.Item == item && strings.Contains(v.Detail, want) {
			return
		}
	}
	t.Fatalf("want an item %d violation mentioning %q, got:\n%s", item, want, r.Summary(10))
}

func TestHappyPathPasses(t *testing.T) {
	b := newBuilder().published(Event{}).subscribed(1, 1).delivered(1, 0, 2, clock0).acked(3, clock0+5).final(OutcomeAcked, "")
	expect(t, b, -1, "")
}

func TestDeliveryAfterDurableAck(t *testing.T) {
	b := newBuilder().published(Event{}).subscribed(1, 5).delivered(1, 0, 2, clock0).acked(3, clock0+5).delivered(2, 0, 4, clock0+10)
	expect(t, b, 2, "settled")
}

func TestSecondLiveLease(t *testing.T) {
	b := newBuilder().published(Event{}).subscribed(1, 5).delivered(1, 0, 2, clock0).delivered(2, 1, 3, clock0+10)
	expect(t, b, 3, "lease tag 1 is live")
}

func TestLeaseExpiringEarly(t *testing.T) {
	b := newBuilder().published(Event{}).subscribed(1, 5).delivered(1, 0, 2, clock0).
		entry(core.EntryRequeue, 3, clock0+lease-1, func(e *Event) { e.Retries, e.Cause = 1, core.CauseLeaseExpired })
	expect(t, b, 3, "before its deadline")
}

func TestRetriesMustCountUpByOne(t *testing.T) {
	b := newBuilder().published(Event{}).subscribed(1, 5).delivered(1, 0, 2, clock0).
		entry(core.EntryRequeue, 3, clock0+lease, func(e *Event) { e.Retries, e.Cause = 1, core.CauseLeaseExpired }).
		delivered(2, 2, 4, clock0+lease)
	expect(t, b, 6, "its requeue counted 1")
}

func TestConfirmedPublishLostInCrash(t *testing.T) {
	b := newBuilder().published(Event{}).crash(0, 0)
	expect(t, b, 1, "confirmed publish was lost")
}

func TestUnconfirmedPublishMayBeLost(t *testing.T) {
	b := newBuilder()
	b.add(Event{Kind: KindPublishCall, Client: 1, Op: 1, MsgID: 1})
	b.add(Event{Kind: KindAccept, MsgID: 1, Offset: 0, Index: 1, NowMs: clock0})
	b.crash(0, 0)
	b.add(Event{Kind: KindPhase, Text: "final"})
	expect(t, b, -1, "")
}

// A lease whose entry survived a crash is still live after it.
func TestDurableLeaseSurvivesCrash(t *testing.T) {
	b := newBuilder().published(Event{}).subscribed(1, 5).delivered(1, 0, 2, clock0).crash(2, 2).
		subscribed(2, 5).delivered(2, 0, 3, clock0+10)
	expect(t, b, 3, "lease tag 1 is live")
}

// A lease whose entry was lost in a crash is gone: redelivery at once is fine.
func TestLostLeaseMayBeRedelivered(t *testing.T) {
	b := newBuilder().published(Event{}).subscribed(1, 5).delivered(1, 0, 2, clock0).crash(1, 1).
		subscribed(2, 5).delivered(2, 0, 2, clock0+10).acked(3, clock0+20).final(OutcomeAcked, "")
	expect(t, b, -1, "")
}

func TestRetriesGoBackAfterRestart(t *testing.T) {
	b := newBuilder().published(Event{}).subscribed(1, 5).delivered(1, 0, 2, clock0).
		entry(core.EntryRequeue, 3, clock0+lease, func(e *Event) { e.Retries, e.Cause = 1, core.CauseLeaseExpired }).
		delivered(2, 1, 4, clock0+lease).crash(4, 4).
		entry(core.EntryRequeue, 5, clock0+2*lease, func(e *Event) { e.Retries, e.Cause = 2, core.CauseLeaseExpired }).
		delivered(3, 0, 6, clock0+2*lease)
	expect(t, b, 6, "retries 0")
}

func TestPrefetchExceeded(t *testing.T) {
	b := newBuilder().published(Event{}).subscribed(1, 1)
	b.add(Event{Kind: KindPublishCall, Client: 1, Op: 2, MsgID: 2})
	b.add(Event{Kind: KindAccept, MsgID: 2, Offset: 1, Index: 2, NowMs: clock0})
	b.delivered(1, 0, 3, clock0)
	b.add(Event{Kind: deliver, MsgID: 2, Offset: 1, Tag: 2, Sub: 1, Index: 4, NowMs: clock0, Step: 4})
	expect(t, b, 4, "prefetch 1")
}

func TestDeliveredBeforeNotBefore(t *testing.T) {
	b := newBuilder().published(Event{NotBeforeMs: clock0 + 500}).subscribed(1, 1).delivered(1, 0, 2, clock0+10)
	expect(t, b, 5, "before its not_before")
}

func TestDeliveredAfterTTL(t *testing.T) {
	b := newBuilder().published(Event{HasTTL: true, TTLMs: 100}).subscribed(1, 1).delivered(1, 0, 2, clock0+100)
	expect(t, b, 5, "TTL deadline")
}

func TestInflightDroppedByTTL(t *testing.T) {
	b := newBuilder().published(Event{HasTTL: true, TTLMs: 100}).subscribed(1, 1).delivered(1, 0, 2, clock0+50).
		entry(core.EntryDiscard, 3, clock0+200, func(e *Event) { e.Cause = uint8(core.ReasonExpired) })
	expect(t, b, 5, "dropped by TTL")
}

func TestRecoveryMismatch(t *testing.T) {
	b := newBuilder().published(Event{})
	b.add(Event{Kind: KindRecover, Index: 1, Index2: 1, GotHash: "a", WantHash: "b"})
	expect(t, b, 10, "differs")
	b = newBuilder().published(Event{})
	b.add(Event{Kind: KindRecover, Index: 0, Index2: 1, GotHash: "a", WantHash: "a"})
	expect(t, b, 10, "fsynced")
}

func TestConfirmedButMissingAtTheEnd(t *testing.T) {
	b := newBuilder().published(Event{})
	b.add(Event{Kind: KindPhase, Text: "final"})
	b.add(Event{Kind: KindFinal, MsgID: 9, Offset: 0, Outcome: OutcomeAcked})
	expect(t, b, 1, "holds msg 9")
}

func TestStuckAtTheEnd(t *testing.T) {
	b := newBuilder().published(Event{}).final(OutcomeLive, "")
	expect(t, b, 1, "still live")
}

func TestFirstDeliveriesOutOfOrder(t *testing.T) {
	b := newBuilder().subscribed(1, 5)
	for id := uint64(1); id <= 2; id++ {
		b.add(Event{Kind: KindPublishCall, Client: 1, Op: id, MsgID: id, Confirm: true})
		b.add(Event{Kind: KindAccept, MsgID: id, Offset: id - 1, Index: id, NowMs: clock0})
		b.add(Event{Kind: KindConfirm, MsgID: id, Offset: id - 1, NowMs: clock0})
	}
	b.add(Event{Kind: deliver, MsgID: 2, Offset: 1, Tag: 1, Sub: 1, Index: 3, NowMs: clock0, Step: 3})
	b.add(Event{Kind: deliver, MsgID: 1, Offset: 0, Tag: 2, Sub: 1, Index: 4, NowMs: clock0, Step: 3})
	r := Check(&b.h, Options{})
	if len(r.Violations) == 0 || r.Violations[0].Check != "fifo" {
		t.Fatalf("want a FIFO violation, got:\n%s", r.Summary(10))
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	b := newBuilder().published(Event{HasTTL: true, TTLMs: 5}).subscribed(1, 1).delivered(1, 0, 2, clock0)
	b.add(Event{Kind: deliver, Part: 2, MsgID: 1, Offset: 0, Tag: 1, Sub: 3, Index: 1, NowMs: clock0,
		Headers: []Header{{Key: "x-msg-id", Value: "1"}}})
	var buf bytes.Buffer
	if err := b.h.WriteJSONL(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Events) != len(b.h.Events) || back.Meta.Queues[0].DLQTarget != "jobs-dlq" {
		t.Fatalf("round trip lost data: %d events", len(back.Events))
	}
	for i := range back.Events {
		if back.Events[i].Kind != b.h.Events[i].Kind || back.Events[i].Seq != b.h.Events[i].Seq || len(back.Events[i].Headers) != len(b.h.Events[i].Headers) {
			t.Fatalf("event %d changed: %+v", i+1, back.Events[i])
		}
	}
}

// Tags issued from a log tail a crash lost are issued again: a retry-after
// asked for on the old delivery must not bind the new one.
func TestRetryAfterFollowsTheDeliveryNotTheTag(t *testing.T) {
	b := newBuilder().published(Event{}).subscribed(1, 5)
	b.add(Event{Kind: KindPublishCall, Client: 1, Op: 2, MsgID: 2})
	b.add(Event{Kind: KindAccept, MsgID: 2, Offset: 1, Index: 2, NowMs: clock0})
	b.add(Event{Kind: deliver, MsgID: 2, Offset: 1, Tag: 5, Sub: 1, Index: 3, NowMs: clock0, Step: 3})
	b.add(Event{Kind: KindSettleCall, Client: 2, Op: 9, MsgID: 2, Tag: 5, Sub: 1, Action: ActionRetry, NotBeforeMs: clock0 + 5000})
	b.crash(2, 2).subscribed(2, 5)
	b.add(Event{Kind: deliver, MsgID: 1, Offset: 0, Tag: 5, Sub: 2, Index: 3, NowMs: clock0 + 10, Step: 4})
	b.entry(core.EntryRequeue, 4, clock0+20, func(e *Event) { e.Retries, e.Cause, e.Trigger = 1, core.CauseNack, "nack" })
	b.add(Event{Kind: deliver, MsgID: 1, Offset: 0, Tag: 6, Sub: 2, Retries: 1, Index: 5, NowMs: clock0 + 20, Step: 5})
	expect(t, b, -1, "")
}
