package core

// Partition is the state machine of one partition of one queue. Invariants:
//   - durable state (messages, settings, offsets, tags) changes only in apply,
//     entry by entry, so replaying the log rebuilds it exactly;
//   - volatile state (subscriptions, pending replies, the durable index) lives
//     only as long as the process and is rebuilt empty on recovery;
//   - a message is delivered only once its publish entry is durable, and a
//     reply that promises durability is released only once the entries behind
//     it are durable (the durability gate);
//   - time only moves forward inside the core: nowMs is the largest NowMs
//     seen, so a clock that steps back cannot shorten a lease or a delay.
type Partition struct {
	cfg       Config
	settings  QueueSettings
	globalDLQ *DLQTarget

	// Log position.
	lastIndex    uint64
	lastEpoch    uint64
	durableIndex uint64
	// durableOffsetEnd: every offset below it has a durable publish entry.
	durableOffsetEnd uint64

	// Durable message state.
	nextOffset uint64
	nextTag    uint64
	store      messageStore
	fresh      offsetQueue // ready offsets in increasing order (fresh publishes)
	requeued   offsetHeap  // ready offsets that came back (retries, releases)
	readyCount int
	timed      int       // messages inflight or delayed: live entries of timers
	withTTL    int       // live messages with a TTL: live entries of ttls
	timers     timerHeap // lease deadlines and delays
	ttls       timerHeap // TTL deadlines
	dlqTargets map[uint64]DLQTarget

	// inflightCount: messages inflight, whoever holds them (a subscription,
	// or nobody for a lease recovered after a restart). Derived from the
	// entries, so a restart rebuilds it; the exclusive gate compares it with
	// the owner's own count instead of scanning (exclusive.go).
	inflightCount int

	// Volatile state.
	nowMs      int64
	subs       map[uint64]*subscription
	subOrder   []uint64 // subscription ids, sorted: round-robin order
	rrNext     int
	gated      gateQueue
	resendDLQ  bool // after recovery: re-emit every pending dead-letter copy
	budgetHit  bool // a bounded sweep stopped early; wake again now
	stepSerial uint64
	stats      Stats
	rd         Ready

	// owner: who may receive exclusive deliveries (exclusive.go). Volatile:
	// it names live subscriptions, and the Node sends it again after a restart.
	owner exclusiveOwner
}

// subscription is one consumer's view of the partition.
type subscription struct {
	id       uint64
	prefetch uint32
	autoAck  bool
	inflight map[uint64]uint64 // delivery tag -> offset, unsettled only
	// auto-ack deliveries are settled when sent; sentInStep bounds them to
	// prefetch per step instead.
	sentInStep uint32
	stepSerial uint64
	// paused: no new deliveries (its session has no transport); volatile,
	// like the subscription itself, so it is never logged.
	paused bool
	// exclusive: a cohort member's subscription, delivered to only while it
	// owns the partition and the gate is open (exclusive.go).
	exclusive bool
}

// Stats counts what happened since the partition was loaded (metrics).
type Stats struct {
	Published    uint64
	Delivered    uint64
	Redelivered  uint64
	Acked        uint64
	LeaseExpired uint64
	TTLExpired   uint64
	Discarded    uint64
	DeadLettered uint64
	Retried      uint64
	StaleSettles uint64
}

// NewPartition returns an empty partition (no entries yet).
func NewPartition(cfg Config) (*Partition, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Partition{
		cfg:        cfg,
		settings:   QueueSettings{MaxRetries: cfg.MaxRetriesDefault},
		nextTag:    max(1, cfg.TagFloor),
		store:      newMessageStore(),
		dlqTargets: make(map[uint64]DLQTarget),
		subs:       make(map[uint64]*subscription),
	}
	return p, nil
}

// Config returns the partition's config.
func (p *Partition) Config() Config { return p.cfg }

// Settings returns the queue's current settings.
func (p *Partition) Settings() QueueSettings { return p.settings }

// Stats returns the counters.
func (p *Partition) Stats() Stats { return p.stats }

// LeaseExpiredCount is Stats().LeaseExpired without copying the whole set
// (the Host reads it after every step).
func (p *Partition) LeaseExpiredCount() uint64 { return p.stats.LeaseExpired }

// LastIndex is the index of the last entry appended.
func (p *Partition) LastIndex() uint64 { return p.lastIndex }

// DurableIndex is the highest index storage has reported durable.
func (p *Partition) DurableIndex() uint64 { return p.durableIndex }

// Step feeds one input and returns its effects (see Ready).
func (p *Partition) Step(in Input) *Ready {
	p.rd.reset()
	p.stepSerial++
	p.budgetHit = false
	if now := in.nowMs(); now > p.nowMs {
		p.nowMs = now
	}
	if p.resendDLQ {
		p.resendDLQ = false
		p.resendPendingDeadLetters()
	}
	switch in := in.(type) {
	case *Tick:
	case *Persisted:
		p.onPersisted(in)
	case *Declare:
		p.onDeclare(in)
	case *SetGlobalDLQ:
		p.onSetGlobalDLQ(in)
	case *SetRuntime:
		p.onSetRuntime(in) // runtime.go
	case *Publish:
		p.onPublish(in)
	case *Subscribe:
		p.onSubscribe(in)
	case *Unsubscribe:
		p.onUnsubscribe(in)
	case *Ack:
		p.onAck(in)
	case *Nack:
		p.onNack(in)
	case *DeadLetterDone:
		p.onDeadLetterDone(in)
	case *PauseSubscription:
		p.onPauseSubscription(in)
	case *SetOwner:
		p.onSetOwner(in)
	case *Complete:
		p.onComplete(in) // operator.go
	case *Purge: // purge.go
		p.onPurge(in)
	default:
		panic("fibril/core invariant violated: unknown input type")
	}
	p.runTimers()
	p.dispatch()
	p.rd.NextWakeMs = p.nextWakeMs()
	return &p.rd
}

// appendEntry stamps e, hands it to storage (Ready.Persist) and applies it.
func (p *Partition) appendEntry(e Entry) {
	e.Epoch = p.cfg.Epoch
	e.Index = p.lastIndex + 1
	p.rd.Persist = append(p.rd.Persist, e)
	p.apply(&p.rd.Persist[len(p.rd.Persist)-1])
}

func (p *Partition) replyError(ref uint64, err *Error, tag uint64) {
	p.rd.Replies = append(p.rd.Replies, Reply{Ref: ref, Kind: ReplyError, Err: err, Tag: tag})
}

func (p *Partition) onPersisted(in *Persisted) {
	assertTrue(in.UpToIndex <= p.lastIndex, "storage cannot make durable what was never appended")
	if in.UpToIndex <= p.durableIndex {
		return // a late or repeated report
	}
	p.durableIndex = in.UpToIndex
	p.releaseGated()
}

func (p *Partition) onDeclare(in *Declare) {
	next, err := resolveSettings(&p.cfg, p.settings, in)
	if err != nil {
		p.replyError(in.Ref, err, 0)
		return
	}
	p.appendEntry(Entry{Kind: EntryDeclare, Settings: &next})
	p.gate(gated{kind: gatedReply, reply: Reply{Ref: in.Ref, Kind: ReplyDeclared}})
}

func (p *Partition) onSetGlobalDLQ(in *SetGlobalDLQ) {
	var target *DLQTarget
	if in.Target != nil {
		t := DLQTarget{Topic: in.Target.Topic, Group: NormalizeGroup(in.Target.Group)}
		if err := validateTarget(&p.cfg, t); err != nil {
			p.replyError(in.Ref, err, 0)
			return
		}
		target = &t
	}
	p.appendEntry(Entry{Kind: EntryGlobalDLQ, Target: target})
	p.gate(gated{kind: gatedReply, reply: Reply{Ref: in.Ref, Kind: ReplyGlobalDLQ}})
}

func (p *Partition) onPublish(in *Publish) {
	body := in.Body
	assertTrue(body != nil, "a publish carries a body")
	switch {
	case len(body.Payload) > p.cfg.PayloadBytesMax:
		p.replyError(in.Ref, ErrPayloadTooLarge, 0)
		return
	case in.HasTTL && in.TTLMs < 0:
		p.replyError(in.Ref, ErrInvalidSettings, 0)
		return
	case p.store.live >= p.cfg.QueueDepthMax:
		p.replyError(in.Ref, ErrQueueFull, 0)
		return
	case p.lastIndex-p.durableIndex >= uint64(p.cfg.UnpersistedEntriesMax):
		p.replyError(in.Ref, ErrStorageBehind, 0)
		return
	}
	if err := validateHeaders(&p.cfg, body.Headers, in.System); err != nil {
		p.replyError(in.Ref, err, 0)
		return
	}
	body.ReceivedMs = p.nowMs
	var expiresAtMs int64
	if in.HasTTL {
		expiresAtMs = p.nowMs + in.TTLMs // per-message TTL beats the queue default
	} else if p.settings.DefaultTTLMs > 0 {
		expiresAtMs = p.nowMs + p.settings.DefaultTTLMs
	}
	var notBeforeMs int64
	if in.NotBeforeMs > p.nowMs {
		notBeforeMs = in.NotBeforeMs
	}
	offset := p.nextOffset
	p.appendEntry(Entry{Kind: EntryPublish, Offset: offset, Body: body, ExpiresAtMs: expiresAtMs, AtMs: notBeforeMs})
	p.stats.Published++
	p.gate(gated{kind: gatedPublish, offset: offset, confirm: in.Confirm, reply: Reply{Ref: in.Ref, Kind: ReplyPublished, Offset: offset}})
}

func (p *Partition) onSubscribe(in *Subscribe) {
	if _, exists := p.subs[in.SubID]; exists || in.SubID == 0 {
		p.replyError(in.Ref, ErrAlreadySubscribed, 0)
		return
	}
	if len(p.subs) >= p.cfg.SubscriptionsMax {
		p.replyError(in.Ref, ErrTooManySubscriptions, 0)
		return
	}
	prefetch := max(in.Prefetch, 1) // PROTOCOL.md §5.6: 0 is treated as 1
	prefetch = min(prefetch, p.cfg.PrefetchMax)
	p.subs[in.SubID] = &subscription{id: in.SubID, prefetch: prefetch, autoAck: in.AutoAck, exclusive: in.Exclusive,
		inflight: make(map[uint64]uint64)}
	p.subOrder = insertSorted(p.subOrder, in.SubID)
	p.rd.Replies = append(p.rd.Replies, Reply{Ref: in.Ref, Kind: ReplySubscribed})
}

func (p *Partition) onUnsubscribe(in *Unsubscribe) {
	sub := p.subs[in.SubID]
	if sub == nil {
		p.replyError(in.Ref, ErrUnknownSubscription, 0)
		return
	}
	// Requeue in tag order: deterministic, and oldest delivery first.
	tags := make([]uint64, 0, len(sub.inflight))
	for tag := range sub.inflight {
		tags = append(tags, tag)
	}
	sortUint64s(tags)
	for _, tag := range tags {
		offset := sub.inflight[tag]
		delete(sub.inflight, tag)
		p.requeue(offset, CauseSubscriptionEnd, 0)
	}
	delete(p.subs, in.SubID)
	p.subOrder = removeSorted(p.subOrder, in.SubID)
	p.rd.Replies = append(p.rd.Replies, Reply{Ref: in.Ref, Kind: ReplyUnsubscribed})
}

// onPauseSubscription stops or restarts new deliveries to a subscription.
// Nothing is logged: a subscription is volatile, and so is its pause. Its
// leases are untouched, so its unsettled deliveries stay inflight and expire
// as usual; unpausing needs nothing more than the dispatch every step ends
// with. Success has no reply (the session asked for no answer).
func (p *Partition) onPauseSubscription(in *PauseSubscription) {
	sub := p.subs[in.SubID]
	if sub == nil {
		p.replyError(in.Ref, ErrUnknownSubscription, 0)
		return
	}
	sub.paused = in.Paused
	assertTrue(sub.paused == in.Paused, "a pause takes effect at once")
}

func insertSorted(xs []uint64, x uint64) []uint64 {
	i := 0
	for i < len(xs) && xs[i] < x {
		i++
	}
	xs = append(xs, 0)
	copy(xs[i+1:], xs[i:])
	xs[i] = x
	return xs
}

func removeSorted(xs []uint64, x uint64) []uint64 {
	for i := range xs {
		if xs[i] == x {
			return append(xs[:i], xs[i+1:]...)
		}
	}
	return xs
}
