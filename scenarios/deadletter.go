package scenarios

// Dead-lettering after retries and fails: consumers retry and fail often,
// jobs and events dead-letter into jobs-dlq (custom policies: the node core
// has no operator-set global target yet);
// a few crashes make the node re-send pending copies. Exercises retry
// counting, the dead-letter policy, stroma.dlq.* headers and the
// at-least-once copy hand-off.

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/sim"
)

// DeadLetterAfterRetries drives messages through max_retries and terminal nacks.
func DeadLetterAfterRetries() *sim.Scenario {
	s := base("dead-letter", "retries and fails past max_retries into a dead-letter queue shared by two queues")
	s.Queues = []sim.QueueConfig{
		{Topic: "jobs", Partitions: 1, MaxRetries: 2, DLQ: core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "jobs-dlq"}}},
		{Topic: "jobs-dlq", Partitions: 1, MaxRetries: 5, DeadLetterSink: true},
		{Topic: "events", Partitions: 2, MaxRetries: 1, DLQ: core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "jobs-dlq"}}},
	}
	w := &s.Workload
	w.RetryRatio = 0.3
	w.RetryAfterRatio = 0.05
	w.RetryAfterMaxMs = 200
	w.FailRatio = 0.1
	w.SilentRatio = 0.03
	s.Faults.CrashProbabilityPerStep = 0.0005
	s.Faults.CrashAfterFsyncRatio = 0.01
	return s
}
