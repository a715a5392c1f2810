package broker

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/logstore"
)

// Partition runners: one goroutine per loaded partition, the only context
// that steps its machine (a queue's node.Host or a stream's
// node.StreamHost, host_stream.go). Invariants:
//   - entries reach the Committer in the order the Host produced them, and
//     durability comes back as Persisted only after their fsync, so the
//     core's durability gate holds in production exactly as in the
//     simulator;
//   - the inbox never refuses a push and never blocks one (a runner never
//     waits on its own inbox, nor on another's): client backpressure is the
//     readers' job (waitRoom);
//   - a stored body leaves this goroutine only read back and owned by its
//     envelope (Deliveries, DeadLetterOut, StreamDeliveries); a failed read stops the broker
//     cleanly: the envelope is not sent, the runner halts, nothing waits;
//   - after a storage failure the runner halts: later envelopes to it
//     bounce to their senders, and readers waiting on it are released;
//   - a Ready's envelopes to one session are pushed together, in the
//     order the Host sent them (FIFO per pair; receivers are not ordered
//     among themselves).
type hostRunner struct {
	b         *Broker
	id        core.QueueID
	addr      node.Address
	h         partitionMachine
	log       *logstore.Log
	committer *logstore.Committer
	payloads  *logstore.PayloadReader

	mu         sync.Mutex
	queue      []mail
	halted     bool
	room       chan struct{} // closed when a waited-for inbox drains to half
	roomWanted bool
	notify     chan struct{}
	stop       chan struct{}
	stopOnce   sync.Once
	done       chan struct{}
	finishing  atomic.Bool // a clean close, not a halt on failure

	// Runner goroutine only.
	timer            *time.Timer
	timerAtMs        int64
	residentReported int64
	durableIndex     uint64
	snapshotIndex    uint64 // requested and not yet reported done; 0: none
	snapshotKeep     uint64
	work             worklist     // reused: sessions this runner's steps claimed
	deliver          node.Deliver // the Deliver envelopes are stepped in (pool.go)
	groups           []sessionGroup

	// obs: the Host's counts after each batch, for listings and metrics
	// (admin_queueops.go); written by the runner, read by anyone.
	obs hostObs
	// sobs: the same for a stream partition (admin_streams.go).
	sobs streamObs
}

// partitionMachine is what a runner steps: node.Host or node.StreamHost.
// Both take the same inputs from the driver and answer with a Ready; only
// a StreamHost asks for Reads.
type partitionMachine interface {
	Step(node.Input) *node.Ready
}

var errBrokerClosing = errors.New("broker is shutting down")

// startLoad carries out a LoadRequest off the Node's context: recovering a
// partition can take long, and nothing may wait on it but its own Opens.
func (b *Broker) startLoad(req node.LoadRequest) {
	b.loads.Add(1)
	go func() {
		defer b.loads.Done()
		started := time.Now()
		out, err := b.load(req)
		b.observeLoad(req, started, out, err) // diagnostics.go
		if err != nil {
			b.log.Error("partition failed to load", "partition", req.Queue.String(), "kind", kindName(req.Kind), "err", err)
		}
		if out.damage != nil {
			b.log.Error("partition log is damaged; not loaded (recovery.on_mismatch decides what follows)", "partition", req.Queue.String(),
				"kind", kindName(req.Kind), "damage", out.damage.Kind, "reason", out.damage.Reason)
		}
		b.deliverTo(b.nodeActor, &node.LoadDone{Queue: req.Queue, Err: err, Damage: out.damage, Cut: out.cut})
	}()
}

func (b *Broker) load(req node.LoadRequest) (recoveryOutcome, error) {
	if b.stopped() {
		return recoveryOutcome{}, errBrokerClosing
	}
	dir := partitionDir(b.cfg.DataDir, req.Kind, req.Queue)
	// The recovery checks (quarantine_load.go): damage comes back in out.
	log, h, lastIndex, out, err := b.openRecovered(req, dir)
	if err != nil || out.damage != nil {
		return out, err
	}
	r := &hostRunner{
		b: b, id: req.Queue, addr: node.PartitionAddr(req.Queue), log: log,
		h:        h,
		payloads: logstore.NewPayloadReader(dir),
		room:     make(chan struct{}), notify: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
		timer:        time.NewTimer(time.Hour),
		durableIndex: lastIndex,
	}
	r.timer.Stop()
	r.committer = logstore.NewCommitter(log, r.onDurable)
	r.committer.ObserveRounds(b.metrics.observeRound) // admin_metrics.go
	b.hostMu.Lock()
	if b.hostsClosed {
		b.hostMu.Unlock()
		r.committer.Close()
		log.Close()
		return out, errBrokerClosing
	}
	assertTrue(b.hosts[req.Queue] == nil, "the Node loads a partition once")
	b.hosts[req.Queue] = r
	b.hostMu.Unlock()
	go r.run()
	// The Host's first step applies settings and recovery timers.
	r.push(&node.Tick{})
	return out, nil
}

// recoverMachine rebuilds the partition's machine from what its log held,
// and says the last index the log holds (all of it durable).
func (b *Broker) recoverMachine(req node.LoadRequest, rec logstore.Recovered) (partitionMachine, uint64, error) {
	if req.Kind == node.KindStream {
		return b.recoverStream(req, rec)
	}
	p, err := core.Recover(req.Config, rec.Snapshot, rec.Entries)
	if err != nil {
		return nil, 0, err
	}
	return node.NewHost(b.nodeCfg, p, req), p.LastIndex(), nil
}

func (b *Broker) host(q core.QueueID) *hostRunner {
	b.hostMu.RLock()
	defer b.hostMu.RUnlock()
	return b.hosts[q]
}

// push queues an input; false when the runner halted (the caller bounces).
func (r *hostRunner) push(in node.Input) bool {
	assertTrue(in != nil, "a nil input pushed")
	_, ok := r.pushDepth(mail{in: in})
	return ok
}

// pushDepth is push, also saying how deep the inbox is now (backpressure).
func (r *hostRunner) pushDepth(m mail) (int, bool) {
	r.mu.Lock()
	if r.halted {
		r.mu.Unlock()
		return 0, false
	}
	r.queue = append(r.queue, m)
	depth := len(r.queue)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	return depth, true
}

// waitRoom blocks a connection reader until the inbox is at most half its
// limit, the runner halts, or cancel closes.
func (r *hostRunner) waitRoom(cancel <-chan struct{}) {
	r.mu.Lock()
	if r.halted || len(r.queue) <= r.b.cfg.RunnerInboxMax/2 {
		r.mu.Unlock()
		return
	}
	r.roomWanted = true
	room := r.room
	r.mu.Unlock()
	select {
	case <-room:
	case <-cancel:
	case <-r.stop:
	}
}

// onDurable runs on the committer goroutine.
func (r *hostRunner) onDurable(upTo uint64, stored []logstore.StoredPayload, err error) {
	if err != nil {
		r.b.fatal(fmt.Errorf("partition %s: storage failed: %w", r.id, err))
		r.halt()
		return
	}
	r.b.metrics.storageWriteRounds.Add(1)
	in := &node.Persisted{UpToIndex: upTo}
	if len(stored) > 0 {
		in.Stored = make([]node.StoredPayload, len(stored))
		for i, sp := range stored {
			in.Stored[i] = node.StoredPayload{Offset: sp.Offset, Ref: sp.Ref}
		}
	}
	r.push(in)
}

func (r *hostRunner) run() {
	defer close(r.done)
	var batch []mail
	for {
		select {
		case <-r.notify:
			batch = r.take(batch)
			nowMs := r.b.clock.nowMs() // one clock read per batch
			for i := range batch {
				if !r.step(batch[i].input(&r.deliver), nowMs) {
					return
				}
			}
			r.observe()
			r.handOff()
		case <-r.timer.C:
			r.timerAtMs = 0
			if !r.step(&node.Tick{}, r.b.clock.nowMs()) {
				return
			}
			r.observe()
			r.handOff()
		case <-r.stop:
			if r.finishing.Load() {
				// A clean close: step what was queued before it (settles
				// routed before the sockets closed), so the Committer's
				// final flush writes their entries.
				batch = r.take(batch)
				nowMs := r.b.clock.nowMs()
				for i := range batch {
					if !r.step(batch[i].input(&r.deliver), nowMs) {
						break
					}
				}
			}
			return
		}
	}
}

// handOff drains the sessions this batch claimed on goroutines of their
// own: their mailboxes also hold their clients' frames (acks, publishes),
// whose decoding must not serialise onto this partition's goroutine.
func (r *hostRunner) handOff() {
	for _, a := range r.work.actors {
		r.b.drainDetached(a)
	}
	clear(r.work.actors)
	r.work.actors = r.work.actors[:0]
	assertTrue(len(r.work.wakes) == 0, "a Host queues no bytes itself")
}

// take swaps out the inbox and lets waiting readers go once it is drained.
func (r *hostRunner) take(done []mail) []mail {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(done)
	batch := r.queue
	r.queue = done[:0]
	if r.roomWanted {
		r.roomWanted = false
		close(r.room)
		r.room = make(chan struct{})
	}
	return batch
}

// step stamps one input, steps the Host and carries out its effects. It
// reports false when the runner must stop (storage failed).
func (r *hostRunner) step(in node.Input, nowMs int64) bool {
	stampMachineInput(in, nowMs)
	persisted, _ := in.(*node.Persisted)
	if persisted != nil {
		assertTrue(persisted.UpToIndex >= r.durableIndex, "durability reports only grow")
		r.durableIndex = persisted.UpToIndex
		persisted.ResidentTotalBytes = r.b.metrics.residentPayloadBytes.Load()
	}
	if done, ok := in.(*node.SnapshotDone); ok {
		// Before the step: the Host may ask for its next snapshot in it.
		r.snapshotSaved(done)
	}
	rd := r.h.Step(in)
	recycle(in, &r.deliver)
	if !r.apply(rd) {
		r.halt()
		return false
	}
	r.arm(rd.WakeMs, nowMs)
	return true
}

// apply carries out a Host Ready in contract order.
func (r *hostRunner) apply(rd *node.Ready) bool {
	assertTrue(len(rd.Sends) == 0 && len(rd.Close) == 0, "a Host writes to no connection")
	assertTrue(len(rd.Persist) == 0 && len(rd.Start) == 0, "a Host persists entries, starts nothing")
	if len(rd.PersistEntries) > 0 {
		if err := r.committer.Submit(rd.PersistEntries); err != nil {
			r.b.fatal(fmt.Errorf("partition %s: storage refused entries: %w", r.id, err))
			return false
		}
	}
	if !r.startReads(rd.Reads) {
		return false
	}
	w := &r.work
	ok := true
	for i := range rd.Out {
		env := rd.Out[i]
		assertTrue(env.From == r.addr, "a Host sends only as itself")
		if !r.resolveBodies(env.Msg) {
			ok = false
			break
		}
		if env.To.Kind == node.AddrSession && env.To != importAddr {
			r.groupForSession(env)
			continue
		}
		r.b.route(env, w)
	}
	r.routeGroups(w)
	if !ok {
		return false
	}
	if rd.Snapshot != nil {
		r.requestSnapshot(rd.Snapshot)
	}
	r.b.metrics.settled(rd.Settled)
	if rd.LeaseExpiries > 0 {
		r.b.metrics.leaseExpired.Add(rd.LeaseExpiries)
	}
	r.reportResident(rd.ResidentBytes)
	return true
}

// sessionGroup is one session's envelopes of a Host Ready, in the order
// the Host sent them: a Persisted answers many publishes at once, and
// pushing a session's answers together costs one lookup and one lock
// instead of one per envelope. Only the order per receiver is kept, which
// is all the contract promises (FIFO per sender/receiver pair).
type sessionGroup struct {
	to   node.Address
	envs []node.Envelope
}

// sessionGroupsMax bounds the distinct sessions grouped in one Ready;
// envelopes to further sessions are routed one by one.
const sessionGroupsMax = 16

func (r *hostRunner) groupForSession(env node.Envelope) {
	for i := range r.groups {
		if r.groups[i].to == env.To {
			r.groups[i].envs = append(r.groups[i].envs, env)
			return
		}
	}
	if len(r.groups) == sessionGroupsMax {
		r.b.route(env, &r.work)
		return
	}
	if len(r.groups) < cap(r.groups) {
		// Reuse the slot's slice from an earlier step.
		r.groups = r.groups[:len(r.groups)+1]
		g := &r.groups[len(r.groups)-1]
		g.to, g.envs = env.To, append(g.envs[:0], env)
		return
	}
	r.groups = append(r.groups, sessionGroup{to: env.To, envs: []node.Envelope{env}})
}

// routeGroups pushes each grouped session's envelopes, then forgets them
// (keeping the slices).
func (r *hostRunner) routeGroups(w *worklist) {
	for i := range r.groups {
		g := &r.groups[i]
		assertTrue(len(g.envs) > 0, "a session group holds an envelope")
		r.b.routeToSession(g.envs, w)
		clear(g.envs)
		g.envs = g.envs[:0]
		g.to = node.Address{}
	}
	r.groups = r.groups[:0]
}

// resolveBodies reads stored bodies of msg back, into memory the envelope
// owns (the reader's buffer is reused by the next read).
func (r *hostRunner) resolveBodies(msg node.Message) bool {
	switch m := msg.(type) {
	case *node.Deliveries:
		for i := range m.Items {
			body, ok := r.loaded(m.Items[i].Body)
			if !ok {
				return false
			}
			m.Items[i].Body = body
		}
	case *node.DeadLetterOut:
		body, ok := r.loaded(m.Body)
		if !ok {
			return false
		}
		m.Body = body
	case *node.MessagesPage, *node.DeadLetterReads:
		return r.resolveOperatorBodies(msg) // admin_messages.go
	case *node.StreamDeliveries:
		// A StreamHost hands out the bodies it logged, or ones a read
		// resolved; none is stored today, but the contract is the same.
		for i := range m.Items {
			body, ok := r.loaded(m.Items[i].Body)
			if !ok {
				return false
			}
			m.Items[i].Body = body
		}
	}
	return true
}

func (r *hostRunner) loaded(body *core.Body) (*core.Body, bool) {
	if body == nil || !body.IsStored() {
		return body, true
	}
	payload, err := r.payloads.Read(body.Ref)
	if err != nil {
		// A durable payload cannot be read back (removed, cut short, or
		// failing its checksum): nothing more may be served from this log;
		// restart recovery decides what is left (SPEC §7).
		r.b.fatal(fmt.Errorf("partition %s: reading a stored payload: %w", r.id, err))
		return nil, false
	}
	r.b.metrics.payloadsRead.Add(1)
	out := *body
	out.Payload, out.Ref = append([]byte(nil), payload...), core.PayloadRef{}
	return &out, true
}

// requestSnapshot hands a snapshot to the Committer, which writes it once
// every entry up to its index is durable, and reports it done only once it
// is written (a stream's retention moves its state at SnapshotDone: reported
// when the index was merely durable, a crash before the write brought back
// dropped records).
func (r *hostRunner) requestSnapshot(req *node.SnapshotRequest) {
	assertTrue(r.snapshotIndex == 0, "one snapshot in flight per partition")
	data := append([]byte(nil), req.Data...)
	index := req.Index
	saved := func() { r.push(&node.SnapshotDone{Index: index}) }
	if err := r.committer.SaveSnapshot(index, data, req.KeepBlobsFrom, saved); err != nil {
		r.push(&node.SnapshotDone{Index: index, Err: err})
		return
	}
	r.snapshotIndex, r.snapshotKeep = index, req.KeepBlobsFrom
}

// snapshotSaved: the pending snapshot is written; the files it removed
// (blob files below keep, all covered ones when keep is 0) go from the
// payload reader too, whose handles would keep their blocks.
func (r *hostRunner) snapshotSaved(done *node.SnapshotDone) {
	if done.Err != nil || r.snapshotIndex == 0 || done.Index != r.snapshotIndex {
		return
	}
	keep := r.snapshotKeep
	if keep == 0 {
		keep = math.MaxUint64
	}
	r.payloads.Forget(keep)
	r.snapshotIndex, r.snapshotKeep = 0, 0
}

// reportResident brings the broker's resident total up to this partition's.
func (r *hostRunner) reportResident(nowBytes int64) {
	assertTrue(nowBytes >= 0, "resident bytes are never negative")
	if nowBytes != r.residentReported {
		r.b.metrics.residentPayloadBytes.Add(nowBytes - r.residentReported)
		r.residentReported = nowBytes
	}
}

func (r *hostRunner) arm(wakeMs, nowMs int64) {
	if wakeMs == 0 {
		if r.timerAtMs != 0 {
			r.timer.Stop()
			r.timerAtMs = 0
		}
		return
	}
	if r.timerAtMs == wakeMs {
		return
	}
	r.timer.Stop()
	select { // drain a fire that raced the stop
	case <-r.timer.C:
	default:
	}
	// One millisecond late rather than early (the clock truncates).
	r.timer.Reset(time.Duration(max(wakeMs-nowMs, 0)+1) * time.Millisecond)
	r.timerAtMs = wakeMs
}

// halt stops the runner taking inputs; waiting readers go.
func (r *hostRunner) halt() {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.halted = true
		r.mu.Unlock()
		close(r.stop)
	})
}

// close stops the runner and flushes its log.
func (r *hostRunner) close() {
	r.finishing.Store(true)
	r.halt()
	<-r.done
	if err := r.committer.Close(); err != nil {
		r.b.log.Error("closing partition log", "partition", r.id.String(), "err", err)
	}
	r.payloads.Close()
	r.reportResident(0)
	r.log.Close()
	// Drop the machine and whatever mail is left: a closed runner may stay
	// referenced (a session's cached runner, until it sends elsewhere), and
	// the machine holds every live message of the partition. Only the
	// runner goroutine, which has ended, touched them.
	r.mu.Lock()
	r.h, r.queue = nil, nil
	r.mu.Unlock()
}

// partitionDir is where one partition's log lives: queues under "queues"
// (the layout data directories already have), streams under "streams". '@'
// cannot appear in a name, so "topic@group" never collides with an
// ungrouped topic.
func partitionDir(dataDir string, kind node.PartitionKind, id core.QueueID) string {
	name, root := id.Topic, "queues"
	if id.Group != "" {
		name += "@" + id.Group
	}
	if kind == node.KindStream {
		assertTrue(id.Group == "", "a stream partition has no group")
		root = "streams"
	}
	return filepath.Join(dataDir, root, name, strconv.FormatUint(uint64(id.Partition), 10))
}

func kindName(kind node.PartitionKind) string {
	if kind == node.KindStream {
		return "stream"
	}
	return "queue"
}
