package scenarios

// Crash storm: the node crashes at random steps, and also right after an
// fsync completes but before Persisted is fed; a fifth of them are power
// losses (torn tails), the rest process crashes (page cache kept).
// Exercises the durability gate, recovery from the durable prefix and
// at-least-once redelivery after restarts.

import "github.com/fibril-go/fibril/sim"

// CrashStorm crashes the node often, at any point of the driver loop.
func CrashStorm() *sim.Scenario {
	s := base("crash-storm", "crashes at random steps and between fsync and Persisted, some of them power losses")
	s.Faults.CrashProbabilityPerStep = 0.0015
	s.Faults.CrashAfterFsyncRatio = 0.03
	s.Faults.PowerLossRatio = 0.2 // the rest are process crashes: the page cache survives
	s.Faults.FsyncLatencyMinMs, s.Faults.FsyncLatencyMaxMs = 1, 6
	s.Faults.RestartDelayMinMs, s.Faults.RestartDelayMaxMs = 20, 400
	s.Workload.RetryRatio = 0.05
	s.Workload.SilentRatio = 0.02
	s.Workload.AutoAckRatio = 0.1
	s.Schedule = []sim.ScheduledFault{
		{AtMs: 1500, Kind: sim.FaultCrash},
		{AtMs: 3200, Kind: sim.FaultCrash},
	}
	return s
}
