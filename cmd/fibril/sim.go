package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/scenarios"
	"github.com/fibril-go/fibril/sim"
)

// fibril sim: run the deterministic simulator for one seed (replay) or a
// range of seeds (sweep), check every history, and exit non-zero on any
// violation. A failing run leaves its history and an HTML visualisation in
// --out and prints the commands that replay and re-check it.

func init() {
	register("sim", "run the deterministic simulator", runSim)
}

func runSim(args []string) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	scenarioName := fs.String("scenario", "all", "scenario to run, or \"all\" to rotate through every scenario by seed ("+strings.Join(scenarios.Names(), ", ")+")")
	seed := fs.Uint64("seed", 0, "replay this one seed")
	seeds := fs.String("seeds", "", "sweep a seed range A-B (inclusive)")
	swarm := fs.Bool("swarm", false, "swarm mode: draw the faults from each seed")
	checkInvariants := fs.Bool("check-invariants", true, "call the core's CheckInvariants after every Step (turn off only to measure speed)")
	check := fs.Bool("check", true, "check each history (turn off only to measure the simulator alone)")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "runs in parallel during a sweep")
	outDir := fs.String("out", filepath.Join(os.TempDir(), "fibril-sim-failures"), "directory for the histories and visualisations of failing runs")
	verbose := fs.Bool("v", false, "print each run's header (seed, scenario, fault knobs) and result")
	historyPath := fs.String("history", "", "with --seed: also write the run's history here")
	list := fs.Bool("list", false, "list the scenarios and exit")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if os.Getenv("GOGC") == "" {
		// A run allocates a few MB of short-lived events and packets; at the
		// default GOGC the collector took a third of the simulator's time.
		debug.SetGCPercent(400)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fibril sim:", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "fibril sim:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if *list {
		for _, s := range append(scenarios.All(), scenarios.Extras()...) { // the extras are not in the "all" rotation
			fmt.Printf("%-14s %s\n", s.Name, s.Description)
		}
		return 0
	}
	pick, err := scenarioPicker(*scenarioName)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fibril sim:", err)
		return 2
	}
	opts := sim.Options{Swarm: *swarm, CheckInvariants: *checkInvariants, SkipCheck: !*check}
	switch {
	case *seeds != "":
		from, to, err := parseSeedRange(*seeds)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fibril sim:", err)
			return 2
		}
		return sweep(from, to, pick, opts, *parallel, *outDir, *verbose)
	case flagSet(fs, "seed"):
		return replay(*seed, pick, opts, *outDir, *historyPath)
	}
	fmt.Fprintln(os.Stderr, "fibril sim: give --seed N or --seeds A-B")
	fs.Usage()
	return 2
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func scenarioPicker(name string) (func(uint64) *sim.Scenario, error) {
	if name == "all" {
		all := scenarios.All()
		return func(seed uint64) *sim.Scenario { return all[seed%uint64(len(all))] }, nil
	}
	s, ok := scenarios.ByName(name)
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q (have: all, %s)", name, strings.Join(scenarios.Names(), ", "))
	}
	return func(uint64) *sim.Scenario { return s }, nil
}

func parseSeedRange(s string) (uint64, uint64, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("--seeds wants A-B, got %q", s)
	}
	from, err1 := strconv.ParseUint(a, 10, 64)
	to, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil || to < from {
		return 0, 0, fmt.Errorf("--seeds wants A-B with A <= B, got %q", s)
	}
	return from, to, nil
}

func replay(seed uint64, pick func(uint64) *sim.Scenario, opts sim.Options, outDir, historyPath string) int {
	sc := pick(seed)
	fmt.Println(sim.Header(sc, seed, opts.Swarm))
	o := sim.RunChecked(sc, seed, opts)
	res := o.Result
	fmt.Printf("trace %016x  simulated %.1fs  client ops %d  deliveries %d  faults %d (crashes %d, power losses %d)  snapshots %d  steps %d  drained %v\n",
		res.TraceHash, float64(res.Stats.SimMs)/1000, res.Stats.ClientOps, res.Stats.Deliveries,
		res.Stats.FaultsInjected, res.Stats.Crashes, res.Stats.PowerLosses, res.Stats.Snapshots, res.Stats.Steps, res.Drained)
	fmt.Printf("faults by kind: %s\n", sim.FaultsLine(res.Stats.FaultsByKind))
	if line := sim.RebalanceLine(res.Stats.Rebalances); line != "" {
		fmt.Printf("cohorts: %d notices; %s\n", res.Stats.Notices, line)
	}
	fmt.Printf("run %v  check %v  (%.0f client ops/s)\n", o.RunWall.Round(time.Millisecond), o.CheckWall.Round(time.Millisecond),
		float64(res.Stats.ClientOps)/o.RunWall.Seconds())
	if historyPath != "" {
		if err := res.History.WriteFile(historyPath); err != nil {
			fmt.Fprintln(os.Stderr, "fibril sim:", err)
			return 2
		}
		fmt.Println("history written to", historyPath)
	}
	fmt.Println(o.Report.Summary(50))
	if o.OK() {
		return 0
	}
	reportFailure(o, outDir)
	return 1
}

// reportFailure writes the artifacts of a failing run and prints how to
// replay and re-check it.
func reportFailure(o *sim.Outcome, outDir string) {
	res := o.Result
	base := fmt.Sprintf("%s-seed%d", res.Scenario, res.Seed)
	if res.Swarm {
		base += "-swarm"
	}
	historyPath, htmlPath, err := checker.WriteArtifacts(outDir, base, res.History, o.Report)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fibril sim: writing artifacts:", err)
	}
	fmt.Printf("FAIL %s\n", res.Header())
	if historyPath != "" {
		fmt.Printf("  history:       %s\n", historyPath)
	}
	if htmlPath != "" {
		fmt.Printf("  visualisation: %s\n", htmlPath)
	}
	fmt.Printf("  replay:        %s\n", res.ReplayCommand())
	if historyPath != "" {
		fmt.Printf("  re-check:      go run ./cmd/fibril check %s\n", filepath.ToSlash(historyPath))
	}
}

func sweep(from, to uint64, pick func(uint64) *sim.Scenario, opts sim.Options, parallel int, outDir string, verbose bool) int {
	total := to - from + 1
	var mu sync.Mutex
	var done uint64
	var sum sim.SweepSummary
	lastProgress := time.Time{}
	progress := func(final bool) {
		fmt.Fprintf(os.Stderr, "\r[%d/%d] failed runs %d  client ops %d  faults %d  simulated %.0fs",
			done, total, sum.FailedRuns, sum.ClientOps, sum.FaultsInjected, float64(sum.SimMs)/1000)
		if final {
			fmt.Fprintln(os.Stderr)
		}
	}
	summary := sim.Sweep(sim.SweepOptions{From: from, To: to, Pick: pick, Options: opts, Parallel: parallel,
		OnOutcome: func(o *sim.Outcome) {
			mu.Lock()
			defer mu.Unlock()
			done++
			sum.Add(o)
			if verbose {
				fmt.Fprintf(os.Stderr, "\r%s\n  trace %016x ops %d faults %d ok %v\n", o.Result.Header(), o.Result.TraceHash,
					o.Result.Stats.ClientOps, o.Result.Stats.FaultsInjected, o.OK())
			}
			if !o.OK() {
				fmt.Fprint(os.Stderr, "\r")
				fmt.Println(o.Report.Summary(10))
				reportFailure(o, outDir)
			}
			if time.Since(lastProgress) > 500*time.Millisecond {
				lastProgress = time.Now()
				progress(false)
			}
		}})
	progress(true)
	fmt.Printf("runs %d  simulated client ops %d  faults injected %d (crashes %d, power losses %d)  snapshots %d  payloads read back %d  violations %d in %d runs\n",
		summary.Runs, summary.ClientOps, summary.FaultsInjected, summary.Crashes, summary.PowerLosses, summary.Snapshots,
		summary.Spills, summary.Violations, summary.FailedRuns)
	fmt.Printf("faults by kind: %s\n", summary.FaultsLine())
	if line := sim.RebalanceLine(summary.Rebalances); line != "" {
		fmt.Printf("cohorts: %d notices; %s\n", summary.Notices, line)
	}
	fmt.Printf("simulated time %.0fs  wall time %v  (simulator %v, checker %v summed over %d workers)  %.0f client ops per simulator-second\n",
		float64(summary.SimMs)/1000, summary.Wall.Round(time.Millisecond), summary.RunWall.Round(time.Millisecond),
		summary.CheckWall.Round(time.Millisecond), max(parallel, 1), float64(summary.ClientOps)/summary.RunWall.Seconds())
	if summary.FailedRuns > 0 {
		return 1
	}
	return 0
}
