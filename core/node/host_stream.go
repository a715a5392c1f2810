package node

import (
	"fmt"
	"slices"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
)

// The StreamHost machine: one loaded stream partition (docs/streams.md
// "Through the node"), as Host is one queue partition. Invariants:
//   - the stream partition is stepped only here, and every effect of each
//     of its steps is routed before the next (its Ready is reused);
//   - subs is exactly the partition's set of subscriptions, each with the
//     session that owns it: a Subscribe registers its owner before the
//     partition's step (its deliveries of that very step are routed) and a
//     refusal forgets it after; an Unsubscribe forgets it after the step;
//   - a reference answers at most once, and one whose input can reply only
//     in its own step (all but a publish) is forgotten after it;
//   - deliveries leave as one StreamDeliveries per subscription per step,
//     after that step's replies (a SUBSCRIBE_OK precedes its first DELIVER);
//   - every Read goes to the driver once (Ready.Reads) and its answer
//     (StreamReadDone) is matched by token; reads holds exactly those not
//     answered yet;
//   - at most one truncation (Ready.Snapshot) is asked for at a time; one
//     storage failed is asked for again after truncateRetryMs.
type StreamHost struct {
	cfg   Config
	p     *stream.Partition
	id    core.QueueID
	nowMs int64

	subs    map[uint64]Address // SubID -> owning session
	refs    map[uint64]hostRef // Ref -> the session and token waiting
	nextRef uint64
	reads   map[uint64]uint64 // read token -> SubID, until answered

	// truncating is the truncation asked for and not answered (nil: none);
	// truncateRetryAtMs (non-zero) says storage failed it and when to ask
	// again.
	truncating        *SnapshotRequest
	truncateRetryAtMs int64

	coreWakeMs int64
	rd         Ready
	grouped    map[uint64]int // SubID -> its StreamDeliveries in rd.Out, this step
	answers    answerBatch    // a step's answers per session (answers.go)
	carry      bool
}

// truncateRetryMs is how long a StreamHost waits before asking storage
// again for a truncation it failed.
const truncateRetryMs = 1000

// NewStreamHost wraps a stream partition recovered from storage
// (stream.Load) or new (stream.NewPartition with req.Stream), for a
// LoadRequest of kind KindStream. The catalogue's settings must be the
// partition's (they never change): a log that disagrees is an error. What
// the first steps produce (a new partition's declare entry) is carried in
// the Ready of the StreamHost's first Step: the driver steps it at once.
func NewStreamHost(cfg Config, p *stream.Partition, req LoadRequest) (*StreamHost, error) {
	assertHold(p != nil, "a StreamHost wraps a partition")
	assertHold(req.Kind == KindStream, "a StreamHost is loaded for a stream")
	assertHold(p.Config().Stream == req.Queue, "a StreamHost wraps the partition it was loaded for")
	if err := p.CheckDeclare(req.Stream); err != nil {
		return nil, fmt.Errorf("stream %v: the log's settings differ from the catalogue's: %w", req.Queue, err)
	}
	h := &StreamHost{
		cfg: cfg, p: p, id: req.Queue,
		subs: map[uint64]Address{}, refs: map[uint64]hostRef{}, reads: map[uint64]uint64{},
		grouped: map[uint64]int{}, carry: true,
	}
	// NowMs 0 moves no clock; a new partition logs its declare here.
	h.stepCore(&stream.Tick{})
	h.finishStep()
	return h, nil
}

// Partition returns the stream partition (tests, the simulator's checks).
func (h *StreamHost) Partition() *stream.Partition { return h.p }

// Step feeds one input and returns its effects (see Ready).
func (h *StreamHost) Step(in Input) *Ready {
	if h.carry {
		h.carry = false
	} else {
		h.resetReady()
	}
	if now := in.nowMs(); now > h.nowMs {
		h.nowMs = now
	}
	switch in := in.(type) {
	case *Tick:
		if h.truncateRetryAtMs != 0 && h.nowMs >= h.truncateRetryAtMs {
			h.truncateRetryAtMs = 0
			h.rd.Snapshot = h.truncating
		}
		h.stepCore(&stream.Tick{NowMs: h.nowMs})
	case *Deliver:
		h.onDeliver(in.Envelope)
	case *Bounced:
		h.onBounced(in.Envelope)
	case *Persisted:
		h.stepCore(&stream.Persisted{NowMs: h.nowMs, UpToIndex: in.UpToIndex})
	case *SnapshotDone:
		h.onSnapshotDone(in)
	case *StreamReadDone:
		subID, ok := h.reads[in.Token]
		if !ok {
			break // not a read of ours: a driver bug, harmless
		}
		delete(h.reads, in.Token)
		h.stepCore(&stream.ReadDone{NowMs: h.nowMs, SubID: subID, Token: in.Token, Entries: in.Entries, Err: in.Err})
	default:
		panic(fmt.Sprintf("fibril/core/node invariant violated: a StreamHost takes no %T", in))
	}
	h.finishStep()
	return &h.rd
}

func (h *StreamHost) finishStep() {
	h.rd.WakeMs = h.coreWakeMs
	if at := h.truncateRetryAtMs; at != 0 && (h.rd.WakeMs == 0 || at < h.rd.WakeMs) {
		h.rd.WakeMs = at
	}
	clear(h.grouped)
}

func (h *StreamHost) resetReady() {
	clear(h.rd.PersistEntries) // drop references to bodies
	clear(h.rd.Out)
	h.rd = Ready{PersistEntries: h.rd.PersistEntries[:0], Out: h.rd.Out[:0], Reads: h.rd.Reads[:0]}
}

func (h *StreamHost) send(to Address, msg Message) {
	h.rd.Out = append(h.rd.Out, Envelope{From: PartitionAddr(h.id), To: to, Msg: msg})
}

// stepCore steps the partition once and routes every effect, in the
// partition's contract order (docs/streams.md, stream.Ready).
func (h *StreamHost) stepCore(in stream.Input) {
	before := h.p.LastIndex()
	rd := h.p.Step(in)
	assertHold(len(rd.Persist) == 0 || rd.Persist[0].Index == before+1, "stream entries reach storage contiguously")
	assertHold(h.p.LastIndex() == before+uint64(len(rd.Persist)), "every stream entry appended is handed to storage")
	h.rd.PersistEntries = append(h.rd.PersistEntries, rd.Persist...)
	if t := rd.Truncate; t != nil {
		assertHold(h.truncating == nil, "one truncation at a time")
		h.truncating = &SnapshotRequest{Index: t.UpToIndex, Data: append([]byte(nil), t.Snapshot...)}
		h.rd.Snapshot = h.truncating
	}
	for _, r := range rd.Reads {
		assertHold(h.subs[r.SubID].Kind == AddrSession, "reads are for routed subscriptions")
		_, dup := h.reads[r.Token]
		assertHold(!dup, "read tokens are unique")
		h.reads[r.Token] = r.SubID
		h.rd.Reads = append(h.rd.Reads, StreamRead{Token: r.Token, FromIndex: r.FromIndex, MaxEntries: r.MaxEntries})
	}
	h.routeReplies(rd.Replies)
	for i := range rd.Deliveries {
		h.routeDelivery(&rd.Deliveries[i])
	}
	for _, nt := range rd.Notices {
		if owner, ok := h.subs[nt.SubID]; ok {
			h.send(owner, &StreamNotice{Stream: h.id, Notice: nt})
		}
	}
	h.coreWakeMs = rd.NextWakeMs
}

// routeReplies answers each waiting session, one envelope per session per
// step, in reply order (answerBatch, as Host.routeReplies).
func (h *StreamHost) routeReplies(replies []core.Reply) {
	if len(replies) == 0 {
		return
	}
	h.answers.begin(len(replies))
	for i := range replies {
		r := &replies[i]
		if ref, ok := h.refs[r.Ref]; ok {
			delete(h.refs, r.Ref)
			assertHold(ref.kind == refSession, "stream references are sessions'")
			h.answers.add(ref.session, ref.token, r)
		}
		h.answers.next()
	}
	h.answers.flush(h.send)
}

// routeDelivery adds d to its subscription's envelope of this step.
func (h *StreamHost) routeDelivery(d *stream.Delivery) {
	owner, ok := h.subs[d.SubID]
	assertHold(ok, "the stream partition delivers only to registered subscriptions")
	if i, ok := h.grouped[d.SubID]; ok {
		batch := h.rd.Out[i].Msg.(*StreamDeliveries)
		batch.Items = append(batch.Items, *d)
		return
	}
	h.grouped[d.SubID] = len(h.rd.Out)
	h.send(owner, &StreamDeliveries{Stream: h.id, SubID: d.SubID, Items: []stream.Delivery{*d}})
}

func (h *StreamHost) newRef(session SessionID, token uint64) uint64 {
	h.nextRef++
	h.refs[h.nextRef] = hostRef{kind: refSession, session: session, token: token}
	return h.nextRef
}

// onDeliver takes a session's request: a PUBLISH (Request with a
// *core.Publish) or a StreamRequest.
func (h *StreamHost) onDeliver(env Envelope) {
	from := env.From
	assertHold(from.Kind == AddrSession && from == SessionAddr(from.Session), "stream requests come from sessions")
	switch msg := env.Msg.(type) {
	case *Request:
		pub, ok := msg.Input.(*core.Publish)
		assertHold(ok, "a stream partition takes only publishes as Requests")
		assertHold(!pub.System, "a client's publish is never a system publish")
		// A publish's reply comes once durable (or at once: refused, or the
		// ephemeral tier); its ref lives until then. TTL and not_before are
		// not stream notions: the session refuses a delayed publish, a TTL
		// is ignored (retention bounds a stream).
		var ref uint64
		if msg.Token != 0 {
			ref = h.newRef(from.Session, msg.Token)
		}
		h.stepCore(&stream.Publish{NowMs: h.nowMs, Ref: ref, Body: pub.Body})
	case *StreamRequest:
		h.onStreamRequest(from, msg)
	default:
		panic(fmt.Sprintf("fibril/core/node invariant violated: a StreamHost takes no %T envelope", msg))
	}
}

func (h *StreamHost) onStreamRequest(from Address, req *StreamRequest) {
	var ref uint64
	if req.Token != 0 {
		ref = h.newRef(from.Session, req.Token)
	}
	switch in := req.Input.(type) {
	case *stream.Subscribe:
		in.NowMs, in.Ref = h.nowMs, ref
		_, existed := h.subs[in.SubID]
		if !existed {
			h.subs[in.SubID] = from // before the step: its deliveries route
		}
		h.stepCore(in)
		if !existed && !h.p.HasSubscription(in.SubID) {
			delete(h.subs, in.SubID) // refused
		}
	case *stream.Unsubscribe:
		in.NowMs, in.Ref = h.nowMs, ref
		h.stepCore(in)
		if !h.p.HasSubscription(in.SubID) {
			delete(h.subs, in.SubID)
		}
	case *stream.Ack:
		in.NowMs, in.Ref = h.nowMs, ref
		h.stepCore(in)
	case *stream.Credit:
		// Only the owner gives back its window: a credit from another
		// session (a bug) must not underflow the partition's count.
		if h.subs[in.SubID] != from {
			break
		}
		in.NowMs = h.nowMs
		h.stepCore(in)
	default:
		panic(fmt.Sprintf("fibril/core/node invariant violated: a session requested %T of a stream", in))
	}
	if ref != 0 {
		delete(h.refs, ref) // nothing but a publish answers later
	}
}

// onBounced: an envelope of ours found no session. Its subscriptions
// would be ghosts (holding window, reads and cursors' activity): end them.
func (h *StreamHost) onBounced(env Envelope) {
	switch env.Msg.(type) {
	case *StreamDeliveries, *Response, *Responses, *StreamNotice:
		h.dropSessionSubs(env.To)
	default:
		panic(fmt.Sprintf("fibril/core/node invariant violated: a StreamHost never sent a %T", env.Msg))
	}
}

func (h *StreamHost) dropSessionSubs(owner Address) {
	var ids []uint64
	for id, a := range h.subs {
		if a == owner {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // deterministic order of the Unsubscribe steps
	for _, id := range ids {
		h.stepCore(&stream.Unsubscribe{NowMs: h.nowMs, SubID: id})
		delete(h.subs, id)
	}
}

// onSnapshotDone: storage saved the truncation snapshot and dropped the
// entries up to it, or failed (asked again after truncateRetryMs).
func (h *StreamHost) onSnapshotDone(in *SnapshotDone) {
	t := h.truncating
	if t == nil || in.Index != t.Index {
		return // not ours, or answered already
	}
	if in.Err != nil {
		h.truncateRetryAtMs = h.nowMs + truncateRetryMs
		return
	}
	h.truncating, h.truncateRetryAtMs = nil, 0
	h.stepCore(&stream.SnapshotDone{NowMs: h.nowMs, Index: in.Index})
}

// CheckInvariants checks the partition and the StreamHost's routing.
func (h *StreamHost) CheckInvariants() error {
	if err := h.p.CheckInvariants(); err != nil {
		return err
	}
	ids := h.p.SubscriptionIDs()
	if len(ids) != len(h.subs) {
		return fmt.Errorf("stream partition has %d subscriptions, the StreamHost routes %d", len(ids), len(h.subs))
	}
	for _, id := range ids {
		if owner, ok := h.subs[id]; !ok || owner.Kind != AddrSession {
			return fmt.Errorf("stream subscription %d has no owning session (%v)", id, owner)
		}
	}
	for ref, r := range h.refs {
		if ref == 0 || ref > h.nextRef || r.kind != refSession {
			return fmt.Errorf("stream reference %d (kind %d) beyond %d or not a session's", ref, r.kind, h.nextRef)
		}
	}
	switch {
	case h.truncateRetryAtMs != 0 && h.truncating == nil:
		return fmt.Errorf("a truncation retry with no truncation")
	case h.truncating != nil && h.truncating.Index > h.p.LastIndex():
		return fmt.Errorf("truncation at %d beyond the last index %d", h.truncating.Index, h.p.LastIndex())
	}
	return nil
}
