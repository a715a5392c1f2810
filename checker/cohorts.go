package checker

import (
	"fmt"
	"slices"
	"sort"

	"github.com/fibril-go/fibril/core"
)

// DESIGN.md item 7, exclusive consumer groups (docs/cohorts.md), over the
// partitions of every queue whose QueueSpec names a Cohort (only its
// exclusive members subscribe to it). Invariants checked:
//   - exclusive: at no time do two subscriptions hold unsettled
//     deliveries of one partition. A manual-ack delivery (node side) holds
//     from the delivery until the log entry that ends its lease (ack,
//     requeue for a nack, an unsubscribe, a session's end or the lease's
//     expiry, dead-letter, discard): the entries are what the gate reads,
//     so a session's end counts exactly when its requeues are written. A
//     crash ends no holding by itself: a lease whose entry the recovery
//     kept (lease index <= recovered index) and whose end it did not keep
//     is held by nobody after the restart and holds the partition until an
//     entry of the new process ends it (the gate's recovered leases); a
//     lease past the recovered index never happened. An auto-ack delivery
//     holds nothing (it is settled when sent), but is itself judged: it
//     must find nobody else holding;
//   - order: the first deliveries of a partition's non-delayed client
//     publishes come in offset order (a delivered message was durable, so
//     its offset is never reused; a redelivery is not a first delivery);
//   - notices: per (client connection, cohort) ASSIGNMENT_CHANGED
//     generations strictly grow, added is disjoint from what that
//     connection was told, revoked within it, and assigned is exactly told
//     - revoked + added (so a connection's first notice adds its whole
//     assignment); within one session (resumed connections) generations
//     never go back; partitions are within the queue;
//   - coverage, at the end of a drained run: the last notice of every
//     member (attached and subscribed) on its connection names only
//     partitions it subscribes to, no partition twice across members, and
//     every partition some member subscribes to;
//   - liveness, at the end of a run: no partition of a cohort queue has
//     messages left while a member subscribed to it is attached.
// RebalanceTimes measures, over the same events, how long a partition's
// hand-over takes after its owner leaves.

// cohortHolding is one manual-ack delivery of a cohort partition, from the
// delivery until its lease ends.
type cohortHolding struct {
	offset   uint64
	msgID    uint64
	sub      uint64 // the subscription delivered to; 0 once a restart left it held by nobody
	origSub  uint64 // the subscription delivered to (kept across the restart, for reports)
	seq      uint64 // the delivery event
	leaseIdx uint64 // the lease entry's log index (0: unknown)
	endIdx   uint64 // the entry that ended it (0: it still holds)
	reported bool   // a delivery to another was reported against it: once is enough
}

type cohortPartState struct {
	active map[uint64]*cohortHolding // by offset: holdings not ended
	// all lists every holding a recovery may still bring back: those still
	// active, and those whose end entry a crash might lose (pruned at each
	// recovery, which makes everything up to its index durable).
	all []*cohortHolding
	// Order: the offset and event of the newest first delivery.
	firstOffset uint64
	firstMsgID  uint64
	firstSeq    uint64
	hasFirst    bool
}

// noticeKey names one ASSIGNMENT_CHANGED stream as a client sees it.
type noticeKey struct {
	client uint32
	conn   uint64
	queue  int // the queue's partition-0 history number
}

type noticeView struct {
	generation uint64
	told       []uint32
	e          *Event // the last notice
}

type sessionGenKey struct {
	client uint32
	queue  int
}

type cohortChecker struct {
	h        *History
	v        []Violation
	parts    map[int]*cohortPartState
	delayed  map[msgKey]bool // client publishes with a not_before
	notices  map[noticeKey]*noticeView
	sessGen  map[sessionGenKey]uint64
	finals   []*Event
	stuck    bool // the run did not drain
	aborted  bool
	live     map[int][]uint64 // cohort partition -> msg ids live at the end
	sawFinal bool
	firstSet map[int]map[uint64]bool // partition -> messages delivered once already
}

func newCohortChecker(h *History) *cohortChecker {
	return &cohortChecker{h: h, parts: map[int]*cohortPartState{}, delayed: map[msgKey]bool{},
		notices: map[noticeKey]*noticeView{}, sessGen: map[sessionGenKey]uint64{}, live: map[int][]uint64{}}
}

// isCohortPart reports whether history partition part belongs to a cohort
// queue.
func (c *cohortChecker) isCohortPart(part int) bool {
	return part > 0 && part <= len(c.h.Meta.Partitions) && c.h.QueueOf(part).Cohort != ""
}

func (c *cohortChecker) part(part int) *cohortPartState {
	s := c.parts[part]
	if s == nil {
		s = &cohortPartState{active: map[uint64]*cohortHolding{}}
		c.parts[part] = s
	}
	return s
}

func (c *cohortChecker) fail(check string, e *Event, subject, format string, args ...any) {
	v := Violation{Item: 7, Check: check, Subject: subject, Detail: fmt.Sprintf(format, args...)}
	if e != nil {
		v.Seq = e.Seq
	}
	c.v = append(c.v, v)
}

func (c *cohortChecker) run() []Violation {
	for i := range c.h.Events {
		e := &c.h.Events[i]
		switch e.Kind {
		case KindPublishCall:
			if e.NotBeforeMs != 0 && c.isCohortPart(e.Part) {
				c.delayed[msgKey{part: e.Part, msgID: e.MsgID}] = true
			}
		case KindDeliver:
			if c.isCohortPart(e.Part) {
				c.onDeliver(e)
			}
		case KindEntry:
			if c.isCohortPart(e.Part) {
				c.onEntry(e)
			}
		case KindRecover:
			if c.isCohortPart(e.Part) {
				c.onRecover(e)
			}
		case KindAttach:
			if e.Outcome != "resumed" {
				for k := range c.sessGen {
					if k.client == e.Client {
						delete(c.sessGen, k)
					}
				}
			}
		case KindAssignment:
			c.onNotice(e)
		case KindCohortFinal:
			c.finals = append(c.finals, e)
		case KindFinal:
			c.sawFinal = true
			if c.isCohortPart(e.Part) && (e.Outcome == OutcomeLive || e.Outcome == OutcomePendingDLQ) {
				c.live[e.Part] = append(c.live[e.Part], e.MsgID)
			}
		case KindDeadLock:
			c.stuck = true
		case KindAbort:
			c.aborted = true
		}
	}
	if !c.aborted {
		if !c.stuck && c.sawFinal {
			c.checkCoverage()
		}
		c.checkLiveness()
	}
	return c.v
}

// ---- exclusive and order

func (c *cohortChecker) onDeliver(e *Event) {
	s := c.part(e.Part)
	subject := fmt.Sprintf("%s msg %d", c.h.PartName(e.Part), e.MsgID)
	// The holder reported is the oldest other delivery still held, so the
	// report is the same whatever the map order; each holding is reported
	// once (a broken gate would otherwise repeat it for every delivery).
	var other *cohortHolding
	for _, h := range s.active {
		if h.offset == e.Offset || (h.sub == e.Sub && h.sub != 0) || h.reported {
			continue
		}
		if other == nil || h.seq < other.seq {
			other = h
		}
	}
	if other != nil {
		other.reported = true
		holder := fmt.Sprintf("sub %d", other.sub)
		if other.sub == 0 {
			holder = fmt.Sprintf("a lease recovered after a restart (delivered to sub %d)", other.origSub)
		}
		c.fail("exclusive", e, subject, "delivered (offset %d) to sub %d while %s holds offset %d (msg %d, delivered at #%d) unsettled: two consumers at once",
			e.Offset, e.Sub, holder, other.offset, other.msgID, other.seq)
	}
	c.checkFirstOrder(e, s, subject)
	if e.AutoAck {
		return // settled as it was sent: it holds nothing
	}
	h := &cohortHolding{offset: e.Offset, msgID: e.MsgID, sub: e.Sub, origSub: e.Sub, seq: e.Seq, leaseIdx: e.Index}
	// A delivery of an offset still held is item 3's to report; the new
	// lease replaces the old one here.
	s.active[e.Offset] = h
	s.all = append(s.all, h)
}

// checkFirstOrder: the first deliveries of non-delayed client publishes
// come in offset order.
func (c *cohortChecker) checkFirstOrder(e *Event, s *cohortPartState, subject string) {
	k := msgKey{part: e.Part, msgID: e.MsgID}
	if e.Retries > 0 || c.delayed[k] || e.MsgID == 0 {
		return
	}
	firsts := c.firstSeen(e.Part)
	if firsts[e.MsgID] {
		return
	}
	firsts[e.MsgID] = true
	if s.hasFirst && e.Offset < s.firstOffset {
		c.fail("order", e, subject, "first delivered (offset %d) after offset %d (msg %d) was first delivered at #%d: out of publish order",
			e.Offset, s.firstOffset, s.firstMsgID, s.firstSeq)
	}
	if !s.hasFirst || e.Offset > s.firstOffset {
		s.firstOffset, s.firstMsgID, s.firstSeq, s.hasFirst = e.Offset, e.MsgID, e.Seq, true
	}
}

// firstSeen is the set of messages of part delivered once already.
func (c *cohortChecker) firstSeen(part int) map[uint64]bool {
	if c.firstSet == nil {
		c.firstSet = map[int]map[uint64]bool{}
	}
	m := c.firstSet[part]
	if m == nil {
		m = map[uint64]bool{}
		c.firstSet[part] = m
	}
	return m
}

func (c *cohortChecker) onEntry(e *Event) {
	switch core.EntryKind(e.EntryKind) {
	case core.EntryAck, core.EntryRequeue, core.EntryDeadLetter, core.EntryDiscard:
	default:
		return
	}
	s := c.part(e.Part)
	if h := s.active[e.Offset]; h != nil {
		h.endIdx = e.Index
		delete(s.active, e.Offset)
	}
}

// onRecover rebuilds what the restarted partition holds from the
// recovered index: leases it kept and whose end it did not keep are held
// by nobody now; leases it did not keep never were; ended holdings at or
// below the index can no longer come back.
func (c *cohortChecker) onRecover(e *Event) {
	s := c.part(e.Part)
	clear(s.active)
	kept := s.all[:0]
	for _, h := range s.all {
		switch {
		case h.leaseIdx == 0 || h.leaseIdx > e.Index:
			// Lost with the crash (or of unknown index: dropped, so the
			// check errs towards silence).
		case h.endIdx != 0 && h.endIdx <= e.Index:
			// Ended for good: recovery made its end durable.
		default:
			h.endIdx, h.sub = 0, 0
			s.active[h.offset] = h
			kept = append(kept, h)
		}
	}
	clear(s.all[len(kept):])
	s.all = kept
}

// ---- notices

func (c *cohortChecker) onNotice(e *Event) {
	if e.Part <= 0 || e.Part > len(c.h.Meta.Partitions) {
		return
	}
	q := c.h.QueueOf(e.Part)
	subject := fmt.Sprintf("client %d %s cohort %s", e.Client, q.Topic, q.Cohort)
	for _, p := range e.Assigned {
		if p >= uint32(q.Partitions) {
			c.fail("notice", e, subject, "assigned partition %d of a %d-partition queue", p, q.Partitions)
		}
	}
	k := noticeKey{client: e.Client, conn: e.Conn, queue: e.Part}
	v := c.notices[k]
	if v == nil {
		v = &noticeView{}
		c.notices[k] = v
	} else if e.Index <= v.generation {
		c.fail("notice", e, subject, "generation %d after %d on one connection: generations only grow", e.Index, v.generation)
	}
	sk := sessionGenKey{client: e.Client, queue: e.Part}
	if last, ok := c.sessGen[sk]; ok && e.Index < last {
		c.fail("notice", e, subject, "generation %d after %d within one session (a resumed connection went back)", e.Index, last)
	}
	c.sessGen[sk] = max(c.sessGen[sk], e.Index)
	for _, p := range e.Added {
		if slices.Contains(v.told, p) {
			c.fail("notice", e, subject, "partition %d added, but this connection was told it already (%v)", p, v.told)
		}
	}
	for _, p := range e.Revoked {
		if !slices.Contains(v.told, p) {
			c.fail("notice", e, subject, "partition %d revoked, but this connection was never told it (%v)", p, v.told)
		}
	}
	var want []uint32
	for _, p := range v.told {
		if !slices.Contains(e.Revoked, p) {
			want = append(want, p)
		}
	}
	for _, p := range e.Added {
		if !slices.Contains(want, p) {
			want = append(want, p)
		}
	}
	slices.Sort(want)
	got := slices.Clone(e.Assigned)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		c.fail("notice", e, subject, "assigned %v, but told %v - revoked %v + added %v is %v", e.Assigned, v.told, e.Revoked, e.Added, want)
	}
	v.generation, v.told, v.e = max(v.generation, e.Index), got, e
}

// ---- the end of the run

// checkCoverage: at the end of a drained run each attached member's last
// notice is its current assignment (nothing is in flight), and together
// they cover what the members subscribe to, once each.
func (c *cohortChecker) checkCoverage() {
	type claim struct {
		client uint32
		seq    uint64
	}
	byQueue := map[int][]*Event{}
	var queues []int
	for _, f := range c.finals {
		if !f.Ok {
			continue
		}
		if byQueue[f.Part] == nil {
			queues = append(queues, f.Part)
		}
		byQueue[f.Part] = append(byQueue[f.Part], f)
	}
	sort.Ints(queues)
	for _, queue := range queues {
		qs := c.h.QueueOf(queue)
		owner := map[uint32]claim{}
		subscribed := map[uint32]bool{}
		for _, f := range byQueue[queue] {
			subject := fmt.Sprintf("client %d %s cohort %s", f.Client, qs.Topic, qs.Cohort)
			for _, p := range f.Assigned {
				subscribed[p] = true
			}
			v := c.notices[noticeKey{client: f.Client, conn: f.Conn, queue: queue}]
			if v == nil {
				c.fail("coverage", f, subject, "attached and subscribed to %v at the end, but never told its assignment on this connection", f.Assigned)
				continue
			}
			for _, p := range v.told {
				if !slices.Contains(f.Assigned, p) {
					c.fail("coverage", f, subject, "assigned partition %d (notice #%d), which it does not subscribe to (%v)", p, v.e.Seq, f.Assigned)
				}
				if prev, taken := owner[p]; taken {
					c.fail("coverage", f, subject, "assigned partition %d (notice #%d), which client %d is assigned too (notice #%d)", p, v.e.Seq, prev.client, prev.seq)
					continue
				}
				owner[p] = claim{client: f.Client, seq: v.e.Seq}
			}
		}
		for p := uint32(0); p < uint32(qs.Partitions); p++ {
			if subscribed[p] && owner[p].client == 0 {
				c.fail("coverage", nil, fmt.Sprintf("%s/%d cohort %s", qs.Topic, p, qs.Cohort),
					"members subscribe to it at the end of the run, but no member's assignment covers it")
			}
		}
	}
}

// checkLiveness: a partition of a cohort queue ends with messages left
// while an attached member subscribes to it.
func (c *cohortChecker) checkLiveness() {
	parts := make([]int, 0, len(c.live))
	for part := range c.live {
		parts = append(parts, part)
	}
	sort.Ints(parts)
	for _, part := range parts {
		spec := c.h.PartitionOf(part)
		var members []uint32
		for _, f := range c.finals {
			if f.Ok && f.Part > 0 && c.h.PartitionOf(f.Part).Topic == spec.Topic && slices.Contains(f.Assigned, spec.Partition) {
				members = append(members, f.Client)
			}
		}
		if len(members) == 0 {
			continue
		}
		ids := c.live[part]
		c.fail("liveness", nil, c.h.PartName(part), "%d messages still live at the end while members (clients %v) were attached and subscribed to it: %v",
			len(ids), members, head(ids, 10))
	}
}

// ---- rebalance times

// Rebalance is how long one hand-over after a leave took.
type Rebalance struct {
	Part int
	// NoticeMs: from the owner's leave (its session's CohortLeave) to the
	// first ASSIGNMENT_CHANGED adding the partition that reached another
	// member (true simulated ms); -1 when none came.
	NoticeMs int64
	// DeliveryMs: from the leave to the first delivery of the partition to
	// another member, counted only when that delivery is of a message
	// accepted before the leave (it was waiting); -1 otherwise.
	DeliveryMs int64
}

// RebalanceTimes lists, for every leave of a partition's owner (the Node's
// last SetOwner named the leaving subscription), how long it took until
// another member was told (ASSIGNMENT_CHANGED at the client) and until a
// waiting message of the partition was delivered to another member. A
// crash drops the leaves it interrupted.
func RebalanceTimes(h *History) []Rebalance {
	type pending struct {
		atMs     int64
		seq      uint64
		member   string
		idx      int
		notice   bool // still waiting for the notice
		delivery bool // still waiting for the delivery
	}
	var out []Rebalance
	subMember := map[uint64]string{}
	owner := map[int]uint64{}
	accepted := map[msgKey]uint64{}
	pend := map[int]*pending{}
	done := func(part int, p *pending) {
		if !p.notice && !p.delivery {
			delete(pend, part)
		}
	}
	for i := range h.Events {
		e := &h.Events[i]
		switch e.Kind {
		case KindCohortJoin:
			subMember[e.Sub] = e.Text
		case KindSetOwner:
			owner[e.Part] = e.Sub
		case KindAccept:
			accepted[msgKey{part: e.Part, msgID: e.MsgID}] = e.Seq
		case KindCrash:
			if e.Part == 0 {
				clear(pend)
				clear(owner)
			}
		case KindCohortLeave:
			if e.Sub != 0 && owner[e.Part] == e.Sub {
				out = append(out, Rebalance{Part: e.Part, NoticeMs: -1, DeliveryMs: -1})
				pend[e.Part] = &pending{atMs: e.AtMs, seq: e.Seq, member: e.Text, idx: len(out) - 1, notice: true, delivery: true}
			}
		case KindAssignment:
			if e.Part <= 0 || e.Part > len(h.Meta.Partitions) {
				continue
			}
			topic := h.PartitionOf(e.Part).Topic
			for _, p := range e.Added {
				part := partOf(h, topic, p)
				if pd := pend[part]; pd != nil && pd.notice && e.Text != pd.member {
					out[pd.idx].NoticeMs, pd.notice = e.AtMs-pd.atMs, false
					done(part, pd)
				}
			}
		case KindDeliver:
			pd := pend[e.Part]
			if pd == nil || !pd.delivery || subMember[e.Sub] == pd.member {
				continue
			}
			if seq, ok := accepted[msgKey{part: e.Part, msgID: e.MsgID}]; ok && seq < pd.seq {
				out[pd.idx].DeliveryMs = e.AtMs - pd.atMs
			}
			pd.delivery = false
			done(e.Part, pd)
		}
	}
	return out
}

// partOf is the history number of a queue's partition (0: none).
func partOf(h *History, topic string, partition uint32) int {
	for i, p := range h.Meta.Partitions {
		if p.Topic == topic && p.Partition == partition {
			return i + 1
		}
	}
	return 0
}
