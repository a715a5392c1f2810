package broker

import (
	"sync/atomic"

	"github.com/fibril-go/fibril/core/node"
)

// surfaceMetrics are the SPEC 13 metrics the admin surface added: bytes on
// the wire, open subscriptions, and the partition logs' group commits
// (round write+fsync latency, entries per round). Invariants:
//   - atomics only, written where the driver already is: one add per
//     socket read or write (not per frame), one observation per durable
//     round on its committer's goroutine; no lock, no allocation
//     (TestSurfaceMetricsDoNotAllocate);
//   - histograms have fixed bounds: nothing grows with traffic.
type surfaceMetrics struct {
	bytesIn  atomic.Uint64
	bytesOut atomic.Uint64
	// subscriptionsOpen is subscriptions opened minus closed, as the
	// sessions report them (Ready.Counted).
	subscriptionsOpen atomic.Int64
	// roundSeconds: one partition log round's append and fsync; roundEntries
	// the entries it made durable (the group commit's batch).
	roundSeconds histogram
	roundEntries histogram
	// confirmSeconds: sampled publish-to-confirm latency (confirm_latency.go).
	confirmSeconds histogram
	// reconciles counts RECONCILE_RESULTs; reconcileOutcomes their entries
	// by outcome (node.ReconcileOutcome).
	reconciles        atomic.Uint64
	reconcileOutcomes [node.ReconcileOutcomeCount]atomic.Uint64
}

// countSurface counts what a Session step reported for the surface.
func (m *metrics) countSurface(c *node.SessionCounted) {
	m.subscriptionsOpen.Add(int64(c.SubsOpened) - int64(c.SubsClosed))
	if c.Reconciles == 0 {
		return
	}
	m.reconciles.Add(uint64(c.Reconciles))
	for i := range c.ReconcileOutcomes {
		if n := c.ReconcileOutcomes[i]; n > 0 {
			m.reconcileOutcomes[i].Add(uint64(n))
		}
	}
}

// ReconcileOutcomes reads the reconcile outcome counters, by outcome.
func (b *Broker) ReconcileOutcomes() [node.ReconcileOutcomeCount]uint64 {
	var out [node.ReconcileOutcomeCount]uint64
	for i := range out {
		out[i] = b.metrics.reconcileOutcomes[i].Load()
	}
	return out
}

// histogramBucketsMax bounds a histogram's buckets.
const histogramBucketsMax = 16

// Bounds, upper inclusive, ascending.
var (
	roundSecondsBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	roundEntriesBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}
)

// histogram is a fixed-bucket histogram of atomics. counts[i] counts
// observations <= bounds[i] and > bounds[i-1]; counts[len(bounds)] the rest.
type histogram struct {
	counts [histogramBucketsMax + 1]atomic.Uint64
	count  atomic.Uint64
	// sumMicro is the sum in millionths of the unit (seconds: µs), so it
	// is an integer atomic.
	sumMicro atomic.Uint64
}

func (h *histogram) observe(bounds []float64, v float64) {
	assertTrue(len(bounds) <= histogramBucketsMax, "a histogram has at most histogramBucketsMax bounds")
	i := 0
	for i < len(bounds) && v > bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.count.Add(1)
	if v > 0 {
		h.sumMicro.Add(uint64(v * 1e6))
	}
}

// observeRound is the committers' round observer (logstore.ObserveRounds).
func (m *metrics) observeRound(entries uint64, writeNs int64) {
	m.roundSeconds.observe(roundSecondsBounds, float64(writeNs)/1e9)
	m.roundEntries.observe(roundEntriesBounds, float64(entries))
}

// Histogram is a snapshot of one histogram, as Prometheus takes it:
// cumulative counts per upper bound.
type Histogram struct {
	Name       string
	Count      uint64
	Sum        float64
	Cumulative map[float64]uint64
}

func (h *histogram) snapshot(name string, bounds []float64) Histogram {
	out := Histogram{Name: name, Count: h.count.Load(), Sum: float64(h.sumMicro.Load()) / 1e6,
		Cumulative: make(map[float64]uint64, len(bounds))}
	var acc uint64
	for i, b := range bounds {
		acc += h.counts[i].Load()
		out.Cumulative[b] = acc
	}
	return out
}

// Histogram names (without the fibril_ prefix the admin listener adds).
const (
	HistogramRoundSeconds = "storage_group_commit_seconds"
	HistogramRoundEntries = "storage_group_commit_entries"
)

// Histograms snapshots the broker's histograms (for a scrape).
func (b *Broker) Histograms() []Histogram {
	m := b.metrics
	return []Histogram{
		m.roundSeconds.snapshot(HistogramRoundSeconds, roundSecondsBounds),
		m.roundEntries.snapshot(HistogramRoundEntries, roundEntriesBounds),
		m.confirmSeconds.snapshot(HistogramConfirmSeconds, confirmSecondsBounds),
	}
}
