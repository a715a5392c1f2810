package scenarios

// Power loss: every crash is a power loss (simfs.PowerLoss: unsynced data
// dropped, tails torn at a sector boundary with zeros or garbage, unsynced
// directory entries lost), with long group-commit windows and slow fsyncs
// so much is unsynced when it strikes, and scheduled power losses between
// an fsync and its report. Exercises the durability gate against the real
// storage code, torn-tail repair, blob payloads that must be datasynced,
// and recovery of the Node's own log (boot records, catalogue, skeletons).

import "github.com/fibril-go/fibril/sim"

// PowerLoss loses power often.
func PowerLoss() *sim.Scenario {
	s := base("power-loss", "power losses: unsynced data dropped, torn tails, lost directory entries")
	f := &s.Faults
	f.CrashProbabilityPerStep = 0.001
	f.CrashAfterFsyncRatio = 0.01
	f.PowerLossRatio = 1
	f.GroupCommitWindowMs = 6
	f.FsyncLatencyMinMs, f.FsyncLatencyMaxMs = 2, 12
	f.RestartDelayMinMs, f.RestartDelayMaxMs = 20, 300
	s.Workload.LargePayloadRatio = 0.4
	s.Workload.RetryRatio = 0.05
	s.Schedule = []sim.ScheduledFault{
		{AtMs: 1200, Kind: sim.FaultPowerLoss},
		{AtMs: 2600, Kind: sim.FaultPowerLoss},
		{AtMs: 4100, Kind: sim.FaultPowerLoss},
	}
	return s
}
