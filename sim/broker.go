package sim

import (
	"fmt"
	"strings"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// A Broker is one simulated broker process: the node core's machines (one
// Node, its Sessions, one Host per loaded partition) stepped from the event
// queue, its connections, and its storage. It plays the part io/broker plays
// in production, and decides nothing a client can observe. Invariants:
//   - a machine is stepped only from an event of its own, never from inside
//     the handling of another machine's Ready (nor its own): every input a
//     Ready causes is scheduled, so a Ready is fully carried out before the
//     machine that made it is stepped again;
//   - CheckInvariants runs on the machine after every Step when the run asks;
//   - envelopes arrive FIFO per (sender, receiver) pair after a seeded
//     delay, interleaved across senders; one whose receiver does not exist
//     is handed back to its sender as Bounced;
//   - a crash loses every machine, connection and queued envelope; the
//     storage keeps what the fault says (a process crash keeps the page
//     cache, a power loss keeps only what was synced, perhaps torn);
//   - everything of an older incarnation that is still scheduled (envelopes,
//     storage completions, wake-ups) is ignored by the newer one.
type Broker struct {
	id  uint32
	w   *World
	rng *Rand
	// wall is the machine's wall clock (offset, drift, jumps); mono is the
	// monotonic clock the core sees, anchored at the wall clock at boot, so
	// a wall-clock jump moves only the next boot's anchor.
	wall        Clock
	mono        Clock
	up          bool
	incarnation uint64
	cfg         node.Config

	node       *node.Node
	nodeWake   wakeTimer
	sessions   map[node.SessionID]*brokerSession
	hosts      map[core.QueueID]*brokerHost
	hostOrder  []*brokerHost // load order: iteration without map order
	conns      map[uint64]*brokerConn
	nextConnID uint64

	// pairs keeps the last arrival time per (sender, receiver), so
	// envelopes of one pair arrive in order whatever their delays. A
	// pointer, so a send hashes its pair (two addresses, strings
	// included) once rather than twice.
	pairs             map[envelopePair]*int64
	envelopesInFlight int

	store *brokerStore
	stats BrokerStats
	// parts is the driver's per-partition bookkeeping that outlives the
	// process (the shadow of what was written, message ids by offset).
	parts map[core.QueueID]*partShadow
	// streams are the loaded stream partitions (load order in
	// streamOrder); streamParts their bookkeeping that outlives the process.
	streams     map[core.QueueID]*brokerStreamHost
	streamOrder []*brokerStreamHost
	streamParts map[core.QueueID]*streamShadow

	// operators receive what machines send to an AddrAdmin address (and
	// what bounces back from one), by the owner tag in the request
	// number's top byte (operatorAddr): the inspector, the runtime
	// settings operator, the quarantine repairs. An envelope for an owner
	// not running is dropped, as the production driver drops answers
	// nobody waits for.
	operators [operatorOwners]func(env node.Envelope, bounced bool)
	// quarantinesSeen is the Node's QuarantinesTotal last seen (this
	// process); operatorSeq numbers the simulated operator's repairs
	// (broker_quarantine.go).
	quarantinesSeen uint64
	operatorSeq     uint64
}

// The simulated operators' owner tags (the top byte of an AdminAddr's
// request number): each owner numbers its own requests below 2^56, so two
// operators running in one world never take each other's answers.
const (
	operatorInspector  = 1 // operator.go
	operatorRuntime    = 2 // operator_runtime.go
	operatorQuarantine = 3 // broker_quarantine.go
	operatorOwners     = 4
)

// operatorAddr is owner's request seq as an admin address.
func operatorAddr(owner, seq uint64) node.Address {
	assert(owner > 0 && owner < operatorOwners && seq > 0 && seq < 1<<56, "an operator request is tagged with its owner")
	return node.AdminAddr(owner<<56 | seq)
}

// operatorOf is the hook of the owner of request req (nil: none running).
func (b *Broker) operatorOf(req uint64) func(env node.Envelope, bounced bool) {
	if owner := req >> 56; owner < operatorOwners {
		return b.operators[owner]
	}
	return nil
}

// BrokerStats counts what a broker went through.
type BrokerStats struct {
	Steps       uint64
	Crashes     uint64
	PowerLosses uint64
	Envelopes   uint64
	Bounces     uint64
	Spills      uint64 // spilled payloads read back for a delivery
	Snapshots   uint64
	LoadFails   uint64
	ReadFaults  uint64
	// Quarantines counts partitions the Node parked (broker_quarantine.go).
	Quarantines uint64
	Unloads     uint64 // idle partitions unloaded (broker_idle.go)
	Reloads     uint64 // and loaded again (LoadRequest.Reload)
}

type envelopePair struct{ from, to node.Address }

type wakeTimer struct {
	atTrueMs int64 // true time of the pending wake event (0 = none)
	gen      uint64
}

type brokerSession struct {
	id   node.SessionID
	m    *node.Session
	wake wakeTimer
}

type brokerHost struct {
	queue    core.QueueID
	m        *node.Host
	wake     wakeTimer
	resident int64 // the Host's last Ready.ResidentBytes
	shadow   *partShadow
	// leaseIndexes is this step's lease entries: the checker pairs each
	// delivery with the entry that leased it.
	leaseIndexes   []leaseMark
	stepDeliveries []*core.Delivery // scratch: this step's deliveries
	stepConfirms   []uint64         // scratch: this step's confirmed offsets
	coreNowMs      int64
}

// partShadow is what the driver knows of one partition across restarts.
type partShadow struct {
	queue  core.QueueID
	part   int // catalogue index + 1, or 0 when the scenario does not name it
	cfg    core.Config
	shadow []core.Entry // every entry written and not lost: what a correct disk holds
	msgIDs []uint64     // offset -> x-msg-id
	// appended and synced are the last index handed to storage and the last
	// one a sync covered (for crash events).
	appended uint64
	synced   uint64
	loads    int // recoveries so far (the first is of an empty log)
	// evictedEmpty: unloaded idle (broker_idle.go) holding no live
	// message; cleared when it loads again.
	evictedEmpty bool
}

// brokerConn is one accepted connection.
type brokerConn struct {
	id      uint64
	link    *Link
	session node.SessionID // 0 = frames go to the Node
	rx      []byte         // bytes received and not yet framed
	outbox  []byte         // queued by the machines, not yet taken by the socket
	closing bool           // a Ready.Close: close once the outbox is flushed
	broken  bool           // the stream broke (frame too large): read no more
}

func newBroker(w *World, id uint32, rng *Rand) *Broker {
	b := &Broker{id: id, w: w, rng: rng, parts: map[core.QueueID]*partShadow{}, streamParts: map[core.QueueID]*streamShadow{}}
	b.wall = drawClock(rng, &w.faults)
	b.cfg = w.nodeConfig()
	b.store = newBrokerStore(b)
	return b
}

// nowMs is the monotonic clock the machines see.
func (b *Broker) nowMs() int64 { return b.mono.NowMs(b.w.nowMs) }

// boot starts (or restarts) the process: recover the Node's log, build the
// Node, and step it once so it persists its boot record.
func (b *Broker) boot() {
	if b.w.stopped {
		return
	}
	b.incarnation++
	b.mono = b.wall
	b.sessions = map[node.SessionID]*brokerSession{}
	b.hosts = map[core.QueueID]*brokerHost{}
	b.hostOrder = nil
	b.streams, b.streamOrder = map[core.QueueID]*brokerStreamHost{}, nil
	b.conns = map[uint64]*brokerConn{}
	b.pairs = map[envelopePair]*int64{}
	b.envelopesInFlight = 0
	b.nodeWake = wakeTimer{gen: b.nodeWake.gen + 1}
	snapshot, records, err := b.store.openNodeLog()
	if err != nil {
		// A read fault (bit rot) or an fsync error during recovery: the
		// process fails again and retries; a log that never recovers
		// leaves the run undrained.
		b.w.fault("recovery-failure", "broker %d: the node log does not recover: %v", b.id, err)
		b.store.crash(false)
		b.w.after(b.rng.RangeInt64(b.w.faults.RestartDelayMinMs, b.w.faults.RestartDelayMaxMs), b.boot)
		return
	}
	n, err := node.NewNode(b.cfg, snapshot, records, b.entropy())
	if err != nil {
		b.w.abort(fmt.Sprintf("broker %d: NewNode refuses its own log: %v", b.id, err))
		return
	}
	b.node, b.up = n, true
	if b.w.operator != nil {
		b.w.operator.booted(n) // operator.go
	}
	if b.incarnation > 1 {
		b.w.note(fmt.Sprintf("broker %d restarted (incarnation %d)", b.id, b.incarnation))
	}
	b.stepNode(&node.Tick{NowMs: b.nowMs()}, "boot")
}

func (b *Broker) entropy() [32]byte {
	var e [32]byte
	for i := 0; i < 4; i++ {
		x := b.rng.Uint64()
		for j := 0; j < 8; j++ {
			e[i*8+j] = byte(x >> (8 * j))
		}
	}
	return e
}

// alive returns a guard for scheduled work: it runs only if the process
// that scheduled it is still the one running.
func (b *Broker) alive() func() bool {
	inc := b.incarnation
	return func() bool { return b.up && b.incarnation == inc && !b.w.stopped }
}

// later schedules fn after delayMs, for this incarnation only.
func (b *Broker) later(delayMs int64, fn func()) {
	// The guard inline rather than through alive(): one closure per
	// scheduled event instead of two (later schedules most events).
	inc := b.incarnation
	b.w.after(delayMs, func() {
		if b.up && b.incarnation == inc && !b.w.stopped {
			fn()
		}
	})
}

// maybeCrash rolls the per-step crash die.
func (b *Broker) maybeCrash() bool {
	if b.rng.Chance(b.w.faults.CrashProbabilityPerStep) {
		b.crash("random step", b.rng.Chance(b.w.faults.PowerLossRatio))
		return true
	}
	return false
}

// crash kills the process. powerLoss also drops what the page cache held.
func (b *Broker) crash(why string, powerLoss bool) {
	assert(b.up, "only a running broker crashes")
	kind := "crash"
	if powerLoss {
		kind = "power loss"
		b.stats.PowerLosses++
	} else {
		b.stats.Crashes++
	}
	b.w.fault(strings.ReplaceAll(kind, " ", "-"), "%s broker %d (%s)", kind, b.id, why)
	b.w.rec.add(checker.Event{Kind: checker.KindCrash, Node: b.id, NowMs: b.nowMs(), Text: kind}) // the process itself
	for _, ps := range b.sortedShadows() {
		// NowMs: the clock the partition's core last saw (the checker
		// compares time-gated deliveries across a crash with it).
		nowMs := b.nowMs()
		if h := b.hosts[ps.queue]; h != nil {
			nowMs = max(nowMs, h.coreNowMs)
		}
		b.w.rec.add(checker.Event{Kind: checker.KindCrash, Node: b.id, Part: ps.part, Index: ps.appended,
			Index2: ps.synced, NowMs: nowMs, Text: kind})
	}
	b.up = false
	for _, c := range b.sortedConns() {
		b.w.fabric.brokerClose(c.link, "broker "+kind)
	}
	b.node, b.sessions, b.hosts, b.hostOrder, b.conns = nil, nil, nil, nil, nil
	b.streams, b.streamOrder = nil, nil
	b.store.crash(powerLoss)
	b.w.after(b.rng.RangeInt64(b.w.faults.RestartDelayMinMs, b.w.faults.RestartDelayMaxMs), b.boot)
}

func (b *Broker) sortedConns() []*brokerConn {
	out := make([]*brokerConn, 0, len(b.conns))
	for id := uint64(1); id <= b.nextConnID && len(out) < len(b.conns); id++ {
		if c := b.conns[id]; c != nil {
			out = append(out, c)
		}
	}
	return out
}

// sortedShadows lists the partitions the broker ever wrote, in catalogue
// order then name order (deterministic).
func (b *Broker) sortedShadows() []*partShadow {
	out := make([]*partShadow, 0, len(b.parts))
	for _, spec := range b.w.catalogue {
		if ps := b.parts[spec.queueID]; ps != nil {
			out = append(out, ps)
		}
	}
	return out
}

// shadowOf returns the bookkeeping of queue q, creating it.
func (b *Broker) shadowOf(q core.QueueID, cfg core.Config) *partShadow {
	ps := b.parts[q]
	if ps == nil {
		ps = &partShadow{queue: q, part: b.w.partIndex(q) + 1, cfg: cfg}
		b.parts[q] = ps
	}
	ps.cfg = cfg
	return ps
}

// ---- stepping

func (b *Broker) stepNode(in node.Input, trigger string) {
	if !b.up || b.maybeCrash() {
		return
	}
	b.stats.Steps++
	rd := b.node.Step(in)
	if b.w.checkInvariants {
		if err := b.node.CheckInvariants(); err != nil {
			b.w.abort(fmt.Sprintf("node invariant broken on broker %d after %s: %v", b.id, trigger, err))
			return
		}
	}
	quarantine := rd.Quarantine
	b.apply(node.NodeAddr(), rd, nil, nil)
	if quarantine != nil {
		b.noteQuarantine(quarantine)
	}
	b.scheduleWake(&b.nodeWake, rd.WakeMs, func() { b.stepNode(&node.Tick{NowMs: b.nowMs()}, "tick") })
}

func (b *Broker) stepSession(s *brokerSession, in node.Input, trigger string) {
	if !b.up || b.maybeCrash() {
		return
	}
	b.stats.Steps++
	rd := s.m.Step(in)
	if b.w.checkInvariants {
		if err := s.m.CheckInvariants(); err != nil {
			b.w.abort(fmt.Sprintf("session %d invariant broken on broker %d after %s: %v", s.id, b.id, trigger, err))
			return
		}
	}
	b.apply(node.SessionAddr(s.id), rd, nil, nil)
	if s.m.Ended() {
		delete(b.sessions, s.id)
		s.wake.gen++
		return
	}
	b.scheduleWake(&s.wake, rd.WakeMs, func() {
		if b.sessions[s.id] == s {
			b.stepSession(s, &node.Tick{NowMs: b.nowMs()}, "tick")
		}
	})
}

func (b *Broker) stepHost(h *brokerHost, in node.Input, trigger string) {
	if !b.up || b.maybeCrash() {
		return
	}
	b.stats.Steps++
	h.coreNowMs = max(h.coreNowMs, b.nowMs())
	rd := h.m.Step(in)
	if b.w.checkInvariants {
		if err := h.m.CheckInvariants(); err != nil {
			b.w.abort(fmt.Sprintf("host %s invariant broken on broker %d after %s: %v", h.queue, b.id, trigger, err))
			return
		}
	}
	h.resident = rd.ResidentBytes
	b.apply(node.PartitionAddr(h.queue), rd, h, nil)
	b.recordHostEffects(h, rd, trigger)
	b.scheduleWake(&h.wake, rd.WakeMs, func() {
		if b.hosts[h.queue] == h {
			b.stepHost(h, &node.Tick{NowMs: b.nowMs()}, "tick")
		}
	})
}

// scheduleWake keeps one pending wake event per machine at the earliest
// time it asked for.
func (b *Broker) scheduleWake(t *wakeTimer, wakeMs int64, fire func()) {
	if wakeMs == 0 || !b.up {
		return
	}
	atMs := b.w.nowMs + b.mono.wakeAfterMs(b.w.nowMs, wakeMs)
	if t.atTrueMs != 0 && t.atTrueMs <= atMs && t.atTrueMs >= b.w.nowMs {
		return // an earlier wake is pending; the machine asks again when it fires
	}
	t.atTrueMs = atMs
	t.gen++
	gen := t.gen
	b.later(atMs-b.w.nowMs, func() {
		if t.gen == gen {
			t.atTrueMs = 0
			fire()
		}
	})
}

// ---- carrying out a Ready

// apply carries out one Ready in contract order. h or sh is the Host or
// StreamHost that made it (both nil for the Node and sessions).
func (b *Broker) apply(from node.Address, rd *node.Ready, h *brokerHost, sh *brokerStreamHost) {
	for _, init := range rd.Start {
		assert(b.sessions[init.ID] == nil, "the Node never starts a session twice")
		b.sessions[init.ID] = &brokerSession{id: init.ID, m: node.NewSession(b.cfg, init)}
	}
	for _, bind := range rd.Bind {
		if c := b.conns[uint64(bind.Conn)]; c != nil {
			c.session = bind.Session
		}
	}
	if len(rd.Persist) > 0 {
		b.store.appendNode(rd.Persist)
	}
	if sh != nil {
		b.applyStream(sh, rd)
	} else if len(rd.PersistEntries) > 0 {
		assert(h != nil, "only a Host persists partition entries")
		b.store.appendPartition(h, rd.PersistEntries)
	}
	for _, s := range rd.Sends {
		if c := b.conns[uint64(s.Conn)]; c != nil && !c.closing {
			b.queueSend(c, s.Bytes)
		}
	}
	for _, id := range rd.Close {
		if c := b.conns[uint64(id)]; c != nil {
			c.closing = true
			b.flush(c)
		}
	}
	for i := range rd.Out {
		b.send(rd.Out[i])
	}
	for _, req := range rd.Load {
		if req.Reload {
			b.stats.Reloads++
		}
		b.load(req)
	}
	// Queue removals come only from an operator's DeleteQueue, which no
	// scenario sends yet: carrying one out (storage, shadows, the checker's
	// view of the deleted messages) is still to be built.
	assert(len(rd.Remove) == 0, "the simulator does not carry out queue removals yet")
	for _, q := range rd.Unload {
		b.unload(q) // broker_idle.go
	}
	for _, pc := range rd.CheckPassword {
		b.checkPassword(from, pc)
	}
	if rd.Snapshot != nil && sh == nil {
		b.store.snapshot(from, h, *rd.Snapshot)
	}
}

// ---- envelopes

// send delivers env after a seeded delay, FIFO per (sender, receiver).
func (b *Broker) send(env node.Envelope) {
	b.stats.Envelopes++
	b.recordCohortEnvelope(&env)
	atMs := b.w.nowMs + b.rng.RangeInt64(0, b.w.faults.EnvelopeDelayMaxMs)
	pair := envelopePair{env.From, env.To}
	last := b.pairs[pair]
	if last == nil {
		last = new(int64)
		b.pairs[pair] = last
	}
	atMs = max(atMs, *last)
	*last = atMs
	b.envelopesInFlight++
	inc := b.incarnation
	b.w.at(atMs, func() {
		if !b.up || b.incarnation != inc || b.w.stopped {
			return // lost with the process that sent it
		}
		b.envelopesInFlight--
		b.arrive(env)
	})
}

func (b *Broker) arrive(env node.Envelope) {
	now := b.nowMs()
	switch env.To.Kind {
	case node.AddrNode:
		if !b.resolveDeadLetter(env) {
			return
		}
		b.stepNode(&node.Deliver{NowMs: now, Envelope: env}, "deliver")
		return
	case node.AddrSession:
		if s := b.sessions[env.To.Session]; s != nil {
			if !b.resolveStored(env) {
				return
			}
			b.routeStreamDeliveries(env)
			b.stepSession(s, &node.Deliver{NowMs: now, Envelope: env}, "deliver")
			return
		}
	case node.AddrAdmin:
		if op := b.operatorOf(env.To.Request); op != nil && b.resolveOperator(env) { // operator.go
			op(env, false)
		}
		return
	case node.AddrPartition:
		if h := b.hosts[env.To.Queue]; h != nil {
			b.noteRequest(h, env.Msg)
			b.stepHost(h, &node.Deliver{NowMs: now, Envelope: env}, triggerOf(env.Msg))
			return
		}
		if sh := b.streams[env.To.Queue]; sh != nil {
			b.noteStreamRequest(sh, env.Msg)
			b.stepStream(sh, &node.Deliver{NowMs: now, Envelope: env}, "deliver")
			return
		}
	}
	b.bounce(env)
}

// bounce hands env back to its sender, if the sender still exists.
func (b *Broker) bounce(env node.Envelope) {
	b.stats.Bounces++
	in := &node.Bounced{NowMs: b.nowMs(), Envelope: env}
	switch env.From.Kind {
	case node.AddrNode:
		b.stepNode(in, "bounced")
	case node.AddrSession:
		if s := b.sessions[env.From.Session]; s != nil {
			b.stepSession(s, in, "bounced")
		}
	case node.AddrPartition:
		if h := b.hosts[env.From.Queue]; h != nil {
			b.stepHost(h, in, "bounced")
		} else if sh := b.streams[env.From.Queue]; sh != nil {
			b.stepStream(sh, in, "bounced")
		}
	case node.AddrAdmin:
		if op := b.operatorOf(env.From.Request); op != nil {
			op(env, true)
		}
	}
}

// resolveStored reads back the stored bodies of a Deliveries envelope
// before its session sees them. A failed read (bit rot caught by the
// checksum, a missing file) is a storage fault: the broker stops, and
// recovery starts over from the log.
func (b *Broker) resolveStored(env node.Envelope) bool {
	ds, ok := env.Msg.(*node.Deliveries)
	if !ok {
		return true
	}
	for i := range ds.Items {
		body := ds.Items[i].Body
		if body == nil || !body.IsStored() {
			continue
		}
		payload, err := b.store.readPayload(ds.Queue, body.Ref)
		if err != nil {
			b.stats.ReadFaults++
			b.crash(fmt.Sprintf("payload read of %s offset %d failed: %v", ds.Queue, ds.Items[i].Offset, err), false)
			return false
		}
		b.stats.Spills++
		loaded := *body
		loaded.Payload, loaded.Ref = payload, core.PayloadRef{}
		ds.Items[i].Body = &loaded
	}
	return true
}

// resolveDeadLetter reads back the stored body of a DeadLetterOut from its
// source partition's storage before the Node gets it: the copy goes into
// another partition's log, which must hold its bytes.
func (b *Broker) resolveDeadLetter(env node.Envelope) bool {
	dl, ok := env.Msg.(*node.DeadLetterOut)
	if !ok || dl.Body == nil || !dl.Body.IsStored() {
		return true
	}
	payload, err := b.store.readPayload(env.From.Queue, dl.Body.Ref)
	if err != nil {
		b.stats.ReadFaults++
		b.crash(fmt.Sprintf("payload read of %s offset %d for a dead-letter copy failed: %v", env.From.Queue, dl.Offset, err), false)
		return false
	}
	b.stats.Spills++
	loaded := *dl.Body
	loaded.Payload, loaded.Ref = payload, core.PayloadRef{}
	dl.Body = &loaded
	return true
}

// ---- jobs: loads and password checks

// load opens a partition's storage, recovers it and starts its Host, then
// answers LoadDone. A scenario may make loads fail (LoadFailRatio), as a
// corrupt or unreadable partition would.
func (b *Broker) load(req node.LoadRequest) {
	b.later(b.rng.RangeInt64(0, b.w.faults.LoadDelayMaxMs), func() {
		if req.Kind == node.KindStream {
			b.loadStream(req)
			return
		}
		q := req.Queue
		if b.hosts[q] != nil {
			b.stepNode(&node.LoadDone{NowMs: b.nowMs(), Queue: q}, "load_done")
			return
		}
		if b.w.phase == phaseSafety && b.rng.Chance(b.w.faults.LoadFailRatio) {
			b.stats.LoadFails++
			b.w.fault("load-failure", "load of %s fails on broker %d", q, b.id)
			b.stepNode(&node.LoadDone{NowMs: b.nowMs(), Queue: q, Err: errLoadFault}, "load_done")
			return
		}
		cfg := b.w.partitionConfig(req.Config)
		ps := b.shadowOf(q, cfg)
		p, cut, err := b.store.openPartition(ps, cfg, req.Truncate)
		if err != nil {
			b.stepNode(loadFailed(b.nowMs(), q, err), "load_done")
			return
		}
		req.Config = cfg
		ps.evictedEmpty = false
		h := &brokerHost{queue: q, m: b.newHost(p, req, ps), shadow: ps}
		b.store.bind(h)
		b.hosts[q] = h
		b.hostOrder = append(b.hostOrder, h)
		b.stepHost(h, &node.Tick{NowMs: b.nowMs()}, "load")
		if b.up && b.hosts[q] == h {
			b.stepNode(&node.LoadDone{NowMs: b.nowMs(), Queue: q, Cut: cut}, "load_done")
		}
	})
}

var errLoadFault = fmt.Errorf("sim: injected load failure")

// newHost builds the Host of a recovered partition; a test's Wrap may put a
// deliberately broken machine around the partition (a mutant), through
// whose Step the Host then steps it.
func (b *Broker) newHost(p *core.Partition, req node.LoadRequest, ps *partShadow) *node.Host {
	if b.w.wrapFn == nil {
		return node.NewHost(b.cfg, p, req)
	}
	rec := b.store.recovered[req.Queue]
	m := b.w.wrapFn(p, MachineInfo{Queue: req.Queue, Recovered: ps.loads > 1, Entries: rec.Entries, Snapshot: rec.Snapshot})
	if other, ok := m.(*core.Partition); ok {
		return node.NewHost(b.cfg, other, req) // a replacement partition
	}
	return node.NewHostStepping(b.cfg, p, req, m.Step)
}

// checkPassword answers a PasswordCheck. The simulated user store is
// empty: sessions authenticate with the built-in loopback credentials.
func (b *Broker) checkPassword(from node.Address, pc node.PasswordCheck) {
	b.later(b.rng.RangeInt64(0, 3), func() {
		if s := b.sessions[from.Session]; s != nil {
			b.stepSession(s, &node.AuthChecked{NowMs: b.nowMs(), Token: pc.Token}, "auth_checked")
		}
	})
}

// residentTotal is the broker-wide resident payload bytes the Hosts last
// reported, for the spill budget.
func (b *Broker) residentTotal() int64 {
	var total int64
	for _, h := range b.hostOrder {
		total += h.resident
	}
	return total
}
