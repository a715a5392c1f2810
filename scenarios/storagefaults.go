package scenarios

// Storage faults: fsyncs that fail (the process fails and recovers: a
// failed fsync may have dropped its dirty pages, so nothing is retried)
// and bit rot on reads of stored payloads (caught by their checksum: the
// broker stops and recovers), with most payloads in blob files and a small
// resident budget so deliveries read them back. Exercises the fatal paths
// of storage errors and the read-back of spilled payloads.

import "github.com/fibril-go/fibril/sim"

// StorageFaults fails fsyncs and rots reads.
func StorageFaults() *sim.Scenario {
	s := base("storage-faults", "fsync errors and bit rot on payload reads")
	f := &s.Faults
	f.FsyncErrorRatio = 0.004
	f.BitRotRatio = 0.1
	f.PowerLossRatio = 0.5
	f.CrashProbabilityPerStep = 0.0002
	s.Workload.LargePayloadRatio = 0.6
	s.Broker.ResidentPayloadBytesMax = 4 << 10
	return s
}
