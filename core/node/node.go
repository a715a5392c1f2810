package node

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// The Node machine: its state, its entry point, its log. Invariants:
//   - durable state (state: boot, owner id, catalogue, skeletons) changes only
//     through appendRecord, which hands the record to storage and applies it
//     with the very apply NewNode replays, so a restarted Node holds what the
//     live one held at the same index;
//   - session ids only grow, across restarts too: each is handed out under
//     a durable reservation (recordSessionIDs) and a boot starts above it;
//   - nothing that promises durability leaves before storage says its record
//     is durable: DECLARE_QUEUE_OK (Declared), the first load of a queue
//     created now (its data must never exist without its catalogue entry),
//     and every LoadRequest and handshake of this process (they wait for the
//     boot record, so every TagFloor comes from a durable boot count);
//   - gated actions wait in one FIFO in index order, each for the last
//     record appended before it, so they leave in arrival order;
//   - time only moves forward inside the machine (nowMs is the largest seen);
//   - every map is bounded by a Config limit or a named constant, and every
//     effect is emitted in a deterministic order (sorted, or arrival order).
type Node struct {
	cfg   Config
	state durableState
	nowMs int64

	// Log position.
	durableIndex uint64
	// bootIndex is the last of this process's boot records: the boot
	// counter and the first session id reservation (bootDurable).
	bootIndex uint64
	// snapshotBase is the index the newest snapshot covers (0: none);
	// snapshotInflight the one asked for and not answered (0: none).
	snapshotBase     uint64
	snapshotInflight uint64
	gated            []gatedAction

	// Connections and sessions (volatile).
	conns         map[ConnID]*conn
	deadlines     []connDeadline // handshake deadlines, in opening order
	heldHellos    int            // conns whose HELLO waits for the boot record
	sessions      map[SessionID]*sessionEntry
	byClient      map[[16]byte]SessionID
	lastSessionID SessionID
	// sessionIDsDurable: ids up to it are reserved by a durable record
	// (only those are handed out); sessionIDsReserveIndex is the record
	// of the reservation on its way (0: none), one at a time.
	sessionIDsDurable      SessionID
	sessionIDsReserveIndex uint64
	// skeletonSweepAtMs is the earliest time a skeleton reaches the restart
	// TTL (0: none to expire).
	skeletonSweepAtMs int64
	draining          bool
	drainGraceMs      int64
	drainMessage      string
	drainDeadlineMs   int64 // reconnects are accepted until then (PROTOCOL 5.23)

	// Partitions (volatile): loading or loaded, and queues created in this
	// process whose catalogue record is not yet durable.
	partitions map[core.QueueID]*partitionEntry
	creating   map[queueKey]*creatingQueue
	// queueRecordAt is the index of each queue's last catalogue record not
	// yet durable (absent once durable): a declare that changes nothing
	// still waits for it, since "nothing changes" was judged against it.
	queueRecordAt map[queueKey]uint64
	// settingsSeq numbers DeclareSettings; heldDeclares are durable
	// declares waiting for their settings to apply (node_settings.go).
	settingsSeq  uint64
	heldDeclares []heldDeclare
	// forwardsWaiting counts dead-letter copies waiting for a queue record
	// or a load (bounded by deadLetterForwardsMax).
	forwardsWaiting int
	bootWaiters     []bootWaiter
	// cohorts are the exclusive consumer groups (node_cohort.go);
	// cohortsDirty those whose assignment waits for the next Tick;
	// sessionCohorts indexes the cohorts a session has a member in;
	// cohortGenHigh is the highest generation issued.
	cohorts        map[cohortKey]*cohortEntry
	cohortsDirty   map[cohortKey]bool
	sessionCohorts map[SessionID]map[cohortKey]bool
	cohortGenHigh  uint64
	cohortsDueMs   int64 // when the oldest dirty cohort became dirty
	// qops: operator queue operations in progress (node_queueops.go).
	qops queueOpsState
	// quar is the quarantine set (node_quarantine.go).
	quar quarantineState
	// partitionsReported: the declared total last put in a Ready
	// (Ready.Partitions), -1 before the first step.
	partitionsReported int

	// idle is idle queue eviction's bookkeeping (node_idle.go).
	idle idleState
	// rt is the live side of runtime settings and the global dead-letter
	// target (node_runtime.go).
	rt runtimeVolatile

	rd Ready
	// carry keeps the Ready NewNode filled (the boot record) for the first
	// Step instead of resetting it.
	carry bool
}

const (
	// hellosHeldMax bounds HELLOs held until the boot record is durable;
	// one more is refused (ERROR 500) rather than queued without bound.
	hellosHeldMax = 4096
	// deadLetterForwardsMax bounds dead-letter copies the Node holds while
	// their target queue is created or loaded; past it a copy is refused at
	// once (DeadLetterFailed) and its source retries after a backoff.
	deadLetterForwardsMax = 4096
	// opensWaitingMax bounds the Opens and forwards waiting on one
	// partition's load or one queue's catalogue record.
	opensWaitingMax = 65_536
	// snapshotLiveFactor: the Node asks for a snapshot once its log holds
	// more than max(NodeSnapshotRecordsMin, factor x live items) records
	// since the last one, so the log stays proportional to its state.
	snapshotLiveFactor = 4
	// recordsUnpersistedMax bounds the Node's records handed to storage and
	// not yet durable, and so the actions gated on them: past it a declare
	// or a new queue is refused (ErrCatalogBehind) and a skeleton is not
	// saved (best effort). The boot record and removals are always written.
	recordsUnpersistedMax = 4096
	// sessionSeqMax: session ids stay below 2^40 (a session may pack its
	// id with a counter into 64 bits).
	sessionSeqMax = 1<<40 - 1
	// sessionIDsBlock: each reservation record makes this many more
	// session ids usable; the next is written once half are used, so it
	// is normally durable before the ids run out. A boot wastes at most
	// one block: 2^16 x bootMax (2^24) boots fit the 2^40 budget.
	sessionIDsBlock = 1 << 16
)

// gatedKind says what a gated action does once durable.
type gatedKind uint8

const (
	gatedBoot     gatedKind = 1 // answer held HELLOs
	gatedDeclared gatedKind = 2 // answer a DeclareQueue, update loaded partitions
	gatedCreated  gatedKind = 3 // a new queue's record is durable: run its waiters
	gatedRemoved  gatedKind = 4 // a queue's removal is durable (node_queueops.go)
)

type gatedAction struct {
	index    uint64
	kind     gatedKind
	to       Address // gatedDeclared
	declared Declared
	// changed: the declare recorded new settings (gatedDeclared), which
	// the loaded partitions get with the answer.
	changed bool
	key     queueKey // gatedDeclared, gatedCreated
	// stream: a DeclareStream's answer (gatedDeclared), sent as is.
	stream bool
}

// partitionEntry is a partition being loaded or loaded.
type partitionEntry struct {
	loaded  bool
	stream  bool     // a stream partition (no settings, no dead letters)
	waiters []opener // loading only
	// sent is the catalogue settings the LoadRequest carried: a declare
	// during the load is sent on at LoadDone.
	sent catalogSettings
	// Settings sent to the loaded partition and applied by it, by Seq, and
	// the openers waiting for what was sent (node_settings.go).
	settingsSentSeq    uint64
	settingsAppliedSeq uint64
	held               []opener
	// Idle eviction (node_idle.go): sessions holding it open (grants per
	// session), where an eviction is, and what the last sweep saw.
	publishers  map[SessionID]uint32
	idle        idlePhase
	checkSeq    uint64
	wakeMs      int64 // the Host's next deadline, once it said yes
	timerLoad   bool  // loaded for its timer work, with nobody waiting
	lastCleanup string
	subscribers int
	idleMs      int64
	// runtime: the live runtime versions this partition was given, and
	// runtimeSeq the Seq of the PartitionRuntime that carried them (0: its
	// LoadRequest did) (node_runtime.go).
	runtime    runtimeStamp
	runtimeSeq uint64
}

// creatingQueue is a queue created in this process whose catalogue record
// is not yet durable; Opens and forwards of it wait.
type creatingQueue struct {
	index   uint64
	waiters []opener
}

// opener is one party waiting for a partition: a session's Open, or a
// dead-letter copy on its way to its target.
type opener struct {
	partition uint32
	session   Address // an Open
	token     uint64
	forward   *forward // a dead-letter copy
	admin     Message  // an operator request to relay (node_messages.go)
}

type forward struct {
	source core.QueueID
	offset uint64
	body   *core.Body
}

// NewNode rebuilds the Node from its log (see machines.go) and prepares its
// boot record, which the first Step's Ready carries.
func NewNode(cfg Config, snapshot []byte, recovered []Record, entropy [32]byte) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Validate checked the seeds as an operator's change is checked, whether
	// or not this boot records them.
	seeds := RuntimeSeeds(cfg)
	state, err := recoverState(snapshot, recovered)
	if err != nil {
		return nil, err
	}
	if state.boot >= bootMax {
		return nil, fmt.Errorf("node: boot counter %d exhausted", state.boot)
	}
	if state.sessionIDCeiling >= sessionSeqMax {
		return nil, fmt.Errorf("node: session ids exhausted (ceiling %d)", state.sessionIDCeiling)
	}
	n := &Node{
		cfg: cfg, state: state, durableIndex: state.lastIndex,
		conns: map[ConnID]*conn{}, sessions: map[SessionID]*sessionEntry{}, byClient: map[[16]byte]SessionID{},
		partitions: map[core.QueueID]*partitionEntry{}, creating: map[queueKey]*creatingQueue{},
		cohorts: map[cohortKey]*cohortEntry{}, cohortsDirty: map[cohortKey]bool{}, sessionCohorts: map[SessionID]map[cohortKey]bool{},
		queueRecordAt: map[queueKey]uint64{},
		// Every id at or below the ceiling may have been handed out by an
		// earlier process: this one starts above it.
		lastSessionID: SessionID(state.sessionIDCeiling), sessionIDsDurable: SessionID(state.sessionIDCeiling),
		partitionsReported: -1, // the first step reports the recovered total
	}
	if snapshot != nil {
		n.snapshotBase = n.snapshotIndexOf(snapshot)
	}
	if len(state.skeletons) > 0 {
		n.skeletonSweepAtMs = 1 // the first step drops those past the TTL
	}
	// The owner id is minted once, on the first boot, and carried by every
	// boot record after: a resume identity from before a restart still
	// names this broker (PROTOCOL 7.7).
	owner := state.ownerID
	if state.boot == 0 {
		copy(owner[:], entropy[:16]) // first boot: mint the owner id
		setUUIDv4Bits(&owner)
	}
	// A data directory an older broker wrote counted its boots in a file of
	// its own: continue above that count, so that no delivery tag of this
	// run (TagFloor = boot << 40) can equal one handed out before the
	// upgrade.
	boot := max(state.boot, cfg.LegacyBootCount) + 1
	assertHold(boot > state.boot, "the boot counter only grows")
	n.appendRecord(&record{kind: recordBoot, boot: boot, ownerID: owner})
	n.reserveSessionIDs()
	assertHold(n.sessionIDsReserveIndex == n.state.lastIndex, "a boot reserves its first session ids")
	// Before bootIndex: what waits for the boot records waits for the
	// first boot's runtime seeds too.
	n.bootRuntime(seeds)
	n.bootIndex = n.state.lastIndex
	n.gate(gatedAction{kind: gatedBoot})
	n.requestPendingRemovals() // node_queueops.go
	n.carry = true
	return n, nil
}

// recoverState replays a snapshot and the records after it.
func recoverState(snapshot []byte, recovered []Record) (durableState, error) {
	state := newDurableState()
	if snapshot != nil {
		var err error
		if state, err = decodeSnapshot(snapshot); err != nil {
			return state, err
		}
	}
	for i := range recovered {
		rec := &recovered[i]
		if rec.Index <= state.lastIndex {
			continue // the snapshot covers it
		}
		if rec.Index != state.lastIndex+1 {
			return state, fmt.Errorf("node: record %d after %d: %w", rec.Index, state.lastIndex, core.ErrNonContiguousLog)
		}
		r, err := decodeRecord(rec.Data)
		if err != nil {
			return state, fmt.Errorf("node: record %d: %w", rec.Index, err)
		}
		if err := checkApplicable(&state, r); err != nil {
			return state, fmt.Errorf("node: record %d: %w", rec.Index, err)
		}
		state.apply(rec.Index, r)
	}
	return state, nil
}

// checkApplicable reports a decoded record its state cannot take (apply
// would panic on it): the log contradicts itself.
func checkApplicable(s *durableState, r *record) error {
	switch r.kind {
	case recordBoot:
		if r.boot <= s.boot {
			return fmt.Errorf("%w: boot %d after %d", ErrCorruptRecord, r.boot, s.boot)
		}
	case recordQueue:
		if old := s.queues[r.queue.key]; old != nil && old.partitions != r.queue.partitions {
			return fmt.Errorf("%w: queue %v changed its partition count", ErrCorruptRecord, r.queue.key)
		}
		if s.streams[r.queue.key.Topic] != nil {
			return fmt.Errorf("%w: queue %v on a stream's topic", ErrCorruptRecord, r.queue.key)
		}
	case recordStream:
		if old := s.streams[r.stream.topic]; old != nil && old.settings != r.stream.settings {
			return fmt.Errorf("%w: stream %q changed its settings", ErrCorruptRecord, r.stream.topic)
		}
		if s.queueTopics[r.stream.topic] > 0 {
			return fmt.Errorf("%w: stream %q is a queue's topic", ErrCorruptRecord, r.stream.topic)
		}
	case recordQueueRemoved:
		if !checkRemovalApplicable(s, r) {
			return fmt.Errorf("%w: removal of queue %v, which is not in the catalogue", ErrCorruptRecord, *r.queueKey)
		}
	case recordSessionIDs:
		if r.sessionIDCeiling <= s.sessionIDCeiling {
			return fmt.Errorf("%w: session id ceiling %d after %d", ErrCorruptRecord, r.sessionIDCeiling, s.sessionIDCeiling)
		}
	case recordRuntime, recordGlobalDLQ:
		return checkRuntimeApplicable(s, r)
	}
	return nil
}

// snapshotIndexOf is the index a snapshot covers (already decoded once by
// recoverState, so it cannot fail here).
func (n *Node) snapshotIndexOf(snapshot []byte) uint64 {
	s, err := decodeSnapshot(snapshot)
	assertHold(err == nil, "the snapshot decoded once already")
	return s.lastIndex
}

// setUUIDv4Bits marks 16 random bytes as a version 4 UUID.
func setUUIDv4Bits(u *[16]byte) {
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
}

// OwnerID is this broker's identity (HELLO_OK owner_id).
func (n *Node) OwnerID() [16]byte { return n.state.ownerID }

// Boot is this process's boot counter (TagFloor = Boot << 40).
func (n *Node) Boot() uint64 { return n.state.boot }

// Step feeds one input and returns its effects (see Ready).
func (n *Node) Step(in Input) *Ready {
	if n.carry {
		n.carry = false
	} else {
		n.resetReady()
	}
	if now := in.nowMs(); now > n.nowMs {
		n.nowMs = now
	}
	switch in := in.(type) {
	case *Tick:
	case *Persisted:
		n.onPersisted(in)
	case *SnapshotDone:
		n.onSnapshotDone(in)
	case *ConnOpened:
		n.onConnOpened(in)
	case *ConnClosed:
		n.onConnClosed(in)
	case *Frame:
		n.onFrame(in)
	case *Deliver:
		n.onDeliver(in)
	case *Bounced:
		n.onBounced(in)
	case *LoadDone:
		n.onLoadDone(in)
	case *Drain:
		n.onDrain(in)
	case *RemoveDone: // node_queueops.go
		n.onRemoveDone(in)
	case *UnloadDone:
		n.onUnloadDone(in)
	default:
		panic(fmt.Sprintf("fibril/core/node invariant violated: the Node takes no %T", in))
	}
	if _, tick := in.(*Tick); tick {
		// Assignments run at a Tick, which the Node asks for at once when a
		// cohort changed: the joins and leaves queued before it (a member
		// subscribing to every partition) are assigned together.
		n.assignCohorts()
	}
	n.idleStep()
	n.releaseRuntimeAnswers() // node_runtime.go
	n.expireHandshakes()
	n.expireSkeletons()
	n.maybeSnapshot()
	n.reportPartitions()
	n.rd.WakeMs = n.nextWakeMs()
	return &n.rd
}

// reportPartitions puts the partition figures in this step's Ready when the
// declared total moved since the last report: a declare, a stream, an
// operator's delete, or the first step after recovery.
func (n *Node) reportPartitions() {
	if n.state.partitionsTotal == n.partitionsReported {
		return
	}
	assertHold(n.state.partitionsTotal >= 0, "the partition total never goes negative")
	n.partitionsReported = n.state.partitionsTotal
	n.rd.Partitions = &PartitionFigures{Declared: n.state.partitionsTotal, Max: n.cfg.PartitionsMax}
}

// resetReady empties the Ready for the next step, keeping its backing
// arrays (a busy Node steps for every frame of every handshake).
func (n *Node) resetReady() {
	clear(n.rd.Out) // drop references to bodies
	n.rd = Ready{
		Start: n.rd.Start[:0], Bind: n.rd.Bind[:0], Persist: n.rd.Persist[:0], Sends: n.rd.Sends[:0],
		Close: n.rd.Close[:0], Out: n.rd.Out[:0], Load: n.rd.Load[:0], Remove: n.rd.Remove[:0], Unload: n.rd.Unload[:0],
	}
}

// onDeliver dispatches an envelope from a session or a Host. The set is
// closed: anything else is a driver or machine bug.
func (n *Node) onDeliver(in *Deliver) {
	from := in.Envelope.From
	switch msg := in.Envelope.Msg.(type) {
	case *Open:
		n.onOpen(from, msg)
	case *DeclareQueue:
		n.onDeclareQueue(from, msg)
	case *DeclareStream:
		n.onDeclareStream(from, msg)
	case *AttachRefused:
		n.onAttachRefused(msg.Conn, msg.HelloRequestID)
	case *SessionEnded:
		n.onSessionEnded(from)
	case *SkeletonChanged:
		n.onSkeletonChanged(from, msg)
	case *DeadLetterOut:
		n.onDeadLetterOut(from, msg)
	case *SettingsApplied:
		n.onSettingsApplied(from, msg)
	case *CohortJoin:
		n.onCohortJoin(from, msg)
	case *CohortLeave:
		n.onCohortLeave(from, msg)
	case *BrowseMessages, *ReadDeadLetters, *ScanDeadLetters, *OperatorPublish, *CompleteMessage,
		*SetQueueDLQ, *QueueSettingsOf, *PurgeQueue:
		n.onOperatorRequest(from, msg) // node_messages.go
	// Operator queue operations (node_queueops.go).
	case *ListQueues:
		n.onListQueues(from)
	case *AdminPublish:
		n.onAdminPublish(from, msg)
	case *DeleteQueue:
		n.onDeleteQueue(from, msg)
	case *InflightCount:
		n.onInflightCount(from, msg)
	case *RepairQuarantine:
		n.onRepairQuarantine(from, msg)
	case *UnloadAnswer:
		n.onUnloadAnswer(from, msg)
	case *PublisherGone:
		n.onPublisherGone(from, msg)
	case *QueuesDebugRequest:
		n.onQueuesDebug(from)
	case *CohortsRequest:
		n.onCohortsRequest(from) // node_cohort_list.go
	case *GetRuntimeSettings:
		n.onGetRuntimeSettings(from) // node_runtime.go
	case *PutRuntimeSettings:
		n.onPutRuntimeSettings(from, msg)
	case *GetGlobalDLQ:
		n.onGetGlobalDLQ(from)
	case *PutGlobalDLQ:
		n.onPutGlobalDLQ(from, msg)
	default:
		panic(fmt.Sprintf("fibril/core/node invariant violated: the Node takes no %T envelope", msg))
	}
}

// onBounced: an envelope of ours found no receiver.
func (n *Node) onBounced(in *Bounced) {
	switch msg := in.Envelope.Msg.(type) {
	case *Attach:
		// The session ended and was dropped before our Attach reached it.
		n.onAttachRefused(msg.Conn, msg.HelloRequestID)
	case *StoreDeadLetter:
		// The target partition is gone: the source retries after a backoff.
		n.send(PartitionAddr(msg.Source), &DeadLetterFailed{Offset: msg.Offset, Err: core.ErrPartitionLoadFailed})
	case *DeclareSettings:
		n.onSettingsBounced(in.Envelope.To.Queue, msg)
	case *BrowseMessages, *ReadDeadLetters, *ScanDeadLetters, *OperatorPublish, *CompleteMessage,
		*PurgeQueue, *AdminPublish:
		// The partition went away between its load and the relay: the
		// operator is told, and may ask again (which loads it).
		n.refuseOperator(msg, core.ErrPartitionLoadFailed)
	case *OperatorRefused, *QueueSettings:
		// An operator address never bounces; nothing waits here anyway.
	case *InflightQuery:
		n.inflightAnswered(in.Envelope.To.Queue, msg.Token, 0) // gone, and its leases with it
	case *PartitionDeleted, *QueueList, *QueueDeleteResult:
		// The partition stopped already; an operator that gave up.
	case *Opened:
		// The session ended before the grant reached it: it will never
		// forget it (node_idle.go).
		if msg.Err == nil && msg.Kind == KindQueue {
			n.ungrantOpen(msg.Queue, in.Envelope.To.Session)
		}
	case *UnloadCheck:
		n.onUnloadCheckBounced(in.Envelope.To.Queue, msg)
	case *ReleaseIdle, *QueuesDebug, *UnloadCancel:
		// The session ended (its grants went with its Forgets), or the
		// operator gave up waiting.
	case *PartitionRuntime:
		n.onPartitionRuntimeBounced(in.Envelope.To.Queue, msg) // node_runtime.go
	case *SessionRuntime, *RuntimeSettingsState, *GlobalDLQState:
		// The session ended (a new one starts with the live grace), or the
		// operator gave up waiting: the change stands either way.
	case *Declared, *ShuttingDown, *DeadLetterFailed, *CohortJoined, *AssignmentNotice, *SetOwner, *QuarantineRepaired:
		// CohortJoined, AssignmentNotice: the session ended (its
		// SessionEnded cleans its cohorts up). SetOwner: the partition was
		// unloaded; its subscriptions went with it, and so will their
		// members' (CohortLeave).
		// The session or partition is gone: nobody waits for the answer. A
		// partition that was unloaded reads the catalogue when it loads again.
	default:
		panic(fmt.Sprintf("fibril/core/node invariant violated: the Node never sent a %T", msg))
	}
}

// send appends an envelope from the Node; the driver keeps FIFO order per
// receiver, which the Opened and Declared answers rely on.
func (n *Node) send(to Address, msg Message) {
	n.rd.Out = append(n.rd.Out, Envelope{From: NodeAddr(), To: to, Msg: msg})
}

// ---- the log

// appendRecord stamps r with the next index, hands it to storage and
// applies it. The encoding is decoded back first: a record this Node could
// not read after a restart is a bug caught before it is written.
func (n *Node) appendRecord(r *record) uint64 {
	data := appendRecord(nil, r)
	back, err := decodeRecord(data)
	assertHold(err == nil, "a record decodes as it was encoded")
	assertHold(back.kind == r.kind, "a record keeps its kind")
	index := n.state.lastIndex + 1
	n.state.apply(index, r)
	n.rd.Persist = append(n.rd.Persist, Record{Index: index, Data: data})
	return index
}

// gate holds g until the last appended record is durable.
func (n *Node) gate(g gatedAction) {
	g.index = n.state.lastIndex
	assertHold(g.index > n.durableIndex, "a gated action waits for a record not yet durable")
	assertHold(len(n.gated) == 0 || n.gated[len(n.gated)-1].index <= g.index, "gated actions wait in index order")
	n.gated = append(n.gated, g)
}

// bootDurable says whether this process's boot records are durable: until
// they are, no handshake is answered and no partition is loaded, so no
// delivery tag of this boot can collide with one of a boot a crash forgot,
// and the first session ids are reserved.
func (n *Node) bootDurable() bool { return n.durableIndex >= n.bootIndex }

// storageBehind says whether storage is too far behind for one more record
// that can wait (a declare, a new queue, a skeleton).
func (n *Node) storageBehind() bool {
	return n.state.lastIndex-n.durableIndex >= recordsUnpersistedMax
}

// onPersisted moves the durable index and releases, in order, every gated
// action whose record is now durable.
func (n *Node) onPersisted(in *Persisted) {
	assertHold(in.UpToIndex <= n.state.lastIndex, "storage cannot make durable what was never appended")
	if in.UpToIndex <= n.durableIndex {
		return // a late or repeated report
	}
	n.durableIndex = in.UpToIndex
	// Before the gate: the boot's held HELLOs need the reserved ids.
	if n.sessionIDsReserveIndex != 0 && n.sessionIDsReserveIndex <= n.durableIndex {
		n.sessionIDsDurable = SessionID(n.state.sessionIDCeiling) // the one reservation on its way
		n.sessionIDsReserveIndex = 0
	}
	released := 0
	for released < len(n.gated) && n.gated[released].index <= n.durableIndex {
		n.release(&n.gated[released])
		released++
	}
	clear(n.gated[:released])
	n.gated = n.gated[released:]
}

// release carries out one gated action.
func (n *Node) release(g *gatedAction) {
	switch g.kind {
	case gatedBoot:
		n.answerHeldHellos()
		waiters := n.bootWaiters
		n.bootWaiters = nil
		for _, w := range waiters {
			if w.o.forward == nil && n.isStream(w.key) {
				n.openStream(w.key, w.o)
				continue
			}
			n.openQueue(w.key, w.o)
		}
	case gatedDeclared:
		if g.stream {
			answer := g.declared  // g is cleared once released
			n.send(g.to, &answer) // a stream has no settings to apply
			break
		}
		// The settings go out first: the answer waits for them.
		if g.changed {
			n.updateLoadedPartitions(g.key)
		}
		n.answerDeclared(g.to, g.declared, g.key)
	case gatedCreated:
		n.queueCreated(g.key)
	case gatedRemoved:
		n.queueRemoved(g)
	case gatedRuntime:
		n.releaseRuntime(g.index) // node_runtime.go
	}
	// Every queue record is followed by a gate on it, so the release of
	// that gate is where the queue's last record becomes durable.
	if at, ok := n.queueRecordAt[g.key]; ok && g.kind != gatedBoot && at <= n.durableIndex {
		delete(n.queueRecordAt, g.key)
	}
}

// ---- snapshots

// maybeSnapshot asks for a snapshot once the log holds many more records
// than the state needs; one at a time.
func (n *Node) maybeSnapshot() {
	if n.snapshotInflight != 0 {
		return
	}
	if len(n.state.tombstones) > 0 {
		return // tombstones are not in the snapshot format (record_queueops.go)
	}
	// The live state is one record per queue and skeleton, plus the boot
	// record: that is what a snapshot replaces.
	assertHold(n.state.lastIndex >= n.snapshotBase, "a snapshot never covers records not yet appended")
	live := len(n.state.queues) + len(n.state.streams) + len(n.state.skeletons) + 1
	if n.state.lastIndex-n.snapshotBase <= uint64(max(n.cfg.NodeSnapshotRecordsMin, snapshotLiveFactor*live)) {
		return
	}
	n.snapshotInflight = n.state.lastIndex
	n.rd.Snapshot = &SnapshotRequest{Index: n.state.lastIndex, Data: appendSnapshot(nil, &n.state)}
}

// onSnapshotDone: storage wrote (or failed to write) the snapshot asked for.
func (n *Node) onSnapshotDone(in *SnapshotDone) {
	if in.Index != n.snapshotInflight || n.snapshotInflight == 0 {
		return // not ours, or already answered
	}
	n.snapshotInflight = 0
	// On an error too the count starts again from this index: the log keeps
	// every record, and the next try comes after as many records again
	// rather than at every step.
	assertHold(in.Index > n.snapshotBase, "snapshots only move forward")
	n.snapshotBase = in.Index
}

// LogState encodes the state the Node's records built (durable or not),
// as its snapshot does: tests and the simulator compare it with a Node
// recovered from the durable prefix.
func (n *Node) LogState() []byte { return appendSnapshot(nil, &n.state) }

// nextWakeMs is the earliest deadline the Node waits for (0 = none).
func (n *Node) nextWakeMs() int64 {
	var wake int64
	if len(n.deadlines) > 0 {
		wake = n.deadlines[0].atMs
	}
	if at := n.nextSkeletonExpiryMs(); at != 0 && (wake == 0 || at < wake) {
		wake = at
	}
	if at := n.cohortsWakeMs(); at != 0 && (wake == 0 || at < wake) {
		wake = at
	}
	if at := n.idleWakeMs(); at != 0 && (wake == 0 || at < wake) {
		wake = at
	}
	return wake
}
