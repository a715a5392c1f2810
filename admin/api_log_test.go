package admin

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/config"
)

func doBody(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	return rec
}

func TestLogLevelGetPutIsLiveAndAudited(t *testing.T) {
	var out bytes.Buffer
	level := new(slog.LevelVar)
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level}))
	s := newServer(logger)
	// Before SetLogControl: 501, not a panic.
	wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/admin/api/log-level"), http.StatusNotImplemented, "not_implemented")
	s.SetLogControl(level, nil)

	rec := do(t, s.Handler(), http.MethodGet, "/admin/api/log-level")
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"level":"info"}` {
		t.Fatalf("GET = %d %s", rec.Code, rec.Body.String())
	}
	logger.Debug("before")
	rec = doBody(t, s.Handler(), http.MethodPut, "/admin/api/log-level", `{"level":"DEBUG"}`)
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"level":"debug"}` {
		t.Fatalf("PUT = %d %s", rec.Code, rec.Body.String())
	}
	logger.Debug("after")
	if strings.Contains(out.String(), "before") || !strings.Contains(out.String(), "msg=after") {
		t.Fatalf("the broker's logger did not follow the level:\n%s", out.String())
	}
	if level.Level() != slog.LevelDebug {
		t.Fatal(level.Level())
	}
	if rec := do(t, s.Handler(), http.MethodGet, "/admin/api/log-level"); !strings.Contains(rec.Body.String(), `"debug"`) {
		t.Fatal(rec.Body.String())
	}

	// Bad input: an unknown level, a field that does not exist, no body.
	e := wantJSONError(t, doBody(t, s.Handler(), http.MethodPut, "/admin/api/log-level", `{"level":"loud"}`), http.StatusBadRequest, "bad_parameter")
	if !strings.Contains(e.Message, "debug") {
		t.Fatalf("message %q does not say what to send", e.Message)
	}
	wantJSONError(t, doBody(t, s.Handler(), http.MethodPut, "/admin/api/log-level", `{"lvl":"info"}`), http.StatusBadRequest, "bad_json")
	wantJSONError(t, doBody(t, s.Handler(), http.MethodPut, "/admin/api/log-level", ``), http.StatusBadRequest, "bad_json")
	if level.Level() != slog.LevelDebug {
		t.Fatal("a refused PUT changed the level")
	}

	entries := s.auditLog.newest(0, 10)
	if len(entries) != 4 {
		t.Fatalf("%d audit entries, want 4 (one accepted, three refused): %+v", len(entries), entries)
	}
	ok := entries[len(entries)-1]
	if ok.Action != "log.level" || ok.Outcome != "ok" || ok.Detail != "info -> debug" {
		t.Fatalf("audit of the change: %+v", ok)
	}
	if entries[2].Outcome != "bad_parameter" || entries[1].Outcome != "bad_json" {
		t.Fatalf("audit of the refusals: %+v", entries)
	}
}

func TestStartupConfigIsRedacted(t *testing.T) {
	cfg, err := config.Load(config.Table(), config.Inputs{Args: []string{"--user", "alice:hunter2", "--lease-ms", "1234"},
		Environ: []string{"FIBRIL_LOG_LEVEL=warn"}, Output: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(quietLogger())
	s.SetLogControl(new(slog.LevelVar), cfg.Values())
	rec := do(t, s.Handler(), http.MethodGet, "/admin/api/startup-config")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET = %d %s", rec.Code, rec.Body.String())
	}
	if strings.Contains(rec.Body.String(), "hunter2") {
		t.Fatalf("a password is served: %s", rec.Body.String())
	}
	var body struct {
		Values []struct {
			Key    string `json:"key"`
			Value  any    `json:"value"`
			Source string `json:"source"`
		} `json:"values"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body.Values) != len(config.Table()) {
		t.Fatalf("%v: %s", err, rec.Body.String())
	}
	got := map[string]string{}
	for _, v := range body.Values {
		got[v.Key] = v.Source
	}
	if got["delivery.inflight_ttl_ms"] != "flag" || got["log.level"] != "env" || got["server.data_dir"] != "default" {
		t.Fatalf("sources %v", got)
	}
}
