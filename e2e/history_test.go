package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
)

// Recording what the clients of a real broker observed, in the checker's
// history format, so that `fibril check`'s models judge real runs as they
// judge simulated ones. Invariants:
//   - observations are recorded under one mutex, a client's call before it
//     is sent and its return after it came back, so their order is
//     consistent with what happened between clients (a delivery recorded
//     after the settle that freed its credit, a publish's return after the
//     broker's confirm);
//   - the node's internal events (appends, leases, log entries, crashes and
//     what each recovery kept) are not observable from outside; toHistory
//     puts in, for each, the weakest stand-in that a correct broker always
//     satisfies (see toHistory), so a violation is a real broken promise.

// Slack between a client's clock reading and the broker's, both on this
// machine: a frame takes at most this long from one to the other.
const clockSlackMs = 1000

type obsKind uint8

const (
	obsPublishCall obsKind = iota + 1
	obsPublishReturn
	obsSubscribe
	obsDeliver
	obsSettle // a settle that was sent (ack or nack)
	obsCrash  // the broker process died (SIGKILL, or a power loss)
)

// observation is one thing a client saw or did.
type observation struct {
	kind        obsKind
	atMs        int64 // Unix ms on this machine
	client      uint32
	op          uint64
	part        int // index into the recorder's partitions, +1
	msgID       uint64
	sub         uint64
	offset      uint64
	tag         uint64
	retries     uint32
	ttlMs       int64
	notBeforeMs int64
	action      checker.SettleAction
	prefetch    uint32
	ok          bool
}

// recorder collects observations for one run.
type recorder struct {
	mu         sync.Mutex
	scenario   string
	seed       uint64
	leaseMs    int64
	queues     []checker.QueueSpec
	partitions []checker.PartitionSpec
	partIndex  map[string]int // "topic/partition" -> part
	obs        []observation
	nextOp     uint64
	nextSub    uint64
}

func newRecorder(scenario string, seed uint64, leaseMs int64) *recorder {
	return &recorder{scenario: scenario, seed: seed, leaseMs: leaseMs, partIndex: map[string]int{}}
}

// addQueue declares a queue of the run to the history.
func (r *recorder) addQueue(q checker.QueueSpec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queues = append(r.queues, q)
	for p := 0; p < q.Partitions; p++ {
		r.partitions = append(r.partitions, checker.PartitionSpec{Queue: len(r.queues) - 1, Topic: q.Topic, Partition: uint32(p)})
		r.partIndex[fmt.Sprintf("%s/%d", q.Topic, p)] = len(r.partitions)
	}
}

func (r *recorder) part(topic string, partition uint32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	part, ok := r.partIndex[fmt.Sprintf("%s/%d", topic, partition)]
	if !ok {
		panic("recorder: unknown partition " + topic)
	}
	return part
}

func (r *recorder) add(o observation) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	o.atMs = time.Now().UnixMilli()
	if o.kind == obsPublishCall {
		r.nextOp++
		o.op = r.nextOp
	}
	r.obs = append(r.obs, o)
	return o.op
}

// publishCall records a publish about to be sent and returns its op.
func (r *recorder) publishCall(client uint32, part int, msgID uint64, ttlMs, notBeforeMs int64) uint64 {
	return r.add(observation{kind: obsPublishCall, client: client, part: part, msgID: msgID, ttlMs: ttlMs, notBeforeMs: notBeforeMs})
}

// publishReturn records a confirm (ok) or a refusal; a publish whose
// connection died gets no return (its outcome is unknown).
func (r *recorder) publishReturn(client uint32, op uint64, part int, msgID uint64, ok bool, offset uint64) {
	r.add(observation{kind: obsPublishReturn, client: client, op: op, part: part, msgID: msgID, ok: ok, offset: offset})
}

// subscribe records a confirmed subscription to one partition; the id
// names it in deliveries and settles.
func (r *recorder) subscribe(client uint32, part int, prefetch uint32) uint64 {
	r.mu.Lock()
	r.nextSub++
	sub := r.nextSub
	r.mu.Unlock()
	r.add(observation{kind: obsSubscribe, client: client, part: part, sub: sub, prefetch: prefetch})
	return sub
}

func (r *recorder) deliver(sub uint64, part int, msgID, offset, tag uint64, retries uint32) {
	r.add(observation{kind: obsDeliver, sub: sub, part: part, msgID: msgID, offset: offset, tag: tag, retries: retries})
}

// settle records a settle the client sent (call it after the send
// succeeded and before reading the next delivery).
func (r *recorder) settle(client uint32, sub uint64, part int, msgID, offset, tag uint64, retries uint32, action checker.SettleAction, notBeforeMs int64) {
	r.add(observation{kind: obsSettle, client: client, sub: sub, part: part, msgID: msgID, offset: offset, tag: tag,
		retries: retries, action: action, notBeforeMs: notBeforeMs})
}

// crash records that the broker died; every subscription died with it.
func (r *recorder) crash() { r.add(observation{kind: obsCrash}) }

// Log index bands: process c's entries take indexes in [c*indexBand+1,
// c*indexBand+indexBand/2) when they survive its end, above that when they
// do not; its recovery keeps everything up to c*indexBand+indexBand/2-1.
const indexBand = uint64(1) << 32

// toHistory turns the observations into a checker history. What the node
// did is put in as follows, always so that a correct broker passes:
//   - a confirmed publish is appended and confirmed just before the first
//     ok return or first delivery of any message of its partition at or
//     above its offset (placeConfirms); an unconfirmed one that was
//     delivered, just before that delivery; its node clock is that moment
//     plus clockSlackMs (a later clock only moves the TTL deadline later);
//   - a delivery's lease starts at the consumer's receive time; the history
//     claims a lease of leaseMs-clockSlackMs, shorter than the broker's;
//   - an ack or nack is a log entry at the moment it was sent; a redelivery
//     in the same process that no settle explains is a lease expiry at the
//     moment of the redelivery;
//   - at each crash, what the log kept: every confirmed publish (the final
//     read-back then says whether it really survived); an unconfirmed one
//     only if it was delivered after that crash; no lease (leases that did
//     survive only delay redelivery); an ack that a confirm fenced always
//     (a redelivery of it afterwards is a violation), any other only if
//     the message was not delivered after the crash. An ack is fenced when
//     its client then published to the same partition and that publish was
//     confirmed before the crash: the connection's frames are handled in
//     arrival order, both entries go to the partition's one log in that
//     order, and PUBLISH_OK comes after the fsync (PROTOCOL 5.9, 7.2). An
//     ACK has no reply, so nothing else makes it durable at a known time:
//     not how long before the crash it was sent (a SIGKILL while an fsync
//     takes 300 ms on a loaded disk loses the acks queued behind it);
//   - the final state: every message whose last ack was kept, at the offset
//     it was delivered at; a confirmed message with a TTL that was not acked
//     and whose deadline passed, as expired.
func (r *recorder) toHistory() *checker.History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := &checker.History{Meta: checker.Meta{Format: checker.FormatVersion, Scenario: r.scenario, Seed: r.seed,
		Faults: "real broker process", LeaseMs: r.leaseMs - clockSlackMs, Queues: r.queues, Partitions: r.partitions,
		Replay: fmt.Sprintf("go run ./cmd/fibril check FILE (a real run: seed %d replays the fault choices, not the broker)", r.seed)}}
	b := newHistoryBuilder(r, h)
	b.run()
	return h
}

type msgRef struct {
	part  int
	msgID uint64
}

// historyBuilder carries toHistory's state.
type historyBuilder struct {
	r           *recorder
	h           *checker.History
	crashes     []int64 // crash times, in order
	startMs     int64
	calls       map[msgRef]observation
	okReturn    map[msgRef]bool
	okOffset    map[msgRef]uint64 // the offset its confirm named
	deliveredIn map[msgRef][]int  // processes in which the message was delivered
	appended    map[msgRef]bool
	lease       map[msgRef]*openLease // this process's open lease
	lastAckKept map[msgRef]observation
	process     int
	serial      [2]uint64 // next index offset: kept, lost
	step        uint64
	confirmAt   map[int][]msgRef // observation index -> confirms released just before it
	fenced      map[int]bool     // observation index of a settle -> a later confirm made it durable
	at          int              // the observation being turned into events
}

type openLease struct {
	tag     uint64
	retries uint32
	settled bool
}

func newHistoryBuilder(r *recorder, h *checker.History) *historyBuilder {
	b := &historyBuilder{r: r, h: h, calls: map[msgRef]observation{}, okReturn: map[msgRef]bool{}, okOffset: map[msgRef]uint64{},
		deliveredIn: map[msgRef][]int{}, appended: map[msgRef]bool{}, lease: map[msgRef]*openLease{},
		lastAckKept: map[msgRef]observation{}}
	if len(r.obs) > 0 {
		b.startMs = r.obs[0].atMs
	}
	process := 0
	for _, o := range r.obs {
		ref := msgRef{o.part, o.msgID}
		switch o.kind {
		case obsCrash:
			b.crashes = append(b.crashes, o.atMs)
			process++
		case obsPublishCall:
			b.calls[ref] = o
		case obsPublishReturn:
			b.okReturn[ref] = o.ok
			b.okOffset[ref] = o.offset
		case obsDeliver:
			b.deliveredIn[ref] = append(b.deliveredIn[ref], process)
		}
	}
	b.placeConfirms()
	b.placeFences()
	return b
}

// placeFences finds the settles a confirm made durable: those followed, in
// the same process, by a publish of the same client to the same partition
// whose confirm came back. The client's frames leave in the order it sent
// them, and a settle is recorded once its frame is queued, a publish call
// before its frame is (recorder.settle, publishCall).
func (b *historyBuilder) placeFences() {
	type clientPart struct {
		client uint32
		part   int
	}
	confirmedOps := map[uint64]bool{}
	for _, o := range b.r.obs {
		if o.kind == obsPublishReturn && o.ok {
			confirmedOps[o.op] = true
		}
	}
	b.fenced = map[int]bool{}
	fence := map[clientPart]bool{} // a confirmed publish follows in this process
	for i := len(b.r.obs) - 1; i >= 0; i-- {
		o := b.r.obs[i]
		switch o.kind {
		case obsCrash:
			clear(fence)
		case obsPublishCall:
			if confirmedOps[o.op] {
				fence[clientPart{o.client, o.part}] = true
			}
		case obsSettle:
			b.fenced[i] = fence[clientPart{o.client, o.part}]
		}
	}
}

// placeConfirms decides where each confirm goes. A partition releases its
// confirms in offset order (a round's, after its fsync), so the confirm of
// offset o came before the first sign of any offset at or above it: the
// ok return or the first delivery of that message. Placing each confirm at
// the earliest such sign keeps them in offset order, as the FIFO model
// expects, and before everything that proves them.
func (b *historyBuilder) placeConfirms() {
	type confirmed struct {
		ref    msgRef
		offset uint64
		proof  int // observation index of its ok return or first delivery
	}
	byPart := map[int][]confirmed{}
	proof := map[msgRef]int{}
	for i, o := range b.r.obs {
		ref := msgRef{o.part, o.msgID}
		if (o.kind == obsDeliver || o.kind == obsPublishReturn && o.ok) && b.okReturn[ref] {
			if _, seen := proof[ref]; !seen {
				proof[ref] = i
			}
		}
	}
	for _, o := range b.r.obs {
		if o.kind == obsPublishReturn && o.ok {
			ref := msgRef{o.part, o.msgID}
			byPart[o.part] = append(byPart[o.part], confirmed{ref: ref, offset: o.offset, proof: proof[ref]})
		}
	}
	b.confirmAt = map[int][]msgRef{}
	parts := make([]int, 0, len(byPart))
	for part := range byPart {
		parts = append(parts, part)
	}
	sort.Ints(parts)
	for _, part := range parts {
		list := byPart[part]
		sort.SliceStable(list, func(i, j int) bool { return list[i].offset < list[j].offset })
		at := make([]int, len(list))
		for k := len(list) - 1; k >= 0; k-- {
			at[k] = list[k].proof
			if k+1 < len(list) && at[k+1] < at[k] {
				at[k] = at[k+1]
			}
		}
		for k, c := range list {
			b.confirmAt[at[k]] = append(b.confirmAt[at[k]], c.ref)
		}
	}
}

func (b *historyBuilder) emit(e checker.Event) {
	e.Seq = uint64(len(b.h.Events) + 1)
	if e.AtMs == 0 {
		e.AtMs = 1
	}
	b.h.Events = append(b.h.Events, e)
}

// index hands out a log index in the current process's band.
func (b *historyBuilder) index(kept bool) uint64 {
	base := uint64(b.process) * indexBand
	if kept {
		b.serial[0]++
		return base + b.serial[0]
	}
	b.serial[1]++
	return base + indexBand/2 + b.serial[1]
}

// deliveredAfter says whether the message was delivered in a later process.
func (b *historyBuilder) deliveredAfter(ref msgRef) bool {
	for _, p := range b.deliveredIn[ref] {
		if p > b.process {
			return true
		}
	}
	return false
}

// append emits the stand-in append (and confirm) of a publish.
func (b *historyBuilder) append(ref msgRef, atMs int64) {
	if b.appended[ref] {
		return
	}
	b.appended[ref] = true
	kept := b.okReturn[ref] || b.deliveredAfter(ref)
	b.emit(checker.Event{AtMs: atMs - b.startMs, Kind: checker.KindAccept, Part: ref.part, MsgID: ref.msgID,
		Offset: b.okOffset[ref], Index: b.index(kept), NowMs: atMs + clockSlackMs})
	if b.okReturn[ref] {
		b.emit(checker.Event{AtMs: atMs - b.startMs, Kind: checker.KindConfirm, Part: ref.part, MsgID: ref.msgID,
			Offset: b.okOffset[ref], NowMs: atMs})
	}
}

func (b *historyBuilder) run() {
	for i, o := range b.r.obs {
		for _, ref := range b.confirmAt[i] {
			b.append(ref, o.atMs)
		}
		b.at = i
		b.observe(o)
	}
	b.finals()
}

func (b *historyBuilder) observe(o observation) {
	ref := msgRef{o.part, o.msgID}
	at := o.atMs - b.startMs
	switch o.kind {
	case obsPublishCall:
		b.emit(checker.Event{AtMs: at, Kind: checker.KindPublishCall, Client: o.client, Op: o.op, Part: o.part, MsgID: o.msgID,
			Confirm: true, HasTTL: o.ttlMs > 0, TTLMs: o.ttlMs, NotBeforeMs: o.notBeforeMs})
	case obsPublishReturn:
		if o.ok {
			b.append(ref, o.atMs)
		}
		b.emit(checker.Event{AtMs: at, Kind: checker.KindPublishReturn, Client: o.client, Op: o.op, Part: o.part, MsgID: o.msgID,
			Ok: o.ok, Offset: o.offset})
	case obsSubscribe:
		b.emit(checker.Event{AtMs: at, Kind: checker.KindSubscribeCall, Client: o.client, Sub: o.sub, Part: o.part, Prefetch: o.prefetch})
		b.emit(checker.Event{AtMs: at, Kind: checker.KindSubscribeReturn, Client: o.client, Sub: o.sub, Part: o.part, Ok: true})
	case obsDeliver:
		b.append(ref, o.atMs)
		if l := b.lease[ref]; l != nil && !l.settled {
			// Redelivered in this process without a settle: the lease expired.
			b.emit(checker.Event{AtMs: at, Kind: checker.KindEntry, Part: o.part, MsgID: o.msgID, Offset: o.offset,
				EntryKind: uint8(core.EntryRequeue), Cause: core.CauseLeaseExpired, Retries: l.retries + 1,
				Index: b.index(false), NowMs: o.atMs, Trigger: "tick"})
		}
		b.lease[ref] = &openLease{tag: o.tag, retries: o.retries}
		b.step++
		b.emit(checker.Event{AtMs: at, Kind: checker.KindDeliver, Part: o.part, MsgID: o.msgID, Offset: o.offset, Tag: o.tag,
			Sub: o.sub, Retries: o.retries, Index: b.index(false), NowMs: o.atMs, Step: b.step})
	case obsSettle:
		b.settle(o, ref, at)
	case obsCrash:
		b.crash(o, at)
	}
}

func (b *historyBuilder) settle(o observation, ref msgRef, at int64) {
	b.emit(checker.Event{AtMs: at, Kind: checker.KindSettleCall, Client: o.client, Sub: o.sub, Tag: o.tag, Part: o.part,
		MsgID: o.msgID, Offset: o.offset, Action: o.action, NotBeforeMs: o.notBeforeMs})
	l := b.lease[ref]
	if l == nil || l.tag != o.tag || l.settled {
		return // a stale tag: the broker ignores it
	}
	l.settled = true
	e := checker.Event{AtMs: at, Kind: checker.KindEntry, Part: o.part, MsgID: o.msgID, Offset: o.offset, NowMs: o.atMs, Trigger: "nack"}
	switch o.action {
	case checker.ActionAck:
		kept := !b.deliveredAfter(ref)
		if b.fenced[b.at] {
			kept = true // a confirm after it on its connection: it must have survived
		}
		e.EntryKind, e.Trigger, e.Index = uint8(core.EntryAck), "ack", b.index(kept)
		if kept {
			b.lastAckKept[ref] = o
		}
	case checker.ActionRetry:
		e.EntryKind, e.Cause, e.Retries, e.AtMs2, e.Index = uint8(core.EntryRequeue), core.CauseNack, l.retries+1, o.notBeforeMs, b.index(false)
	default:
		panic("recorder: only acks and retries are recorded")
	}
	b.emit(e)
}

func (b *historyBuilder) crash(o observation, at int64) {
	kept := uint64(b.process)*indexBand + indexBand/2 - 1
	for part := 1; part <= len(b.h.Meta.Partitions); part++ {
		b.emit(checker.Event{AtMs: at, Kind: checker.KindCrash, Part: part, Index: kept, Index2: kept, NowMs: o.atMs})
	}
	b.process++
	b.serial = [2]uint64{}
	for part := 1; part <= len(b.h.Meta.Partitions); part++ {
		b.emit(checker.Event{AtMs: at, Kind: checker.KindRecover, Part: part, Index: kept, Index2: kept, NowMs: o.atMs})
	}
	b.lease = map[msgRef]*openLease{}
}

func (b *historyBuilder) finals() {
	endMs := time.Now().UnixMilli()
	if n := len(b.r.obs); n > 0 {
		endMs = b.r.obs[n-1].atMs
	}
	refs := make([]msgRef, 0, len(b.lastAckKept))
	for ref := range b.lastAckKept {
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].msgID < refs[j].msgID })
	for _, ref := range refs {
		o := b.lastAckKept[ref]
		b.emit(checker.Event{AtMs: endMs - b.startMs, Kind: checker.KindFinal, Part: ref.part, MsgID: ref.msgID, Offset: o.offset, Outcome: checker.OutcomeAcked})
	}
	// Confirmed messages with a TTL, not acked for good, whose deadline
	// passed: the broker may have expired them (a client cannot tell).
	for _, o := range b.r.obs {
		ref := msgRef{o.part, o.msgID}
		if _, acked := b.lastAckKept[ref]; o.kind != obsPublishReturn || !o.ok || acked {
			continue
		}
		call := b.calls[ref]
		if call.ttlMs > 0 && o.atMs+clockSlackMs+call.ttlMs < endMs {
			b.emit(checker.Event{AtMs: endMs - b.startMs, Kind: checker.KindFinal, Part: ref.part, MsgID: ref.msgID, Offset: o.offset,
				Outcome: checker.OutcomeDiscarded, Reason: core.ReasonExpired.String()})
		}
	}
}

// checkHistory judges the run with the checker's models and logs the
// verdict; on a violation it writes the history and its visualisation where
// the test says. The caller decides what a violation means (a mutant run
// expects one).
func checkHistory(t *testing.T, r *recorder) *checker.Report {
	t.Helper()
	h := r.toHistory()
	report := checker.Check(h, checker.Options{})
	dir := os.Getenv("FIBRIL_E2E_HISTORY_DIR")
	if !report.OK() || dir != "" {
		if dir == "" {
			dir = filepath.Join(os.TempDir(), "fibril-e2e-histories")
		}
		base := fmt.Sprintf("%s-seed%d", r.scenario, r.seed)
		historyPath, htmlPath, err := checker.WriteArtifacts(dir, base, h, report)
		if err != nil {
			t.Logf("writing the history: %v", err)
		}
		t.Logf("history: %s (re-check: go run ./cmd/fibril check %s); visualisation: %s", historyPath, historyPath, htmlPath)
	}
	t.Logf("checker: %s; %d events", report.Summary(20), len(h.Events))
	return report
}
