package sim_test

// Mutants: deliberately broken variants of the core's behaviour, built by
// wrapping the real partition behind sim.Machine (the Host steps it through
// node.NewHostStepping; core/ stays untouched), and broken variants of
// production code switched on through package mutant (storage and the
// Session machine check mutant.On at the exact spot). A checker that
// cannot fail proves nothing, so TestMutantsAreCaught shows that a plain
// sweep (seed i runs scenario i mod len(scenarios.All()), no swarm) catches
// each within mutantSeedsMax seeds, and that the real code passes the same
// seeds. Eleven wrap the core: confirms before durable, leases forgotten or
// expired on restart, acked messages redelivered, not_before ignored,
// prefetch ignored, inflight dropped by TTL, acks settled before durable,
// a recovery that drops the last durable entry (DESIGN.md item 10), the
// newest ready message first (FIFO), retry counts lost on restart. Four
// break production code: storage reporting a round durable when submitted
// (DurableOnSubmit), blob payloads never fdatasynced (NoBlobDatasync),
// recovery skipping the CRC check (SkipCRC), and the Session machine's
// grace expiring at a tenth of its length (EarlyGraceRequeue). Three break
// the simulator's own stream driver (sim/broker_stream.go), for DESIGN.md
// item 8: stream entries reported Persisted when handed to storage
// (StreamPersistedOnSubmit), a record lost from a StreamDeliveries batch
// on its way to the session (StreamDropDelivery), two records of a
// batch swapped (StreamReorderDeliveries), and the speculative flag
// cleared on the way to the session (StreamSpeculativeFlagLost); a one-line
// hook in core/stream/retention.go retain() makes retention never run
// (StreamNoRetention, caught by retention_liveness). Three break cohorts,
// for DESIGN.md item 7 (the cohorts scenario): the exclusive gate opening
// for a new owner at once (GateOpenEarly) or ignoring the leases a restart
// recovered (GateIgnoresRecoveredLeases), and the Node leaving one
// partition of a change without an owner (CohortDropOwner).

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/scenarios"
	"github.com/fibril-go/fibril/sim"
)

// mutantSeedsMax bounds the seeds a mutant may survive.
const mutantSeedsMax = 200

// brokenVariant is one mutant: a wrap of the core partition, or the name
// of a package mutant switch.
type brokenVariant struct {
	name   string
	wrap   sim.WrapMachine
	active string // mutant.Active while it runs
}

func mutants() []brokenVariant {
	return []brokenVariant{
		{name: "durable-on-submit", active: mutant.DurableOnSubmit},
		{name: "no-blob-datasync", active: mutant.NoBlobDatasync},
		{name: "skip-crc", active: mutant.SkipCRC},
		{name: "early-grace-requeue", active: mutant.EarlyGraceRequeue},
		{name: "stream-persisted-on-submit", active: mutant.StreamPersistedOnSubmit},
		{name: "stream-drop-delivery", active: mutant.StreamDropDelivery},
		{name: "stream-reorder-deliveries", active: mutant.StreamReorderDeliveries},
		{name: "stream-cursor-skip", active: mutant.StreamCursorSkip},
		{name: "stream-deliver-unfiltered", active: mutant.StreamDeliverUnfiltered},
		{name: "stream-no-retention", active: mutant.StreamNoRetention},
		{name: "stream-eager-retention", active: mutant.StreamEagerRetention},
		{name: "stream-speculative-flag-lost", active: mutant.StreamSpeculativeFlagLost},
		{name: "stream-read-cache-stale", active: mutant.StreamReadCacheStale},
		{name: "gate-open-early", active: mutant.GateOpenEarly},
		{name: "cohort-drop-owner", active: mutant.CohortDropOwner},
		{name: "gate-ignores-recovered-leases", active: mutant.GateIgnoresRecoveredLeases},
		{name: "confirm-before-durable", wrap: func(p *core.Partition, _ sim.MachineInfo) sim.Machine {
			return &confirmEarly{Partition: p, early: map[uint64]bool{}}
		}},
		{name: "forget-leases-on-restart", wrap: func(p *core.Partition, info sim.MachineInfo) sim.Machine {
			return newForgetLeases(p, info)
		}},
		{name: "expire-leases-on-restart", wrap: func(p *core.Partition, info sim.MachineInfo) sim.Machine {
			return &expireLeases{Partition: p, pending: info.Recovered, leaseMs: p.Config().LeaseMs}
		}},
		{name: "redeliver-acked", wrap: func(p *core.Partition, _ sim.MachineInfo) sim.Machine {
			return &redeliverAcked{Partition: p, last: map[uint64]core.Delivery{}}
		}},
		{name: "deliver-before-not-before", wrap: func(p *core.Partition, _ sim.MachineInfo) sim.Machine {
			return &stripNotBefore{Partition: p}
		}},
		{name: "ignore-prefetch", wrap: func(p *core.Partition, _ sim.MachineInfo) sim.Machine {
			return &ignorePrefetch{Partition: p}
		}},
		{name: "drop-inflight-on-ttl", wrap: func(p *core.Partition, _ sim.MachineInfo) sim.Machine {
			return &ttlDropsInflight{Partition: p, inflight: map[uint64]bool{}, faked: map[uint64]bool{}}
		}},
		{name: "settle-before-durable", wrap: func(p *core.Partition, _ sim.MachineInfo) sim.Machine {
			return &settleEarly{Partition: p, early: map[uint64]bool{}}
		}},
		{name: "recover-drops-last-entry", wrap: func(p *core.Partition, info sim.MachineInfo) sim.Machine {
			if !info.Recovered || len(info.Entries) == 0 {
				return p
			}
			short, err := core.Recover(p.Config(), info.Snapshot, info.Entries[:len(info.Entries)-1])
			if err != nil {
				panic(err)
			}
			return short
		}},
		{name: "reverse-delivery-order", wrap: func(p *core.Partition, _ sim.MachineInfo) sim.Machine {
			return &reverseDeliveries{Partition: p}
		}},
		{name: "lose-retries-on-restart", wrap: func(p *core.Partition, info sim.MachineInfo) sim.Machine {
			return &retriesLost{Partition: p, recovered: info.Recovered}
		}},
	}
}

// confirmEarly releases a publish confirm as soon as the publish is
// appended, before it is durable, and swallows the real one later.
type confirmEarly struct {
	*core.Partition
	early map[uint64]bool
}

func (m *confirmEarly) Step(in core.Input) *core.Ready {
	rd := m.Partition.Step(in)
	kept := rd.Replies[:0]
	for _, r := range rd.Replies {
		if r.Kind == core.ReplyPublished && m.early[r.Ref] {
			delete(m.early, r.Ref)
			continue
		}
		kept = append(kept, r)
	}
	rd.Replies = kept
	if pub, ok := in.(*core.Publish); ok && pub.Confirm {
		for _, e := range rd.Persist {
			if e.Kind == core.EntryPublish {
				rd.Replies = append(rd.Replies, core.Reply{Ref: pub.Ref, Kind: core.ReplyPublished, Offset: e.Offset})
				m.early[pub.Ref] = true
			}
		}
	}
	return rd
}

// forgetLeases, after a restart, treats the recovered inflight messages as
// ready: it hands them to the first new subscription at once.
type forgetLeases struct {
	*core.Partition
	inflight []uint64
}

func newForgetLeases(p *core.Partition, info sim.MachineInfo) *forgetLeases {
	m := &forgetLeases{Partition: p}
	if info.Recovered {
		for offset := uint64(0); offset < p.NextOffset(); offset++ {
			if v, ok := p.Message(offset); ok && v.State == core.MessageInflight {
				m.inflight = append(m.inflight, offset)
			}
		}
	}
	return m
}

func (m *forgetLeases) Step(in core.Input) *core.Ready {
	rd := m.Partition.Step(in)
	if sub, ok := in.(*core.Subscribe); ok && len(m.inflight) > 0 {
		for _, offset := range m.inflight {
			if v, ok := m.Message(offset); ok && v.State == core.MessageInflight {
				rd.Deliveries = append(rd.Deliveries, core.Delivery{SubID: sub.SubID, Tag: 1<<48 + offset, Offset: offset, Retries: v.Retries, Body: v.Body})
			}
		}
		m.inflight = nil
	}
	return rd
}

// expireLeases forgets leases on restart the quiet way: before its first
// step the recovered partition is told that a whole lease period has passed,
// so every recovered lease expires (with proper requeue entries) and the
// messages are redelivered at once.
type expireLeases struct {
	*core.Partition
	pending bool
	leaseMs int64
}

func (m *expireLeases) Step(in core.Input) *core.Ready {
	if m.pending {
		m.pending = false
		rd := m.Partition.Step(&core.Tick{NowMs: nowOf(in) + m.leaseMs})
		persist := append([]core.Entry(nil), rd.Persist...)
		rd = m.Partition.Step(in)
		rd.Persist = append(persist, rd.Persist...)
		return rd
	}
	return m.Partition.Step(in)
}

// redeliverAcked replays a message's last delivery once its ack is durable.
type redeliverAcked struct {
	*core.Partition
	last map[uint64]core.Delivery
}

func (m *redeliverAcked) Step(in core.Input) *core.Ready {
	rd := m.Partition.Step(in)
	for _, d := range rd.Deliveries {
		m.last[d.Offset] = d
	}
	for _, s := range rd.Settled {
		if d, ok := m.last[s.Offset]; ok && s.Kind == core.SettledAcked {
			rd.Deliveries = append(rd.Deliveries, d)
			delete(m.last, s.Offset)
		}
	}
	return rd
}

// stripNotBefore drops not_before from delayed publishes and retry-after
// nacks before they reach the core.
type stripNotBefore struct{ *core.Partition }

func (m *stripNotBefore) Step(in core.Input) *core.Ready {
	switch x := in.(type) {
	case *core.Publish:
		c := *x
		c.NotBeforeMs = 0
		in = &c
	case *core.Nack:
		c := *x
		c.NotBeforeMs = 0
		in = &c
	}
	return m.Partition.Step(in)
}

// ignorePrefetch subscribes with a much larger prefetch than the client
// asked for (the client's history keeps its own).
type ignorePrefetch struct{ *core.Partition }

func (m *ignorePrefetch) Step(in core.Input) *core.Ready {
	if sub, ok := in.(*core.Subscribe); ok {
		c := *sub
		c.Prefetch = sub.Prefetch*4 + 4
		in = &c
	}
	return m.Partition.Step(in)
}

// ttlDropsInflight reports an inflight message discarded as expired once
// its TTL passes, while its lease still runs.
type ttlDropsInflight struct {
	*core.Partition
	nowMs    int64
	inflight map[uint64]bool
	faked    map[uint64]bool
}

func (m *ttlDropsInflight) Step(in core.Input) *core.Ready {
	rd := m.Partition.Step(in)
	if now := nowOf(in); now > m.nowMs {
		m.nowMs = now
	}
	for _, d := range rd.Deliveries {
		m.inflight[d.Offset] = true
	}
	offsets := make([]uint64, 0, len(m.inflight))
	for offset := range m.inflight {
		offsets = append(offsets, offset)
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	for _, offset := range offsets {
		v, ok := m.Message(offset)
		if !ok || v.State != core.MessageInflight {
			delete(m.inflight, offset)
			continue
		}
		if v.ExpiresAtMs != 0 && v.ExpiresAtMs <= m.nowMs && !m.faked[offset] {
			m.faked[offset] = true
			rd.Settled = append(rd.Settled, core.Settlement{Offset: offset, Kind: core.SettledDiscarded, Reason: core.ReasonExpired})
		}
	}
	return rd
}

func nowOf(in core.Input) int64 {
	switch x := in.(type) {
	case *core.Tick:
		return x.NowMs
	case *core.Persisted:
		return x.NowMs
	case *core.Publish:
		return x.NowMs
	case *core.Ack:
		return x.NowMs
	case *core.Nack:
		return x.NowMs
	case *core.Subscribe:
		return x.NowMs
	case *core.Unsubscribe:
		return x.NowMs
	case *core.Declare:
		return x.NowMs
	case *core.SetGlobalDLQ:
		return x.NowMs
	case *core.DeadLetterDone:
		return x.NowMs
	}
	return 0
}

// settleEarly reports an ack as settled for good as soon as the ack entry is
// appended, before it is durable, and swallows the real report later.
type settleEarly struct {
	*core.Partition
	early map[uint64]bool
}

func (m *settleEarly) Step(in core.Input) *core.Ready {
	rd := m.Partition.Step(in)
	kept := rd.Settled[:0]
	for _, s := range rd.Settled {
		if s.Kind == core.SettledAcked && m.early[s.Offset] {
			delete(m.early, s.Offset)
			continue
		}
		kept = append(kept, s)
	}
	rd.Settled = kept
	if _, ok := in.(*core.Ack); ok {
		for _, e := range rd.Persist {
			if e.Kind == core.EntryAck {
				rd.Settled = append(rd.Settled, core.Settlement{Offset: e.Offset, Kind: core.SettledAcked})
				m.early[e.Offset] = true
			}
		}
	}
	return rd
}

// reverseDeliveries hands each step's messages out newest first: the
// step's tags keep their order and go to the messages reversed, so the
// first tag names the newest ready message (the promised order breaks).
type reverseDeliveries struct{ *core.Partition }

func (m *reverseDeliveries) Step(in core.Input) *core.Ready {
	rd := m.Partition.Step(in)
	d := rd.Deliveries
	for i, j := 0, len(d)-1; i < j; i, j = i+1, j-1 {
		d[i].Offset, d[j].Offset = d[j].Offset, d[i].Offset
		d[i].Body, d[j].Body = d[j].Body, d[i].Body
		d[i].Retries, d[j].Retries = d[j].Retries, d[i].Retries
	}
	return rd
}

// retriesLost reports every delivery of a recovered partition with retry
// count 0, as if the count were not recovered from the log.
type retriesLost struct {
	*core.Partition
	recovered bool
}

func (m *retriesLost) Step(in core.Input) *core.Ready {
	rd := m.Partition.Step(in)
	if m.recovered {
		for i := range rd.Deliveries {
			rd.Deliveries[i].Retries = 0
		}
	}
	return rd
}

// checksThatFired lists the distinct checks a failing run tripped.
func checksThatFired(o *sim.Outcome) string {
	seen := map[string]bool{}
	var out []string
	for _, v := range o.Report.Violations {
		label := v.Check
		if v.Item > 0 {
			label = fmt.Sprintf("item %d %s", v.Item, v.Check)
		}
		if !seen[label] {
			seen[label] = true
			out = append(out, label)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// sweepScenario is the plain sweep: seed i runs scenario i mod len(All()).
func sweepScenario(seed uint64) *sim.Scenario {
	all := scenarios.All()
	return all[seed%uint64(len(all))]
}

func TestMutantsAreCaught(t *testing.T) {
	var table []string
	for _, m := range mutants() {
		m := m
		t.Run(m.name, func(t *testing.T) {
			caughtAt := uint64(0)
			var first string
			mutant.Active = m.active
			defer func() { mutant.Active = "" }()
			for seed := uint64(1); seed <= mutantSeedsMax; seed++ {
				o := sim.RunChecked(sweepScenario(seed), seed, sim.Options{CheckInvariants: true, Wrap: m.wrap})
				if !o.OK() {
					caughtAt = seed
					first = checksThatFired(o) + "; first: " + o.Report.Violations[0].String()
					break
				}
			}
			if caughtAt == 0 {
				t.Fatalf("mutant %s survived %d seeds", m.name, mutantSeedsMax)
			}
			// The real code passes every seed the mutant needed.
			mutant.Active = ""
			for seed := uint64(1); seed <= caughtAt; seed++ {
				if o := sim.RunChecked(sweepScenario(seed), seed, sim.Options{CheckInvariants: true}); !o.OK() {
					t.Fatalf("the real core fails seed %d: %s", seed, o.Report.Summary(5))
				}
			}
			line := fmt.Sprintf("%-26s caught at seed %3d (%s): %s", m.name, caughtAt, sweepScenario(caughtAt).Name, first)
			t.Log(line)
			table = append(table, line)
		})
	}
	t.Logf("seeds to catch each mutant:\n%s", strings.Join(table, "\n"))
}
