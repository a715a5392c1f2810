package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// Runtime settings and the global dead-letter target (SPEC 2, 14):
// GET|PUT /admin/api/runtime-settings and GET|PUT /admin/api/global-dlq.
// Invariants:
//   - the Node decides: this file maps JSON to the Node's messages and its
//     answers (and refusals) to JSON and status codes, nothing more;
//   - a PUT answers after the change is durable and in force (the Node's
//     answer), and is audited whatever its outcome;
//   - the JSON names are SPEC 14's keys, nested by group; a key the broker
//     has no mechanism for is an unknown field (400), never silently taken.

// runtimeBackend is what these endpoints need of the broker.
type runtimeBackend interface {
	RuntimeSettings(ctx context.Context) (node.RuntimeSettingsState, error)
	PutRuntimeSettings(ctx context.Context, expected uint64, patch node.RuntimePatch) (node.RuntimeSettingsState, error)
	GlobalDLQ(ctx context.Context) (node.GlobalDLQState, error)
	PutGlobalDLQ(ctx context.Context, expected uint64, target *core.DLQTarget) (node.GlobalDLQState, error)
}

// RuntimeSettingsJSON is the answer of GET and PUT runtime-settings.
type RuntimeSettingsJSON struct {
	Version  uint64               `json:"version"`
	Settings RuntimeSettingsGroup `json:"settings"`
	Locked   []string             `json:"locked"`
}

// RuntimeSettingsGroup holds the settings by group. In a PUT every field is
// optional: only the keys given change.
type RuntimeSettingsGroup struct {
	Delivery         *DeliverySettings   `json:"delivery,omitempty"`
	Connection       *ConnectionSettings `json:"connection,omitempty"`
	Partitioning     *PartitionSettings  `json:"partitioning,omitempty"`
	IdleQueueCleanup *IdleSettings       `json:"idle_queue_cleanup,omitempty"`
}

type DeliverySettings struct {
	InflightTTLMs  *int64 `json:"inflight_ttl_ms,omitempty"`
	ExpiryBatchMax *int   `json:"expiry_batch_max,omitempty"`
}

type ConnectionSettings struct {
	ReconnectGraceMs          *int64 `json:"reconnect_grace_ms,omitempty"`
	ResumeSessionRestartTTLMs *int64 `json:"resume_session_restart_ttl_ms,omitempty"`
}

type PartitionSettings struct {
	DefaultPartitionCount *uint32 `json:"default_partition_count,omitempty"`
}

type IdleSettings struct {
	Enabled         *bool  `json:"enabled,omitempty"`
	EvictAfterMs    *int64 `json:"evict_after_ms,omitempty"`
	SweepIntervalMs *int64 `json:"sweep_interval_ms,omitempty"`
}

// runtimePut is the body of PUT runtime-settings.
type runtimePut struct {
	ExpectedVersion *uint64              `json:"expected_version"`
	Settings        RuntimeSettingsGroup `json:"settings"`
}

// GlobalDLQJSON is the answer of GET and PUT global-dlq.
type GlobalDLQJSON struct {
	Version uint64      `json:"version"`
	Target  *TargetJSON `json:"target"`
}

// TargetJSON names a queue.
type TargetJSON struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
}

// globalDLQPut is the body of PUT global-dlq; Target is kept raw so that
// null (clear) and a missing field (an error) stay apart.
type globalDLQPut struct {
	ExpectedVersion *uint64         `json:"expected_version"`
	Target          json.RawMessage `json:"target"`
}

// runtimeCallTimeout bounds how long a request waits for the Node (a PUT:
// for its record to be durable and every loaded partition to apply it),
// below the server's 30 s write timeout so the answer still goes out: a
// 503 saying the change may still take effect.
var runtimeCallTimeout = 25 * time.Second // a var: tests shorten it

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/runtime-settings", s.api(s.getRuntimeSettings))
		mux.HandleFunc("PUT /admin/api/runtime-settings", s.api(s.putRuntimeSettings))
		mux.HandleFunc("GET /admin/api/global-dlq", s.api(s.getGlobalDLQ))
		mux.HandleFunc("PUT /admin/api/global-dlq", s.api(s.putGlobalDLQ))
	})
}

func (s *Server) getRuntimeSettings(w http.ResponseWriter, r *http.Request) error {
	b, err := backend[runtimeBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), runtimeCallTimeout)
	defer cancel()
	st, err := b.RuntimeSettings(ctx)
	if err != nil {
		return runtimeCallFailed(err)
	}
	writeJSON(w, http.StatusOK, runtimeJSONOf(&st))
	return nil
}

func (s *Server) putRuntimeSettings(w http.ResponseWriter, r *http.Request) (err error) {
	var body runtimePut
	var patch node.RuntimePatch
	defer func() { s.audit(r, "runtime_settings.put", "runtime-settings", err, describePatch(&patch)) }()
	b, err := backend[runtimeBackend](s)
	if err != nil {
		return err
	}
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	if body.ExpectedVersion == nil {
		return problem(http.StatusBadRequest, "bad_parameter",
			"give expected_version: the version you read with GET /admin/api/runtime-settings")
	}
	patch = patchOf(&body.Settings)
	ctx, cancel := context.WithTimeout(r.Context(), runtimeCallTimeout)
	defer cancel()
	st, err := b.PutRuntimeSettings(ctx, *body.ExpectedVersion, patch)
	if err != nil {
		return runtimeCallFailed(err)
	}
	if st.Err != nil {
		return runtimeRefusal(st.Err, runtimeJSONOf(&st))
	}
	writeJSON(w, http.StatusOK, runtimeJSONOf(&st))
	return nil
}

func (s *Server) getGlobalDLQ(w http.ResponseWriter, r *http.Request) error {
	b, err := backend[runtimeBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), runtimeCallTimeout)
	defer cancel()
	st, err := b.GlobalDLQ(ctx)
	if err != nil {
		return runtimeCallFailed(err)
	}
	writeJSON(w, http.StatusOK, globalDLQJSONOf(&st))
	return nil
}

func (s *Server) putGlobalDLQ(w http.ResponseWriter, r *http.Request) (err error) {
	var body globalDLQPut
	target := "cleared"
	defer func() { s.audit(r, "global_dlq.put", "global-dlq", err, target) }()
	b, err := backend[runtimeBackend](s)
	if err != nil {
		return err
	}
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	if body.ExpectedVersion == nil {
		return problem(http.StatusBadRequest, "bad_parameter",
			"give expected_version: the version you read with GET /admin/api/global-dlq")
	}
	if len(body.Target) == 0 {
		return problem(http.StatusBadRequest, "bad_parameter",
			"give target: {\"topic\":..., \"group\":...} to set the global dead-letter queue, or null to clear it")
	}
	var t *core.DLQTarget
	if !bytes.Equal(bytes.TrimSpace(body.Target), []byte("null")) {
		var tj TargetJSON
		dec := json.NewDecoder(bytes.NewReader(body.Target))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&tj); err != nil {
			return problem(http.StatusBadRequest, "bad_json", "target must be {\"topic\":..., \"group\":...} or null: %v", err)
		}
		t = &core.DLQTarget{Topic: tj.Topic, Group: tj.Group}
		target = tj.Topic + "/" + groupName(core.NormalizeGroup(tj.Group))
	}
	ctx, cancel := context.WithTimeout(r.Context(), runtimeCallTimeout)
	defer cancel()
	st, err := b.PutGlobalDLQ(ctx, *body.ExpectedVersion, t)
	if err != nil {
		return runtimeCallFailed(err)
	}
	if st.Err != nil {
		return runtimeRefusal(st.Err, globalDLQJSONOf(&st))
	}
	writeJSON(w, http.StatusOK, globalDLQJSONOf(&st))
	return nil
}

// runtimeCallFailed maps a call that did not get the Node's answer: past
// runtimeCallTimeout a 503 that says a PUT may still take effect (read the
// version to know), anything else as it is.
func runtimeCallFailed(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return problem(http.StatusServiceUnavailable, "timeout",
			"the broker did not answer within %v; a change may still take effect: GET the settings and compare the version before retrying", runtimeCallTimeout)
	}
	return err
}

// runtimeRefusal maps the Node's refusal to the API's problem.
func runtimeRefusal(e *node.RuntimeRefusal, current any) error {
	switch e.Code {
	case node.RefusedStaleVersion:
		p := problem(http.StatusConflict, "stale_version",
			"the value changed since you read it; read the current one (in current), then retry with its version")
		p.Current = current
		return p
	case node.RefusedLocked:
		return problem(http.StatusForbidden, "locked",
			"the %s group is locked by runtime_locks.%s at startup; restart without the lock to change it", e.Key, e.Key)
	case node.RefusedInvalid:
		if e.Key == "target" {
			return problem(http.StatusBadRequest, "bad_name", "target must be %s", e.Message)
		}
		return problem(http.StatusBadRequest, "bad_setting", "%s must be %s", e.Key, e.Message)
	case node.RefusedEmpty:
		return problem(http.StatusBadRequest, "bad_parameter", "settings names no key to change; give at least one")
	case node.RefusedBehind:
		return problem(http.StatusServiceUnavailable, "not_ready", "the broker's log is behind; retry shortly")
	}
	return fmt.Errorf("admin: unknown refusal %d", e.Code)
}

func runtimeJSONOf(st *node.RuntimeSettingsState) RuntimeSettingsJSON {
	s := st.Settings
	enabled := s.IdleCleanupEnabled
	out := RuntimeSettingsJSON{Version: st.Version, Locked: append([]string{}, st.Locked...), Settings: RuntimeSettingsGroup{
		Delivery:         &DeliverySettings{InflightTTLMs: &s.LeaseMs, ExpiryBatchMax: &s.ExpiryBatchMax},
		Connection:       &ConnectionSettings{ReconnectGraceMs: &s.ReconnectGraceMs, ResumeSessionRestartTTLMs: &s.ResumeRestartTTLMs},
		Partitioning:     &PartitionSettings{DefaultPartitionCount: &s.DefaultPartitionCount},
		IdleQueueCleanup: &IdleSettings{Enabled: &enabled, EvictAfterMs: &s.IdleEvictAfterMs, SweepIntervalMs: &s.IdleSweepIntervalMs},
	}}
	return out
}

func patchOf(g *RuntimeSettingsGroup) node.RuntimePatch {
	var p node.RuntimePatch
	if d := g.Delivery; d != nil {
		p.LeaseMs, p.ExpiryBatchMax = d.InflightTTLMs, d.ExpiryBatchMax
	}
	if c := g.Connection; c != nil {
		p.ReconnectGraceMs, p.ResumeRestartTTLMs = c.ReconnectGraceMs, c.ResumeSessionRestartTTLMs
	}
	if pt := g.Partitioning; pt != nil {
		p.DefaultPartitionCount = pt.DefaultPartitionCount
	}
	if i := g.IdleQueueCleanup; i != nil {
		p.IdleCleanupEnabled, p.IdleEvictAfterMs, p.IdleSweepIntervalMs = i.Enabled, i.EvictAfterMs, i.SweepIntervalMs
	}
	return p
}

// describePatch lists key=value for the audit entry.
func describePatch(p *node.RuntimePatch) string {
	var parts []string
	add := func(key string, v any) { parts = append(parts, fmt.Sprintf("%s=%v", key, v)) }
	if p.LeaseMs != nil {
		add("delivery.inflight_ttl_ms", *p.LeaseMs)
	}
	if p.ExpiryBatchMax != nil {
		add("delivery.expiry_batch_max", *p.ExpiryBatchMax)
	}
	if p.ReconnectGraceMs != nil {
		add("connection.reconnect_grace_ms", *p.ReconnectGraceMs)
	}
	if p.ResumeRestartTTLMs != nil {
		add("connection.resume_session_restart_ttl_ms", *p.ResumeRestartTTLMs)
	}
	if p.DefaultPartitionCount != nil {
		add("partitioning.default_partition_count", *p.DefaultPartitionCount)
	}
	if p.IdleCleanupEnabled != nil {
		add("idle_queue_cleanup.enabled", *p.IdleCleanupEnabled)
	}
	if p.IdleEvictAfterMs != nil {
		add("idle_queue_cleanup.evict_after_ms", *p.IdleEvictAfterMs)
	}
	if p.IdleSweepIntervalMs != nil {
		add("idle_queue_cleanup.sweep_interval_ms", *p.IdleSweepIntervalMs)
	}
	return strings.Join(parts, " ")
}

func globalDLQJSONOf(st *node.GlobalDLQState) GlobalDLQJSON {
	out := GlobalDLQJSON{Version: st.Version}
	if st.Target != nil {
		out.Target = &TargetJSON{Topic: st.Target.Topic, Group: st.Target.Group}
	}
	return out
}
