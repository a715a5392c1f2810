package scenarios

// Steady work queue: producers and consumers on a calm network; consumers
// mostly complete, sometimes retry. Exercises the happy path end to end,
// FIFO first deliveries, group commit and the durability gate.

import "github.com/fibril-go/fibril/sim"

// SteadyWorkQueue is the baseline every other scenario perturbs.
func SteadyWorkQueue() *sim.Scenario {
	s := base("steady", "steady work queue: calm network, consumers complete and sometimes retry")
	s.Workload.RetryRatio = 0.05
	s.Workload.RetryAfterRatio = 0.02
	s.Workload.RetryAfterMaxMs = 300
	s.Workload.AutoAckRatio = 0.1
	return s
}
