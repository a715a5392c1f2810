package scenarios

// Delays and TTL under clock jumps: delayed publishes, retry-after nacks,
// per-message and queue-default TTLs, slow consumers holding messages past
// their TTL, while the node's clock drifts and jumps both ways. Exercises
// not_before, TTL expiry (never of an inflight message) and the core's
// monotonic view of time.

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/sim"
)

// DelaysAndTTLUnderClockJumps mixes timers with an unreliable clock.
func DelaysAndTTLUnderClockJumps() *sim.Scenario {
	s := base("delay-ttl", "delays, retry-after and TTLs while clocks drift and jump")
	s.Queues = []sim.QueueConfig{
		{Topic: "jobs", Partitions: 1, MaxRetries: 3, DLQ: core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "jobs-dlq"}}},
		{Topic: "jobs-dlq", Partitions: 1, MaxRetries: 5, DeadLetterSink: true},
		{Topic: "events", Partitions: 2, MaxRetries: 2, DefaultTTLMs: 4000},
	}
	w := &s.Workload
	w.DelayedRatio = 0.3
	w.DelayMaxMs = 3000
	w.TTLRatio = 0.3
	w.TTLMinMs, w.TTLMaxMs = 0, 4000
	w.RetryRatio = 0.05
	w.RetryAfterRatio = 0.15
	w.RetryAfterMaxMs = 2000
	w.ProcessMaxMs = 1500
	w.PrefetchMax = 6
	w.SafetyPhaseMs = 7000
	f := &s.Faults
	f.ClockOffsetMaxMs = 2000
	f.ClockDriftMaxPpm = 20_000
	f.ClockJumpMs = 3000
	f.ClockJumpMeanIntervalMs = 800
	f.CrashProbabilityPerStep = 0.0003
	s.Schedule = []sim.ScheduledFault{
		{AtMs: 2000, Kind: sim.FaultClockJump, AmountMs: 5000},
		{AtMs: 3500, Kind: sim.FaultClockJump, AmountMs: -6000},
		{AtMs: 5000, Kind: sim.FaultCrash},
	}
	return s
}
