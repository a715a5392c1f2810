package node

import (
	"bytes"
	"errors"
	"testing"

	"github.com/fibril-go/fibril/core"
)

func streamSettings(count uint32) core.StreamSettings {
	return core.StreamSettings{Tier: core.TierDurable, MaxRecords: 100, PartitionCount: count}
}

// declareStream sends a DeclareStream and returns the one Declared answer.
func (h *nodeHarness) declareStream(topic string, s core.StreamSettings) *Declared {
	h.t.Helper()
	e := h.deliver(SessionAddr(1), &DeclareStream{Token: 5, Topic: topic, Settings: s})
	d, _ := envelopesOf[*Declared](e)
	if len(d) != 1 {
		h.t.Fatalf("want one Declared, got %+v", e.out)
	}
	return d[0]
}

func TestNodeDeclareStreamIsIdempotentAndRefusesOtherSettings(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	if d := h.declareStream("ticks", streamSettings(3)); d.Err != nil || d.Partitions != 3 {
		t.Fatalf("declare: %+v", d)
	}
	records := len(h.log)
	if d := h.declareStream("ticks", streamSettings(3)); d.Err != nil || d.Partitions != 3 {
		t.Fatalf("re-declare: %+v", d)
	}
	if len(h.log) != records {
		t.Fatal("an idempotent re-declare wrote a record")
	}
	other := streamSettings(3)
	other.MaxRecords = 5
	if d := h.declareStream("ticks", other); d.Err != core.ErrStreamSettings || d.Err.Code() != 400 {
		t.Fatalf("re-declare with other settings: %+v", d)
	}
	if d := h.declareStream("ticks", streamSettings(4)); d.Err != core.ErrStreamSettings {
		t.Fatalf("re-declare with another count: %+v", d)
	}
	if d := h.declareStream("bad", core.StreamSettings{Tier: 3, PartitionCount: 1}); d.Err != core.ErrStreamSettings {
		t.Fatalf("invalid tier: %+v", d)
	}
	if d := h.declareStream("many", streamSettings(9)); d.Err != core.ErrTooManyPartitions {
		t.Fatalf("too many partitions: %+v", d)
	}
}

func TestNodeDeclareStreamAnswersOnlyOnceDurable(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	h.autoPersist = false
	e := h.deliver(SessionAddr(1), &DeclareStream{Token: 5, Topic: "ticks", Settings: streamSettings(1)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 0 {
		t.Fatal("answered before the record is durable")
	}
	// A re-declare meanwhile waits for the same record.
	e = h.deliver(SessionAddr(2), &DeclareStream{Token: 6, Topic: "ticks", Settings: streamSettings(1)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 0 {
		t.Fatal("idempotent re-declare answered before the record is durable")
	}
	e = h.persist()
	if d, to := envelopesOf[*Declared](e); len(d) != 2 || d[0].Err != nil || to[0] != SessionAddr(1) || to[1] != SessionAddr(2) {
		t.Fatalf("answers once durable: %+v", e.out)
	}
}

func TestNodeTopicIsQueueOrStream(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	// A queue (implicit, group g) owns its topic.
	e := h.deliver(SessionAddr(1), &Open{Token: 1, Topic: "jobs", Group: "g"})
	for _, l := range e.load {
		if l.Kind != KindQueue {
			t.Fatalf("queue load of kind %d", l.Kind)
		}
		h.step(&LoadDone{NowMs: h.now, Queue: l.Queue})
	}
	if d := h.declareStream("jobs", streamSettings(1)); d.Err != core.ErrTopicIsQueue || d.Err.Code() != 400 {
		t.Fatalf("stream on a queue's topic: %+v", d)
	}
	if o := h.openStreamOf(1, "jobs", 0); o.Err != core.ErrTopicIsQueue {
		t.Fatalf("SUBSCRIBE_STREAM on a queue: %+v", o)
	}
	// A stream owns its topic: no declare, no implicit queue, no group.
	if d := h.declareStream("ticks", streamSettings(2)); d.Err != nil {
		t.Fatal(d.Err)
	}
	e = h.deliver(SessionAddr(1), &DeclareQueue{Token: 2, Topic: "ticks", PartitionCount: 1})
	if d, _ := envelopesOf[*Declared](e); len(d) != 1 || d[0].Err != core.ErrTopicIsStream {
		t.Fatalf("queue declare on a stream: %+v", e.out)
	}
	e = h.deliver(SessionAddr(1), &Open{Token: 3, Topic: "ticks", Group: "g"})
	if o, _ := envelopesOf[*Opened](e); len(o) != 1 || o[0].Err != core.ErrTopicIsStream {
		t.Fatalf("implicit queue on a stream's topic: %+v", e.out)
	}
	// A dead-letter copy aimed at a stream is refused, never stored.
	e = h.deliver(PartitionAddr(qid("jobs", 0)), &DeadLetterOut{Offset: 1, Target: core.DLQTarget{Topic: "ticks"}, Body: &core.Body{}})
	if f, _ := envelopesOf[*DeadLetterFailed](e); len(f) != 1 || f[0].Err != core.ErrTopicIsStream {
		t.Fatalf("dead letter into a stream: %+v", e.out)
	}
	if len(h.n.state.queues) != 1 {
		t.Fatalf("queues: %v", h.n.state.queues)
	}
}

// openStreamOf sends an Open for SUBSCRIBE_STREAM and answers its load.
func (h *nodeHarness) openStreamOf(session SessionID, topic string, partition uint32) *Opened {
	h.t.Helper()
	e := h.deliver(SessionAddr(session), &Open{Token: 9, Topic: topic, Partition: partition, Stream: true})
	for _, l := range e.load {
		e.merge(h.step(&LoadDone{NowMs: h.now, Queue: l.Queue}))
	}
	opened, _ := envelopesOf[*Opened](e)
	if len(opened) != 1 {
		h.t.Fatalf("want one Opened, got %+v", e.out)
	}
	return opened[0]
}

func TestNodeOpenStream(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	// Undeclared: 404, and nothing is created.
	before := len(h.log)
	if o := h.openStreamOf(1, "ticks", 0); o.Err != core.ErrStreamNotDeclared || o.Err.Code() != 404 {
		t.Fatalf("undeclared: %+v", o)
	}
	if len(h.log) != before || len(h.n.state.queues) != 0 || len(h.n.state.streams) != 0 {
		t.Fatal("a SUBSCRIBE_STREAM open created something")
	}
	settings := streamSettings(2)
	settings.Tier = core.TierSpeculative
	h.declareStream("ticks", settings)
	e := h.deliver(SessionAddr(1), &Open{Token: 9, Topic: "ticks", Partition: 1, Stream: true})
	if len(e.load) != 1 {
		t.Fatalf("loads: %+v", e.load)
	}
	l := e.load[0]
	if l.Kind != KindStream || l.Queue != qid("ticks", 1) || l.Stream != settings || l.StreamConfig.Stream != l.Queue ||
		l.StreamConfig.Validate() != nil {
		t.Fatalf("load request: %+v", l)
	}
	// A publish's Open (no Stream flag) of the loading partition waits too.
	h.deliver(SessionAddr(2), &Open{Token: 10, Topic: "ticks", Partition: 1})
	e = h.step(&LoadDone{NowMs: h.now, Queue: l.Queue})
	o, to := envelopesOf[*Opened](e)
	if len(o) != 2 || to[0] != SessionAddr(1) || to[1] != SessionAddr(2) {
		t.Fatalf("opened: %+v", e.out)
	}
	for _, m := range o {
		if m.Err != nil || m.Kind != KindStream || m.Partitions != 2 {
			t.Fatalf("opened: %+v", m)
		}
	}
	if o := h.openStreamOf(1, "ticks", 2); o.Err != core.ErrStreamNotDeclared {
		t.Fatalf("out of range: %+v", o)
	}
	// Loaded: answered at once, with its kind.
	if o := h.openQueue(3, "ticks", 1); o.Err != nil || o.Kind != KindStream {
		t.Fatalf("loaded: %+v", o)
	}
	if o := h.openQueue(3, "jobs", 0); o.Err != nil || o.Kind != KindQueue {
		t.Fatalf("queue open: %+v", o)
	}
}

func TestNodeStreamOpenWaitsForItsRecord(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	h.autoPersist = false
	h.deliver(SessionAddr(1), &DeclareStream{Token: 5, Topic: "ticks", Settings: streamSettings(1)})
	e := h.deliver(SessionAddr(2), &Open{Token: 9, Topic: "ticks", Stream: true})
	if len(e.load) != 0 || len(e.out) != 0 {
		t.Fatalf("loaded before the stream's record is durable: %+v", e)
	}
	e = h.persist()
	if len(e.load) != 1 || e.load[0].Kind != KindStream {
		t.Fatalf("load once durable: %+v", e.load)
	}
}

func TestNodeStreamsSurviveRestartAndSnapshot(t *testing.T) {
	cfg := testNodeConfig()
	h := newNodeHarness(t, cfg)
	h.declareStream("ticks", streamSettings(2))
	h.openQueue(1, "jobs", 0)
	want := h.n.LogState()
	h.restart(7)
	if s := h.n.state.streams["ticks"]; s == nil || s.settings != streamSettings(2) {
		t.Fatalf("after replay: %+v", h.n.state.streams)
	}
	if h.n.state.queueTopics["jobs"] != 1 {
		t.Fatal("queue topics not rebuilt")
	}
	// Snapshot: the stream list round-trips.
	snap := appendSnapshot(nil, &h.n.state)
	back, err := decodeSnapshot(snap)
	if err != nil || !bytes.Equal(appendSnapshot(nil, &back), snap) || back.streams["ticks"] == nil {
		t.Fatalf("snapshot: %v", err)
	}
	_ = want
}

// TestStreamRecordsAreChecked: a log or snapshot that makes a topic a
// queue and a stream, or changes a stream's settings, does not load.
func TestStreamRecordsAreChecked(t *testing.T) {
	boot := &record{kind: recordBoot, boot: 1}
	queue := &record{kind: recordQueue, queue: &catalogEntry{key: queueKey{Topic: "x", Group: "g"}, partitions: 1}}
	stream := &record{kind: recordStream, stream: &streamEntry{topic: "x", settings: streamSettings(1)}}
	other := &record{kind: recordStream, stream: &streamEntry{topic: "y", settings: streamSettings(1)}}
	changed := &record{kind: recordStream, stream: &streamEntry{topic: "y", settings: streamSettings(2)}}
	logOf := func(rs ...*record) []Record {
		var out []Record
		for i, r := range rs {
			out = append(out, Record{Index: uint64(i + 1), Data: appendRecord(nil, r)})
		}
		return out
	}
	for name, log := range map[string][]Record{
		"stream after queue": logOf(boot, queue, stream),
		"queue after stream": logOf(boot, other, &record{kind: recordQueue, queue: &catalogEntry{key: queueKey{Topic: "y"}, partitions: 1}}),
		"settings changed":   logOf(boot, other, changed),
	} {
		if _, err := NewNode(testNodeConfig(), nil, log, entropyOf(1)); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// Bad stream records are refused by the decoder.
	for name, r := range map[string]*record{
		"bad topic":     {kind: recordStream, stream: &streamEntry{topic: "Bad", settings: streamSettings(1)}},
		"no partitions": {kind: recordStream, stream: &streamEntry{topic: "x", settings: core.StreamSettings{Tier: 2}}},
		"bad tier":      {kind: recordStream, stream: &streamEntry{topic: "x", settings: core.StreamSettings{Tier: 3, PartitionCount: 1}}},
	} {
		if _, err := decodeRecord(appendRecord(nil, r)); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// A snapshot listing a topic as both is refused.
	s := newDurableState()
	s.apply(1, boot)
	s.apply(2, queue)
	snap := appendSnapshot(nil, &s)
	count := len(snap) - 4
	snap = append(snap[:count], 0, 0, 0, 1)
	snap = appendStreamEntry(snap, stream.stream)
	if _, err := decodeSnapshot(snap); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("snapshot with a topic both: %v", err)
	}
}

// TestSnapshotVersion2StaysReadable: a snapshot from before streams (no
// stream list) decodes with none.
func TestSnapshotVersion2StaysReadable(t *testing.T) {
	s := newDurableState()
	for i, r := range sampleRecords()[:4] {
		s.apply(uint64(i+1), r)
	}
	v3 := appendSnapshot(nil, &s)
	v2 := append([]byte(nil), v3[:len(v3)-4-emptyRuntimeSnapshotBytes]...)
	v2[4] = snapshotVersionV2
	back, err := decodeSnapshot(v2)
	if err != nil || len(back.streams) != 0 || !bytes.Equal(appendSnapshot(nil, &back), v3) {
		t.Fatalf("version 2 snapshot: %v", err)
	}
	// And an older log (kinds 1-5 only) still loads.
	var log []Record
	for i, r := range sampleRecords()[:6] {
		log = append(log, Record{Index: uint64(i + 1), Data: appendRecord(nil, r)})
	}
	if _, err := NewNode(testNodeConfig(), nil, log, entropyOf(1)); err != nil {
		t.Fatal(err)
	}
}
