package scenarios_test

import (
	"runtime"
	"testing"

	"github.com/fibril-go/fibril/scenarios"
	"github.com/fibril-go/fibril/sim"
)

// idleSeeds is the idle-eviction sweep: half plain, half swarm, every
// machine's invariants checked after every step, every history checked.
const idleSeeds = 300

// The idle-eviction scenario under the existing checkers: eviction must
// change nothing a client can observe, and must really happen.
func TestIdleEvictionSweep(t *testing.T) {
	seeds := uint64(idleSeeds)
	if testing.Short() {
		seeds /= 10
	}
	sc, _ := scenarios.ByName("idle-eviction")
	for _, swarm := range []bool{false, true} {
		var unloads, reloads uint64
		summary := sim.Sweep(sim.SweepOptions{
			From: 1, To: seeds / 2,
			Pick:     func(uint64) *sim.Scenario { return sc },
			Options:  sim.Options{Swarm: swarm, CheckInvariants: true},
			Parallel: runtime.GOMAXPROCS(0),
			OnOutcome: func(o *sim.Outcome) {
				unloads += o.Result.Stats.Unloads
				reloads += o.Result.Stats.Reloads
				if !o.OK() {
					t.Errorf("%s\n%s\n  replay: %s", o.Result.Header(), o.Report.Summary(10), o.Result.ReplayCommand())
				}
				if !o.Result.Drained {
					t.Errorf("seed %d %s did not drain", o.Result.Seed, o.Result.Scenario)
				}
			},
		})
		t.Logf("swarm=%v: runs %d, unloads %d, reloads %d, crashes %d, power losses %d, violations %d, faults by kind: %s",
			swarm, summary.Runs, unloads, reloads, summary.Crashes, summary.PowerLosses, summary.Violations, summary.FaultsLine())
		if unloads == 0 || reloads == 0 {
			t.Errorf("swarm=%v: %d unloads, %d reloads: the scenario does not exercise eviction", swarm, unloads, reloads)
		}
	}
}
