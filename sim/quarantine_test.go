package sim

import (
	"strings"
	"testing"
)

// TestQuarantineInSimulation: media damage under a synced record of jobs/0
// (FaultCorruptRecord, while the broker is down, broker_quarantine.go):
// the restarted broker's first load of jobs/0 finds it (LoadDone.Damage),
// the Node parks the partition, the simulated operator repairs it (a
// truncating load) and the run goes on and drains. A repair drops what
// follows the cut, so the checkers report exactly that: durable entries
// gone (item 10), confirmed publishes lost (1), acked messages delivered
// again (2), all on jobs/0 and nowhere else. This is the one simulated
// run whose disk is damaged on purpose; the scenarios' sweeps never
// damage one (broker_quarantine.go says why).
func TestQuarantineInSimulation(t *testing.T) {
	sc := &Scenario{
		Name: "quarantine", Description: "a damaged record, quarantined and repaired",
		Queues: DefaultQueues(), LeaseMs: 2000, NodeCount: 1,
		Workload: DefaultWorkload(), Faults: BaseFaults(),
		Schedule: []ScheduledFault{{AtMs: 2500, Kind: FaultCorruptRecord, Target: 0}},
	}
	for seed := uint64(1); seed <= 3; seed++ {
		o := RunChecked(sc, seed, Options{CheckInvariants: true})
		byKind := o.Result.Stats.FaultsByKind
		if o.Result.Aborted != "" || !o.Result.Drained {
			t.Fatalf("seed %d: aborted %q, drained %v", seed, o.Result.Aborted, o.Result.Drained)
		}
		if byKind["corrupt-record"] != 1 || byKind["quarantine"] != 1 {
			t.Fatalf("seed %d: faults %v, want one damaged record and one quarantine", seed, byKind)
		}
		sawRecovery := false
		for _, v := range o.Report.Violations {
			if !strings.HasPrefix(v.Subject, "jobs/0") || (v.Item != 1 && v.Item != 2 && v.Item != 10) {
				t.Fatalf("seed %d: a finding outside what the repair's cut explains: %v", seed, v)
			}
			sawRecovery = sawRecovery || v.Item == 10
		}
		if !sawRecovery {
			t.Fatalf("seed %d: the checker did not see the cut durable entries:\n%s", seed, o.Report.Summary(10))
		}
	}
}
