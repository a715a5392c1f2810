package admin

import (
	"context"
	"net/http"

	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/broker"
)

// GET /admin/api/queues_debug: idle queue eviction as the Node sees it
// (SPEC 9, docs/idle.md), and its two counters on /metrics. Invariants:
//   - an observation only: the handler changes nothing, so it is not
//     audited;
//   - the view comes from the Node (an operator request to it), never from
//     the driver's own tables, so it is what the machine decided on.

// QueuesDebugView is the answer's shape.
type QueuesDebugView struct {
	Cleanup   QueuesDebugCleanup `json:"cleanup"`
	Queues    []QueueDebugRow    `json:"queues"`
	Truncated bool               `json:"truncated,omitempty"`
	Counters  QueuesDebugCounts  `json:"counters"`
}

type QueuesDebugCleanup struct {
	Enabled                bool   `json:"enabled"`
	EvictAfterMs           int64  `json:"evict_after_ms"`
	SweepIntervalMs        int64  `json:"sweep_interval_ms"`
	PublisherIdleTimeoutMs *int64 `json:"publisher_idle_timeout_ms"`
}

type QueueDebugRow struct {
	Topic       string `json:"topic"`
	Group       string `json:"group"`
	Partition   uint32 `json:"partition"`
	State       string `json:"state"`
	Subscribers int    `json:"subscribers"`
	Publishers  int    `json:"publishers"`
	IdleMs      int64  `json:"idle_ms"`
	LastCleanup string `json:"last_cleanup"`
}

type QueuesDebugCounts struct {
	Evicted  uint64 `json:"evicted"`
	Skipped  uint64 `json:"skipped"`
	Reloaded uint64 `json:"reloaded"`
}

// queuesDebugSource is what this family needs of the broker.
type queuesDebugSource interface {
	QueuesDebug(ctx context.Context) (*node.QueuesDebug, error)
}

// debugView is the JSON shape of the Node's answer.
func debugView(d *node.QueuesDebug) QueuesDebugView {
	v := QueuesDebugView{
		Cleanup: QueuesDebugCleanup{Enabled: d.Cleanup.Enabled, EvictAfterMs: d.Cleanup.EvictAfterMs,
			SweepIntervalMs: d.Cleanup.SweepIntervalMs},
		Queues:    make([]QueueDebugRow, 0, len(d.Rows)),
		Truncated: d.Truncated,
		Counters:  QueuesDebugCounts{Evicted: d.Counters.Evicted, Skipped: d.Counters.Skipped, Reloaded: d.Counters.Reloaded},
	}
	if t := d.Cleanup.PublisherIdleTimeoutMs; t > 0 {
		v.Cleanup.PublisherIdleTimeoutMs = &t
	}
	for _, r := range d.Rows {
		v.Queues = append(v.Queues, QueueDebugRow{Topic: r.Queue.Topic, Group: r.Queue.Group, Partition: r.Queue.Partition,
			State: r.State, Subscribers: r.Subscribers, Publishers: r.Publishers, IdleMs: r.IdleMs, LastCleanup: r.LastCleanup})
	}
	return v
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/queues_debug", s.api(func(w http.ResponseWriter, r *http.Request) error {
			src, err := backend[queuesDebugSource](s)
			if err != nil {
				return err
			}
			d, err := src.QueuesDebug(r.Context())
			if err != nil {
				return problem(http.StatusServiceUnavailable, "not_ready", "the broker did not answer the queues debug view: %v; retry shortly", err)
			}
			writeJSON(w, http.StatusOK, debugView(d))
			return nil
		}))
	})
	metricDefs = append(metricDefs,
		counter("fibril_queue_idle_evictions_total", "Queue partitions unloaded because they were idle (SPEC 9).",
			func(c *broker.Counters) uint64 { return c.IdleEvictions }),
		counter("fibril_queue_reloads_total", "Queue partitions loaded again after an idle eviction.",
			func(c *broker.Counters) uint64 { return c.IdleReloads }),
	)
}
