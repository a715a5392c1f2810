package e2e

// Queue operations through the admin API of a real `fibril serve`
// (docs/admin.md, issue 12): create, list with real counts after
// publishing and leasing, purge (ready gone, inflight kept and still
// settles), delete refused while inflight then accepted (subscribers
// closed with 20 topic_deleted), a republish recreating a fresh queue, a
// delete surviving kill -9, the operator's test publish delivered with its
// header, the topology, the per-queue gauges, and every endpoint's bad
// input.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
)

// adminDo sends method path with body (raw JSON) and decodes the answer.
func queueAdminDo(t *testing.T, base, method, path, body string) (int, map[string]any) {
	t.Helper()
	hc := http.Client{Timeout: 35 * time.Second}
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s = %d: not JSON: %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// listedQueue returns the listed queue topic (nil when absent).
func listedQueue(t *testing.T, base, topic string) map[string]any {
	t.Helper()
	status, out := queueAdminDo(t, base, "GET", "/admin/api/queues", "")
	if status != http.StatusOK {
		t.Fatalf("list = %d %v", status, out)
	}
	for _, q := range out["queues"].([]any) {
		if m := q.(map[string]any); m["topic"] == topic {
			return m
		}
	}
	return nil
}

// waitCounts waits until the listed queue shows ready and inflight.
func waitCounts(t *testing.T, base, topic string, ready, inflight float64) map[string]any {
	t.Helper()
	var q map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		q = listedQueue(t, base, topic)
		if q != nil && q["ready"] == ready && q["inflight"] == inflight {
			return q
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: want ready %v inflight %v, listed %v", topic, ready, inflight, q)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startAdminServer(t *testing.T, dataDir string) (*server, string) {
	t.Helper()
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s := startServer(t, dataDir, "--admin-listen", adminAddr, "--lease-ms", "60000")
	base := "http://" + adminAddr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", s.log.String())
		}
	})
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	return s, base
}

func TestAdminQueueLifecycle(t *testing.T) {
	dataDir := t.TempDir()
	s, base := startAdminServer(t, dataDir)

	// Create: 201 with the Queue, then a re-declare answers 200 (the
	// settings merged, as DECLARE_QUEUE does).
	status, q := queueAdminDo(t, base, "POST", "/admin/api/queues",
		`{"topic":"orders","partition_count":1,"policy":"custom","target":{"topic":"orders-dlq"},"max_retries":3,"default_message_ttl_ms":0}`)
	if status != http.StatusCreated || q["partition_count"] != 1.0 {
		t.Fatalf("create = %d %v", status, q)
	}
	if dlq := q["dlq"].(map[string]any); dlq["policy"] != "custom" || dlq["topic"] != "orders-dlq" || dlq["max_retries"] != 3.0 {
		t.Fatalf("dlq settings: %v", dlq)
	}
	if status, q := queueAdminDo(t, base, "POST", "/admin/api/queues", `{"topic":"orders","max_retries":4}`); status != http.StatusOK ||
		q["dlq"].(map[string]any)["max_retries"] != 4.0 || q["dlq"].(map[string]any)["policy"] != "custom" {
		t.Fatalf("re-declare = %d %v", status, q)
	}
	// A wide queue, never loaded: listed with loaded:false and null counts.
	if status, _ := queueAdminDo(t, base, "POST", "/admin/api/queues", `{"topic":"wide","group":"g1","partition_count":3}`); status != http.StatusCreated {
		t.Fatalf("create wide = %d", status)
	}
	wide := listedQueue(t, base, "wide")
	parts := wide["partitions"].([]any)
	if len(parts) != 3 || wide["group"] != "g1" || wide["loaded_partitions"] != 0.0 {
		t.Fatalf("wide: %v", wide)
	}
	if p := parts[1].(map[string]any); p["loaded"] != false || p["ready"] != nil {
		t.Fatalf("an unloaded partition must say loaded:false with null counts: %v", p)
	}

	// Publish 5, lease 2: listed as ready 3, inflight 2, one consumer.
	c := dial(t, s, client.TransportTCP)
	ctx := ctxT(t)
	for i := range 5 {
		if _, err := c.Publisher("orders").PublishConfirmed(ctx, client.Text(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.SubscribeTopic(ctx, "orders", client.SubscribeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	held := []*client.Delivery{next(t, sub, 5*time.Second), next(t, sub, 5*time.Second)}
	q = waitCounts(t, base, "orders", 3, 2)
	if q["consumers"] != 1.0 || q["loaded_partitions"] != 1.0 {
		t.Fatalf("listed: %v", q)
	}

	// Purge: the 3 ready go, the 2 inflight stay and still settle.
	if status, out := queueAdminDo(t, base, "POST", "/admin/api/queues/purge", `{"topic":"orders"}`); status != http.StatusOK || out["purged"] != 3.0 {
		t.Fatalf("purge = %d %v", status, out)
	}
	waitCounts(t, base, "orders", 0, 2)

	// Delete while 2 are inflight: 409 in_use, saying how many.
	status, out := queueAdminDo(t, base, "POST", "/admin/api/queues/delete", `{"topic":"orders"}`)
	if status != http.StatusConflict || out["code"] != "in_use" || !strings.Contains(out["message"].(string), "2 messages inflight") {
		t.Fatalf("delete with inflight = %d %v", status, out)
	}
	for _, d := range held {
		if err := d.Complete(ctx); err != nil {
			t.Fatalf("settling a delivery held across the purge: %v", err)
		}
	}
	waitCounts(t, base, "orders", 0, 0)
	nothing(t, sub, 200*time.Millisecond) // nothing purged comes back

	// Delete: accepted; the subscriber is closed with 20 topic_deleted.
	if status, out := queueAdminDo(t, base, "POST", "/admin/api/queues/delete", `{"topic":"orders"}`); status != http.StatusOK || out["deleted"] != true {
		t.Fatalf("delete = %d %v", status, out)
	}
	select {
	case _, open := <-sub.Deliveries():
		if open {
			t.Fatal("a delivery after the delete")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription was not closed by the delete")
	}
	var closed *client.SubscriptionClosedError
	if !errors.As(sub.CloseReason(), &closed) || closed.Code != client.ReasonTopicDeleted {
		t.Fatalf("close reason %v, want topic_deleted (20)", sub.CloseReason())
	}
	if listedQueue(t, base, "orders") != nil {
		t.Fatal("a deleted queue is still listed")
	}
	if status, out := queueAdminDo(t, base, "POST", "/admin/api/queues/delete", `{"topic":"orders"}`); status != http.StatusNotFound || out["code"] != "not_found" {
		t.Fatalf("delete of a deleted queue = %d %v", status, out)
	}

	// A later publish creates a fresh, empty queue (one partition, implicit):
	// the client's first try may meet the old partition gone (retryable).
	eventually(t, 10_000, 50, func() bool {
		_, err := c.Publisher("orders").PublishConfirmed(ctx, client.Text("fresh"))
		if err != nil {
			t.Logf("republish: %v", err)
		}
		return err == nil
	})
	q = waitCounts(t, base, "orders", 1, 0)
	if q["partition_count"] != 1.0 || q["dlq"].(map[string]any)["policy"] != "discard" {
		t.Fatalf("recreated queue kept old settings: %v", q)
	}

	// Delete again and kill -9: the queue stays gone, its data too.
	if status, out := queueAdminDo(t, base, "POST", "/admin/api/queues/delete", `{"topic":"orders"}`); status != http.StatusOK {
		t.Fatalf("second delete = %d %v", status, out)
	}
	c.Close()
	s.kill()
	s.start()
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	if listedQueue(t, base, "orders") != nil {
		t.Fatal("a deleted queue came back after kill -9")
	}
	eventually(t, 5000, 20, func() bool {
		_, err := os.Stat(filepath.Join(dataDir, "queues", "orders"))
		return errors.Is(err, os.ErrNotExist)
	})
	if listedQueue(t, base, "wide") == nil {
		t.Fatal("a queue nobody deleted is gone after the restart")
	}
	// Recreated after the restart, it holds only what is published now:
	// the "fresh" message ready at the second delete went with the queue.
	c2 := dial(t, s, client.TransportTCP)
	if _, err := c2.Publisher("orders").PublishConfirmed(ctx, client.Text("after restart")); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, base, "orders", 1, 0)
}

func TestAdminTestPublishTopologyAndGauges(t *testing.T) {
	s, base := startAdminServer(t, t.TempDir())
	status, out := queueAdminDo(t, base, "POST", "/admin/api/publish", `{"topic":"probe","text":"hello","content_type":"text/plain"}`)
	if status != http.StatusOK || out["partition"] != 0.0 || out["offset"] != 0.0 {
		t.Fatalf("publish = %d %v", status, out)
	}
	c := dial(t, s, client.TransportTCP)
	ctx := ctxT(t)
	sub, err := c.SubscribeTopic(ctx, "probe", client.SubscribeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	d := next(t, sub, 5*time.Second)
	if d.Text() != "hello" || d.Headers["fibril.test"] != "admin" {
		t.Fatalf("delivered %q headers %v", d.Text(), d.Headers)
	}
	waitCounts(t, base, "probe", 0, 1)

	status, topo := queueAdminDo(t, base, "GET", "/admin/api/topology", "")
	if status != http.StatusOK {
		t.Fatalf("topology = %d %v", status, topo)
	}
	nodeInfo := topo["node"].(map[string]any)
	owner, _ := nodeInfo["owner_id"].(string)
	if len(owner) != 32 || nodeInfo["name"] == "" {
		t.Fatalf("node: %v", nodeInfo)
	}
	queues := topo["queues"].([]any)
	if len(queues) != 1 || queues[0].(map[string]any)["topic"] != "probe" ||
		queues[0].(map[string]any)["partitions"].([]any)[0].(map[string]any)["owner"] != owner {
		t.Fatalf("topology queues: %v", queues)
	}

	// A partition that stepped nothing since the observations were switched
	// on is observed too (its runner is poked): a fresh broker's idle
	// queue appears on the second scrape.
	s.restart()
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	if status, out := queueAdminDo(t, base, "POST", "/admin/api/purge-nothing", "{}"); status != http.StatusNotFound {
		t.Fatalf("unknown path = %d %v", status, out)
	}
	c2 := dial(t, s, client.TransportTCP)
	if _, err := c2.SubscribeTopic(ctx, "probe", client.SubscribeOptions{Prefetch: 4}); err != nil { // loads it, takes the redelivery
		t.Fatal(err)
	}
	adminGet(t, base, "/metrics") // switches observations on
	var metrics string
	eventually(t, 5000, 20, func() bool {
		_, metrics = adminGet(t, base, "/metrics")
		return strings.Contains(metrics, `fibril_queue_inflight{group="",partition="0",topic="probe"} 1`)
	})
	if !strings.Contains(metrics, `fibril_queue_inflight{group="",partition="0",topic="probe"} 1`) ||
		!strings.Contains(metrics, `fibril_queue_ready{group="",partition="0",topic="probe"} 0`) {
		t.Fatalf("per-queue gauges missing:\n%s", metrics)
	}
}

func TestAdminQueueEndpointsRefuseBadInput(t *testing.T) {
	_, base := startAdminServer(t, t.TempDir())
	big := `{"topic":"` + strings.Repeat("a", 1<<20) + `"}`
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"create malformed", "POST", "/admin/api/queues", `{"topic":`, 400, "bad_json"},
		{"create unknown field", "POST", "/admin/api/queues", `{"topic":"a","partitions":2}`, 400, "bad_json"},
		{"create bad name", "POST", "/admin/api/queues", `{"topic":"has space"}`, 400, "bad_name"},
		{"create no topic", "POST", "/admin/api/queues", `{}`, 400, "bad_name"},
		{"create bad group", "POST", "/admin/api/queues", `{"topic":"a","group":"..x"}`, 400, "bad_name"},
		{"create zero partitions", "POST", "/admin/api/queues", `{"topic":"a","partition_count":0}`, 400, "bad_parameter"},
		{"create too many partitions", "POST", "/admin/api/queues", `{"topic":"a","partition_count":100000}`, 400, "bad_parameter"},
		{"create bad policy", "POST", "/admin/api/queues", `{"topic":"a","policy":"sometimes"}`, 400, "bad_parameter"},
		{"create custom without target", "POST", "/admin/api/queues", `{"topic":"a","policy":"custom"}`, 400, "bad_parameter"},
		{"create custom into itself", "POST", "/admin/api/queues", `{"topic":"a","policy":"custom","target":{"topic":"a"}}`, 400, "bad_parameter"},
		{"create negative ttl", "POST", "/admin/api/queues", `{"topic":"a","default_message_ttl_ms":-1}`, 400, "bad_parameter"},
		{"create oversized", "POST", "/admin/api/queues", big, 413, "body_too_large"},
		{"delete malformed", "POST", "/admin/api/queues/delete", `[1,2`, 400, "bad_json"},
		{"delete unknown field", "POST", "/admin/api/queues/delete", `{"topic":"a","force":true}`, 400, "bad_json"},
		{"delete bad name", "POST", "/admin/api/queues/delete", `{"topic":"a/b"}`, 400, "bad_name"},
		{"delete unknown queue", "POST", "/admin/api/queues/delete", `{"topic":"never"}`, 404, "not_found"},
		{"delete oversized", "POST", "/admin/api/queues/delete", big, 413, "body_too_large"},
		{"purge malformed", "POST", "/admin/api/queues/purge", `nope`, 400, "bad_json"},
		{"purge unknown field", "POST", "/admin/api/queues/purge", `{"topic":"a","all":1}`, 400, "bad_json"},
		{"purge bad name", "POST", "/admin/api/queues/purge", `{"topic":""}`, 400, "bad_name"},
		{"purge unknown queue", "POST", "/admin/api/queues/purge", `{"topic":"never"}`, 404, "not_found"},
		{"purge oversized", "POST", "/admin/api/queues/purge", big, 413, "body_too_large"},
		{"publish malformed", "POST", "/admin/api/publish", `{"topic":"a",`, 400, "bad_json"},
		{"publish unknown field", "POST", "/admin/api/publish", `{"topic":"a","text":"x","headers":{}}`, 400, "bad_json"},
		{"publish bad name", "POST", "/admin/api/publish", `{"topic":"x y","text":"x"}`, 400, "bad_name"},
		{"publish no text", "POST", "/admin/api/publish", `{"topic":"a"}`, 400, "bad_parameter"},
		{"publish bad content type", "POST", "/admin/api/publish", `{"topic":"a","text":"x","content_type":"nonsense"}`, 400, "bad_parameter"},
		{"publish partition out of range", "POST", "/admin/api/publish", `{"topic":"a2","text":"x","partition":5}`, 400, "bad_parameter"},
		{"publish oversized", "POST", "/admin/api/publish", big, 413, "body_too_large"},
	}
	for _, tc := range cases {
		status, out := queueAdminDo(t, base, tc.method, tc.path, tc.body)
		msg, _ := out["message"].(string)
		if status != tc.status || out["code"] != tc.code || msg == "" {
			t.Errorf("%s: %d %v, want %d %s with a message", tc.name, status, out, tc.status, tc.code)
		}
	}
	// Nothing was created by the refusals.
	if status, out := queueAdminDo(t, base, "GET", "/admin/api/queues", ""); status != 200 || len(out["queues"].([]any)) > 1 {
		t.Fatalf("queues after bad input: %v", out)
	}
	_ = bytes.MinRead
}
