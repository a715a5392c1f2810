package admin

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// After failuresMax wrong logins or basic-auth passwords from one address,
// that address is answered 429 (even with the right password) until the
// window of its first failure ends; another address is not affected.
func TestFailedCredentialsAreRateLimited(t *testing.T) {
	s, _ := authServer(t)
	try := func(peer, body string, basic *[2]string) int {
		var req *http.Request
		if basic != nil {
			req = httptest.NewRequest(http.MethodGet, "/admin/api/audit", nil)
			req.SetBasicAuth(basic[0], basic[1])
		} else {
			req = httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
		}
		req.RemoteAddr = peer + ":40000"
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
	wrong, right := `{"username":"ops","password":"guess"}`, `{"username":"ops","password":"s3cret"}`
	for i := 0; i < failuresMax; i++ {
		if code := try("10.0.0.1", wrong, nil); code != http.StatusUnauthorized {
			t.Fatalf("wrong login %d: %d", i, code)
		}
	}
	if code := try("10.0.0.1", right, nil); code != http.StatusTooManyRequests {
		t.Fatalf("after %d failures the right password got %d, want 429", failuresMax, code)
	}
	if code := try("10.0.0.1", "", &[2]string{"ops", "s3cret"}); code != http.StatusTooManyRequests {
		t.Fatalf("basic auth from the same address: %d, want 429", code)
	}
	if code := try("10.0.0.2", right, nil); code != http.StatusOK {
		t.Fatalf("another address: %d", code)
	}
	// Basic auth failures count too.
	for i := 0; i < failuresMax; i++ {
		try("10.0.0.3", "", &[2]string{"ops", "nope" + strconv.Itoa(i)})
	}
	if code := try("10.0.0.3", "", &[2]string{"ops", "s3cret"}); code != http.StatusTooManyRequests {
		t.Fatalf("after basic-auth failures: %d", code)
	}
	// The window ends.
	if wait := s.failures.blocked("10.0.0.1", time.Now().Add(failureWindow+time.Second)); wait != 0 {
		t.Fatalf("still blocked after the window: %v", wait)
	}
}

// The table of peers never grows past its bound.
func TestFailureTableIsBounded(t *testing.T) {
	var l failureLimiter
	now := time.Now()
	for i := 0; i < 3*failurePeersMax; i++ {
		l.failed("peer"+strconv.Itoa(i), now)
	}
	if len(l.peers) > failurePeersMax {
		t.Fatalf("%d peers kept, bound %d", len(l.peers), failurePeersMax)
	}
}
