package logstore

import (
	"sync"
	"testing"
)

// TestSnapshotUnderLoad: a snapshot requested at an index that is
// submitted but far from durable (the writer is busy, rounds are small) is
// accepted at once, and written only after every entry up to it was
// reported durable, in order with the rounds; entries submitted after the
// request keep flowing, and recovery starts from it.
func TestSnapshotUnderLoad(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	opts.BatchEntriesMax = 8 // the snapshot's index is several rounds away
	l, _ := openLog(t, dir, opts)
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var c *Committer
	type report struct{ upTo, snapshots uint64 }
	var reports []report
	c = NewCommitter(l, func(upTo uint64, _ []StoredPayload, err error) {
		if err != nil {
			t.Error(err)
			return
		}
		once.Do(func() { <-release })
		mu.Lock()
		reports = append(reports, report{upTo, c.Stats().Snapshots})
		mu.Unlock()
	})
	must(t, c.Submit(publishEntries(1, 1, 300)))
	eventually(t, 5000, 1, func() bool { return c.Stats().Rounds == 1 }) // the writer is stuck in its report
	must(t, c.Submit(publishEntries(2, 99, 300)))
	const snapshotIndex = 80
	if err := c.SaveSnapshot(snapshotIndex, []byte("state at 80"), 0, nil); err != nil {
		t.Fatalf("a snapshot ahead of the durable index was refused: %v", err)
	}
	if err := c.SaveSnapshot(200, []byte("not submitted"), 0, nil); err == nil {
		t.Fatal("a snapshot beyond the submitted index was accepted")
	}
	must(t, c.Submit(publishEntries(101, 50, 300)))
	close(release)
	must(t, c.Close())
	if s := c.Stats(); s.Snapshots != 1 || s.Entries != 150 {
		t.Fatalf("stats %+v", s)
	}
	for _, r := range reports {
		if r.upTo < snapshotIndex && r.snapshots != 0 {
			t.Fatalf("the snapshot at %d was written before %d was durable (reports %v)", snapshotIndex, r.upTo, reports)
		}
	}
	must(t, l.Close())
	l, rec := openLog(t, dir, opts)
	defer l.Close()
	if rec.SnapshotIndex != snapshotIndex || string(rec.Snapshot) != "state at 80" || l.FirstIndex() != snapshotIndex+1 {
		t.Fatalf("recovered snapshot %q at %d, first index %d", rec.Snapshot, rec.SnapshotIndex, l.FirstIndex())
	}
	sameEntries(t, rec.Entries, append(publishEntries(81, 20, 300), publishEntries(101, 50, 300)...))
}
