package scenarios

// Runtime operations: an operator raises the lease and the reconnect grace
// twice while clients work, sessions drop and resume, and the broker
// crashes and loses power around each change. The settings record is part
// of the Node's log: every answered change must be in force after every
// later boot, and at the end every loaded partition leases for the Node's
// lease (sim/operator.go checks both); the usual checker sees the queues
// stay correct while the lease changes under them. Not in All(): adding a
// scenario would move every seed of the rotation (and the mutant table's
// seeds); it is swept on its own (TestRuntimeOpsSweep, or
// `fibril sim --scenario runtime-ops --seeds 1-300`).

import "github.com/fibril-go/fibril/sim"

// RuntimeOps changes runtime settings mid-run under crashes.
func RuntimeOps() *sim.Scenario {
	s := base("runtime-ops", "an operator raises the lease and the grace mid-run while the broker crashes and loses power")
	w := &s.Workload
	w.DisconnectRatio = 0.02
	w.ReconnectDelayMinMs, w.ReconnectDelayMaxMs = 10, 1600
	w.RetryRatio = 0.05
	w.SilentRatio = 0.02
	s.Faults.CrashProbabilityPerStep = 0.0008
	s.Faults.CrashAfterFsyncRatio = 0.02
	s.Faults.PowerLossRatio = 0.3
	s.Faults.RestartDelayMinMs, s.Faults.RestartDelayMaxMs = 20, 300
	s.Operator = []sim.OperatorChange{
		{AtMs: 700, LeaseMs: 2 * leaseMs, ReconnectGraceMs: 1500},
		{AtMs: 2300, LeaseMs: 3 * leaseMs, ReconnectGraceMs: 2500},
	}
	s.Schedule = []sim.ScheduledFault{
		{AtMs: 720, Kind: sim.FaultPowerLoss},
		{AtMs: 1200, Kind: sim.FaultDropSessions, Ratio: 0.5},
		{AtMs: 2310, Kind: sim.FaultCrash},
		{AtMs: 3000, Kind: sim.FaultPowerLoss},
	}
	return s
}
