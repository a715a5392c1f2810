package node

import (
	"fmt"
	"slices"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
)

// The Host machine: one loaded queue partition and everything the driver
// must not decide about it. Invariants:
//   - the core partition is stepped only here, and every effect of each of
//     its steps is routed before the next (its Ready is reused);
//   - subs is exactly the core's set of subscriptions, each with the
//     session that owns it: a Subscribe registers its owner before the
//     core's step (so deliveries of that very step are routed) and a refusal
//     forgets it after; an Unsubscribe forgets it after the core's step;
//   - a reference (Ref) answers at most once: the first reply to it is
//     routed and the reference forgotten; one whose input can reply only in
//     its own step (all but a confirmed publish) is forgotten after it;
//   - a source message is settled (DeadLetterDone) only after its copy was
//     reported stored; a copy is never given up: refused copies are sent
//     again after a backoff, and at most DeadLettersInflightMax are on their
//     way at once, the rest wait in order;
//   - at most one snapshot is asked for at a time.
type Host struct {
	cfg Config
	p   *core.Partition
	// step steps p: p.Step, or the simulator's deliberately broken wrapper
	// of it (NewHostStepping).
	step  func(core.Input) *core.Ready
	queue core.QueueID
	nowMs int64

	subs    map[uint64]Address // SubID -> owning session
	refs    map[uint64]hostRef // Ref -> who waits for the reply
	nextRef uint64

	// Dead-letter copies of this partition's messages: dlq holds each copy
	// until it is stored; dlqWaiting lists, in order, those waiting for a
	// slot (dlqHead is the first still waiting).
	dlq         map[uint64]*deadLetterCopy
	dlqWaiting  []uint64
	dlqHead     int
	dlqActive   int // copies on their way or waiting for a retry
	dlqRetrying int
	// dlqStoredWaiting counts listed offsets whose copy was stored before
	// its turn (dlqWaiting skips them).
	dlqStoredWaiting int

	// Snapshot policy. snapshotBase is the index the last snapshot asked
	// for covers (0 after a load: the Host does not know where storage's
	// snapshot is, so it counts the whole log); loadIndex is the last index
	// when loaded (nothing at or below it is asked for again);
	// snapshotInflight the index asked for and not answered (0 = none).
	snapshotBase     uint64
	loadIndex        uint64
	snapshotInflight uint64

	coreWakeMs       int64
	residentReported int64
	rd               Ready
	// grouped maps a SubID to its Deliveries envelope in rd.Out during one
	// Step: one envelope per subscription per step.
	grouped map[uint64]int
	carry   bool
	// Inputs the Host feeds its partition, reused: the core keeps none.
	inTick      core.Tick
	inPersisted core.Persisted
	// answers gathers a step's answers per session (answers.go).
	answers answerBatch
	// deleted: the queue's removal is durable (host_queueops.go).
	deleted bool
	// Idle eviction (host_idle.go): the last use, and released once the
	// Host agreed to be unloaded.
	lastActiveMs int64
	released     bool
	// leaseExpiredSeen is the partition's lease-expiry count already
	// reported in a Ready (LeaseExpiries).
	leaseExpiredSeen uint64
}

// hostRefKind says who waits for a reply.
type hostRefKind uint8

const (
	refSession    hostRefKind = 1 // a session's Request with a Token
	refDeadLetter hostRefKind = 2 // a StoreDeadLetter this Host publishes
)

// It is kept small (32 bytes, not 120): a busy partition holds one per
// unconfirmed publish, and a wide map entry made every publish's two map
// accesses miss the cache.
type hostRef struct {
	kind    hostRefKind
	session SessionID // refSession: the session that asked
	token   uint64    // refSession: its token
	// refDeadLetter: the copy's source partition and offset (rare).
	deadLetter *deadLetterRef
}

// deadLetterRef is where a dead-letter copy stored here came from.
type deadLetterRef struct {
	source core.QueueID
	offset uint64
}

// copyState says where a dead-letter copy is.
type copyState uint8

const (
	copyWaiting  copyState = 1 // for a slot
	copySent     copyState = 2 // DeadLetterOut sent, no answer yet
	copyRetrying copyState = 3 // refused; sent again at retryAtMs
)

type deadLetterCopy struct {
	letter    core.DeadLetter
	state     copyState
	attempts  int
	backoffMs int64
	retryAtMs int64
}

// snapshotLiveFactor (as logstore.SnapshotLiveFactor): a partition waits for
// this many entries per live message between snapshots, so the bytes written
// for snapshots stay a fraction of the log's.
const hostSnapshotLiveFactor = 4

// NewHost wraps a partition recovered from storage. If the catalogue's
// settings (req.Settings) differ from the partition's, a Declare brings
// them in first; then a Tick re-emits the dead-letter copies recovery left
// pending. What those steps produce is carried in the Ready of the Host's
// first Step: the driver steps a new Host at once (a Tick).
func NewHost(cfg Config, p *core.Partition, req LoadRequest) *Host {
	return NewHostStepping(cfg, p, req, nil)
}

// NewHostStepping is NewHost with every step of p going through step (nil:
// p.Step). The simulator wraps the partition's Step this way to build
// deliberately broken variants (mutants) and show that its checker catches
// each; step must step p and nothing else.
func NewHostStepping(cfg Config, p *core.Partition, req LoadRequest, step func(core.Input) *core.Ready) *Host {
	assertHold(p != nil, "a Host wraps a partition")
	if step == nil {
		step = p.Step
	}
	assertHold(p.Config().Queue == req.Queue, "a Host wraps the partition it was loaded for")
	h := &Host{
		cfg: cfg, p: p, step: step, queue: req.Queue,
		subs: map[uint64]Address{}, refs: map[uint64]hostRef{}, dlq: map[uint64]*deadLetterCopy{},
		grouped: map[uint64]int{}, loadIndex: p.LastIndex(), carry: true,
	}
	// The catalogue is the truth for settings: a declare made while this
	// partition was not loaded, or whose Declare entry a crash lost, is
	// applied before any request.
	if in := declareInput(req.Settings, p.Settings()); in != nil {
		h.stepCore(in)
	}
	// The same for the global dead-letter target (host_runtime.go); the
	// lease and expiry batch came in req.Config.
	h.applyGlobalDLQ(req.GlobalDLQ)
	// NowMs 0: the core keeps the largest time seen, so this Tick moves no
	// clock; it only makes recovery emit its pending dead-letter copies.
	h.stepCore(&core.Tick{})
	h.finishStep()
	return h
}

// Partition returns the core partition (tests, the simulator's checks).
func (h *Host) Partition() *core.Partition { return h.p }

// Step feeds one input and returns its effects (see Ready).
func (h *Host) Step(in Input) *Ready {
	if h.carry {
		h.carry = false
	} else {
		h.resetReady()
	}
	// The clock only moves forward: a driver input stamped earlier (reordered
	// across queues) must not move a lease deadline back.
	if now := in.nowMs(); now > h.nowMs {
		h.nowMs = now
	}
	if h.lastActiveMs == 0 {
		h.lastActiveMs = h.nowMs // loaded: the idle window starts now
	}
	switch in := in.(type) {
	case *Tick:
		if h.released {
			break // the Node holds the deadline (host_idle.go)
		}
		h.fireRetries()
		h.inTick = core.Tick{NowMs: h.nowMs}
		h.stepCore(&h.inTick)
	case *Deliver:
		h.onDeliver(in.Envelope)
	case *Bounced:
		h.onBounced(in.Envelope)
	case *Persisted:
		h.inPersisted = core.Persisted{NowMs: h.nowMs, UpToIndex: in.UpToIndex}
		h.stepCore(&h.inPersisted)
		// Spill only after the core saw the entries durable: a payload may be
		// swapped for its stored ref only once storage really holds it.
		h.spill(in.Stored, in.ResidentTotalBytes)
	case *SnapshotDone:
		h.onSnapshotDone(in)
	default:
		panic(fmt.Sprintf("fibril/core/node invariant violated: a Host takes no %T", in))
	}
	h.finishStep()
	return &h.rd
}

// finishStep ends every Step (and NewHost): the snapshot policy, the
// resident bytes for the broker-wide budget, and the wake-up, the earlier of
// the core's and the next dead-letter retry.
func (h *Host) finishStep() {
	h.maybeSnapshot()
	h.residentReported = h.p.ResidentPayloadBytes()
	h.rd.ResidentBytes = h.residentReported
	// The earlier wake-up wins: waking late would delay a lease expiry or a
	// dead-letter retry; waking early costs only a no-op Tick.
	h.rd.WakeMs = h.coreWakeMs
	if at := h.nextRetryMs(); at != 0 && (h.rd.WakeMs == 0 || at < h.rd.WakeMs) {
		h.rd.WakeMs = at
	}
	if h.released {
		h.rd.WakeMs = 0 // waiting to be dropped: the Node wakes it by reloading
	}
	clear(h.grouped)
}

// resetReady empties the Ready for the next step, keeping backing arrays.
func (h *Host) resetReady() {
	clear(h.rd.PersistEntries) // drop references to bodies
	clear(h.rd.Out)
	h.rd = Ready{PersistEntries: h.rd.PersistEntries[:0], Out: h.rd.Out[:0], Settled: h.rd.Settled[:0]}
}

// send appends an envelope from this partition.
func (h *Host) send(to Address, msg Message) {
	h.rd.Out = append(h.rd.Out, Envelope{From: PartitionAddr(h.queue), To: to, Msg: msg})
}

// stepCore steps the partition once and routes every effect.
func (h *Host) stepCore(in core.Input) {
	// The core's Ready is reused by its next Step: copy out what the
	// Host's Ready carries (entries by value; bodies are shared, never
	// mutated).
	before := h.p.LastIndex()
	rd := h.step(in)
	// A gap would leave storage's log with a hole that recovery reads as a
	// torn tail and truncates, losing every entry after it.
	assertHold(len(rd.Persist) == 0 || rd.Persist[0].Index == before+1, "entries reach storage contiguously")
	assertHold(h.p.LastIndex() == before+uint64(len(rd.Persist)), "every entry appended is handed to storage")
	h.rd.PersistEntries = append(h.rd.PersistEntries, rd.Persist...)
	h.routeReplies(rd.Replies)
	// Replies first: a SUBSCRIBE_OK precedes the subscription's first
	// DELIVER (envelopes to one session keep their order).
	for i := range rd.Deliveries {
		h.routeDelivery(&rd.Deliveries[i])
	}
	h.rd.Settled = append(h.rd.Settled, rd.Settled...)
	// Lease expiries are no settlement (the message is ready again): the
	// partition counts them, the Host reports each step's new ones.
	if n := h.p.LeaseExpiredCount(); n != h.leaseExpiredSeen {
		assertHold(n > h.leaseExpiredSeen, "a partition's lease-expiry count only grows")
		h.rd.LeaseExpiries += n - h.leaseExpiredSeen
		h.leaseExpiredSeen = n
	}
	for i := range rd.DeadLetters {
		h.enqueueDeadLetter(rd.DeadLetters[i])
	}
	h.coreWakeMs = rd.NextWakeMs
}

// routeReplies answers whoever waits for each reply, a session's answers
// of the step in one envelope (answerBatch).
func (h *Host) routeReplies(replies []core.Reply) {
	if len(replies) == 0 {
		return
	}
	h.answers.begin(len(replies))
	for i := range replies {
		h.routeReply(&replies[i])
		h.answers.next()
	}
	h.answers.flush(h.send)
}

// routeReply answers whoever waits for r: a session (its batch of
// answers, with its Token) or the source of a dead-letter copy stored here.
func (h *Host) routeReply(r *core.Reply) {
	ref, ok := h.refs[r.Ref]
	if !ok {
		return // Ref 0 (nobody asked), or a second reply (more stale tags)
	}
	delete(h.refs, r.Ref)
	switch ref.kind {
	case refSession:
		h.answers.add(ref.session, ref.token, r)
	case refAdminPublish, refAdminComplete:
		h.routeOperatorReply(ref, r) // host_messages.go
	case refAdmin: // host_queueops.go
		h.answerAdmin(ref.token, adminOp(ref.session), r)
	case refDeadLetter:
		dl := ref.deadLetter
		assertHold(dl.source != h.queue, "a queue never stores its own dead letters")
		// The source settles its message only on DeadLetterStored, so a copy lost
		// between the two partitions is retried rather than lost (invariant above).
		if r.Kind == core.ReplyPublished {
			h.send(PartitionAddr(dl.source), &DeadLetterStored{Offset: dl.offset})
		} else {
			assertHold(r.Kind == core.ReplyError, "a publish answers with a confirm or an error")
			h.send(PartitionAddr(dl.source), &DeadLetterFailed{Offset: dl.offset, Err: r.Err})
		}
	}
}

// routeDelivery adds d to its subscription's envelope of this step.
func (h *Host) routeDelivery(d *core.Delivery) {
	// subs holds every core subscription (registered before its Subscribe
	// step), so a delivery always has an owner.
	owner, ok := h.subs[d.SubID]
	assertHold(ok, "the core delivers only to registered subscriptions")
	if i, ok := h.grouped[d.SubID]; ok {
		batch := h.rd.Out[i].Msg.(*Deliveries)
		assertHold(batch.SubID == d.SubID && h.rd.Out[i].To == owner, "a batch holds one subscription's deliveries")
		batch.Items = append(batch.Items, *d)
		return
	}
	// A fresh Items slice: the envelope owns it (the session keeps it). The
	// envelope and its first item come in one allocation: most batches of a
	// busy queue hold one delivery.
	h.grouped[d.SubID] = len(h.rd.Out)
	batch := &deliveriesWithOne{}
	batch.first[0] = *d
	batch.Deliveries = Deliveries{Queue: h.queue, SubID: d.SubID, Items: batch.first[:1:1]}
	h.send(owner, &batch.Deliveries)
}

// deliveriesWithOne is a Deliveries envelope allocated with room for its
// first item.
type deliveriesWithOne struct {
	Deliveries
	first [1]core.Delivery
}

// newRef files who waits under a fresh Ref. Refs are the Host's own, so a
// session's tokens never reach the core and two sessions' tokens never clash.
func (h *Host) newRef(ref hostRef) uint64 {
	assertHold(ref.kind >= refSession && ref.kind <= refAdmin, "a reference says who waits")
	assertHold((ref.kind == refDeadLetter) == (ref.deadLetter != nil), "a dead-letter reference, and only one, names its source")
	// Refs only grow and are never reused within this Host: a late reply for a
	// forgotten Ref finds nothing instead of answering a newer request.
	h.nextRef++
	h.refs[h.nextRef] = ref
	return h.nextRef
}

// onDeliver dispatches an envelope from a session, the Node or another
// partition. The set is closed: anything else is a bug.
func (h *Host) onDeliver(env Envelope) {
	h.noteActivity(env.Msg)
	switch msg := env.Msg.(type) {
	case *UnloadCheck:
		h.onUnloadCheck(msg)
	case *UnloadCancel:
		h.onUnloadCancel(msg)
	case *Forget:
		h.onForget(env.From)
	case *Request:
		h.onRequest(env.From, msg)
	case *DeadLetterStored:
		h.onDeadLetterStored(msg.Offset)
	case *DeadLetterFailed:
		h.onDeadLetterFailed(msg.Offset)
	case *StoreDeadLetter:
		h.onStoreDeadLetter(msg)
	case *SetOwner:
		// The Node's cohort names this partition's exclusive owner; the
		// partition's gate opens for it once nobody else holds a delivery.
		h.stepCore(&core.SetOwner{NowMs: h.nowMs, SubID: msg.SubID, Generation: msg.Generation})
	case *PartitionRuntime:
		h.onPartitionRuntime(msg) // host_runtime.go
	case *DeclareSettings:
		if in := declareInput(*msg, h.p.Settings()); in != nil {
			in.NowMs = h.nowMs
			h.stepCore(in)
		}
		// In force from this step on (every later request runs under
		// them): the Node releases what waited for them.
		// Seq 0 asks for no acknowledgement (msg.go): nobody waits on it,
		// so no SettingsApplied is owed.
		if msg.Seq != 0 {
			h.send(NodeAddr(), &SettingsApplied{Seq: msg.Seq})
		}
	case *BrowseMessages, *ReadDeadLetters, *ScanDeadLetters, *OperatorPublish, *CompleteMessage:
		h.onOperator(env.From, msg) // host_messages.go
	default:
		if h.onQueueOp(env.From, msg) { // host_queueops.go
			return
		}
		panic(fmt.Sprintf("fibril/core/node invariant violated: a Host takes no %T envelope", msg))
	}
}

// onRequest stamps a session's partition input with the time and a Ref of
// ours, and steps the core with it.
func (h *Host) onRequest(from Address, req *Request) {
	assertHold(from.Kind == AddrSession, "requests come from sessions")
	if h.deleted {
		h.refuseDeleted(from, req) // host_queueops.go
		return
	}
	// Token 0: the session wants no answer, not even an error, so no Ref.
	var ref uint64
	deferred := false
	if req.Token != 0 {
		// A session's address is its id alone, so the id is all the
		// reference keeps.
		assertHold(from == SessionAddr(from.Session), "a session address carries only its id")
		ref = h.newRef(hostRef{kind: refSession, session: from.Session, token: req.Token})
	}
	switch in := req.Input.(type) {
	case *core.Publish:
		// System marks this Host's own dead-letter stores (onStoreDeadLetter);
		// a session must never pass a publish off as one.
		assertHold(!in.System, "a client's publish is never a system publish")
		in.NowMs, in.Ref = h.nowMs, ref
		deferred = in.Confirm // the confirm comes once durable
		h.stepCore(in)
	case *core.Subscribe:
		in.NowMs, in.Ref = h.nowMs, ref
		// existed: a Subscribe for a SubID already routed keeps its owner
		// even if the core refuses this one; only a refused new one goes.
		_, existed := h.subs[in.SubID]
		if !existed {
			h.subs[in.SubID] = from // before the step: its deliveries route
		}
		h.stepCore(in)
		if _, _, ok := h.p.Subscription(in.SubID); !ok && !existed {
			delete(h.subs, in.SubID) // refused
		}
	case *core.Unsubscribe:
		in.NowMs, in.Ref = h.nowMs, ref
		h.stepCore(in)
		if _, _, ok := h.p.Subscription(in.SubID); !ok {
			delete(h.subs, in.SubID)
		}
	case *core.Ack:
		in.NowMs, in.Ref = h.nowMs, ref
		h.stepCore(in)
	case *core.Nack:
		in.NowMs, in.Ref = h.nowMs, ref
		h.stepCore(in)
	case *core.PauseSubscription:
		in.NowMs, in.Ref = h.nowMs, ref
		h.stepCore(in)
	default:
		panic(fmt.Sprintf("fibril/core/node invariant violated: a session requested %T", in))
	}
	if ref != 0 && !deferred {
		delete(h.refs, ref) // nothing more can answer it
	}
}

// onBounced: an envelope of ours found no receiver.
func (h *Host) onBounced(env Envelope) {
	switch msg := env.Msg.(type) {
	case *Deliveries, *Response, *Responses, *SubscriptionEnded:
		// The session is gone. Its subscriptions would otherwise stay
		// registered as ghosts: every lease expiry would burn a retry until
		// the message is dead-lettered unseen. End them all now, which
		// requeues what they held.
		if mutant.On(mutant.GhostSubscription) {
			return // broken on purpose: the ghost stays
		}
		h.dropSessionSubs(env.To)
	// The Node is not there to route it: treat it as a refusal so the copy
	// goes back to retry with backoff instead of waiting forever.
	case *DeadLetterOut:
		h.onDeadLetterFailed(msg.Offset)
	case *SettingsApplied, *InflightCount, *UnloadAnswer, *PublisherGone:
		// The Node never goes away while its Hosts run; nothing waits here.
	case *Purged, *AdminPublished, *Observation:
		// Operator answers go to an AdminAddr, which the driver never
		// bounces; nothing to undo (the decision is made).
	case *DeadLetterStored, *DeadLetterFailed:
		// The source partition is gone; it resends its pending copies when
		// it loads again.
	case *MessagesPage, *DeadLetterReads, *OperatorPublished, *Completed:
		// An operator address never bounces; nothing waits for it here.
	default:
		panic(fmt.Sprintf("fibril/core/node invariant violated: a Host never sent a %T", msg))
	}
}

// dropSessionSubs ends every subscription owner holds, in SubID order.
func (h *Host) dropSessionSubs(owner Address) {
	var ids []uint64
	for id, a := range h.subs {
		if a == owner {
			ids = append(ids, id)
		}
	}
	// Sorted so the Unsubscribe steps, and the requeues they cause, run in the
	// same order on every replay of a seed.
	slices.Sort(ids)
	for _, id := range ids {
		h.stepCore(&core.Unsubscribe{NowMs: h.nowMs, SubID: id})
		delete(h.subs, id)
	}
}

// declareInput is the Declare that brings current up to s, or nil when it
// already matches.
func declareInput(s DeclareSettings, current core.QueueSettings) *core.Declare {
	// Absent fields keep the partition's value, so only present ones can
	// differ; an unneeded Declare would append a log entry for nothing.
	differs := (s.DLQ != nil && *s.DLQ != current.DLQ) ||
		(s.MaxRetries != nil && *s.MaxRetries != current.MaxRetries) ||
		(s.DefaultTTLMs != nil && *s.DefaultTTLMs != current.DefaultTTLMs)
	if !differs {
		return nil
	}
	return &core.Declare{DLQ: s.DLQ, MaxRetries: s.MaxRetries, DefaultTTLMs: s.DefaultTTLMs}
}
