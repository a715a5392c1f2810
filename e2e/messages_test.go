package e2e

// The admin API's messages family against a real `fibril serve`
// (docs/admin.md): a message that exhausts its retries lands in a custom
// DLQ; it is browsed (headers, payload preview, binary-safe base64),
// replayed and consumed from its source; more dead letters are redriven
// by reason and time range, after a dry run; a queue's DLQ policy changes
// live; bad input gets a 4xx JSON error.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
)

// adminDo sends method path with a JSON body (raw when it is a string) and
// decodes the answer into out (when not nil).
func adminDo(t *testing.T, base, method, path string, body any, out any) (int, string) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	return resp.StatusCode, string(data)
}

type browseItem struct {
	Partition     uint32            `json:"partition"`
	Offset        uint64            `json:"offset"`
	State         string            `json:"state"`
	Headers       map[string]string `json:"headers"`
	PayloadLen    int               `json:"payload_len"`
	PayloadBase64 *string           `json:"payload_base64"`
	DeliveryCount int               `json:"delivery_count"`
	NotBeforeMs   int64             `json:"not_before_ms"`
	ExpiresAtMs   int64             `json:"expires_at_ms"`
}

type browsePage struct {
	Items          []browseItem `json:"items"`
	NextOffsetHint uint64       `json:"next_offset_hint"`
}

func browse(t *testing.T, base, query string) browsePage {
	t.Helper()
	var page browsePage
	if status, body := adminDo(t, base, "GET", "/admin/api/messages?"+query, nil, &page); status != http.StatusOK {
		t.Fatalf("GET messages?%s = %d %s", query, status, body)
	}
	return page
}

// wantProblem checks a 4xx answer's status and code.
func wantProblem(t *testing.T, what string, status int, body string, wantStatus int, wantCode string) {
	t.Helper()
	var p struct{ Code, Message string }
	if status != wantStatus || json.Unmarshal([]byte(body), &p) != nil || p.Code != wantCode || p.Message == "" {
		t.Fatalf("%s = %d %s, want %d %s", what, status, body, wantStatus, wantCode)
	}
}

func TestAdminMessagesBrowseReplayRedrive(t *testing.T) {
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s := startServer(t, t.TempDir(), "--admin-listen", adminAddr, "--lease-ms", "60000")
	base := "http://" + adminAddr
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	ctx := ctxT(t)
	c := dial(t, s, client.TransportTCP)
	if _, err := c.DeclareQueue(ctx, client.NewQueueConfig("orders").Dlq(client.DlqCustom("orders-dlq", "")).DlqMaxRetries(1)); err != nil {
		t.Fatal(err)
	}
	// Not valid UTF-8, with a NUL: the preview must survive as base64.
	payload := []byte{'o', 0x00, 0xff, 0xfe, 'k'}
	if _, err := c.Publisher("orders").PublishConfirmed(ctx, client.Raw(payload).Header("x-user", "7")); err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeTopic(ctx, "orders", client.SubscribeOptions{Prefetch: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// Two failed attempts: one retry allowed, then it is dead-lettered.
	for range 2 {
		if err := next(t, sub, 10*time.Second).Retry(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var page browsePage
	// The DLQ queue is created by its first copy: 404 until then.
	eventually(t, 10_000, 20, func() bool {
		status, _ := adminDo(t, base, "GET", "/admin/api/messages?topic=orders-dlq&include_payload=true&payload_limit_bytes=3", nil, &page)
		return status == http.StatusOK && len(page.Items) == 1
	})
	it := page.Items[0]
	preview, err := base64.StdEncoding.DecodeString(deref(it.PayloadBase64))
	switch {
	case err != nil || !bytes.Equal(preview, payload[:3]):
		t.Fatalf("preview %q (%v), want the first 3 bytes of %q", preview, err, payload)
	case it.PayloadLen != len(payload) || it.State != "ready" || it.Offset != 0:
		t.Fatalf("DLQ item %+v", it)
	case it.Headers["x-user"] != "7" || it.Headers["stroma.dlq.source_topic"] != "orders" || it.Headers["stroma.dlq.reason"] != "retries_exhausted":
		t.Fatalf("DLQ item headers %v", it.Headers)
	case page.NextOffsetHint != 1:
		t.Fatalf("next_offset_hint %d, want 1", page.NextOffsetHint)
	}
	if p := browse(t, base, "topic=orders-dlq"); p.Items[0].PayloadBase64 != nil {
		t.Fatal("a payload without include_payload")
	}
	if p := browse(t, base, "topic=orders-dlq&status=inflight"); len(p.Items) != 0 {
		t.Fatalf("status=inflight shows %+v", p.Items)
	}

	// Replay: the source gets a copy without stroma.dlq.*; the DLQ keeps its.
	var replay struct {
		Results []struct {
			Offset  uint64 `json:"offset"`
			Outcome string `json:"outcome"`
			Reason  string `json:"reason"`
		} `json:"results"`
	}
	if status, body := adminDo(t, base, "POST", "/admin/api/dlq/replay", map[string]any{"dlq_topic": "orders-dlq", "offsets": []uint64{0, 9}}, &replay); status != http.StatusOK {
		t.Fatalf("replay = %d %s", status, body)
	}
	if len(replay.Results) != 2 || replay.Results[0].Outcome != "replayed" || replay.Results[1].Outcome != "skipped" || replay.Results[1].Reason != "missing" {
		t.Fatalf("replay results %+v", replay.Results)
	}
	d := next(t, sub, 10*time.Second)
	if !bytes.Equal(d.Payload, payload) || d.Headers["x-user"] != "7" || d.Headers["stroma.dlq.reason"] != "" {
		t.Fatalf("replayed delivery %q %v", d.Payload, d.Headers)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if p := browse(t, base, "topic=orders-dlq"); len(p.Items) != 1 {
		t.Fatalf("the DLQ copy went with the replay: %+v", p.Items)
	}

	// Three more dead letters, by a terminal failure.
	for i := range 3 {
		publishText(t, c, "orders", fmt.Sprint("t", i))
		if err := next(t, sub, 10*time.Second).Fail(ctx); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10_000, 20, func() bool { return len(browse(t, base, "topic=orders-dlq").Items) == 4 })
	type redrive struct {
		Matched  int     `json:"matched"`
		Replayed int     `json:"replayed"`
		Skipped  int     `json:"skipped"`
		Next     *uint64 `json:"next_offset_hint"`
	}
	post := func(req map[string]any) redrive {
		t.Helper()
		var out redrive
		if status, body := adminDo(t, base, "POST", "/admin/api/dlq/redrive", req, &out); status != http.StatusOK {
			t.Fatalf("redrive %v = %d %s", req, status, body)
		}
		return out
	}
	nowMs := time.Now().UnixMilli()
	if r := post(map[string]any{"dlq_topic": "orders-dlq", "reason": "terminal_nack", "dry_run": true}); r.Matched != 3 || r.Replayed != 0 {
		t.Fatalf("dry run %+v, want 3 matched, none replayed", r)
	}
	if r := post(map[string]any{"dlq_topic": "orders-dlq", "from_offset": 1000}); r.Matched != 0 || r.Next != nil {
		t.Fatalf("a redrive from beyond the end %+v", r)
	}
	if r := post(map[string]any{"dlq_topic": "orders-dlq", "from_ms": nowMs + 3_600_000}); r.Matched != 0 {
		t.Fatalf("a range in the future matched %+v", r)
	}
	if len(browse(t, base, "topic=orders-dlq").Items) != 4 {
		t.Fatal("a dry run moved messages")
	}
	// Redrive by reason and range: the retries_exhausted copy moves.
	if r := post(map[string]any{"dlq_topic": "orders-dlq", "source_topic": "orders", "reason": "retries_exhausted", "from_ms": 0, "to_ms": nowMs}); r.Matched != 1 || r.Replayed != 1 || r.Next != nil {
		t.Fatalf("redrive by reason %+v", r)
	}
	d = next(t, sub, 10*time.Second)
	if !bytes.Equal(d.Payload, payload) {
		t.Fatalf("redriven delivery %q", d.Payload)
	}
	d.Ack(ctx)
	// A redrive completes the DLQ copy: only what the log still holds
	// shows it, as settled.
	if p := browse(t, base, "topic=orders-dlq"); len(p.Items) != 3 || p.Items[0].Offset != 1 {
		t.Fatalf("after the redrive the DLQ shows %+v", p.Items)
	}
	if p := browse(t, base, "topic=orders-dlq&include_settled=true&limit=2"); len(p.Items) != 2 || p.Items[0].State != "settled" || p.Items[1].Offset != 1 || p.NextOffsetHint != 2 {
		t.Fatalf("include_settled shows %+v (next %d)", p.Items, p.NextOffsetHint)
	}
	// The rest, with a limit of 2: two move, the hint says where to go on.
	r := post(map[string]any{"dlq_topic": "orders-dlq", "limit": 2})
	if r.Matched != 2 || r.Replayed != 2 || r.Next == nil || *r.Next != 3 {
		t.Fatalf("redrive with a limit %+v", r)
	}
	for range 2 {
		next(t, sub, 10*time.Second).Ack(ctx)
	}

	// The queue's DLQ policy, live: discard now, max_retries kept.
	var q struct {
		DLQ struct {
			Policy     string `json:"policy"`
			MaxRetries *int   `json:"max_retries"`
		} `json:"dlq"`
	}
	if status, body := adminDo(t, base, "PUT", "/admin/api/queue-dlq", map[string]any{"topic": "orders", "policy": "discard"}, &q); status != http.StatusOK || q.DLQ.Policy != "discard" || q.DLQ.MaxRetries == nil || *q.DLQ.MaxRetries != 1 {
		t.Fatalf("PUT queue-dlq = %d %s", status, body)
	}
	publishText(t, c, "orders", "dropped")
	next(t, sub, 10*time.Second).Fail(ctx)
	// Under a DLQ policy the source settles only once its copy is stored,
	// so once orders is empty, any copy would already be in the DLQ.
	eventually(t, 10_000, 20, func() bool { return len(browse(t, base, "topic=orders").Items) == 0 })
	if p := browse(t, base, "topic=orders-dlq"); len(p.Items) != 1 {
		t.Fatalf("a discard-policy failure reached the DLQ: %+v", p.Items)
	}

	// Bad input: clear 4xx errors, never a hang.
	status, body := adminDo(t, base, "GET", "/admin/api/messages?topic=orders&limit=5001", nil, nil)
	wantProblem(t, "limit over its cap", status, body, 400, "bad_parameter")
	status, body = adminDo(t, base, "GET", "/admin/api/messages?topic=orders&payload_limit_bytes=1048577", nil, nil)
	wantProblem(t, "preview over its cap", status, body, 400, "bad_parameter")
	status, body = adminDo(t, base, "GET", "/admin/api/messages?topic=nope", nil, nil)
	wantProblem(t, "unknown queue", status, body, 404, "not_found")
	status, body = adminDo(t, base, "GET", "/admin/api/messages?topic=orders&status=gone", nil, nil)
	wantProblem(t, "unknown status", status, body, 400, "bad_parameter")
	status, body = adminDo(t, base, "GET", "/admin/api/messages?topic=Bad", nil, nil)
	wantProblem(t, "bad name", status, body, 400, "bad_name")
	offsets := make([]uint64, 101)
	status, body = adminDo(t, base, "POST", "/admin/api/dlq/replay", map[string]any{"dlq_topic": "orders-dlq", "offsets": offsets}, nil)
	wantProblem(t, "101 offsets", status, body, 400, "bad_parameter")
	status, body = adminDo(t, base, "POST", "/admin/api/dlq/replay", map[string]any{"dlq_topic": "nope", "offsets": []uint64{0}}, nil)
	wantProblem(t, "replay from an unknown queue", status, body, 404, "not_found")
	status, body = adminDo(t, base, "POST", "/admin/api/dlq/replay", `{"dlq_topic": "orders-dlq", "offsets": [0`, nil)
	wantProblem(t, "malformed JSON", status, body, 400, "bad_json")
	status, body = adminDo(t, base, "POST", "/admin/api/dlq/redrive", map[string]any{"dlq_topic": "orders-dlq", "limit": 10_001}, nil)
	wantProblem(t, "redrive limit over its cap", status, body, 400, "bad_parameter")
	status, body = adminDo(t, base, "POST", "/admin/api/dlq/redrive", map[string]any{"dlq_topic": "orders-dlq", "lmit": 1}, nil)
	wantProblem(t, "unknown field", status, body, 400, "bad_json")
	status, body = adminDo(t, base, "PUT", "/admin/api/queue-dlq", map[string]any{"topic": "nope", "policy": "discard"}, nil)
	wantProblem(t, "queue-dlq of an unknown queue", status, body, 404, "not_found")
	status, body = adminDo(t, base, "PUT", "/admin/api/queue-dlq", map[string]any{"topic": "orders", "policy": "custom"}, nil)
	wantProblem(t, "custom without a target", status, body, 400, "bad_parameter")
	status, body = adminDo(t, base, "PUT", "/admin/api/queue-dlq", map[string]any{"topic": "orders", "policy": "custom", "target": map[string]string{"topic": "orders"}}, nil)
	wantProblem(t, "a queue dead-lettering into itself", status, body, 400, "bad_parameter")
	status, body = adminDo(t, base, "GET", "/admin/api/messages?topic=nope", nil, nil)
	wantProblem(t, "the unknown queue, asked about many times", status, body, 404, "not_found")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Payloads that left memory (a blob file read back on demand): a browse
// previews the stored bytes and a replay republishes the whole payload,
// across a restart too (the partitions load again from the log).
func TestAdminMessagesOfStoredPayloads(t *testing.T) {
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	// No resident payload budget: 256 bytes and up go to a blob file once
	// durable, and are read back from disk when needed.
	s := startServer(t, t.TempDir(), "--admin-listen", adminAddr, "--lease-ms", "60000", "--resident-payload-mb", "0")
	base := "http://" + adminAddr
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	ctx := ctxT(t)
	c := dial(t, s, client.TransportTCP)
	if _, err := c.DeclareQueue(ctx, client.NewQueueConfig("big").Dlq(client.DlqCustom("big-dlq", "")).DlqMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte{0xab, 0x00, 'z'}, 700)
	if _, err := c.Publisher("big").PublishConfirmed(ctx, client.Raw(payload)); err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeTopic(ctx, "big", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := next(t, sub, 10*time.Second).Fail(ctx); err != nil {
		t.Fatal(err)
	}
	sub.Close()
	c.Close()
	eventually(t, 10_000, 20, func() bool {
		status, _ := adminDo(t, base, "GET", "/admin/api/messages?topic=big-dlq", nil, nil)
		return status == http.StatusOK && len(browse(t, base, "topic=big-dlq").Items) == 1
	})
	// A restart: the copy is recovered from the log with its payload stored.
	s.kill()
	s.start()
	eventually(t, 10_000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	page := browse(t, base, "topic=big-dlq&include_payload=true&payload_limit_bytes=10")
	if len(page.Items) != 1 {
		t.Fatalf("after a restart the DLQ shows %+v", page.Items)
	}
	preview, err := base64.StdEncoding.DecodeString(deref(page.Items[0].PayloadBase64))
	if err != nil || !bytes.Equal(preview, payload[:10]) || page.Items[0].PayloadLen != len(payload) {
		t.Fatalf("stored preview %x (%v), len %d; want %x of %d", preview, err, page.Items[0].PayloadLen, payload[:10], len(payload))
	}
	var replay struct {
		Results []struct{ Outcome string } `json:"results"`
	}
	if status, body := adminDo(t, base, "POST", "/admin/api/dlq/replay", map[string]any{"dlq_topic": "big-dlq", "offsets": []uint64{0}}, &replay); status != http.StatusOK || len(replay.Results) != 1 || replay.Results[0].Outcome != "replayed" {
		t.Fatalf("replay = %d %s", status, body)
	}
	c = dial(t, s, client.TransportTCP)
	sub, err = c.SubscribeTopic(ctx, "big", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	d := next(t, sub, 10*time.Second)
	if !bytes.Equal(d.Payload, payload) {
		t.Fatalf("the replayed copy has %d bytes, want the %d published", len(d.Payload), len(payload))
	}
	d.Ack(ctx)
}
