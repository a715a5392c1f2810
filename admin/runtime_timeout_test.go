package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// blockingRuntime is a Node that never answers a PUT.
type blockingRuntime struct{ fakeSource }

func (b *blockingRuntime) RuntimeSettings(ctx context.Context) (node.RuntimeSettingsState, error) {
	<-ctx.Done()
	return node.RuntimeSettingsState{}, ctx.Err()
}
func (b *blockingRuntime) PutRuntimeSettings(ctx context.Context, _ uint64, _ node.RuntimePatch) (node.RuntimeSettingsState, error) {
	<-ctx.Done()
	return node.RuntimeSettingsState{}, ctx.Err()
}
func (b *blockingRuntime) GlobalDLQ(ctx context.Context) (node.GlobalDLQState, error) {
	<-ctx.Done()
	return node.GlobalDLQState{}, ctx.Err()
}
func (b *blockingRuntime) PutGlobalDLQ(ctx context.Context, _ uint64, _ *core.DLQTarget) (node.GlobalDLQState, error) {
	<-ctx.Done()
	return node.GlobalDLQState{}, ctx.Err()
}

// A Node that holds its answer does not hold the request: past
// runtimeCallTimeout the answer is a 503 saying the change may still apply
// (it used to wait as long as the client did).
func TestRuntimeCallsHaveADeadline(t *testing.T) {
	saved := runtimeCallTimeout
	runtimeCallTimeout = 50 * time.Millisecond
	defer func() { runtimeCallTimeout = saved }()
	s := newServer(quietLogger())
	s.Attach(&blockingRuntime{})
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/admin/api/runtime-settings", ""},
		{http.MethodPut, "/admin/api/runtime-settings", `{"expected_version":1,"settings":{"delivery":{"inflight_ttl_ms":5000}}}`},
		{http.MethodGet, "/admin/api/global-dlq", ""},
		{http.MethodPut, "/admin/api/global-dlq", `{"expected_version":1,"target":null}`},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() { s.Handler().ServeHTTP(rec, req); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s %s: no answer after 5 s", c.method, c.path)
		}
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"timeout"`) {
			t.Fatalf("%s %s: %d %s", c.method, c.path, rec.Code, rec.Body.String())
		}
	}
}
