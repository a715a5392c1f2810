package scenarios

// Cohorts: exclusive consumer groups (docs/cohorts.md). Two cohort queues,
// orders (4 partitions, cohort "billing") and ledger (1 partition, cohort
// "audit": one member works, the rest stand by), take keyed publishes
// (x-key, x-seq per producer and key) next to an ordinary work queue.
// Five members subscribe exclusively, the first two to every partition,
// the others to every partition or to a subset, some with a
// consumer_target; they keep their member id across reconnects and new
// sessions (some start over as new members), settle with acks, nacks,
// acks past their lease and never, leave (unsubscribing everything or one
// partition) and rejoin, vanish within the 1 s grace (resumed) or past it
// (the session ends and the survivors take over), or open a new session at
// once while the old one is dormant (the member moves). Crashes and power
// losses at random and scheduled (recovered leases keep the gate shut),
// packet loss, resets, partitions, dropped sessions and slow readers.
// Exercises DESIGN.md item 7 (checker/cohorts.go) over the Node's cohort
// registry, the Session's member ids and notices, and the partition gate.

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/sim"
)

// Cohorts runs cohort members through rebalances under crashes.
func Cohorts() *sim.Scenario {
	s := base("cohorts", "exclusive consumer groups: joins, leaves, vanishes inside and outside the grace, moved members, crashes, power loss")
	s.Queues = []sim.QueueConfig{
		{Topic: "jobs", Partitions: 1, MaxRetries: 3, DLQ: core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "jobs-dlq"}}},
		{Topic: "jobs-dlq", Partitions: 1, MaxRetries: 5, DeadLetterSink: true},
		{Topic: "orders", Partitions: 4, MaxRetries: 10, Cohort: "billing"},
		{Topic: "ledger", Partitions: 1, MaxRetries: 10, Cohort: "audit"},
	}
	w := &s.Workload
	w.Producers, w.Consumers, w.MessagesPerProducer = 3, 1, 200
	w.DelayedRatio, w.DelayMaxMs = 0.03, 800
	w.Cohort = sim.CohortWorkload{
		Members:          5,
		SubsetRatio:      0.5,
		TargetRatio:      0.3,
		AutoAckRatio:     0.05,
		RetryRatio:       0.03,
		SlowRatio:        0.01,
		SilentRatio:      0.005,
		LeaveRatio:       0.015,
		PartialRatio:     0.015,
		VanishRatio:      0.012,
		VanishLongRatio:  0.01,
		CloseRatio:       0.008,
		FreshMemberRatio: 0.3,
		RejoinDelayMinMs: 50,
		RejoinDelayMaxMs: 800,
	}
	f := &s.Faults
	f.CrashProbabilityPerStep = 0.0003
	f.CrashAfterFsyncRatio = 0.005
	f.PowerLossRatio = 0.3
	f.PacketLossRatio = 0.01
	f.ConnectionResetRatio = 0.0005
	f.PartitionMeanIntervalMs, f.PartitionMeanDurationMs, f.PartitionClientsRatio = 3000, 400, 0.3
	f.FsyncLatencyMinMs, f.FsyncLatencyMaxMs = 1, 6
	f.GroupCommitWindowMs = 3
	s.Schedule = []sim.ScheduledFault{
		{AtMs: 1500, Kind: sim.FaultCrash},
		{AtMs: 2300, Kind: sim.FaultDropSessions, Ratio: 0.5},
		{AtMs: 3200, Kind: sim.FaultPowerLoss},
		{AtMs: 4000, Kind: sim.FaultSlowConsumers, Ratio: 0.3, DurationMs: 600},
	}
	return s
}
