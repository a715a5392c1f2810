package scenarios

// Torn-write recovery: every crash is a power loss that lets a prefix of
// each file's unsynced tail reach the disk, cut at a sector boundary and
// ended by a sector of zeros or garbage, while long group-commit windows
// keep that tail large. Exercises the storage's CRC checks, its torn-tail
// repair and replay of partially durable rounds.

import "github.com/fibril-go/fibril/sim"

// TornWriteRecovery crashes with torn, garbled log tails.
func TornWriteRecovery() *sim.Scenario {
	s := base("torn-write", "crashes that tear and garble the unsynced log tail")
	s.Faults.CrashProbabilityPerStep = 0.001
	s.Faults.CrashAfterFsyncRatio = 0.01
	s.Faults.PowerLossRatio = 1 // every crash: simfs tears the unsynced tails
	s.Faults.GroupCommitWindowMs = 8
	s.Faults.FsyncLatencyMinMs, s.Faults.FsyncLatencyMaxMs = 2, 12
	s.Workload.RetryRatio = 0.05
	return s
}
