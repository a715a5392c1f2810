package storage

import (
	"testing"

	"github.com/fibril-go/fibril/core"
)

// The planner alone: time is a value, so every rule is checked exactly.

func ackEntries(first uint64, count int) []core.Entry {
	out := make([]core.Entry, count)
	for i := range out {
		out[i] = core.Entry{Epoch: 1, Index: first + uint64(i), Kind: core.EntryAck}
	}
	return out
}

func TestPlannerDefersSettlesForAPublish(t *testing.T) {
	opts := DefaultOptions()
	p := NewPlanner(opts, 0, 0)
	wait := int64(opts.DeferrableWaitMax)
	if !p.Submit(ackEntries(1, 5), 1000) {
		t.Fatal("a queue starting to wait must wake the writer (its deferral clock starts)")
	}
	if due, waitNs := p.RoundDue(1000+wait/2, false); due || waitNs != wait-wait/2 {
		t.Fatalf("settles alone: due %v, wait %d", due, waitNs)
	}
	if due, _ := p.RoundDue(1000+wait, false); !due {
		t.Fatal("settles waited past DeferrableWaitMax")
	}
	if !p.Submit(publishEntries(6, 1, 10), 1001) {
		t.Fatal("a publish must wake the writer")
	}
	if due, _ := p.RoundDue(1001, false); !due {
		t.Fatal("a publish does not wait")
	}
	round, snapshot := p.TakeRound(nil, 1001, 0)
	if len(round) != 6 || snapshot != nil || !p.Idle() {
		t.Fatalf("round of %d, idle %v: the settles share the publish's round", len(round), p.Idle())
	}
	p.Submit(ackEntries(7, opts.DeferrableEntriesMax), 2000)
	if due, _ := p.RoundDue(2000, false); !due {
		t.Fatal("DeferrableEntriesMax settles do not wait")
	}
	if due, _ := NewPlanner(opts, 0, 0).RoundDue(0, true); due {
		t.Fatal("an idle planner has no round, closing or not")
	}
}

func TestPlannerRoundsAreBounded(t *testing.T) {
	opts := DefaultOptions()
	opts.BatchEntriesMax, opts.BatchBytesMax = 10, 5000
	p := NewPlanner(opts, 0, 0)
	p.Submit(publishEntries(1, 25, 10), 0)
	p.Submit(publishEntries(26, 5, 4000), 0)
	var sizes []int
	last := uint64(0)
	for !p.Idle() {
		round, _ := p.TakeRound(nil, 0, last)
		sizes = append(sizes, len(round))
		last += uint64(len(round))
	}
	// The third round takes the last 5 small ones and the first large one;
	// then one large one per round, by the byte bound.
	want := []int{10, 10, 6, 1, 1, 1, 1}
	if len(sizes) != len(want) {
		t.Fatalf("rounds %v, want %v", sizes, want)
	}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("rounds %v, want %v", sizes, want)
		}
	}
	opts.PendingEntriesMax = 8
	p = NewPlanner(opts, 0, 0)
	if !p.HasRoom(100) {
		t.Fatal("an empty queue takes any one Submit")
	}
	p.Submit(ackEntries(1, 5), 0)
	if p.HasRoom(4) || !p.HasRoom(3) {
		t.Fatal("PendingEntriesMax is the backpressure bound")
	}
}

// TestPlannerSnapshotWaitsForItsRound: a snapshot ahead of what is written
// is accepted, and handed out with the first round that reaches it.
func TestPlannerSnapshotWaitsForItsRound(t *testing.T) {
	opts := DefaultOptions()
	opts.BatchEntriesMax = 4
	p := NewPlanner(opts, 0, 0)
	p.Submit(publishEntries(1, 10, 10), 0)
	if err := p.RequestSnapshot(SnapshotRequest{Index: 11}); err == nil {
		t.Fatal("a snapshot beyond the submitted index was accepted")
	}
	if err := p.RequestSnapshot(SnapshotRequest{Index: 9, Data: []byte("s")}); err != nil {
		t.Fatal(err)
	}
	last := uint64(0)
	for round := 1; !p.Idle(); round++ {
		entries, snapshot := p.TakeRound(nil, 0, last)
		last += uint64(len(entries))
		if (snapshot != nil) != (round == 3) {
			t.Fatalf("round %d (up to %d): snapshot %v", round, last, snapshot)
		}
	}
	if err := p.RequestSnapshot(SnapshotRequest{Index: 9}); err == nil {
		t.Fatal("a snapshot not after the last one was accepted")
	}
}
