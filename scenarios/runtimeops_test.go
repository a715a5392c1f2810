package scenarios_test

import (
	"runtime"
	"testing"

	"github.com/fibril-go/fibril/scenarios"
	"github.com/fibril-go/fibril/sim"
)

// runtimeOpsSeeds: the runtime-ops scenario (outside All()'s rotation),
// half in swarm mode; -short runs a tenth.
const runtimeOpsSeeds = 100

// TestRuntimeOpsSweep: an operator raises the lease and the grace mid-run
// under crashes and power losses; every answered change survives every
// later boot, every loaded partition holds it when the operator is told,
// and the queues stay correct (sim/operator.go).
func TestRuntimeOpsSweep(t *testing.T) {
	seeds := uint64(runtimeOpsSeeds)
	if testing.Short() {
		seeds /= 10
	}
	sc := scenarios.RuntimeOps()
	for _, swarm := range []bool{false, true} {
		summary := sim.Sweep(sim.SweepOptions{
			From: 1, To: seeds / 2,
			Pick:     func(uint64) *sim.Scenario { return sc },
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
		if summary.Crashes == 0 || summary.PowerLosses == 0 {
			t.Errorf("swarm=%v: no crash or power loss in the sweep", swarm)
		}
	}
}
