package sim

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/cohort"
	"github.com/fibril-go/fibril/transport/wire"
)

// Cohort members (docs/cohorts.md, PROTOCOL 5.6, 5.16, 7.6): clients that
// subscribe exclusively (SUBSCRIBE with consumer_group) to the partitions
// of the scenario's cohort queues, every partition or a subset drawn at the
// start, some with a consumer_target. A member keeps the member id its
// first SUBSCRIBE_OK gave it and sends it on every later subscribe, on
// reconciles and on the first subscribes of a new session (unless it draws
// a fresh start); it settles like a consumer (ack, nack, slowly past its
// lease, never), leaves its cohort (unsubscribing everything, or one
// partition) and rejoins later, drops its link and resumes within the
// grace, stays away past it, or opens a new session at once while the old
// one is dormant (the member moves). Invariants:
//   - every exclusive SUBSCRIBE of one session names the same member id,
//     once the session has one, and every SUBSCRIBE_OK must echo it;
//   - every ASSIGNMENT_CHANGED is recorded as it is decoded, with the
//     connection it came on (checker/cohorts.go judges the stream);
//   - in the liveness phase a member acks everything, rejoins at once and
//     never leaves, so the cohort queues drain.

// cohortState is a member's own state, kept across links and sessions.
type cohortState struct {
	memberID wire.UUID
	hasID    bool
	target   uint32 // consumer_target, 0 = none
	// reconnectDelayMs replaces the next reconnect delay once (vanishing
	// for a chosen time); freshSession makes the next HELLO start a new
	// session while the old one waits out its grace.
	reconnectDelayMs int64
	freshSession     bool
}

// newCohortMember draws member i's partitions and target: the first two
// take every partition, so every partition always has a subscriber.
func (p *Peer) newCohortMember(i int) {
	cw := &p.w.scenario.Workload.Cohort
	p.cohort = &cohortState{}
	subset := i >= 2 && p.rng.Chance(cw.SubsetRatio)
	for qi, q := range p.w.scenario.Queues {
		if q.Cohort == "" {
			continue
		}
		var parts []int
		for ci, spec := range p.w.catalogue {
			if spec.queueIdx == qi && (!subset || p.rng.Chance(0.5)) {
				parts = append(parts, ci)
			}
		}
		if len(parts) == 0 {
			// A subset is never empty: one partition, drawn.
			var all []int
			for ci, spec := range p.w.catalogue {
				if spec.queueIdx == qi {
					all = append(all, ci)
				}
			}
			parts = append(parts, all[p.rng.Intn(len(all))])
		}
		for _, ci := range parts {
			p.subs = append(p.subs, &peerSub{part: ci})
		}
	}
	if p.rng.Chance(cw.TargetRatio) {
		p.cohort.target = uint32(p.rng.RangeInt64(1, 3))
	}
}

// memberText is the member id as the Node's events name it.
func memberText(id wire.UUID) string { return cohort.MemberID(id).String() }

func (p *Peer) memberText() string {
	if p.cohort == nil || !p.cohort.hasID {
		return ""
	}
	return memberText(p.cohort.memberID)
}

// cohortSubscribe is an exclusive SUBSCRIBE for s.
func (p *Peer) cohortSubscribe(s *peerSub) wire.Subscribe {
	spec := p.w.catalogue[s.part]
	m := wire.Subscribe{Topic: spec.queueID.Topic, Partition: spec.queueID.Partition, Prefetch: s.prefetch, AutoAck: s.autoAck,
		ConsumerGroup: wire.Some(spec.queue.Cohort)}
	if p.cohort.target != 0 {
		m.ConsumerTarget = wire.Some(p.cohort.target)
	}
	if p.cohort.hasID {
		m.MemberID = wire.Some(p.cohort.memberID)
	}
	return m
}

// cohortReconcileFields adds the cohort fields to a reconcile entry.
func (p *Peer) cohortReconcileFields(s *peerSub, rs *wire.ReconcileSub) {
	spec := p.w.catalogue[s.part]
	if spec.queue.Cohort == "" || p.cohort == nil {
		return
	}
	rs.ConsumerGroup = wire.Some(spec.queue.Cohort)
	if p.cohort.target != 0 {
		rs.ConsumerTarget = wire.Some(p.cohort.target)
	}
	if p.cohort.hasID {
		rs.MemberID = wire.Some(p.cohort.memberID)
	}
}

// cohortSubscribed takes the member id of a SUBSCRIBE_OK.
func (p *Peer) cohortSubscribed(m wire.SubscribeOk) {
	if p.cohort == nil || !m.ConsumerGroup.Present {
		return
	}
	id, ok := m.MemberID.Get()
	if !ok {
		p.w.abort(fmt.Sprintf("client %d: an exclusive SUBSCRIBE_OK without a member id", p.id))
		return
	}
	if p.cohort.hasID && id != p.cohort.memberID {
		p.w.abort(fmt.Sprintf("client %d: SUBSCRIBE_OK names member %s, the session's is %s", p.id, memberText(id), memberText(p.cohort.memberID)))
		return
	}
	p.cohort.memberID, p.cohort.hasID = id, true
}

// cohortNewSession: a new session (not resumed) may start as a new member.
func (p *Peer) cohortNewSession() {
	if p.cohort != nil && p.w.phase == phaseSafety && p.rng.Chance(p.w.scenario.Workload.Cohort.FreshMemberRatio) {
		p.cohort.hasID = false
		p.w.note(fmt.Sprintf("client %d starts as a new cohort member", p.id))
	}
}

// onAssignment records an ASSIGNMENT_CHANGED as decoded.
func (p *Peer) onAssignment(m wire.AssignmentChanged) {
	part := 0
	for i, spec := range p.w.catalogue {
		if spec.queueID.Topic == m.Topic && spec.queueID.Partition == 0 {
			part = i + 1
		}
	}
	if part == 0 || p.link == nil {
		p.w.abort(fmt.Sprintf("client %d: ASSIGNMENT_CHANGED for %s, not a queue of the run", p.id, m.Topic))
		return
	}
	p.w.rec.add(checker.Event{Kind: checker.KindAssignment, Client: p.id, Conn: p.link.id, Part: part, Index: m.Generation,
		Text: p.memberText(), Assigned: slices.Clone(m.Assigned), Added: slices.Clone(m.Added), Revoked: slices.Clone(m.Revoked)})
	p.w.stats.Notices++
}

// onCohortDeliver settles (or not) one delivery to a member.
func (p *Peer) onCohortDeliver(s *peerSub, tag, msgID uint64) {
	w := &p.w.scenario.Workload
	act := cohortAck
	if p.w.phase == phaseSafety {
		act = p.chooseCohortAction()
	}
	if act == cohortSilent {
		return
	}
	delayMs := p.rng.RangeInt64(w.ProcessMinMs, w.ProcessMaxMs)
	if act == cohortSlow {
		delayMs = p.w.scenario.LeaseMs + p.rng.RangeInt64(100, 1500)
	}
	subGen, sessionGen := s.gen, p.sessionGen
	p.w.after(delayMs, func() {
		if p.sessionGen != sessionGen || s.gen != subGen || p.vanished() {
			return // the tag is stale (7.7): the message will redeliver
		}
		switch act {
		case cohortAck, cohortSlow:
			p.batchAck(s, tag, msgID)
		case cohortRetry:
			p.settle(s, []batchedAck{{tag, msgID}}, checker.ActionRetry, 0)
		case cohortLeave:
			p.cohortLeave(nil)
		case cohortPartial:
			p.cohortLeave(s)
		case cohortVanish:
			p.cohort.reconnectDelayMs = p.rng.RangeInt64(1, max(p.w.nodeCfg.ReconnectGraceMs/3, 1))
			p.drop("cohort member vanishes within the grace")
		case cohortVanishLong:
			p.cohort.reconnectDelayMs = p.w.nodeCfg.ReconnectGraceMs + p.rng.RangeInt64(200, 1500)
			p.drop("cohort member vanishes past the grace")
		case cohortClose:
			p.cohort.freshSession = true
			p.cohort.reconnectDelayMs = p.rng.RangeInt64(1, 50)
			p.drop("cohort member closes and starts a new session")
		}
	})
}

type cohortAction uint8

const (
	cohortAck cohortAction = iota
	cohortRetry
	cohortSlow
	cohortSilent
	cohortLeave
	cohortPartial
	cohortVanish
	cohortVanishLong
	cohortClose
)

func (p *Peer) chooseCohortAction() cohortAction {
	cw := &p.w.scenario.Workload.Cohort
	r := p.rng.Float64()
	for _, choice := range []struct {
		ratio float64
		act   cohortAction
	}{
		{cw.RetryRatio, cohortRetry}, {cw.SlowRatio, cohortSlow}, {cw.SilentRatio, cohortSilent},
		{cw.LeaveRatio, cohortLeave}, {cw.PartialRatio, cohortPartial}, {cw.VanishRatio, cohortVanish},
		{cw.VanishLongRatio, cohortVanishLong}, {cw.CloseRatio, cohortClose},
	} {
		if r < choice.ratio {
			return choice.act
		}
		r -= choice.ratio
	}
	return cohortAck
}

// cohortLeave unsubscribes one subscription (only) or every cohort
// subscription (only nil) with a RECONCILE_CLIENT that omits them
// (PROTOCOL 7.11): the session leaves the cohort (or gives up the
// partition), and the broker requeues what they held at once. They are
// subscribed again after the rejoin delay. Skipped while a subscribe or
// a reconcile is on its way, as unsubscribe is.
func (p *Peer) cohortLeave(only *peerSub) {
	if p.state != stateReady {
		return
	}
	for _, s := range p.subs {
		if s.pending {
			return
		}
	}
	for _, op := range p.pending {
		if op.kind == opReconcile {
			return
		}
	}
	cw := &p.w.scenario.Workload.Cohort
	rejoinMs := p.w.nowMs + p.rng.RangeInt64(cw.RejoinDelayMinMs, max(cw.RejoinDelayMaxMs, cw.RejoinDelayMinMs))
	var leaving []leavingSub
	for _, s := range p.subs {
		if s.id == 0 || (only != nil && s != only) {
			continue
		}
		op := p.w.newOp()
		p.w.rec.add(checker.Event{Kind: checker.KindUnsubscribeCall, Client: p.id, Op: op, Part: s.part + 1, Sub: s.id, Text: p.memberText()})
		p.w.stats.ClientOps++
		leaving = append(leaving, leavingSub{op: op, part: s.part})
		s.clear() // its tags die with it
		s.holdUntilMs = rejoinMs
	}
	if len(leaving) == 0 {
		return
	}
	req := p.reconcileFrame()
	p.pending[req] = &peerOp{kind: opReconcile, leaving: leaving}
}

// leavingSub is one subscription a cohort leave ends.
type leavingSub struct {
	op   uint64
	part int
}

// recordCohortFinals records each member's end state for the coverage check.
func (w *World) recordCohortFinals() {
	for _, p := range w.peers {
		if p.cohort == nil {
			continue
		}
		byQueue := map[int][]uint32{}
		var queues []int
		allActive := p.state == stateReady
		for _, s := range p.subs {
			spec := w.catalogue[s.part]
			first := w.partIndex(core.QueueID{Topic: spec.queueID.Topic, Group: spec.queueID.Group}) + 1
			if _, seen := byQueue[first]; !seen {
				queues = append(queues, first)
			}
			byQueue[first] = append(byQueue[first], spec.queueID.Partition)
			allActive = allActive && s.active && s.id != 0
		}
		slices.Sort(queues)
		conn := uint64(0)
		if p.link != nil {
			conn = p.link.id
		}
		for _, q := range queues {
			parts := byQueue[q]
			slices.Sort(parts)
			w.rec.add(checker.Event{Kind: checker.KindCohortFinal, Client: p.id, Conn: conn, Part: q, Text: p.memberText(),
				Assigned: parts, Ok: allActive})
		}
	}
}

// keyedHeaders are the per-key sequence headers of a cohort queue's
// publishes: the key and its number in this producer's sequence.
func (p *Peer) keyedHeaders(key string) wire.Headers {
	if p.keySeq == nil {
		p.keySeq = map[string]uint64{}
	}
	p.keySeq[key]++
	return wire.Headers{{Key: headerKeyed, Value: key}, {Key: headerSeq, Value: strconv.FormatUint(p.keySeq[key], 10)}}
}

// Headers of keyed publishes to cohort queues.
const (
	headerKeyed = "x-key"
	headerSeq   = "x-seq"
)

// validateCohorts checks the cohort queues against the cohort workload.
func (s *Scenario) validateCohorts() error {
	cw := &s.Workload.Cohort
	queues := 0
	for _, q := range s.Queues {
		if q.Cohort == "" {
			continue
		}
		queues++
		if q.DeadLetterSink || len(q.Cohort) > cohort.IDBytesMax {
			return fmt.Errorf("sim: scenario %s: cohort queue %s must not be a dead-letter sink, and its cohort id fits 255 bytes", s.Name, q.Topic)
		}
	}
	switch {
	case cw.Members > 0 && queues == 0:
		return fmt.Errorf("sim: scenario %s has cohort members but no cohort queue", s.Name)
	case queues > 0 && cw.Members < 2:
		return fmt.Errorf("sim: scenario %s: a cohort queue needs at least two members (the first two take every partition)", s.Name)
	case cw.Members > 0 && (cw.RejoinDelayMinMs < 1 || cw.RejoinDelayMaxMs < cw.RejoinDelayMinMs):
		return fmt.Errorf("sim: scenario %s: the rejoin delay is not a range from 1", s.Name)
	}
	if sum := cw.RetryRatio + cw.SlowRatio + cw.SilentRatio + cw.LeaveRatio + cw.PartialRatio + cw.VanishRatio + cw.VanishLongRatio + cw.CloseRatio; sum > 1 {
		return fmt.Errorf("sim: scenario %s: cohort member ratios add up to %.2f > 1", s.Name, sum)
	}
	return nil
}
