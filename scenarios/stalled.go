package scenarios

// Stalled and slow clients: connections that send part of a HELLO header
// and stall, that send HELLO and then only PINGs, that announce a frame
// over the size cap, that write frames in pieces with pauses; consumers
// that stop reading so the broker's outbox fills past its bound. The broker
// must close the stalled ones at its handshake and auth timeouts (the
// defect: it held them forever), refuse connections past its limit while
// they hold slots, refuse the oversized frame, reassemble
// split frames, and cut a consumer whose outbox overflows (the session
// goes dormant, its deliveries come back).

import "github.com/fibril-go/fibril/sim"

// StalledClients misbehaves on the wire.
func StalledClients() *sim.Scenario {
	s := base("stalled-clients", "partial headers, no AUTH, oversized frames, split writes, consumers that stop reading")
	f := &s.Faults
	f.StalledHandshakeRatio = 0.08
	f.NoAuthRatio = 0.08
	f.OversizeFrameRatio = 0.03
	f.SplitWriteRatio = 0.2
	f.SplitWriteDelayMaxMs = 150
	w := &s.Workload
	w.NotReadingRatio = 0.02
	w.NotReadingMaxMs = 1500
	w.LargePayloadRatio = 0.6
	w.DisconnectRatio = 0.01
	s.Broker.OutboxBytesMax = 2 * 16 << 10
	// Three rogues hold connection slots with stalled links: the six
	// clients and them share eight, so admission refuses some until the
	// handshake and auth timeouts free them.
	w.Rogues = 3
	s.Broker.ConnectionsMax = 8
	s.Schedule = []sim.ScheduledFault{
		{AtMs: 1000, Kind: sim.FaultSlowConsumers, Ratio: 0.6, DurationMs: 1500},
		{AtMs: 3000, Kind: sim.FaultSlowConsumers, Ratio: 0.6, DurationMs: 2500},
	}
	return s
}
