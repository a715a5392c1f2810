package scenarios

// Streams: plexus streams in all three tiers next to a light work queue.
// Many subscribers, durable (one cursor name each per partition) and
// ephemeral (every start kind but by-time), some filtered on a header,
// some auto-ack, some slow readers; subscribers drop their links and
// resubscribe (streams are not reconciled, a durable one resumes from its
// cursor); crashes and power losses, scheduled and at random; retention by
// records, bytes and age under sustained publishing, so truncation
// snapshots, cursor clamps and backfill reads from the log all happen.
// Exercises DESIGN.md item 8 (checker/streams.go) over the simulator's
// stream driver (sim/broker_stream.go).

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/sim"
)

// Streams runs stream producers and subscribers under crashes.
func Streams() *sim.Scenario {
	s := base("streams", "streams: durable/speculative/ephemeral tiers, filters, slow readers, reconnects, crashes, power loss, retention")
	s.Streams = []sim.StreamConfig{
		{Topic: "ticks", Partitions: 2, Tier: core.TierDurable, MaxRecords: 60},
		{Topic: "quotes", Partitions: 1, Tier: core.TierSpeculative, MaxBytes: 1500},
		{Topic: "pulse", Partitions: 1, Tier: core.TierEphemeral, MaxAgeMs: 1500},
	}
	w := &s.Workload
	w.Producers, w.Consumers, w.MessagesPerProducer = 1, 1, 40
	w.Stream = sim.StreamWorkload{
		Producers:            3,
		Subscribers:          6,
		RecordsPerProducer:   250,
		PublishIntervalMaxMs: 12,
		ConfirmRatio:         0.8,
		DurableRatio:         0.5,
		FilterRatio:          0.3,
		AutoAckRatio:         0.3,
		SlowRatio:            0.004,
		ReconnectRatio:       0.003,
		AckDelayMaxMs:        60,
	}
	f := &s.Faults
	f.CrashProbabilityPerStep = 0.0003
	f.CrashAfterFsyncRatio = 0.005
	f.PowerLossRatio = 0.3
	f.FsyncLatencyMinMs, f.FsyncLatencyMaxMs = 1, 6
	f.GroupCommitWindowMs = 3
	s.Schedule = []sim.ScheduledFault{
		{AtMs: 1500, Kind: sim.FaultCrash},
		{AtMs: 3200, Kind: sim.FaultPowerLoss},
	}
	return s
}
