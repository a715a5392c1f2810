package node

import (
	"errors"
	"slices"

	"github.com/fibril-go/fibril/core"
)

// Idle queue eviction (SPEC 9; the design is docs/idle.md). The Node
// decides, with the Host's word on what only the Host knows. Invariants:
//   - a partition is unloaded only when every SPEC 9 condition held: cleanup
//     enabled, a sweep reached it, no session holds it open (publishers and
//     subscribers: grants minus PublisherGone), no settings or catalogue
//     record in flight, and its Host said yes to an UnloadCheck (no
//     subscription, lease, pending settle, reply owed, storage work, and
//     the idle window elapsed); the driver confirms with UnloadDone;
//   - from the check on the partition counts as not loaded: an Open or a
//     dead-letter copy that arrives meanwhile waits in its waiters and
//     cancels the unload (UnloadCancel), then is answered from the Host as
//     it was (lease creation is serialized with cleanup: nothing can reach
//     the Host between its yes and its drop); one that arrives once the
//     unload is sent waits for UnloadDone and reloads the partition;
//   - an unloaded partition has no partitionEntry: it is not swept again,
//     and the Node keeps for it at most its next timer deadline (wakes),
//     at which it is reloaded, one bit in its catalogue entry (evicted, for
//     the reload counter), and a place in a bounded ring of recent
//     evictions (their time, for queues_debug);
//   - every structure here is bounded: checks in flight by
//     idleChecksInflightMax, recent evictions by idleRecentMax, wakes by
//     the catalogue.

// IdleCleanupConfig is SPEC 9's idle_queue_cleanup group.
type IdleCleanupConfig struct {
	Enabled bool
	// EvictAfterMs is the idle window: no use of a partition for this long.
	EvictAfterMs int64
	// SweepIntervalMs is how often the Node looks for idle partitions.
	SweepIntervalMs int64
	// PublisherIdleTimeoutMs (0: unset): a session that holds a partition
	// open without using it this long is asked to let it go (ReleaseIdle).
	// Unset, a session holds its opens until it ends or forgets them at
	// its own bound.
	PublisherIdleTimeoutMs int64
}

// DefaultIdleCleanup is SPEC 9's defaults: off, 10 min, 1 min, unset.
func DefaultIdleCleanup() IdleCleanupConfig {
	return IdleCleanupConfig{EvictAfterMs: 600_000, SweepIntervalMs: 60_000}
}

// Validate checks the group; it changes nothing.
func (c IdleCleanupConfig) Validate() error {
	switch {
	case c.EvictAfterMs < 1 || c.SweepIntervalMs < 1:
		return errors.New("node config: idle_queue_cleanup.evict_after_ms and sweep_interval_ms must be at least 1")
	case c.PublisherIdleTimeoutMs < 0:
		return errors.New("node config: idle_queue_cleanup.publisher_idle_timeout_ms must not be negative (0 leaves it unset)")
	}
	return nil
}

const (
	// idleChecksInflightMax bounds UnloadChecks on their way at once; a
	// sweep that reaches it stops and the next one goes on.
	idleChecksInflightMax = 1024
	// idleRecentMax bounds the ring of recent evictions kept for
	// queues_debug and the reload counter; older evictions are forgotten
	// (the partition still shows as unloaded).
	idleRecentMax = 1024
	// idleReloadRetryMs: a timer reload whose load failed is tried again
	// this much later.
	idleReloadRetryMs = 1000
	// idleDebugRowsMax bounds one queues_debug listing.
	idleDebugRowsMax = 10_000
)

// idlePhase says where a loaded partition is in an eviction.
type idlePhase uint8

const (
	idleNone      idlePhase = 0
	idleChecking  idlePhase = 1 // UnloadCheck sent, no answer yet
	idleUnloading idlePhase = 2 // the Host said yes; Ready.Unload sent
)

// idleState is the Node's bookkeeping of eviction.
type idleState struct {
	nextSweepMs int64 // 0: not scheduled (cleanup off)
	seq         uint64
	checksOut   int
	// wakes: unloaded partitions with timer work, by deadline; wakeAtMs is
	// at or before the earliest (a stale earlier value costs a scan).
	wakes    map[core.QueueID]int64
	wakeAtMs int64
	// recent: evictions of this process, newest last, at most idleRecentMax
	// (queues_debug's idle_ms of an unloaded partition; which partitions
	// were evicted is a bit in their catalogue entry).
	recent      map[core.QueueID]int64
	recentOrder []core.QueueID
	counters    IdleCounters
}

// IdleCounters count eviction outcomes since start (metrics).
type IdleCounters struct {
	Evicted  uint64
	Skipped  uint64
	Reloaded uint64
}

// idleStep runs after every Step: schedules or runs the sweep, and reloads
// partitions whose timer deadline came. The config is read here each
// time, never cached.
func (n *Node) idleStep() {
	cfg := n.cfg.IdleCleanup
	switch {
	case !cfg.Enabled:
		n.idle.nextSweepMs = 0
	case n.idle.nextSweepMs == 0:
		n.idle.nextSweepMs = n.nowMs + cfg.SweepIntervalMs
	case n.nowMs >= n.idle.nextSweepMs:
		n.idle.nextSweepMs = n.nowMs + cfg.SweepIntervalMs
		if n.bootDurable() && !n.draining {
			n.sweepIdle(cfg)
		}
	}
	// Timer work is done even with cleanup turned off since: what was
	// evicted must still expire and become ready in time.
	if n.idle.wakeAtMs != 0 && n.nowMs >= n.idle.wakeAtMs && n.bootDurable() {
		n.reloadDue()
	}
}

// idleWakeMs is the earliest time idleStep has work (0: none).
func (n *Node) idleWakeMs() int64 {
	wake := n.idle.nextSweepMs
	if at := n.idle.wakeAtMs; at != 0 && (wake == 0 || at < wake) {
		wake = at
	}
	return wake
}

// sweepIdle asks every loaded, unused queue partition whether it can go,
// in QueueID order.
func (n *Node) sweepIdle(cfg IdleCleanupConfig) {
	ids := make([]core.QueueID, 0, len(n.partitions))
	for id, pe := range n.partitions {
		if pe.loaded && !pe.stream && pe.idle == idleNone {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, compareQueueIDs)
	for _, id := range ids {
		pe := n.partitions[id]
		if reason := n.nodeIdleRefusal(id, pe); reason != "" {
			n.skipIdle(pe, reason)
			if len(pe.publishers) > 0 && cfg.PublisherIdleTimeoutMs > 0 {
				n.releaseIdlePublishers(id, pe, cfg.PublisherIdleTimeoutMs)
			}
			continue
		}
		if n.idle.checksOut >= idleChecksInflightMax {
			break // the next sweep goes on
		}
		n.startUnloadCheck(id, pe, cfg)
	}
}

// nodeIdleRefusal is the first condition the Node itself sees failing.
func (n *Node) nodeIdleRefusal(id core.QueueID, pe *partitionEntry) string {
	key := queueKey{Topic: id.Topic, Group: id.Group}
	switch {
	case n.state.queues[key] == nil || n.qops.deletions[key] != nil:
		// A delete is asking the partitions for their inflight counts, or
		// its removal record is on its way: queueRemoved stops and forgets
		// the partition, which must then still be loaded (an UnloadCheck
		// out would leave it half-unloaded, and the catalogue entry a
		// resumed check reads is gone).
		return "queue being deleted"
	case len(pe.publishers) > 0:
		return "publishers or subscribers"
	case len(pe.held) > 0 || pe.settingsOutstanding(pe.settingsSentSeq):
		return "settings in flight"
	case n.queueRecordAt[key] != 0 || n.creating[key] != nil:
		return "catalogue record in flight"
	}
	return ""
}

func (n *Node) skipIdle(pe *partitionEntry, reason string) {
	pe.lastCleanup = "skipped: " + reason
	n.idle.counters.Skipped++
}

// releaseIdlePublishers asks the sessions holding id open to let it go if
// they have not used it for timeout (publisher_idle_timeout_ms).
func (n *Node) releaseIdlePublishers(id core.QueueID, pe *partitionEntry, timeoutMs int64) {
	sessions := make([]SessionID, 0, len(pe.publishers))
	for s := range pe.publishers {
		sessions = append(sessions, s)
	}
	slices.Sort(sessions)
	for _, s := range sessions {
		n.send(SessionAddr(s), &ReleaseIdle{Queue: id, IdleMs: timeoutMs})
	}
}

// startUnloadCheck asks the Host; from now on Opens wait.
func (n *Node) startUnloadCheck(id core.QueueID, pe *partitionEntry, cfg IdleCleanupConfig) {
	key := queueKey{Topic: id.Topic, Group: id.Group}
	entry := n.state.queues[key]
	assertHold(entry != nil && len(pe.waiters) == 0, "a loaded partition of a declared queue has no waiters")
	assertHold(n.qops.deletions[key] == nil, "no unload check during a delete (nodeIdleRefusal)")
	n.idle.seq++
	n.idle.checksOut++
	pe.idle, pe.checkSeq, pe.loaded = idleChecking, n.idle.seq, false
	// What the Host has in force: nothing was outstanding (nodeIdleRefusal),
	// so a declare recorded during the check is sent on if it says no.
	pe.sent = entry.settings
	n.send(PartitionAddr(id), &UnloadCheck{Seq: n.idle.seq, IdleAfterMs: cfg.EvictAfterMs})
}

// onUnloadAnswer: the Host said yes (unload it) or no (it stays loaded and
// whoever waited is answered).
func (n *Node) onUnloadAnswer(from Address, msg *UnloadAnswer) {
	assertHold(from.Kind == AddrPartition, "partitions answer unload checks")
	id := from.Queue
	pe := n.partitions[id]
	if pe == nil || pe.idle != idleChecking || pe.checkSeq != msg.Seq {
		return // not the check outstanding (cannot happen; harmless)
	}
	n.idle.checksOut--
	assertHold(n.idle.checksOut >= 0, "each check is answered once")
	pe.checkSeq, pe.subscribers, pe.idleMs = 0, msg.Subscribers, msg.IdleMs
	if !msg.OK {
		pe.idle = idleNone
		n.skipIdle(pe, msg.Reason)
		n.resumeAfterCheck(id, pe)
		return
	}
	// Something came meanwhile, or cleanup was turned off: the unload is
	// cancelled rather than carried out and undone by a reload.
	if len(pe.waiters) > 0 || !n.cfg.IdleCleanup.Enabled {
		n.send(PartitionAddr(id), &UnloadCancel{Seq: msg.Seq})
		pe.idle = idleNone
		n.skipIdle(pe, "cancelled: used during the check")
		if !n.cfg.IdleCleanup.Enabled {
			pe.lastCleanup = "skipped: cleanup disabled"
		}
		n.resumeAfterCheck(id, pe)
		return
	}
	pe.idle, pe.wakeMs = idleUnloading, msg.WakeMs
	n.rd.Unload = append(n.rd.Unload, id)
}

// resumeAfterCheck makes the partition loaded again and answers what
// waited, as onLoadDone does: while the check was out the partition
// counted as not loaded, so a declare or a runtime change made live
// meanwhile (pushPartitionRuntime skips partitions not loaded) was not
// sent to it. It gets both now, and whoever waited is answered once they
// apply; a held runtime answer waits for the same acknowledgement.
func (n *Node) resumeAfterCheck(id core.QueueID, pe *partitionEntry) {
	entry := n.state.queues[queueKey{Topic: id.Topic, Group: id.Group}]
	assertHold(entry != nil, "a checked partition's queue is in the catalogue")
	assertHold(len(pe.held) == 0, "no opener is held across a check (nodeIdleRefusal)")
	pe.loaded = true
	waiters := pe.waiters
	pe.waiters = nil
	runtimeSent := n.runtimeAtLoad(id, pe) // node_runtime.go
	if runtimeSent || !catalogSettingsEqual(pe.sent, entry.settings) {
		if !catalogSettingsEqual(pe.sent, entry.settings) {
			n.sendSettings(id, pe, entry.settings)
		}
		pe.held = append(pe.held, waiters...)
		pe.sent = catalogSettings{}
		return
	}
	pe.sent = catalogSettings{}
	for _, o := range waiters {
		n.openerReady(id, entry.partitions, o)
	}
}

// onUnloadDone: the Host is gone and its storage closed. What waited
// loads it again; timer work is remembered.
func (n *Node) onUnloadDone(in *UnloadDone) {
	id := in.Queue
	pe := n.partitions[id]
	assertHold(pe != nil && pe.idle == idleUnloading, "UnloadDone answers a Ready.Unload")
	assertHold(len(pe.publishers) == 0, "no session held an unloaded partition open")
	delete(n.partitions, id)
	n.idle.counters.Evicted++
	n.rememberEviction(id)
	if pe.wakeMs != 0 {
		n.addIdleWake(id, pe.wakeMs)
	}
	key := queueKey{Topic: id.Topic, Group: id.Group}
	for _, o := range pe.waiters {
		n.openPartition(key, o)
	}
}

func (n *Node) rememberEviction(id core.QueueID) {
	if e := n.state.queues[queueKey{Topic: id.Topic, Group: id.Group}]; e != nil {
		if len(e.evicted) == 0 {
			e.evicted = make([]uint64, (e.partitions+63)/64)
		}
		e.evicted[id.Partition/64] |= 1 << (id.Partition % 64)
	}
	if n.idle.recent == nil {
		n.idle.recent = map[core.QueueID]int64{}
	}
	if _, ok := n.idle.recent[id]; !ok {
		if len(n.idle.recentOrder) >= idleRecentMax {
			oldest := n.idle.recentOrder[0]
			n.idle.recentOrder = slices.Delete(n.idle.recentOrder, 0, 1)
			delete(n.idle.recent, oldest)
		}
		n.idle.recentOrder = append(n.idle.recentOrder, id)
	}
	n.idle.recent[id] = n.nowMs
	assertHold(len(n.idle.recent) == len(n.idle.recentOrder) && len(n.idle.recent) <= idleRecentMax, "the eviction ring is bounded and consistent")
}

func (n *Node) addIdleWake(id core.QueueID, atMs int64) {
	if n.idle.wakes == nil {
		n.idle.wakes = map[core.QueueID]int64{}
	}
	n.idle.wakes[id] = atMs
	if n.idle.wakeAtMs == 0 || atMs < n.idle.wakeAtMs {
		n.idle.wakeAtMs = atMs
	}
}

// forgetEvictions drops what the Node keeps of a removed queue's evicted
// partitions: their deadlines and their places in the ring of recent
// evictions. Kept, the wakes would grow past the catalogue with every
// delete of an evicted queue, and a fresh queue of the same name would be
// loaded at the old queue's deadline and shown with its idle time.
func (n *Node) forgetEvictions(key queueKey, partitions uint32) {
	assertHold(n.state.queues[key] == nil, "evictions are forgotten for removed queues")
	for p := range partitions {
		id := core.QueueID{Topic: key.Topic, Group: key.Group, Partition: p}
		// A stale earlier wakeAtMs costs one scan in reloadDue.
		delete(n.idle.wakes, id)
		if _, ok := n.idle.recent[id]; ok {
			delete(n.idle.recent, id)
			n.idle.recentOrder = slices.DeleteFunc(n.idle.recentOrder, func(x core.QueueID) bool { return x == id })
		}
	}
	assertHold(len(n.idle.recent) == len(n.idle.recentOrder), "the eviction ring stays consistent")
}

// noteLoadRequest: a partition is loaded again (a use, or its timer); its
// deadline, if any, is the Host's again. It says whether this is a reload
// of a recent eviction (LoadRequest.Reload).
func (n *Node) noteLoadRequest(id core.QueueID) bool {
	delete(n.idle.wakes, id)
	if _, ok := n.idle.recent[id]; ok {
		delete(n.idle.recent, id)
		n.idle.recentOrder = slices.DeleteFunc(n.idle.recentOrder, func(x core.QueueID) bool { return x == id })
	}
	e := n.state.queues[queueKey{Topic: id.Topic, Group: id.Group}]
	if e == nil || len(e.evicted) == 0 || e.evicted[id.Partition/64]&(1<<(id.Partition%64)) == 0 {
		return false
	}
	e.evicted[id.Partition/64] &^= 1 << (id.Partition % 64)
	n.idle.counters.Reloaded++
	return true
}

// reloadDue loads, in QueueID order, every unloaded partition whose timer
// deadline came, and recomputes the earliest deadline.
func (n *Node) reloadDue() {
	var due []core.QueueID
	next := int64(0)
	for id, at := range n.idle.wakes {
		if at <= n.nowMs {
			due = append(due, id)
		} else if next == 0 || at < next {
			next = at
		}
	}
	n.idle.wakeAtMs = next
	slices.SortFunc(due, compareQueueIDs)
	for _, id := range due {
		delete(n.idle.wakes, id)
		entry := n.state.queues[queueKey{Topic: id.Topic, Group: id.Group}]
		if entry == nil || id.Partition >= entry.partitions || n.partitions[id] != nil {
			continue // gone from the catalogue, or loaded by a use already
		}
		reload := n.noteLoadRequest(id)
		// Loaded with the runtime values and global target in force, as
		// openPartition loads (node_runtime.go).
		n.partitions[id] = &partitionEntry{sent: entry.settings, timerLoad: true, runtime: n.liveStamp()}
		n.rd.Load = append(n.rd.Load, LoadRequest{Queue: id, Config: n.partitionConfig(id), Settings: *declareSettingsOf(entry.settings), Reload: reload,
			GlobalDLQ: copyTarget(n.rt.globalDLQ)})
	}
}

// ---- publishers: sessions holding a partition open

// grantOpen counts one Opened sent to a session for a queue partition.
func (n *Node) grantOpen(id core.QueueID, s SessionID) {
	pe := n.partitions[id]
	assertHold(pe != nil && pe.loaded && !pe.stream, "opens are granted by loaded queue partitions")
	if pe.publishers == nil {
		pe.publishers = map[SessionID]uint32{}
	}
	pe.publishers[s]++
}

// ungrantOpen counts one grant out (a Forget relayed, or a bounced Opened).
func (n *Node) ungrantOpen(id core.QueueID, s SessionID) {
	pe := n.partitions[id]
	if pe == nil || pe.publishers[s] == 0 {
		return // the partition failed or was never granted this (harmless)
	}
	pe.publishers[s]--
	if pe.publishers[s] == 0 {
		delete(pe.publishers, s)
	}
}

func (n *Node) onPublisherGone(from Address, msg *PublisherGone) {
	assertHold(from.Kind == AddrPartition, "a partition relays a Forget")
	n.ungrantOpen(from.Queue, msg.Session)
}

// IdleCounters reports eviction counters (drivers read them for metrics).
func (n *Node) IdleCounters() IdleCounters { return n.idle.counters }

// IdleFootprint is the Node's per-partition state, for the acceptance
// measurement: loaded or in-between partitions, deadlines of unloaded
// ones, and the ring of recent evictions.
func (n *Node) IdleFootprint() (partitions, wakes, recent int) {
	return len(n.partitions), len(n.idle.wakes), len(n.idle.recent)
}
