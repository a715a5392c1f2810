package checker

import (
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// Hand-built stream histories (item 8): partition 1 is ticks/0 (durable
// tier), partition 2 is pulse/0 (ephemeral tier). Each check stays quiet
// on the good history and fires on a minimal bad one.

const (
	ticks = 1
	pulse = 2
)

func newStreamBuilder() *builder {
	return &builder{h: History{Meta: Meta{Format: FormatVersion, Scenario: "unit",
		Queues:     []QueueSpec{{Topic: "ticks", Partitions: 1, Stream: true, Tier: core.TierDurable}, {Topic: "pulse", Partitions: 1, Stream: true}},
		Partitions: []PartitionSpec{{Queue: 0, Topic: "ticks"}, {Queue: 1, Topic: "pulse"}}}}}
}

// records appends n records at offsets from..from+n-1 (msg id = offset+1;
// header k alternates a, b).
func (b *builder) records(part int, from, n uint64) *builder {
	for o := from; o < from+n; o++ {
		v := "a"
		if o%2 == 1 {
			v = "b"
		}
		b.add(Event{Kind: KindStreamRecord, Node: 1, Part: part, Offset: o, Index: o + 2, MsgID: o + 1, Headers: []Header{{Key: "k", Value: v}}})
	}
	return b
}

func (b *builder) streamDeliver(part int, sub uint64, offsets ...uint64) *builder {
	for _, o := range offsets {
		b.add(Event{Kind: KindStreamDeliver, Node: 1, Part: part, Sub: sub, Offset: o, MsgID: o + 1})
	}
	return b
}

func (b *builder) clientDeliver(part int, sub uint64, offsets ...uint64) *builder {
	for _, o := range offsets {
		b.add(Event{Kind: KindStreamClientDeliver, Client: 5, Part: part, Sub: sub, Offset: o, Tag: o, MsgID: o + 1})
	}
	return b
}

func streamChecks(b *builder) []Violation { return newStreamChecker(&b.h).run() }

func wantStream(t *testing.T, name string, b *builder, check string) {
	t.Helper()
	vs := streamChecks(b)
	if check == "" {
		if len(vs) != 0 {
			t.Errorf("%s: want no violation, got %v", name, vs)
		}
		return
	}
	for _, v := range vs {
		if v.Check == check && v.Item == 8 {
			return
		}
	}
	t.Errorf("%s: want an item 8 %s violation, got %v", name, check, vs)
}

func TestStreamChecks(t *testing.T) {
	sub := func(part int, id uint64, start uint64, mod func(*Event)) Event {
		e := Event{Kind: KindStreamSubStart, Node: 1, Part: part, Sub: id, Offset: start, Index: 6}
		if mod != nil {
			mod(&e)
		}
		return e
	}
	durable := func(e *Event) { e.Text = "c1" }
	filtered := func(e *Event) { e.Headers = []Header{{Key: "k", Value: "a*"}} }

	good := newStreamBuilder().records(ticks, 0, 6).add(sub(ticks, 7, 0, durable)).
		add(Event{Kind: KindStreamClientSub, Client: 5, Part: ticks, Sub: 7, Text: "c1"}).
		streamDeliver(ticks, 7, 0, 1, 2).clientDeliver(ticks, 7, 0, 1).
		add(Event{Kind: KindStreamCommit, Node: 1, Part: ticks, Text: "c1", Offset: 2, Index: 8}).
		add(sub(ticks, 8, 0, filtered)).streamDeliver(ticks, 8, 0, 2, 4).
		add(Event{Kind: KindStreamConfirm, Node: 1, Part: ticks, Offset: 5})
	wantStream(t, "good", good, "")

	wantStream(t, "gap", newStreamBuilder().records(ticks, 0, 4).add(sub(ticks, 7, 0, nil)).streamDeliver(ticks, 7, 0, 2), "gap")
	wantStream(t, "filtered gap is fine", newStreamBuilder().records(ticks, 0, 4).add(sub(ticks, 7, 0, filtered)).streamDeliver(ticks, 7, 0, 2), "")
	wantStream(t, "filter", newStreamBuilder().records(ticks, 0, 4).add(sub(ticks, 7, 0, filtered)).streamDeliver(ticks, 7, 0, 1), "filter")
	wantStream(t, "order", newStreamBuilder().records(ticks, 0, 4).add(sub(ticks, 7, 0, nil)).streamDeliver(ticks, 7, 0, 1, 1), "order")
	wantStream(t, "clamp notice excuses the gap", newStreamBuilder().records(ticks, 0, 4).add(sub(ticks, 7, 0, nil)).
		add(Event{Kind: KindStreamNotice, Node: 1, Part: ticks, Sub: 7, Offset: 0, Index2: 3}).streamDeliver(ticks, 7, 3), "")
	wantStream(t, "dense", newStreamBuilder().records(ticks, 0, 2).records(ticks, 3, 1), "dense")

	wantStream(t, "client order", newStreamBuilder().records(ticks, 0, 4).add(sub(ticks, 7, 0, nil)).
		add(Event{Kind: KindStreamClientSub, Client: 5, Part: ticks, Sub: 7}).streamDeliver(ticks, 7, 0, 1, 2).clientDeliver(ticks, 7, 0, 2), "client_order")
	wantStream(t, "tag", newStreamBuilder().records(ticks, 0, 1).add(sub(ticks, 7, 0, nil)).
		add(Event{Kind: KindStreamClientSub, Client: 5, Part: ticks, Sub: 7}).streamDeliver(ticks, 7, 0).
		add(Event{Kind: KindStreamClientDeliver, Client: 5, Part: ticks, Sub: 7, Offset: 0, Tag: 9, MsgID: 1}), "tag")

	lost := func(part int) *builder {
		return newStreamBuilder().records(part, 0, 4).add(Event{Kind: KindStreamConfirm, Node: 1, Part: part, Offset: 3}).
			add(Event{Kind: KindCrash, Node: 1}).add(Event{Kind: KindStreamRecover, Node: 1, Part: part, Offset: 3, Index: 4})
	}
	wantStream(t, "lost", lost(ticks), "lost")
	wantStream(t, "the ephemeral tier may lose", lost(pulse), "")

	commits := func(values ...uint64) *builder {
		b := newStreamBuilder().records(ticks, 0, 6).add(sub(ticks, 7, 0, durable)).streamDeliver(ticks, 7, 0, 1, 2, 3)
		for i, v := range values {
			b.add(Event{Kind: KindStreamCommit, Node: 1, Part: ticks, Text: "c1", Offset: v, Index: 10 + uint64(i)})
		}
		return b
	}
	wantStream(t, "cursor forward", commits(2, 4), "")
	wantStream(t, "cursor back", commits(3, 2), "cursor")
	wantStream(t, "cursor past the handed", commits(5), "cursor")
	wantStream(t, "recovered cursor behind", commits(3).add(Event{Kind: KindCrash, Node: 1}).
		add(Event{Kind: KindStreamCommit, Node: 1, Part: ticks, Text: "c1", Offset: 1, Index: 20, Trigger: "recover"}).
		add(Event{Kind: KindStreamRecover, Node: 1, Part: ticks, Offset: 6, Index: 20}), "cursor")
	wantStream(t, "recovered cursor missing", commits(3).add(Event{Kind: KindCrash, Node: 1}).
		add(Event{Kind: KindStreamRecover, Node: 1, Part: ticks, Offset: 6, Index: 20}), "cursor")
	wantStream(t, "lost commit is forgotten", commits(3).add(Event{Kind: KindCrash, Node: 1}).
		add(Event{Kind: KindStreamRecover, Node: 1, Part: ticks, Offset: 6, Index: 9}), "")

	resub := func(start uint64) *builder {
		return newStreamBuilder().records(ticks, 0, 6).add(sub(ticks, 7, 0, durable)).
			add(Event{Kind: KindStreamClientSub, Client: 5, Part: ticks, Sub: 7, Text: "c1"}).
			streamDeliver(ticks, 7, 0, 1, 2).clientDeliver(ticks, 7, 0, 1).
			add(Event{Kind: KindStreamCommit, Node: 1, Part: ticks, Text: "c1", Offset: 1, Index: 9}).
			add(Event{Kind: KindStreamSubEnd, Node: 1, Part: ticks, Sub: 7}).add(sub(ticks, 9, start, durable))
	}
	wantStream(t, "resubscribe redelivers the unacked", resub(1), "")
	wantStream(t, "resubscribe behind the cursor", resub(0), "cursor")
	wantStream(t, "resubscribe skips", resub(3), "resubscribe")

	final := func(delivered ...uint64) *builder {
		return newStreamBuilder().records(ticks, 0, 4).add(sub(ticks, 7, 0, filtered)).streamDeliver(ticks, 7, delivered...).
			add(Event{Kind: KindStreamFinal, Node: 1, Part: ticks, Offset: 4})
	}
	wantStream(t, "final caught up", final(0, 2), "")
	wantStream(t, "final behind", final(0), "liveness")
}

func TestStreamFilterGlob(t *testing.T) {
	for _, c := range []struct {
		pattern, value string
		want           bool
	}{
		{"*", "", true}, {"a*", "a1", true}, {"a*", "b1", false}, {"*1", "b1", true}, {"*1", "b2", false},
		{"a*c", "abbc", true}, {"a*c", "abcb", false}, {"ab", "ab", true}, {"ab", "abc", false}, {"", "", true}, {"a?", "ab", false},
	} {
		if got := glob(c.pattern, c.value); got != c.want {
			t.Errorf("glob(%q, %q) = %v, want %v", c.pattern, c.value, got, c.want)
		}
	}
	if matches([]Header{{Key: "k", Value: "*"}}, []Header{{Key: "x", Value: "1"}}) {
		t.Errorf("a record without the header matches")
	}
	if !matches(nil, nil) || !strings.Contains(KindStreamFinal.String(), "stream") {
		t.Errorf("an empty filter matches everything")
	}
}

// Retention histories: segments of 4 records; quotes/0 (partition 3) is a
// speculative-tier stream with max_records 6.
func newRetentionBuilder(maxRecords, maxBytes, maxAgeMs uint64) *builder {
	b := newStreamBuilder()
	b.h.Meta.StreamSegmentRecordsMax, b.h.Meta.StreamSegmentBytesMax = 4, 1000
	b.h.Meta.Queues[0].MaxRecords, b.h.Meta.Queues[0].MaxBytes, b.h.Meta.Queues[0].MaxAgeMs = maxRecords, maxBytes, maxAgeMs
	b.h.Meta.Queues = append(b.h.Meta.Queues, QueueSpec{Topic: "quotes", Partitions: 1, Stream: true, Tier: core.TierSpeculative})
	b.h.Meta.Partitions = append(b.h.Meta.Partitions, PartitionSpec{Queue: 2, Topic: "quotes"})
	return b
}

const quotes = 3

// sized appends n records of 10 payload bytes each, published at atMs.
func (b *builder) sized(part int, from, n uint64, atMs int64) *builder {
	for o := from; o < from+n; o++ {
		b.add(Event{Kind: KindStreamRecord, Node: 1, Part: part, Offset: o, Index: o + 2, MsgID: o + 1, Bytes: 10, AtMs2: atMs,
			Headers: []Header{{Key: "k", Value: "a"}}})
	}
	return b
}

func (b *builder) durableAt(part int, index uint64) *builder {
	return b.add(Event{Kind: KindStreamDurable, Node: 1, Part: part, Index: index})
}

func TestStreamRetentionChecks(t *testing.T) {
	truncate := func(upTo uint64, nowMs int64) Event {
		return Event{Kind: KindStreamTruncate, Node: 1, Part: ticks, Index: upTo, NowMs: nowMs}
	}
	done := func(upTo, oldest uint64) Event {
		return Event{Kind: KindStreamSnapshotDone, Node: 1, Part: ticks, Index: upTo, Offset: oldest}
	}
	final := func(next uint64, nowMs int64) Event {
		return Event{Kind: KindStreamFinal, Node: 1, Part: ticks, Offset: next, NowMs: nowMs}
	}
	// 10 records at offsets 0..9 (indexes 2..11): segments [0,3] [4,7] [8,9].
	ten := func(maxRecords, maxBytes, maxAgeMs uint64) *builder {
		return newRetentionBuilder(maxRecords, maxBytes, maxAgeMs).sized(ticks, 0, 10, 100).durableAt(ticks, 11)
	}
	wantStream(t, "records bound crossed", ten(5, 0, 0).add(truncate(5, 200)).add(done(5, 4)).
		add(Event{Kind: KindStreamNotice, Node: 1, Part: ticks, Sub: 7, Offset: 1, Index2: 4}).add(final(10, 300)), "")
	wantStream(t, "records bound: two segments in one go", ten(2, 0, 0).add(truncate(9, 200)).add(done(9, 8)).add(final(10, 300)), "")
	wantStream(t, "bytes bound crossed", ten(0, 60, 0).add(truncate(5, 200)).add(done(5, 4)).add(final(10, 300)), "")
	wantStream(t, "age bound crossed", ten(0, 0, 50).add(truncate(5, 151)).add(done(5, 4)).add(final(10, 151)), "")
	wantStream(t, "a retry asks again", ten(5, 0, 0).add(truncate(5, 200)).add(truncate(5, 300)).add(done(5, 4)), "")

	wantStream(t, "records bound not crossed", ten(10, 0, 0).add(truncate(5, 200)), "retention")
	wantStream(t, "second segment not over", ten(7, 0, 0).add(truncate(9, 200)), "retention")
	wantStream(t, "age bound not yet crossed", ten(0, 0, 50).add(truncate(5, 150)), "retention")
	wantStream(t, "unbounded never truncates", ten(0, 0, 0).add(truncate(5, 200)), "retention")
	wantStream(t, "part of a segment", ten(5, 0, 0).add(truncate(4, 200)), "retention")
	wantStream(t, "the open segment", newRetentionBuilder(1, 0, 0).sized(ticks, 0, 3, 100).durableAt(ticks, 4).add(truncate(4, 200)), "retention")
	wantStream(t, "not durable", newRetentionBuilder(1, 0, 0).sized(ticks, 0, 10, 100).durableAt(ticks, 4).add(truncate(5, 200)), "retention")
	wantStream(t, "oldest moves unasked", ten(5, 0, 0).add(done(5, 4)), "retention")
	wantStream(t, "applied to the wrong oldest", ten(5, 0, 0).add(truncate(5, 200)).add(done(5, 3)), "retention")
	wantStream(t, "clamp with no truncation", ten(5, 0, 0).add(Event{Kind: KindStreamNotice, Node: 1, Part: ticks, Sub: 7, Offset: 1, Index2: 4}), "retention")

	crash := func(b *builder, oldest uint64) *builder {
		return b.add(Event{Kind: KindCrash, Node: 1}).add(Event{Kind: KindStreamRecover, Node: 1, Part: ticks, Offset: 10, Index: 11, Index2: oldest})
	}
	wantStream(t, "pending truncation saved before the crash", crash(ten(5, 0, 0).add(truncate(5, 200)), 4).add(final(10, 300)), "")
	wantStream(t, "pending truncation lost in the crash, redone", crash(ten(5, 0, 0).add(truncate(5, 200)), 0).
		add(truncate(5, 400)).add(done(5, 4)).add(final(10, 500)), "")
	wantStream(t, "recovery drops past the pending truncation", crash(ten(5, 0, 0).add(truncate(5, 200)), 8), "retention")
	wantStream(t, "recovery drops unasked", crash(ten(5, 0, 0), 4), "retention")

	// Liveness: at the end, beyond the newest two segments the bounds hold.
	wantStream(t, "never retained", ten(2, 0, 0).add(final(10, 300)), "retention_liveness")
	wantStream(t, "bytes never retained", ten(0, 30, 0).add(final(10, 300)), "retention_liveness")
	wantStream(t, "aged out, never retained", ten(0, 0, 50).add(final(10, 300)), "retention_liveness")
	wantStream(t, "within two segments", ten(2, 0, 0).add(truncate(5, 200)).add(done(5, 4)).add(final(10, 300)), "")
	wantStream(t, "pending at the end counts as done", ten(2, 0, 0).add(truncate(5, 200)).add(final(10, 300)), "")
	wantStream(t, "no segment limits recorded: off", newStreamBuilder().sized(ticks, 0, 10, 100).add(truncate(5, 200)), "")
}

func TestStreamSpeculativeChecks(t *testing.T) {
	spec := func(part int, durable uint64, flag, clientFlag bool) *builder {
		b := newRetentionBuilder(0, 0, 0).records(part, 0, 2).durableAt(part, durable).
			add(Event{Kind: KindStreamSubStart, Node: 1, Part: part, Sub: 7, Offset: 0}).
			add(Event{Kind: KindStreamClientSub, Client: 5, Part: part, Sub: 7}).
			add(Event{Kind: KindStreamDeliver, Node: 1, Part: part, Sub: 7, Offset: 1, MsgID: 2, Speculative: flag})
		b.h.Events[len(b.h.Events)-1].Offset = 0
		b.h.Events[len(b.h.Events)-1].MsgID = 1
		return b.add(Event{Kind: KindStreamClientDeliver, Client: 5, Part: part, Sub: 7, Offset: 0, Tag: 0, MsgID: 1, Speculative: clientFlag})
	}
	// Offset 0 is at index 2.
	wantStream(t, "speculative before durable", spec(quotes, 1, true, true), "")
	wantStream(t, "plain once durable", spec(quotes, 2, false, false), "")
	wantStream(t, "flag missing before durable", spec(quotes, 1, false, false), "speculative")
	wantStream(t, "flag after durable", spec(quotes, 2, true, true), "speculative")
	wantStream(t, "header lost on the way", spec(quotes, 1, true, false), "speculative")
	wantStream(t, "header added on the way", spec(quotes, 2, false, true), "speculative")
	wantStream(t, "durable tier plain", spec(ticks, 2, false, false), "")
	wantStream(t, "flag on the durable tier", spec(ticks, 2, true, true), "speculative")
	wantStream(t, "header on the ephemeral tier", spec(pulse, 1, false, true), "speculative")
}
