package scenarios_test

import (
	"reflect"
	"runtime"
	"testing"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/scenarios"
	"github.com/fibril-go/fibril/sim"
)

// sweepSeeds is the CI sweep: seed i runs scenario i mod len(All()), half of
// them in swarm mode, with CheckInvariants after every Step of every
// machine. -short runs a tenth of it.
const sweepSeeds = 560

func TestSweep(t *testing.T) {
	seeds := uint64(sweepSeeds)
	if testing.Short() {
		seeds /= 10
	}
	all := scenarios.All()
	for _, swarm := range []bool{false, true} {
		summary := sim.Sweep(sim.SweepOptions{
			From: 1, To: seeds / 2,
			Pick:     func(seed uint64) *sim.Scenario { return all[seed%uint64(len(all))] },
			Options:  sim.Options{Swarm: swarm, CheckInvariants: true},
			Parallel: runtime.GOMAXPROCS(0),
			OnOutcome: func(o *sim.Outcome) {
				if !o.OK() {
					t.Errorf("%s\n%s\n  replay: %s", o.Result.Header(), o.Report.Summary(10), o.Result.ReplayCommand())
				}
				if !o.Result.Drained {
					t.Errorf("seed %d %s did not drain", o.Result.Seed, o.Result.Scenario)
				}
			},
		})
		t.Logf("swarm=%v: runs %d, simulated client ops %d, faults injected %d (crashes %d, power losses %d), snapshots %d, payloads read back %d, violations %d, simulated %.0fs, wall %v\n  faults by kind: %s",
			swarm, summary.Runs, summary.ClientOps, summary.FaultsInjected, summary.Crashes, summary.PowerLosses, summary.Snapshots,
			summary.Spills, summary.Violations, float64(summary.SimMs)/1000, summary.Wall, summary.FaultsLine())
		// The sweep must exercise what it claims to.
		if summary.Spills == 0 {
			t.Errorf("swarm=%v: no payload was read back from storage: the sweep does not exercise stored bodies", swarm)
		}
		for _, kind := range []string{"crash", "power-loss", "torn-tail", "fsync-error", "stalled-handshake", "no-auth", "load-failure"} {
			if summary.FaultsByKind[kind] == 0 {
				t.Errorf("swarm=%v: no %s fault in the sweep", swarm, kind)
			}
		}
		if summary.Snapshots == 0 {
			t.Errorf("swarm=%v: no snapshot was taken", swarm)
		}
	}
}

// The same seed and build give the same trace, byte for byte; other seeds
// give other traces.
func TestSameSeedSameTrace(t *testing.T) {
	for _, sc := range scenarios.All() {
		for _, swarm := range []bool{false, true} {
			a := sim.Run(sc, 7, sim.Options{Swarm: swarm, CheckInvariants: true})
			b := sim.Run(sc, 7, sim.Options{Swarm: swarm})
			c := sim.Run(sc, 8, sim.Options{Swarm: swarm})
			if a.TraceHash != b.TraceHash || len(a.History.Events) != len(b.History.Events) {
				t.Errorf("%s swarm=%v: seed 7 traced %016x then %016x", sc.Name, swarm, a.TraceHash, b.TraceHash)
			}
			if a.TraceHash == c.TraceHash {
				t.Errorf("%s swarm=%v: seeds 7 and 8 traced the same %016x", sc.Name, swarm, a.TraceHash)
			}
			for i := range a.History.Events {
				if !eventsEqual(&a.History.Events[i], &b.History.Events[i]) {
					t.Fatalf("%s swarm=%v: event %d differs:\n%+v\n%+v", sc.Name, swarm, i+1, a.History.Events[i], b.History.Events[i])
				}
			}
		}
	}
}

func eventsEqual(a, b *checker.Event) bool {
	if len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i] != b.Headers[i] {
			return false
		}
	}
	x, y := *a, *b
	x.Headers, y.Headers = nil, nil
	return reflect.DeepEqual(x, y)
}

// The header printed before a run names the faults the run draws.
func TestHeaderMatchesTheRun(t *testing.T) {
	for _, sc := range scenarios.All() {
		for _, swarm := range []bool{false, true} {
			res := sim.Run(sc, 11, sim.Options{Swarm: swarm})
			if got, want := sim.Header(sc, 11, swarm), res.Header(); got != want {
				t.Errorf("header before the run:\n%s\nafter:\n%s", got, want)
			}
		}
	}
}

// Every scenario says what it exercises.
func TestScenariosAreDescribed(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range scenarios.All() {
		if sc.Description == "" || seen[sc.Name] {
			t.Errorf("scenario %q: needs a unique name and a description", sc.Name)
		}
		seen[sc.Name] = true
	}
}
