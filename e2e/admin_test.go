package e2e

// The admin listener of a real `fibril serve` (docs/admin.md): /healthz,
// /readyz, /metrics scraped and parsed as Prometheus text, and the counters
// moved by exactly what a Go client did (publishes, deliveries, a retry,
// acks, a resume, a cut connection whose grace runs out).

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fibril-go/fibril/client"
)

// adminGet GETs path from the admin listener at base.
func adminGet(t *testing.T, base, path string) (int, string) {
	t.Helper()
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// scrapeFibril reads /metrics and returns every unlabelled fibril_ sample.
func scrapeFibril(t *testing.T, base string) map[string]float64 {
	t.Helper()
	status, body := adminGet(t, base, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("/metrics = %d: %s", status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse as the text exposition format: %v\n%s", err, body)
	}
	values := map[string]float64{}
	for name, f := range families {
		// fibril_queue_ready and _inflight are labelled per partition by
		// design (queueops_test.go); the idle eviction counters are not.
		if !strings.HasPrefix(name, "fibril_") || name == "fibril_queue_ready" || name == "fibril_queue_inflight" {
			continue
		}
		if f.GetType() == dto.MetricType_HISTOGRAM || name == "fibril_tcp_reconcile_outcomes_total" {
			continue // not one value; surface_test.go reads them
		}
		if len(f.Metric) != 1 || len(f.Metric[0].Label) != 0 {
			t.Fatalf("%s: %d series with labels %v; want one unlabelled", name, len(f.Metric), f.Metric[0].Label)
		}
		if f.Metric[0].Counter != nil {
			values[name] = f.Metric[0].Counter.GetValue()
		} else {
			values[name] = f.Metric[0].Gauge.GetValue()
		}
	}
	return values
}

// wantDeltas waits until every named metric has moved from before by exactly
// its delta, and fails with the last scrape otherwise.
func wantDeltas(t *testing.T, base, what string, before map[string]float64, deltas map[string]float64) map[string]float64 {
	t.Helper()
	var now map[string]float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		now = scrapeFibril(t, base)
		var off []string
		for name, d := range deltas {
			if _, ok := now[name]; !ok {
				t.Fatalf("%s: %s is not exposed", what, name)
			}
			if got := now[name] - before[name]; got != d {
				off = append(off, name+" moved "+strconv.FormatFloat(got, 'f', -1, 64)+", want "+strconv.FormatFloat(d, 'f', -1, 64))
			}
		}
		if len(off) == 0 {
			return now
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:\n  %s", what, strings.Join(off, "\n  "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAdminMetricsMoveWithTraffic(t *testing.T) {
	const graceMs = 500
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	// No resident payload budget: a payload in a blob file (256 bytes and up)
	// leaves memory once durable and is read back from disk when delivered.
	s := startServer(t, t.TempDir(), "--admin-listen", adminAddr, "--reconnect-grace-ms", strconv.Itoa(graceMs), "--lease-ms", "60000",
		"--resident-payload-mb", "0")
	base := "http://" + adminAddr

	if status, body := adminGet(t, base, "/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", status, body)
	}
	// The broker said "fibril is serving" (startServer waits for it), but
	// /readyz is the probe's own view: give it a moment rather than assume.
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	status, body := adminGet(t, base, "/nope")
	var e struct{ Code, Message string }
	if status != http.StatusNotFound || json.Unmarshal([]byte(body), &e) != nil || e.Code != "not_found" {
		t.Fatalf("/nope = %d %q, want 404 with a JSON error", status, body)
	}

	m0 := scrapeFibril(t, base)
	for _, name := range []string{"fibril_broker_published_total", "fibril_broker_delivered_total", "fibril_tcp_connections_total"} {
		if m0[name] != 0 {
			t.Fatalf("a fresh broker reports %s = %v", name, m0[name])
		}
	}
	// The budget is derived from this process's open-files limit: never 0.
	if m0["fibril_partitions_max"] < 1 {
		t.Fatalf("fibril_partitions_max = %v", m0["fibril_partitions_max"])
	}

	// One TCP client: 5 publishes; 5 deliveries, one retried and delivered
	// again; 5 acks.
	c := dial(t, s, client.TransportTCP)
	ctx := ctxT(t)
	for i := range 5 {
		publishText(t, c, "metrics", "m"+strconv.Itoa(i))
	}
	sub, err := c.SubscribeTopic(ctx, "metrics", client.SubscribeOptions{Prefetch: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		d := next(t, sub, 10*time.Second)
		settle := d.Ack
		if i == 2 {
			settle = d.Retry
		}
		if err := settle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	again := next(t, sub, 10*time.Second)
	if again.Text() != "m2" {
		t.Fatalf("redelivered %q, want m2", again.Text())
	}
	if err := again.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	m1 := wantDeltas(t, base, "after publish and consume", m0, map[string]float64{
		"fibril_broker_published_total":            5,
		"fibril_broker_delivered_total":            6,
		"fibril_broker_redelivered_total":          1,
		"fibril_broker_acked_total":                5,
		"fibril_broker_expired_total":              0,
		"fibril_broker_dead_lettered_total":        0,
		"fibril_tcp_connections_total":             1,
		"fibril_tcp_connections_open":              1,
		"fibril_tcp_resume_new_total":              1,
		"fibril_tcp_resume_accepted_total":         0,
		"fibril_tcp_reconnect_grace_entered_total": 0,
		// The first publish created the one-partition queue.
		"fibril_partitions_declared": 1,
		"fibril_partitions_max":      0,
	})
	// Each confirmed publish and each ack is durable, through at least one
	// fsynced round; rounds batch, so only a lower bound holds.
	if w := m1["fibril_storage_writes_total"] - m0["fibril_storage_writes_total"]; w < 1 {
		t.Fatalf("storage writes moved %v after 5 confirmed publishes", w)
	}

	// A reconnect within the grace: the session is resumed. Whether it went
	// dormant first (grace entered) depends on whether the broker saw the old
	// socket close before the new HELLO, which replaces it either way; the
	// cut below enters the grace for certain.
	if outcome, err := c.Reconnect(ctx); err != nil || outcome != client.ResumeResumed {
		t.Fatalf("Reconnect = %v, %v; want resumed", outcome, err)
	}
	m2 := wantDeltas(t, base, "after a resume", m1, map[string]float64{
		"fibril_tcp_connections_total":             1,
		"fibril_tcp_connections_open":              0,
		"fibril_tcp_resume_accepted_total":         1,
		"fibril_tcp_resume_new_total":              0,
		"fibril_tcp_reconnect_grace_expired_total": 0,
	})
	if entered := m2["fibril_tcp_reconnect_grace_entered_total"] - m1["fibril_tcp_reconnect_grace_entered_total"]; entered > 1 {
		t.Fatalf("one reconnect entered the grace %v times", entered)
	}

	// A second client whose connection is cut and which never comes back:
	// its grace runs out.
	p := newCutProxy(t, s.addr())
	lost := dialVia(t, p, false)
	publishText(t, lost, "metrics-lost", "from-lost")
	p.cut()
	m3 := wantDeltas(t, base, "after a cut connection's grace", m2, map[string]float64{
		"fibril_broker_published_total":            1,
		"fibril_tcp_connections_total":             1,
		"fibril_tcp_connections_open":              0,
		"fibril_tcp_resume_new_total":              1,
		"fibril_tcp_reconnect_grace_entered_total": 1,
		"fibril_tcp_reconnect_grace_expired_total": 1,
	})

	// A 1 KiB payload, published before anyone subscribes, is delivered from
	// the blob file: one storage read. The small ones above were inline.
	if m3["fibril_storage_reads_total"] != 0 {
		t.Fatalf("inline payloads were read back from disk: %v reads", m3["fibril_storage_reads_total"])
	}
	big := strings.Repeat("x", 1024)
	publishText(t, c, "metrics-big", big)
	bigSub, err := c.SubscribeTopic(ctx, "metrics-big", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := next(t, bigSub, 10*time.Second); d.Text() != big {
		t.Fatalf("the 1 KiB payload came back as %d bytes", len(d.Payload))
	} else if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	wantDeltas(t, base, "after a payload read back from disk", m3, map[string]float64{
		"fibril_broker_published_total":        1,
		"fibril_broker_delivered_total":        1,
		"fibril_broker_acked_total":            1,
		"fibril_storage_reads_total":           1,
		"fibril_broker_resident_payload_bytes": 0,
	})
}

// A second broker asking for an admin port in use does not start, and
// says why.
func TestAdminPortInUseStopsTheStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cmd := exec.Command(fibrilBin, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:"+strconv.Itoa(freePort(t)),
		"--admin-listen", taken.Addr().String())
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
		t.Fatalf("serve with the admin port taken exited %d (%v):\n%s", code, err, out)
	}
	if !strings.Contains(string(out), "address already in use") || !strings.Contains(string(out), "--admin-listen") {
		t.Fatalf("the startup error does not say the admin port is taken:\n%s", out)
	}
}

// --admin-listen "" starts no admin listener (what the other e2e tests
// rely on to run many brokers at once).
func TestAdminListenEmptyDisables(t *testing.T) {
	s := startServer(t, t.TempDir(), "--admin-listen", "")
	s.kill() // the log is complete (and no longer written) once the process is gone
	if !strings.Contains(s.log.String(), "fibril is serving") || strings.Contains(s.log.String(), "admin listener") {
		t.Fatalf("the admin listener started although disabled:\n%s", s.log.String())
	}
}
