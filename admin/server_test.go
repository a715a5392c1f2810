package admin

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fibril-go/fibril/io/broker"
)

// fakeSource is a broker as the listener sees it.
type fakeSource struct {
	notReady atomic.Pointer[error]
	counters broker.Counters
}

func (f *fakeSource) Ready() error {
	if err := f.notReady.Load(); err != nil {
		return *err
	}
	return nil
}

func (f *fakeSource) Counters() broker.Counters { return f.counters }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func do(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

// wantJSONError checks status and that the body is {"code","message"} with code.
func wantJSONError(t *testing.T, rec *httptest.ResponseRecorder, status int, code string) apiError {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d (body %q)", rec.Code, status, rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	var e apiError
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body is not {code, message}: %v", err)
	}
	if e.Code != code || e.Message == "" {
		t.Fatalf("error %+v, want code %q and a message", e, code)
	}
	return e
}

func TestHealthzAlwaysOK(t *testing.T) {
	s := newServer(quietLogger())
	for _, stage := range []string{"recovering", "attached", "stopping"} {
		switch stage {
		case "attached":
			s.Attach(&fakeSource{})
		case "stopping":
			s.Stopping()
		}
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			rec := do(t, s.Handler(), method, "/healthz")
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: %s /healthz = %d, want 200", stage, method, rec.Code)
			}
			if method == http.MethodGet && rec.Body.String() != "ok\n" {
				t.Fatalf("%s: /healthz body %q, want ok", stage, rec.Body.String())
			}
		}
	}
}

func TestHealthReadyzFollowsTheBroker(t *testing.T) {
	s := newServer(quietLogger())
	wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/readyz"), http.StatusServiceUnavailable, "starting")

	src := &fakeSource{}
	s.Attach(src)
	rec := do(t, s.Handler(), http.MethodGet, "/readyz")
	if rec.Code != http.StatusOK || rec.Body.String() != "ok\n" {
		t.Fatalf("attached and ready: /readyz = %d %q, want 200 ok", rec.Code, rec.Body.String())
	}

	failed := errors.New("failed: partition q/0: storage failed")
	src.notReady.Store(&failed)
	e := wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/readyz"), http.StatusServiceUnavailable, "not_ready")
	if !strings.Contains(e.Message, "storage failed") {
		t.Fatalf("the reason %q does not carry the broker's", e.Message)
	}
	src.notReady.Store(nil)

	s.Stopping()
	wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/readyz"), http.StatusServiceUnavailable, "stopping")
}

func TestAdminUnknownPathIs404JSON(t *testing.T) {
	s := newServer(quietLogger())
	s.Attach(&fakeSource{})
	// "/" is the dashboard's overview page now (dashboard_test.go); a
	// script asking for any other unknown path still gets JSON.
	for _, path := range []string{"/nope", "/admin/api/no-such-endpoint", "/metrics/extra", "/healthz/", "/admin/nope"} {
		e := wantJSONError(t, do(t, s.Handler(), http.MethodGet, path), http.StatusNotFound, "not_found")
		if !strings.Contains(e.Message, "/healthz") {
			t.Fatalf("%s: the message %q does not say what exists", path, e.Message)
		}
	}
}

func TestAdminWrongMethodIs405JSON(t *testing.T) {
	s := newServer(quietLogger())
	s.Attach(&fakeSource{})
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			rec := do(t, s.Handler(), method, path)
			wantJSONError(t, rec, http.StatusMethodNotAllowed, "method_not_allowed")
			if allow := rec.Header().Get("Allow"); allow != "GET, HEAD" {
				t.Fatalf("%s %s: Allow %q", method, path, allow)
			}
		}
	}
}

// An /admin/api route asked with a method it does not take is 405 naming
// the ones it takes (the catch-all must not turn it into a 404).
func TestAdminAPIWrongMethodIs405(t *testing.T) {
	s := newServer(quietLogger())
	s.Attach(&fakeSource{})
	for path, want := range map[string]string{
		"/admin/api/audit":            "GET",
		"/admin/api/queues/delete":    "POST",
		"/admin/api/runtime-settings": "GET, PUT",
	} {
		rec := do(t, s.Handler(), http.MethodPatch, path)
		wantJSONError(t, rec, http.StatusMethodNotAllowed, "method_not_allowed")
		if allow := rec.Header().Get("Allow"); allow != want {
			t.Fatalf("PATCH %s: Allow %q, want %q", path, allow, want)
		}
	}
	wantJSONError(t, do(t, s.Handler(), http.MethodPatch, "/admin/api/nothing-here"), http.StatusNotFound, "not_found")
}

// distinctCounters gives every field its own value, so a metric wired to
// the wrong field shows.
func distinctCounters() broker.Counters {
	return broker.Counters{
		Published: 101, Delivered: 102, Redelivered: 103, Acked: 104, Discarded: 105, DeadLettered: 106,
		TTLDropped: 107, LeaseExpiries: 129, Connections: 108, AuthFailures: 109, ProtocolErrors: 110, GraceEntered: 111,
		GraceExpired: 112, Resumed: 113, ResumeNew: 114, ResumeRejected: 115, PayloadsRead: 116,
		StreamEntriesRead: 117, StorageWriteRounds: 118, ConnectionsOpen: 119, ResidentPayloadBytes: 120,
		Quarantined: 125, Quarantines: 126,
		BytesIn: 121, BytesOut: 122, SubscriptionsOpen: 123, Reconciles: 124,
		IdleEvictions: 127, IdleReloads: 128, // queues_debug.go
		PartitionsDeclared: 130, PartitionsMax: 131,
	}
}

func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := do(t, h, http.MethodGet, "/metrics")
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics = %d: %s", rec.Code, rec.Body.String())
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("/metrics is not the text exposition format: %v", err)
	}
	return families
}

func TestMetricsReadTheCounters(t *testing.T) {
	s := newServer(quietLogger())
	for name := range scrape(t, s.Handler()) {
		if strings.HasPrefix(name, "fibril_") {
			t.Fatalf("%s exposed before the broker is attached (a made-up zero)", name)
		}
	}
	s.Attach(&fakeSource{counters: distinctCounters()})
	families := scrape(t, s.Handler())
	want := map[string]struct {
		kind  dto.MetricType
		value float64
	}{
		"fibril_broker_published_total":            {dto.MetricType_COUNTER, 101},
		"fibril_broker_delivered_total":            {dto.MetricType_COUNTER, 102},
		"fibril_broker_redelivered_total":          {dto.MetricType_COUNTER, 103},
		"fibril_broker_acked_total":                {dto.MetricType_COUNTER, 104},
		"fibril_broker_discarded_total":            {dto.MetricType_COUNTER, 105},
		"fibril_broker_dead_lettered_total":        {dto.MetricType_COUNTER, 106},
		"fibril_broker_expired_total":              {dto.MetricType_COUNTER, 129},
		"fibril_broker_ttl_dropped_total":          {dto.MetricType_COUNTER, 107},
		"fibril_tcp_connections_total":             {dto.MetricType_COUNTER, 108},
		"fibril_tcp_auth_failures_total":           {dto.MetricType_COUNTER, 109},
		"fibril_tcp_reconnect_grace_entered_total": {dto.MetricType_COUNTER, 111},
		"fibril_tcp_reconnect_grace_expired_total": {dto.MetricType_COUNTER, 112},
		"fibril_tcp_resume_accepted_total":         {dto.MetricType_COUNTER, 113},
		"fibril_tcp_resume_new_total":              {dto.MetricType_COUNTER, 114},
		"fibril_tcp_resume_rejected_total":         {dto.MetricType_COUNTER, 115},
		"fibril_storage_reads_total":               {dto.MetricType_COUNTER, 116},
		"fibril_stream_entries_read_total":         {dto.MetricType_COUNTER, 117},
		"fibril_storage_writes_total":              {dto.MetricType_COUNTER, 118},
		"fibril_tcp_connections_open":              {dto.MetricType_GAUGE, 119},
		"fibril_broker_resident_payload_bytes":     {dto.MetricType_GAUGE, 120},
		"fibril_recovery_quarantined":              {dto.MetricType_GAUGE, 125},
		"fibril_recovery_quarantines_total":        {dto.MetricType_COUNTER, 126},
		// metrics_surface.go
		"fibril_tcp_errors_total":             {dto.MetricType_COUNTER, 110},
		"fibril_tcp_bytes_in_total":           {dto.MetricType_COUNTER, 121},
		"fibril_tcp_bytes_out_total":          {dto.MetricType_COUNTER, 122},
		"fibril_subscriptions_open":           {dto.MetricType_GAUGE, 123},
		"fibril_tcp_reconcile_requests_total": {dto.MetricType_COUNTER, 124},
		// Idle queue eviction (queues_debug.go).
		"fibril_queue_idle_evictions_total": {dto.MetricType_COUNTER, 127},
		"fibril_queue_reloads_total":        {dto.MetricType_COUNTER, 128},
		// The partition budget (Ready.Partitions).
		"fibril_partitions_declared": {dto.MetricType_GAUGE, 130},
		"fibril_partitions_max":      {dto.MetricType_GAUGE, 131},
	}
	for name, w := range want {
		f := families[name]
		if f == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if f.GetType() != w.kind || len(f.Metric) != 1 || f.GetHelp() == "" {
			t.Errorf("%s: type %v, %d series, help %q; want %v, one series, a help text", name, f.GetType(), len(f.Metric), f.GetHelp(), w.kind)
			continue
		}
		m := f.Metric[0]
		if len(m.Label) != 0 {
			t.Errorf("%s has labels %v; want none", name, m.Label)
		}
		got := m.GetGauge().GetValue()
		if w.kind == dto.MetricType_COUNTER {
			got = m.GetCounter().GetValue()
		}
		if got != w.value {
			t.Errorf("%s = %v, want %v", name, got, w.value)
		}
	}
	// Every fibril_ metric is listed above: none slipped in without a test
	// (the histograms and labelled counters of a broker that has them are
	// checked in TestSurfaceHistogramsAndOutcomes).
	for name := range families {
		if _, ok := want[name]; strings.HasPrefix(name, "fibril_") && !ok {
			t.Errorf("%s is exposed but not checked", name)
		}
	}
	if families["go_goroutines"] == nil {
		t.Error("the Go runtime collector is missing")
	}
}

func TestAdminListenReportsAPortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	if s, err := Listen(addr, quietLogger()); err == nil {
		s.Shutdown(0)
		t.Fatalf("Listen on %s, a port in use, succeeded", addr)
	} else if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "--admin-listen") {
		t.Fatalf("the error %q names neither the address nor the flag", err)
	}
}

func TestAdminListenServesAndShutsDown(t *testing.T) {
	s, err := Listen("127.0.0.1:0", quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + s.Addr().String()
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz over the socket = %d", resp.StatusCode)
	}
	if err := s.Shutdown(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Fatal("the listener still answers after Shutdown")
	}
}
