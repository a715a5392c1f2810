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
