package stream

import (
	"bytes"
	"flag"
	"os"
	"strconv"
	"testing"

	"github.com/fibril-go/fibril/core"
	"pgregory.net/rapid"
)

// TestMain raises rapid's defaults as core's does (1000 sequences of up to
// 100 steps); the command line still wins.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if !explicit["rapid.checks"] {
		_ = flag.Set("rapid.checks", "1000")
	}
	if !explicit["rapid.steps"] {
		_ = flag.Set("rapid.steps", "100")
	}
	os.Exit(m.Run())
}

// machine drives a partition (through the harness, which is the storage and
// the driver) and the model side by side.
type machine struct {
	h       *harness
	m       *model
	nextSub uint64
	nextRef uint64
	// wantErr: the error the model expects for the current input, if any.
	wantErr *core.Error
	errRef  uint64
}

var (
	regions  = []string{"eu-west", "eu-north", "us", "asia"}
	patterns = []string{"*", "eu-*", "us", "*a*", "*-west", "asia"}
)

func newMachine(t *rapid.T) *machine {
	settings := core.StreamSettings{
		Tier:           uint8(rapid.IntRange(0, 2).Draw(t, "tier")),
		MaxRecords:     rapid.SampledFrom([]uint64{0, 4, 9}).Draw(t, "maxRecords"),
		MaxBytes:       rapid.SampledFrom([]uint64{0, 120}).Draw(t, "maxBytes"),
		MaxAgeMs:       rapid.SampledFrom([]uint64{0, 4000}).Draw(t, "maxAgeMs"),
		PartitionCount: 1,
	}
	tune := func(c *Config) {
		c.SegmentRecordsMax = uint64(rapid.IntRange(1, 4).Draw(t, "segmentRecordsMax"))
		c.SegmentBytesMax = uint64(rapid.IntRange(20, 200).Draw(t, "segmentBytesMax"))
		c.TailBytesMax = int64(rapid.IntRange(1, 600).Draw(t, "tailBytesMax"))
		c.SubWindowMax = rapid.IntRange(1, 4).Draw(t, "subWindowMax")
		c.ReadBatchMax = rapid.IntRange(1, 5).Draw(t, "readBatchMax")
		c.ReadCacheBytesMax = int64(rapid.IntRange(1, 600).Draw(t, "readCacheBytesMax"))
		c.CommitBatchMax = rapid.IntRange(1, 3).Draw(t, "commitBatchMax")
		c.SubscriptionsMax = 6
		c.CursorsMax = 3
	}
	h := newHarness(t, settings, tune)
	mc := &machine{h: h, m: newModel(h.cfg, settings), nextSub: 1, nextRef: 1}
	h.onReady = mc.check
	return mc
}

// check holds one Ready to the model, then the partition's state.
func (mc *machine) check(in Input, rd *Ready) {
	t, m, p := mc.h.t, mc.m, mc.h.p
	t.Helper()
	for _, e := range rd.Persist {
		switch e.Kind {
		case core.EntryStreamRecord:
			if e.Offset != m.nextOffset() {
				t.Fatalf("record offset %d, model next %d", e.Offset, m.nextOffset())
			}
			m.records = append(m.records, mRecord{index: e.Index, atMs: e.AtMs, bytes: uint64(len(e.Body.Payload)),
				headers: e.Body.Headers, payload: string(e.Body.Payload)})
		case core.EntryCursorCommit:
			for _, c := range e.Cursors {
				m.commits = append(m.commits, mCommit{index: e.Index, name: c.Name, next: c.Next})
			}
		}
	}
	// Retention clamps before anything is served in the step.
	if sd, ok := in.(*SnapshotDone); ok {
		mc.applySnapshotDone(sd, rd)
	}
	for _, d := range rd.Deliveries {
		s := m.subs[d.SubID]
		switch {
		case s == nil:
			t.Fatalf("delivery to unknown subscription %d", d.SubID)
		case d.Offset < s.next || d.Offset >= m.nextOffset():
			t.Fatalf("sub %d delivered %d, model next %d (of %d)", d.SubID, d.Offset, s.next, m.nextOffset())
		case string(d.Body.Payload) != m.records[d.Offset].payload:
			t.Fatalf("sub %d offset %d has another record's body", d.SubID, d.Offset)
		case !m.wants(s, d.Offset):
			t.Fatalf("sub %d delivered %d, which its filter or start excludes", d.SubID, d.Offset)
		case len(s.handed) >= mc.h.cfg.SubWindowMax:
			t.Fatalf("sub %d over its window", d.SubID)
		}
		if err := m.checkPassedOver(s, s.next, d.Offset); err != nil {
			t.Fatalf("sub %d: %v", d.SubID, err)
		}
		notDurable := m.records[d.Offset].index > p.DurableIndex()
		if m.settings.Tier == core.TierDurable && notDurable {
			t.Fatalf("durable tier delivered %d before it was durable", d.Offset)
		}
		if d.Speculative != (m.settings.Tier == core.TierSpeculative && notDurable) {
			t.Fatalf("offset %d speculative flag %v (tier %d, durable %v)", d.Offset, d.Speculative, m.settings.Tier, !notDurable)
		}
		s.next = d.Offset + 1
		s.handed = append(s.handed, d.Offset)
		s.delivered = append(s.delivered, d.Offset)
		if s.autoAck {
			m.commit(s, d.Offset+1)
		}
	}
	mc.checkReplies(rd)
	if rd.Truncate != nil {
		// Retention runs under traffic too, but drops only durable entries.
		if rd.Truncate.UpToIndex > p.DurableIndex() {
			t.Fatalf("truncation up to %d, past the durable index %d", rd.Truncate.UpToIndex, p.DurableIndex())
		}
		if _, err := m.checkTruncate(rd.Truncate.UpToIndex, p.nowMs); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := in.(*Tick); ok && mc.h.truncate == nil && rd.Truncate == nil && p.LastIndex() == p.DurableIndex() && m.dueTruncation(p.nowMs) {
		t.Fatal("retention is due but asked for nothing")
	}
	mc.checkState()
}

func indexToOffset(m *model, index uint64) uint64 {
	for o := range m.records {
		if m.records[o].index == index {
			return uint64(o)
		}
	}
	panic("no record at index " + strconv.FormatUint(index, 10))
}

func (mc *machine) applySnapshotDone(sd *SnapshotDone, rd *Ready) {
	t, m := mc.h.t, mc.m
	oldest := indexToOffset(m, sd.Index) + 1
	clamped := map[uint64]Notice{}
	for _, n := range rd.Notices {
		clamped[n.SubID] = n
	}
	for id, s := range m.subs {
		n, told := clamped[id]
		if told {
			if n.To != oldest || n.From < s.next || n.Kind != NoticeClamped {
				t.Fatalf("notice %+v, model next %d, oldest %d", n, s.next, oldest)
			}
			if err := m.checkPassedOver(s, s.next, n.From); err != nil {
				t.Fatalf("sub %d before its clamp: %v", id, err)
			}
		} else if s.next < oldest && mc.h.p.subs[id].next < oldest {
			t.Fatalf("sub %d behind the oldest %d without a notice", id, oldest)
		}
	}
	m.applyTruncation(oldest)
}

func (mc *machine) checkReplies(rd *Ready) {
	t, m, p := mc.h.t, mc.m, mc.h.p
	var gotErr *core.Error
	for _, r := range rd.Replies {
		switch r.Kind {
		case core.ReplyError:
			if r.Ref != mc.errRef || gotErr != nil {
				t.Fatalf("unexpected error %v for ref %d", r.Err, r.Ref)
			}
			gotErr = r.Err
		case core.ReplyPublished:
			offset, ok := m.confirms[r.Ref]
			switch {
			case !ok || offset != r.Offset:
				t.Fatalf("confirm of ref %d offset %d, model has %d %v", r.Ref, r.Offset, offset, ok)
			case m.settings.Tier != core.TierEphemeral && m.records[offset].index > p.DurableIndex():
				t.Fatalf("offset %d confirmed before durable", offset)
			}
			delete(m.confirms, r.Ref)
		}
	}
	if gotErr != mc.wantErr {
		t.Fatalf("error %v, model expects %v", gotErr, mc.wantErr)
	}
	mc.wantErr = nil
	if m.settings.Tier == core.TierEphemeral && len(m.confirms) > 0 {
		t.Fatalf("ephemeral publishes %v unconfirmed", m.confirms)
	}
}

// checkState compares the partition with the model after a step.
func (mc *machine) checkState() {
	t, m, p := mc.h.t, mc.m, mc.h.p
	if p.NextOffset() != m.nextOffset() || p.Oldest() != m.oldest {
		t.Fatalf("next %d oldest %d, model %d %d", p.NextOffset(), p.Oldest(), m.nextOffset(), m.oldest)
	}
	if len(p.cursors) != len(m.cursors) {
		t.Fatalf("cursors %v, model %v", p.cursors, m.cursors)
	}
	for name, next := range m.cursors {
		if got, ok := p.Cursor(name); !ok || got != next {
			t.Fatalf("cursor %q at %d, model %d", name, got, next)
		}
	}
	for id, s := range m.subs {
		ps := p.subs[id]
		if ps == nil || ps.next < s.next || ps.window != len(s.handed) {
			t.Fatalf("sub %d: partition %+v, model next %d window %d", id, ps, s.next, len(s.handed))
		}
		// The partition may be ahead of the model only over records it
		// must not deliver: it never skips one.
		if err := m.checkPassedOver(s, s.next, ps.next); err != nil {
			t.Fatalf("sub %d skipped: %v", id, err)
		}
	}
	if len(p.subs) != len(m.subs) {
		t.Fatalf("%d subscriptions, model %d", len(p.subs), len(m.subs))
	}
}

func (mc *machine) ref() uint64 { mc.nextRef++; return mc.nextRef }

func (mc *machine) publish(t *rapid.T) {
	h := mc.h
	body := &core.Body{Payload: bytes.Repeat([]byte{'x'}, rapid.IntRange(0, 40).Draw(t, "payloadBytes"))}
	body.Payload = append(body.Payload, strconv.Itoa(int(mc.nextRef))...) // unique bodies
	if rapid.IntRange(0, 3).Draw(t, "region?") > 0 {
		body.Headers = append(body.Headers, core.Header{Key: "region", Value: rapid.SampledFrom(regions).Draw(t, "region")})
	}
	if rapid.Bool().Draw(t, "kind?") {
		body.Headers = append(body.Headers, core.Header{Key: "kind", Value: rapid.SampledFrom([]string{"a", "b"}).Draw(t, "kind")})
	}
	ref := mc.ref()
	if h.p.LastIndex()-h.p.DurableIndex() >= uint64(h.cfg.UnpersistedEntriesMax) {
		mc.wantErr, mc.errRef = core.ErrStorageBehind, ref
	} else {
		mc.m.confirms[ref] = mc.m.nextOffset()
	}
	h.step(&Publish{NowMs: h.nowMs, Ref: ref, Body: body})
}

func (mc *machine) subscribe(t *rapid.T) {
	h, m := mc.h, mc.m
	in := &Subscribe{NowMs: h.nowMs, Ref: mc.ref(), SubID: mc.nextSub, AutoAck: rapid.Bool().Draw(t, "autoAck")}
	mc.nextSub++
	for i, n := 0, rapid.IntRange(0, 2).Draw(t, "clauses"); i < n; i++ {
		in.Filter = append(in.Filter, Clause{Key: rapid.SampledFrom([]string{"region", "kind"}).Draw(t, "key"),
			Pattern: rapid.SampledFrom(patterns).Draw(t, "pattern")})
	}
	s := &mSub{filter: in.Filter, autoAck: in.AutoAck}
	if rapid.Bool().Draw(t, "durable?") {
		in.DurableName = rapid.SampledFrom([]string{"n1", "n2", "n3", "n4"}).Draw(t, "name")
		s.name = in.DurableName
		if next, ok := m.cursors[s.name]; ok {
			s.next = min(max(next, m.oldest), m.nextOffset())
		} else {
			s.next = m.oldest
		}
	} else {
		in.Start.Kind = StartKind(rapid.IntRange(0, 4).Draw(t, "start"))
		in.Start.Value = uint64(rapid.IntRange(0, 30).Draw(t, "startValue"))
		if in.Start.Kind == StartByTime {
			in.Start.Value = 1000 + in.Start.Value*250 // near the records' publish times
		}
		s.next = mc.modelStart(in.Start, s)
	}
	s.committed = s.next
	names := map[string]bool{}
	for name := range m.cursors {
		names[name] = true
	}
	for _, other := range m.subs {
		if other.name != "" {
			names[other.name] = true
		}
	}
	switch {
	case len(m.subs) >= h.cfg.SubscriptionsMax:
		mc.wantErr, mc.errRef = core.ErrTooManySubscriptions, in.Ref
	case s.name != "" && !names[s.name] && len(names) >= h.cfg.CursorsMax:
		mc.wantErr, mc.errRef = core.ErrTooManyCursors, in.Ref
	default:
		m.subs[in.SubID] = s
	}
	h.step(in)
}

// modelStart resolves an ephemeral start from the records themselves.
func (mc *machine) modelStart(st Start, s *mSub) uint64 {
	m := mc.m
	next, oldest := m.nextOffset(), m.oldest
	switch st.Kind {
	case StartLatest:
		return next
	case StartEarliest:
		return oldest
	case StartOffset:
		return min(max(st.Value, oldest), next)
	case StartNBack:
		if st.Value >= next-oldest {
			return oldest
		}
		return next - st.Value
	}
	s.minAtMs = int64(st.Value)
	for _, g := range m.segments() {
		if m.records[g.last].atMs >= s.minAtMs {
			return g.first
		}
	}
	return next
}

func (mc *machine) ack(t *rapid.T) {
	h, m := mc.h, mc.m
	id := uint64(rapid.IntRange(1, int(mc.nextSub)).Draw(t, "sub"))
	in := &Ack{NowMs: h.nowMs, Ref: mc.ref(), SubID: id}
	s := m.subs[id]
	if s == nil {
		mc.wantErr, mc.errRef = core.ErrUnknownSubscription, in.Ref
		h.step(in)
		return
	}
	for i, n := 0, rapid.IntRange(0, 3).Draw(t, "acks"); i < n && len(s.delivered) > 0; i++ {
		in.Offsets = append(in.Offsets, rapid.SampledFrom(s.delivered).Draw(t, "acked"))
	}
	if rapid.IntRange(0, 9).Draw(t, "beyond?") == 0 {
		// Never handed out: ignored on its own, the rest still commits.
		in.Offsets = append(in.Offsets, h.p.subs[id].next+uint64(rapid.IntRange(0, 2).Draw(t, "beyond")))
	}
	var top uint64 // one past the highest valid offset; 0 = none
	for _, o := range in.Offsets {
		if o < h.p.subs[id].next && o+1 > top {
			top = o + 1
		}
	}
	if top > 0 {
		mc.m.commit(s, top)
	}
	h.step(in)
}

func (mc *machine) credit(t *rapid.T) {
	h, m := mc.h, mc.m
	for _, id := range h.p.subOrder {
		s := m.subs[id]
		if len(s.handed) == 0 || !rapid.Bool().Draw(t, "credit?") {
			continue
		}
		n := rapid.IntRange(1, len(s.handed)).Draw(t, "records")
		s.handed = s.handed[n:]
		h.step(&Credit{NowMs: h.nowMs, SubID: id, Records: n})
	}
}

func (mc *machine) unsubscribe(t *rapid.T) {
	h := mc.h
	id := uint64(rapid.IntRange(1, int(mc.nextSub)).Draw(t, "sub"))
	in := &Unsubscribe{NowMs: h.nowMs, Ref: mc.ref(), SubID: id}
	if mc.m.subs[id] == nil {
		mc.wantErr, mc.errRef = core.ErrUnknownSubscription, in.Ref
	}
	delete(mc.m.subs, id)
	h.step(in)
}

func (mc *machine) persist(t *rapid.T) {
	h := mc.h
	if h.p.LastIndex() == h.p.DurableIndex() {
		return
	}
	upTo := uint64(rapid.IntRange(int(h.p.DurableIndex()+1), int(h.p.LastIndex())).Draw(t, "upTo"))
	h.durable = upTo
	h.step(&Persisted{NowMs: h.nowMs, UpToIndex: upTo})
}

func (mc *machine) read(t *rapid.T) {
	h := mc.h
	if len(h.reads) == 0 {
		return
	}
	i := rapid.IntRange(0, len(h.reads)-1).Draw(t, "read")
	r := h.reads[i]
	h.reads = append(h.reads[:i], h.reads[i+1:]...)
	done := h.readDone(r)
	if rapid.IntRange(0, 5).Draw(t, "fail?") == 0 {
		done.Entries, done.Err = nil, core.ErrStorageBehind
	} else if len(done.Entries) > 1 && rapid.IntRange(0, 3).Draw(t, "short?") == 0 {
		// Short, as a driver capping a read's bytes answers.
		done.Entries = done.Entries[:rapid.IntRange(1, len(done.Entries)-1).Draw(t, "shortLen")]
	}
	h.step(done)
}

// crash reloads from storage, which keeps any prefix at or past what it
// reported durable; with nothing lost the reload equals the live state.
func (mc *machine) crash(t *rapid.T) {
	h := mc.h
	// The declare is kept: a log lost whole is a fresh partition, declared
	// again by the host from the catalogue.
	cut := uint64(rapid.IntRange(int(max(h.p.DurableIndex(), 1)), int(h.p.LastIndex())).Draw(t, "cut"))
	live := h.p.Snapshot()
	lossless := cut == h.p.LastIndex()
	h.durable = cut
	h.crash()
	if lossless && !bytes.Equal(h.p.Snapshot(), live) {
		t.Fatal("snapshot + replay differs from the live state")
	}
	mc.m.crash(cut)
	mc.checkState()
}

// drain persists, saves snapshots, credits and reads until nothing moves,
// then every subscription must have been offered every record.
func (mc *machine) drain(t *rapid.T) {
	h, m := mc.h, mc.m
	for round := 0; round < 10_000; round++ {
		moved := false
		if h.p.LastIndex() != h.p.DurableIndex() {
			h.durable = h.p.LastIndex()
			h.step(&Persisted{NowMs: h.nowMs, UpToIndex: h.durable})
			moved = true
		}
		if h.truncate != nil {
			h.saveSnapshot()
			moved = true
		}
		for _, id := range h.p.subOrder {
			if s := m.subs[id]; len(s.handed) > 0 {
				n := len(s.handed)
				s.handed = nil
				h.step(&Credit{NowMs: h.nowMs, SubID: id, Records: n})
				moved = true
			}
		}
		if len(h.reads) > 0 {
			r := h.reads[0]
			h.reads = h.reads[1:]
			h.step(h.readDone(r))
			moved = true
		}
		if !moved {
			h.nowMs += h.cfg.ReadRetryMs
			h.step(&Tick{NowMs: h.nowMs})
			if len(h.reads) == 0 && h.truncate == nil {
				break
			}
		}
	}
	for id, s := range m.subs {
		if err := m.checkPassedOver(s, s.next, m.nextOffset()); err != nil {
			t.Fatalf("after draining, sub %d was never offered: %v", id, err)
		}
	}
}

func TestPartitionAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mc := newMachine(t)
		t.Repeat(map[string]func(*rapid.T){
			"publish":     mc.publish,
			"subscribe":   mc.subscribe,
			"unsubscribe": mc.unsubscribe,
			"ack":         mc.ack,
			"credit":      mc.credit,
			"persist":     mc.persist,
			"read":        mc.read,
			"tick": func(t *rapid.T) {
				mc.h.nowMs += rapid.Int64Range(0, 3000).Draw(t, "dt")
				mc.h.step(&Tick{NowMs: mc.h.nowMs})
			},
			"snapshotDone": func(t *rapid.T) {
				if mc.h.truncate != nil {
					mc.h.saveSnapshot()
				}
			},
			"crash": mc.crash,
			"drain": mc.drain,
			"":      func(t *rapid.T) {},
		})
		mc.drain(t)
	})
}
