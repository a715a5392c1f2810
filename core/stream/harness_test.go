package stream

import (
	"strconv"

	"github.com/fibril-go/fibril/core"
)

// harness drives one partition like a driver would: it keeps a storage
// model (a snapshot and the entries after it), answers reads from it,
// applies truncations, and checks invariants after every step.
type harness struct {
	t     tb
	cfg   Config
	p     *Partition
	nowMs int64

	snap    []byte       // storage's snapshot (nil = none)
	log     []core.Entry // storage's entries after the snapshot
	durable uint64       // what storage reported durable

	deliveries []Delivery
	replies    []core.Reply
	notices    []Notice
	reads      []Read
	truncate   *Truncate
	// onReady, when set, sees every Ready before the harness keeps it.
	onReady func(in Input, rd *Ready)
}

// tb is what the harness needs of *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func newHarness(t tb, settings core.StreamSettings, tune func(*Config)) *harness {
	t.Helper()
	cfg := DefaultConfig(core.QueueID{Topic: "events"})
	if tune != nil {
		tune(&cfg)
	}
	p, err := NewPartition(cfg, settings)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, cfg: cfg, p: p, nowMs: 1_000}
	h.step(&Tick{NowMs: h.nowMs})
	return h
}

func durableSettings() core.StreamSettings {
	return core.StreamSettings{Tier: core.TierDurable, PartitionCount: 1}
}

// step feeds in and keeps copies of everything the Ready said.
func (h *harness) step(in Input) *Ready {
	h.t.Helper()
	rd := h.p.Step(in)
	if err := h.p.CheckInvariants(); err != nil {
		h.t.Fatalf("after %T: %v", in, err)
	}
	if h.onReady != nil {
		h.onReady(in, rd)
	}
	for i := range rd.Persist {
		e := rd.Persist[i]
		if n := len(h.log); n > 0 && h.log[n-1].Index+1 != e.Index {
			h.t.Fatalf("persist index %d after %d", e.Index, h.log[n-1].Index)
		}
		h.log = append(h.log, e)
	}
	h.deliveries = append(h.deliveries, rd.Deliveries...)
	h.replies = append(h.replies, rd.Replies...)
	h.notices = append(h.notices, rd.Notices...)
	h.reads = append(h.reads, rd.Reads...)
	if rd.Truncate != nil {
		if h.truncate != nil {
			h.t.Fatal("a second truncation while one is pending")
		}
		tr := *rd.Truncate
		h.truncate = &tr
	}
	return rd
}

func (h *harness) advance(ms int64) {
	h.nowMs += ms
	h.step(&Tick{NowMs: h.nowMs})
}

func (h *harness) persist() {
	h.durable = h.p.LastIndex()
	h.step(&Persisted{NowMs: h.nowMs, UpToIndex: h.durable})
}

func (h *harness) publish(headers ...string) uint64 {
	h.t.Helper()
	body := &core.Body{Payload: []byte("payload-" + strconv.Itoa(int(h.p.NextOffset())))}
	for i := 0; i+1 < len(headers); i += 2 {
		body.Headers = append(body.Headers, core.Header{Key: headers[i], Value: headers[i+1]})
	}
	offset := h.p.NextOffset()
	h.step(&Publish{NowMs: h.nowMs, Ref: 1000 + offset, Body: body})
	return offset
}

// publishN publishes n records and makes them durable.
func (h *harness) publishN(n int) {
	for i := 0; i < n; i++ {
		h.publish()
	}
	h.persist()
}

func (h *harness) subscribe(in Subscribe) core.Reply {
	h.t.Helper()
	in.NowMs, in.Ref = h.nowMs, 7000+in.SubID
	h.replies = h.replies[:0]
	h.step(&in)
	for _, r := range h.replies {
		if r.Ref == in.Ref {
			return r
		}
	}
	h.t.Fatalf("no reply to subscribe %d", in.SubID)
	return core.Reply{}
}

// answerReads answers every pending read from storage, until none is left
// (each answer may start another read).
func (h *harness) answerReads() {
	for rounds := 0; len(h.reads) > 0; rounds++ {
		if rounds > 100_000 {
			h.t.Fatal("reads never end")
		}
		r := h.reads[0]
		h.reads = h.reads[1:]
		h.step(h.readDone(r))
	}
}

func (h *harness) readDone(r Read) *ReadDone {
	done := &ReadDone{NowMs: h.nowMs, SubID: r.SubID, Token: r.Token}
	for _, e := range h.log {
		if e.Index >= r.FromIndex && len(done.Entries) < r.MaxEntries {
			done.Entries = append(done.Entries, e)
		}
	}
	if len(done.Entries) == 0 || done.Entries[0].Index != r.FromIndex {
		done.Entries, done.Err = nil, core.ErrStorageBehind
	}
	return done
}

// saveSnapshot does what storage does with a Truncate, then reports it.
func (h *harness) saveSnapshot() {
	h.t.Helper()
	tr := h.truncate
	if tr == nil {
		h.t.Fatal("no truncation pending")
	}
	h.truncate = nil
	h.snap = tr.Snapshot
	kept := h.log[:0:0]
	for _, e := range h.log {
		if e.Index > tr.UpToIndex {
			kept = append(kept, e)
		}
	}
	h.log = kept
	h.step(&SnapshotDone{NowMs: h.nowMs, Index: tr.UpToIndex})
}

// crash reloads from storage, losing everything not durable.
func (h *harness) crash() {
	h.t.Helper()
	kept := h.log[:0:0]
	for _, e := range h.log {
		if e.Index <= h.durable {
			kept = append(kept, e)
		}
	}
	h.log, h.truncate, h.reads = kept, nil, nil
	p, err := Load(h.cfg, h.snap, h.log)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := p.CheckInvariants(); err != nil {
		h.t.Fatal(err)
	}
	h.p = p
}

// delivered lists the offsets delivered to sub, in order, and forgets them.
func (h *harness) delivered(sub uint64) []uint64 {
	var out []uint64
	rest := h.deliveries[:0]
	for _, d := range h.deliveries {
		if d.SubID == sub {
			out = append(out, d.Offset)
		} else {
			rest = append(rest, d)
		}
	}
	h.deliveries = rest
	return out
}

func (h *harness) credit(sub uint64, n int) {
	h.step(&Credit{NowMs: h.nowMs, SubID: sub, Records: n})
}

func (h *harness) ack(sub uint64, offsets ...uint64) {
	h.step(&Ack{NowMs: h.nowMs, SubID: sub, Offsets: offsets})
}

func (h *harness) errorsFor(ref uint64) []*core.Error {
	var out []*core.Error
	for _, r := range h.replies {
		if r.Ref == ref && r.Kind == core.ReplyError {
			out = append(out, r.Err)
		}
	}
	return out
}

func offsets(from, to uint64) []uint64 {
	var out []uint64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}
