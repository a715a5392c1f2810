package core

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// model is the reference the rapid test holds the core to: the rules of SPEC
// §1-2 written as plainly as possible (maps, linear scans, no heaps, no log).
// It predicts every live message's state after every step; the core's
// observable outputs (deliveries, replies, settlements, dead-letter copies)
// are checked against it as they arrive.

type mState uint8

const (
	mReady mState = iota + 1
	mDelayed
	mInflight
	mPending
	mSettled
)

type mMsg struct {
	offset      uint64
	state       mState
	retries     uint32
	dueMs       int64 // delayed: not_before; inflight: lease deadline; pending: dead-lettered at
	expiresAtMs int64
	tag, sub    uint64
	reason      DLQReason
	target      DLQTarget
	settleKind  SettleKind

	publishIndex  uint64 // index of its Publish entry
	settleIndex   uint64 // index of the entry that settled it
	pendingIndex  uint64 // index of its DeadLetter entry
	confirmWanted bool
	confirmed     bool
	settleSeen    bool // its durable settlement was reported
	copySeen      bool // its dead-letter copy was emitted (since the last restart)
	everAcked     bool // an ack settled it: it must never be delivered again
}

type mSub struct {
	prefetch uint32
	autoAck  bool
	tags     map[uint64]uint64 // tag -> offset
	sentStep int               // auto-ack deliveries in the current step
	paused   bool              // PauseSubscription: no new deliveries
	// exclusive: delivered to only while it is the owner and nothing of the
	// partition is inflight except its own deliveries (docs/cohorts.md).
	exclusive bool
}

type model struct {
	leaseMs    int64
	nowMs      int64
	nextOffset uint64
	durable    uint64
	settings   QueueSettings
	globalDLQ  *DLQTarget
	queue      QueueID
	msgs       map[uint64]*mMsg
	subs       map[uint64]*mSub
	// owner and ownerGeneration: the last SetOwner applied (volatile, like
	// subs: a restart forgets them).
	owner           uint64
	ownerGeneration uint64
}

func newModel(cfg Config) *model {
	return &model{leaseMs: cfg.LeaseMs, queue: cfg.Queue, settings: QueueSettings{MaxRetries: cfg.MaxRetriesDefault},
		msgs: map[uint64]*mMsg{}, subs: map[uint64]*mSub{}}
}

// clone deep-copies the durable part; subscriptions die with a restart.
func (m *model) clone() *model {
	c := *m
	c.msgs = make(map[uint64]*mMsg, len(m.msgs))
	for k, v := range m.msgs {
		x := *v
		c.msgs[k] = &x
	}
	c.subs = map[uint64]*mSub{}
	if m.globalDLQ != nil {
		t := *m.globalDLQ
		c.globalDLQ = &t
	}
	return &c
}

func (m *model) sortedOffsets() []uint64 {
	return slices.Sorted(maps.Keys(m.msgs))
}

func (m *model) expired(x *mMsg) bool {
	return x.expiresAtMs != 0 && x.expiresAtMs <= m.nowMs
}

func (m *model) deadLetter(x *mMsg, reason DLQReason) {
	var target *DLQTarget
	switch m.settings.DLQ.Kind {
	case DLQCustom:
		t := m.settings.DLQ.Target
		target = &t
	case DLQGlobal:
		target = m.globalDLQ
	}
	x.tag, x.sub, x.reason = 0, 0, reason
	if target == nil {
		x.state, x.settleKind = mSettled, SettledDiscarded
		return
	}
	x.state, x.target, x.dueMs = mPending, *target, m.nowMs
}

// requeue: expiry first, then the retry budget, then back to ready or delayed.
func (m *model) requeue(x *mMsg, notBeforeMs int64) {
	if sub := m.subs[x.sub]; sub != nil {
		delete(sub.tags, x.tag)
	}
	switch {
	case m.expired(x):
		m.deadLetter(x, ReasonExpired)
	case x.retries >= m.settings.MaxRetries:
		m.deadLetter(x, ReasonRetriesExhausted)
	default:
		x.retries++
		x.tag, x.sub = 0, 0
		if notBeforeMs > m.nowMs {
			x.state, x.dueMs = mDelayed, notBeforeMs
		} else {
			x.state, x.dueMs = mReady, 0
		}
	}
}

// advanceTime applies what the clock makes happen: lease expiry, delay
// release, TTL expiry of ready and delayed (never inflight) messages.
func (m *model) advanceTime() {
	for _, off := range m.sortedOffsets() {
		x := m.msgs[off]
		switch {
		case x.state == mInflight && x.dueMs <= m.nowMs:
			m.requeue(x, 0)
		case x.state == mDelayed && x.dueMs <= m.nowMs:
			if m.expired(x) {
				m.deadLetter(x, ReasonExpired)
			} else {
				x.state, x.dueMs = mReady, 0
			}
		}
		if (x.state == mReady || x.state == mDelayed) && m.expired(x) {
			m.deadLetter(x, ReasonExpired)
		}
	}
}

// lowestDeliverable is the offset the next delivery must take.
func (m *model) lowestDeliverable() (uint64, bool) {
	for _, off := range m.sortedOffsets() {
		x := m.msgs[off]
		if x.state == mReady && x.publishIndex <= m.durable && !m.expired(x) {
			return off, true
		}
	}
	return 0, false
}

func (m *model) hasCredit(s *mSub) bool {
	if s.paused {
		return false
	}
	if s.autoAck {
		return uint32(s.sentStep) < s.prefetch
	}
	return uint32(len(s.tags)) < s.prefetch
}

// inflightHolders lists, in offset order, who holds each inflight message:
// a subscription id, or 0 for a lease recovered after a restart (held by no
// live subscription).
func (m *model) inflightHolders() []uint64 {
	var holders []uint64
	for _, off := range m.sortedOffsets() {
		if x := m.msgs[off]; x.state == mInflight {
			holders = append(holders, x.sub)
		}
	}
	return holders
}

// gateAdmits is the exclusive gate as the doc words it: an exclusive
// subscription may receive only if it is the owner and every inflight
// message is leased to it. Non-exclusive subscriptions are not gated.
func (m *model) gateAdmits(id uint64, s *mSub) bool {
	if !s.exclusive {
		return true
	}
	if id != m.owner {
		return false
	}
	for _, holder := range m.inflightHolders() {
		if holder != id {
			return false
		}
	}
	return true
}

// mayReceive: credit, not paused, and through the exclusive gate.
func (m *model) mayReceive(id uint64, s *mSub) bool {
	return m.hasCredit(s) && m.gateAdmits(id, s)
}

// checkExclusiveDelivery holds a delivery to an exclusive subscription to
// the two cohort properties: it goes to the current owner only, and at that
// moment no other subscription (nor a recovered lease held by nobody) holds
// an unsettled delivery of the partition, so two consumers never work the
// partition at once.
func (m *model) checkExclusiveDelivery(d Delivery) error {
	if d.SubID != m.owner {
		return fmt.Errorf("exclusive delivery of offset %d to subscription %d, but the owner is %d", d.Offset, d.SubID, m.owner)
	}
	for _, holder := range m.inflightHolders() {
		switch {
		case holder == 0:
			return fmt.Errorf("exclusive subscription %d received offset %d while an orphaned recovered lease is unsettled", d.SubID, d.Offset)
		case holder != d.SubID:
			return fmt.Errorf("exclusive subscription %d received offset %d while subscription %d holds an unsettled delivery", d.SubID, d.Offset, holder)
		}
	}
	return nil
}

// checkExclusiveStep holds a whole step to the same property: once the step
// delivered to exclusive subscription receiver, nobody else holds an
// unsettled delivery at its end, except non-exclusive subscriptions (which
// the gate does not hold back, so a queue mixing both has no ordering
// promise). receiver is 0 when no exclusive subscription received.
func (m *model) checkExclusiveStep(receiver uint64) error {
	if receiver == 0 {
		return nil
	}
	for _, holder := range m.inflightHolders() {
		if s := m.subs[holder]; holder != receiver && (s == nil || s.exclusive) {
			return fmt.Errorf("after a step that delivered to exclusive subscription %d, holder %d (0: a recovered lease) has an unsettled delivery", receiver, holder)
		}
	}
	return nil
}

// checkDelivery holds one delivery against every delivery rule, then applies it.
func (m *model) checkDelivery(d Delivery) error {
	x := m.msgs[d.Offset]
	sub := m.subs[d.SubID]
	switch {
	case x == nil:
		return fmt.Errorf("delivered offset %d that was never published", d.Offset)
	case x.everAcked:
		return fmt.Errorf("delivered offset %d after it was acked", d.Offset)
	case x.state == mInflight:
		return fmt.Errorf("delivered offset %d while it holds a live lease (tag %d)", d.Offset, x.tag)
	case x.state == mDelayed:
		return fmt.Errorf("delivered offset %d before its not_before %d (now %d)", d.Offset, x.dueMs, m.nowMs)
	case x.state != mReady:
		return fmt.Errorf("delivered offset %d in model state %d", d.Offset, x.state)
	case m.expired(x):
		return fmt.Errorf("delivered offset %d after its TTL deadline %d", d.Offset, x.expiresAtMs)
	case x.publishIndex > m.durable:
		return fmt.Errorf("delivered offset %d before its publish was durable", d.Offset)
	case sub == nil:
		return fmt.Errorf("delivered to unknown subscription %d", d.SubID)
	case !m.hasCredit(sub):
		return fmt.Errorf("subscription %d over its prefetch %d", d.SubID, sub.prefetch)
	case d.Retries != x.retries:
		return fmt.Errorf("offset %d delivered with retries %d, model has %d", d.Offset, d.Retries, x.retries)
	}
	if sub.exclusive {
		if err := m.checkExclusiveDelivery(d); err != nil {
			return err
		}
	}
	if low, _ := m.lowestDeliverable(); low != d.Offset {
		return fmt.Errorf("delivered offset %d, but %d is lower and deliverable", d.Offset, low)
	}
	if sub.autoAck {
		sub.sentStep++
		x.state, x.settleKind, x.everAcked = mSettled, SettledAcked, true
		return nil
	}
	x.state, x.tag, x.sub, x.dueMs = mInflight, d.Tag, d.SubID, m.nowMs+m.leaseMs
	sub.tags[d.Tag] = d.Offset
	return nil
}

// checkWorkConserving: after a step no subscription with credit (and through
// the exclusive gate) waits while a deliverable message exists. So the gate
// is held both ways: never too open (checkDelivery), never shut for nothing.
func (m *model) checkWorkConserving() error {
	if _, ok := m.lowestDeliverable(); !ok {
		return nil
	}
	for _, id := range slices.Sorted(maps.Keys(m.subs)) {
		if m.mayReceive(id, m.subs[id]) {
			return fmt.Errorf("subscription %d may receive while a message is deliverable", id)
		}
	}
	return nil
}

// checkAgainst compares every message's state in the core with the model.
func (m *model) checkAgainst(p *Partition) error {
	if p.NextOffset() != m.nextOffset {
		return fmt.Errorf("next offset %d, model %d", p.NextOffset(), m.nextOffset)
	}
	for id, s := range m.subs {
		if paused, ok := p.SubscriptionPaused(id); !ok || paused != s.paused {
			return fmt.Errorf("subscription %d paused=%v (exists %v) in core, paused=%v in model", id, paused, ok, s.paused)
		}
	}
	if owner, generation := p.Owner(); owner != m.owner || generation != m.ownerGeneration {
		return fmt.Errorf("owner %d (generation %d) in core, %d (generation %d) in model", owner, generation, m.owner, m.ownerGeneration)
	}
	for _, off := range m.sortedOffsets() {
		x := m.msgs[off]
		v, live := p.Message(off)
		if x.state == mSettled {
			if live {
				return fmt.Errorf("offset %d live in core (%v), settled in model", off, v.State)
			}
			continue
		}
		want := map[mState]MessageState{mReady: MessageReady, mDelayed: MessageDelayed, mInflight: MessageInflight, mPending: MessagePendingDLQ}[x.state]
		switch {
		case !live:
			return fmt.Errorf("offset %d settled in core, %d in model", off, x.state)
		case v.State != want:
			return fmt.Errorf("offset %d is %v in core, %v in model", off, v.State, want)
		case v.Retries != x.retries:
			return fmt.Errorf("offset %d retries %d in core, %d in model", off, v.Retries, x.retries)
		case v.ExpiresAtMs != x.expiresAtMs:
			return fmt.Errorf("offset %d expires %d in core, %d in model", off, v.ExpiresAtMs, x.expiresAtMs)
		case x.state != mReady && v.DueMs != x.dueMs:
			return fmt.Errorf("offset %d due %d in core, %d in model", off, v.DueMs, x.dueMs)
		case x.state == mInflight && v.Tag != x.tag:
			return fmt.Errorf("offset %d tag %d in core, %d in model", off, v.Tag, x.tag)
		}
	}
	return nil
}

// checkGate: everything durable was released, nothing else was.
func (m *model) checkGateComplete() error {
	for _, off := range m.sortedOffsets() {
		x := m.msgs[off]
		if x.confirmWanted && !x.confirmed && x.publishIndex <= m.durable {
			return fmt.Errorf("offset %d durable but unconfirmed", off)
		}
		if x.state == mSettled && x.settleIndex != 0 && x.settleIndex <= m.durable && !x.settleSeen {
			return fmt.Errorf("offset %d settled durably but not reported", off)
		}
		if x.state == mPending && x.pendingIndex <= m.durable && !x.copySeen {
			return fmt.Errorf("offset %d pending dead-letter durably but no copy emitted", off)
		}
	}
	return nil
}

func (m *model) checkDeadLetter(dl DeadLetter) error {
	x := m.msgs[dl.Offset]
	if x == nil || x.state != mPending {
		return fmt.Errorf("dead-letter copy of offset %d, which the model has not pending", dl.Offset)
	}
	if x.pendingIndex > m.durable {
		return fmt.Errorf("dead-letter copy of offset %d released before durable", dl.Offset)
	}
	if x.copySeen {
		return fmt.Errorf("dead-letter copy of offset %d emitted twice without a restart", dl.Offset)
	}
	if dl.Target != x.target {
		return fmt.Errorf("dead-letter target %+v, model %+v", dl.Target, x.target)
	}
	want := map[string]string{
		HeaderDLQReason: x.reason.String(), HeaderDLQRetryCount: strconv.FormatUint(uint64(x.retries), 10),
		HeaderDLQSourceOffset: strconv.FormatUint(dl.Offset, 10), HeaderDLQSourceTopic: m.queue.Topic,
		HeaderDLQDeadLetteredAtMs: strconv.FormatInt(x.dueMs, 10),
		HeaderDLQSourcePartition:  strconv.FormatUint(uint64(m.queue.Partition), 10),
	}
	for k, v := range want {
		if got, _ := headerValue(dl.Body, k); got != v {
			return fmt.Errorf("dead-letter header %s = %q, model %q", k, got, v)
		}
	}
	x.copySeen = true
	return nil
}

func (m *model) checkSettlement(s Settlement) error {
	x := m.msgs[s.Offset]
	switch {
	case x == nil || x.state != mSettled:
		return fmt.Errorf("settlement of offset %d, which the model has not settled", s.Offset)
	case x.settleIndex > m.durable:
		return fmt.Errorf("settlement of offset %d released before durable", s.Offset)
	case x.settleSeen:
		return fmt.Errorf("settlement of offset %d reported twice", s.Offset)
	case s.Kind != x.settleKind:
		return fmt.Errorf("offset %d settled as %d, model %d", s.Offset, s.Kind, x.settleKind)
	case s.Kind != SettledAcked && s.Reason != x.reason:
		return fmt.Errorf("offset %d settled for reason %v, model %v", s.Offset, s.Reason, x.reason)
	}
	x.settleSeen = true
	return nil
}

// noteEntries records, from the entries a step appended, the index at which
// each message was published, settled or set pending; the model decides
// states itself and only borrows the indexes to check the durability gate.
func (m *model) noteEntries(entries []Entry) {
	for _, e := range entries {
		x := m.msgs[e.Offset]
		switch e.Kind {
		case EntryPublish:
			if x != nil {
				x.publishIndex = e.Index
			}
		case EntryAck, EntryAutoAck, EntryDiscard, EntryDeadLettered:
			if x != nil {
				x.settleIndex = e.Index
			}
		case EntryDeadLetter:
			if x != nil {
				x.pendingIndex = e.Index
			}
		}
	}
}
