package e2e

// Runtime settings and the global dead-letter target against a real
// `fibril serve` (docs/runtime-settings.md): a shorter lease applies to the
// next delivery, versions refuse stale writes, a restart keeps the values
// (and ignores a changed seed flag), and a message failing under policy
// global lands in the target.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
)

// adminSend sends method path with a JSON body and returns the status and
// the decoded answer.
func adminSend(t *testing.T, base, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s = %d, not JSON: %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// dig walks a decoded JSON object by keys.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func startRuntimeBroker(t *testing.T, extra ...string) (*server, string) {
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s := startServer(t, t.TempDir(), append([]string{"--admin-listen", adminAddr}, extra...)...)
	base := "http://" + adminAddr
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	return s, base
}

func TestRuntimeSettingsLiveVersionedAndPersisted(t *testing.T) {
	s, base := startRuntimeBroker(t, "--lease-ms", "60000")
	status, got := adminSend(t, base, "GET", "/admin/api/runtime-settings", "")
	if status != 200 || dig(got, "version") != 1.0 || dig(got, "settings", "delivery", "inflight_ttl_ms") != 60000.0 {
		t.Fatalf("first GET = %d %v", status, got)
	}
	if dig(got, "settings", "connection", "reconnect_grace_ms") == nil || dig(got, "settings", "idle_queue_cleanup", "enabled") != false {
		t.Fatalf("GET lacks keys: %v", got)
	}
	// The queue is loaded (under the 60 s lease) before the change: the new
	// lease must reach a running partition, not only ones loaded later.
	c := dial(t, s, client.TransportTCP)
	ctx := ctxT(t)
	if _, err := c.Publisher("rts-lease").PublishConfirmed(ctx, client.Text("leased")); err != nil {
		t.Fatal(err)
	}
	status, got = adminSend(t, base, "PUT", "/admin/api/runtime-settings", `{"expected_version":1,"settings":{"delivery":{"inflight_ttl_ms":400}}}`)
	if status != 200 || dig(got, "version") != 2.0 || dig(got, "settings", "delivery", "inflight_ttl_ms") != 400.0 {
		t.Fatalf("PUT = %d %v", status, got)
	}
	status, got = adminSend(t, base, "PUT", "/admin/api/runtime-settings", `{"expected_version":1,"settings":{"delivery":{"inflight_ttl_ms":900}}}`)
	if status != 409 || dig(got, "code") != "stale_version" || dig(got, "current", "version") != 2.0 {
		t.Fatalf("stale PUT = %d %v", status, got)
	}
	status, got = adminSend(t, base, "PUT", "/admin/api/runtime-settings", `{"expected_version":2,"settings":{"delivery":{"inflight_ttl_ms":0}}}`)
	if msg, _ := dig(got, "message").(string); status != 400 || dig(got, "code") != "bad_setting" || !strings.Contains(msg, "delivery.inflight_ttl_ms") || !strings.Contains(msg, "between 1 and") {
		t.Fatalf("invalid PUT = %d %v", status, got)
	}
	status, got = adminSend(t, base, "PUT", "/admin/api/runtime-settings", `{"expected_version":2,"settings":{"replication":{"confirm_timeout_ms":1}}}`)
	if status != 400 || dig(got, "code") != "bad_json" {
		t.Fatalf("a key with no mechanism = %d %v", status, got)
	}
	status, got = adminSend(t, base, "PUT", "/admin/api/runtime-settings", `{"settings":{}}`)
	if status != 400 || dig(got, "code") != "bad_parameter" {
		t.Fatalf("no expected_version = %d %v", status, got)
	}

	// A delivery leased after the change expires by the new lease: with the
	// startup 60 s lease nothing would come back within the wait below.
	sub, err := c.SubscribeTopic(ctx, "rts-lease", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := next(t, sub, 5*time.Second)
	again := next(t, sub, 10*time.Second) // unsettled: redelivered once the 400 ms lease ran out
	if again.Text() != "leased" || again.Offset != first.Offset {
		t.Fatalf("redelivery %q at %d, first at %d", again.Text(), again.Offset, first.Offset)
	}
	again.Complete(ctx)
	c.Close()

	status, audit := adminSend(t, base, "GET", "/admin/api/audit", "")
	if status != 200 || !strings.Contains(toJSON(audit), "runtime_settings.put") || !strings.Contains(toJSON(audit), "delivery.inflight_ttl_ms=400") {
		t.Fatalf("audit = %d %v", status, audit)
	}

	// A restart with a changed seed keeps the persisted value and says so.
	s.args = append(s.args, "--lease-ms", "45000")
	s.restart()
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	status, got = adminSend(t, base, "GET", "/admin/api/runtime-settings", "")
	if status != 200 || dig(got, "version") != 2.0 || dig(got, "settings", "delivery", "inflight_ttl_ms") != 400.0 {
		t.Fatalf("GET after restart = %d %v", status, got)
	}
	if !strings.Contains(s.log.String(), "persisted values win") || !strings.Contains(s.log.String(), "delivery.inflight_ttl_ms") {
		t.Fatalf("the log does not say the seed was ignored:\n%s", s.log.String())
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestGlobalDLQPutGetClearAndDeadLetters(t *testing.T) {
	s, base := startRuntimeBroker(t)
	status, got := adminSend(t, base, "GET", "/admin/api/global-dlq", "")
	if status != 200 || dig(got, "version") != 0.0 || dig(got, "target") != nil {
		t.Fatalf("first GET = %d %v", status, got)
	}
	status, got = adminSend(t, base, "PUT", "/admin/api/global-dlq", `{"expected_version":0,"target":{"topic":"graveyard","group":""}}`)
	if status != 200 || dig(got, "version") != 1.0 || dig(got, "target", "topic") != "graveyard" {
		t.Fatalf("PUT = %d %v", status, got)
	}
	status, got = adminSend(t, base, "PUT", "/admin/api/global-dlq", `{"expected_version":0,"target":null}`)
	if status != 409 || dig(got, "code") != "stale_version" || dig(got, "current", "target", "topic") != "graveyard" {
		t.Fatalf("stale PUT = %d %v", status, got)
	}
	status, got = adminSend(t, base, "PUT", "/admin/api/global-dlq", `{"expected_version":1,"target":{"topic":"Bad Name"}}`)
	if status != 400 || dig(got, "code") != "bad_name" {
		t.Fatalf("bad target = %d %v", status, got)
	}
	status, got = adminSend(t, base, "PUT", "/admin/api/global-dlq", `{"expected_version":1}`)
	if status != 400 || dig(got, "code") != "bad_parameter" {
		t.Fatalf("missing target = %d %v", status, got)
	}

	// A message that exhausts its retries under policy global lands in the
	// target.
	c := dial(t, s, client.TransportTCP)
	ctx := ctxT(t)
	if _, err := c.DeclareQueue(ctx, client.NewQueueConfig("rts-jobs").Dlq(client.DlqGlobal()).DlqMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publisher("rts-jobs").PublishConfirmed(ctx, client.Text("poison")); err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeTopic(ctx, "rts-jobs", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	next(t, sub, 5*time.Second).Retry(ctx) // max retries 0: the budget is spent
	dead, err := c.SubscribeTopic(ctx, "graveyard", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := next(t, dead, 5*time.Second)
	if d.Text() != "poison" || d.Headers["stroma.dlq.source_topic"] != "rts-jobs" || d.Headers["stroma.dlq.reason"] != "retries_exhausted" {
		t.Fatalf("dead letter %q %v", d.Text(), d.Headers)
	}
	d.Complete(ctx)
	c.Close()

	status, got = adminSend(t, base, "PUT", "/admin/api/global-dlq", `{"expected_version":1,"target":null}`)
	if status != 200 || dig(got, "version") != 2.0 || dig(got, "target") != nil {
		t.Fatalf("clear = %d %v", status, got)
	}
	status, audit := adminSend(t, base, "GET", "/admin/api/audit", "")
	if status != 200 || !strings.Contains(toJSON(audit), `"global_dlq.put"`) || !strings.Contains(toJSON(audit), "graveyard/") {
		t.Fatalf("audit = %d %v", status, audit)
	}
	s.restart()
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	status, got = adminSend(t, base, "GET", "/admin/api/global-dlq", "")
	if status != 200 || dig(got, "version") != 2.0 || dig(got, "target") != nil {
		t.Fatalf("GET after restart = %d %v", status, got)
	}
}
