package scenarios

// Lease-expiry storm: consumers vanish (keep their connections, settle
// nothing) and slow consumers hold deliveries past their lease, while small
// queue depth bounds push back on producers. Exercises lease expiry, requeue
// counting, prefetch credit after expiry, redelivery to other subscriptions
// and refused publishes (ErrQueueFull).

import "github.com/fibril-go/fibril/sim"

// LeaseExpiryStorm makes leases expire in bulk.
func LeaseExpiryStorm() *sim.Scenario {
	s := base("lease-storm", "consumers vanish and hold deliveries past their lease")
	s.Workload.SilentRatio = 0.15
	s.Workload.ProcessMaxMs = 200
	s.Workload.PrefetchMax = 4
	s.Workload.SafetyPhaseMs = 8000
	s.Queues[0].MaxRetries = 4
	s.Queues[0].QueueDepthMax = 120
	s.Queues[2].QueueDepthMax = 40
	s.Schedule = []sim.ScheduledFault{
		{AtMs: 800, Kind: sim.FaultVanish, Ratio: 0.6, DurationMs: 4500},
		{AtMs: 4000, Kind: sim.FaultVanish, Ratio: 0.5, DurationMs: 3500},
		{AtMs: 6000, Kind: sim.FaultCrash},
	}
	return s
}
