package admin

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A browser's cross-site state-changing request is refused before any
// handler runs, whatever its body; scripts (no Origin, no Sec-Fetch-Site)
// and same-origin pages pass.
func TestCrossSiteMutationsAreRefused(t *testing.T) {
	s := newServer(quietLogger())
	s.Attach(&fakeSource{})
	do := func(method, path string, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "http://127.0.0.1:8081"+path, strings.NewReader(`{"topic":"orders"}`))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec
	}
	for _, hdr := range []map[string]string{
		{"Origin": "https://evil.example"},
		{"Origin": "null"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:8081"},
	} {
		for _, path := range []string{"/admin/api/queues/delete", "/admin/api/publish", "/login"} {
			if rec := do(http.MethodPost, path, hdr); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "cross_site") {
				t.Fatalf("POST %s with %v: %d %s", path, hdr, rec.Code, rec.Body.String())
			}
		}
	}
	// Same origin, and a script: not refused here (the fake broker then
	// answers whatever it answers, but not 403 cross_site).
	for _, hdr := range []map[string]string{nil, {"Origin": "http://127.0.0.1:8081", "Sec-Fetch-Site": "same-origin"}} {
		if rec := do(http.MethodPost, "/admin/api/queues/delete", hdr); rec.Code == http.StatusForbidden {
			t.Fatalf("with %v: refused %s", hdr, rec.Body.String())
		}
	}
	// Reads are not refused for their Origin (a page may show them).
	if rec := do(http.MethodGet, "/admin/api/audit", map[string]string{"Sec-Fetch-Site": "cross-site"}); rec.Code != http.StatusOK {
		t.Fatalf("GET audit cross-site: %d", rec.Code)
	}
}

// On a loopback listener, a Host that is neither a loopback name nor an
// IP literal (what DNS rebinding sends) is refused, reads included.
func TestLoopbackListenerRefusesRebindingHosts(t *testing.T) {
	s, err := Listen("127.0.0.1:0", quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(2 * time.Second)
	s.Attach(&fakeSource{})
	port := s.Addr().(*net.TCPAddr).Port
	get := func(host string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr().String()+"/admin/api/audit", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{"127.0.0.1", "localhost", "[::1]", "app.localhost"} {
		if code := get(host + ":" + strconv.Itoa(port)); code != http.StatusOK {
			t.Fatalf("Host %s: %d", host, code)
		}
	}
	if code := get("evil.example:" + strconv.Itoa(port)); code != http.StatusMisdirectedRequest {
		t.Fatalf("rebound Host: %d, want 421", code)
	}
	// /healthz too: a rebound page learns nothing.
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr().String()+"/healthz", nil)
	req.Host = "evil.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("healthz with a rebound Host: %v %v", resp, err)
	}
}
