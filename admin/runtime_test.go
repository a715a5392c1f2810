package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// runtimeSource is a broker with runtime settings: it records the last
// request and answers what the test sets.
type runtimeSource struct {
	fakeSource
	state     node.RuntimeSettingsState
	dlq       node.GlobalDLQState
	gotPatch  node.RuntimePatch
	gotTarget *core.DLQTarget
	gotPut    bool
}

func (f *runtimeSource) RuntimeSettings(context.Context) (node.RuntimeSettingsState, error) {
	return f.state, nil
}

func (f *runtimeSource) PutRuntimeSettings(_ context.Context, expected uint64, patch node.RuntimePatch) (node.RuntimeSettingsState, error) {
	f.gotPatch, f.gotPut = patch, true
	return f.state, nil
}

func (f *runtimeSource) GlobalDLQ(context.Context) (node.GlobalDLQState, error) { return f.dlq, nil }

func (f *runtimeSource) PutGlobalDLQ(_ context.Context, expected uint64, target *core.DLQTarget) (node.GlobalDLQState, error) {
	f.gotTarget, f.gotPut = target, true
	return f.dlq, nil
}

func sendRT(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	return rec
}

func TestRuntimeSettingsJSONShapesAndRefusals(t *testing.T) {
	s := newServer(quietLogger())
	src := &runtimeSource{state: node.RuntimeSettingsState{Version: 3, Settings: node.RuntimeSettings{LeaseMs: 500, ExpiryBatchMax: 9,
		ReconnectGraceMs: 10, DefaultPartitionCount: 2, IdleEvictAfterMs: 5000, IdleSweepIntervalMs: 100}, Locked: []string{"idle_queue_cleanup"}}}
	s.Attach(src)
	rec := sendRT(t, s.Handler(), "GET", "/admin/api/runtime-settings", "")
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
		t.Fatalf("GET = %d %s", rec.Code, rec.Body)
	}
	if got["version"] != 3.0 || got["settings"].(map[string]any)["delivery"].(map[string]any)["inflight_ttl_ms"] != 500.0 ||
		got["locked"].([]any)[0] != "idle_queue_cleanup" {
		t.Fatalf("GET = %v", got)
	}
	// Only the keys given reach the Node.
	rec = sendRT(t, s.Handler(), "PUT", "/admin/api/runtime-settings", `{"expected_version":3,"settings":{"connection":{"reconnect_grace_ms":7}}}`)
	if rec.Code != 200 || src.gotPatch.ReconnectGraceMs == nil || *src.gotPatch.ReconnectGraceMs != 7 || src.gotPatch.LeaseMs != nil {
		t.Fatalf("PUT = %d %s, patch %+v", rec.Code, rec.Body, src.gotPatch)
	}
	for _, c := range []struct {
		refusal *node.RuntimeRefusal
		status  int
		code    string
	}{
		{&node.RuntimeRefusal{Code: node.RefusedStaleVersion}, 409, "stale_version"},
		{&node.RuntimeRefusal{Code: node.RefusedLocked, Key: "idle_queue_cleanup"}, 403, "locked"},
		{&node.RuntimeRefusal{Code: node.RefusedInvalid, Key: "delivery.inflight_ttl_ms", Message: "between 1 and 9"}, 400, "bad_setting"},
		{&node.RuntimeRefusal{Code: node.RefusedEmpty}, 400, "bad_parameter"},
		{&node.RuntimeRefusal{Code: node.RefusedBehind}, 503, "not_ready"},
	} {
		src.state.Err = c.refusal
		rec = sendRT(t, s.Handler(), "PUT", "/admin/api/runtime-settings", `{"expected_version":1,"settings":{"delivery":{"inflight_ttl_ms":0}}}`)
		if c.status == 409 {
			if rec.Code != 409 || !strings.Contains(rec.Body.String(), `"code":"stale_version"`) {
				t.Fatalf("stale = %d %s", rec.Code, rec.Body)
			}
			continue
		}
		e := wantJSONError(t, rec, c.status, c.code)
		if c.code == "bad_setting" && !strings.Contains(e.Message, "delivery.inflight_ttl_ms must be between 1 and 9") {
			t.Fatalf("invalid answered %q", e.Message)
		}
	}
	// 409 carries the value in force.
	src.state.Err = &node.RuntimeRefusal{Code: node.RefusedStaleVersion}
	rec = sendRT(t, s.Handler(), "PUT", "/admin/api/runtime-settings", `{"expected_version":1,"settings":{"delivery":{"inflight_ttl_ms":1}}}`)
	if !strings.Contains(rec.Body.String(), `"current":{"version":3`) {
		t.Fatalf("409 body %s", rec.Body)
	}
	src.gotPut = false
	for _, body := range []string{`{"settings":{}}`, `{"expected_version":1,"settings":{"replication":{}}}`, `not json`} {
		rec = sendRT(t, s.Handler(), "PUT", "/admin/api/runtime-settings", body)
		if rec.Code != 400 || src.gotPut {
			t.Fatalf("PUT %s = %d %s (reached the node: %v)", body, rec.Code, rec.Body, src.gotPut)
		}
	}
	if entries := s.auditLog.newest(0, 100); len(entries) == 0 || entries[0].Action != "runtime_settings.put" {
		t.Fatalf("audit %+v", entries)
	}
}

func TestGlobalDLQJSONNullAndMissingTarget(t *testing.T) {
	s := newServer(quietLogger())
	src := &runtimeSource{dlq: node.GlobalDLQState{Version: 4, Target: &core.DLQTarget{Topic: "graveyard"}}}
	s.Attach(src)
	rec := sendRT(t, s.Handler(), "GET", "/admin/api/global-dlq", "")
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"version":4,"target":{"topic":"graveyard","group":""}}` {
		t.Fatalf("GET = %d %s", rec.Code, rec.Body)
	}
	src.gotTarget = &core.DLQTarget{}
	rec = sendRT(t, s.Handler(), "PUT", "/admin/api/global-dlq", `{"expected_version":4,"target":null}`)
	if rec.Code != 200 || src.gotTarget != nil {
		t.Fatalf("a null target = %d, reached the node as %v", rec.Code, src.gotTarget)
	}
	src.gotPut = false
	rec = sendRT(t, s.Handler(), "PUT", "/admin/api/global-dlq", `{"expected_version":4}`)
	wantJSONError(t, rec, 400, "bad_parameter")
	rec = sendRT(t, s.Handler(), "PUT", "/admin/api/global-dlq", `{"expected_version":4,"target":{"topic":"x","extra":1}}`)
	wantJSONError(t, rec, 400, "bad_json")
	if src.gotPut {
		t.Fatal("a bad body reached the node")
	}
	src.dlq.Err = &node.RuntimeRefusal{Code: node.RefusedInvalid, Key: "target", Message: "a queue, not a stream"}
	rec = sendRT(t, s.Handler(), "PUT", "/admin/api/global-dlq", `{"expected_version":4,"target":{"topic":"s"}}`)
	wantJSONError(t, rec, 400, "bad_name")
	src.dlq.Err = &node.RuntimeRefusal{Code: node.RefusedStaleVersion}
	rec = sendRT(t, s.Handler(), "PUT", "/admin/api/global-dlq", `{"expected_version":1,"target":null}`)
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), `"current":{"version":4,"target":{"topic":"graveyard"`) {
		t.Fatalf("stale = %d %s", rec.Code, rec.Body)
	}
}
