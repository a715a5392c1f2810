//go:build !fibril_next

package broker

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/io/logstore"
)

// runner owns one loaded queue partition. Invariants:
//   - only the runner goroutine touches p, pending and subs;
//   - entries reach the committer in the order Step produced them, and
//     durability comes back as core.Persisted, so the core's durability gate
//     holds in production exactly as in the simulator;
//   - replies of a step are sent before its deliveries, so SUBSCRIBE_OK
//     precedes the first DELIVER of a subscription (PROTOCOL.md §5.6).
type runner struct {
	b         *Broker
	id        core.QueueID
	p         *core.Partition
	log       *logstore.Log
	committer *logstore.Committer

	inbox    chan request
	stop     chan struct{} // closed once: by close, or when run gives up
	stopOnce sync.Once
	done     chan struct{}

	// Durability reports from the committer goroutine. A channel send could
	// deadlock against a full inbox, so the report is an atomic plus a
	// one-slot wake-up.
	durableUpTo atomic.Uint64
	durableErr  atomic.Pointer[error]
	wake        chan struct{}
	fedDurable  uint64
	// storedMu guards stored: publishes of durable rounds whose payloads
	// are in blob files, in order, for the spill policy (spill).
	storedMu sync.Mutex
	stored   []logstore.StoredPayload
	// payloads reads stored payloads back (runner goroutine only);
	// residentReported is this partition's share of the broker's
	// residentPayloadBytes.
	payloads         *logstore.PayloadReader
	residentReported int64

	pending map[uint64]pendingReply
	nextRef uint64
	subs    map[uint64]*binding

	entriesSinceSnapshot int
	timer                *time.Timer
	timerArmedMs         int64
}

// request is one input for a runner, with who gets the answer.
type request struct {
	in    core.Input
	reply pendingReply
	bind  *binding // Subscribe: the session binding to register
}

// pendingReply says where the reply to an input goes.
type pendingReply struct {
	sess      *session
	gen       uint64 // the attachment that asked; replies go to it only
	requestID uint64
	kind      replyKind
	// internal completes a request made by the broker itself (a dead-letter
	// copy, one partition of a declare); it runs on the runner goroutine.
	internal func(rep *core.Reply)
	bind     *binding // replySubscribe: the binding being subscribed
}

type replyKind uint8

const (
	replyNone replyKind = iota
	replyPublish
	replyPublishUnconfirmed // errors only
	replyDeclare
	replySubscribe
	replyInternal
)

// runnerInboxDrainMax bounds the requests one wake-up steps before it hands
// the accumulated entries to storage, so one busy queue cannot starve fsync.
const runnerInboxDrainMax = 1024

func (b *Broker) startRunner(id core.QueueID) (*runner, error) {
	cfg := b.cfg.Partition
	cfg.Queue = id
	cfg.TagFloor = b.boot << bootTagShift
	if cfg.Epoch == 0 {
		cfg.Epoch = 1
	}
	dir := partitionDir(b.cfg.DataDir, id)
	log, rec, err := logstore.Open(dir, logstore.DefaultOptions())
	if err != nil {
		return nil, fmt.Errorf("queue %s: open log: %w", id, err)
	}
	if rec.TruncatedTail {
		b.log.Warn("queue log had a torn or corrupt tail; cut at the last valid record", "queue", id.String())
	}
	p, err := core.Recover(cfg, rec.Snapshot, rec.Entries)
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("queue %s: recover: %w", id, err)
	}
	r := &runner{
		b: b, id: id, p: p, log: log,
		inbox:    make(chan request, b.cfg.RunnerInboxMax),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		pending:  map[uint64]pendingReply{},
		subs:     map[uint64]*binding{},
		timer:    time.NewTimer(time.Hour),
		payloads: logstore.NewPayloadReader(dir),
	}
	r.timer.Stop()
	r.fedDurable = p.LastIndex()
	r.reportResident()
	r.committer = logstore.NewCommitter(log, r.onDurable)
	go r.run()
	// The catalogue may hold settings declared while this partition was not
	// loaded (or whose Declare entry a crash lost): apply them first.
	if in := b.catalog.settings(queueName{Topic: id.Topic, Group: id.Group}).declareInput(p.Settings()); in != nil {
		r.inbox <- request{in: in}
	}
	// Recovery may have timers to arm and dead-letter copies to resend.
	r.inbox <- request{in: &core.Tick{}}
	return r, nil
}

// onDurable runs on the committer goroutine.
func (r *runner) onDurable(upTo uint64, stored []logstore.StoredPayload, err error) {
	if err != nil {
		r.durableErr.Store(&err)
	} else {
		if len(stored) > 0 {
			r.storedMu.Lock()
			r.stored = append(r.stored, stored...)
			r.storedMu.Unlock()
		}
		r.durableUpTo.Store(upTo)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *runner) run() {
	defer close(r.done)
	for {
		select {
		case req := <-r.inbox:
			r.handle(req)
			for i := 0; i < runnerInboxDrainMax; i++ {
				select {
				case req = <-r.inbox:
					r.handle(req)
					continue
				default:
				}
				break
			}
		case <-r.wake:
			if errp := r.durableErr.Load(); errp != nil {
				r.b.fatal(fmt.Errorf("queue %s: storage failed: %w", r.id, *errp))
				r.halt() // senders blocked on the inbox must not wait forever
				return
			}
			if upTo := r.durableUpTo.Load(); upTo > r.fedDurable {
				r.fedDurable = upTo
				r.step(&core.Persisted{UpToIndex: upTo}, pendingReply{})
				r.spill()
				r.maybeSnapshot()
			}
		case <-r.timer.C:
			r.timerArmedMs = 0
			r.step(&core.Tick{}, pendingReply{})
		case <-r.stop:
			return
		}
	}
}

func (r *runner) handle(req request) {
	if req.bind != nil {
		r.subs[req.bind.subID] = req.bind
	}
	r.step(req.in, req.reply)
	if req.bind != nil && !req.bind.registered {
		delete(r.subs, req.bind.subID) // the subscribe was refused
	}
	if un, ok := req.in.(*core.Unsubscribe); ok {
		delete(r.subs, un.SubID)
	}
}

// step stamps the time, feeds one input and routes the effects.
func (r *runner) step(in core.Input, reply pendingReply) {
	now := time.Now().UnixMilli()
	ref := uint64(0)
	if reply.kind != replyNone {
		r.nextRef++
		ref = r.nextRef
		r.pending[ref] = reply
	}
	stampInput(in, now, ref)
	rd := r.p.Step(in)
	if len(rd.Persist) > 0 {
		if err := r.committer.Submit(rd.Persist); err != nil {
			// Storage is gone: nothing more may be promised from this log.
			r.b.fatal(fmt.Errorf("queue %s: storage refused entries: %w", r.id, err))
		}
		r.entriesSinceSnapshot += len(rd.Persist)
	}
	for i := range rd.Replies {
		r.routeReply(&rd.Replies[i])
	}
	if reply.kind == replyPublishUnconfirmed {
		delete(r.pending, ref) // no success reply will come; errors came in this step
	}
	for i := range rd.Deliveries {
		d := &rd.Deliveries[i]
		if bnd := r.subs[d.SubID]; bnd != nil {
			// deliver encodes the payload into the outbox at once, so the
			// reader's buffer may back it.
			if d.Body = r.loaded(d.Body, false); d.Body == nil {
				return
			}
			bnd.sess.deliver(bnd, d)
		}
	}
	for i := range rd.DeadLetters {
		dl := rd.DeadLetters[i]
		// The copy goes to another partition's log later: it owns its bytes.
		if dl.Body = r.loaded(dl.Body, true); dl.Body == nil {
			return
		}
		r.forwardDeadLetter(dl)
	}
	r.b.metrics.settled(rd.Settled)
	r.reportResident()
	r.arm(rd.NextWakeMs, now)
}

// loaded returns body with its payload in memory: body itself when it is,
// else a copy with the payload read back from its blob file, in the
// reader's buffer (valid until the next read) unless own asks for a copy.
// It returns nil when the payload cannot be read (the broker is stopping).
func (r *runner) loaded(body *core.Body, own bool) *core.Body {
	if !body.IsStored() {
		return body
	}
	payload, err := r.payloads.Read(body.Ref)
	if err != nil {
		r.storageReadFailed(err)
		return nil
	}
	r.b.metrics.payloadsRead.Add(1)
	if own {
		payload = append([]byte(nil), payload...)
	}
	loaded := *body
	loaded.Payload, loaded.Ref = payload, core.PayloadRef{}
	return &loaded
}

// storageReadFailed: a durable payload cannot be read back (removed, cut
// short, or failing its checksum). Nothing more may be served from this
// log; restart recovery decides what is left (SPEC §7).
func (r *runner) storageReadFailed(err error) {
	r.b.fatal(fmt.Errorf("queue %s: reading a stored payload: %w", r.id, err))
}

// spill drops from memory the payloads of newly durable publishes while the
// broker holds more than ResidentPayloadBytesMax of them, newest last: the
// oldest messages, which consumers get first, keep theirs. A spilled
// payload is read back from its blob file when it is delivered.
func (r *runner) spill() {
	r.storedMu.Lock()
	stored := r.stored
	r.stored = nil
	r.storedMu.Unlock()
	limit := r.b.cfg.ResidentPayloadBytesMax
	for _, sp := range stored {
		if r.b.metrics.residentPayloadBytes.Load() <= limit {
			break
		}
		if freed := r.p.SpillBody(sp.Offset, sp.Ref); freed > 0 {
			r.b.metrics.residentPayloadBytes.Add(-freed)
			r.residentReported -= freed
			r.b.metrics.payloadsSpilled.Add(1)
		}
	}
	r.reportResident()
}

// reportResident brings the broker's resident total up to date with this
// partition's.
func (r *runner) reportResident() {
	if now := r.p.ResidentPayloadBytes(); now != r.residentReported {
		r.b.metrics.residentPayloadBytes.Add(now - r.residentReported)
		r.residentReported = now
	}
}

func (r *runner) arm(wakeMs, now int64) {
	if wakeMs == 0 {
		if r.timerArmedMs != 0 {
			r.timer.Stop()
			r.timerArmedMs = 0
		}
		return
	}
	if r.timerArmedMs == wakeMs {
		return
	}
	r.timer.Stop()
	select { // drain a fire that raced the stop
	case <-r.timer.C:
	default:
	}
	r.timer.Reset(time.Duration(max(wakeMs-now, 0)) * time.Millisecond)
	r.timerArmedMs = wakeMs
}

func (r *runner) routeReply(rep *core.Reply) {
	pr, ok := r.pending[rep.Ref]
	if !ok {
		return // a settle's stale-tag report, or a reply nobody waits for
	}
	if rep.Kind != core.ReplyError || pr.kind != replyPublishUnconfirmed {
		delete(r.pending, rep.Ref)
	}
	switch pr.kind {
	case replyInternal:
		pr.internal(rep)
	case replySubscribe:
		r.completeSubscribe(pr, rep)
	default:
		pr.sess.replyFromCore(pr, rep)
	}
}

func (r *runner) completeSubscribe(pr pendingReply, rep *core.Reply) {
	bnd := pr.bind
	if rep.Kind == core.ReplyError {
		pr.sess.subscribeFailed(bnd, rep.Err)
		return
	}
	bnd.registered = true
	pr.sess.subscribed(bnd)
}

// forwardDeadLetter publishes a copy into its target queue and, once the
// target confirms it durable, settles the source (DeadLetterDone).
func (r *runner) forwardDeadLetter(dl core.DeadLetter) {
	offset, source := dl.Offset, r
	// Off the runner goroutine: loading the target may recover a whole
	// partition, and two runners must never wait on each other's inbox.
	go func() {
		target, err := source.b.runnerFor(queueName{Topic: dl.Target.Topic, Group: dl.Target.Group}, uint32(dl.Offset))
		if err != nil {
			source.b.log.Error("dead-letter target unavailable; the copy is resent after restart", "queue", source.id.String(), "target", dl.Target.Topic, "err", err)
			return
		}
		target.submit(request{
			in: &core.Publish{Confirm: true, Body: dl.Body, System: true},
			reply: pendingReply{kind: replyInternal, internal: func(rep *core.Reply) {
				if rep.Err != nil {
					source.b.log.Error("dead-letter copy refused; the copy is resent after restart", "queue", source.id.String(), "err", rep.Err)
					return
				}
				go source.submit(request{in: &core.DeadLetterDone{Offset: offset}})
			}},
		})
	}()
}

// submit queues a request; it blocks while the inbox is full (backpressure
// onto the sender), unless the runner is stopping.
func (r *runner) submit(req request) bool {
	select {
	case r.inbox <- req:
		return true
	case <-r.stop:
		return false
	}
}

// maybeSnapshot writes a snapshot once the log has grown well past what the
// live state needs, so a queue whose messages are settled stops growing on
// disk. It runs only when everything appended is durable, so the snapshot
// holds durable state only.
func (r *runner) maybeSnapshot() {
	if r.p.DurableIndex() != r.p.LastIndex() {
		return
	}
	if !logstore.ShouldSnapshotAfter(r.b.cfg.SnapshotEntriesMin, r.entriesSinceSnapshot, r.p.Live()) {
		return
	}
	keepBlobsFrom, stored := r.p.LowestStoredFile() // 0 when no body is stored
	if err := r.committer.SaveSnapshot(r.p.LastIndex(), r.p.Snapshot(), keepBlobsFrom); err != nil {
		r.b.log.Error("snapshot failed; the log keeps growing until the next try", "queue", r.id.String(), "err", err)
		return
	}
	// The snapshot removes the blob files below keepBlobsFrom (all covered
	// ones when nothing is stored): let go of our handles on them, which
	// would keep their blocks allocated.
	if !stored {
		keepBlobsFrom = math.MaxUint64
	}
	r.payloads.Forget(keepBlobsFrom)
	r.entriesSinceSnapshot = 0
}

// halt stops accepting requests.
func (r *runner) halt() { r.stopOnce.Do(func() { close(r.stop) }) }

func (r *runner) close() {
	r.halt()
	<-r.done
	if err := r.committer.Close(); err != nil {
		r.b.log.Error("closing queue log", "queue", r.id.String(), "err", err)
	}
	r.payloads.Close()
	r.b.metrics.residentPayloadBytes.Add(-r.residentReported)
	r.residentReported = 0
	r.log.Close()
}

// stampInput sets the clock and the reply reference on an input.
func stampInput(in core.Input, now int64, ref uint64) {
	switch in := in.(type) {
	case *core.Tick:
		in.NowMs = now
	case *core.Persisted:
		in.NowMs = now
	case *core.Declare:
		in.NowMs, in.Ref = now, ref
	case *core.SetGlobalDLQ:
		in.NowMs, in.Ref = now, ref
	case *core.Publish:
		in.NowMs, in.Ref = now, ref
	case *core.Subscribe:
		in.NowMs, in.Ref = now, ref
	case *core.Unsubscribe:
		in.NowMs, in.Ref = now, ref
	case *core.Ack:
		in.NowMs, in.Ref = now, ref
	case *core.Nack:
		in.NowMs, in.Ref = now, ref
	case *core.DeadLetterDone:
		in.NowMs = now
	default:
		panic(fmt.Sprintf("broker: unknown input %T", in))
	}
}
