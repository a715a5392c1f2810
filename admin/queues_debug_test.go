package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// debugSource is a broker that answers the queues debug view.
type debugSource struct {
	fakeSource
	view *node.QueuesDebug
	err  error
}

func (d *debugSource) QueuesDebug(context.Context) (*node.QueuesDebug, error) { return d.view, d.err }

func TestQueuesDebugShape(t *testing.T) {
	s := newServer(quietLogger())
	wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/admin/api/queues_debug"), http.StatusServiceUnavailable, "starting")
	s.Attach(&fakeSource{})
	wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/admin/api/queues_debug"), http.StatusNotImplemented, "not_implemented")

	src := &debugSource{view: &node.QueuesDebug{
		Cleanup: node.IdleCleanupConfig{Enabled: true, EvictAfterMs: 1000, SweepIntervalMs: 100},
		Rows: []node.QueueDebugRow{
			{Queue: core.QueueID{Topic: "a", Group: "g", Partition: 1}, State: "unloaded", IdleMs: 7, LastCleanup: "evicted"},
			{Queue: core.QueueID{Topic: "b"}, State: "loaded", Subscribers: 2, Publishers: 3, LastCleanup: "skipped: leases"},
		},
		Counters: node.IdleCounters{Evicted: 4, Skipped: 5, Reloaded: 6},
	}}
	s.Attach(src)
	rec := do(t, s.Handler(), http.MethodGet, "/admin/api/queues_debug")
	if rec.Code != http.StatusOK {
		t.Fatalf("queues_debug = %d %s", rec.Code, rec.Body.String())
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	cleanup := got["cleanup"].(map[string]any)
	if cleanup["enabled"] != true || cleanup["evict_after_ms"] != 1000.0 || cleanup["sweep_interval_ms"] != 100.0 || cleanup["publisher_idle_timeout_ms"] != nil {
		t.Fatalf("cleanup %v", cleanup)
	}
	queues := got["queues"].([]any)
	first := queues[0].(map[string]any)
	for k, v := range map[string]any{"topic": "a", "group": "g", "partition": 1.0, "state": "unloaded", "subscribers": 0.0,
		"publishers": 0.0, "idle_ms": 7.0, "last_cleanup": "evicted"} {
		if first[k] != v {
			t.Errorf("queues[0].%s = %v, want %v", k, first[k], v)
		}
	}
	if c := got["counters"].(map[string]any); c["evicted"] != 4.0 || c["skipped"] != 5.0 || c["reloaded"] != 6.0 {
		t.Fatalf("counters %v", c)
	}
	// A Node that does not answer is a 503 that says to retry, not a hang.
	src.err = errors.New("deadline exceeded")
	wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/admin/api/queues_debug"), http.StatusServiceUnavailable, "not_ready")
}
