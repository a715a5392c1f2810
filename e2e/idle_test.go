package e2e

// Idle queue eviction against the real binary (SPEC 9 T, docs/idle.md):
// with a 1 s window a queue nobody uses is unloaded (queues_debug says so,
// the eviction counter moves) and its messages still deliver, in order,
// after the reload.

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
)

type idleDebug struct {
	Cleanup struct {
		Enabled         bool  `json:"enabled"`
		EvictAfterMs    int64 `json:"evict_after_ms"`
		SweepIntervalMs int64 `json:"sweep_interval_ms"`
	} `json:"cleanup"`
	Queues []struct {
		Topic, Group, State string
		Partition           uint32
		Publishers          int
		LastCleanup         string `json:"last_cleanup"`
	} `json:"queues"`
	Counters struct{ Evicted, Skipped, Reloaded uint64 } `json:"counters"`
}

func queuesDebug(t *testing.T, base string) idleDebug {
	t.Helper()
	status, body := adminGet(t, base, "/admin/api/queues_debug")
	var d idleDebug
	if status != http.StatusOK || json.Unmarshal([]byte(body), &d) != nil {
		t.Fatalf("queues_debug = %d %q", status, body)
	}
	return d
}

func debugState(d idleDebug, topic string) (state, last string) {
	for _, q := range d.Queues {
		if q.Topic == topic {
			return q.State, q.LastCleanup
		}
	}
	return "", ""
}

func TestIdleQueueUnloadsAndDeliversAfterReload(t *testing.T) {
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s := startServer(t, t.TempDir(), "--admin-listen", adminAddr, "--reconnect-grace-ms", "0",
		"--idle-evict-after-ms", "1000", "--idle-sweep-interval-ms", "100")
	base := "http://" + adminAddr
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.log.String())
		}
	})
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	if d := queuesDebug(t, base); !d.Cleanup.Enabled || d.Cleanup.EvictAfterMs != 1000 || d.Cleanup.SweepIntervalMs != 100 {
		t.Fatalf("cleanup settings %+v: --idle-evict-after-ms should enable cleanup", d.Cleanup)
	}

	pub := dial(t, s, client.TransportTCP)
	for i := range 3 {
		publishText(t, pub, "idle-q", "m"+strconv.Itoa(i))
	}
	if state, _ := debugState(queuesDebug(t, base), "idle-q"); state != "loaded" {
		t.Fatalf("a queue just published to is %q, want loaded", state)
	}
	// The publisher's session holds the queue open: it stays loaded while
	// it lives, and is let go when the connection (grace 0) ends.
	pub.Close()
	eventually(t, 10_000, 50, func() bool {
		state, last := debugState(queuesDebug(t, base), "idle-q")
		return state == "unloaded" && last == "evicted"
	})
	// The driver counts the eviction once the partition's storage closed,
	// which may be a moment after the Node's view says unloaded.
	eventually(t, 10_000, 50, func() bool {
		return scrapeFibril(t, base)["fibril_queue_idle_evictions_total"] >= 1
	})

	c := dial(t, s, client.TransportTCP)
	sub, err := c.SubscribeTopic(ctxT(t), "idle-q", client.SubscribeOptions{Prefetch: 8})
	if err != nil {
		t.Fatalf("subscribe after the eviction: %v\n%s", err, s.log.String())
	}
	for i := range 3 {
		d := next(t, sub, 10*time.Second)
		if got := string(d.Payload); got != "m"+strconv.Itoa(i) {
			t.Fatalf("delivery %d after the reload = %q, want m%d", i, got, i)
		}
		if err := d.Ack(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	d := queuesDebug(t, base)
	if state, _ := debugState(d, "idle-q"); state != "loaded" || d.Counters.Reloaded < 1 || d.Counters.Evicted < 1 {
		t.Fatalf("after the reload: state %q, counters %+v", state, d.Counters)
	}
	if m := scrapeFibril(t, base); m["fibril_queue_reloads_total"] < 1 {
		t.Fatalf("fibril_queue_reloads_total = %v after a reload", m["fibril_queue_reloads_total"])
	}
}
