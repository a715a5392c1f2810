package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/logstore"
	"github.com/fibril-go/fibril/transport/wire"
)

// Stream partitions under load through the broker: retention and its
// truncation, the tiers, subscribers that lag (window, backfill from the
// log).

const speculativeHeader = "fibril.speculative"

func earliest(topic string) wire.SubscribeStream {
	return wire.SubscribeStream{Topic: topic, Start: wire.StreamStart{Kind: wire.StreamStartEarliest}, Prefetch: 100}
}

// TestStreamRetentionDropsOldRecords: max_records drops whole segments once
// they are past it; an earliest subscriber starts past the dropped ones; the
// truncation is a snapshot of the log, and a restart keeps its bound.
func TestStreamRetentionDropsOldRecords(t *testing.T) {
	const n, keep, segment = 200, 50, 10
	dir := t.TempDir()
	small := func(c *Config) { c.StreamPartition.SegmentRecordsMax = segment }
	b, addr := testBroker(t, dir, small)
	p := connect(t, addr)
	p.declareStream(wire.DeclarePlexus{Topic: "metrics", Durability: wire.DurabilityDurable, RetentionRecordsMax: wire.Some[uint64](keep)})
	p.publishMany("metrics", 0, n, record)

	// Retention runs once records are durable and its snapshot is written,
	// a truncation at a time, after the confirms: probe (one connection
	// each) until it reached the bound.
	var s *peer
	var sub uint64
	var first *wire.Deliver
	for deadline := time.Now().Add(10 * time.Second); ; {
		s = connect(t, addr)
		sub = s.mustSubscribeStream(earliest("metrics"))
		if first = s.deliver(); first.Offset >= n-keep-segment || time.Now().After(deadline) {
			break
		}
		s.c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	if first.Offset == 0 || first.Offset > n-keep || first.Offset < n-keep-segment {
		t.Fatalf("an earliest subscriber after %d publishes kept to %d starts at %d", n, keep, first.Offset)
	}
	checkPayloads(t, s.streamDeliveries(sub, first.Offset+1, int(n-1-first.Offset)))

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The truncation reached the log: a snapshot covers the dropped records.
	l, rec, err := logstore.Open(partitionDir(dir, node.KindStream, core.QueueID{Topic: "metrics"}), logstore.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Snapshot == nil || rec.SnapshotIndex == 0 || len(rec.Entries) > keep+2*segment {
		t.Fatalf("log after retention: snapshot at %d, %d entries after it", rec.SnapshotIndex, len(rec.Entries))
	}
	l.Close()

	_, addr = testBroker(t, dir, small)
	s = connect(t, addr)
	sub = s.mustSubscribeStream(earliest("metrics"))
	again := s.deliver()
	if again.Offset < first.Offset {
		t.Fatalf("after a restart an earliest subscriber starts at %d, before %d", again.Offset, first.Offset)
	}
	checkPayloads(t, s.streamDeliveries(sub, again.Offset+1, int(n-1-again.Offset)))
}

// TestStreamTiers: a speculative stream hands records out before they are
// durable, flagged; a durable one never flags; an ephemeral one confirms
// and delivers without waiting for storage.
func TestStreamTiers(t *testing.T) {
	const n = 50
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	tiers := []struct {
		topic string
		tier  wire.Durability
	}{{"spec", wire.DurabilitySpeculative}, {"dur", wire.DurabilityDurable}, {"eph", wire.DurabilityEphemeral}}
	for _, tr := range tiers {
		p.declareStream(wire.DeclarePlexus{Topic: tr.topic, Durability: tr.tier})
		s := connect(t, addr)
		sub := s.mustSubscribeStream(wire.SubscribeStream{Topic: tr.topic, Prefetch: 100})
		p.publishMany(tr.topic, 0, n, record)
		ds := s.streamDeliveries(sub, 0, n)
		checkPayloads(t, ds)
		flagged := 0
		for _, d := range ds {
			if v, ok := d.Headers.Get(speculativeHeader); ok {
				if v != "1" {
					t.Fatalf("%s: %s: %q", tr.topic, speculativeHeader, v)
				}
				flagged++
			}
		}
		switch {
		case tr.tier == wire.DurabilitySpeculative && flagged == 0:
			t.Fatalf("no record of a speculative stream was handed out before it was durable")
		case tr.tier != wire.DurabilitySpeculative && flagged != 0:
			t.Fatalf("%s: %d records flagged speculative", tr.topic, flagged)
		}
		t.Logf("%s: %d of %d flagged speculative", tr.topic, flagged, n)
	}
}

// TestStreamSlowSubscriberDoesNotStallAnother: a subscriber that does not
// read stops at its window (its outbox past half, no credit) while another
// gets every record; once it reads, it gets them all too, from the log.
func TestStreamSlowSubscriberDoesNotStallAnother(t *testing.T) {
	const n = 2000
	payload := strings.Repeat("x", 8<<10)
	b, addr := testBroker(t, "", func(c *Config) {
		c.HeartbeatInterval = 20 * time.Second
		c.FramePayloadBytesMax = 1 << 20
		c.OutboxBytesMax = 1 << 20
		c.StreamPartition.SubWindowMax = 16
		c.StreamPartition.TailBytesMax = 256 << 10
	})
	p := connect(t, addr)
	p.declareStream(wire.DeclarePlexus{Topic: "feed", Durability: wire.DurabilityDurable})
	slow, fast := connect(t, addr), connect(t, addr)
	slowSub := slow.mustSubscribeStream(wire.SubscribeStream{Topic: "feed", Prefetch: 16})
	fastSub := fast.mustSubscribeStream(wire.SubscribeStream{Topic: "feed", Prefetch: 16})
	done := make(chan struct{})
	go func() {
		// The publisher's own replies must be read while the fast one reads.
		defer close(done)
		p.publishMany("feed", 0, n, func(int) *wire.Publish { return &wire.Publish{Payload: []byte(payload)} })
	}()
	for i := range n {
		d := fast.deliver()
		if d.SubID != fastSub || d.Offset != uint64(i) || len(d.Payload) != len(payload) {
			t.Fatalf("fast delivery %d: sub %d offset %d, %d bytes", i, d.SubID, d.Offset, len(d.Payload))
		}
	}
	<-done
	for i := range n {
		d := slow.deliver()
		if d.SubID != slowSub || d.Offset != uint64(i) {
			t.Fatalf("slow delivery %d: sub %d offset %d", i, d.SubID, d.Offset)
		}
	}
	if b.metrics.streamEntriesRead.Load() == 0 {
		t.Fatal("the slow subscriber was served without reading the log back")
	}
}

// TestStreamBackfillFromLog: 5,000 records, far more than the tail ring
// holds, reach an earliest subscriber in order, read back from the log.
func TestStreamBackfillFromLog(t *testing.T) {
	const n = 5000
	b, addr := testBroker(t, "", func(c *Config) { c.StreamPartition.TailBytesMax = 16 << 10 })
	p := connect(t, addr)
	p.declareStream(wire.DeclarePlexus{Topic: "history", Durability: wire.DurabilityDurable})
	p.publishMany("history", 0, n, record)
	s := connect(t, addr)
	sub := s.mustSubscribeStream(earliest("history"))
	checkPayloads(t, s.streamDeliveries(sub, 0, n))
	if read := b.metrics.streamEntriesRead.Load(); read < n*9/10 {
		t.Fatalf("%d of %d records read back from the log", read, n)
	}
}

// TestStreamReadFailures: an index retention dropped meanwhile goes back to
// the core as a failed read (it retries, its clamp moves on); a damaged log
// stops the broker and the runner.
func TestStreamReadFailures(t *testing.T) {
	b, _ := testBroker(t, "", nil)
	r := &hostRunner{b: b, id: core.QueueID{Topic: "s"}, notify: make(chan struct{}, 1), stop: make(chan struct{})}
	r.readDone(7, nil, &logstore.CompactedError{Index: 3, FirstIndex: 10})
	if len(r.queue) != 1 {
		t.Fatalf("a compacted read left %d inputs", len(r.queue))
	}
	done, ok := r.queue[0].in.(*node.StreamReadDone)
	if !ok || done.Token != 7 || done.Err == nil || len(done.Entries) != 0 {
		t.Fatalf("a compacted read answered with %#v", r.queue[0].in)
	}
	select {
	case <-b.Failed():
		t.Fatal("a compacted read stopped the broker")
	default:
	}
	r.readDone(8, nil, logstore.ErrCorrupt)
	select {
	case <-b.Failed():
	default:
		t.Fatal("a corrupt read left the broker running")
	}
	if !r.halted || len(r.queue) != 1 {
		t.Fatalf("after a corrupt read: halted %v, %d inputs", r.halted, len(r.queue))
	}
}
