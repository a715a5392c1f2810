package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The dashboard on the admin listener: pages at / and /admin/<page>, the
// API untouched beside them; with auth on, a browser without a session is
// sent to the login page (and back), the login page and the assets are
// open, the API still answers 401 JSON, and an unknown page is the
// dashboard's 404 for a browser but JSON for a script.
func TestDashboardServedBesideTheAPI(t *testing.T) {
	s := newServerWith(quietLogger(), &Options{Auth: AuthOptions{Enabled: true, Username: "ops", Password: "s3cret"}})
	do := func(path, accept string, basic bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if basic {
			req.SetBasicAuth("ops", "s3cret")
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w
	}
	const browser = "text/html,application/xhtml+xml,*/*;q=0.8"
	if w := do("/admin/queues?t.q=x", browser, false); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login?next=%2Fadmin%2Fqueues%3Ft.q%3Dx" {
		t.Fatalf("page without a session: %d %v", w.Code, w.Header())
	}
	if w := do("/login", browser, false); w.Code != 200 || !strings.Contains(w.Body.String(), "login-form") {
		t.Fatalf("login page: %d", w.Code)
	}
	if w := do("/static/dash.js", "*/*", false); w.Code != 200 {
		t.Fatalf("asset without a session: %d", w.Code)
	}
	if w := do("/admin/api/overview", browser, false); w.Code != 401 || !strings.Contains(w.Body.String(), `"unauthorized"`) {
		t.Fatalf("API without credentials: %d %s", w.Code, w.Body.String())
	}
	if w := do("/", browser, true); w.Code != 200 || !strings.Contains(w.Body.String(), "ov-published") {
		t.Fatalf("overview with credentials: %d", w.Code)
	}
	if w := do("/admin/nope", browser, true); w.Code != 404 || !strings.Contains(w.Body.String(), "nf-path") {
		t.Fatalf("browser 404: %d %s", w.Code, w.Body.String())
	}
	if w := do("/admin/nope", "", true); w.Code != 404 || !strings.Contains(w.Body.String(), `"not_found"`) {
		t.Fatalf("script 404: %d %s", w.Code, w.Body.String())
	}
	// A page is GET only: the mux's 405 names the method.
	req := httptest.NewRequest("POST", "/admin/queues", strings.NewReader("{}"))
	req.SetBasicAuth("ops", "s3cret")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST to a page: %d", w.Code)
	}
}
