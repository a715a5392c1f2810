package storage

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// partitionDriver drives a live core partition the way the broker's runner
// does, persisting every Ready.Persist through a storage function that
// returns the index now durable.
type partitionDriver struct {
	t       testing.TB
	p       *core.Partition
	nowMs   int64
	persist func(entries []core.Entry) (durableIndex uint64)
	tags    []uint64 // delivered, unsettled
	dead    []core.DeadLetter
}

func (d *partitionDriver) step(in core.Input) {
	d.t.Helper()
	rd := d.p.Step(in)
	for {
		d.collect(rd)
		if len(rd.Persist) == 0 && d.p.DurableIndex() == d.p.LastIndex() {
			return
		}
		durable := d.persist(rd.Persist)
		rd = d.p.Step(&core.Persisted{NowMs: d.nowMs, UpToIndex: durable})
	}
}

func (d *partitionDriver) collect(rd *core.Ready) {
	for _, delivery := range rd.Deliveries {
		d.tags = append(d.tags, delivery.Tag)
	}
	d.dead = append(d.dead, rd.DeadLetters...)
}

func (d *partitionDriver) takeTags(n int) []uint64 {
	n = min(n, len(d.tags))
	out := append([]uint64(nil), d.tags[:n]...)
	d.tags = d.tags[n:]
	return out
}

// workload runs publishes (TTL, delayed, headers), a subscription, acks,
// nacks with and without requeue, dead-letter completions, lease expiry and
// a declare, calling midway between its two halves.
func (d *partitionDriver) workload(midway func()) {
	maxRetries, ttl := uint32(2), int64(600_000)
	d.step(&core.Declare{NowMs: d.nowMs, MaxRetries: &maxRetries, DefaultTTLMs: &ttl,
		DLQ: &core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "orders-dlq"}}})
	d.step(&core.SetGlobalDLQ{NowMs: d.nowMs, Target: &core.DLQTarget{Topic: "global-dlq"}})
	for half := range 2 {
		for i := range 60 {
			payload := []byte(fmt.Sprintf("message %d-%d", half, i))
			if i%3 == 0 { // large enough for a blob file, the rest inline
				payload = append(payload, bytes.Repeat([]byte{'x'}, 400)...)
			}
			body := &core.Body{Payload: payload,
				Headers: []core.Header{{Key: "n", Value: fmt.Sprint(i)}}, ContentType: core.ContentType{Kind: core.ContentText}}
			pub := &core.Publish{NowMs: d.nowMs, Confirm: true, Body: body}
			switch i % 5 {
			case 1:
				pub.HasTTL, pub.TTLMs = true, 5_000
			case 2:
				pub.NotBeforeMs = d.nowMs + 20_000
			}
			d.step(pub)
		}
		if half == 0 {
			d.step(&core.Subscribe{NowMs: d.nowMs, SubID: 1, Prefetch: 16})
		}
		for range 3 {
			d.step(&core.Ack{NowMs: d.nowMs, SubID: 1, Tags: d.takeTags(6)})
			d.step(&core.Nack{NowMs: d.nowMs, SubID: 1, Tags: d.takeTags(2), Requeue: true})
			d.step(&core.Nack{NowMs: d.nowMs, SubID: 1, Tags: d.takeTags(1)})
			d.nowMs += 10_000
			d.step(&core.Tick{NowMs: d.nowMs})
		}
		for _, dl := range d.dead[:len(d.dead)/2] {
			d.step(&core.DeadLetterDone{NowMs: d.nowMs, Offset: dl.Offset})
		}
		d.dead = d.dead[len(d.dead)/2:]
		d.nowMs += 31_000 // past the lease: unsettled deliveries expire
		d.step(&core.Tick{NowMs: d.nowMs})
		if half == 0 {
			midway()
		}
	}
}

func newDriver(t testing.TB) (*partitionDriver, core.Config) {
	cfg := core.DefaultConfig(core.QueueID{Topic: "orders"})
	p, err := core.NewPartition(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &partitionDriver{t: t, p: p, nowMs: 1_700_000_000_000}, cfg
}

// checkRecovery reopens dir, recovers a partition from what the log gives
// back, and compares its snapshot with the live one byte for byte.
func checkRecovery(t *testing.T, dir string, cfg core.Config, live *core.Partition, wantSnapshotIndex uint64) {
	t.Helper()
	want := live.Snapshot()
	l, rec := openLog(t, dir, DefaultOptions())
	defer l.Close()
	if rec.SnapshotIndex != wantSnapshotIndex || l.LastIndex() != live.LastIndex() {
		t.Fatalf("snapshot at %d (want %d), last index %d (live %d)", rec.SnapshotIndex, wantSnapshotIndex, l.LastIndex(), live.LastIndex())
	}
	p, err := core.Recover(cfg, rec.Snapshot, rec.Entries)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Snapshot(); !bytes.Equal(got, want) {
		t.Fatalf("recovered state differs from the live one (%d vs %d bytes)", len(got), len(want))
	}
	if live.Live() == 0 || live.Stats().Acked == 0 || live.Stats().DeadLettered == 0 || live.Stats().LeaseExpired == 0 {
		t.Fatalf("the workload should leave live messages and exercise every path: %d live, %+v", live.Live(), live.Stats())
	}
	t.Logf("recovered %d entries after a snapshot at %d: %d live messages, stats %+v", len(rec.Entries), rec.SnapshotIndex, p.Live(), live.Stats())
}

func TestRecoveredStateEqualsLive(t *testing.T) {
	for _, withSnapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", withSnapshot), func(t *testing.T) {
			dir := t.TempDir()
			l, _ := openLog(t, dir, DefaultOptions())
			d, cfg := newDriver(t)
			d.persist = func(entries []core.Entry) uint64 {
				appendSync(t, l, entries)
				return l.SyncedIndex()
			}
			var snapshotIndex uint64
			d.workload(func() {
				if withSnapshot {
					snapshotIndex = d.p.LastIndex()
					if err := l.SaveSnapshot(snapshotIndex, d.p.Snapshot(), 0); err != nil {
						t.Fatal(err)
					}
				}
			})
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			checkRecovery(t, dir, cfg, d.p, snapshotIndex)
		})
	}
}

// TestRecoveredStateEqualsLiveThroughCommitter: the same through group
// commit, durability coming back from onDurable as the runner gets it.
func TestRecoveredStateEqualsLiveThroughCommitter(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, DefaultOptions())
	durable := make(chan uint64, 1024)
	c := newPlanCommitter(l, func(upTo uint64, _ []StoredPayload, err error) {
		if err != nil {
			t.Error(err)
		}
		durable <- upTo
	})
	d, cfg := newDriver(t)
	reported := uint64(0)
	d.persist = func(entries []core.Entry) uint64 {
		if err := c.Submit(entries); err != nil {
			t.Fatal(err)
		}
		for reported < d.p.LastIndex() {
			reported = <-durable
		}
		return reported
	}
	var snapshotIndex uint64
	d.workload(func() {
		snapshotIndex = d.p.LastIndex()
		if err := c.SaveSnapshot(snapshotIndex, d.p.Snapshot(), 0); err != nil {
			t.Fatal(err)
		}
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	checkRecovery(t, dir, cfg, d.p, snapshotIndex)
}
