package core

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// Operator inspection and completion (operator.go): unit tests, and the
// hooks the model-based rapid test (rapid_test.go) calls for Complete and
// Browse.

func TestCompleteSettlesReadyAndDelayedOnlyOnceDurable(t *testing.T) {
	h := newHarness(t)
	ready := h.publish("a")
	delayed := h.publishWith(&Publish{Confirm: true, NotBeforeMs: h.now + 60_000, Body: &Body{Payload: []byte("b")}})
	held := h.publish("c")
	h.subscribe(1, 1, false)
	// Prefetch 1 takes the lowest ready offset: ready (0). Publish more so
	// that the inflight one is "held" instead.
	d := h.takeDeliveries()
	if len(d) != 1 || d[0].Offset != ready {
		t.Fatalf("deliveries %+v, want offset %d", d, ready)
	}
	h.takeReplies()

	// Inflight: a consumer holds it, refused.
	h.step(&Complete{NowMs: h.now, Ref: 7, Offset: ready})
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrNotCompletable {
		t.Fatalf("completing an inflight message: %v, want ErrNotCompletable", errs)
	}
	// Never published, refused.
	h.step(&Complete{NowMs: h.now, Ref: 8, Offset: 99})
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrNotCompletable {
		t.Fatalf("completing an unknown offset: %v, want ErrNotCompletable", errs)
	}

	// Ready and delayed: settled, answered only once durable.
	h.autoPersist = false
	h.step(&Complete{NowMs: h.now, Ref: 9, Offset: held})
	h.step(&Complete{NowMs: h.now, Ref: 10, Offset: delayed})
	if r := h.takeReplies(); len(r) != 0 {
		t.Fatalf("replies before durable: %+v", r)
	}
	h.persist()
	r := h.takeReplies()
	if len(r) != 2 || r[0].Kind != ReplyCompleted || r[0].Ref != 9 || r[1].Ref != 10 || r[1].Offset != delayed {
		t.Fatalf("replies after durable: %+v", r)
	}
	for _, off := range []uint64{held, delayed} {
		if _, live := h.p.Message(off); live {
			t.Fatalf("offset %d still live after its completion", off)
		}
	}
	// Gone for good: a restart from the log agrees, and the delay timer of
	// the completed message never fires a release.
	h.restart()
	h.autoPersist = true
	h.advance(120_000)
	if _, live := h.p.Message(delayed); live {
		t.Fatal("a completed delayed message came back")
	}
	// Completing again: settled now, refused.
	h.step(&Complete{NowMs: h.now, Ref: 11, Offset: held})
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 1 || errs[0] != ErrNotCompletable {
		t.Fatalf("completing twice: %v", errs)
	}
}

func TestBrowseSkipsSettledChunksAndStopsAtItsBudget(t *testing.T) {
	h := newHarness(t)
	// Offset 0 stays live (delayed); 1..3*chunkSize-1 are settled (auto-ack),
	// so chunks 1 and 2 are gone; the first offset of chunk 3 is live.
	first := h.publishWith(&Publish{Confirm: true, NotBeforeMs: h.now + 60_000, Body: &Body{Payload: []byte("d")}})
	h.subscribe(1, 1000, true)
	for range 3*chunkSize - 1 {
		h.publish("x")
	}
	h.step(&Unsubscribe{NowMs: h.now, SubID: 1})
	live := h.publish("y")
	if live != 3*chunkSize {
		t.Fatalf("the last publish is offset %d, want %d", live, 3*chunkSize)
	}
	var got []uint64
	next := h.p.Browse(0, false, func(v MessageView, isLive bool) bool {
		got = append(got, v.Offset)
		return true
	})
	if !slices.Equal(got, []uint64{first, live}) || next != h.p.NextOffset() {
		t.Fatalf("live browse %v next %d, want [%d %d] next %d", got, next, first, live, h.p.NextOffset())
	}
	// With settled offsets: every offset, in order, the live one marked.
	got = got[:0]
	var liveSeen []uint64
	h.p.Browse(5, true, func(v MessageView, isLive bool) bool {
		got = append(got, v.Offset)
		if isLive {
			liveSeen = append(liveSeen, v.Offset)
		}
		return len(got) < 10
	})
	if len(got) != 10 || got[0] != 5 || got[9] != 14 || len(liveSeen) != 0 {
		t.Fatalf("settled browse %v (live %v)", got, liveSeen)
	}
}

func TestBrowseScanBudgetBoundsAStep(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1000, true)
	// BrowseScanMax+10 settled offsets in one live chunk would cost the
	// whole range; a settled browse must stop at the budget.
	h.cfg.QueueDepthMax = 1 << 30
	for range BrowseScanMax + 10 {
		h.publishWith(&Publish{Body: &Body{Payload: []byte("x")}})
	}
	visited := 0
	next := h.p.Browse(0, true, func(MessageView, bool) bool { visited++; return true })
	if visited != BrowseScanMax || next != BrowseScanMax {
		t.Fatalf("visited %d, next %d: want the budget %d", visited, next, BrowseScanMax)
	}
	next = h.p.Browse(next, true, func(MessageView, bool) bool { visited++; return true })
	if next != h.p.NextOffset() {
		t.Fatalf("the second page ends at %d, want %d", next, h.p.NextOffset())
	}
}

func TestReadDeadLetterAndReplayBody(t *testing.T) {
	body := &Body{Payload: []byte{0, 1, 0xff}, ContentType: ContentType{Kind: ContentText}, Headers: []Header{
		{"x-user", "1"}, {HeaderDLQSourceTopic, "orders"}, {HeaderDLQSourceGroup, "default"},
		{HeaderDLQSourceOffset, "42"}, {HeaderDLQRetryCount, "3"}, {HeaderDLQReason, "retries_exhausted"},
		{HeaderDLQDeadLetteredAtMs, "1234"}, {"fibril.client.trace", "t"},
	}}
	info := ReadDeadLetter(body)
	want := DeadLetterInfo{Source: DLQTarget{Topic: "orders"}, SourceOffset: 42, Reason: "retries_exhausted",
		DeadLetteredMs: 1234, RetryCount: 3, HasSource: true}
	if info != want {
		t.Fatalf("info %+v, want %+v", info, want)
	}
	out := ReplayBody(body)
	if !slices.Equal(out.Headers, []Header{{"x-user", "1"}, {"fibril.client.trace", "t"}}) || string(out.Payload) != string(body.Payload) || out.ContentType != body.ContentType {
		t.Fatalf("replay body %+v", out)
	}
	if len(body.Headers) != 8 {
		t.Fatal("ReplayBody changed the copy it read")
	}
	// No source, or an invalid one: nowhere to go back to.
	for _, hs := range [][]Header{{{"x", "1"}}, {{HeaderDLQSourceTopic, "Bad Name"}}} {
		if ReadDeadLetter(&Body{Headers: hs}).HasSource {
			t.Fatalf("headers %v read as having a source", hs)
		}
	}
}

// ---- hooks of the model-based test

// modelComplete is the model's decision for a Complete.
func (mc *machine) modelComplete(in *Complete) {
	x := mc.m.msgs[in.Offset]
	if x == nil || (x.state != mReady && x.state != mDelayed) {
		mc.wantErrors = append(mc.wantErrors, ErrNotCompletable)
		return
	}
	x.state, x.settleKind, x.reason, x.tag, x.sub = mSettled, SettledDiscarded, ReasonNone, 0, 0
}

// checkCompleted: a completion is answered only once its discard is durable.
func (mc *machine) checkCompleted(t *rapid.T, r Reply) {
	x := mc.m.msgs[r.Offset]
	switch {
	case x == nil || x.state != mSettled || x.settleKind != SettledDiscarded:
		t.Fatalf("completion of offset %d, which the model has not completed", r.Offset)
	case x.settleIndex > mc.m.durable:
		t.Fatalf("completion of offset %d answered before durable", r.Offset)
	}
}

// drawComplete picks an offset to complete: any published one, or one never
// published.
func (mc *machine) drawComplete(t *rapid.T) *Complete {
	offset := rapid.Uint64Range(0, mc.m.nextOffset+1).Draw(t, "completeOffset")
	return &Complete{NowMs: mc.clockMs, Ref: 1, Offset: offset}
}

// checkBrowse holds a browse to the model: the offsets in [from, next) it
// visits are exactly the model's live ones (and settled ones when asked),
// in order, with their states; it stops where visit said.
func (mc *machine) checkBrowse(t *rapid.T) {
	from := rapid.Uint64Range(0, mc.m.nextOffset+1).Draw(t, "browseFrom")
	settled := rapid.Bool().Draw(t, "browseSettled")
	limit := rapid.IntRange(1, 8).Draw(t, "browseLimit")
	var want []uint64
	for off := from; off < mc.m.nextOffset; off++ {
		if x := mc.m.msgs[off]; (x != nil && x.state != mSettled) || settled {
			want = append(want, off)
		}
	}
	var got []uint64
	next := mc.p.Browse(from, settled, func(v MessageView, live bool) bool {
		if len(got) == limit {
			return false
		}
		x := mc.m.msgs[v.Offset]
		if live != (x != nil && x.state != mSettled) {
			t.Fatalf("browse: offset %d live=%v, model %+v", v.Offset, live, x)
		}
		got = append(got, v.Offset)
		return true
	})
	wantNext := mc.m.nextOffset
	if len(want) > limit {
		want, wantNext = want[:limit], want[limit]
	}
	if !slices.Equal(got, want) {
		t.Fatalf("browse from %d (settled %v, limit %d): %v, model %v", from, settled, limit, got, want)
	}
	if next != wantNext {
		t.Fatalf("browse from %d: next %d, model %d", from, next, wantNext)
	}
}
