package scenarios

// Snapshots under sustained load: a low snapshot floor makes every Host
// ask for snapshots while publishes keep arriving (the defect: snapshots
// waited for quiescence, so disk use and replay time grew without bound),
// storage writes each once its index is durable and truncates the log
// behind it, and crashes and power losses make recovery start from
// snapshot plus suffix.

import "github.com/fibril-go/fibril/sim"

// SnapshotsUnderLoad snapshots often while traffic flows.
func SnapshotsUnderLoad() *sim.Scenario {
	s := base("snapshots", "snapshots taken under sustained load, with crashes and power losses")
	s.Broker.SnapshotEntriesMin = 40
	w := &s.Workload
	w.MessagesPerProducer = 250
	w.PublishIntervalMaxMs = 12
	w.LargePayloadRatio = 0.3
	f := &s.Faults
	f.CrashProbabilityPerStep = 0.0005
	f.PowerLossRatio = 0.5
	f.FsyncLatencyMinMs, f.FsyncLatencyMaxMs = 1, 5
	return s
}
