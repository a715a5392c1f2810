package broker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// TestLoadRingKeepsTheNewestNewestFirst: the recovery ring holds the last
// loadRingMax loads, newest first, counts every load, copies the cut (the
// caller's may change) and clips long reasons.
func TestLoadRingKeepsTheNewestNewestFirst(t *testing.T) {
	b := &Broker{}
	if d := b.Diagnostics(); len(d.Loads) != 0 || d.LoadsTotal != 0 {
		t.Fatalf("empty: %+v", d)
	}
	started := time.Now()
	for i := range loadRingMax + 6 {
		req := node.LoadRequest{Queue: core.QueueID{Topic: "q", Partition: uint32(i)}}
		b.observeLoad(req, started, recoveryOutcome{replay: loadReplay{entries: i}}, nil)
	}
	cut := &node.LoadCut{Index: 9, DroppedRecords: 2}
	b.observeLoad(node.LoadRequest{Queue: core.QueueID{Topic: "bad"}, Truncate: true},
		started, recoveryOutcome{cut: cut, damage: &node.LoadDamage{Kind: "checksum", Reason: strings.Repeat("x", 2000)}},
		errors.New("boom"))
	cut.DroppedRecords = 99
	d := b.Diagnostics()
	if d.LoadsTotal != loadRingMax+7 || len(d.Loads) != loadRingMax {
		t.Fatalf("total %d kept %d", d.LoadsTotal, len(d.Loads))
	}
	first := d.Loads[0]
	if first.Queue.Topic != "bad" || !first.Repair || first.Cut == nil || first.Cut.DroppedRecords != 2 ||
		first.DamageKind != "checksum" || len(first.DamageReason) > diagReasonBytesMax+len("…") || first.Err != "boom" {
		t.Fatalf("newest %+v", first)
	}
	for i, l := range d.Loads[1:] {
		if want := uint32(loadRingMax + 5 - i); l.Queue.Partition != want || l.Entries != int(want) {
			t.Fatalf("load %d is partition %d, want %d", i+1, l.Queue.Partition, want)
		}
	}
}
