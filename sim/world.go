package sim

import (
	"fmt"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// The world is one run: the event queue, the true clock, the fabric, the
// brokers and the peers, all driven from one event loop. Invariants:
//   - every choice comes from Rand streams forked from the run's seed, and
//     every iteration whose order matters goes over slices, never maps;
//   - the safety phase runs with the scenario's faults, the liveness phase
//     with every fault off, and the run ends when the work has drained
//     (quiescent) or when the liveness phase's time is up.

type phase uint8

const (
	phaseSafety phase = iota + 1
	phaseLiveness
	phaseDone
)

// partSpec is one partition of the scenario's queues (the declarer
// declares them; the checker names partitions by catalogue index + 1).
type partSpec struct {
	queue    QueueConfig
	queueIdx int
	queueID  core.QueueID
}

// World holds the state of one run.
type World struct {
	scenario        *Scenario
	seed            uint64
	swarm           bool
	safetyFaults    Faults
	faults          Faults // the active knobs: safetyFaults, then calm
	rng             *Rand
	q               eventQueue
	nowMs           int64
	phase           phase
	catalogue       []*partSpec
	streamCat       []*streamSpec // the scenario's stream partitions (world_stream.go)
	streamNames     []string      // every durable name a stream subscriber may use
	rec             *recorder
	checkInvariants bool
	wrapFn          WrapMachine
	stats           RunStats
	stopped         bool
	aborted         string
	operator        *operator // the scenario's operator, if any (operator.go)
	quiescent       bool
	inspect         bool       // Options.Inspect
	inspector       *inspector // operator.go

	fabric         *Fabric
	brokers        []*Broker
	peers          []*Peer
	declarer       *Peer
	nodeCfg        node.Config
	clientsStarted bool

	nextOp    uint64
	nextMsgID uint64
}

// RunStats sums up a run.
type RunStats struct {
	ClientOps      uint64 // client calls (publish, subscribe, unsubscribe, settle per tag) + deliveries
	Publishes      uint64
	Deliveries     uint64
	Settles        uint64
	FaultsInjected uint64 // crashes, torn writes, partitions, clock jumps, resets, lost and duplicated packets, vanishes
	// FaultsByKind counts injected faults per kind (crash, power-loss,
	// fsync-error, bit-rot, torn-tail, lost-transmission, ...).
	FaultsByKind map[string]uint64
	Crashes      uint64 // process crashes (page cache kept)
	PowerLosses  uint64 // power losses (unsynced data dropped)
	Snapshots    uint64
	// Unloads and Reloads: idle partitions unloaded, and loaded again.
	Unloads, Reloads uint64
	Spills           uint64 // spilled payloads read back from storage (deliveries, dead-letter copies)
	Steps            uint64
	Events           uint64
	SimMs            int64
	// Cohorts: ASSIGNMENT_CHANGED frames the members decoded, and the
	// hand-overs after a member left (checker.RebalanceTimes).
	Notices    uint64
	Rebalances []checker.Rebalance
	// The inspector's requests sent, answered, and lost with a crash
	// (Options.Inspect, operator.go).
	OperatorRequests, OperatorAnswers, OperatorLost uint64
}

func (w *World) at(atMs int64, run func()) {
	if atMs < w.nowMs {
		atMs = w.nowMs
	}
	w.q.push(atMs, run)
}

func (w *World) after(delayMs int64, run func()) { w.at(w.nowMs+delayMs, run) }

// fault records an injected fault of a kind (counted per kind).
func (w *World) fault(kind, format string, args ...any) {
	w.stats.FaultsInjected++
	w.countFault(kind, 1)
	w.rec.add(checker.Event{Kind: checker.KindFault, Text: fmt.Sprintf(format, args...)})
}

func (w *World) note(text string) {
	w.rec.add(checker.Event{Kind: checker.KindNote, Text: text})
}

// abort stops the run: something that must never happen did (a core
// invariant or assertion broke). The history up to here is kept.
func (w *World) abort(why string) {
	if w.aborted == "" {
		w.aborted = why
		w.rec.add(checker.Event{Kind: checker.KindAbort, Text: why})
	}
	w.stopped = true
}

func (w *World) newOp() uint64 {
	w.nextOp++
	return w.nextOp
}

// startFaultProcesses schedules the random partitions and clock jumps.
func (w *World) startFaultProcesses() {
	f := &w.safetyFaults
	if f.PartitionMeanIntervalMs > 0 {
		var next func()
		next = func() {
			if w.phase != phaseSafety {
				return
			}
			w.fabric.partition(f.PartitionClientsRatio, w.rng.RangeInt64(1, 2*f.PartitionMeanDurationMs), "random")
			w.after(w.rng.RangeInt64(1, 2*f.PartitionMeanIntervalMs), next)
		}
		w.after(w.rng.RangeInt64(1, 2*f.PartitionMeanIntervalMs), next)
	}
	if f.ClockJumpMeanIntervalMs > 0 && f.ClockJumpMs > 0 {
		var next func()
		next = func() {
			if w.phase != phaseSafety {
				return
			}
			// A wall-clock step moves only the next boot's anchor: the
			// machines see a monotonic clock (core/node doc.go, Time).
			b := w.brokers[w.rng.Intn(len(w.brokers))]
			if d := w.rng.RangeInt64(-f.ClockJumpMs, f.ClockJumpMs); d != 0 {
				b.wall.Jump(d)
				w.fault("clock-jump", "wall clock jump broker %d by %+dms (the next boot's anchor)", b.id, d)
			}
			w.after(w.rng.RangeInt64(1, 2*f.ClockJumpMeanIntervalMs), next)
		}
		w.after(w.rng.RangeInt64(1, 2*f.ClockJumpMeanIntervalMs), next)
	}
}

// schedule applies the scenario's fixed fault schedule.
func (w *World) schedule(faults []ScheduledFault) {
	for _, sf := range faults {
		sf := sf
		w.at(sf.AtMs, func() {
			if w.phase != phaseSafety {
				return
			}
			w.scheduledBrokerFault(sf)
		})
	}
}

// vanish makes ratio of the consumers stop settling for durationMs: they
// keep their connections and deliveries, so every lease they hold expires.
func (w *World) vanish(ratio float64, durationMs int64) {
	var gone []uint32
	for _, p := range w.peers {
		if (p.role == roleConsumer || p.role == roleCohortMember) && w.rng.Chance(ratio) {
			p.vanishUntilMs = w.nowMs + durationMs
			gone = append(gone, p.id)
			p := p
			w.after(durationMs, func() { p.comeBack() })
		}
	}
	if len(gone) > 0 {
		w.fault("vanish", "consumers %v vanish for %dms", gone, durationMs)
	}
}

// startLiveness turns every fault off and lets the consumers drain.
func (w *World) startLiveness() {
	if w.stopped {
		return
	}
	w.phase = phaseLiveness
	w.faults = w.safetyFaults.Calm()
	w.fabric.heal()
	for _, p := range w.peers {
		p.vanishUntilMs = 0
	}
	for _, b := range w.brokers {
		b.store.setFaults() // the filesystem's faults go off too
	}
	w.rec.add(checker.Event{Kind: checker.KindPhase, Text: "liveness: faults off, consumers drain"})
	w.checkQuiescent()
}

// quiescentCheckMs is how often the liveness phase looks for the end.
const quiescentCheckMs = 100

func (w *World) checkQuiescent() {
	if w.stopped || w.phase != phaseLiveness {
		return
	}
	if w.isQuiescentBrokers() {
		w.quiescent = true
		w.stopped = true
		return
	}
	w.after(quiescentCheckMs, w.checkQuiescent)
}

// scheduledBrokerFault applies one scheduled fault to the node-core run.
func (w *World) scheduledBrokerFault(sf ScheduledFault) {
	b := w.brokers[sf.Target%len(w.brokers)]
	switch sf.Kind {
	case FaultCrash:
		if b.up {
			b.crash("scheduled", false)
		}
	case FaultPowerLoss:
		if b.up {
			b.crash("scheduled", true)
		}
	case FaultCorruptRecord:
		b.corruptRecord(sf.Target) // broker_quarantine.go
	case FaultPartition:
		w.fabric.partition(sf.Ratio, sf.DurationMs, "scheduled")
	case FaultClockJump:
		b.wall.Jump(sf.AmountMs)
		w.fault("clock-jump", "wall clock jump broker %d by %+dms (the next boot's anchor)", b.id, sf.AmountMs)
	case FaultVanish:
		w.vanish(sf.Ratio, sf.DurationMs)
	case FaultResetConnections:
		for _, p := range w.peers {
			if p.link != nil && w.rng.Chance(sf.Ratio) {
				w.fabric.reset(p.link, "scheduled reset")
				w.fault("reset", "reset connection of client %d", p.id)
			}
		}
	case FaultDropSessions:
		for _, p := range w.peers {
			if p.link != nil && w.rng.Chance(sf.Ratio) {
				p.drop("scheduled session drop")
				w.fault("session-drop", "client %d drops its link (its session goes dormant)", p.id)
			}
		}
	case FaultSlowConsumers:
		for _, p := range w.peers {
			if (p.role == roleConsumer || p.role == roleCohortMember) && p.link != nil && w.rng.Chance(sf.Ratio) {
				p.stopReading(sf.DurationMs)
				w.fault("slow-consumer", "client %d stops reading for %dms", p.id, sf.DurationMs)
			}
		}
	}
}

func (w *World) countFault(kind string, n uint64) {
	if n == 0 {
		return
	}
	if w.stats.FaultsByKind == nil {
		w.stats.FaultsByKind = map[string]uint64{}
	}
	w.stats.FaultsByKind[kind] += n
}
