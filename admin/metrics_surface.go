package admin

// The SPEC 13 metrics the admin surface added (issue 12): wire bytes and
// broken streams, open subscriptions, reconcile requests and outcomes, and
// the partition logs' group commits as histograms. Same rules as
// metrics.go: every value has a real source in the broker, read at scrape
// time; labels are outcomes only (a fixed set), never identities that grow.

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/broker"
)

func init() {
	metricDefs = append(metricDefs,
		counter("fibril_tcp_bytes_in_total", "Wire bytes read from client connections (TCP, TLS and QUIC streams; after TLS).",
			func(c *broker.Counters) uint64 { return c.BytesIn }),
		counter("fibril_tcp_bytes_out_total", "Wire bytes written to client connections.",
			func(c *broker.Counters) uint64 { return c.BytesOut }),
		counter("fibril_tcp_errors_total", "Connections whose byte stream broke the framing (a malformed or oversized frame): answered with an error and closed.",
			func(c *broker.Counters) uint64 { return c.ProtocolErrors }),
		gauge("fibril_subscriptions_open", "Queue and stream subscriptions sessions hold now (dormant sessions' included).",
			func(c *broker.Counters) int64 { return c.SubscriptionsOpen }),
		counter("fibril_tcp_reconcile_requests_total", "RECONCILE_RESULTs sent (one per answered RECONCILE_CLIENT).",
			func(c *broker.Counters) uint64 { return c.Reconciles }),
	)
}

// histogramSource is the broker's histograms and labelled counters.
type histogramSource interface {
	Histograms() []broker.Histogram
	ReconcileOutcomes() [node.ReconcileOutcomeCount]uint64
}

var (
	histogramDescs = map[string]*prometheus.Desc{
		broker.HistogramRoundSeconds: prometheus.NewDesc("fibril_storage_group_commit_seconds",
			"Time one partition log round took to append and fsync (one group commit).", nil, nil),
		broker.HistogramRoundEntries: prometheus.NewDesc("fibril_storage_group_commit_entries",
			"Entries one partition log round made durable (the group commit's batch size).", nil, nil),
		broker.HistogramConfirmSeconds: prometheus.NewDesc("fibril_publish_confirm_seconds",
			"Time from reading a PUBLISH to queueing its PUBLISH_OK (or ERROR), sampled: one publish in 64 per connection.", nil, nil),
	}
	reconcileOutcomesDesc = prometheus.NewDesc("fibril_tcp_reconcile_outcomes_total",
		"Reconcile entries by outcome.", []string{"outcome"}, nil)
)

// surfaceCollector exposes histogramSource's values.
type surfaceCollector struct{ server *Server }

func (surfaceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range histogramDescs {
		ch <- d
	}
	ch <- reconcileOutcomesDesc
}

func (c *surfaceCollector) Collect(ch chan<- prometheus.Metric) {
	src, ok := c.server.attached().(histogramSource)
	if !ok {
		return
	}
	for _, h := range src.Histograms() {
		if d := histogramDescs[h.Name]; d != nil {
			ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum, h.Cumulative)
		}
	}
	outcomes := src.ReconcileOutcomes()
	for i, n := range outcomes {
		ch <- prometheus.MustNewConstMetric(reconcileOutcomesDesc, prometheus.CounterValue, float64(n), node.ReconcileOutcomeNames[i])
	}
}
