package sim

import (
	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
)

// A node is one broker process: the partitions it hosts, its disk and clock,
// and the driver loop that feeds the core and carries out its effects.
// Invariants:
//   - every partition is stepped only here (step), and every Step is
//     followed by CheckInvariants when the run asks for it;
//   - entries reach the disk in Ready order, Persisted is fed only for what
//     an fsync covered, and only after that fsync completed;
//   - a crash loses everything volatile: connections, subscriptions, pending
//     replies, the page cache (unless torn), and the partitions themselves,
//     which come back from the log alone.
type Node struct {
	id          uint32
	w           *World
	rng         *Rand
	clock       Clock
	disk        *Disk
	up          bool
	incarnation uint64
	parts       []*nodePart // one per catalogue partition, in catalogue order
	conns       map[uint64]*Conn
	subs        map[uint64]*nodeSub
	refs        map[uint64]*nodeRef
	nextRef     uint64
	stepSerial  uint64
	sync        syncState
	stats       NodeStats
	encodeBuf   []byte // scratch for encoding entries
}

// NodeStats counts what a node went through.
type NodeStats struct {
	Steps      uint64
	Crashes    uint64
	TornWrites uint64
	Entries    uint64
	Spills     uint64 // payloads dropped from memory (spillRatio)
}

// nodePart is one hosted partition and the driver's bookkeeping for it.
type nodePart struct {
	idx  int // catalogue index
	spec *partSpec
	cfg  core.Config
	m    Machine // nil while the node is down

	coreNowMs      int64  // the largest NowMs fed since recovery: the core's clock
	appendedIndex  uint64 // last index handed to the disk
	syncingIndex   uint64 // last index the fsync in flight covers
	syncedIndex    uint64 // last index an fsync made durable
	persistedIndex uint64 // last index fed back as Persisted

	// shadow is every entry written and not lost: what a correct disk holds.
	// The recovery check compares the recovered state against it.
	shadow []core.Entry
	msgIDs []uint64 // offset -> x-msg-id of the message published there

	wakeAtMs      int64 // node clock time the core asked to be woken (0 = none)
	wakeEventAtMs int64 // true time of the pending wake event (0 = none)
	wakeGen       uint64

	leaseIndexes []offsetIndex // scratch: this step's lease entries

	// stored is the node's stand-in for the broker's blob files: payloads it
	// dropped from memory (core.Partition.SpillBody), by the ref it gave.
	// Memory only, as the spill itself: a crash forgets both, and recovery
	// rebuilds bodies from the log.
	stored map[core.PayloadRef][]byte
}

type offsetIndex struct{ offset, index uint64 }

// nodeSub is a live subscription and the connection it delivers to.
type nodeSub struct {
	id      uint64
	conn    *Conn
	part    *nodePart
	autoAck bool
}

type refKind uint8

const (
	refPublish refKind = iota + 1
	refSubscribe
	refUnsubscribe
	refSettle
	refDeclare
	refDeadLetter
)

// nodeRef is what a core Ref stands for, so replies find their way.
type nodeRef struct {
	kind      refKind
	conn      *Conn
	op        uint64
	confirm   bool
	staleTags []uint64
	failed    string // a whole-request error
	// Dead-letter forwarding: the copy, its source and the source offset.
	source       *nodePart
	sourceOffset uint64
	target       *nodePart
	body         *core.Body
}

func newNode(w *World, id uint32, rng *Rand) *Node {
	n := &Node{id: id, w: w, rng: rng, disk: &Disk{}}
	n.clock = drawClock(rng, &w.faults)
	for i, spec := range w.catalogue {
		cfg := core.DefaultConfig(spec.queueID)
		cfg.LeaseMs = w.scenario.LeaseMs
		if spec.queue.QueueDepthMax > 0 {
			cfg.QueueDepthMax = spec.queue.QueueDepthMax
		}
		n.parts = append(n.parts, &nodePart{idx: i, spec: spec, cfg: cfg})
	}
	return n
}

func drawClock(rng *Rand, f *Faults) Clock {
	return Clock{
		offsetMs: rng.RangeInt64(-f.ClockOffsetMaxMs, f.ClockOffsetMaxMs),
		driftPpm: rng.RangeInt64(-f.ClockDriftMaxPpm, f.ClockDriftMaxPpm),
	}
}

func (n *Node) nowMs() int64 { return n.clock.NowMs(n.w.nowMs) }

// boot starts the node for the first time on an empty disk.
func (n *Node) boot() {
	n.incarnation = 1
	for _, ps := range n.parts {
		p, err := core.NewPartition(ps.cfg)
		assert(err == nil, "the catalogue builds valid partition configs")
		ps.m = n.w.wrap(p, MachineInfo{Queue: ps.cfg.Queue})
		ps.stored = map[core.PayloadRef][]byte{}
	}
	n.start()
}

// start brings a booted or recovered node up: fresh volatile state, then the
// queue declarations (on every start, so a crash before the first declare
// became durable cannot leave a queue on defaults for long).
func (n *Node) start() {
	n.up = true
	n.conns = make(map[uint64]*Conn)
	n.subs = make(map[uint64]*nodeSub)
	n.refs = make(map[uint64]*nodeRef)
	for _, ps := range n.parts {
		n.declare(ps)
	}
}

func (n *Node) declare(ps *nodePart) {
	q := &ps.spec.queue
	if q.DLQ.Kind == core.DLQGlobal && n.w.scenario.GlobalDLQ != "" {
		ref := n.newRef(&nodeRef{kind: refDeclare})
		target := &core.DLQTarget{Topic: n.w.scenario.GlobalDLQ}
		n.step(ps, &core.SetGlobalDLQ{NowMs: n.nowMs(), Ref: ref, Target: target}, "declare")
	}
	ref := n.newRef(&nodeRef{kind: refDeclare})
	maxRetries := q.MaxRetries
	ttlMs := q.DefaultTTLMs
	policy := q.DLQ
	n.step(ps, &core.Declare{NowMs: n.nowMs(), Ref: ref, DLQ: &policy, MaxRetries: &maxRetries, DefaultTTLMs: &ttlMs}, "declare")
}

func (n *Node) newRef(r *nodeRef) uint64 {
	n.nextRef++
	n.refs[n.nextRef] = r
	return n.nextRef
}

// maybeCrash rolls the per-step crash die; the caller stops when it fires.
func (n *Node) maybeCrash() bool {
	if n.rng.Chance(n.w.faults.CrashProbabilityPerStep) {
		n.crash("random step")
		return true
	}
	return false
}

// onMessage handles one request from a client connection.
func (n *Node) onMessage(c *Conn, msg *message) {
	if !n.up || n.maybeCrash() {
		return
	}
	if msg.kind == msgHello {
		if c.nodeIncarnation != 0 {
			return
		}
		c.nodeIncarnation = n.incarnation
		n.conns[c.id] = c
		n.w.net.send(c, toClient, &message{kind: msgHelloOk})
		return
	}
	if c.nodeIncarnation != n.incarnation || n.conns[c.id] != c {
		return // a connection of a previous process: its client will see the reset
	}
	switch msg.kind {
	case msgPublish:
		n.onPublish(c, msg)
	case msgSubscribe:
		n.onSubscribe(c, msg)
	case msgUnsubscribe:
		n.onUnsubscribe(c, msg)
	case msgSettle:
		n.onSettle(c, msg)
	default:
		panic("fibril/sim invariant violated: a client sent a node-side message kind")
	}
}

func (n *Node) reply(c *Conn, msg *message) {
	if c.closedAtNode || n.conns[c.id] != c {
		return
	}
	msg.kind = msgReply
	n.w.net.send(c, toClient, msg)
}

func (n *Node) onPublish(c *Conn, msg *message) {
	ps := n.parts[msg.part]
	ref := n.newRef(&nodeRef{kind: refPublish, conn: c, op: msg.op, confirm: msg.confirm})
	n.step(ps, &core.Publish{NowMs: n.nowMs(), Ref: ref, Confirm: msg.confirm, Body: msg.body,
		HasTTL: msg.hasTTL, TTLMs: msg.ttlMs, NotBeforeMs: msg.notBeforeMs}, "publish")
	if !msg.confirm {
		delete(n.refs, ref) // errors came back at once; success has no reply
	}
}

func (n *Node) onSubscribe(c *Conn, msg *message) {
	ps := n.parts[msg.part]
	if _, dup := n.subs[msg.sub]; dup {
		n.reply(c, &message{op: msg.op, errText: core.ErrAlreadySubscribed.Error()})
		return
	}
	sub := &nodeSub{id: msg.sub, conn: c, part: ps, autoAck: msg.autoAck}
	n.subs[msg.sub] = sub
	ref := n.newRef(&nodeRef{kind: refSubscribe, conn: c, op: msg.op})
	n.step(ps, &core.Subscribe{NowMs: n.nowMs(), Ref: ref, SubID: msg.sub, Prefetch: msg.prefetch, AutoAck: msg.autoAck}, "subscribe")
	if r := n.refs[ref]; r != nil && r.failed != "" {
		delete(n.subs, msg.sub)
		n.reply(c, &message{op: msg.op, errText: r.failed})
	} else if n.subs[msg.sub] != nil {
		c.subs = append(c.subs, msg.sub)
		n.reply(c, &message{op: msg.op, ok: true})
	}
	delete(n.refs, ref)
}

func (n *Node) onUnsubscribe(c *Conn, msg *message) {
	sub := n.subs[msg.sub]
	if sub == nil || sub.conn != c {
		n.reply(c, &message{op: msg.op, errText: core.ErrUnknownSubscription.Error()})
		return
	}
	n.endSub(sub, "unsubscribe")
	c.subs = removeUint64(c.subs, msg.sub)
	n.reply(c, &message{op: msg.op, ok: true})
}

// endSub ends a subscription in the core; its deliveries requeue at once.
func (n *Node) endSub(sub *nodeSub, why string) {
	ps := sub.part
	delete(n.subs, sub.id)
	n.w.rec.add(checker.Event{Kind: checker.KindSubEnd, Node: n.id, Part: ps.idx + 1, Sub: sub.id, NowMs: ps.coreNowMs, Text: why})
	ref := n.newRef(&nodeRef{kind: refUnsubscribe})
	n.step(ps, &core.Unsubscribe{NowMs: n.nowMs(), Ref: ref, SubID: sub.id}, "unsubscribe")
	delete(n.refs, ref)
}

func (n *Node) onSettle(c *Conn, msg *message) {
	sub := n.subs[msg.sub]
	if sub == nil || sub.conn != c {
		n.reply(c, &message{op: msg.op, errText: core.ErrUnknownSubscription.Error(), staleTags: msg.tags})
		return
	}
	ref := n.newRef(&nodeRef{kind: refSettle, conn: c, op: msg.op})
	now := n.nowMs()
	var in core.Input
	switch msg.action {
	case checker.ActionAck:
		in = &core.Ack{NowMs: now, Ref: ref, SubID: msg.sub, Tags: msg.tags}
	case checker.ActionRetry:
		in = &core.Nack{NowMs: now, Ref: ref, SubID: msg.sub, Tags: msg.tags, Requeue: true, NotBeforeMs: msg.notBeforeMs}
	case checker.ActionFail:
		in = &core.Nack{NowMs: now, Ref: ref, SubID: msg.sub, Tags: msg.tags}
	default:
		panic("fibril/sim invariant violated: unknown settle action")
	}
	trigger := "ack"
	if msg.action != checker.ActionAck {
		trigger = "nack"
	}
	n.step(sub.part, in, trigger)
	r := n.refs[ref]
	delete(n.refs, ref)
	if r.failed != "" {
		n.reply(c, &message{op: msg.op, errText: r.failed, staleTags: msg.tags})
		return
	}
	n.reply(c, &message{op: msg.op, ok: len(r.staleTags) == 0, staleTags: r.staleTags})
}

// onConnLost: the node learned that c is gone; its subscriptions end.
func (n *Node) onConnLost(c *Conn) {
	if !n.up || c.nodeIncarnation != n.incarnation || n.conns[c.id] != c {
		return
	}
	if n.maybeCrash() {
		return
	}
	delete(n.conns, c.id)
	subs := c.subs
	c.subs = nil
	for _, id := range subs {
		if sub := n.subs[id]; sub != nil {
			n.endSub(sub, "connection lost")
		}
	}
}

func removeUint64(xs []uint64, x uint64) []uint64 {
	for i := range xs {
		if xs[i] == x {
			return append(xs[:i], xs[i+1:]...)
		}
	}
	return xs
}
