package sim

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fibril-go/fibril/checker"
)

// Checked runs and sweeps. A run is one goroutine from start to end; a sweep
// runs independent seeds on parallel workers, which changes nothing inside a
// run (each has its own world and seed).

// Outcome is one run and the checker's verdict on its history.
type Outcome struct {
	Result    *Result
	Report    *checker.Report
	RunWall   time.Duration
	CheckWall time.Duration
}

// OK reports whether the run passed.
func (o *Outcome) OK() bool { return o.Report.OK() }

// RunChecked runs a scenario for a seed and checks its history.
func RunChecked(sc *Scenario, seed uint64, opts Options) *Outcome {
	start := time.Now()
	res := Run(sc, seed, opts)
	runWall := time.Since(start)
	start = time.Now()
	rep := &checker.Report{}
	if !opts.SkipCheck {
		rep = checker.Check(res.History, checker.Options{})
	}
	return &Outcome{Result: res, Report: rep, RunWall: runWall, CheckWall: time.Since(start)}
}

// SweepOptions says which seeds to run and how.
type SweepOptions struct {
	From, To uint64                      // inclusive seed range
	Pick     func(seed uint64) *Scenario // the scenario for a seed
	Options  Options
	Parallel int // workers (at least 1)
	// OnOutcome sees each outcome, from one goroutine, in completion order.
	OnOutcome func(*Outcome)
	// Stop, when it returns true after an outcome, ends the sweep early.
	Stop func(*Outcome) bool
}

// SweepSummary adds up a sweep.
type SweepSummary struct {
	Runs           int
	FailedRuns     int
	Violations     int
	ClientOps      uint64
	FaultsInjected uint64
	Crashes        uint64 // process crashes
	PowerLosses    uint64
	Snapshots      uint64
	FaultsByKind   map[string]uint64
	Spills         uint64
	SimMs          int64
	Notices        uint64              // ASSIGNMENT_CHANGED frames cohort members decoded
	Rebalances     []checker.Rebalance // every hand-over after a member left (RebalanceLine)
	RunWall        time.Duration       // summed over runs (CPU-ish time of the simulator)
	CheckWall      time.Duration       // summed over runs
	Wall           time.Duration       // elapsed
}

// Add folds one outcome into the summary.
func (s *SweepSummary) Add(o *Outcome) {
	s.Runs++
	if !o.OK() {
		s.FailedRuns++
		s.Violations += len(o.Report.Violations)
	}
	s.ClientOps += o.Result.Stats.ClientOps
	s.FaultsInjected += o.Result.Stats.FaultsInjected
	s.Crashes += o.Result.Stats.Crashes
	s.PowerLosses += o.Result.Stats.PowerLosses
	s.Snapshots += o.Result.Stats.Snapshots
	for k, n := range o.Result.Stats.FaultsByKind {
		if s.FaultsByKind == nil {
			s.FaultsByKind = map[string]uint64{}
		}
		s.FaultsByKind[k] += n
	}
	s.Spills += o.Result.Stats.Spills
	s.SimMs += o.Result.Stats.SimMs
	s.Notices += o.Result.Stats.Notices
	s.Rebalances = append(s.Rebalances, o.Result.Stats.Rebalances...)
	s.RunWall += o.RunWall
	s.CheckWall += o.CheckWall
}

// FaultsLine lists the faults per kind, sorted by name.
func (s *SweepSummary) FaultsLine() string {
	return faultsLine(s.FaultsByKind)
}

// RebalanceLine sums up hand-overs after a member left (checker.
// RebalanceTimes): how many, and the median and worst time in simulated
// ms from the leave to the first ASSIGNMENT_CHANGED adding the partition
// at another member, and to the first delivery of a waiting message to
// another member. "" when there were none.
func RebalanceLine(rs []checker.Rebalance) string {
	if len(rs) == 0 {
		return ""
	}
	var notice, delivery []int64
	for _, r := range rs {
		if r.NoticeMs >= 0 {
			notice = append(notice, r.NoticeMs)
		}
		if r.DeliveryMs >= 0 {
			delivery = append(delivery, r.DeliveryMs)
		}
	}
	figures := func(xs []int64) string {
		if len(xs) == 0 {
			return "none"
		}
		sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
		return fmt.Sprintf("median %dms worst %dms (%d)", xs[len(xs)/2], xs[len(xs)-1], len(xs))
	}
	return fmt.Sprintf("rebalances after a leave %d: to the survivor's ASSIGNMENT_CHANGED %s; to its first delivery of a waiting message %s",
		len(rs), figures(notice), figures(delivery))
}

// FaultsLine lists a run's faults per kind, sorted by name.
func FaultsLine(m map[string]uint64) string { return faultsLine(m) }

func faultsLine(m map[string]uint64) string {
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	for i, k := range kinds {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}

// Sweep runs seeds From..To and checks each.
func Sweep(opts SweepOptions) SweepSummary {
	start := time.Now()
	workers := max(opts.Parallel, 1)
	seeds := make(chan uint64)
	outcomes := make(chan *Outcome)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range seeds {
				outcomes <- RunChecked(opts.Pick(seed), seed, opts.Options)
			}
		}()
	}
	go func() {
		defer close(seeds)
		for seed := opts.From; seed <= opts.To; seed++ {
			select {
			case seeds <- seed:
			case <-stop:
				return
			}
			if seed == ^uint64(0) {
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(outcomes)
	}()
	var sum SweepSummary
	stopped := false
	for o := range outcomes {
		sum.Add(o)
		if opts.OnOutcome != nil {
			opts.OnOutcome(o)
		}
		if !stopped && opts.Stop != nil && opts.Stop(o) {
			stopped = true
			close(stop)
		}
	}
	sum.Wall = time.Since(start)
	return sum
}
