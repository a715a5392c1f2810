package broker

import (
	"slices"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// QueueReadyCounts sums observed partitions by queue, sorted, and leaves
// out partitions not observed yet (no made-up zeros).
func TestQueueReadyCountsSumsObservedPartitionsByQueue(t *testing.T) {
	runner := func(set bool, ready, consumers int64) *hostRunner {
		r := &hostRunner{notify: make(chan struct{}, 1)}
		r.obs.set.Store(set)
		r.obs.ready.Store(ready)
		r.obs.consumers.Store(consumers)
		return r
	}
	b := &Broker{hosts: map[core.QueueID]*hostRunner{
		{Topic: "jobs", Partition: 0}:              runner(true, 10, 1),
		{Topic: "jobs", Partition: 1}:              runner(true, 5, 2),
		{Topic: "jobs", Partition: 2}:              runner(false, 99, 9), // not observed yet
		{Topic: "jobs", Group: "eu", Partition: 0}: runner(true, 7, 0),
		{Topic: "alpha", Partition: 0}:             runner(true, 0, 0),
	}}
	got := b.QueueReadyCounts()
	want := []QueueReady{{Topic: "alpha"}, {Topic: "jobs", Ready: 15, Consumers: 3}, {Topic: "jobs", Group: "eu", Ready: 7}}
	if !slices.Equal(got, want) {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	if !b.rates.wanted.Load() {
		t.Fatal("the first count did not switch observations on")
	}
}
