// Package scenarios holds the simulator's named scenarios: each a workload
// plus a fault schedule, written as Go code, run for seed ranges by
// `fibril sim` and by the sweep test. Each file holds one scenario and says
// at its top what it exercises.
package scenarios

import (
	"sort"

	"github.com/fibril-go/fibril/sim"
)

// leaseMs is short in the simulator so leases expire many times per run.
const leaseMs = 3000

// All returns every scenario, in a fixed order (a sweep over "all" runs
// seed i with scenario i mod len(All())).
func All() []*sim.Scenario {
	return []*sim.Scenario{
		SteadyWorkQueue(),
		CrashStorm(),
		LeaseExpiryStorm(),
		DelaysAndTTLUnderClockJumps(),
		DeadLetterAfterRetries(),
		TornWriteRecovery(),
		FlakyClientConnections(),
		PowerLoss(),
		StorageFaults(),
		DeadLetterTargetTrouble(),
		SessionsResume(),
		StalledClients(),
		SnapshotsUnderLoad(),
		Streams(),
		Cohorts(),
	}
}

// ByName returns the scenario called name.
func ByName(name string) (*sim.Scenario, bool) {
	for _, s := range append(All(), Extras()...) {
		if s.Name == name {
			return s, true
		}
	}
	return nil, false
}

// Names lists the scenario names, sorted.
func Names() []string {
	var names []string
	for _, s := range append(All(), Extras()...) {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	return names
}

// base is the common starting point: the default queues and workload, a
// calm network and disk, the simulator's short lease.
func base(name, description string) *sim.Scenario {
	return &sim.Scenario{
		Name:        name,
		Description: description,
		Queues:      sim.DefaultQueues(),
		LeaseMs:     leaseMs,
		NodeCount:   1,
		Workload:    sim.DefaultWorkload(),
		Faults:      sim.BaseFaults(),
	}
}
