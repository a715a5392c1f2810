package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/io/broker"
)

// The queue endpoints through httptest against a fake broker: the JSON
// shapes, the mapping of the broker's refusals to statuses, null counts for
// unloaded partitions, and that a refusal before the broker is reached
// reaches nothing (the fake records every call).

type fakeQueues struct {
	fakeSource
	list      broker.QueueListing
	deleteErr error
	calls     []string
}

func (f *fakeQueues) ListQueues(context.Context) (broker.QueueListing, error) {
	f.calls = append(f.calls, "list")
	return f.list, nil
}

func (f *fakeQueues) Queue(_ context.Context, topic, group string) (broker.QueueStatus, error) {
	f.calls = append(f.calls, "queue")
	for _, q := range f.list.Queues {
		if q.Topic == topic {
			return q, nil
		}
	}
	return broker.QueueStatus{}, &broker.QueueOpError{Kind: broker.QueueNotFound, Message: "no queue " + topic}
}

func (f *fakeQueues) DeclareQueue(_ context.Context, d broker.QueueDeclare) (bool, error) {
	f.calls = append(f.calls, "declare")
	f.list.Queues = append(f.list.Queues, broker.QueueStatus{Topic: d.Topic, Partitions: max(d.PartitionCount, 1), DLQ: d.DLQ,
		Parts: []broker.PartitionStatus{{Partition: 0}}})
	return true, nil
}

func (f *fakeQueues) DeleteQueue(context.Context, string, string) error {
	f.calls = append(f.calls, "delete")
	return f.deleteErr
}

func (f *fakeQueues) PurgeQueue(context.Context, string, string) (uint64, error) {
	f.calls = append(f.calls, "purge")
	return 7, nil
}

func (f *fakeQueues) AdminPublish(_ context.Context, _, _ string, p uint32, _ []byte, ct core.ContentType) (core.QueueID, uint64, error) {
	f.calls = append(f.calls, "publish")
	return core.QueueID{Partition: p}, 41, nil
}

func (f *fakeQueues) NodeInfo() broker.NodeInfo {
	return broker.NodeInfo{Name: "n1", AdvertiseHost: "h", AdvertisePort: 1}
}
func (f *fakeQueues) DefaultMaxRetries() uint32 { return 5 }
func (f *fakeQueues) QueueGauges(dst []broker.QueueGauge) []broker.QueueGauge {
	return append(dst, broker.QueueGauge{Queue: core.QueueID{Topic: "t", Partition: 2}, Ready: 3, Inflight: 1})
}

func sendQ(t *testing.T, h http.Handler, method, path, body string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil && !strings.HasPrefix(path, "/metrics") {
		t.Fatalf("%s %s: not JSON: %q", method, path, rec.Body.String())
	}
	return rec, out
}

func TestQueueListingShapesUnloadedAsNull(t *testing.T) {
	s := newServer(quietLogger())
	f := &fakeQueues{list: broker.QueueListing{Queues: []broker.QueueStatus{{Topic: "a", Partitions: 2,
		Parts: []broker.PartitionStatus{{Partition: 0, Loaded: true, Ready: 4, Inflight: 1, Consumers: 2}, {Partition: 1}}}}}}
	s.Attach(f)
	rec, out := sendQ(t, s.Handler(), "GET", "/admin/api/queues", "")
	if rec.Code != 200 {
		t.Fatalf("list = %d", rec.Code)
	}
	q := out["queues"].([]any)[0].(map[string]any)
	if q["ready"] != 4.0 || q["inflight"] != 1.0 || q["loaded_partitions"] != 1.0 || q["partition_count"] != 2.0 ||
		q["dlq"].(map[string]any)["policy"] != "discard" || q["dlq"].(map[string]any)["max_retries"] != 5.0 {
		t.Fatalf("queue: %v", q)
	}
	p1 := q["partitions"].([]any)[1].(map[string]any)
	if p1["loaded"] != false || p1["ready"] != nil || p1["inflight"] != nil {
		t.Fatalf("an unloaded partition: %v", p1)
	}
}

func TestQueueRefusalsMapToStatuses(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{&broker.QueueOpError{Kind: broker.QueueNotFound, Message: "no queue"}, 404, "not_found"},
		{&broker.QueueOpError{Kind: broker.QueueInUse, Message: "2 inflight", Inflight: 2}, 409, "in_use"},
		{&broker.QueueOpError{Kind: broker.QueueBusy, Message: "loading"}, 409, "conflict"},
		{&broker.QueueOpError{Kind: broker.QueueBadInput, Message: "bad"}, 400, "bad_parameter"},
		{&broker.QueueOpError{Kind: broker.QueueRetry, Message: "later"}, 503, "not_ready"},
		{broker.ErrNoSuchMachine, 503, "not_ready"},
		{context.DeadlineExceeded, 503, "not_ready"},
	}
	for _, tc := range cases {
		s := newServer(quietLogger())
		s.Attach(&fakeQueues{deleteErr: tc.err})
		rec, out := sendQ(t, s.Handler(), "POST", "/admin/api/queues/delete", `{"topic":"a"}`)
		if rec.Code != tc.status || out["code"] != tc.code || out["message"] == "" {
			t.Errorf("%v: %d %v, want %d %s", tc.err, rec.Code, out, tc.status, tc.code)
		}
	}
}

func TestQueueBadInputReachesNoBroker(t *testing.T) {
	s := newServer(quietLogger())
	f := &fakeQueues{}
	s.Attach(f)
	for _, c := range []struct{ path, body string }{
		{"/admin/api/queues", `{"topic":"a b"}`},
		{"/admin/api/queues", `{"topic":"a","policy":"custom"}`},
		{"/admin/api/queues", `{"topic":"a","target":{"topic":"b"}}`},
		{"/admin/api/queues/delete", `{"topic":"a","x":1}`},
		{"/admin/api/queues/purge", `{"topic":""}`},
		{"/admin/api/publish", `{"topic":"a"}`},
		{"/admin/api/publish", `{"topic":"a","text":"x","content_type":"nope"}`},
	} {
		if rec, _ := sendQ(t, s.Handler(), "POST", c.path, c.body); rec.Code != 400 {
			t.Errorf("%s %s: %d, want 400", c.path, c.body, rec.Code)
		}
	}
	if len(f.calls) != 0 {
		t.Fatalf("bad input reached the broker: %v", f.calls)
	}
	// Every refused mutation is audited.
	if n := len(s.auditLog.newest(0, auditRingSize)); n != 7 {
		t.Fatalf("%d audit entries, want 7", n)
	}
}

func TestQueueCreatePublishPurgeTopologyAndGauges(t *testing.T) {
	s := newServer(quietLogger())
	f := &fakeQueues{}
	s.Attach(f)
	if rec, out := sendQ(t, s.Handler(), "POST", "/admin/api/queues", `{"topic":"a","partition_count":1,"policy":"global"}`); rec.Code != 201 ||
		out["dlq"].(map[string]any)["policy"] != "global" {
		t.Fatalf("create = %d %v", rec.Code, out)
	}
	if rec, out := sendQ(t, s.Handler(), "POST", "/admin/api/publish", `{"topic":"a","text":"x","partition":3}`); rec.Code != 200 || out["partition"] != 3.0 || out["offset"] != 41.0 {
		t.Fatalf("publish = %d %v", rec.Code, out)
	}
	if rec, out := sendQ(t, s.Handler(), "POST", "/admin/api/queues/purge", `{"topic":"a"}`); rec.Code != 200 || out["purged"] != 7.0 {
		t.Fatalf("purge = %d %v", rec.Code, out)
	}
	rec, out := sendQ(t, s.Handler(), "GET", "/admin/api/topology", "")
	if rec.Code != 200 || out["node"].(map[string]any)["advertise_address"] != "h:1" || len(out["queues"].([]any)) != 1 {
		t.Fatalf("topology = %d %v", rec.Code, out)
	}
	rec = do(t, s.Handler(), "GET", "/metrics")
	if body := rec.Body.String(); !strings.Contains(body, `fibril_queue_ready{group="",partition="2",topic="t"} 3`) ||
		!strings.Contains(body, `fibril_queue_inflight{group="",partition="2",topic="t"} 1`) {
		t.Fatalf("gauges missing:\n%s", body)
	}
}
