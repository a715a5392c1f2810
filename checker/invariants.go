package checker

import (
	"fmt"
	"strconv"

	"github.com/fibril-go/fibril/core"
)

// Invariant checks over a history, one pass in sequence order plus end-of-run
// checks, for DESIGN.md items 1, 2, 4, 5, 6 and 10 (items 2, 3, 5 and 6 are
// also checked per message by the lifecycle model, with crashes resolved):
//   1  every confirmed publish ends acked, dead-lettered (with a copy stored
//      in the target) or discarded for a reason its history allows;
//      nothing is live at the end (liveness);
//   2  no delivery of a message after the node reported its ack durable;
//   4  a subscription never holds more unsettled deliveries than its
//      prefetch (auto-ack: never more deliveries in one step);
//   5  no delivery before not_before (publish or retry-after) and none at or
//      after the TTL deadline; no expiry before the deadline;
//   6  dead-letter copies carry stroma.dlq.* headers that match the source;
//   10 each recovery equals the state derived from the durable prefix of
//      what was written, and keeps every fsynced entry.

// tagKey names one delivery: tags alone are not unique across a crash (tags
// issued from a log tail the crash lost are issued again), but a
// subscription dies with its process.
type tagKey struct {
	sub uint64
	tag uint64
}

type partOffset struct {
	part   int
	offset uint64
}

type crashMark struct {
	seq   uint64
	nowMs int64
}

type subInfo struct {
	part      int
	prefetch  uint32
	autoAck   bool
	held      map[uint64]bool // offsets under a live lease
	stepSeen  uint64
	stepCount uint32
}

// retryAfter is a nack's not_before that the next delivery must respect.
type retryAfter struct {
	notBeforeMs int64
	crashes     int // crashes of the partition when it was set
}

type invariantChecker struct {
	h          *History
	violations []Violation

	calls      map[msgKey]*Event // publish calls
	accepts    map[msgKey]*Event
	sourceOf   map[uint64]msgKey // msgID -> source message (client publishes)
	confirmed  map[msgKey]uint64 // -> offset
	maxRetries map[msgKey]uint32
	delivered  map[msgKey]bool
	failed     map[msgKey]bool
	ackedAt    map[msgKey]uint64 // seq of the durable ack report
	crashes    [][]crashMark     // by part
	curTag     map[msgKey]tagKey // the message's latest delivery
	nackNB     map[tagKey]int64
	retryAfter map[msgKey]retryAfter
	subs       map[uint64]*subInfo
	holder     map[partOffset]uint64
	finals     map[partOffset]*Event
	finalsByID map[msgKey][]*Event // (part, msgID) -> finals
	sawFinal   bool
	aborted    bool
}

func newInvariantChecker(h *History) *invariantChecker {
	return &invariantChecker{h: h,
		calls: map[msgKey]*Event{}, accepts: map[msgKey]*Event{}, sourceOf: map[uint64]msgKey{},
		confirmed: map[msgKey]uint64{}, maxRetries: map[msgKey]uint32{}, delivered: map[msgKey]bool{},
		failed: map[msgKey]bool{}, ackedAt: map[msgKey]uint64{}, crashes: make([][]crashMark, len(h.Meta.Partitions)+1),
		curTag: map[msgKey]tagKey{}, nackNB: map[tagKey]int64{}, retryAfter: map[msgKey]retryAfter{},
		subs: map[uint64]*subInfo{}, holder: map[partOffset]uint64{}, finals: map[partOffset]*Event{},
		finalsByID: map[msgKey][]*Event{}}
}

func (c *invariantChecker) fail(item int, check string, e *Event, subject, format string, args ...any) {
	v := Violation{Item: item, Check: check, Subject: subject, Detail: fmt.Sprintf(format, args...)}
	if e != nil {
		v.Seq = e.Seq
	}
	c.violations = append(c.violations, v)
}

func (c *invariantChecker) subject(part int, msgID uint64) string {
	return fmt.Sprintf("%s msg %d", c.h.PartName(part), msgID)
}

// key names a message; dead-letter copies also by offset (see msgKey).
func (c *invariantChecker) key(e *Event) msgKey {
	k := msgKey{part: e.Part, msgID: e.MsgID}
	if e.Part > 0 && c.h.QueueOf(e.Part).DeadLetterSink {
		k.offset = e.Offset
	}
	return k
}

func (c *invariantChecker) run() []Violation {
	for i := range c.h.Events {
		c.event(&c.h.Events[i])
	}
	if !c.aborted && c.sawFinal {
		c.endOfRun()
	}
	return c.violations
}

func (c *invariantChecker) event(e *Event) {
	switch e.Kind {
	case KindPublishCall:
		c.calls[c.key(e)] = e
	case KindPublishReturn:
		if e.Ok {
			c.confirmed[c.key(e)] = e.Offset
		}
	case KindAccept:
		k := c.key(e)
		c.accepts[k] = e
		if !c.h.QueueOf(e.Part).DeadLetterSink {
			c.sourceOf[e.MsgID] = k
		}
	case KindConfirm:
		c.confirmed[c.key(e)] = e.Offset
	case KindSubscribeCall, KindSubStart:
		// Old histories name the sub at the client's call; the node-core
		// driver records the partition taking it (the broker mints ids).
		if e.Sub != 0 {
			c.subs[e.Sub] = &subInfo{part: e.Part, prefetch: c.effectivePrefetch(e.Prefetch), autoAck: e.AutoAck, held: map[uint64]bool{}}
		}
	case KindSubEnd:
		c.endSub(e.Sub)
	case KindSettleCall:
		c.settleCall(e)
	case KindDeliver:
		c.deliver(e)
	case KindEntry:
		c.entry(e)
	case KindSettled:
		if e.Outcome == OutcomeAcked {
			c.ackedAt[c.key(e)] = e.Seq
		}
	case KindCrash:
		c.crashes[e.Part] = append(c.crashes[e.Part], crashMark{seq: e.Seq, nowMs: e.NowMs})
		for id, s := range c.subs {
			if s.part == e.Part {
				c.endSub(id)
			}
		}
	case KindRecover:
		c.recovered(e)
	case KindFinal:
		c.sawFinal = true
		c.finals[partOffset{e.Part, e.Offset}] = e
		k := msgKey{part: e.Part, msgID: e.MsgID}
		c.finalsByID[k] = append(c.finalsByID[k], e)
	case KindDeadLock:
		c.fail(1, "liveness", e, "run", "%s", e.Text)
	case KindAbort:
		c.aborted = true
		c.fail(0, "abort", e, "run", "%s", e.Text)
	}
}

func (c *invariantChecker) effectivePrefetch(requested uint32) uint32 {
	p := max(requested, 1)
	if c.h.Meta.PrefetchMax > 0 {
		p = min(p, c.h.Meta.PrefetchMax)
	}
	return p
}

func (c *invariantChecker) endSub(id uint64) {
	s := c.subs[id]
	if s == nil {
		return
	}
	for offset := range s.held {
		delete(c.holder, partOffset{s.part, offset})
	}
	delete(c.subs, id)
}

func (c *invariantChecker) settleCall(e *Event) {
	k := c.key(e)
	switch e.Action {
	case ActionFail:
		c.failed[k] = true
	case ActionRetry:
		if e.NotBeforeMs != 0 {
			c.nackNB[tagKey{e.Sub, e.Tag}] = e.NotBeforeMs
		}
	}
}

func (c *invariantChecker) deliver(e *Event) {
	k := c.key(e)
	subject := c.subject(e.Part, e.MsgID)
	c.delivered[k] = true
	c.curTag[k] = tagKey{e.Sub, e.Tag}
	if e.Retries > c.maxRetries[k] {
		c.maxRetries[k] = e.Retries
	}
	if seq, ok := c.ackedAt[k]; ok {
		c.fail(2, "acked_final", e, subject, "delivered (tag %d) after its ack was reported durable at #%d", e.Tag, seq)
	}
	c.checkPrefetch(e)
	c.checkDeliveryTimes(e, k, subject)
	if c.h.QueueOf(e.Part).DeadLetterSink {
		c.checkDeadLetterHeaders(e, subject)
	}
}

// checkPrefetch: item 4.
func (c *invariantChecker) checkPrefetch(e *Event) {
	s := c.subs[e.Sub]
	if s == nil {
		return
	}
	if s.autoAck {
		if s.stepSeen != e.Step {
			s.stepSeen, s.stepCount = e.Step, 0
		}
		s.stepCount++
		if s.stepCount > s.prefetch {
			c.fail(4, "prefetch", e, fmt.Sprintf("sub %d", e.Sub), "auto-ack subscription got %d deliveries in one step, prefetch %d", s.stepCount, s.prefetch)
		}
		return
	}
	if uint32(len(s.held)) >= s.prefetch {
		c.fail(4, "prefetch", e, fmt.Sprintf("sub %d", e.Sub), "delivered a message while the subscription holds %d unsettled deliveries, prefetch %d", len(s.held), s.prefetch)
	}
	s.held[e.Offset] = true
	c.holder[partOffset{e.Part, e.Offset}] = e.Sub
}

// checkDeliveryTimes: item 5, in the node's clock as the core saw it.
func (c *invariantChecker) checkDeliveryTimes(e *Event, k msgKey, subject string) {
	call, accept := c.calls[k], c.accepts[k]
	if call != nil && accept != nil && call.NotBeforeMs > 0 && e.NowMs < call.NotBeforeMs {
		// Released only at a clock >= not_before; a crash may since have set
		// the clock back, so compare with the clocks of the processes between.
		if c.maxCrashClock(e.Part, accept.Seq) < call.NotBeforeMs {
			c.fail(5, "not_before", e, subject, "delivered at node time %d, before its not_before %d", e.NowMs, call.NotBeforeMs)
		}
	}
	if ra, ok := c.retryAfter[k]; ok {
		delete(c.retryAfter, k)
		if len(c.crashes[e.Part]) == ra.crashes && e.NowMs < ra.notBeforeMs {
			c.fail(5, "not_before", e, subject, "redelivered at node time %d, before the retry-after not_before %d", e.NowMs, ra.notBeforeMs)
		}
	}
	if deadline := c.expiresAt(k); deadline != 0 && e.NowMs >= deadline {
		c.fail(5, "ttl", e, subject, "delivered at node time %d, at or after its TTL deadline %d", e.NowMs, deadline)
	}
}

func (c *invariantChecker) maxCrashClock(part int, afterSeq uint64) int64 {
	var clock int64
	for _, m := range c.crashes[part] {
		if m.seq > afterSeq && m.nowMs > clock {
			clock = m.nowMs
		}
	}
	return clock
}

// expiresAt is the TTL deadline the core must use: its clock at the
// publish plus the message's TTL, or the queue default (0 = none).
func (c *invariantChecker) expiresAt(k msgKey) int64 {
	accept := c.accepts[k]
	if accept == nil {
		return 0
	}
	if call := c.calls[k]; call != nil && call.HasTTL {
		return accept.NowMs + call.TTLMs
	}
	if ttl := c.h.QueueOf(k.part).DefaultTTLMs; ttl > 0 {
		return accept.NowMs + ttl
	}
	return 0
}

func (c *invariantChecker) entry(e *Event) {
	k := c.key(e)
	kind := core.EntryKind(e.EntryKind)
	switch kind {
	case core.EntryAck, core.EntryRequeue, core.EntryDeadLetter, core.EntryDiscard:
		po := partOffset{e.Part, e.Offset}
		if id, ok := c.holder[po]; ok {
			if s := c.subs[id]; s != nil {
				delete(s.held, e.Offset)
			}
			delete(c.holder, po)
		}
	}
	// The entry's cause, not the step's trigger: a nack of one message can
	// expire another's lease in the same step.
	if kind == core.EntryRequeue && e.Cause == core.CauseNack {
		if nb, ok := c.nackNB[c.curTag[k]]; ok && nb > e.NowMs {
			c.retryAfter[k] = retryAfter{notBeforeMs: nb, crashes: len(c.crashes[e.Part])}
		}
	}
	if (kind == core.EntryDiscard || kind == core.EntryDeadLetter) && core.DLQReason(e.Cause) == core.ReasonExpired {
		deadline := c.expiresAt(k)
		subject := c.subject(e.Part, e.MsgID)
		if deadline == 0 {
			c.fail(5, "ttl", e, subject, "expired although it has no TTL")
		} else if e.NowMs < deadline {
			c.fail(5, "ttl", e, subject, "expired at node time %d, before its TTL deadline %d", e.NowMs, deadline)
		}
	}
}

// recovered: item 10.
func (c *invariantChecker) recovered(e *Event) {
	name := c.h.PartName(e.Part)
	if e.GotHash != e.WantHash {
		c.fail(10, "recovery", e, name, "recovered state %s differs from the state derived from the durable prefix up to index %d (%s)", e.GotHash, e.Index, e.WantHash)
	}
	if e.Index < e.Index2 {
		c.fail(10, "recovery", e, name, "recovered up to index %d, but index %d was fsynced before the crash", e.Index, e.Index2)
	}
}

// checkDeadLetterHeaders: item 6, on every delivery of a dead-letter copy.
func (c *invariantChecker) checkDeadLetterHeaders(e *Event, subject string) {
	get := func(key string) (string, bool) {
		for _, h := range e.Headers {
			if h.Key == key {
				return h.Value, true
			}
		}
		return "", false
	}
	topic, ok1 := get(core.HeaderDLQSourceTopic)
	offsetText, ok2 := get(core.HeaderDLQSourceOffset)
	retriesText, ok3 := get(core.HeaderDLQRetryCount)
	reason, ok4 := get(core.HeaderDLQReason)
	atText, ok5 := get(core.HeaderDLQDeadLetteredAtMs)
	if !(ok1 && ok2 && ok3 && ok4 && ok5) {
		c.fail(6, "dlq_headers", e, subject, "a dead-letter copy lacks a stroma.dlq.* header: %v", e.Headers)
		return
	}
	source, ok := c.sourceOf[e.MsgID]
	if !ok {
		c.fail(6, "dlq_headers", e, subject, "a dead-letter copy of a message never published (x-msg-id kept?)")
		return
	}
	q := c.h.QueueOf(source.part)
	sink := c.h.PartitionOf(e.Part).Topic
	routes := q.DLQKind == uint8(core.DLQCustom) && q.DLQTarget == sink || q.DLQKind == uint8(core.DLQGlobal) && c.h.Meta.GlobalDLQ == sink
	retries, errRetries := strconv.ParseUint(retriesText, 10, 32)
	_, errAt := strconv.ParseInt(atText, 10, 64)
	switch {
	case !routes:
		c.fail(6, "dlq_headers", e, subject, "copy in %s, but its source %s does not dead-letter there", sink, q.Topic)
	case topic != q.Topic:
		c.fail(6, "dlq_headers", e, subject, "source_topic %q, the source is %q", topic, q.Topic)
	case offsetText != strconv.FormatUint(c.accepts[source].Offset, 10):
		c.fail(6, "dlq_headers", e, subject, "source_offset %s, the source offset is %d", offsetText, c.accepts[source].Offset)
	case errRetries != nil || uint32(retries) > q.MaxRetries:
		c.fail(6, "dlq_headers", e, subject, "retry_count %q is not within max_retries %d", retriesText, q.MaxRetries)
	case reason == core.ReasonRetriesExhausted.String() && uint32(retries) != q.MaxRetries:
		c.fail(6, "dlq_headers", e, subject, "reason retries_exhausted with retry_count %d, max_retries %d", retries, q.MaxRetries)
	case reason != core.ReasonRetriesExhausted.String() && reason != core.ReasonTerminalNack.String() && reason != core.ReasonExpired.String():
		c.fail(6, "dlq_headers", e, subject, "unknown reason %q", reason)
	case errAt != nil:
		c.fail(6, "dlq_headers", e, subject, "dead_lettered_at_ms %q is not a number", atText)
	}
}

// endOfRun: item 1 and liveness, against the state read back from the log.
func (c *invariantChecker) endOfRun() {
	for k, offset := range c.confirmed {
		if c.h.QueueOf(k.part).DeadLetterSink {
			continue
		}
		c.checkConfirmed(k, offset)
	}
	stuck := map[int][]uint64{}
	for i := range c.h.Events {
		e := &c.h.Events[i]
		if e.Kind == KindFinal && (e.Outcome == OutcomeLive || e.Outcome == OutcomePendingDLQ) {
			stuck[e.Part] = append(stuck[e.Part], e.MsgID)
		}
	}
	for part := 1; part <= len(c.h.Meta.Partitions); part++ {
		if ids := stuck[part]; len(ids) > 0 {
			c.fail(1, "liveness", nil, c.h.PartName(part), "%d messages still live at the end of the liveness phase: %v", len(ids), head(ids, 10))
		}
	}
}

func head(ids []uint64, n int) []uint64 {
	if len(ids) > n {
		return ids[:n]
	}
	return ids
}

func (c *invariantChecker) checkConfirmed(k msgKey, offset uint64) {
	subject := c.subject(k.part, k.msgID)
	f := c.finals[partOffset{k.part, offset}]
	switch {
	case f == nil:
		c.fail(1, "lost", nil, subject, "confirmed at offset %d, which is not in the log at the end", offset)
		return
	case f.MsgID != k.msgID:
		c.fail(1, "lost", f, subject, "confirmed at offset %d, but the log holds msg %d there at the end", offset, f.MsgID)
		return
	}
	q := c.h.QueueOf(k.part)
	routes := q.DLQKind == uint8(core.DLQCustom) || q.DLQKind == uint8(core.DLQGlobal) && c.h.Meta.GlobalDLQ != ""
	switch f.Outcome {
	case OutcomeAcked:
		if !c.delivered[k] {
			c.fail(1, "lost", f, subject, "acked in the log but never delivered")
		}
	case OutcomeDiscarded:
		if routes {
			c.fail(6, "dlq_policy", f, subject, "discarded (%s) although %s dead-letters", f.Reason, q.Topic)
		}
		c.checkReason(k, f, subject)
	case OutcomeDeadLettered:
		if !routes {
			c.fail(6, "dlq_policy", f, subject, "dead-lettered although %s discards", q.Topic)
		}
		c.checkReason(k, f, subject)
		c.checkCopies(k, f, subject)
	}
}

// checkReason: the reason a message left must be one its history allows.
func (c *invariantChecker) checkReason(k msgKey, f *Event, subject string) {
	q := c.h.QueueOf(k.part)
	switch f.Reason {
	case core.ReasonExpired.String():
		if c.expiresAt(k) == 0 {
			c.fail(5, "ttl", f, subject, "left the queue as expired without a TTL")
		}
	case core.ReasonRetriesExhausted.String():
		if !c.delivered[k] || c.maxRetries[k] != q.MaxRetries {
			c.fail(6, "retries", f, subject, "left as retries_exhausted, but its deliveries reached retries %d of %d", c.maxRetries[k], q.MaxRetries)
		}
	case core.ReasonTerminalNack.String():
		if !c.failed[k] {
			c.fail(6, "retries", f, subject, "left as terminal_nack, but no consumer failed it")
		}
	default:
		c.fail(6, "retries", f, subject, "left the queue for reason %q", f.Reason)
	}
}

// checkCopies: a dead-lettered message has a copy stored in its target.
func (c *invariantChecker) checkCopies(k msgKey, f *Event, subject string) {
	q := c.h.QueueOf(k.part)
	target := q.DLQTarget
	if q.DLQKind == uint8(core.DLQGlobal) {
		target = c.h.Meta.GlobalDLQ
	}
	copies := 0
	for part, p := range c.h.Meta.Partitions {
		if p.Topic != target {
			continue
		}
		// A copy is a message of the target queue like any other: it may be
		// acked, or discarded by the target's own policy; one left live is
		// reported by the liveness check.
		copies += len(c.finalsByID[msgKey{part: part + 1, msgID: k.msgID}])
	}
	if copies == 0 {
		c.fail(1, "lost", f, subject, "dead-lettered, but no copy is in %s", target)
	}
}
