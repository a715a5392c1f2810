package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/broker"
	"github.com/fibril-go/fibril/transport/certs"
)

// fakeSurface is a broker with everything the admin surface asks of it.
type fakeSurface struct {
	fakeSource
	mu     sync.Mutex
	users  map[string]string
	conns  []broker.ConnectionInfo
	subs   []broker.SubscriptionInfo
	closed []uint64
	ready  []QueueReady
}

func newFakeSurface() *fakeSurface { return &fakeSurface{users: map[string]string{}} }

func (f *fakeSurface) LoadedPartitions() int { return 3 }
func (f *fakeSurface) Connections(context.Context) ([]broker.ConnectionInfo, error) {
	return f.conns, nil
}
func (f *fakeSurface) Subscriptions(context.Context) ([]broker.SubscriptionInfo, error) {
	return f.subs, nil
}
func (f *fakeSurface) CloseConnection(_ context.Context, id, session uint64, _ string) (*node.SessionClosed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch id {
	case 7:
		f.closed = append(f.closed, id)
		return &node.SessionClosed{Conn: 7}, nil
	case 8:
		return nil, broker.ErrConnectionNotBound
	}
	return nil, broker.ErrNoSuchConnection
}
func (f *fakeSurface) Users() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.users {
		out = append(out, n)
	}
	return out
}
func (f *fakeSurface) PutUser(name, password string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.HasPrefix(name, "@") || name == "" || password == "" {
		return false, broker.ErrBadUser
	}
	_, had := f.users[name]
	f.users[name] = password
	return !had, nil
}
func (f *fakeSurface) DeleteUser(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.users[name]; !ok {
		return broker.ErrNoSuchUser
	}
	delete(f.users, name)
	return nil
}
func (f *fakeSurface) QueueReadyCounts() []QueueReady { return f.ready }

func surfDoBody(t *testing.T, h http.Handler, method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func decodeInto(t *testing.T, rec *httptest.ResponseRecorder, v any) {
	t.Helper()
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
}

// The event ticker serializes nothing while nobody watches, each asked
// family once per tick however many watch it, and drops a watcher that
// fell behind without waiting for it.
func TestEventsSerializeOnlyWatchedFamiliesOncePerTick(t *testing.T) {
	s := newServerWith(quietLogger(), nil)
	s.Attach(newFakeSurface())
	hub := &s.surf.events
	for range 5 {
		s.eventTick()
	}
	if n := hub.serialized.Load(); n != 0 {
		t.Fatalf("%d families serialized with no watcher", n)
	}
	a := &watcher{families: map[string]bool{"overview": true, "audit": true}, ch: make(chan []byte, eventBufferMax), dropped: make(chan struct{})}
	b := &watcher{families: map[string]bool{"overview": true}, ch: make(chan []byte, eventBufferMax), dropped: make(chan struct{})}
	hub.add(a)
	hub.add(b)
	s.eventTick()
	if n := hub.serialized.Load(); n != 2 {
		t.Fatalf("%d serializations for two families watched by two watchers, want 2", n)
	}
	if len(a.ch) != 2 || len(b.ch) != 1 {
		t.Fatalf("watcher a got %d events (want 2), b %d (want 1)", len(a.ch), len(b.ch))
	}
	first := <-b.ch
	if !strings.HasPrefix(string(first), "event: overview\ndata: {") {
		t.Fatalf("event %q", first)
	}
	// b reads nothing more: after eventBufferMax unread events it is dropped.
	for range eventBufferMax + 1 {
		for len(a.ch) > 0 {
			<-a.ch
		}
		s.eventTick()
	}
	select {
	case <-b.dropped:
	default:
		t.Fatal("a watcher that stopped reading was not dropped")
	}
	select {
	case <-a.dropped:
		t.Fatal("a watcher that reads was dropped")
	default:
	}
	hub.remove(a)
	before := hub.serialized.Load()
	s.eventTick()
	if hub.serialized.Load() != before {
		t.Fatal("families serialized after the last watcher left")
	}
}

func TestEventsEndpointStreamsTheAskedFamilies(t *testing.T) {
	s := newServerWith(quietLogger(), nil)
	s.Attach(newFakeSurface())
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	rec := do(t, s.Handler(), http.MethodGet, "/admin/api/events?families=overview,nope")
	wantJSONError(t, rec, http.StatusBadRequest, "bad_parameter")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/admin/api/events?families=attention,audit", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	// The stream's comment comes first; by then the watcher is registered.
	if line, _ := r.ReadString('\n'); !strings.HasPrefix(line, ": fibril events") {
		t.Fatalf("first line %q", line)
	}
	s.eventTick()
	seen := map[string]bool{}
	for len(seen) < 2 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v (seen %v)", err, seen)
		}
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			seen[strings.TrimSpace(name)] = true
		}
	}
	if !seen["attention"] || !seen["audit"] || seen["overview"] {
		t.Fatalf("events %v, want attention and audit only", seen)
	}
}

func authServer(t *testing.T) (*Server, *fakeSurface) {
	t.Helper()
	s := newServerWith(quietLogger(), &Options{Auth: AuthOptions{Enabled: true, Username: "ops", Password: "s3cret"}})
	f := newFakeSurface()
	s.Attach(f)
	return s, f
}

func TestAdminAuthGuardsEverythingButHealth(t *testing.T) {
	s, _ := authServer(t)
	h := s.Handler()
	for _, p := range []string{"/healthz", "/readyz"} {
		if rec := do(t, h, http.MethodGet, p); rec.Code != 200 {
			t.Fatalf("%s without credentials: %d", p, rec.Code)
		}
	}
	for _, p := range []string{"/metrics", "/admin/api/overview", "/admin/api/audit", "/admin/api/users", "/nowhere"} {
		wantJSONError(t, do(t, h, http.MethodGet, p), http.StatusUnauthorized, "unauthorized")
		wantJSONError(t, surfDoBody(t, h, http.MethodGet, p, "", map[string]string{"Authorization": "Basic b3BzOndyb25n"}), // ops:wrong
			http.StatusUnauthorized, "unauthorized")
	}
	req := httptest.NewRequest(http.MethodGet, "/admin/api/overview", nil)
	req.SetBasicAuth("ops", "s3cret")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("basic auth: %d %s", rec.Code, rec.Body.String())
	}
	req = httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.SetBasicAuth("ops", "s3cret")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("basic auth on /metrics: %d", rec.Code)
	}
}

func TestAdminLoginSessionCookie(t *testing.T) {
	s, _ := authServer(t)
	h := s.Handler()
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/login", `{"username":"ops","password":"nope"}`, nil), http.StatusUnauthorized, "unauthorized")
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/login", `{"username":"ops"}`, nil), http.StatusBadRequest, "bad_parameter")
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/login", `{"user":"ops","password":"s3cret"}`, nil), http.StatusBadRequest, "bad_json")
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/login", `not json`, nil), http.StatusBadRequest, "bad_json")

	form := url.Values{"username": {"ops"}, "password": {"s3cret"}}.Encode()
	rec := surfDoBody(t, h, http.MethodPost, "/login", form, map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if rec.Code != 200 {
		t.Fatalf("form login: %d %s", rec.Code, rec.Body.String())
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 || cookies[0].Name != adminSessionCookie || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || len(cookies[0].Value) != 64 {
		t.Fatalf("cookie %+v: want one HttpOnly SameSite=Strict session cookie of 256 bits", cookies)
	}
	withCookie := map[string]string{"Cookie": adminSessionCookie + "=" + cookies[0].Value}
	if rec := surfDoBody(t, h, http.MethodGet, "/admin/api/overview", "", withCookie); rec.Code != 200 {
		t.Fatalf("with the session cookie: %d", rec.Code)
	}
	// The audit names the logged-in user.
	rec = surfDoBody(t, h, http.MethodPost, "/admin/api/users", `{"name":"alice","password":"pw"}`, withCookie)
	if rec.Code != 200 {
		t.Fatalf("put user: %d %s", rec.Code, rec.Body.String())
	}
	if e := s.auditLog.newest(0, 1)[0]; e.Actor != "ops" || e.Action != "user.put" {
		t.Fatalf("audit %+v, want actor ops", e)
	}
	wantJSONError(t, surfDoBody(t, h, http.MethodGet, "/admin/api/overview", "", map[string]string{"Cookie": adminSessionCookie + "=" + strings.Repeat("0", 64)}),
		http.StatusUnauthorized, "unauthorized")
	if rec := surfDoBody(t, h, http.MethodPost, "/logout", "", withCookie); rec.Code != 200 {
		t.Fatalf("logout: %d", rec.Code)
	}
	wantJSONError(t, surfDoBody(t, h, http.MethodGet, "/admin/api/overview", "", withCookie), http.StatusUnauthorized, "unauthorized")
}

func TestAdminLoopbackRule(t *testing.T) {
	_, err := ListenWith("0.0.0.0:0", quietLogger(), Options{})
	if !errors.Is(err, ErrUnauthenticatedRemote) || !strings.Contains(err.Error(), "--admin-allow-unauthenticated") {
		t.Fatalf("0.0.0.0 without auth: %v", err)
	}
	if _, err := ListenWith("0.0.0.0:0", quietLogger(), Options{Auth: AuthOptions{Enabled: true}}); err == nil {
		t.Fatal("auth on without credentials was accepted")
	}
	for _, o := range []Options{{AllowUnauthenticated: true}, {Auth: AuthOptions{Enabled: true, Username: "a", Password: "b"}}} {
		s, err := ListenWith("0.0.0.0:0", quietLogger(), o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		s.Shutdown(time.Second)
	}
	s, err := ListenWith("127.0.0.1:0", quietLogger(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown(time.Second)
}

func TestUsersEndpoints(t *testing.T) {
	s := newServerWith(quietLogger(), nil)
	f := newFakeSurface()
	s.Attach(f)
	h := s.Handler()
	rec := surfDoBody(t, h, http.MethodPost, "/admin/api/users", `{"name":"bob","password":"pw1"}`, nil)
	var put struct {
		Name    string
		Created bool
	}
	decodeInto(t, rec, &put)
	if rec.Code != 200 || !put.Created {
		t.Fatalf("add: %d %+v", rec.Code, put)
	}
	rec = surfDoBody(t, h, http.MethodPost, "/admin/api/users", `{"name":"bob","password":"pw2"}`, nil)
	decodeInto(t, rec, &put)
	if put.Created || f.users["bob"] != "pw2" {
		t.Fatalf("passwd: %+v %v", put, f.users)
	}
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/admin/api/users", `{"name":"@node","password":"x"}`, nil), 400, "bad_name")
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/admin/api/users", `{"name":"x","password":"y","admin":true}`, nil), 400, "bad_json")
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/admin/api/users", ``, nil), 400, "bad_json")
	wantJSONError(t, surfDoBody(t, h, http.MethodDelete, "/admin/api/users/nobody", "", nil), 404, "not_found")
	rec = do(t, h, http.MethodGet, "/admin/api/users")
	if !strings.Contains(rec.Body.String(), `{"users":[{"name":"bob"}]}`) || strings.Contains(rec.Body.String(), "pw2") {
		t.Fatalf("list: %s", rec.Body.String())
	}
	if rec := surfDoBody(t, h, http.MethodDelete, "/admin/api/users/bob", "", nil); rec.Code != 200 {
		t.Fatalf("delete: %d", rec.Code)
	}
	for _, e := range s.auditLog.newest(0, 100) {
		if strings.Contains(e.Detail+e.Target, "pw") {
			t.Fatalf("a password reached the audit: %+v", e)
		}
	}
	if got := s.auditLog.newest(0, 100); len(got) != 5 || got[0].Action != "user.delete" || got[0].Outcome != "ok" || got[1].Outcome != "not_found" {
		t.Fatalf("audit %+v", got)
	}
}

func TestConnectionsEndpoints(t *testing.T) {
	s := newServerWith(quietLogger(), nil)
	f := newFakeSurface()
	f.conns = []broker.ConnectionInfo{{ID: 7, Session: 1, ClientName: "app", Transport: "tcp", Subscriptions: 1}}
	f.subs = []broker.SubscriptionInfo{{Connection: 7, Session: 1, SubID: 9, Topic: "t", Kind: "queue"}}
	s.Attach(f)
	h := s.Handler()
	rec := do(t, h, http.MethodGet, "/admin/api/connections")
	if !strings.Contains(rec.Body.String(), `"client_name":"app"`) {
		t.Fatalf("connections: %s", rec.Body.String())
	}
	rec = do(t, h, http.MethodGet, "/admin/api/subscriptions")
	if !strings.Contains(rec.Body.String(), `"sub_id":9`) || !strings.Contains(rec.Body.String(), `"kind":"queue"`) {
		t.Fatalf("subscriptions: %s", rec.Body.String())
	}
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/admin/api/connections/close", `{}`, nil), 400, "bad_parameter")
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/admin/api/connections/close", `{"id":"7"}`, nil), 400, "bad_json")
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/admin/api/connections/close", `{"id":99}`, nil), 404, "not_found")
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/admin/api/connections/close", `{"id":8}`, nil), 409, "conflict")
	if rec := surfDoBody(t, h, http.MethodPost, "/admin/api/connections/close", `{"id":7}`, nil); rec.Code != 200 || len(f.closed) != 1 {
		t.Fatalf("close: %d %s", rec.Code, rec.Body.String())
	}
	if e := s.auditLog.newest(0, 1)[0]; e.Action != "connection.close" || e.Target != "connection/7" || e.Outcome != "ok" {
		t.Fatalf("audit %+v", e)
	}
	if n := len(s.auditLog.newest(0, 100)); n != 4 {
		t.Fatalf("%d audit entries, want 4 (bad JSON is not an action)", n)
	}
}

func TestBacklogRisingRule(t *testing.T) {
	cases := []struct {
		first, last uint64
		want        bool
	}{{0, 99, false}, {0, 100, true}, {100, 199, false}, {100, 200, true}, {400, 599, false}, {400, 600, true}, {500, 400, false}}
	for _, c := range cases {
		if got := backlogRising(c.first, c.last); got != c.want {
			t.Errorf("first %d last %d: %v, want %v", c.first, c.last, got, c.want)
		}
	}
	var tr backlogTracker
	t0 := int64(1_000_000)
	tr.add(t0, []QueueReady{{Topic: "a", Ready: 10, Consumers: 1}})
	tr.add(t0+60_000, []QueueReady{{Topic: "a", Ready: 500, Consumers: 1}})
	if items := tr.items(t0 + 60_000); len(items) != 0 {
		t.Fatalf("a minute of growth is under the window: %+v", items)
	}
	tr.add(t0+3*60_000, []QueueReady{{Topic: "a", Ready: 900, Consumers: 0}})
	items := tr.items(t0 + 3*60_000)
	kinds := map[string]bool{}
	for _, it := range items {
		kinds[it.Kind] = true
	}
	if !kinds["backlog_rising"] || !kinds["no_consumer"] {
		t.Fatalf("items %+v", items)
	}
	tr.add(t0+4*60_000, nil) // the queue is no longer loaded
	if items := tr.items(t0 + 4*60_000); len(items) != 0 {
		t.Fatalf("an unloaded queue still listed: %+v", items)
	}
}

func TestDiskAndCertAttention(t *testing.T) {
	now := time.Now()
	if got := diskAttention("/d", Disk{TotalBytes: 100, FreeBytes: 50}, now); got != nil {
		t.Fatalf("half free: %+v", got)
	}
	if got := diskAttention("/d", Disk{TotalBytes: 100, FreeBytes: 9}, now); len(got) != 1 || got[0].Severity != "warning" {
		t.Fatalf("9 %% free: %+v", got)
	}
	if got := diskAttention("/d", Disk{TotalBytes: 100, FreeBytes: 2}, now); len(got) != 1 || got[0].Severity != "critical" {
		t.Fatalf("2 %% free: %+v", got)
	}
	m, err := certs.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := certAttention(m, now); got != nil {
		t.Fatalf("fresh leaf: %+v", got)
	}
	if got := certAttention(m, m.LeafCert.NotAfter.Add(-10*24*time.Hour)); len(got) != 1 || got[0].Severity != "warning" {
		t.Fatalf("10 days left: %+v", got)
	}
	if got := certAttention(m, m.LeafCert.NotAfter.Add(time.Second)); len(got) != 1 || got[0].Severity != "critical" {
		t.Fatalf("expired: %+v", got)
	}
}

func TestTLSInfoAndReload(t *testing.T) {
	dir := t.TempDir()
	m, err := certs.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	holder := certs.NewHolder(m)
	s := newServerWith(quietLogger(), &Options{TLS: holder})
	s.Attach(newFakeSurface())
	h := s.Handler()
	var info TLSInfo
	decodeInto(t, do(t, h, http.MethodGet, "/admin/api/tls"), &info)
	if info.FingerprintSHA256 != m.LeafFingerprintSHA256 || info.CAFingerprintSHA256 != m.CAFingerprintSHA256 || len(info.SANs) == 0 {
		t.Fatalf("tls info %+v", info)
	}
	leafPath := filepath.Join(dir, certs.TLSDirName, certs.LeafFileName)
	good, _ := os.ReadFile(leafPath)
	os.WriteFile(leafPath, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o600)
	wantJSONError(t, surfDoBody(t, h, http.MethodPost, "/admin/api/tls/reload", "", nil), 400, "bad_certificate")
	if holder.Current().LeafFingerprintSHA256 != m.LeafFingerprintSHA256 {
		t.Fatal("a refused reload swapped the material")
	}
	os.WriteFile(leafPath, good, 0o600)
	os.Remove(leafPath)
	os.Remove(filepath.Join(dir, certs.TLSDirName, certs.LeafKeyName))
	fresh, err := certs.LoadOrCreate(dir) // mints a new leaf on disk
	if err != nil {
		t.Fatal(err)
	}
	rec := surfDoBody(t, h, http.MethodPost, "/admin/api/tls/reload", "", nil)
	var out struct {
		Reloaded    bool
		Fingerprint string `json:"fingerprint_sha256"`
	}
	decodeInto(t, rec, &out)
	if !out.Reloaded || out.Fingerprint != fresh.LeafFingerprintSHA256 || out.Fingerprint == m.LeafFingerprintSHA256 {
		t.Fatalf("reload: %s", rec.Body.String())
	}
	got := s.auditLog.newest(0, 2)
	if got[0].Action != "tls.reload" || got[0].Outcome != "ok" || got[1].Outcome != "bad_certificate" {
		t.Fatalf("audit %+v", got)
	}
}

func TestOverviewAndHistory(t *testing.T) {
	s := newServerWith(quietLogger(), &Options{Info: Info{Node: "n1", DataDir: t.TempDir()}})
	wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/admin/api/overview"), 503, "starting")
	f := newFakeSurface()
	s.Attach(f)
	t0 := time.Now().UnixMilli() // the attach took the first sample
	f.counters.Published = 10
	s.sampleOnce(t0 + 5_000)
	f.counters.Published = 60
	s.sampleOnce(t0 + 10_000)
	var ov map[string]any
	decodeInto(t, do(t, s.Handler(), http.MethodGet, "/admin/api/overview"), &ov)
	rates := ov["rates_per_s"].(map[string]any)
	if ov["node"] != "n1" || rates["publish"].(float64) != 10 || ov["disk"] == nil || ov["memory"].(map[string]any)["rss_bytes"].(float64) == 0 {
		t.Fatalf("overview %v", ov)
	}
	var hist struct{ Samples []Sample }
	decodeInto(t, do(t, s.Handler(), http.MethodGet, "/admin/api/history"), &hist)
	if len(hist.Samples) != 3 || hist.Samples[2].PublishRate != 10 || hist.Samples[0].Published != 0 {
		t.Fatalf("history %+v", hist)
	}
	for i := range historySamples + 5 {
		s.sampleOnce(t0 + int64(15_000+i*5_000))
	}
	if n := len(s.surf.hist.all()); n != historySamples {
		t.Fatalf("history holds %d samples, want its cap %d", n, historySamples)
	}
}

type fakeHistograms struct{ fakeSource }

func (*fakeHistograms) Histograms() []broker.Histogram {
	return []broker.Histogram{{Name: broker.HistogramRoundSeconds, Count: 3, Sum: 0.006, Cumulative: map[float64]uint64{0.001: 1, 0.01: 3}},
		{Name: broker.HistogramRoundEntries, Count: 3, Sum: 40, Cumulative: map[float64]uint64{8: 2, 32: 3}}}
}
func (*fakeHistograms) ReconcileOutcomes() [node.ReconcileOutcomeCount]uint64 {
	var out [node.ReconcileOutcomeCount]uint64
	out[node.ReconcileRestored] = 5
	return out
}

func TestSurfaceHistogramsAndOutcomes(t *testing.T) {
	s := newServer(quietLogger())
	s.Attach(&fakeHistograms{})
	families := scrape(t, s.Handler())
	h := families["fibril_storage_group_commit_seconds"]
	if h == nil || h.Metric[0].GetHistogram().GetSampleCount() != 3 || len(h.Metric[0].GetHistogram().GetBucket()) != 3 {
		t.Fatalf("commit seconds %v", h)
	}
	if e := families["fibril_storage_group_commit_entries"]; e == nil || e.Metric[0].GetHistogram().GetSampleSum() != 40 {
		t.Fatalf("commit entries %v", e)
	}
	o := families["fibril_tcp_reconcile_outcomes_total"]
	if o == nil || len(o.Metric) != int(node.ReconcileOutcomeCount) {
		t.Fatalf("outcomes %v", o)
	}
	for _, m := range o.Metric {
		want := 0.0
		if m.Label[0].GetValue() == "restored" {
			want = 5
		}
		if m.GetCounter().GetValue() != want {
			t.Fatalf("outcome %s = %v", m.Label[0].GetValue(), m.GetCounter().GetValue())
		}
	}
}

func TestEventsWatchersAreBounded(t *testing.T) {
	s := newServerWith(quietLogger(), nil)
	s.Attach(newFakeSurface())
	for range eventWatchersMax {
		if !s.surf.events.add(&watcher{families: map[string]bool{"overview": true}, ch: make(chan []byte, 1), dropped: make(chan struct{})}) {
			t.Fatal("a watcher under the cap was refused")
		}
	}
	wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/admin/api/events"), http.StatusServiceUnavailable, "too_many_watchers")
}

// An event stream opened with a login cookie ends at the first tick after
// the session is logged out (it outlived the logout before).
func TestEventStreamEndsWithItsSession(t *testing.T) {
	s, _ := authServer(t)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	login, err := http.Post(srv.URL+"/login", "application/json", strings.NewReader(`{"username":"ops","password":"s3cret"}`))
	if err != nil || login.StatusCode != 200 {
		t.Fatalf("login: %v %v", login, err)
	}
	login.Body.Close()
	var cookie *http.Cookie
	for _, c := range login.Cookies() {
		if c.Name == adminSessionCookie {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatal("no session cookie")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/admin/api/events?families=audit", nil)
	req.AddCookie(cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("events: %v %v", resp, err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, _ := r.ReadString('\n'); !strings.HasPrefix(line, ": fibril events") {
		t.Fatalf("first line %q", line)
	}
	s.surf.auth.close(cookie.Value) // the logout
	s.eventTick()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal("the stream ended without saying why")
		}
		if strings.HasPrefix(line, "event: audit") {
			t.Fatal("the stream kept going after the logout")
		}
		if strings.HasPrefix(line, "event: unauthorized") {
			return
		}
	}
}
