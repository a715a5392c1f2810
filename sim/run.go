package sim

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
)

// Options change how a scenario runs without changing what it is.
type Options struct {
	// Swarm draws the faults from the seed instead of using the scenario's.
	Swarm bool
	// CheckInvariants calls CheckInvariants after every Step (O(state) each:
	// on in tests and CI sweeps, off when measuring speed).
	CheckInvariants bool
	// Wrap builds the machine the Host steps around each partition
	// (tests: mutants).
	Wrap WrapMachine
	// SkipCheck skips the checker in RunChecked (measuring the simulator
	// alone); a run that aborts still reports through Result.Aborted.
	SkipCheck bool
	// Inspect runs a read-only operator during the safety phase: browses
	// and dry-run redrives through AdminAddr requests (operator.go).
	Inspect bool
}

// Result is one run: its history, trace hash and counters.
type Result struct {
	Scenario  string
	Seed      uint64
	Swarm     bool
	Faults    Faults
	History   *checker.History
	TraceHash uint64
	Stats     RunStats
	Net       NetStats
	Aborted   string // why the run stopped early ("" = it ran to the end)
	Drained   bool   // the liveness phase reached quiescence
}

// ReplayCommand is the command line that replays this run.
func (r *Result) ReplayCommand() string {
	return ReplayCommand(r.Scenario, r.Seed, Options{Swarm: r.Swarm})
}

// ReplayCommand builds the command that replays a scenario, seed and the
// options that change a run.
func ReplayCommand(scenario string, seed uint64, opts Options) string {
	cmd := fmt.Sprintf("go run ./cmd/fibril sim --scenario %s --seed %d", scenario, seed)
	if opts.Swarm {
		cmd += " --swarm"
	}
	return cmd
}

// Header is the line a run prints first: seed, scenario and the fault knobs.
func (r *Result) Header() string { return header(r.Scenario, r.Seed, r.Swarm, r.Faults) }

// Header returns the line a run of sc for seed will print first, before
// running it: the faults are drawn exactly as Run draws them.
func Header(sc *Scenario, seed uint64, swarm bool) string {
	faults := sc.Faults
	if swarm {
		faults = SwarmFaults(NewRand(seed).Fork())
	}
	return header(sc.Name, seed, swarm, faults)
}

func header(scenario string, seed uint64, swarm bool, faults Faults) string {
	mode := "scenario faults"
	if swarm {
		mode = "swarm faults"
	}
	return fmt.Sprintf("seed %d scenario %s (%s): %s", seed, scenario, mode, faults)
}

// Run runs one scenario for one seed. It never panics: a core assertion or
// broken invariant aborts the run and is reported in Result.Aborted.
func Run(sc *Scenario, seed uint64, opts Options) (res *Result) {
	if err := sc.validate(); err != nil {
		panic(err) // scenarios are code: a bad one is a programming error
	}
	w := newWorld(sc, seed, opts)
	res = &Result{Scenario: sc.Name, Seed: seed, Swarm: opts.Swarm, Faults: w.safetyFaults}
	defer func() {
		if p := recover(); p != nil {
			w.abort(fmt.Sprintf("panic at %dms: %v\n%s", w.nowMs, p, trimStack(debug.Stack())))
		}
		w.closeStorageWorkers()
		res.History = w.rec.finish()
		res.TraceHash = w.rec.hash
		w.stats.SimMs = w.nowMs
		w.addUp(res)
		res.Stats = w.stats
		res.Aborted = w.aborted
		res.Drained = w.quiescent
	}()
	w.setup()
	w.loop()
	if w.aborted == "" {
		w.finish()
	}
	return res
}

// closeStorageWorkers ends each broker's storage worker coroutine, so no
// run leaves one behind. A round still blocked in an fsync (the run
// stopped or aborted meanwhile) sees its process die; whatever that
// unwinding does says nothing about the run, which is over.
func (w *World) closeStorageWorkers() {
	for _, b := range w.brokers {
		func() {
			defer func() { _ = recover() }()
			b.store.fs.gate.close()
		}()
	}
}

func trimStack(stack []byte) string {
	lines := strings.Split(string(stack), "\n")
	if len(lines) > 40 {
		lines = lines[:40]
	}
	return strings.Join(lines, "\n")
}

func newWorld(sc *Scenario, seed uint64, opts Options) *World {
	w := &World{scenario: sc, seed: seed, swarm: opts.Swarm, rng: NewRand(seed),
		checkInvariants: opts.CheckInvariants, wrapFn: opts.Wrap, phase: phaseSafety, inspect: opts.Inspect}
	w.rec = newRecorder(w)
	faultRng := w.rng.Fork()
	w.safetyFaults = sc.Faults
	if opts.Swarm {
		w.safetyFaults = SwarmFaults(faultRng)
	}
	w.faults = w.safetyFaults
	for qi, q := range sc.Queues {
		for p := 0; p < q.Partitions; p++ {
			w.catalogue = append(w.catalogue, &partSpec{queue: q, queueIdx: qi,
				queueID: core.QueueID{Topic: q.Topic, Partition: uint32(p)}})
		}
	}
	w.buildStreamCatalogue()
	w.rec.history.Meta = w.meta()
	w.rec.hashLine(w.rec.history.Meta.Replay)
	w.rec.hashLine(w.safetyFaults.String())
	return w
}

func (w *World) meta() checker.Meta {
	sc := w.scenario
	m := checker.Meta{Format: checker.FormatVersion, Scenario: sc.Name, Seed: w.seed, Swarm: w.swarm,
		Faults: w.safetyFaults.String(), LeaseMs: sc.LeaseMs, GlobalDLQ: sc.GlobalDLQ,
		PrefetchMax: core.DefaultConfig(core.QueueID{Topic: "x"}).PrefetchMax,
		Replay:      ReplayCommand(sc.Name, w.seed, Options{Swarm: w.swarm})}
	m.ReconnectGraceMs = w.nodeConfig().ReconnectGraceMs
	for _, q := range sc.Queues {
		m.Queues = append(m.Queues, checker.QueueSpec{Topic: q.Topic, Partitions: q.Partitions, MaxRetries: q.MaxRetries,
			DLQKind: uint8(q.DLQ.Kind), DLQTarget: q.DLQ.Target.Topic, DefaultTTLMs: q.DefaultTTLMs, DeadLetterSink: q.DeadLetterSink,
			Cohort: q.Cohort})
	}
	for _, spec := range w.catalogue {
		m.Partitions = append(m.Partitions, checker.PartitionSpec{Queue: spec.queueIdx, Topic: spec.queueID.Topic, Partition: spec.queueID.Partition})
	}
	w.streamMeta(&m)
	return m
}

func (w *World) setup() { w.setupBrokers() }

func (w *World) loop() {
	for !w.stopped && w.q.len() > 0 {
		ev := w.q.pop()
		assert(ev.atMs >= w.nowMs, "simulated time never goes back")
		w.nowMs = ev.atMs
		w.stats.Events++
		ev.run()
	}
}

// finish records the end state: every message of every partition as the log
// says it ended, and a liveness failure when the run did not drain.
func (w *World) finish() {
	w.phase = phaseDone
	w.rec.add(checker.Event{Kind: checker.KindPhase, Text: "final: the state read back from each node's log"})
	if !w.quiescent {
		w.rec.add(checker.Event{Kind: checker.KindDeadLock, Text: w.stuckReport()})
	}
	w.recordCohortFinals()
	w.finishBrokers()
	if w.operator != nil {
		w.operator.finished() // operator.go
	}
	if w.scenario.Workload.Cohort.Members > 0 {
		w.stats.Rebalances = checker.RebalanceTimes(&w.rec.history)
	}
}

func (w *World) stuckReport() string { return w.stuckReportBrokers() }

// addUp folds the network's, the brokers' and the filesystems' counters
// into the run's stats.
func (w *World) addUp(res *Result) {
	if w.fabric == nil {
		return
	}
	fs := w.fabric.stats
	res.Net = NetStats{Packets: fs.Chunks, LostTransmissions: fs.LostTransmissions, Duplicates: fs.Duplicates,
		Resets: fs.Resets, Partitions: fs.Partitions}
	st := &w.stats
	st.FaultsInjected += fs.LostTransmissions + fs.Duplicates + fs.Resets
	w.countFault("lost-transmission", fs.LostTransmissions)
	w.countFault("duplicate", fs.Duplicates)
	w.countFault("reset", fs.Resets)
	for _, b := range w.brokers {
		c := b.store.fs.Counters()
		w.countFault("fsync-error", c.FsyncErrors)
		w.countFault("bit-rot", c.BitRots)
		w.countFault("torn-tail", c.TornTails)
		w.countFault("dir-op-dropped", c.DirOpsDropped)
		st.FaultsInjected += c.FsyncErrors + c.BitRots + c.TornTails + c.DirOpsDropped
		st.Crashes += b.stats.Crashes
		st.PowerLosses += b.stats.PowerLosses
		st.Spills += b.stats.Spills
		st.Steps += b.stats.Steps
		st.Snapshots += b.stats.Snapshots
		st.Unloads += b.stats.Unloads
		st.Reloads += b.stats.Reloads
	}
	if in := w.inspector; in != nil {
		st.OperatorRequests, st.OperatorAnswers, st.OperatorLost = uint64(in.sent), uint64(in.answered), uint64(in.lost)
	}
}
