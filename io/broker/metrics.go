package broker

import (
	"sync/atomic"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// metrics are broker-wide counters (SPEC §13), fed from what the driver
// carries (envelopes, Ready.Settled, connections, auth checks). They reset
// on restart. What only a machine knows (grace entered or expired, resumes,
// protocol errors) is not counted here.
type metrics struct {
	published    atomic.Uint64
	delivered    atomic.Uint64
	redelivered  atomic.Uint64
	acked        atomic.Uint64
	discarded    atomic.Uint64
	deadLettered atomic.Uint64
	ttlDropped   atomic.Uint64
	connections  atomic.Uint64
	authFailures atomic.Uint64
	protocolErrs atomic.Uint64
	graceEntered atomic.Uint64
	graceExpired atomic.Uint64
	resumed      atomic.Uint64
	// residentPayloadBytes is the payload bytes live messages hold in memory,
	// over all partitions (Config.ResidentPayloadBytesMax bounds it).
	residentPayloadBytes atomic.Int64
	payloadsRead         atomic.Uint64 // stored payloads read back for delivery
	streamEntriesRead    atomic.Uint64 // stream log entries read back for lagging subscribers
}

// countEnvelope counts what the router sees pass: client publishes into
// partitions and deliveries out of them. Counting never decides anything.
func (m *metrics) countEnvelope(env *node.Envelope) {
	switch msg := env.Msg.(type) {
	case *node.Request:
		if pub, ok := msg.Input.(*core.Publish); ok && !pub.System {
			m.published.Add(1)
		}
	case *node.Deliveries:
		m.delivered.Add(uint64(len(msg.Items)))
		for i := range msg.Items {
			if msg.Items[i].Retries > 0 {
				m.redelivered.Add(1)
			}
		}
	}
}

func (m *metrics) settled(s []core.Settlement) {
	for i := range s {
		switch s[i].Kind {
		case core.SettledAcked:
			m.acked.Add(1)
		case core.SettledDiscarded:
			m.discarded.Add(1)
		case core.SettledDeadLettered:
			m.deadLettered.Add(1)
		}
		if s[i].Reason == core.ReasonExpired {
			m.ttlDropped.Add(1)
		}
	}
}

// Counters is a snapshot of the broker's counters.
type Counters struct {
	Published, Delivered, Redelivered, Acked, Discarded, DeadLettered, TTLDropped  uint64
	Connections, AuthFailures, ProtocolErrors, GraceEntered, GraceExpired, Resumed uint64
}

// Counters returns the current counters.
func (b *Broker) Counters() Counters {
	m := b.metrics
	return Counters{
		Published: m.published.Load(), Delivered: m.delivered.Load(), Redelivered: m.redelivered.Load(),
		Acked: m.acked.Load(), Discarded: m.discarded.Load(), DeadLettered: m.deadLettered.Load(),
		TTLDropped: m.ttlDropped.Load(), Connections: m.connections.Load(), AuthFailures: m.authFailures.Load(),
		ProtocolErrors: m.protocolErrs.Load(), GraceEntered: m.graceEntered.Load(), GraceExpired: m.graceExpired.Load(),
		Resumed: m.resumed.Load(),
	}
}
