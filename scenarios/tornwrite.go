package scenarios

// Torn-write recovery: every crash lets a random part of the unsynced tail
// reach the disk, often with a garbled last record, while long group-commit
// windows keep that tail large. Exercises CRC32-C record checks, truncation
// at the first bad record and replay of partially durable batches.

import "github.com/fibril-go/fibril/sim"

// TornWriteRecovery crashes with torn, garbled log tails.
func TornWriteRecovery() *sim.Scenario {
	s := base("torn-write", "crashes that tear and garble the unsynced log tail")
	s.Faults.CrashProbabilityPerStep = 0.001
	s.Faults.CrashAfterFsyncRatio = 0.01
	s.Faults.TornWriteRatio = 1 // the old driver's knob
	s.Faults.PowerLossRatio = 1 // simfs tears the unsynced tails
	s.Faults.GroupCommitWindowMs = 8
	s.Faults.FsyncLatencyMinMs, s.Faults.FsyncLatencyMaxMs = 2, 12
	s.Workload.RetryRatio = 0.05
	return s
}
