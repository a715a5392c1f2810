package scenarios_test

import (
	"runtime"
	"testing"

	"github.com/fibril-go/fibril/scenarios"
	"github.com/fibril-go/fibril/sim"
)

// inspectSeeds: every scenario, scenario faults and swarm, with the
// read-only operator (sim/operator.go) browsing and dry-run redriving
// throughout the safety phase. -short runs a third.
const inspectSeeds = 60

func TestSweepWithAnInspectingOperator(t *testing.T) {
	seeds := uint64(inspectSeeds)
	if testing.Short() {
		seeds /= 3
	}
	all := scenarios.All()
	var requests, answers, lost uint64
	for _, swarm := range []bool{false, true} {
		sim.Sweep(sim.SweepOptions{
			From: 1, To: seeds / 2,
			Pick:     func(seed uint64) *sim.Scenario { return all[seed%uint64(len(all))] },
			Options:  sim.Options{Swarm: swarm, CheckInvariants: true, Inspect: true},
			Parallel: runtime.GOMAXPROCS(0),
			OnOutcome: func(o *sim.Outcome) {
				if !o.OK() {
					t.Errorf("%s\n%s\n  aborted: %s\n  (replay with sim.Options{Inspect: true})", o.Result.Header(), o.Report.Summary(10), o.Result.Aborted)
				}
				if !o.Result.Drained {
					t.Errorf("seed %d %s did not drain with the inspector", o.Result.Seed, o.Result.Scenario)
				}
				requests += o.Result.Stats.OperatorRequests
				answers += o.Result.Stats.OperatorAnswers
				lost += o.Result.Stats.OperatorLost
			},
		})
	}
	t.Logf("operator requests %d, answered %d, lost with a crash %d", requests, answers, lost)
	if answers == 0 || answers+lost > requests || requests-answers-lost > seeds {
		t.Errorf("operator requests %d, answered %d, lost %d: each is answered or lost (at most one open per run)", requests, answers, lost)
	}
}
