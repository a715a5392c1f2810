package node

import (
	"fmt"
	"slices"

	"github.com/fibril-go/fibril/core"
)

// The Node's handling of runtime settings and the global dead-letter
// target: it decides every change, records it, and brings every machine
// that uses a value up to it. Invariants:
//   - the live copies (the Node's config, each loaded partition, each
//     session) change only once the record of the change is durable, so
//     nothing acts on a value a crash could take back;
//   - live versions only grow and never pass the recorded ones; with no
//     change on its way they equal them;
//   - an operator's change is answered once it is durable and every loaded
//     partition acknowledged it (SettingsApplied, the DeclareSettings Seq
//     order): a delivery leased after the answer uses the new lease, a
//     message dead-lettered after it goes to the new target;
//   - a partition loads with the live values (LoadRequest) and, if a
//     change became live while it loaded, is brought up to date before any
//     Open of it is answered;
//   - changes on their way and answers held are bounded by
//     runtimeChangesMax.

// runtimeChangesMax bounds changes recorded and not yet answered; past it
// a change is refused as behind (retry).
const runtimeChangesMax = 1024

// runtimeVolatile is the Node's live side of runtime settings.
type runtimeVolatile struct {
	// settingsVersion and dlqVersion are the live versions (the Node's cfg
	// holds the settings, globalDLQ the target).
	settingsVersion uint64
	dlqVersion      uint64
	globalDLQ       *core.DLQTarget
	// pending are changes recorded and not yet durable, in index order.
	pending []runtimeChange
	// held are durable changes' answers waiting for partitions to apply.
	held []heldRuntimeAnswer
	// seedDiffs are the keys whose startup seed differs from the persisted
	// value at boot (the driver logs them).
	seedDiffs []string
}

// runtimeChange is one recorded change on its way to durability.
type runtimeChange struct {
	index   uint64
	to      Address // the operator who asked
	dlq     bool    // a global target change (else a settings change)
	version uint64
	// settings (a settings change) or target (a global target change).
	settings RuntimeSettings
	target   *core.DLQTarget
}

// heldRuntimeAnswer waits until every queue partition in the table holds
// values at least as new as stamp (partitionBehind).
type heldRuntimeAnswer struct {
	to    Address
	stamp runtimeStamp
	msg   Message
}

// runtimeStamp is which live versions a partition was given.
type runtimeStamp struct {
	settings uint64
	dlq      uint64
}

// gatedRuntime releases a recorded runtime or global target change.
const gatedRuntime gatedKind = 16

// bootRuntime runs in NewNode after the boot records: the first boot
// records the seeds as version 1; a later one keeps what is persisted and
// notes the seeds that differ. The live copies start at the recorded
// values (durable, or about to be before anything is served: handshakes and
// loads wait for bootIndex, which covers this record).
func (n *Node) bootRuntime(seeds RuntimeSettings) {
	if n.state.runtime == nil {
		n.appendRecord(&record{kind: recordRuntime, runtimeVersion: 1, runtime: &seeds})
	} else {
		n.rt.seedDiffs = seedDifferences(*n.state.runtime, seeds)
	}
	assertHold(n.state.runtime != nil && n.state.runtimeVersion >= 1, "a booted Node has runtime settings")
	n.rt.settingsVersion = n.state.runtimeVersion
	applyRuntimeToConfig(&n.cfg, n.state.runtime)
	n.rt.dlqVersion, n.rt.globalDLQ = n.state.globalDLQVersion, copyTarget(n.state.globalDLQ)
}

// RuntimeSeedsIgnored lists the runtime keys whose startup seed differed
// from the persisted value at this boot: the persisted values are in force.
func (n *Node) RuntimeSeedsIgnored() []string { return slices.Clone(n.rt.seedDiffs) }

// runtimeState is the live runtime settings as the operator sees them.
func (n *Node) runtimeState() RuntimeSettingsState {
	st := RuntimeSettingsState{Version: n.rt.settingsVersion, Settings: n.liveRuntime()}
	if n.cfg.RuntimeLockIdleQueueCleanup {
		st.Locked = []string{RuntimeGroupIdleQueueCleanup}
	}
	return st
}

// liveRuntime reads the settings in force back from the Node's config.
func (n *Node) liveRuntime() RuntimeSettings {
	c := &n.cfg
	return RuntimeSettings{LeaseMs: c.Partition.LeaseMs, ExpiryBatchMax: c.Partition.ExpiryBatchMax,
		ReconnectGraceMs: c.ReconnectGraceMs, ResumeRestartTTLMs: c.ResumeRestartTTLMs,
		DefaultPartitionCount: c.DefaultPartitionCount, IdleCleanupEnabled: c.IdleCleanup.Enabled,
		IdleEvictAfterMs: c.IdleCleanup.EvictAfterMs, IdleSweepIntervalMs: c.IdleCleanup.SweepIntervalMs}
}

// onGetRuntimeSettings answers at once with the live settings.
func (n *Node) onGetRuntimeSettings(from Address) {
	st := n.runtimeState()
	n.send(from, &st)
}

// onPutRuntimeSettings checks an operator's change (version, locks,
// ranges), records it, and answers once it is durable and applied.
func (n *Node) onPutRuntimeSettings(from Address, msg *PutRuntimeSettings) {
	assertHold(from.Kind == AddrAdmin, "runtime settings change at an operator's request")
	refuse := func(code RefusalCode, key, message string) {
		st := n.runtimeState()
		// Current is the newest recorded version: the one the next expected
		// version must name.
		st.Version, st.Settings = n.state.runtimeVersion, *n.state.runtime
		st.Err = &RuntimeRefusal{Code: code, Key: key, Message: message}
		n.send(from, &st)
	}
	next := msg.Patch.applyTo(*n.state.runtime)
	switch {
	case msg.ExpectedVersion != n.state.runtimeVersion:
		refuse(RefusedStaleVersion, "", "")
		return
	case msg.Patch.empty():
		refuse(RefusedEmpty, "", "")
		return
	case n.cfg.RuntimeLockIdleQueueCleanup && msg.Patch.touchesIdle():
		refuse(RefusedLocked, RuntimeGroupIdleQueueCleanup, "")
		return
	case n.storageBehind() || n.runtimeBusy():
		refuse(RefusedBehind, "", "")
		return
	}
	if bad := validateRuntime(&next, n.cfg.PartitionsPerQueueMax); bad != nil {
		refuse(RefusedInvalid, bad.Key, bad.Range)
		return
	}
	version := n.state.runtimeVersion + 1
	index := n.appendRecord(&record{kind: recordRuntime, runtimeVersion: version, runtime: &next})
	n.rt.pending = append(n.rt.pending, runtimeChange{index: index, to: from, version: version, settings: next})
	n.gate(gatedAction{kind: gatedRuntime})
}

// onGetGlobalDLQ answers at once with the live target.
func (n *Node) onGetGlobalDLQ(from Address) {
	n.send(from, &GlobalDLQState{Version: n.rt.dlqVersion, Target: copyTarget(n.rt.globalDLQ)})
}

// onPutGlobalDLQ checks a target change, records it, and answers once it
// is durable and every loaded partition holds it.
func (n *Node) onPutGlobalDLQ(from Address, msg *PutGlobalDLQ) {
	assertHold(from.Kind == AddrAdmin, "the global target changes at an operator's request")
	refuse := func(code RefusalCode, key, message string) {
		n.send(from, &GlobalDLQState{Version: n.state.globalDLQVersion, Target: copyTarget(n.state.globalDLQ),
			Err: &RuntimeRefusal{Code: code, Key: key, Message: message}})
	}
	var target *core.DLQTarget
	if msg.Target != nil {
		target = &core.DLQTarget{Topic: msg.Target.Topic, Group: core.NormalizeGroup(msg.Target.Group)}
	}
	switch {
	case msg.ExpectedVersion != n.state.globalDLQVersion:
		refuse(RefusedStaleVersion, "", "")
	case target != nil && validQueueKey(queueKey(*target)) != nil:
		refuse(RefusedInvalid, "target", "a queue name: 1-128 bytes of [a-z0-9._-], no leading or trailing '.', no '..'")
	case target != nil && n.isStream(queueKey{Topic: target.Topic}):
		refuse(RefusedInvalid, "target", "a queue, not a stream")
	case n.storageBehind() || n.runtimeBusy():
		refuse(RefusedBehind, "", "")
	default:
		version := n.state.globalDLQVersion + 1
		index := n.appendRecord(&record{kind: recordGlobalDLQ, globalDLQVersion: version, globalDLQ: copyTarget(target)})
		n.rt.pending = append(n.rt.pending, runtimeChange{index: index, to: from, dlq: true, version: version, target: target})
		n.gate(gatedAction{kind: gatedRuntime})
	}
}

// runtimeBusy says whether one more change would pass runtimeChangesMax.
func (n *Node) runtimeBusy() bool { return len(n.rt.pending)+len(n.rt.held) >= runtimeChangesMax }

// releaseRuntime makes the changes recorded up to index live (the gate
// released them in index order) and holds their answers until applied.
func (n *Node) releaseRuntime(index uint64) {
	assertHold(len(n.rt.pending) > 0 && n.rt.pending[0].index <= index, "a released runtime gate has its change")
	for len(n.rt.pending) > 0 && n.rt.pending[0].index <= index {
		c := n.rt.pending[0]
		n.rt.pending = n.rt.pending[1:]
		var answer Message
		if c.dlq {
			assertHold(c.version == n.rt.dlqVersion+1, "live global target versions grow by one")
			n.rt.dlqVersion, n.rt.globalDLQ = c.version, copyTarget(c.target)
			answer = &GlobalDLQState{Version: c.version, Target: copyTarget(c.target)}
		} else {
			assertHold(c.version == n.rt.settingsVersion+1, "live settings versions grow by one")
			n.makeSettingsLive(c.version, &c.settings)
			st := n.runtimeState()
			answer = &st
		}
		n.pushPartitionRuntime()
		n.rt.held = append(n.rt.held, heldRuntimeAnswer{to: c.to, stamp: n.liveStamp(), msg: answer})
	}
	n.releaseRuntimeAnswers()
}

// makeSettingsLive puts durable settings in force in the Node and tells the
// sessions a changed grace.
func (n *Node) makeSettingsLive(version uint64, s *RuntimeSettings) {
	before := n.liveRuntime()
	n.rt.settingsVersion = version
	applyRuntimeToConfig(&n.cfg, s)
	if s.ResumeRestartTTLMs != before.ResumeRestartTTLMs && len(n.state.skeletons) > 0 {
		// The sweep deadline was computed under the old TTL: sweep now, which
		// finds the next deadline under the new one.
		n.skeletonSweepAtMs = 1
	}
	if s.ReconnectGraceMs == before.ReconnectGraceMs {
		return
	}
	ids := make([]SessionID, 0, len(n.sessions))
	for id := range n.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids) // effects in a deterministic order
	for _, id := range ids {
		n.send(SessionAddr(id), &SessionRuntime{ReconnectGraceMs: s.ReconnectGraceMs})
	}
}

// liveStamp is the live versions a partition should hold.
func (n *Node) liveStamp() runtimeStamp {
	return runtimeStamp{settings: n.rt.settingsVersion, dlq: n.rt.dlqVersion}
}

// pushPartitionRuntime brings every loaded queue partition up to the live
// values, in QueueID order.
func (n *Node) pushPartitionRuntime() {
	ids := make([]core.QueueID, 0, len(n.partitions))
	for id, pe := range n.partitions {
		if pe.loaded && !pe.stream && pe.runtime != n.liveStamp() {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, compareQueueIDs)
	for _, id := range ids {
		n.sendPartitionRuntime(id, n.partitions[id])
	}
}

// sendPartitionRuntime sends one loaded partition the live values, numbered.
func (n *Node) sendPartitionRuntime(id core.QueueID, pe *partitionEntry) {
	assertHold(pe.loaded && !pe.stream, "runtime values go to loaded queue partitions")
	n.settingsSeq++
	pe.settingsSentSeq = n.settingsSeq
	pe.runtime, pe.runtimeSeq = n.liveStamp(), n.settingsSeq
	n.send(PartitionAddr(id), &PartitionRuntime{Seq: n.settingsSeq, LeaseMs: n.cfg.Partition.LeaseMs,
		ExpiryBatchMax: n.cfg.Partition.ExpiryBatchMax, GlobalDLQ: copyTarget(n.rt.globalDLQ)})
}

// runtimeAtLoad: a partition that just loaded with values older than the
// live ones gets them now; it reports whether it did (its Opens wait).
func (n *Node) runtimeAtLoad(id core.QueueID, pe *partitionEntry) bool {
	if pe.stream || pe.runtime == n.liveStamp() {
		return false
	}
	n.sendPartitionRuntime(id, pe)
	return true
}

// releaseRuntimeAnswers sends, in order, every held answer no loaded
// partition holds back any more. Called whenever a partition applied or
// went away (settingsMoved), and at each step (a partition can leave the
// table without an acknowledgement).
func (n *Node) releaseRuntimeAnswers() {
	for len(n.rt.held) > 0 && !n.anyPartitionBehind(n.rt.held[0].stamp) {
		h := n.rt.held[0]
		n.rt.held[0] = heldRuntimeAnswer{}
		n.rt.held = n.rt.held[1:]
		n.send(h.to, h.msg)
	}
}

// anyPartitionBehind says whether a queue partition in the table (loaded
// or loading) does not yet hold values at least as new as stamp: one
// loading under older values gets them at LoadDone, one sent them has not
// acknowledged. A partition that loads while an answer is on its way must
// not serve under the old values once the operator is told.
func (n *Node) anyPartitionBehind(stamp runtimeStamp) bool {
	for _, pe := range n.partitions {
		if !pe.stream && pe.runtimeBehind(stamp) {
			return true
		}
	}
	return false
}

// runtimeBehind says whether the partition does not hold stamp in force:
// it was given older values, or the message that carried newer ones is
// not acknowledged (acknowledgements come in Seq order).
func (pe *partitionEntry) runtimeBehind(stamp runtimeStamp) bool {
	if pe.runtime.settings < stamp.settings || pe.runtime.dlq < stamp.dlq {
		return true
	}
	return pe.loaded && pe.runtimeSeq > pe.settingsAppliedSeq
}

// onPartitionRuntimeBounced: the partition's Host is gone; it loads with
// the live values next time, so nothing waits for it.
func (n *Node) onPartitionRuntimeBounced(id core.QueueID, msg *PartitionRuntime) {
	pe := n.partitions[id]
	if pe == nil || !pe.loaded || msg.Seq <= pe.settingsAppliedSeq {
		return
	}
	pe.settingsAppliedSeq = msg.Seq
	n.settingsMoved(id, pe)
}

// sessionRuntime is what a new session starts with.
func (n *Node) sessionRuntime() *SessionRuntime {
	return &SessionRuntime{ReconnectGraceMs: n.cfg.ReconnectGraceMs}
}

// checkRuntimeInvariants: live versions never pass the recorded ones and
// equal them with nothing on its way; bounds hold.
func (n *Node) checkRuntimeInvariants() error {
	switch {
	case n.rt.settingsVersion > n.state.runtimeVersion || n.rt.dlqVersion > n.state.globalDLQVersion:
		return fmt.Errorf("runtime: live versions %d/%d past recorded %d/%d", n.rt.settingsVersion, n.rt.dlqVersion, n.state.runtimeVersion, n.state.globalDLQVersion)
	case len(n.rt.pending) == 0 && (n.rt.settingsVersion != n.state.runtimeVersion || n.rt.dlqVersion != n.state.globalDLQVersion):
		return fmt.Errorf("runtime: nothing on its way, yet live versions %d/%d differ from recorded %d/%d", n.rt.settingsVersion, n.rt.dlqVersion, n.state.runtimeVersion, n.state.globalDLQVersion)
	case len(n.rt.pending) == 0 && n.liveRuntime() != *n.state.runtime:
		return fmt.Errorf("runtime: the Node's live settings differ from the recorded ones")
	case len(n.rt.pending) == 0 && !sameTarget(n.rt.globalDLQ, n.state.globalDLQ):
		return fmt.Errorf("runtime: the live global target differs from the recorded one")
	case len(n.rt.pending)+len(n.rt.held) > runtimeChangesMax:
		return fmt.Errorf("runtime: %d changes on their way, over %d", len(n.rt.pending)+len(n.rt.held), runtimeChangesMax)
	}
	return nil
}

// defaultPartitionCount is the live partitioning.default_partition_count,
// within the node's per-queue bound (which may have been lowered since the
// value was recorded).
func (n *Node) defaultPartitionCount() uint32 {
	return max(min(n.cfg.DefaultPartitionCount, n.cfg.PartitionsPerQueueMax), 1)
}

// RuntimeSettingsInForce is the live runtime settings, for drivers that
// observe them (the simulator's operator checks what survived a crash).
func (n *Node) RuntimeSettingsInForce() RuntimeSettingsState { return n.runtimeState() }
