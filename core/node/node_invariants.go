package node

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// The Node's cross-checks. Invariants this file checks:
//   - nothing is durable past the last appended index, and this process's
//     boot record is in the log;
//   - every gated action waits for a record not yet durable, in index order;
//   - connections stay within ConnectionsMax and each is in one known phase;
//   - sessions and byClient are one directory; session ids are minted only
//     under a durable reservation;
//   - every catalogue entry, pending queue record and loaded partition agrees
//     with the log, and every dead-letter copy waiting is counted once.

// CheckInvariants walks the whole Node and reports the first broken
// invariant. It is O(state): the simulator and the tests call it after
// every step; production does not.
func (n *Node) CheckInvariants() error {
	if err := n.checkCohorts(); err != nil {
		return err
	}
	if err := n.checkQuarantine(); err != nil {
		return err
	}
	if err := n.checkRuntimeInvariants(); err != nil {
		return err
	}
	// The log: storage cannot have made durable what was never appended,
	// and this process's boot record is in it.
	// A durable index past the last append means a Persisted input claimed a
	// write we never asked for: releasing gated replies on it would be a lie.
	if n.durableIndex > n.state.lastIndex {
		return fmt.Errorf("durable index %d beyond last index %d", n.durableIndex, n.state.lastIndex)
	}
	if n.bootIndex == 0 || n.bootIndex > n.state.lastIndex || n.state.boot == 0 {
		return fmt.Errorf("boot record %d (boot %d) not in the log (last %d)", n.bootIndex, n.state.boot, n.state.lastIndex)
	}
	// The gate: every action waits for a record not yet durable (else it
	// would have been released), in index order.
	// A gated action at or below the durable index should already have been
	// released: one left behind is a reply the client waits for forever.
	for i, g := range n.gated {
		if g.index <= n.durableIndex || g.index > n.state.lastIndex {
			return fmt.Errorf("gated action %d waits for index %d (durable %d, last %d)", i, g.index, n.durableIndex, n.state.lastIndex)
		}
		if i > 0 && n.gated[i-1].index > g.index {
			return fmt.Errorf("gated actions out of index order at %d", i)
		}
	}
	if err := n.checkConns(); err != nil {
		return err
	}
	if err := n.checkDirectory(); err != nil {
		return err
	}
	if err := n.checkIdle(); err != nil { // node_idle.go
		return err
	}
	return n.checkCatalog()
}

// checkConns: the admission limit holds, each connection is in one known
// phase, bound ones name a session, and the held-HELLO count is exact and
// only non-zero before the boot record is durable.
func (n *Node) checkConns() error {
	if len(n.conns) > n.cfg.ConnectionsMax {
		return fmt.Errorf("%d connections open, limit %d", len(n.conns), n.cfg.ConnectionsMax)
	}
	// held is recounted rather than trusted: heldHellos gates admission, and a
	// drifted counter would refuse (or over-admit) HELLOs for good.
	held := 0
	for id, c := range n.conns {
		switch {
		case c.id != id:
			return fmt.Errorf("connection %d filed under %d", c.id, id)
		case c.phase < connHandshaking || c.phase > connClosing:
			return fmt.Errorf("connection %d in phase %d", id, c.phase)
		case c.phase == connBound && c.session == 0:
			return fmt.Errorf("connection %d bound to no session", id)
		// HELLOs are held only while the boot record is not durable (a session
		// then could hand out tags of a boot a crash takes back); once it is
		// durable, answerHeldHellos must have released them all.
		case c.phase == connHelloHeld && n.bootDurable():
			return fmt.Errorf("connection %d holds a HELLO after the boot record is durable", id)
		}
		if c.phase == connHelloHeld {
			held++
		}
	}
	if held != n.heldHellos || held > hellosHeldMax {
		return fmt.Errorf("%d HELLOs held, counted %d (limit %d)", held, n.heldHellos, hellosHeldMax)
	}
	// Deadlines are appended with a time that never goes back, so the list
	// is sorted and expireHandshakes may stop at the first one in the future.
	for i := 1; i < len(n.deadlines); i++ {
		if n.deadlines[i-1].atMs > n.deadlines[i].atMs {
			return fmt.Errorf("handshake deadlines out of order at %d", i)
		}
	}
	return nil
}

// checkDirectory: sessions and byClient are one directory (no session is
// live in one and forgotten in the other), ids were minted here, and a
// skeleton always has an expiry sweep scheduled.
func (n *Node) checkDirectory() error {
	if len(n.sessions) != len(n.byClient) {
		return fmt.Errorf("%d sessions, %d client ids", len(n.sessions), len(n.byClient))
	}
	for id, s := range n.sessions {
		switch {
		// Id 0 means "no session" in conn.session; an id past lastSessionID was not
		// minted by this Node and could collide with the next one.
		case s.id != id || id == 0 || id > n.lastSessionID:
			return fmt.Errorf("session %d filed under %d (last minted %d)", s.id, id, n.lastSessionID)
		case n.byClient[s.clientID] != id:
			return fmt.Errorf("session %d's client id maps to %d", id, n.byClient[s.clientID])
		}
	}
	// Session ids: handed out only under a durable reservation, which is
	// at or below the log's ceiling; one reservation on its way at most.
	if n.lastSessionID > n.sessionIDsDurable || uint64(n.sessionIDsDurable) > n.state.sessionIDCeiling || n.state.sessionIDCeiling > sessionSeqMax {
		return fmt.Errorf("session ids: last %d, durable reservation %d, ceiling %d", n.lastSessionID, n.sessionIDsDurable, n.state.sessionIDCeiling)
	}
	if i := n.sessionIDsReserveIndex; i != 0 && (i <= n.durableIndex || i > n.state.lastIndex) {
		return fmt.Errorf("session id reservation at %d (durable %d, last %d)", i, n.durableIndex, n.state.lastIndex)
	}
	// Without a scheduled sweep, expired skeletons would sit in the log forever
	// and a client could resume long past ResumeRestartTTLMs (PROTOCOL 7.7).
	if ttl := n.cfg.ResumeRestartTTLMs; ttl > 0 && n.skeletonSweepAtMs == 0 && len(n.state.skeletons) > 0 {
		return fmt.Errorf("%d skeletons and no expiry sweep scheduled", len(n.state.skeletons))
	}
	// No skeleton without a live session is kept past its TTL: the sweep
	// comes no later than its expiry.
	for id, sk := range n.state.skeletons {
		if _, live := n.byClient[id]; !live && n.cfg.ResumeRestartTTLMs > 0 && n.skeletonSweepAtMs > sk.savedAtMs+n.cfg.ResumeRestartTTLMs {
			return fmt.Errorf("skeleton %x expires at %d, sweep at %d", id[:4], sk.savedAtMs+n.cfg.ResumeRestartTTLMs, n.skeletonSweepAtMs)
		}
	}
	return nil
}

// checkCatalog: the catalogue is within QueuesMax and well formed; a queue
// being created has its entry and a record not yet durable; a partition
// loading or loaded is in the catalogue, loading ones have waiters, loaded
// ones none, and none was requested before the boot record was durable;
// every dead-letter copy the Node holds is counted once.
func (n *Node) checkCatalog() error {
	if len(n.state.queues)+len(n.state.streams) > n.cfg.QueuesMax {
		return fmt.Errorf("%d queues and %d streams, limit %d", len(n.state.queues), len(n.state.streams), n.cfg.QueuesMax)
	}
	// The derived total is the catalogue's sum, and within the budget
	// unless the budget shrank under a catalogue recovered from an older
	// configuration (then only new queues are refused).
	sum := 0
	for _, e := range n.state.queues {
		sum += int(e.partitions)
	}
	for _, e := range n.state.streams {
		sum += int(e.settings.PartitionCount)
	}
	if sum != n.state.partitionsTotal {
		return fmt.Errorf("partitionsTotal %d, the catalogue holds %d", n.state.partitionsTotal, sum)
	}
	if err := n.checkStreams(); err != nil {
		return err
	}
	for k, e := range n.state.queues {
		if e.key != k || e.partitions == 0 || validQueueKey(k) != nil {
			return fmt.Errorf("catalogue entry %+v filed under %+v", e.key, k)
		}
	}
	// A queue's pending record is one the gate still waits for.
	if len(n.queueRecordAt) > len(n.gated) {
		return fmt.Errorf("%d queues with a record pending, %d gated actions", len(n.queueRecordAt), len(n.gated))
	}
	for k, at := range n.queueRecordAt {
		if (n.state.queues[k] == nil && !(k.Group == "" && n.isStream(k))) || at <= n.durableIndex || at > n.state.lastIndex {
			return fmt.Errorf("queue %+v has a pending record at %d (durable %d, last %d)", k, at, n.durableIndex, n.state.lastIndex)
		}
	}
	forwards := 0
	for k, cq := range n.creating {
		if (n.state.queues[k] == nil && !(k.Group == "" && n.isStream(k))) || cq.index <= n.durableIndex {
			return fmt.Errorf("queue %+v creating at %d (durable %d) without its entry or after its record", k, cq.index, n.durableIndex)
		}
		forwards += countForwards(cq.waiters)
	}
	for id, pe := range n.partitions {
		if pe.stream {
			if err := n.checkStreamPartition(id, pe); err != nil {
				return err
			}
			continue
		}
		e := n.state.queues[queueKey{Topic: id.Topic, Group: id.Group}]
		switch {
		// A partition outside its queue's count would take messages no route can
		// reach (the partition-key hash only spans the recorded count).
		// A deleted queue's loaded partitions stay until its removal is
		// durable (node_queueops.go): the tombstone accounts for them.
		case e == nil && pe.loaded && n.removedPending(queueKey{Topic: id.Topic, Group: id.Group}):
		case e == nil || id.Partition >= e.partitions:
			return fmt.Errorf("partition %v loaded or loading outside the catalogue", id)
		case pe.loaded && len(pe.waiters) > 0:
			return fmt.Errorf("loaded partition %v has %d waiters", id, len(pe.waiters))
		case !pe.loaded && len(pe.waiters) == 0 && !n.repairing(id) && pe.idle == idleNone && !pe.timerLoad:
			return fmt.Errorf("partition %v loading for nobody", id)
		// Partitions take their TagFloor from the boot counter: one loaded before
		// the boot record is durable could reuse an earlier boot's delivery tags.
		case !n.bootDurable():
			return fmt.Errorf("partition %v requested before the boot record is durable", id)
		// A Host cannot acknowledge settings it was never sent (node_settings.go).
		case pe.settingsAppliedSeq > pe.settingsSentSeq || pe.settingsSentSeq > n.settingsSeq:
			return fmt.Errorf("partition %v applied settings %d, sent %d, last %d", id, pe.settingsAppliedSeq, pe.settingsSentSeq, n.settingsSeq)
		case len(pe.held) > 0 && !(pe.loaded && pe.settingsOutstanding(pe.settingsSentSeq)):
			return fmt.Errorf("partition %v holds %d opens with nothing outstanding", id, len(pe.held))
		}
		forwards += countForwards(pe.waiters) + countForwards(pe.held)
	}
	// Declares stop at declaresWaitingMax; queues created by Opens add at
	// most recordsUnpersistedMax gated actions, the boot record one.
	if len(n.gated)+len(n.heldDeclares) > declaresWaitingMax+recordsUnpersistedMax+1 {
		return fmt.Errorf("%d gated and %d held declares (limit %d)", len(n.gated), len(n.heldDeclares), declaresWaitingMax)
	}
	// A held DECLARE_QUEUE_OK that waits for nothing would never be released.
	for i, hd := range n.heldDeclares {
		if hd.seq > n.settingsSeq || !n.queueSettingsOutstanding(hd.key, hd.seq) {
			return fmt.Errorf("held declare %d (token %d, seq %d) waits for nothing", i, hd.answer.Token, hd.seq)
		}
	}
	if len(n.bootWaiters) > 0 && n.bootDurable() {
		return fmt.Errorf("%d opens wait for a boot record that is durable", len(n.bootWaiters))
	}
	for _, w := range n.bootWaiters {
		if w.o.forward != nil {
			forwards++
		}
	}
	// forwardsWaiting is the backpressure counter for dead letters: drift would
	// either stall every source partition's retries or let the queue grow past
	// its bound.
	if forwards != n.forwardsWaiting || forwards > deadLetterForwardsMax {
		return fmt.Errorf("%d forwards waiting, counted %d (limit %d)", forwards, n.forwardsWaiting, deadLetterForwardsMax)
	}
	return nil
}

// countForwards counts the dead-letter copies among waiters.
func countForwards(waiters []opener) int {
	count := 0
	for _, o := range waiters {
		if o.forward != nil {
			count++
		}
	}
	return count
}

// checkStreams: every stream is well formed and filed under its topic, and
// no topic is both a queue and a stream; queueTopics counts the queues.
func (n *Node) checkStreams() error {
	counted := map[string]int{}
	for k := range n.state.queues {
		counted[k.Topic]++
	}
	if len(counted) != len(n.state.queueTopics) {
		return fmt.Errorf("%d queue topics, %d counted", len(counted), len(n.state.queueTopics))
	}
	for t, c := range counted {
		if n.state.queueTopics[t] != c {
			return fmt.Errorf("topic %q: %d queues, counted %d", t, n.state.queueTopics[t], c)
		}
	}
	for t, e := range n.state.streams {
		switch {
		case e.topic != t || core.ValidateName(t) != nil:
			return fmt.Errorf("stream %q filed under %q", e.topic, t)
		case e.settings.PartitionCount == 0 || e.settings.Tier > core.TierDurable:
			return fmt.Errorf("stream %q with settings %+v", t, e.settings)
		case counted[t] > 0:
			return fmt.Errorf("topic %q is a queue and a stream", t)
		}
	}
	return nil
}

// checkStreamPartition: a stream partition loading or loaded is one of a
// declared stream, in range, not before the boot record, with waiters
// only while loading and no settings traffic.
func (n *Node) checkStreamPartition(id core.QueueID, pe *partitionEntry) error {
	e := n.state.streams[id.Topic]
	switch {
	case id.Group != "" || e == nil || id.Partition >= e.settings.PartitionCount:
		return fmt.Errorf("stream partition %v loaded or loading outside the catalogue", id)
	case pe.loaded && len(pe.waiters) > 0:
		return fmt.Errorf("loaded stream partition %v has %d waiters", id, len(pe.waiters))
	case !pe.loaded && len(pe.waiters) == 0 && !n.repairing(id):
		return fmt.Errorf("stream partition %v loading for nobody", id)
	case !n.bootDurable():
		return fmt.Errorf("stream partition %v requested before the boot record is durable", id)
	case pe.settingsSentSeq != 0 || len(pe.held) != 0 || countForwards(pe.waiters) != 0:
		return fmt.Errorf("stream partition %v has queue settings or dead letters", id)
	}
	return nil
}
