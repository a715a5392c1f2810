package admin

// The /metrics collector (SPEC 13). Invariants:
//   - values are read at scrape time from the broker's atomics
//     (broker.Counters): the publish and deliver paths only do the atomic
//     adds they did before, with no lock and no allocation for a metric;
//   - every metric listed has a real source in the broker; SPEC 13 names
//     without one (replication) are left out rather than reported as zero
//     (docs/admin.md); metrics_surface.go adds wire bytes, framing errors,
//     open subscriptions, reconciles and the group-commit histograms;
//   - no labels here (metrics_surface.go's outcome label is a fixed set;
//     the per-queue gauges, labelled by partition and bounded by the loaded
//     partitions, are queues.go's collector): nothing here can grow with
//     the number of queues or clients.

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibril-go/fibril/io/broker"
)

// metricDef is one exposed metric and where its value comes from.
type metricDef struct {
	desc      *prometheus.Desc
	valueType prometheus.ValueType
	value     func(c *broker.Counters) float64
}

func counter(name, help string, value func(c *broker.Counters) uint64) metricDef {
	return metricDef{
		desc:      prometheus.NewDesc(name, help, nil, nil),
		valueType: prometheus.CounterValue,
		value:     func(c *broker.Counters) float64 { return float64(value(c)) },
	}
}

func gauge(name, help string, value func(c *broker.Counters) int64) metricDef {
	return metricDef{
		desc:      prometheus.NewDesc(name, help, nil, nil),
		valueType: prometheus.GaugeValue,
		value:     func(c *broker.Counters) float64 { return float64(value(c)) },
	}
}

// metricDefs is every metric /metrics exposes, in exposition order.
var metricDefs = []metricDef{
	counter("fibril_broker_published_total", "Messages clients published into queue partitions (system publishes such as dead-letter moves are not counted).",
		func(c *broker.Counters) uint64 { return c.Published }),
	counter("fibril_broker_delivered_total", "Deliveries handed out by queue partitions, redeliveries included.",
		func(c *broker.Counters) uint64 { return c.Delivered }),
	counter("fibril_broker_redelivered_total", "Deliveries of a message that had been delivered before (retries > 0).",
		func(c *broker.Counters) uint64 { return c.Redelivered }),
	counter("fibril_broker_acked_total", "Messages settled as acked (complete), once durable.",
		func(c *broker.Counters) uint64 { return c.Acked }),
	counter("fibril_broker_expired_total", "Leases that ran out before a settle (the message was made ready again).",
		func(c *broker.Counters) uint64 { return c.LeaseExpiries }),
	counter("fibril_broker_ttl_dropped_total", "Messages that reached a final outcome (dropped or dead-lettered) because their TTL ran out.",
		func(c *broker.Counters) uint64 { return c.TTLDropped }),
	counter("fibril_broker_dead_lettered_total", "Messages settled by a move to a dead-letter queue.",
		func(c *broker.Counters) uint64 { return c.DeadLettered }),
	counter("fibril_broker_discarded_total", "Messages settled by being dropped without a dead-letter queue (DLQ policy discard).",
		func(c *broker.Counters) uint64 { return c.Discarded }),
	gauge("fibril_broker_resident_payload_bytes", "Payload bytes of live messages held in memory over all partitions (bounded by --resident-payload-mb).",
		func(c *broker.Counters) int64 { return c.ResidentPayloadBytes }),
	counter("fibril_storage_reads_total", "Stored payloads read back from a partition's blob files for delivery.",
		func(c *broker.Counters) uint64 { return c.PayloadsRead }),
	counter("fibril_storage_writes_total", "Partition log write rounds made durable (one fsynced group commit each).",
		func(c *broker.Counters) uint64 { return c.StorageWriteRounds }),
	counter("fibril_stream_entries_read_total", "Stream log entries read back from disk for subscribers behind the in-memory tail.",
		func(c *broker.Counters) uint64 { return c.StreamEntriesRead }),
	counter("fibril_tcp_connections_total", "Wire connections accepted (TCP, TLS and QUIC streams).",
		func(c *broker.Counters) uint64 { return c.Connections }),
	gauge("fibril_tcp_connections_open", "Wire connections open now.",
		func(c *broker.Counters) int64 { return c.ConnectionsOpen }),
	counter("fibril_tcp_auth_failures_total", "Password checks that failed, or were refused because the check queue was full (a mismatch for the built-in fibril user is not counted).",
		func(c *broker.Counters) uint64 { return c.AuthFailures }),
	counter("fibril_tcp_resume_new_total", "HELLO_OKs that started a session for a client asking to resume none.",
		func(c *broker.Counters) uint64 { return c.ResumeNew }),
	counter("fibril_tcp_resume_accepted_total", "HELLO_OKs that resumed a session within its reconnect grace.",
		func(c *broker.Counters) uint64 { return c.Resumed }),
	counter("fibril_tcp_resume_rejected_total", "HELLO_OKs that refused a resume identity (wrong token).",
		func(c *broker.Counters) uint64 { return c.ResumeRejected }),
	counter("fibril_tcp_reconnect_grace_entered_total", "Authenticated sessions that lost their transport and wait out the reconnect grace.",
		func(c *broker.Counters) uint64 { return c.GraceEntered }),
	counter("fibril_tcp_reconnect_grace_expired_total", "Sessions whose reconnect grace ran out (their deliveries requeued).",
		func(c *broker.Counters) uint64 { return c.GraceExpired }),
	gauge("fibril_partitions_declared", "Partitions of every queue and stream together, loaded or not: a declare past fibril_partitions_max is refused.",
		func(c *broker.Counters) int64 { return c.PartitionsDeclared }),
	gauge("fibril_partitions_max", "The partition budget (limits.partitions_max, by default derived from the open-files limit).",
		func(c *broker.Counters) int64 { return c.PartitionsMax }),
	gauge("fibril_recovery_quarantined", "Partitions parked now because their log failed a recovery check (GET /admin/api/quarantine lists them).",
		func(c *broker.Counters) int64 { return c.Quarantined }),
	counter("fibril_recovery_quarantines_total", "Partitions parked by recovery checks since the broker started (again after each restart: detection is lazy).",
		func(c *broker.Counters) uint64 { return c.Quarantines }),
}

// collector is a prometheus.Collector over the attached broker's counters.
type collector struct{ server *Server }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for i := range metricDefs {
		ch <- metricDefs[i].desc
	}
}

// Collect reads the counters once per scrape; before Attach (the broker is
// still recovering) it reports nothing rather than zeros.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	src := c.server.attached()
	if src == nil {
		return
	}
	counters := src.Counters()
	for i := range metricDefs {
		d := &metricDefs[i]
		ch <- prometheus.MustNewConstMetric(d.desc, d.valueType, d.value(&counters))
	}
}
