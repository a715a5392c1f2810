package node

import (
	"errors"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
)

// streamHostHarness drives one StreamHost as a driver would: it keeps the
// log (entries by index, dropped up to a truncation), answers reads from
// it, reports durability at once when autoPersist, and checks the
// invariants after every step.
type streamHostHarness struct {
	t           sessT
	h           *StreamHost
	now         int64
	log         map[uint64]core.Entry
	durable     uint64
	autoPersist bool
	autoRead    bool
	out         []Envelope
	reads       []StreamRead
	snapshots   []*SnapshotRequest
	wakeMs      int64
}

func testStreamConfig(id core.QueueID) stream.Config {
	cfg := stream.DefaultConfig(id)
	cfg.SegmentRecordsMax = 4
	cfg.TailBytesMax = 400
	cfg.SubWindowMax = 4
	cfg.ReadBatchMax = 3
	return cfg
}

func newStreamHostHarness(t sessT, settings core.StreamSettings) *streamHostHarness {
	t.Helper()
	id := qid("ticks", 0)
	scfg := testStreamConfig(id)
	p, err := stream.NewPartition(scfg, settings)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewStreamHost(testHostConfig(), p, LoadRequest{Queue: id, Kind: KindStream, StreamConfig: scfg, Stream: settings})
	if err != nil {
		t.Fatal(err)
	}
	sh := &streamHostHarness{t: t, h: h, now: 1_000_000, log: map[uint64]core.Entry{}, autoPersist: true, autoRead: true}
	sh.step(&Tick{NowMs: sh.now})
	if len(sh.log) != 1 {
		t.Fatalf("a new stream logs its declare first: %d entries", len(sh.log))
	}
	return sh
}

func (sh *streamHostHarness) step(in Input) {
	sh.t.Helper()
	rd := sh.h.Step(in)
	for _, e := range rd.PersistEntries {
		if _, dup := sh.log[e.Index]; dup {
			sh.t.Fatalf("entry %d persisted twice", e.Index)
		}
		sh.log[e.Index] = e
	}
	sh.out = append(sh.out, rd.Out...)
	reads := append([]StreamRead(nil), rd.Reads...)
	sh.reads = append(sh.reads, reads...)
	snapshot := rd.Snapshot
	if snapshot != nil {
		sh.snapshots = append(sh.snapshots, snapshot)
	}
	sh.wakeMs = rd.WakeMs
	if err := sh.h.CheckInvariants(); err != nil {
		sh.t.Fatalf("after %T: %v", in, err)
	}
	if sh.autoPersist && len(rd.PersistEntries) > 0 {
		sh.durable = sh.h.Partition().LastIndex()
		sh.step(&Persisted{NowMs: sh.now, UpToIndex: sh.durable})
	}
	if snapshot != nil && sh.autoPersist {
		for i := range sh.log {
			if i <= snapshot.Index {
				delete(sh.log, i)
			}
		}
		sh.step(&SnapshotDone{NowMs: sh.now, Index: snapshot.Index})
	}
	if sh.autoRead {
		for _, r := range reads {
			sh.answerRead(r)
		}
	}
}

func (sh *streamHostHarness) answerRead(r StreamRead) {
	sh.t.Helper()
	var entries []core.Entry
	for i := r.FromIndex; len(entries) < r.MaxEntries; i++ {
		e, ok := sh.log[i]
		if !ok {
			break
		}
		entries = append(entries, e)
	}
	sh.step(&StreamReadDone{NowMs: sh.now, Token: r.Token, Entries: entries})
}

func (sh *streamHostHarness) request(session SessionID, token uint64, in stream.Input) {
	sh.t.Helper()
	sh.step(&Deliver{NowMs: sh.now, Envelope: Envelope{From: SessionAddr(session), To: PartitionAddr(sh.h.id),
		Msg: &StreamRequest{Token: token, Input: in}}})
}

func (sh *streamHostHarness) publish(session SessionID, token uint64, payload string, headers ...core.Header) {
	sh.t.Helper()
	body := &core.Body{Payload: []byte(payload), Headers: headers}
	sh.step(&Deliver{NowMs: sh.now, Envelope: Envelope{From: SessionAddr(session), To: PartitionAddr(sh.h.id),
		Msg: &Request{Token: token, Input: &core.Publish{Confirm: token != 0, Body: body}}}})
}

// take returns and forgets the envelopes collected so far.
func (sh *streamHostHarness) take() []Envelope {
	out := sh.out
	sh.out = nil
	return out
}

// responsesTo flattens the Response(s) envelopes to session.
func responsesTo(out []Envelope, session SessionID) []Response {
	var rs []Response
	for _, env := range out {
		if env.To != SessionAddr(session) {
			continue
		}
		switch m := env.Msg.(type) {
		case *Response:
			rs = append(rs, *m)
		case *Responses:
			rs = append(rs, m.Items...)
		}
	}
	return rs
}

// offsetsTo lists the offsets delivered to sub, checking one envelope per
// subscription per step is what the harness saw in order.
func offsetsTo(out []Envelope, sub uint64) []uint64 {
	var offsets []uint64
	for _, env := range out {
		if m, ok := env.Msg.(*StreamDeliveries); ok && m.SubID == sub {
			for _, d := range m.Items {
				offsets = append(offsets, d.Offset)
			}
		}
	}
	return offsets
}

func TestStreamHostRoutesRepliesAndDeliveries(t *testing.T) {
	sh := newStreamHostHarness(t, streamSettings(1))
	sh.request(1, 11, &stream.Subscribe{SubID: 100, Start: stream.Start{Kind: stream.StartLatest}})
	sh.request(2, 21, &stream.Subscribe{SubID: 200, Start: stream.Start{Kind: stream.StartLatest}})
	out := sh.take()
	if r := responsesTo(out, 1); len(r) != 1 || r[0].Token != 11 || r[0].Reply.Kind != core.ReplySubscribed {
		t.Fatalf("subscribe answer: %+v", out)
	}
	sh.autoPersist = false
	sh.publish(3, 31, "a")
	sh.publish(3, 32, "b")
	if out := sh.take(); len(out) != 0 {
		t.Fatalf("durable tier: nothing before durability: %+v", out)
	}
	sh.durable = sh.h.Partition().LastIndex()
	sh.step(&Persisted{NowMs: sh.now, UpToIndex: sh.durable})
	out = sh.take()
	// One envelope of answers for the publisher, in order; one batch per
	// subscription, after the replies.
	if len(out) != 3 {
		t.Fatalf("envelopes: %+v", out)
	}
	rs, ok := out[0].Msg.(*Responses)
	if !ok || out[0].To != SessionAddr(3) || len(rs.Items) != 2 || rs.Items[0].Token != 31 || rs.Items[1].Reply.Offset != 1 {
		t.Fatalf("publish answers: %+v", out[0])
	}
	for i, sub := range []uint64{100, 200} {
		m, ok := out[1+i].Msg.(*StreamDeliveries)
		if !ok || m.SubID != sub || m.Stream != sh.h.id || len(m.Items) != 2 || m.Items[1].Offset != 1 || m.Items[0].Speculative {
			t.Fatalf("deliveries of %d: %+v", sub, out[1+i])
		}
		if out[1+i].To != SessionAddr(SessionID(i+1)) {
			t.Fatalf("deliveries of %d went to %v", sub, out[1+i].To)
		}
	}
}

func TestStreamHostRefusedSubscribeIsForgotten(t *testing.T) {
	sh := newStreamHostHarness(t, streamSettings(1))
	sh.request(1, 11, &stream.Subscribe{SubID: 100, Filter: make([]stream.Clause, 100)})
	if r := responsesTo(sh.take(), 1); len(r) != 1 || r[0].Reply.Err != core.ErrInvalidStreamStart {
		t.Fatalf("refused: %+v", r)
	}
	if len(sh.h.subs) != 0 {
		t.Fatal("a refused subscription stays routed")
	}
	sh.request(1, 12, &stream.Subscribe{SubID: 100})
	sh.request(1, 13, &stream.Subscribe{SubID: 100}) // a duplicate keeps the first
	if len(sh.h.subs) != 1 {
		t.Fatalf("routes: %v", sh.h.subs)
	}
	sh.request(1, 0, &stream.Unsubscribe{SubID: 100})
	if len(sh.h.subs) != 0 || len(sh.h.refs) != 0 {
		t.Fatalf("after unsubscribe: %v %v", sh.h.subs, sh.h.refs)
	}
}

func TestStreamHostSpeculativeAndCreditWindow(t *testing.T) {
	settings := streamSettings(1)
	settings.Tier = core.TierSpeculative
	sh := newStreamHostHarness(t, settings)
	sh.request(1, 0, &stream.Subscribe{SubID: 100})
	sh.autoPersist = false
	for i := 0; i < 6; i++ {
		sh.publish(2, 0, "x")
	}
	out := sh.take()
	got := offsetsTo(out, 100)
	if len(got) != 4 { // the window (SubWindowMax 4)
		t.Fatalf("delivered before credit: %v", got)
	}
	for _, env := range out {
		if m, ok := env.Msg.(*StreamDeliveries); ok && !m.Items[0].Speculative {
			t.Fatal("a speculative delivery not flagged")
		}
	}
	// A credit from another session is ignored.
	sh.request(9, 0, &stream.Credit{SubID: 100, Records: 4})
	if got := offsetsTo(sh.take(), 100); len(got) != 0 {
		t.Fatalf("a foreign credit opened the window: %v", got)
	}
	sh.request(1, 0, &stream.Credit{SubID: 100, Records: 2})
	if got := offsetsTo(sh.take(), 100); len(got) != 2 || got[0] != 4 {
		t.Fatalf("after credit: %v", got)
	}
}

func TestStreamHostReadsFromTheLog(t *testing.T) {
	sh := newStreamHostHarness(t, streamSettings(1))
	for i := 0; i < 20; i++ {
		sh.publish(2, 0, "0123456789012345678901234567890123456789")
	}
	sh.take()
	sh.autoRead = false
	sh.request(1, 11, &stream.Subscribe{SubID: 100, Start: stream.Start{Kind: stream.StartEarliest}})
	if len(sh.reads) == 0 {
		t.Fatal("an old start reads the log")
	}
	// A stale token is ignored.
	sh.step(&StreamReadDone{NowMs: sh.now, Token: 999})
	sh.autoRead = true
	var got []uint64
	for i := 0; i < 100 && len(got) < 20; i++ {
		if len(sh.reads) > 0 {
			r := sh.reads[0]
			sh.reads = sh.reads[1:]
			sh.answerRead(r)
		}
		got = append(got, offsetsTo(sh.take(), 100)...)
		if n := len(got); n > 0 && n%4 == 0 {
			sh.request(1, 0, &stream.Credit{SubID: 100, Records: 4})
		}
	}
	for i, o := range got {
		if o != uint64(i) {
			t.Fatalf("offsets %v", got)
		}
	}
	if len(got) != 20 || len(sh.h.reads) != 0 {
		t.Fatalf("got %d, reads outstanding %d", len(got), len(sh.h.reads))
	}
}

func TestStreamHostTruncatesBySnapshot(t *testing.T) {
	settings := streamSettings(1)
	settings.MaxRecords = 4
	sh := newStreamHostHarness(t, settings)
	sh.autoPersist = false
	for i := 0; i < 9; i++ {
		sh.publish(2, 0, "x")
	}
	sh.durable = sh.h.Partition().LastIndex()
	sh.step(&Persisted{NowMs: sh.now, UpToIndex: sh.durable})
	if len(sh.snapshots) != 1 {
		t.Fatalf("snapshots: %d", len(sh.snapshots))
	}
	s := sh.snapshots[0]
	// Storage fails it: asked again after the retry delay, not before.
	sh.step(&SnapshotDone{NowMs: sh.now, Index: s.Index, Err: errors.New("disk full")})
	if sh.wakeMs != sh.now+truncateRetryMs {
		t.Fatalf("retry wake %d", sh.wakeMs)
	}
	sh.now += truncateRetryMs
	sh.step(&Tick{NowMs: sh.now})
	if len(sh.snapshots) != 2 || sh.snapshots[1].Index != s.Index {
		t.Fatalf("not asked again: %d", len(sh.snapshots))
	}
	sh.step(&SnapshotDone{NowMs: sh.now, Index: s.Index})
	if p := sh.h.Partition(); p.Oldest() == 0 || sh.h.truncating != nil {
		t.Fatalf("oldest %d after truncation", p.Oldest())
	}
	// The snapshot and the entries after it rebuild the partition.
	var after []core.Entry
	for i := s.Index + 1; i <= sh.h.Partition().LastIndex(); i++ {
		after = append(after, sh.log[i])
	}
	back, err := stream.Load(sh.h.Partition().Config(), s.Data, after)
	if err != nil || back.Oldest() != sh.h.Partition().Oldest() || back.NextOffset() != 9 {
		t.Fatalf("reload: %v", err)
	}
}

func TestStreamHostBouncedSessionIsUnsubscribed(t *testing.T) {
	sh := newStreamHostHarness(t, streamSettings(1))
	sh.request(1, 0, &stream.Subscribe{SubID: 100})
	sh.request(1, 0, &stream.Subscribe{SubID: 101})
	sh.request(2, 0, &stream.Subscribe{SubID: 200})
	sh.publish(3, 0, "x")
	var batch Envelope
	for _, env := range sh.take() {
		if env.To == SessionAddr(1) {
			batch = env
		}
	}
	sh.step(&Bounced{NowMs: sh.now, Envelope: batch})
	if ids := sh.h.Partition().SubscriptionIDs(); len(ids) != 1 || ids[0] != 200 {
		t.Fatalf("after the bounce: %v", ids)
	}
}

func TestStreamHostRefusesOtherSettings(t *testing.T) {
	id := qid("ticks", 0)
	p, err := stream.NewPartition(testStreamConfig(id), streamSettings(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewStreamHost(testHostConfig(), p, LoadRequest{Queue: id, Kind: KindStream, Stream: streamSettings(2)}); err == nil {
		t.Fatal("a partition whose settings differ from the catalogue's was wrapped")
	}
}
