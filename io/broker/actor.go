package broker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/core/node"
)

// Actors: the Node and every Session machine, each with a mailbox.
// Invariants:
//   - a machine is stepped by one goroutine at a time: whoever pushed an
//     input into an idle mailbox claims it (running) and drains it; others
//     only append, so inputs are stepped in the order they were pushed;
//   - every push happens while the pusher is the only context of the
//     sender (its claimer or its own goroutine), so envelopes from one
//     sender to one receiver arrive in the order they were sent (FIFO per
//     pair, core/node doc.go);
//   - no lock is held across a Step or across I/O, and a push never waits:
//     mailboxes between machines are not the client backpressure path
//     (readers are, conn.go), so no two machines can wait on each other;
//   - a session that reported Ended is dropped: it takes no input after, and
//     every envelope queued for it or sent to it later bounces to its sender.

// machine is what an actor steps.
type machine interface {
	Step(node.Input) *node.Ready
}

// actorStepsPerClaimMax bounds the inputs one claimer steps before it hands
// the rest of the mailbox to a goroutine of its own, so a busy session
// cannot keep a partition runner (which may have claimed it) from its own
// inbox.
const actorStepsPerClaimMax = 256

type actor struct {
	addr node.Address
	m    machine
	sess *node.Session // nil for the Node

	mu      sync.Mutex
	queue   []mail
	spare   []mail
	running bool
	gone    bool
	// room is closed when a reader waited for the mailbox to drain.
	room       chan struct{}
	roomWanted bool

	// Claimer only.
	// deliver is the Deliver input an envelope is stepped in (mail.go).
	deliver  node.Deliver
	timer    *time.Timer
	wakeAtMs int64
	// fired says the timer went off since it was armed at wakeAtMs, so the
	// same deadline asked again must be armed again.
	fired atomic.Bool
	// conn is the connection last bound to this session (backpressure).
	conn atomic.Pointer[conn]
	// host is the partition runner this machine last sent to, claimer
	// only: a session sends request after request to one partition, and
	// the lookup under the shared read lock was a measurable share of each.
	// A runner removed with its queue (a delete) is halted: it refuses
	// pushes, and the envelope bounces as it would from the map; the closed
	// runner has dropped its machine, so this pointer pins no messages.
	host *hostRunner
	// seen is the connection last bound to this session as an operator
	// listing shows it (admin_surface.go); kept past its close, for a
	// dormant session.
	seen atomic.Pointer[connSeen]
}

func newActor(addr node.Address, m machine, sess *node.Session) *actor {
	return &actor{addr: addr, m: m, sess: sess}
}

// push appends in; claimed says the caller must now drain the actor; ok is
// false when the actor is gone (the input was not taken).
func (a *actor) push(in node.Input) (claimed, ok bool) {
	assertTrue(in != nil, "a nil input pushed")
	return a.pushMail(mail{in: in})
}

// pushEnv appends an envelope, stepped as a Deliver.
func (a *actor) pushEnv(env node.Envelope) (claimed, ok bool) {
	return a.pushMail(mail{env: env})
}

// pushEnvs appends envelopes of one sender in their order, under one lock.
func (a *actor) pushEnvs(envs []node.Envelope) (claimed, ok bool) {
	a.mu.Lock()
	if a.gone {
		a.mu.Unlock()
		return false, false
	}
	for i := range envs {
		a.queue = append(a.queue, mail{env: envs[i]})
	}
	claimed = !a.running
	a.running = true
	a.mu.Unlock()
	return claimed, true
}

func (a *actor) pushMail(m mail) (claimed, ok bool) {
	a.mu.Lock()
	if a.gone {
		a.mu.Unlock()
		return false, false
	}
	a.queue = append(a.queue, m)
	claimed = !a.running
	a.running = true
	a.mu.Unlock()
	return claimed, true
}

// take swaps out the queued inputs, or releases the claim when none are left.
func (a *actor) take(done []mail) []mail {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(done)
	if a.roomWanted {
		a.roomWanted = false
		close(a.room)
	}
	if len(a.queue) == 0 {
		a.spare = done[:0]
		a.running = false
		return nil
	}
	batch := a.queue
	a.queue, a.spare = a.spare[:0], nil
	if cap(a.queue) == 0 {
		a.queue = done[:0]
	}
	return batch
}

// keepSpare gives a drained batch back as the mailbox's spare when it has
// none, so that a claim handed to a new goroutine (which starts with no
// batch of its own) does not make the mailbox grow a new slice each time.
func (a *actor) keepSpare(batch []mail) {
	a.mu.Lock()
	if a.spare == nil {
		a.spare = batch[:0]
	}
	a.mu.Unlock()
}

// actorFramesQueuedMax is the mailbox length past which a connection
// reader waits before it reads on (frames queue only while another
// goroutine drains the session: a reader must not outrun it without bound).
const actorFramesQueuedMax = 1024

// waitRoom blocks a reader while the mailbox holds more than
// actorFramesQueuedMax inputs, until its claimer takes them or cancel closes.
func (a *actor) waitRoom(cancel <-chan struct{}) {
	a.mu.Lock()
	if len(a.queue) <= actorFramesQueuedMax || a.gone {
		a.mu.Unlock()
		return
	}
	if !a.roomWanted {
		a.roomWanted = true
		a.room = make(chan struct{})
	}
	room := a.room
	a.mu.Unlock()
	select {
	case <-room:
	case <-cancel:
	}
}

// worklist is one goroutine's actors claimed and still to drain. Draining
// them one after the other (not recursively) keeps stacks flat and holds no
// lock while another machine steps.
// It also collects the connections its steps queued bytes for, and wakes
// their writers only when it is done: every frame of a pass leaves in one
// write.
type worklist struct {
	actors []*actor
	wakes  []*conn
}

func (w *worklist) add(a *actor) { w.actors = append(w.actors, a) }

// deliverTo pushes one input into a and, when that claims it, drains a and
// whatever that claims in turn, on this goroutine. The caller holds no lock.
func (b *Broker) deliverTo(a *actor, in node.Input) bool {
	claimed, ok := a.push(in)
	if claimed {
		var w worklist
		w.add(a)
		b.drainAll(&w)
	}
	return ok
}

// drainAll drains every claimed actor of w.
func (b *Broker) drainAll(w *worklist) {
	for len(w.actors) > 0 {
		a := w.actors[len(w.actors)-1]
		w.actors = w.actors[:len(w.actors)-1]
		b.drain(a, w)
	}
	for i, c := range w.wakes {
		c.wakeQueued.Store(false)
		c.wake()
		w.wakes[i] = nil
	}
	w.wakes = w.wakes[:0]
}

// drain steps a's inputs until its mailbox is empty (releasing the claim),
// or hands the claim to a new goroutine after actorStepsPerClaimMax steps.
func (b *Broker) drain(a *actor, w *worklist) {
	var batch []mail
	for steps := 0; ; {
		batch = a.take(batch)
		if batch == nil {
			return
		}
		// One clock read per batch: the inputs of a batch arrived together,
		// and a read per step was a measurable share of the broker's CPU.
		nowMs := b.clock.nowMs()
		for i := range batch {
			if a.stepOne(b, batch[i].input(&a.deliver), nowMs, w) {
				b.dropSession(a, batch[i+1:])
				return
			}
			steps++
		}
		if steps >= actorStepsPerClaimMax {
			clear(batch)
			a.keepSpare(batch)
			b.detached.Add(1)
			go func() {
				defer b.detached.Done()
				var own worklist
				own.add(a) // still claimed: this goroutine owns it now
				b.drainAll(&own)
			}()
			return
		}
	}
}

// stepOne steps one input and carries out its effects. It reports true
// when the session ended with this step.
func (a *actor) stepOne(b *Broker, in node.Input, nowMs int64, w *worklist) (ended bool) {
	stampMachineInput(in, nowMs)
	if written, ok := in.(*node.Written); ok {
		b.takeWritten(written)
	}
	rd := a.m.Step(in)
	recycle(in, &a.deliver)
	b.applyActorReady(a, rd, w)
	return a.sess != nil && a.sess.Ended()
}

// dropSession forgets an ended session: later envelopes to it bounce, and
// the envelopes still queued for it (rest, and anything pushed since) go
// back to their senders.
func (b *Broker) dropSession(a *actor, rest []mail) {
	assertTrue(a.sess != nil, "only sessions end")
	b.sessMu.Lock()
	delete(b.sessions, a.addr.Session)
	b.sessMu.Unlock()
	a.mu.Lock()
	a.gone = true
	if a.roomWanted {
		a.roomWanted = false
		close(a.room)
	}
	left := append(append([]mail(nil), rest...), a.queue...)
	a.queue = nil
	a.running = false
	a.mu.Unlock()
	if a.timer != nil {
		a.timer.Stop()
	}
	if c := a.conn.Load(); c != nil && c.boundTo() == a {
		c.closeAfterFlush() // the session closed it already; never leave it silent
	}
	for i := range left {
		if env, ok := left[i].envelope(); ok {
			b.bounce(env)
		}
	}
}

// applyActorReady carries out the effects of one Node or Session step, in
// the contract order of node.Ready.
func (b *Broker) applyActorReady(a *actor, rd *node.Ready, w *worklist) {
	if rd == nil {
		return
	}
	for _, init := range rd.Start {
		b.startSession(init)
	}
	for _, bind := range rd.Bind {
		b.bindConn(bind)
	}
	if len(rd.Persist) > 0 {
		assertTrue(a.sess == nil, "only the Node persists records")
		b.nodeLog.submit(rd.Persist)
	}
	assertTrue(len(rd.PersistEntries) == 0, "only Hosts persist partition entries")
	b.applySends(a, rd.Sends, rd.Close, w)
	b.metrics.countSession(&rd.Counted)
	if rd.Quarantine != nil {
		// An observation (admin_quarantine.go), published before the
		// step's answers go out: a repair's caller then reads the new set.
		b.metrics.quarantine.Store(rd.Quarantine)
	}
	if p := rd.Partitions; p != nil {
		assertTrue(a.sess == nil, "only the Node reports the partition figures")
		b.metrics.partitionsDeclared.Store(int64(p.Declared))
		b.metrics.partitionsMax.Store(int64(p.Max))
	}
	for _, env := range rd.Out {
		assertTrue(env.From == a.addr, "a machine sends only as itself")
		if env.To.Kind == node.AddrPartition {
			b.routeToPartition(a, env)
			continue
		}
		b.route(env, w)
	}
	for _, req := range rd.Load {
		if req.Reload {
			b.idle.reloads.Add(1) // host_idle.go
		}
		b.startLoad(req)
	}
	for _, req := range rd.Remove { // admin_queueops.go
		b.startRemove(req)
	}
	for _, id := range rd.Unload {
		b.startUnload(id) // host_idle.go
	}
	for _, check := range rd.CheckPassword {
		b.auth.submit(a, check)
	}
	if rd.Snapshot != nil {
		assertTrue(a.sess == nil, "only the Node snapshots among actors")
		b.nodeLog.snapshot(*rd.Snapshot)
	}
	b.armActor(a, rd.WakeMs)
}

// armActor schedules a Tick for a at wakeMs (0: none).
func (b *Broker) armActor(a *actor, wakeMs int64) {
	if wakeMs == a.wakeAtMs && !a.fired.Load() {
		return
	}
	a.wakeAtMs = wakeMs
	a.fired.Store(false)
	if wakeMs == 0 {
		if a.timer != nil {
			a.timer.Stop()
		}
		return
	}
	// One millisecond late rather than early: the clock truncates to whole
	// milliseconds, and a Tick before the deadline would be asked again.
	d := b.clock.untilMs(wakeMs) + time.Millisecond
	if a.timer == nil {
		a.timer = time.AfterFunc(d, func() { b.tickActor(a) })
		return
	}
	a.timer.Reset(d)
}

// tickActor runs on a timer's goroutine. A Tick that arrives early or
// twice is harmless: machines act on the time it carries.
func (b *Broker) tickActor(a *actor) {
	if b.stopped() {
		return
	}
	a.fired.Store(true)
	b.deliverTo(a, &node.Tick{})
}

// startSession creates a Session machine for a Ready.Start.
func (b *Broker) startSession(init node.SessionInit) {
	s := node.NewSession(b.nodeCfg, init)
	a := newActor(node.SessionAddr(init.ID), s, s)
	b.sessMu.Lock()
	defer b.sessMu.Unlock()
	assertTrue(b.sessions[init.ID] == nil, "a session id is minted once")
	b.sessions[init.ID] = a
}

func (b *Broker) session(id node.SessionID) *actor {
	b.sessMu.RLock()
	defer b.sessMu.RUnlock()
	return b.sessions[id]
}

// route delivers one envelope by its address, or bounces it to its sender.
func (b *Broker) route(env node.Envelope, w *worklist) {
	b.metrics.countEnvelope(&env)
	switch env.To.Kind {
	case node.AddrNode:
		b.pushOrBounce(b.nodeActor, env, w)
	case node.AddrSession:
		if env.To == importAddr && b.importer != nil {
			b.importer.answer(b, env.Msg)
			return
		}
		a := b.session(env.To.Session)
		if a == nil {
			b.bounce(env)
			return
		}
		b.pushOrBounce(a, env, w)
	case node.AddrPartition:
		b.pushToPartition(b.host(env.To.Queue), env)
	case node.AddrAdmin:
		b.admin.answer(env.To.Request, adminAnswer{msg: env.Msg})
	default:
		panic(fmt.Sprintf("broker: envelope to an unknown address %v", env.To))
	}
}

// routeToSession is route for envelopes of one sender to one session, in
// order: one lookup and one push for all of them.
func (b *Broker) routeToSession(envs []node.Envelope, w *worklist) {
	to := envs[0].To
	assertTrue(to.Kind == node.AddrSession && to != importAddr, "a group goes to a session")
	for i := range envs {
		assertTrue(envs[i].To == to && envs[i].From == envs[0].From, "a group has one sender and one receiver")
		b.metrics.countEnvelope(&envs[i])
	}
	a := b.session(to.Session)
	claimed, ok := false, false
	if a != nil {
		claimed, ok = a.pushEnvs(envs)
	}
	if !ok {
		for i := range envs {
			b.bounce(envs[i])
		}
		return
	}
	if claimed {
		w.add(a)
	}
}

// routeToPartition is route for an envelope from actor a to a partition,
// through a's cached runner when it is the one addressed.
func (b *Broker) routeToPartition(a *actor, env node.Envelope) {
	b.metrics.countEnvelope(&env)
	h := a.host
	if h == nil || h.id != env.To.Queue {
		h = b.host(env.To.Queue)
		a.host = h
	}
	assertTrue(h == nil || h.id == env.To.Queue, "the runner found serves the queue addressed")
	if h != nil && h == a.host && h.halting() {
		// The cached runner was stopped (its queue deleted, admin_queueops.go):
		// a new runner of the same partition may have been loaded since.
		h = b.host(env.To.Queue)
		a.host = h
	}
	b.pushToPartition(h, env)
}

// pushToPartition pushes env into h's inbox, or bounces it (no such
// partition, or its runner halted).
func (b *Broker) pushToPartition(h *hostRunner, env node.Envelope) {
	if h == nil {
		b.bounce(env)
		return
	}
	depth, ok := h.pushDepth(mail{env: env})
	if !ok {
		b.bounce(env)
		return
	}
	if env.From.Kind == node.AddrSession && depth >= b.cfg.RunnerInboxMax {
		b.pressSender(env.From, h)
	}
}

func (b *Broker) pushOrBounce(a *actor, env node.Envelope, w *worklist) {
	claimed, ok := a.pushEnv(env)
	if !ok {
		b.bounce(env)
		return
	}
	if claimed {
		w.add(a)
	}
}

// bounce hands env back to its sender (Bounced). A sender that is gone too
// is not told: nobody is left to care.
func (b *Broker) bounce(env node.Envelope) {
	in := &node.Bounced{Envelope: env}
	switch env.From.Kind {
	case node.AddrNode:
		b.pushDetached(b.nodeActor, in)
	case node.AddrSession:
		if a := b.session(env.From.Session); a != nil {
			b.pushDetached(a, in)
		}
	case node.AddrPartition:
		if h := b.host(env.From.Queue); h != nil {
			h.push(in)
		}
	case node.AddrAdmin:
		b.admin.answer(env.From.Request, adminAnswer{msg: env.Msg, bounced: true})
	}
}

// pushDetached pushes in and, when that claims the actor, drains it on a
// goroutine of its own: for callers in the middle of other work.
func (b *Broker) pushDetached(a *actor, in node.Input) {
	if claimed, _ := a.push(in); claimed {
		b.drainDetached(a)
	}
}

// drainDetached drains a, already claimed, on a goroutine of its own.
func (b *Broker) drainDetached(a *actor) {
	b.detached.Add(1)
	go func() {
		defer b.detached.Done()
		var w worklist
		w.add(a)
		b.drainAll(&w)
	}()
}

// pressSender makes the reader of the sending session's connection wait
// for h to drain before it reads another frame (conn.go).
func (b *Broker) pressSender(from node.Address, h *hostRunner) {
	if a := b.session(from.Session); a != nil {
		if c := a.conn.Load(); c != nil {
			c.pressure.Store(h)
		}
	}
}

// stampMachineInput sets the clock on an input for a Node or Session.
func stampMachineInput(in node.Input, nowMs int64) {
	switch in := in.(type) {
	case *node.Tick:
		in.NowMs = nowMs
	case *node.Deliver:
		in.NowMs = nowMs
	case *node.Bounced:
		in.NowMs = nowMs
	case *node.ConnOpened:
		in.NowMs = nowMs
	case *node.Frame:
		in.NowMs = nowMs
	case *node.ConnClosed:
		in.NowMs = nowMs
	case *node.Written:
		in.NowMs = nowMs
	case *node.AuthChecked:
		in.NowMs = nowMs
	case *node.Persisted:
		in.NowMs = nowMs
	case *node.LoadDone:
		in.NowMs = nowMs
	case *node.SnapshotDone:
		in.NowMs = nowMs
	case *node.Drain:
		in.NowMs = nowMs
	case *node.StreamReadDone:
		in.NowMs = nowMs
	case *node.RemoveDone: // admin_queueops.go
		in.NowMs = nowMs
	case *node.UnloadDone: // host_idle.go
		in.NowMs = nowMs
	default:
		panic(fmt.Sprintf("broker: unknown machine input %T", in))
	}
}
