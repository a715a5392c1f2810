package scenarios

// A dead-letter target that is full or fails to load: jobs dead-letters
// into jobs-dlq, whose depth bound is tiny and whose consumers are slow, so
// the target refuses copies (ErrQueueFull); partition loads fail now and
// then, the target's too. The source must retry every copy with backoff
// and never give up (the defect: it stayed pending_dlq until a restart),
// and settle a source only once its copy is stored.

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/sim"
)

// DeadLetterTargetTrouble dead-letters into a queue that pushes back.
func DeadLetterTargetTrouble() *sim.Scenario {
	s := base("dlq-trouble", "a dead-letter target that is full or fails to load")
	s.Queues = []sim.QueueConfig{
		{Topic: "jobs", Partitions: 2, MaxRetries: 1, DLQ: core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "jobs-dlq"}}},
		{Topic: "jobs-dlq", Partitions: 1, MaxRetries: 5, DeadLetterSink: true, QueueDepthMax: 4},
	}
	w := &s.Workload
	w.FailRatio = 0.3
	w.RetryRatio = 0.2
	w.ProcessMaxMs = 60
	s.Faults.LoadFailRatio = 0.3
	s.Faults.CrashProbabilityPerStep = 0.0002
	s.Broker.DeadLetterRetryMaxMs = 200
	return s
}
