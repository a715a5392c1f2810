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
	"github.com/fibril-go/fibril/io/broker"
)

// fakeMessages is the broker as the messages family sees it: it records
// what reached it and answers what the test set.
type fakeMessages struct {
	fakeSource
	browses []node.BrowseMessages
	plans   []node.ReplayPlan
	page    *node.MessagesPage
	result  node.ReplayResult
	err     error
}

func (f *fakeMessages) BrowseMessages(_ context.Context, q node.BrowseMessages) (*node.MessagesPage, error) {
	f.browses = append(f.browses, q)
	if f.err != nil {
		return nil, f.err
	}
	return f.page, nil
}

func (f *fakeMessages) SetQueueDLQ(_ context.Context, topic, group string, policy core.DLQPolicy, maxRetries *uint32) (*node.QueueSettings, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &node.QueueSettings{Partitions: 1, DLQ: &policy, MaxRetries: maxRetries}, nil
}

func (f *fakeMessages) RunReplay(_ context.Context, plan node.ReplayPlan) (node.ReplayResult, error) {
	f.plans = append(f.plans, plan)
	return f.result, f.err
}

func messagesServer(t *testing.T) (*Server, *fakeMessages) {
	s := newServer(quietLogger())
	f := &fakeMessages{page: &node.MessagesPage{Queue: core.QueueID{Topic: "orders"}, Partitions: 1}}
	s.Attach(f)
	return s, f
}

func send(t *testing.T, s *Server, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	s.handler.ServeHTTP(rec, req)
	return rec
}

func TestMessagesDefaultsAndCapsBeforeTheBroker(t *testing.T) {
	s, f := messagesServer(t)
	if rec := do(t, s.handler, "GET", "/admin/api/messages?topic=orders"); rec.Code != http.StatusOK {
		t.Fatalf("GET messages = %d %s", rec.Code, rec.Body)
	}
	q := f.browses[0]
	if q.Limit != 50 || q.PreviewBytes != 4096 || q.States != node.BrowseActive || q.Settled || q.Payload || q.Group != "" {
		t.Fatalf("defaults reached the broker as %+v", q)
	}
	do(t, s.handler, "GET", "/admin/api/messages?topic=orders&group=default&status=ready,pending_dlq&limit=5000&payload_limit_bytes=1048576&include_settled=true")
	if q := f.browses[1]; q.Limit != 5000 || q.PreviewBytes != 1<<20 || q.States != node.BrowseStates(1<<core.MessageReady|1<<core.MessagePendingDLQ) || !q.Settled {
		t.Fatalf("caps reached the broker as %+v", q)
	}
	for _, bad := range []string{"limit=5001", "limit=0", "payload_limit_bytes=1048577", "status=done", "from=-1", "include_payload=yes", "partition=4294967296"} {
		wantJSONError(t, do(t, s.handler, "GET", "/admin/api/messages?topic=orders&"+bad), http.StatusBadRequest, "bad_parameter")
	}
	wantJSONError(t, do(t, s.handler, "GET", "/admin/api/messages"), http.StatusBadRequest, "bad_parameter")
	wantJSONError(t, do(t, s.handler, "GET", "/admin/api/messages?topic=Orders"), http.StatusBadRequest, "bad_name")
	if len(f.browses) != 2 {
		t.Fatalf("bad input reached the broker: %d browses", len(f.browses))
	}
	f.err = &broker.ErrOperator{Err: core.ErrQueueUnknown}
	wantJSONError(t, do(t, s.handler, "GET", "/admin/api/messages?topic=nope"), http.StatusNotFound, "not_found")
	f.err = context.DeadlineExceeded
	wantJSONError(t, do(t, s.handler, "GET", "/admin/api/messages?topic=orders"), http.StatusServiceUnavailable, "not_ready")
}

func TestMessageItemsRenderStatesAndPreviews(t *testing.T) {
	body := &core.Body{Payload: []byte{0, 0xff, 'x', 'y'}, Headers: []core.Header{{Key: "k", Value: "v"}}}
	it := node.BrowseItem{MessageView: core.MessageView{Offset: 4, State: core.MessageInflight, Retries: 2, DueMs: 99, Body: body},
		Live: true, PayloadLen: 4, PreviewBytes: 2}
	out := toMessageItem(0, &it, true)
	if out.State != "inflight" || out.DeliveryCount != 3 || out.LeaseDeadlineMs != 99 || out.NotBeforeMs != 0 || *out.PayloadBase64 != "AP8=" || out.Headers["k"] != "v" || out.PayloadLen != 4 {
		t.Fatalf("inflight item %+v", out)
	}
	it.State = core.MessageDelayed
	if out := toMessageItem(0, &it, false); out.NotBeforeMs != 99 || out.DeliveryCount != 2 || out.PayloadBase64 != nil {
		t.Fatalf("delayed item %+v", out)
	}
	if out := toMessageItem(0, &node.BrowseItem{MessageView: core.MessageView{Offset: 9}}, true); out.State != "settled" || out.PayloadBase64 != nil {
		t.Fatalf("settled item %+v", out)
	}
}

func TestReplayAndRedriveInput(t *testing.T) {
	s, f := messagesServer(t)
	offsets := make([]string, 101)
	for i := range offsets {
		offsets[i] = "1"
	}
	wantJSONError(t, send(t, s, "POST", "/admin/api/dlq/replay", `{"dlq_topic":"d","offsets":[`+strings.Join(offsets, ",")+`]}`), http.StatusBadRequest, "bad_parameter")
	wantJSONError(t, send(t, s, "POST", "/admin/api/dlq/replay", `{"dlq_topic":"d","offsets":[]}`), http.StatusBadRequest, "bad_parameter")
	wantJSONError(t, send(t, s, "POST", "/admin/api/dlq/replay", `{"dlq_topic":"d","offsets":[1]`), http.StatusBadRequest, "bad_json")
	wantJSONError(t, send(t, s, "POST", "/admin/api/dlq/replay", `{"dlq_topic":"d","offset":[1]}`), http.StatusBadRequest, "bad_json")
	for _, bad := range []string{`"limit":10001`, `"from_ms":5,"to_ms":4`, `"reason":"bored"`, `"source_group":"g"`, `"from_ms":-1`} {
		wantJSONError(t, send(t, s, "POST", "/admin/api/dlq/redrive", `{"dlq_topic":"d",`+bad+`}`), http.StatusBadRequest, "bad_parameter")
	}
	if len(f.plans) != 0 {
		t.Fatalf("bad input reached the broker: %+v", f.plans)
	}
	f.result = node.ReplayResult{Items: []node.ReplayOutcome{{Offset: 1, Replayed: true}, {Offset: 2, Reason: "missing"}}, Replayed: 1, Skipped: 1}
	rec := send(t, s, "POST", "/admin/api/dlq/replay", `{"dlq_topic":"d","dlq_group":"default","offsets":[1,2]}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `{"offset":1,"outcome":"replayed"}`) || !strings.Contains(rec.Body.String(), `{"offset":2,"outcome":"skipped","reason":"missing"}`) {
		t.Fatalf("replay = %d %s", rec.Code, rec.Body)
	}
	f.result = node.ReplayResult{Matched: 3, Replayed: 2, Skipped: 1, Done: false, NextPartition: 1, NextOffset: 7}
	rec = send(t, s, "POST", "/admin/api/dlq/redrive", `{"dlq_topic":"d","source_topic":"orders","reason":"expired","from_ms":1,"to_ms":2,"dry_run":true}`)
	var out map[string]any
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out["matched"] != 3.0 || out["next_offset_hint"] != 7.0 || out["next_partition"] != 1.0 {
		t.Fatalf("redrive = %d %s", rec.Code, rec.Body)
	}
	p := f.plans[len(f.plans)-1]
	if !p.Redrive || !p.DryRun || p.Limit != redriveLimitDefault || p.Filter.Source.Topic != "orders" || p.Filter.SourceGroup || p.Filter.Reason != "expired" || p.Filter.ToMs != 2 {
		t.Fatalf("redrive plan %+v", p)
	}
	// Every mutation is audited, refused ones too.
	got := map[string]int{}
	for _, e := range s.auditLog.newest(0, 100) {
		got[e.Action+" "+e.Outcome]++
	}
	if got["dlq.replay ok"] != 1 || got["dlq.redrive ok"] != 1 || got["dlq.replay bad_json"] != 2 || got["dlq.redrive bad_parameter"] != 5 {
		t.Fatalf("audit %v", got)
	}
}

func TestQueueDLQInput(t *testing.T) {
	s, _ := messagesServer(t)
	for _, bad := range []string{`{"topic":"q","policy":"custom"}`, `{"topic":"q","policy":"sideways"}`, `{"topic":"q","policy":"discard","target":{"topic":"d"}}`, `{"policy":"discard"}`} {
		wantJSONError(t, send(t, s, "PUT", "/admin/api/queue-dlq", bad), http.StatusBadRequest, "bad_parameter")
	}
	rec := send(t, s, "PUT", "/admin/api/queue-dlq", `{"topic":"q","policy":"custom","target":{"topic":"d","group":"default"},"max_retries":4}`)
	var out struct {
		DLQ map[string]any `json:"dlq"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.DLQ["policy"] != "custom" || out.DLQ["topic"] != "d" || out.DLQ["group"] != "default" || out.DLQ["max_retries"] != 4.0 {
		t.Fatalf("PUT queue-dlq = %d %s", rec.Code, rec.Body)
	}
}
