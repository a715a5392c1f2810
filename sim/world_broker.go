package sim

import (
	"fmt"
	"strings"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// The world's side of the node-core driver: broker processes, client peers,
// the byte-stream fabric, and the node config every broker runs. Invariants:
//   - producers and consumers start only once the declarer has every queue
//     of the scenario declared (DECLARE_QUEUE_OK), so no queue is created
//     implicitly with the wrong partition count;
//   - the run is quiescent when every broker is up with nothing live, no
//     entry unsynced, no envelope, chunk or round in flight.

// simFramePayloadBytesMax is the frame cap the simulated brokers enforce:
// small, so an outbox bound of a few frames makes slow consumers matter.
const simFramePayloadBytesMax = 16 << 10

// nodeConfig is the node-core config every broker of the run uses.
func (w *World) nodeConfig() node.Config {
	cfg := node.DefaultConfig()
	k := &w.scenario.Broker
	cfg.ServerName = "fibril-sim"
	cfg.FramePayloadBytesMax = simFramePayloadBytesMax
	cfg.OutboxBytesMax = 16 * simFramePayloadBytesMax
	// Below half the outbox, so that stream credit pauses on its own bound.
	cfg.StreamCreditOutboxBytesMax = 4 * simFramePayloadBytesMax
	cfg.HeartbeatIntervalMs = 1000
	cfg.HandshakeTimeoutMs = 2000
	cfg.AuthTimeoutMs = 2000
	cfg.ReconnectGraceMs = 1000
	cfg.ResumeRestartTTLMs = 60_000
	cfg.ResidentPayloadBytesMax = 16 << 10
	cfg.SnapshotEntriesMin = 400
	cfg.DeadLetterRetryMinMs = 5
	cfg.DeadLetterRetryMaxMs = 500
	set64 := func(dst *int64, v int64) {
		if v != 0 {
			*dst = v
		}
	}
	set64(&cfg.ReconnectGraceMs, k.ReconnectGraceMs)
	if k.NoReconnectGrace {
		cfg.ReconnectGraceMs = 0
	}
	set64(&cfg.ResumeRestartTTLMs, k.ResumeRestartTTLMs)
	set64(&cfg.HeartbeatIntervalMs, k.HeartbeatIntervalMs)
	set64(&cfg.HandshakeTimeoutMs, k.HandshakeTimeoutMs)
	set64(&cfg.AuthTimeoutMs, k.AuthTimeoutMs)
	set64(&cfg.ResidentPayloadBytesMax, k.ResidentPayloadBytesMax)
	set64(&cfg.DeadLetterRetryMaxMs, k.DeadLetterRetryMaxMs)
	if k.OutboxBytesMax != 0 {
		cfg.OutboxBytesMax = k.OutboxBytesMax
	}
	if k.ConnectionsMax != 0 {
		cfg.ConnectionsMax = k.ConnectionsMax
	}
	if k.SnapshotEntriesMin != 0 {
		cfg.SnapshotEntriesMin = k.SnapshotEntriesMin
	}
	if k.IdleCleanup.Enabled {
		cfg.IdleCleanup = k.IdleCleanup
	}
	// Small segments, ring, window and reads: sealing, retention,
	// backfill from the log and full windows all happen in short runs.
	cfg.StreamPartition.SegmentRecordsMax = 24
	cfg.StreamPartition.TailBytesMax = 3000
	cfg.StreamPartition.SubWindowMax = 16
	cfg.StreamPartition.ReadBatchMax = 12
	cfg.Partition = core.DefaultConfig(core.QueueID{Topic: "template"})
	cfg.Partition.LeaseMs = w.scenario.LeaseMs
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("sim: scenario %s gives an invalid node config: %v", w.scenario.Name, err))
	}
	return cfg
}

// partitionConfig applies the scenario's per-queue limits to the config
// the Node asked a partition to be loaded with (in production they come
// from the broker's config file).
func (w *World) partitionConfig(cfg core.Config) core.Config {
	if i := w.partIndex(cfg.Queue); i >= 0 {
		if d := w.catalogue[i].queue.QueueDepthMax; d > 0 {
			cfg.QueueDepthMax = d
		}
	}
	return cfg
}

// partIndex is the catalogue index of q, or -1.
func (w *World) partIndex(q core.QueueID) int {
	for i, spec := range w.catalogue {
		if spec.queueID.Topic == q.Topic && spec.queueID.Group == q.Group && spec.queueID.Partition == q.Partition {
			return i
		}
	}
	return -1
}

// setupBrokers builds the node-core run: brokers, the declarer, then the
// producers and consumers once every queue is declared.
func (w *World) setupBrokers() {
	sc := w.scenario
	w.nodeCfg = w.nodeConfig()
	w.fabric = &Fabric{w: w, rng: w.rng.Fork()}
	b := newBroker(w, 1, w.rng.Fork())
	w.brokers = append(w.brokers, b)
	b.boot()
	id := uint32(0)
	for i := 0; i < sc.Workload.Producers; i++ {
		id++
		w.peers = append(w.peers, newPeer(w, id, roleProducer, b, w.rng.Fork()))
	}
	for i := 0; i < sc.Workload.Consumers; i++ {
		id++
		w.peers = append(w.peers, newPeer(w, id, roleConsumer, b, w.rng.Fork()))
	}
	for i := 0; i < sc.Workload.Cohort.Members; i++ {
		id++
		p := newPeer(w, id, roleCohortMember, b, w.rng.Fork())
		p.newCohortMember(i)
		w.peers = append(w.peers, p)
	}
	for i := 0; i < sc.Workload.Rogues; i++ {
		id++
		w.peers = append(w.peers, newPeer(w, id, roleRogue, b, w.rng.Fork()))
	}
	for i := 0; i < sc.Workload.Stream.Producers; i++ {
		id++
		w.peers = append(w.peers, newPeer(w, id, roleStreamProducer, b, w.rng.Fork()))
	}
	for i := 0; i < sc.Workload.Stream.Subscribers; i++ {
		id++
		p := newPeer(w, id, roleStreamSubscriber, b, w.rng.Fork())
		p.newStreamSubs(i)
		w.peers = append(w.peers, p)
	}
	id++
	w.declarer = newPeer(w, id, roleDeclarer, b, w.rng.Fork())
	w.after(1, w.declarer.start)
	w.startFaultProcesses()
	w.schedule(sc.Schedule)
	if w.inspect {
		w.inspector = w.startInspector(b) // operator.go
	}
	w.scheduleOperator(b) // operator_runtime.go
	w.at(sc.Workload.SafetyPhaseMs, w.startLiveness)
	w.at(sc.Workload.SafetyPhaseMs+sc.Workload.LivenessPhaseMaxMs, func() { w.stopped = true })
}

// declaredAll: the declarer is done; the clients start.
func (w *World) declaredAll(p *Peer) {
	if w.clientsStarted {
		return
	}
	w.clientsStarted = true
	w.note("every queue declared: clients start")
	p.retired = true // the declarer does not reconnect
	p.drop("declarer done")
	for _, c := range w.peers {
		c := c
		w.after(w.rng.RangeInt64(0, 20), c.start)
	}
}

// isQuiescentBrokers: every broker is up, nothing is live or unsynced,
// nothing is in flight.
func (w *World) isQuiescentBrokers() bool {
	if w.fabric.inFlight > 0 || !w.clientsStarted {
		return false
	}
	for _, b := range w.brokers {
		if !b.up || b.envelopesInFlight > 0 || b.store.busy() {
			return false
		}
		for _, h := range b.hostOrder {
			if h.m.Partition().Live() > 0 || h.shadow.appended != h.shadow.synced {
				return false
			}
		}
		// A partition written to and not loaded now may hold live messages
		// nobody is draining.
		for _, ps := range b.sortedShadows() {
			if b.hosts[ps.queue] == nil && !ps.evictedEmpty {
				return false
			}
		}
	}
	if !w.streamsQuiescent() {
		return false
	}
	// Every consumer and cohort member is attached and subscribed everywhere.
	for _, p := range w.peers {
		if p.role != roleConsumer && p.role != roleCohortMember {
			continue
		}
		if p.state != stateReady {
			return false
		}
		for _, s := range p.subs {
			if !s.active {
				return false
			}
		}
	}
	return true
}

func (w *World) stuckReportBrokers() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "not drained %dms into the liveness phase:", w.scenario.Workload.LivenessPhaseMaxMs)
	fmt.Fprintf(&sb, " chunks in flight %d;", w.fabric.inFlight)
	if !w.clientsStarted {
		sb.WriteString(" the queues were never all declared;")
	}
	for _, b := range w.brokers {
		if !b.up {
			fmt.Fprintf(&sb, " broker %d down;", b.id)
			continue
		}
		fmt.Fprintf(&sb, " broker %d envelopes %d round %+v storage busy %v;", b.id, b.envelopesInFlight, b.store.round, b.store.busy())
		for _, h := range b.hostOrder {
			if live := h.m.Partition().Live(); live > 0 || h.shadow.appended != h.shadow.synced {
				fmt.Fprintf(&sb, " %s live %d appended %d synced %d;", h.queue, live, h.shadow.appended, h.shadow.synced)
			}
		}
		for _, ps := range b.sortedShadows() {
			if b.hosts[ps.queue] == nil {
				fmt.Fprintf(&sb, " %s not loaded;", ps.queue)
			}
		}
	}
	w.streamStuckReport(&sb)
	for _, p := range w.peers {
		if (p.role == roleConsumer || p.role == roleCohortMember) && p.state != stateReady {
			fmt.Fprintf(&sb, " client %d not attached (state %d);", p.id, p.state)
		}
		for _, s := range p.subs {
			if !s.active {
				fmt.Fprintf(&sb, " client %d not subscribed to %s (sub %d pending %v);", p.id, w.catalogue[s.part].queueID, s.id, s.pending)
			}
		}
	}
	return sb.String()
}

// finishBrokers records the end state of every partition. Each partition
// is recovered once more from its storage after a final process crash, so
// the storage's recovery is judged against what was written (KindRecover);
// each message's final state then comes from the entries that survived,
// applied here independently of the core.
func (w *World) finishBrokers() {
	for _, b := range w.brokers {
		if !b.up {
			continue
		}
		if w.quiescent {
			b.recordStreamFinal()
		}
		b.store.crash(false)
		for _, ps := range b.sortedShadows() {
			if _, _, err := b.store.openPartition(ps, ps.cfg, false); err != nil {
				w.abort(fmt.Sprintf("broker %d: final recovery of %s: %v", b.id, ps.queue, err))
				return
			}
			b.recordFinal(ps)
		}
	}
}

func (b *Broker) recordFinal(ps *partShadow) {
	type finalMsg struct {
		msgID   uint64
		outcome string
		reason  string
	}
	var msgs []finalMsg
	for i := range ps.shadow {
		e := &ps.shadow[i]
		if e.Kind == core.EntryPublish {
			for uint64(len(msgs)) <= e.Offset {
				msgs = append(msgs, finalMsg{})
			}
			msgs[e.Offset] = finalMsg{msgID: bodyMsgID(e.Body), outcome: checker.OutcomeLive}
			continue
		}
		if e.Offset >= uint64(len(msgs)) {
			continue // settings entries carry no offset
		}
		m := &msgs[e.Offset]
		switch e.Kind {
		case core.EntryAck, core.EntryAutoAck:
			m.outcome = checker.OutcomeAcked
		case core.EntryDiscard:
			m.outcome, m.reason = checker.OutcomeDiscarded, core.DLQReason(e.Cause).String()
		case core.EntryDeadLetter:
			m.outcome, m.reason = checker.OutcomePendingDLQ, core.DLQReason(e.Cause).String()
		case core.EntryDeadLettered:
			m.outcome = checker.OutcomeDeadLettered
		case core.EntryLease, core.EntryRequeue, core.EntryRelease:
			m.outcome = checker.OutcomeLive
		}
	}
	for offset, m := range msgs {
		b.w.rec.add(checker.Event{Kind: checker.KindFinal, Node: b.id, Part: ps.part, Offset: uint64(offset),
			MsgID: m.msgID, Outcome: m.outcome, Reason: m.reason})
	}
}
