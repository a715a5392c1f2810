package node

import (
	"fmt"
	"slices"

	"github.com/fibril-go/fibril/core"
)

// The operator's view of idle eviction (GET /admin/api/queues_debug). An
// observation only: it changes nothing. Invariants:
//   - one row per catalogue partition in (topic, group, partition) order,
//     at most idleDebugRowsMax;
//   - an unloaded partition's row comes from the bounded eviction ring, so
//     asking costs no per-queue state.

// onQueuesDebug answers an operator's QueuesDebugRequest.
func (n *Node) onQueuesDebug(from Address) {
	assertHold(from.Kind == AddrAdmin, "operators ask for the queues debug view")
	keys := make([]queueKey, 0, len(n.state.queues))
	for k := range n.state.queues {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b queueKey) int {
		return compareQueueIDs(core.QueueID{Topic: a.Topic, Group: a.Group}, core.QueueID{Topic: b.Topic, Group: b.Group})
	})
	out := &QueuesDebug{Cleanup: n.cfg.IdleCleanup, Counters: n.idle.counters,
		PartitionsDeclared: n.state.partitionsTotal, PartitionsMax: n.cfg.PartitionsMax}
	// Not asserted within the budget: a catalogue recovered under a larger
	// budget keeps its partitions (overPartitionBudget checks new ones only).
	assertHold(out.PartitionsDeclared >= 0, "the partition total never goes negative")
	for _, k := range keys {
		entry := n.state.queues[k]
		for p := uint32(0); p < entry.partitions; p++ {
			if len(out.Rows) >= idleDebugRowsMax {
				out.Truncated = true
				n.send(from, out)
				return
			}
			out.Rows = append(out.Rows, n.debugRow(core.QueueID{Topic: k.Topic, Group: k.Group, Partition: p}))
		}
	}
	assertHold(len(out.Rows) <= idleDebugRowsMax, "the listing is bounded")
	n.send(from, out)
}

// debugRow is one partition's row.
func (n *Node) debugRow(id core.QueueID) QueueDebugRow {
	row := QueueDebugRow{Queue: id}
	pe := n.partitions[id]
	switch {
	case pe == nil:
		row.State = "unloaded"
		if e := n.state.queues[queueKey{Topic: id.Topic, Group: id.Group}]; e != nil && len(e.evicted) > 0 &&
			e.evicted[id.Partition/64]&(1<<(id.Partition%64)) != 0 {
			row.LastCleanup = "evicted"
		}
		if at, ok := n.idle.recent[id]; ok {
			row.IdleMs = n.nowMs - at
		}
		return row
	case pe.idle == idleUnloading:
		row.State = "unloading"
	case pe.loaded || pe.idle == idleChecking:
		row.State = "loaded"
	default:
		row.State = "loading"
	}
	row.Subscribers, row.IdleMs, row.LastCleanup = pe.subscribers, pe.idleMs, pe.lastCleanup
	for _, c := range pe.publishers {
		row.Publishers += int(c)
	}
	return row
}

// onUnloadCheckBounced: the Host is gone (its storage failed): the check
// is over, and the partition is treated as loaded as before (requests to
// it bounce, as they would have).
func (n *Node) onUnloadCheckBounced(id core.QueueID, msg *UnloadCheck) {
	pe := n.partitions[id]
	if pe == nil || pe.idle != idleChecking || pe.checkSeq != msg.Seq {
		return
	}
	n.idle.checksOut--
	assertHold(n.idle.checksOut >= 0, "each check is answered once")
	pe.idle, pe.checkSeq = idleNone, 0
	n.resumeAfterCheck(id, pe)
}

// checkIdle: the eviction bookkeeping agrees with the partition table.
// Checks in flight are counted exactly and bounded; a partition in an
// eviction is not loaded and has no settings held; only loaded queue
// partitions (or ones in an eviction) have publishers; the ring and the
// deadlines name only partitions without an entry or loading for them.
func (n *Node) checkIdle() error {
	checking := 0
	for id, pe := range n.partitions {
		switch {
		case pe.idle == idleChecking && (pe.checkSeq == 0 || pe.loaded):
			return fmt.Errorf("partition %v checked (seq %d) while loaded %v", id, pe.checkSeq, pe.loaded)
		case pe.idle == idleUnloading && (pe.loaded || pe.checkSeq != 0):
			return fmt.Errorf("partition %v unloading while loaded %v or checked", id, pe.loaded)
		case pe.idle != idleNone && len(pe.held) > 0:
			return fmt.Errorf("partition %v in an eviction holds %d opens for settings", id, len(pe.held))
		case len(pe.publishers) > 0 && (pe.stream || (!pe.loaded && pe.idle == idleNone)):
			return fmt.Errorf("partition %v has publishers while not a loaded queue partition", id)
		}
		if pe.idle == idleChecking {
			checking++
		}
	}
	if checking != n.idle.checksOut || checking > idleChecksInflightMax {
		return fmt.Errorf("%d checks in flight, counted %d (limit %d)", checking, n.idle.checksOut, idleChecksInflightMax)
	}
	if len(n.idle.recent) != len(n.idle.recentOrder) || len(n.idle.recent) > idleRecentMax {
		return fmt.Errorf("eviction ring %d/%d over %d", len(n.idle.recent), len(n.idle.recentOrder), idleRecentMax)
	}
	for id := range n.idle.wakes {
		key := queueKey{Topic: id.Topic, Group: id.Group}
		entry := n.state.queues[key]
		switch {
		case n.idle.wakeAtMs == 0 || n.idle.wakes[id] < n.idle.wakeAtMs:
			return fmt.Errorf("deadline of %v at %d before the earliest kept %d", id, n.idle.wakes[id], n.idle.wakeAtMs)
		case (entry == nil || id.Partition >= entry.partitions) && !n.removedPending(key):
			// Bounded by the catalogue: a removal forgets its queue's
			// deadlines (forgetEvictions) before its tombstone goes.
			return fmt.Errorf("deadline of %v, which is not in the catalogue", id)
		}
	}
	return nil
}
