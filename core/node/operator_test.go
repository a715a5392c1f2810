package node

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/fibril-go/fibril/core"
)

// Operator message requests through the Node and Hosts (msg_messages.go,
// node_messages.go, host_messages.go) and the replay plan
// (operator_replay.go), on the miniDriver of wiring_test.go.

// opDriver is a miniDriver that also carries operator requests: call sends
// one from a fresh AdminAddr and returns the first answer to it.
type opDriver struct {
	*miniDriver
	nextReq uint64
	answers map[uint64][]Message
}

func newOpDriver(t *testing.T) *opDriver {
	return &opDriver{miniDriver: newMiniDriver(t), answers: map[uint64][]Message{}}
}

// call delivers msg to the Node as operator request n and runs the wiring
// until nothing is left; it returns the request's one answer.
func (d *opDriver) call(msg Message) Message {
	d.t.Helper()
	d.nextReq++
	req := d.nextReq
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: AdminAddr(req), To: NodeAddr(), Msg: msg}})
	d.runOps()
	got := d.answers[req]
	delete(d.answers, req)
	if len(got) != 1 {
		d.t.Fatalf("request %T got %d answers (%v), want exactly one", msg, len(got), got)
	}
	return got[0]
}

// runOps is miniDriver.run with operator addresses served.
func (d *opDriver) runOps() {
	d.t.Helper()
	for len(d.queue) > 0 {
		env := d.queue[0]
		d.queue = d.queue[1:]
		switch env.To.Kind {
		case AddrAdmin:
			d.answers[env.To.Request] = append(d.answers[env.To.Request], env.Msg)
		case AddrNode:
			d.stepNode(&Deliver{NowMs: d.now, Envelope: env})
		case AddrPartition:
			if d.hosts[env.To.Queue] == nil {
				d.bounce(env)
				continue
			}
			d.stepHost(env.To.Queue, &Deliver{NowMs: d.now, Envelope: env})
		}
	}
}

// session sends a session's message to the Node or a partition.
func (d *opDriver) session(to Address, msg Message) {
	d.t.Helper()
	env := Envelope{From: SessionAddr(1), To: to, Msg: msg}
	if to.Kind == AddrNode {
		d.stepNode(&Deliver{NowMs: d.now, Envelope: env})
	} else {
		d.stepHost(to.Queue, &Deliver{NowMs: d.now, Envelope: env})
	}
	d.runOps()
}

// storeCopy puts a dead-letter copy with headers into dlq/0 as the Node
// would forward one (a system publish), from source partition src.
func (d *opDriver) storeCopy(src core.QueueID, offset uint64, payload string, headers []core.Header) {
	d.t.Helper()
	env := Envelope{From: NodeAddr(), To: PartitionAddr(qid("dlq", 0)),
		Msg: &StoreDeadLetter{Source: src, Offset: offset, Body: &core.Body{Payload: []byte(payload), Headers: headers}}}
	d.stepHost(qid("dlq", 0), &Deliver{NowMs: d.now, Envelope: env})
	d.runOps()
}

func copyHeaders(topic string, offset uint64, reason string, atMs int64) []core.Header {
	hs := []core.Header{{Key: "x-user", Value: "u" + strconv.FormatUint(offset, 10)}}
	if topic != "" {
		hs = append(hs, core.Header{Key: core.HeaderDLQSourceTopic, Value: topic})
	}
	return append(hs,
		core.Header{Key: core.HeaderDLQSourceOffset, Value: strconv.FormatUint(offset, 10)},
		core.Header{Key: core.HeaderDLQReason, Value: reason},
		core.Header{Key: core.HeaderDLQDeadLetteredAtMs, Value: strconv.FormatInt(atMs, 10)},
		core.Header{Key: core.HeaderDLQRetryCount, Value: "1"})
}

// declare declares topic with count partitions and loads them all.
func (d *opDriver) declare(topic string, count uint32) {
	d.t.Helper()
	d.session(NodeAddr(), &DeclareQueue{Token: 1, Topic: topic, PartitionCount: count})
	for p := uint32(0); p < count; p++ {
		d.session(NodeAddr(), &Open{Token: 2, Topic: topic, Partition: p})
	}
}

func TestOperatorBrowseNeverCreatesAQueueAndLoadsItsPartition(t *testing.T) {
	d := newOpDriver(t)
	if r, ok := d.call(&BrowseMessages{Topic: "nope", Limit: 10, States: BrowseActive}).(*OperatorRefused); !ok || r.Err != core.ErrQueueUnknown {
		t.Fatalf("browse of an unknown queue: %+v", r)
	}
	if d.node.state.queues[queueKey{Topic: "nope"}] != nil {
		t.Fatal("a browse created the queue")
	}
	d.session(NodeAddr(), &DeclareQueue{Token: 1, Topic: "jobs", PartitionCount: 2})
	if r, ok := d.call(&BrowseMessages{Topic: "jobs", Partition: 2, Limit: 10}).(*OperatorRefused); !ok || r.Err != core.ErrPartitionOutOfRange {
		t.Fatalf("browse of partition 2 of 2: %+v", r)
	}
	if d.hosts[qid("jobs", 1)] != nil {
		t.Fatal("jobs/1 loaded before anybody asked")
	}
	// Partition 1 is not loaded: the browse loads it and answers.
	page, ok := d.call(&BrowseMessages{Topic: "jobs", Partition: 1, Limit: 10, States: BrowseActive}).(*MessagesPage)
	if !ok || page.Partitions != 2 || len(page.Items) != 0 || d.hosts[qid("jobs", 1)] == nil {
		t.Fatalf("browse of an unloaded partition: %+v", page)
	}
	for i := range 5 {
		d.session(PartitionAddr(qid("jobs", 1)), &Request{Input: &core.Publish{Body: &core.Body{Payload: []byte(fmt.Sprint("m", i)),
			Headers: []core.Header{{Key: "k", Value: "v"}}}}})
	}
	// Two pages of two, then the last one; then nothing.
	var offsets []uint64
	from := uint64(0)
	for range 4 {
		page = d.call(&BrowseMessages{Topic: "jobs", Partition: 1, From: from, Limit: 2, States: BrowseActive, Payload: true, PreviewBytes: 1}).(*MessagesPage)
		for _, it := range page.Items {
			if !it.Live || it.PayloadLen != 2 || it.PreviewBytes != 1 || it.Body.Headers[0].Value != "v" {
				t.Fatalf("item %+v", it)
			}
			offsets = append(offsets, it.Offset)
		}
		from = page.Next
	}
	if !slices.Equal(offsets, []uint64{0, 1, 2, 3, 4}) || from != 5 {
		t.Fatalf("pages gave %v, next %d", offsets, from)
	}
	// A status filter: none is inflight.
	page = d.call(&BrowseMessages{Topic: "jobs", Partition: 1, Limit: 10, States: BrowseStates(1 << core.MessageInflight)}).(*MessagesPage)
	if len(page.Items) != 0 || page.Next != 5 {
		t.Fatalf("inflight-only browse %+v", page)
	}
}

func TestOperatorSetQueueDLQIsLiveAndRefusesUnknownQueues(t *testing.T) {
	d := newOpDriver(t)
	if r, ok := d.call(&SetQueueDLQ{Topic: "jobs", DLQ: core.DLQPolicy{Kind: core.DLQDiscard}}).(*OperatorRefused); !ok || r.Err != core.ErrQueueUnknown {
		t.Fatalf("queue-dlq of an unknown queue: %+v", r)
	}
	if d.node.state.queues[queueKey{Topic: "jobs"}] != nil {
		t.Fatal("a queue-dlq change created the queue")
	}
	d.declare("jobs", 2)
	policy := core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "dlq"}}
	if ans, ok := d.call(&SetQueueDLQ{Topic: "jobs", DLQ: policy, MaxRetries: u32(3)}).(*Declared); !ok || ans.Err != nil {
		t.Fatalf("queue-dlq answer %+v", ans)
	}
	for p := uint32(0); p < 2; p++ {
		if s := d.hosts[qid("jobs", p)].Partition().Settings(); s.DLQ != policy || s.MaxRetries != 3 {
			t.Fatalf("jobs/%d settings %+v after the change", p, s)
		}
	}
	// max_retries omitted keeps it.
	d.call(&SetQueueDLQ{Topic: "jobs", DLQ: core.DLQPolicy{Kind: core.DLQDiscard}})
	s := d.call(&QueueSettingsOf{Topic: "jobs"}).(*QueueSettings)
	if s.DLQ == nil || s.DLQ.Kind != core.DLQDiscard || s.MaxRetries == nil || *s.MaxRetries != 3 || s.Partitions != 2 {
		t.Fatalf("settings after a change without max_retries: %+v", s)
	}
	if ans := d.call(&SetQueueDLQ{Topic: "jobs", DLQ: core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "jobs"}}}).(*Declared); ans.Err != core.ErrDeadLetterLoop {
		t.Fatalf("a loop was answered %+v", ans)
	}
}

// runReplay drives a plan to its end (or stops after stopAfter answers,
// as a crash would; -1: never).
func (d *opDriver) runReplay(plan ReplayPlan, stopAfter int) (ReplayResult, bool) {
	r := NewReplay(plan)
	for n := 0; ; n++ {
		msg, done := r.Next()
		if done {
			return r.Result(), true
		}
		if n == stopAfter {
			// The request is lost with the operator: nothing is delivered.
			return ReplayResult{}, false
		}
		r.Answer(d.call(msg))
	}
}

func TestReplayCopiesBackWithoutTheDLQHeadersAndKeepsTheCopy(t *testing.T) {
	d := newOpDriver(t)
	d.declare("jobs", 1)
	d.declare("dlq", 1)
	d.storeCopy(qid("jobs", 0), 7, "a\x00b", copyHeaders("jobs", 7, "retries_exhausted", 100))
	d.storeCopy(qid("jobs", 0), 8, "c", copyHeaders("", 8, "expired", 100))     // no source
	d.storeCopy(qid("jobs", 0), 9, "d", copyHeaders("gone", 9, "expired", 100)) // source never declared
	res, _ := d.runReplay(ReplayPlan{Topic: "dlq", Offsets: []uint64{0, 0, 1, 2, 50}}, -1)
	want := []ReplayOutcome{{0, true, ""}, {0, true, ""}, {1, false, SkipNoSource}, {2, false, SkipNoSource}, {50, false, SkipMissing}}
	if !slices.Equal(res.Items, want) || res.Replayed != 2 || res.Skipped != 3 {
		t.Fatalf("replay %+v, want %+v", res, want)
	}
	if d.node.state.queues[queueKey{Topic: "gone"}] != nil {
		t.Fatal("a replay created its missing source")
	}
	// Replayed twice means published twice (SPEC 2), each without stroma.dlq.*.
	jobs := d.hosts[qid("jobs", 0)].Partition()
	if jobs.Live() != 2 {
		t.Fatalf("jobs holds %d messages, want the 2 replays", jobs.Live())
	}
	for off := uint64(0); off < 2; off++ {
		v, _ := jobs.Message(off)
		if string(v.Body.Payload) != "a\x00b" || len(v.Body.Headers) != 1 || v.Body.Headers[0].Key != "x-user" {
			t.Fatalf("replayed copy %d: %q %+v", off, v.Body.Payload, v.Body.Headers)
		}
	}
	// The DLQ copy stays; a settled one is inactive.
	if _, live := d.hosts[qid("dlq", 0)].Partition().Message(0); !live {
		t.Fatal("a replay removed its DLQ copy")
	}
	if ans := d.call(&CompleteMessage{Topic: "dlq", Offset: 1}).(*Completed); ans.Err != nil {
		t.Fatalf("complete: %v", ans.Err)
	}
	res, _ = d.runReplay(ReplayPlan{Topic: "dlq", Offsets: []uint64{1}}, -1)
	if !slices.Equal(res.Items, []ReplayOutcome{{1, false, SkipInactive}}) {
		t.Fatalf("replay of a settled copy %+v", res.Items)
	}
	if res, _ := d.runReplay(ReplayPlan{Topic: "nope", Offsets: []uint64{1}}, -1); res.Err != core.ErrQueueUnknown {
		t.Fatalf("replay from an unknown DLQ: %+v", res)
	}
}

// dlqCopy is one copy the property test put in the DLQ.
type dlqCopy struct {
	source      string // "" = no source header
	reason      string
	atMs        int64
	consumed    bool // settled before the operator acts
	sourceGroup string
}

// A redrive moves every match once: each matched copy appears exactly once
// in its source and is completed in the DLQ; the rest stay untouched. A
// replay completes nothing. A plan cut short at any request (a crash) loses
// nothing: each matched copy is still in the DLQ or already in its source.
func TestRedriveAndReplayAgainstAModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		d := newOpDriver(t)
		d.declare("jobs", 2)
		d.declare("other", 1)
		dlqParts := uint32(rapid.IntRange(1, 2).Draw(rt, "dlqPartitions"))
		d.declare("dlq", dlqParts)
		n := rapid.IntRange(0, 30).Draw(rt, "copies")
		copies := make([]dlqCopy, n)
		byPart := map[uint32][]int{} // DLQ partition -> copies in offset order
		for i := range copies {
			c := dlqCopy{
				source: rapid.SampledFrom([]string{"jobs", "other", "gone", ""}).Draw(rt, "source"),
				reason: rapid.SampledFrom([]string{"retries_exhausted", "expired", "terminal_nack"}).Draw(rt, "reason"),
				atMs:   rapid.Int64Range(0, 9).Draw(rt, "atMs"),
			}
			copies[i] = c
			part := uint32(rapid.IntRange(0, int(dlqParts)-1).Draw(rt, "part"))
			target := qid("dlq", part)
			env := Envelope{From: NodeAddr(), To: PartitionAddr(target),
				Msg: &StoreDeadLetter{Source: qid("src", 0), Offset: uint64(i), Body: &core.Body{Payload: []byte(fmt.Sprint("m", i)),
					Headers: copyHeaders(c.source, uint64(i), c.reason, c.atMs)}}}
			d.stepHost(target, &Deliver{NowMs: d.now, Envelope: env})
			d.runOps()
			byPart[part] = append(byPart[part], i)
		}
		// Some copies were consumed already (completed): inactive.
		for part, idx := range byPart {
			for off, i := range idx {
				if rapid.IntRange(0, 5).Draw(rt, "consumed?") == 0 {
					d.call(&CompleteMessage{Topic: "dlq", Partition: part, Offset: uint64(off)})
					copies[i].consumed = true
				}
			}
		}
		redrive := rapid.Bool().Draw(rt, "redrive")
		plan := ReplayPlan{Topic: "dlq"}
		var asked []int // the copies the plan is about
		if redrive {
			plan.Redrive = true
			plan.DryRun = rapid.IntRange(0, 3).Draw(rt, "dryRun?") == 0
			plan.Limit = uint32(rapid.IntRange(0, 40).Draw(rt, "limit"))
			if rapid.Bool().Draw(rt, "bySource?") {
				plan.Filter.Source = core.DLQTarget{Topic: rapid.SampledFrom([]string{"jobs", "other", "gone"}).Draw(rt, "filterSource")}
			}
			if rapid.Bool().Draw(rt, "byReason?") {
				plan.Filter.Reason = rapid.SampledFrom([]string{"retries_exhausted", "expired"}).Draw(rt, "filterReason")
			}
			plan.Filter.FromMs = rapid.Int64Range(0, 5).Draw(rt, "fromMs")
			if rapid.Bool().Draw(rt, "toMs?") {
				plan.Filter.ToMs = rapid.Int64Range(plan.Filter.FromMs, 9).Draw(rt, "toMs")
			}
			limit := int(plan.Limit)
			if limit == 0 {
				limit = RedriveLimitMax
			}
			// From an offset of partition 0, perhaps beyond its end.
			plan.From = uint64(rapid.IntRange(0, len(byPart[0])+2).Draw(rt, "fromOffset"))
			for p := uint32(0); p < dlqParts; p++ {
				for off, i := range byPart[p] {
					if p == 0 && uint64(off) < plan.From {
						continue
					}
					c := copies[i]
					info := core.DeadLetterInfo{Source: core.DLQTarget{Topic: c.source}, Reason: c.reason, DeadLetteredMs: c.atMs}
					if !c.consumed && c.source != "" && plan.Filter.Matches(info) && len(asked) < limit {
						asked = append(asked, i)
					}
				}
			}
		} else if len(byPart[0]) > 0 {
			k := rapid.IntRange(1, min(len(byPart[0]), DeadLetterReadsMax)).Draw(rt, "offsets")
			for range k {
				off := rapid.IntRange(0, len(byPart[0])-1).Draw(rt, "offset")
				plan.Offsets = append(plan.Offsets, uint64(off))
				asked = append(asked, byPart[0][off])
			}
		}
		stopAfter := -1
		if rapid.IntRange(0, 2).Draw(rt, "crash?") == 0 {
			stopAfter = rapid.IntRange(0, 3*len(asked)+2).Draw(rt, "crashAfter")
		}
		res, finished := d.runReplay(plan, stopAfter)

		// What is where now.
		inSource := map[string]int{}
		for _, topic := range []string{"jobs", "other"} {
			for p := uint32(0); p < 2; p++ {
				h := d.hosts[qid(topic, p)]
				if h == nil {
					continue
				}
				h.Partition().Browse(0, false, func(v core.MessageView, _ bool) bool {
					inSource[string(v.Body.Payload)]++
					return true
				})
			}
		}
		liveInDLQ := map[int]bool{}
		for p := uint32(0); p < dlqParts; p++ {
			for off, i := range byPart[p] {
				if _, live := d.hosts[qid("dlq", p)].Partition().Message(uint64(off)); live {
					liveInDLQ[i] = true
				}
			}
		}
		if d.node.state.queues[queueKey{Topic: "gone"}] != nil {
			rt.Fatal("a replay created a source queue")
		}
		isAsked := map[int]int{}
		for _, i := range asked {
			isAsked[i]++
		}
		for i, c := range copies {
			name := fmt.Sprint("m", i)
			replayable := c.source == "jobs" || c.source == "other"
			switch {
			case !c.consumed && !liveInDLQ[i] && (!redrive || plan.DryRun || isAsked[i] == 0):
				rt.Fatalf("copy %d (%+v) left the DLQ, but this plan may not complete it", i, c)
			case !c.consumed && !liveInDLQ[i] && inSource[name] == 0:
				rt.Fatalf("copy %d (%+v) was lost: completed in the DLQ and not in its source", i, c)
			case inSource[name] > 0 && (isAsked[i] == 0 || !replayable || plan.DryRun):
				rt.Fatalf("copy %d (%+v) is in a source it was not to be replayed to (%d times)", i, c, inSource[name])
			}
			if !finished {
				continue
			}
			wantIn := 0
			if replayable && !plan.DryRun && (redrive || !c.consumed) {
				wantIn = isAsked[i] // a replay of one offset twice publishes twice
			}
			if inSource[name] != wantIn {
				rt.Fatalf("copy %d (%+v) is %d times in its source, want %d (result %+v)", i, c, inSource[name], wantIn, res)
			}
			if redrive && !plan.DryRun && isAsked[i] > 0 && replayable && liveInDLQ[i] {
				rt.Fatalf("copy %d (%+v) was redriven but its DLQ copy is still live", i, c)
			}
		}
		if finished && redrive && res.Matched != len(asked) {
			rt.Fatalf("matched %d, model %d", res.Matched, len(asked))
		}
		if finished && !redrive && len(res.Items) != len(plan.Offsets) {
			rt.Fatalf("%d outcomes for %d offsets", len(res.Items), len(plan.Offsets))
		}
	})
}

// A page stops before the item that would carry its header and preview
// bytes past BrowseAnswerBytesMax (the first item always goes), and the
// next page goes on from there.
func TestBrowsePageIsBoundedInBytes(t *testing.T) {
	d := newOpDriver(t)
	d.declare("big", 1)
	payload := make([]byte, BrowsePreviewBytesMax)
	const n = 10 // 10 MiB of previews: more than one page's budget
	for range n {
		d.session(PartitionAddr(qid("big", 0)), &Request{Input: &core.Publish{Body: &core.Body{Payload: payload}}})
	}
	ask := &BrowseMessages{Topic: "big", Limit: BrowseItemsMax, States: BrowseActive, Payload: true, PreviewBytes: BrowsePreviewBytesMax}
	var pages [][]uint64
	for from := uint64(0); from < n; {
		q := *ask
		q.From = from
		page := d.call(&q).(*MessagesPage)
		bytes := 0
		var offs []uint64
		for _, it := range page.Items {
			bytes += int(it.PreviewBytes)
			offs = append(offs, it.Offset)
		}
		if bytes > BrowseAnswerBytesMax || len(offs) == 0 || page.Next != offs[len(offs)-1]+1 {
			t.Fatalf("page from %d: %d bytes, offsets %v, next %d", from, bytes, offs, page.Next)
		}
		pages, from = append(pages, offs), page.Next
	}
	want := BrowseAnswerBytesMax / BrowsePreviewBytesMax
	if len(pages) != 2 || len(pages[0]) != want || len(pages[1]) != n-want {
		t.Fatalf("pages %v, want %d then %d items", pages, want, n-want)
	}
	// A preview past its cap is cut to it; none without Payload.
	q := *ask
	q.PreviewBytes, q.Limit = BrowsePreviewBytesMax*2, 1
	if it := d.call(&q).(*MessagesPage).Items[0]; it.PreviewBytes != BrowsePreviewBytesMax || it.PayloadLen != BrowsePreviewBytesMax {
		t.Fatalf("an oversized preview: %+v", it.PreviewBytes)
	}
	q.Payload = false
	if it := d.call(&q).(*MessagesPage).Items[0]; it.PreviewBytes != 0 {
		t.Fatalf("a preview without Payload: %d bytes", it.PreviewBytes)
	}
}

// A replay goes back to the partition the copy left (its
// stroma.dlq.source_partition), not to source_offset mod count; a copy
// without the header, or naming a partition the source no longer has,
// falls back to the offset spread.
func TestReplayReturnsToTheSourcePartition(t *testing.T) {
	d := newOpDriver(t)
	d.declare("jobs", 3)
	d.declare("dlq", 1)
	withPartition := func(p string) []core.Header {
		return append(copyHeaders("jobs", 3, "terminal_nack", 100), core.Header{Key: core.HeaderDLQSourcePartition, Value: p})
	}
	d.storeCopy(qid("jobs", 1), 3, "from-1", withPartition("1"))
	d.storeCopy(qid("jobs", 2), 3, "from-2", withPartition("2"))
	d.storeCopy(qid("jobs", 1), 3, "no-header", copyHeaders("jobs", 3, "terminal_nack", 100))
	d.storeCopy(qid("jobs", 1), 3, "gone-partition", withPartition("9"))
	res, _ := d.runReplay(ReplayPlan{Topic: "dlq", Offsets: []uint64{0, 1, 2, 3}}, -1)
	if res.Replayed != 4 {
		t.Fatalf("replay %+v", res)
	}
	payloads := func(p uint32) (out []string) {
		part := d.hosts[qid("jobs", p)].Partition()
		for off := uint64(0); off < part.NextOffset(); off++ {
			if v, live := part.Message(off); live {
				out = append(out, string(v.Body.Payload))
			}
		}
		return out
	}
	// 3 mod 3 = 0: the fallback partition.
	if got := payloads(0); !slices.Equal(got, []string{"no-header", "gone-partition"}) {
		t.Fatalf("partition 0 holds %q", got)
	}
	if got := payloads(1); !slices.Equal(got, []string{"from-1"}) {
		t.Fatalf("partition 1 holds %q", got)
	}
	if got := payloads(2); !slices.Equal(got, []string{"from-2"}) {
		t.Fatalf("partition 2 holds %q", got)
	}
}
