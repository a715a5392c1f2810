package broker

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/transport/wire"
)

// metrics are broker-wide counters (SPEC §13), fed from what the driver
// carries (envelopes, Ready.Settled, Ready.Counted, connections, auth
// checks, storage rounds). They reset on restart. Invariants:
//   - every field is an atomic written where the driver already is (no
//     lock, no allocation on the publish or deliver path); readers (the
//     admin listener's scrape) only Load;
//   - a counter here has a real source: protocolErrs is still fed by
//     nothing, so Counters reports it and the admin listener leaves it out.
type metrics struct {
	published    atomic.Uint64
	delivered    atomic.Uint64
	redelivered  atomic.Uint64
	acked        atomic.Uint64
	discarded    atomic.Uint64
	deadLettered atomic.Uint64
	ttlDropped   atomic.Uint64
	leaseExpired atomic.Uint64 // Ready.LeaseExpiries
	connections  atomic.Uint64
	authFailures atomic.Uint64
	protocolErrs atomic.Uint64
	graceEntered atomic.Uint64
	graceExpired atomic.Uint64
	// HELLO_OKs by resume outcome (Ready.Counted.HelloOks): resumed is
	// wire.ResumeResumed, resumeNew a fresh session asked for none,
	// resumeRejected a resume identity refused.
	resumed        atomic.Uint64
	resumeNew      atomic.Uint64
	resumeRejected atomic.Uint64
	// connectionsOpen is the connections the broker holds (its conns map).
	connectionsOpen atomic.Int64
	// storageWriteRounds counts partition log write rounds made durable
	// (one fsynced group commit each; logstore.Committer's onDurable).
	storageWriteRounds atomic.Uint64
	// residentPayloadBytes is the payload bytes live messages hold in memory,
	// over all partitions (Config.ResidentPayloadBytesMax bounds it).
	residentPayloadBytes atomic.Int64
	payloadsRead         atomic.Uint64 // stored payloads read back for delivery
	streamEntriesRead    atomic.Uint64 // stream log entries read back for lagging subscribers
	// quarantine is the Node's last quarantine report (Ready.Quarantine;
	// nil: nothing parked since start).
	quarantine atomic.Pointer[node.QuarantineReport]
	// partitionsDeclared and partitionsMax are the Node's last partition
	// figures (Ready.Partitions).
	partitionsDeclared, partitionsMax atomic.Int64
	// Admin surface (admin_surface.go, admin_metrics.go).
	surfaceMetrics
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

// countSession counts what a Session step reported (Ready.Counted).
func (m *metrics) countSession(c *node.SessionCounted) {
	if *c == (node.SessionCounted{}) {
		return // nearly every step: no atomic touched
	}
	m.graceEntered.Add(uint64(c.GraceEntered))
	m.graceExpired.Add(uint64(c.GraceExpired))
	m.resumeNew.Add(uint64(c.HelloOks[wire.ResumeNew]))
	m.resumed.Add(uint64(c.HelloOks[wire.ResumeResumed]))
	m.resumeRejected.Add(uint64(c.HelloOks[wire.ResumeRejected]))
	m.countSurface(c) // admin_metrics.go
}

// Counters is a snapshot of the broker's counters and gauges. Each field is
// read on its own (no lock): two fields may be a few events apart.
type Counters struct {
	Published, Delivered, Redelivered, Acked, Discarded, DeadLettered, TTLDropped uint64
	// LeaseExpiries counts leases that ran out (the message ready again).
	LeaseExpiries                                                                  uint64
	Connections, AuthFailures, ProtocolErrors, GraceEntered, GraceExpired, Resumed uint64
	ResumeNew, ResumeRejected                                                      uint64
	// PayloadsRead counts stored payloads read back from disk for delivery;
	// StreamEntriesRead stream log entries read back for lagging
	// subscribers; StorageWriteRounds durable partition log write rounds.
	PayloadsRead, StreamEntriesRead, StorageWriteRounds uint64
	// Quarantines counts partitions parked by recovery checks since start
	// (SPEC 7); Quarantined is the gauge of those parked now.
	Quarantines uint64
	// IdleEvictions and IdleReloads count idle queue partitions unloaded
	// and loaded again (host_idle.go).
	IdleEvictions, IdleReloads uint64
	// Gauges.
	ConnectionsOpen, ResidentPayloadBytes, Quarantined int64
	// PartitionsDeclared is every queue's and stream's partitions, loaded
	// or not; PartitionsMax the budget a new one is checked against
	// (limits.partitions_max).
	PartitionsDeclared, PartitionsMax int64
	// BytesIn and BytesOut count wire bytes read from and written to client
	// sockets (admin_metrics.go).
	BytesIn, BytesOut uint64
	// SubscriptionsOpen is the subscriptions sessions hold (queue and stream).
	SubscriptionsOpen int64
	// Reconciles counts RECONCILE_RESULTs sent.
	Reconciles uint64
}

// Counters returns the current counters. It takes no lock.
func (b *Broker) Counters() Counters {
	m := b.metrics
	c := Counters{
		Published: m.published.Load(), Delivered: m.delivered.Load(), Redelivered: m.redelivered.Load(),
		Acked: m.acked.Load(), Discarded: m.discarded.Load(), DeadLettered: m.deadLettered.Load(),
		TTLDropped: m.ttlDropped.Load(), LeaseExpiries: m.leaseExpired.Load(), Connections: m.connections.Load(), AuthFailures: m.authFailures.Load(),
		ProtocolErrors: m.protocolErrs.Load(), GraceEntered: m.graceEntered.Load(), GraceExpired: m.graceExpired.Load(),
		Resumed: m.resumed.Load(), ResumeNew: m.resumeNew.Load(), ResumeRejected: m.resumeRejected.Load(),
		PayloadsRead: m.payloadsRead.Load(), StreamEntriesRead: m.streamEntriesRead.Load(),
		StorageWriteRounds: m.storageWriteRounds.Load(),
		ConnectionsOpen:    m.connectionsOpen.Load(), ResidentPayloadBytes: m.residentPayloadBytes.Load(),
		BytesIn: m.bytesIn.Load(), BytesOut: m.bytesOut.Load(),
		SubscriptionsOpen: m.subscriptionsOpen.Load(), Reconciles: m.reconciles.Load(),
		IdleEvictions: b.idle.evictions.Load(), IdleReloads: b.idle.reloads.Load(),
		PartitionsDeclared: m.partitionsDeclared.Load(), PartitionsMax: m.partitionsMax.Load(),
	}
	if q := m.quarantine.Load(); q != nil {
		c.Quarantines, c.Quarantined = q.QuarantinesTotal, int64(len(q.Entries))
	}
	return c
}

// Ready says whether the broker serves: nil once New has recovered the logs
// and Serve was handed a listener, until Close begins or a fatal error; else
// why not. It takes no lock the broker's paths take.
func (b *Broker) Ready() error {
	if err := b.Err(); err != nil {
		return fmt.Errorf("failed: %w", err)
	}
	if b.stopped() {
		return errors.New("stopping")
	}
	if b.listening.Load() == 0 {
		return errors.New("not listening yet")
	}
	return nil
}
