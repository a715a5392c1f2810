package storage

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
)

// measureEnv turns on measurements too slow for every test run.
const measureEnv = "FIBRIL_LOGSTORE_MEASURE"

// TestDiskBytesAfterMillionMessages measures (it does not assert a figure)
// the disk a partition's log takes after 1,000,000 published and acked
// 1 KiB messages, with the ShouldSnapshot policy: a live core partition is
// driven as the runner drives it, every Ready.Persist goes through the Log.
// Run with FIBRIL_LOGSTORE_MEASURE=1 (about 20-60 s).
func TestDiskBytesAfterMillionMessages(t *testing.T) {
	if os.Getenv(measureEnv) == "" {
		t.Skipf("set %s=1 to run", measureEnv)
	}
	for _, backlog := range []int{0, 200_000} {
		t.Run("backlog="+itoa(backlog), func(t *testing.T) { measureDisk(t, 1_000_000, backlog) })
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// measureDisk publishes messages 1 KiB messages in rounds; a consumer
// (prefetch 1000) acks every delivery, after backlog messages wait first.
func measureDisk(t *testing.T, messages, backlog int) {
	const (
		roundPublishes = 1000
		payloadBytes   = 1024
	)
	dir := t.TempDir()
	l, _ := openLog(t, dir, DefaultOptions())
	cfg := core.DefaultConfig(core.QueueID{Topic: "measure"})
	p, err := core.NewPartition(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1_700_000_000_000)
	var pending []core.Entry
	var tags, ackTags []uint64
	collect := func(rd *core.Ready) {
		pending = append(pending, rd.Persist...)
		for _, d := range rd.Deliveries {
			tags = append(tags, d.Tag)
		}
	}
	persist := func() {
		for len(pending) > 0 {
			if err := l.Append(pending); err != nil {
				t.Fatal(err)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			clear(pending)
			pending = pending[:0]
			collect(p.Step(&core.Persisted{NowMs: now, UpToIndex: l.SyncedIndex()}))
		}
	}
	payload := make([]byte, payloadBytes)
	var entriesSinceSnapshot, snapshots int
	var peakBytes, snapshotBytesMax int64
	var snapshotTime time.Duration
	lastIndexAtSnapshot := uint64(0)
	start := time.Now()
	subscribed := false
	for published := 0; published < messages || p.Live() > 0; {
		for i := 0; i < roundPublishes && published < messages; i++ {
			collect(p.Step(&core.Publish{NowMs: now, Body: &core.Body{Payload: payload}}))
			published++
		}
		if !subscribed && published >= backlog {
			collect(p.Step(&core.Subscribe{NowMs: now, SubID: 1, Prefetch: 1000}))
			subscribed = true
		}
		persist()
		if len(tags) > 0 {
			// The ack's step may deliver more: collect them into tags anew.
			ackTags = append(ackTags[:0], tags...)
			tags = tags[:0]
			collect(p.Step(&core.Ack{NowMs: now, SubID: 1, Tags: ackTags}))
			persist()
		}
		entriesSinceSnapshot = int(l.LastIndex() - lastIndexAtSnapshot)
		if ShouldSnapshot(entriesSinceSnapshot, p.Live()) {
			peakBytes = max(peakBytes, sizeBytes(t, l))
			snap := p.Snapshot()
			began := time.Now()
			if err := l.SaveSnapshot(p.LastIndex(), snap, 0); err != nil {
				t.Fatal(err)
			}
			snapshotTime += time.Since(began)
			snapshots++
			snapshotBytesMax = max(snapshotBytesMax, int64(len(snap)))
			lastIndexAtSnapshot = p.LastIndex()
		}
		now++
		collect(p.Step(&core.Tick{NowMs: now}))
	}
	elapsed := time.Since(start)
	finalBytes := sizeBytes(t, l)
	peakBytes = max(peakBytes, finalBytes)
	stats := l.Stats()
	if p.Stats().Acked != uint64(messages) {
		t.Fatalf("acked %d of %d", p.Stats().Acked, messages)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rec := openLog(t, dir, DefaultOptions())
	recoverStart := time.Now()
	if _, err := core.Recover(cfg, rec.Snapshot, rec.Entries); err != nil {
		t.Fatal(err)
	}
	recoverTime := time.Since(recoverStart)
	l.Close()
	t.Logf("%d messages published and acked (backlog %d first), %d entries, %s (%.0f entries/s)",
		messages, backlog, stats.Entries, elapsed.Round(time.Millisecond), float64(stats.Entries)/elapsed.Seconds())
	t.Logf("disk: %.1f MiB at the end, %.1f MiB at the peak (just before a snapshot); %d snapshots (largest %.1f MiB, %s in total), %d segment rolls",
		mib(finalBytes), mib(peakBytes), snapshots, mib(snapshotBytesMax), snapshotTime.Round(time.Millisecond), stats.SegmentRolls)
	t.Logf("reopen: %d entries after the snapshot at %d; core.Recover took %s", len(rec.Entries), rec.SnapshotIndex, recoverTime.Round(time.Millisecond))
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
