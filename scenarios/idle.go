package scenarios

// Idle queue eviction (SPEC 9, docs/idle.md) under faults: a short idle
// window (40 ms), a sweep every 15 ms and a publisher idle timeout of 30 ms,
// so partitions are unloaded whenever their consumers drop away (sessions
// end at once: no reconnect grace) and their producers pause, and are
// loaded again by the next publish, subscribe or delayed message. Crashes,
// a power loss, dropped sessions and load failures land on partitions that
// are loaded, unloading or unloaded. The existing checkers must hold as
// without eviction: no confirmed publish lost, FIFO first deliveries,
// nothing before its not_before, recovery equal to the durable prefix on
// every reload.

import (
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/sim"
)

// IdleEviction runs the standard queues with idle eviction on.
func IdleEviction() *sim.Scenario {
	s := base("idle-eviction", "idle queue eviction with a 40 ms window under crashes, power loss and dropped sessions")
	w := &s.Workload
	w.Consumers = 2
	w.DisconnectRatio = 0.05
	w.UnsubscribeRatio = 0.03
	w.ReconnectDelayMinMs, w.ReconnectDelayMaxMs = 20, 900
	w.PublishIntervalMaxMs = 60
	w.DelayedRatio, w.DelayMaxMs = 0.1, 400
	w.TTLRatio, w.TTLMinMs, w.TTLMaxMs = 0.05, 200, 2000
	s.Broker.ReconnectGraceMs = 300
	s.Broker.IdleCleanup = node.IdleCleanupConfig{Enabled: true, EvictAfterMs: 40, SweepIntervalMs: 15, PublisherIdleTimeoutMs: 30}
	s.Faults.LoadFailRatio = 0.02
	s.Schedule = []sim.ScheduledFault{
		{AtMs: 800, Kind: sim.FaultDropSessions, Ratio: 0.8},
		{AtMs: 1700, Kind: sim.FaultCrash},
		{AtMs: 2600, Kind: sim.FaultDropSessions, Ratio: 0.8},
		{AtMs: 3400, Kind: sim.FaultPowerLoss},
		{AtMs: 4200, Kind: sim.FaultDropSessions, Ratio: 0.8},
	}
	return s
}

// Extras are scenarios run by their own tests, outside the All() sweep
// (whose seed-to-scenario mapping the mutant table relies on); ByName
// finds them too.
func Extras() []*sim.Scenario {
	return []*sim.Scenario{IdleEviction(), RuntimeOps()}
}
