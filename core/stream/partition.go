package stream

import (
	"github.com/fibril-go/fibril/core"
)

// Partition is the state machine of one stream partition (docs/streams.md).
// Invariants:
//   - durable state (settings, offsets, segments, cursors) changes only in
//     apply, entry by entry, and at SnapshotDone (retention), so snapshot +
//     replay rebuilds it exactly;
//   - volatile state (subscriptions, pending confirms, the durable index, the
//     pending truncation) lives as long as the process and restarts empty;
//   - a durable-tier record is delivered only once durable, and a durable or
//     speculative publish is confirmed only once durable;
//   - per-record memory is the tail ring and the read cache, each bounded in
//     bytes; everything older is read back through Read/ReadDone;
//   - time only moves forward inside: nowMs is the largest NowMs seen.
type Partition struct {
	cfg      Config
	settings core.StreamSettings
	declared bool
	// pendingDeclare: a fresh partition logs its declare in its first Step.
	pendingDeclare *core.StreamSettings

	// Log position.
	lastIndex    uint64
	lastEpoch    uint64
	durableIndex uint64
	// durableOffsetEnd: every offset below it has a durable record entry.
	durableOffsetEnd uint64

	// Durable state: what entries (and retention, via the truncation
	// snapshot) built; Snapshot encodes exactly this.
	nextOffset uint64
	oldest     uint64 // the oldest retained offset (nextOffset when none)
	segments   segmentTable
	cursors    map[string]uint64 // durable name -> next offset

	// Volatile state: rebuilt empty (or, for the ring, from the replayed
	// entries) by Load; never in a snapshot.
	nowMs       int64
	ring        tailRing
	awaiting    awaitQueue // records not yet durable, with their confirms
	subs        map[uint64]*subscription
	subOrder    []uint64       // subscription ids, sorted: deterministic serving order
	activeNames map[string]int // durable name -> active subscriptions with it
	commits     []core.CursorPos
	commitAt    map[string]int // name -> its slot in commits (last commit wins)
	truncating  *pendingTruncate
	readSerial  uint64        // the last read token handed out
	reads       []pendingRead // reads in flight, in issue order
	cache       readCache     // records of recent reads, shared by subscriptions
	rd          Ready

	// durableCursors are the cursors as the durable prefix of the log says
	// (commits up to durableIndex); pendingCommits the commit entries after
	// it, in log order (bounded by UnpersistedEntriesMax). A truncation
	// snapshot carries durableCursors, so retention can run under steady
	// traffic (the log is never wholly durable then) without the snapshot
	// naming a commit a crash could lose.
	durableCursors map[string]uint64
	pendingCommits []pendingCommit
}

// pendingCommit is a cursor commit entry not yet durable.
type pendingCommit struct {
	index   uint64
	cursors []core.CursorPos
}

// pendingTruncate is the retention step storage has not confirmed yet.
type pendingTruncate struct {
	upToIndex uint64
	segments  int    // how many front segments it drops
	oldest    uint64 // the oldest retained offset after it
}

// NewPartition returns a fresh partition whose first Step logs the declare
// entry with settings (it is the first entry of the log).
func NewPartition(cfg Config, settings core.StreamSettings) (*Partition, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := validateSettings(settings); err != nil {
		return nil, err
	}
	p := newPartition(cfg)
	p.pendingDeclare = &settings
	return p, nil
}

func newPartition(cfg Config) *Partition {
	return &Partition{
		cfg:            cfg,
		cursors:        make(map[string]uint64),
		durableCursors: make(map[string]uint64),
		subs:           make(map[uint64]*subscription),
		activeNames:    make(map[string]int),
		commitAt:       make(map[string]int),
	}
}

// Config returns the partition's config.
func (p *Partition) Config() Config { return p.cfg }

// Settings returns the declared settings.
func (p *Partition) Settings() core.StreamSettings { return p.settings }

// LastIndex is the index of the last entry appended.
func (p *Partition) LastIndex() uint64 { return p.lastIndex }

// DurableIndex is the highest index storage has reported durable.
func (p *Partition) DurableIndex() uint64 { return p.durableIndex }

// NextOffset is the offset the next record gets.
func (p *Partition) NextOffset() uint64 { return p.nextOffset }

// Oldest is the oldest retained offset (NextOffset when nothing is retained).
func (p *Partition) Oldest() uint64 { return p.oldest }

// Cursor returns the stored position of durable name.
func (p *Partition) Cursor(name string) (uint64, bool) {
	next, ok := p.cursors[name]
	return next, ok
}

// HasSubscription says whether subscription id is open.
func (p *Partition) HasSubscription(id uint64) bool {
	_, ok := p.subs[id]
	return ok
}

// SubscriptionIDs lists the open subscriptions, sorted (a copy).
func (p *Partition) SubscriptionIDs() []uint64 { return append([]uint64(nil), p.subOrder...) }

// SubscriptionCount is how many subscriptions the partition serves (no
// copy: a driver's per-batch observation reads it).
func (p *Partition) SubscriptionCount() int { return len(p.subOrder) }

// CheckDeclare says whether a re-declare with settings may be accepted: the
// same settings are (idempotent), others are refused and never logged.
func (p *Partition) CheckDeclare(settings core.StreamSettings) *core.Error {
	want := p.settings
	if p.pendingDeclare != nil {
		want = *p.pendingDeclare
	}
	if settings != want {
		return core.ErrStreamSettings
	}
	return nil
}

// Step feeds one input and returns its effects (see Ready).
func (p *Partition) Step(in Input) *Ready {
	// One Ready is reused across steps: the driver copies what it keeps
	// before the next Step (see Ready), and the steady state allocates
	// nothing for it.
	p.rd.reset()
	// The clock only moves forward inside: a driver clock stepping back
	// cannot un-age a segment or shorten a read backoff.
	if now := in.nowMs(); now > p.nowMs {
		p.nowMs = now
	}
	// A fresh partition's declare goes out in its first Ready, ahead of
	// anything the first input logs, so it is entry 1 of the log.
	if p.pendingDeclare != nil {
		s := *p.pendingDeclare
		p.pendingDeclare = nil
		p.appendEntry(core.Entry{Kind: core.EntryStreamDeclare, Stream: &s})
	}
	// Declared by now: NewPartition queued the declare, Load required one.
	assertTrue(p.declared, "a partition serves only once declared")
	switch in := in.(type) {
	case *Tick:
	case *Persisted:
		p.onPersisted(in)
	case *Publish:
		p.onPublish(in)
	case *Subscribe:
		p.onSubscribe(in)
	case *Unsubscribe:
		p.onUnsubscribe(in)
	case *Ack:
		p.onAck(in)
	case *Credit:
		p.onCredit(in)
	case *ReadDone:
		p.onReadDone(in)
	case *SnapshotDone:
		p.onSnapshotDone(in)
	default:
		panic("fibril/core/stream invariant violated: unknown input type")
	}
	// Retention first: it only runs when everything logged is durable (see
	// retain), which serving below would change by logging commits.
	p.retain()
	p.serveAll()
	p.flushCommits()
	p.rd.NextWakeMs = p.nextWakeMs()
	return &p.rd
}

// appendEntry stamps e, hands it to storage (Ready.Persist) and applies it.
func (p *Partition) appendEntry(e core.Entry) {
	e.Epoch = p.cfg.Epoch
	e.Index = p.lastIndex + 1
	p.rd.Persist = append(p.rd.Persist, e)
	// Apply the copy in Persist, not e: the ring then shares the very body
	// storage is handed, and the live path runs the replay path's apply.
	p.apply(&p.rd.Persist[len(p.rd.Persist)-1])
}

// apply is the one function that turns an entry into state, live and in
// replay alike; it reads nothing but the entry and the state.
func (p *Partition) apply(e *core.Entry) {
	assertTrue(e.Index == p.lastIndex+1, "entries apply in index order")
	assertTrue(e.Epoch >= p.lastEpoch, "epochs never go back")
	switch e.Kind {
	case core.EntryStreamDeclare:
		assertTrue(!p.declared, "a stream is declared once, by its first entry")
		assertTrue(e.Stream != nil && validateSettings(*e.Stream) == nil, "a declare carries valid settings")
		p.settings, p.declared = *e.Stream, true
	case core.EntryStreamRecord:
		assertTrue(p.declared, "records follow the declare")
		assertTrue(e.Offset == p.nextOffset, "record offsets are dense")
		assertTrue(e.Body != nil, "a record has a body")
		// The segment table counts payload bytes only (max_bytes is about
		// what producers sent); the ring charges headers and overhead too.
		p.segments.add(&p.cfg, e.Offset, e.Index, e.Epoch, uint64(len(e.Body.Payload)), e.AtMs)
		p.ring.push(ringRecord{offset: e.Offset, atMs: e.AtMs, body: e.Body}, p.cfg.TailBytesMax)
		p.nextOffset++
	case core.EntryCursorCommit:
		assertTrue(p.declared, "commits follow the declare")
		for _, c := range e.Cursors {
			assertTrue(c.Next <= p.nextOffset, "a cursor never passes the records it has seen")
			// A commit below the retained window (an ack of a dropped record)
			// is clamped as a stored cursor would be at retention.
			p.cursors[c.Name] = max(c.Next, p.oldest)
		}
	default:
		panic("fibril/core/stream invariant violated: a queue entry in a stream log")
	}
	p.lastIndex, p.lastEpoch = e.Index, e.Epoch
}

func (p *Partition) replyError(ref uint64, err *core.Error) {
	p.rd.Replies = append(p.rd.Replies, core.Reply{Ref: ref, Kind: core.ReplyError, Err: err})
}

// visibleEnd: offsets below it may be handed out. Durable-tier records wait
// for durability; the other tiers deliver at once.
func (p *Partition) visibleEnd() uint64 {
	if p.settings.Tier == core.TierDurable {
		return p.durableOffsetEnd
	}
	return p.nextOffset
}

func (p *Partition) onPublish(in *Publish) {
	body := in.Body
	assertTrue(body != nil, "a publish carries a body")
	if err := p.checkRecord(body); err != nil {
		p.replyError(in.Ref, err)
		return
	}
	// Backpressure, as for queues: the awaiting queue (and the entries
	// storage holds unsynced) stay bounded when storage falls behind.
	if p.lastIndex-p.durableIndex >= uint64(p.cfg.UnpersistedEntriesMax) {
		p.replyError(in.Ref, core.ErrStorageBehind)
		return
	}
	// The broker's receive stamp, as on a queue; AtMs (the same clock) is
	// what retention and by-time starts use, so it never goes back.
	body.ReceivedMs = p.nowMs
	offset := p.nextOffset
	atMs := p.nowMs
	if last := p.segments.last(); last != nil && last.lastAtMs > atMs {
		// The clock went back (a wall-clock step before a restart moves the
		// driver's anchor): a record stamped before the one it follows would
		// break age retention and by-time starts, which need publish times
		// that never go back (found by the streams sweep, seed 265 swarm).
		atMs = last.lastAtMs
	}
	p.appendEntry(core.Entry{Kind: core.EntryStreamRecord, Offset: offset, Body: body, AtMs: atMs})
	assertTrue(p.nextOffset == offset+1, "a publish adds one record")
	// The awaiting queue tracks every record, confirmed or not: it is also
	// how durableOffsetEnd (durable-tier visibility, reads) advances.
	reply := core.Reply{Ref: in.Ref, Kind: core.ReplyPublished, Offset: offset}
	if p.settings.Tier == core.TierEphemeral {
		// Ephemeral: confirmed when staged; its entry is never waited for.
		p.rd.Replies = append(p.rd.Replies, reply)
		p.awaiting.push(awaited{index: p.lastIndex, offset: offset})
		return
	}
	p.awaiting.push(awaited{index: p.lastIndex, offset: offset, confirm: true, reply: reply})
}

// checkRecord applies the limits a queue publish has (core's rules).
// A stream never dead-letters, so no record is a system publish: reserved
// headers are refused outright (the session adds fibril.speculative itself,
// on the DELIVER frame, not in the record).
func (p *Partition) checkRecord(body *core.Body) *core.Error {
	if len(body.Payload) > p.cfg.PayloadBytesMax {
		return core.ErrPayloadTooLarge
	}
	if len(body.Headers) > p.cfg.HeaderCountMax {
		return core.ErrHeadersTooLarge
	}
	headerBytes := 0
	for _, h := range body.Headers {
		headerBytes += len(h.Key) + len(h.Value)
		if core.IsReservedHeader(h.Key) {
			return core.ErrReservedHeader
		}
	}
	if headerBytes > p.cfg.HeaderBytesMax {
		return core.ErrHeadersTooLarge
	}
	return nil
}

func (p *Partition) onPersisted(in *Persisted) {
	assertTrue(in.UpToIndex <= p.lastIndex, "storage cannot make durable what was never appended")
	if in.UpToIndex <= p.durableIndex {
		return // a late or repeated report
	}
	p.durableIndex = in.UpToIndex
	// Commits become durable in log order too: the durable cursors follow.
	n := 0
	for n < len(p.pendingCommits) && p.pendingCommits[n].index <= p.durableIndex {
		for _, c := range p.pendingCommits[n].cursors {
			p.durableCursors[c.Name] = max(c.Next, p.oldest)
		}
		n++
	}
	p.pendingCommits = p.pendingCommits[:copy(p.pendingCommits, p.pendingCommits[n:])]
	// Records become durable in log order, so the awaiting queue drains
	// from the front; a confirm leaves exactly when its record is durable.
	for !p.awaiting.empty() && p.awaiting.front().index <= p.durableIndex {
		a := p.awaiting.pop()
		assertTrue(a.offset == p.durableOffsetEnd, "records become durable in offset order")
		p.durableOffsetEnd = a.offset + 1
		if a.confirm {
			p.rd.Replies = append(p.rd.Replies, a.reply)
		}
	}
}

// awaited is one record not yet durable, and its confirm if it waits.
type awaited struct {
	index   uint64
	offset  uint64
	confirm bool
	reply   core.Reply
}

// awaitQueue is a FIFO of awaited records (bounded by UnpersistedEntriesMax).
type awaitQueue struct {
	items []awaited
	head  int
}

func (q *awaitQueue) empty() bool      { return q.head == len(q.items) }
func (q *awaitQueue) front() *awaited  { return &q.items[q.head] }
func (q *awaitQueue) len() int         { return len(q.items) - q.head }
func (q *awaitQueue) push(a awaited)   { q.items = append(q.items, a) }
func (q *awaitQueue) at(i int) awaited { return q.items[q.head+i] }

func (q *awaitQueue) pop() awaited {
	a := q.items[q.head]
	q.items[q.head] = awaited{} // drop the reply it held
	q.head++
	// Reuse the backing array: an empty queue restarts at 0, a long one
	// compacts once its dead prefix is most of it.
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head > 1024 && q.head > len(q.items)/2 {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return a
}

// nextWakeMs is the earliest deadline that needs a Tick: a sealed segment
// aging out, or a read to retry.
func (p *Partition) nextWakeMs() int64 {
	var wake int64
	consider := func(atMs int64) {
		if atMs > p.nowMs && (wake == 0 || atMs < wake) {
			wake = atMs
		}
	}
	if p.settings.MaxAgeMs > 0 && p.truncating == nil && p.segments.len() > 0 {
		if first := &p.segments.segs[0]; first.sealed(&p.cfg) {
			consider(agedOutAtMs(first.lastAtMs, p.settings.MaxAgeMs))
		}
	}
	// A read backoff needs a wake-up of its own: nothing else would make
	// the subscription read again if no record arrives.
	for _, id := range p.subOrder {
		if sub := p.subs[id]; sub.readRetryAtMs > p.nowMs {
			consider(sub.readRetryAtMs)
		}
	}
	return wake
}
