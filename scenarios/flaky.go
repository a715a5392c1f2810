package scenarios

// Flaky client connections: packet loss, duplicates, latency tails,
// connection resets and network partitions, with consumers that disconnect
// and unsubscribe. Exercises unknown outcomes (publishes whose confirm never
// arrives), subscription end on disconnect, dead delivery tags and
// reconnects.

import "github.com/fibril-go/fibril/sim"

// FlakyClientConnections makes the client network unreliable.
func FlakyClientConnections() *sim.Scenario {
	s := base("flaky-clients", "lossy network, resets, partitions, consumers that disconnect and come back")
	f := &s.Faults
	f.PacketLossRatio = 0.05
	f.PacketDuplicateRatio = 0.05
	f.PacketDelayTailRatio = 0.02
	f.PacketDelayTailMs = 400
	f.ConnectionResetRatio = 0.003
	f.PartitionMeanIntervalMs = 1500
	f.PartitionMeanDurationMs = 700
	f.PartitionClientsRatio = 0.5
	w := &s.Workload
	w.DisconnectRatio = 0.03
	w.UnsubscribeRatio = 0.03
	w.RetryRatio = 0.05
	return s
}
