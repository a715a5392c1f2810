package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/io/broker"
)

// fakeDashQueues is a broker with queues and the attention sampler's
// per-queue ready counts.
type fakeDashQueues struct {
	fakeQueues
	ready []QueueReady
}

func (f *fakeDashQueues) QueueReadyCounts() []QueueReady { return f.ready }

type backlogAnswer struct {
	IntervalMs int64                 `json:"interval_ms"`
	WindowMs   int64                 `json:"window_ms"`
	QueuesMax  int                   `json:"queues_max"`
	PointsMax  int                   `json:"points_max"`
	Queues     map[string][][2]int64 `json:"queues"`
}

func getBacklog(t *testing.T, s *Server) backlogAnswer {
	t.Helper()
	rec := do(t, s.Handler(), http.MethodGet, "/admin/api/queue-backlog")
	if rec.Code != http.StatusOK {
		t.Fatalf("queue-backlog = %d %s", rec.Code, rec.Body.String())
	}
	var out backlogAnswer
	decodeInto(t, rec, &out)
	return out
}

// GET /admin/api/queue-backlog answers the attention sampler's points per
// queue, keyed as the attention items are, within the window and never
// more than points_max of them however fast the sampler runs; a queue no
// longer loaded leaves the answer.
func TestQueueBacklogHistoryIsTheSamplersBounded(t *testing.T) {
	s := newServer(quietLogger())
	wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/admin/api/queue-backlog"), http.StatusServiceUnavailable, "starting")
	f := &fakeDashQueues{}
	s.Attach(f) // samples nothing: no queue yet
	if got := getBacklog(t, s); len(got.Queues) != 0 || got.IntervalMs != historyIntervalMs || got.WindowMs != backlogWindowMaxMs ||
		got.QueuesMax != attentionQueuesMax || got.PointsMax != 121 {
		t.Fatalf("empty answer %+v", got)
	}
	t0 := int64(10_000_000)
	f.ready = []QueueReady{{Topic: "a", Ready: 3}, {Topic: "b", Group: "g1", Ready: 7, Consumers: 1}}
	s.sampleOnce(t0)
	f.ready[0].Ready = 5
	s.sampleOnce(t0 + 5_000)
	got := getBacklog(t, s)
	if a := got.Queues["a/"]; len(a) != 2 || a[0] != [2]int64{t0, 3} || a[1] != [2]int64{t0 + 5_000, 5} {
		t.Fatalf("queue a (default group): %v in %+v", a, got.Queues)
	}
	if b := got.Queues["b/g1"]; len(b) != 2 || b[1] != [2]int64{t0 + 5_000, 7} {
		t.Fatalf("queue b/g1: %v", b)
	}
	// A sampler driven every second for 15 minutes: the tracker trims to
	// the 10 min window, the answer to its newest points_max.
	for i := int64(1); i <= 900; i++ {
		f.ready[0].Ready = uint64(i)
		s.sampleOnce(t0 + 5_000 + i*1_000)
	}
	got = getBacklog(t, s)
	a := got.Queues["a/"]
	if len(a) != backlogPointsMax || a[len(a)-1] != [2]int64{t0 + 905_000, 900} {
		t.Fatalf("%d points (want the cap %d), newest %v", len(a), backlogPointsMax, a[len(a)-1])
	}
	for i := 1; i < len(a); i++ {
		if a[i][0] <= a[i-1][0] {
			t.Fatalf("points out of order at %d: %v", i, a[i-1:i+1])
		}
	}
	// ?key=: one queue's points only, keyed as in the full answer (the
	// default group spelled "" or "default"); a queue without history
	// answers no key; a key that is not topic/group is refused.
	for _, k := range []string{"a/", "a/default"} {
		rec := do(t, s.Handler(), http.MethodGet, "/admin/api/queue-backlog?key="+url.QueryEscape(k))
		var one backlogAnswer
		decodeInto(t, rec, &one)
		if len(one.Queues) != 1 || len(one.Queues["a/"]) != backlogPointsMax || one.PointsMax != backlogPointsMax {
			t.Fatalf("?key=%s: %d queues %v", k, len(one.Queues), one.Queues["a/"][:1])
		}
	}
	rec := do(t, s.Handler(), http.MethodGet, "/admin/api/queue-backlog?key=b%2Fg1")
	var one backlogAnswer
	decodeInto(t, rec, &one)
	if len(one.Queues) != 1 || len(one.Queues["b/g1"]) == 0 {
		t.Fatalf("?key=b/g1: %v", one.Queues)
	}
	rec = do(t, s.Handler(), http.MethodGet, "/admin/api/queue-backlog?key=nope%2F")
	one = backlogAnswer{}
	decodeInto(t, rec, &one)
	if rec.Code != http.StatusOK || len(one.Queues) != 0 {
		t.Fatalf("?key=nope/: %d %v", rec.Code, one.Queues)
	}
	for bad, code := range map[string]string{"a": "bad_parameter", "bad..name%2F": "bad_name", "%2Fg1": "bad_name"} {
		wantJSONError(t, do(t, s.Handler(), http.MethodGet, "/admin/api/queue-backlog?key="+bad), http.StatusBadRequest, code)
	}

	f.ready = f.ready[1:] // a unloaded
	s.sampleOnce(t0 + 906_000)
	if got := getBacklog(t, s); got.Queues["a/"] != nil || len(got.Queues["b/g1"]) == 0 {
		t.Fatalf("after a unloaded: %v", got.Queues)
	}
}

// The "queues" event family is GET /admin/api/queues's answer, and an
// events request may ask for it.
func TestQueuesEventFamilyIsTheListing(t *testing.T) {
	s := newServer(quietLogger())
	f := &fakeDashQueues{fakeQueues: fakeQueues{list: broker.QueueListing{Queues: []broker.QueueStatus{{Topic: "a", Partitions: 2,
		Parts: []broker.PartitionStatus{{Partition: 0, Loaded: true, Ready: 4, Inflight: 1, Consumers: 2, PublishRatePerSec: 1.5}, {Partition: 1}}}}}}}
	s.Attach(f)
	rec := do(t, s.Handler(), http.MethodGet, "/admin/api/queues")
	if rec.Code != http.StatusOK {
		t.Fatalf("list = %d", rec.Code)
	}
	before := time.Now().UnixMilli()
	frame := string(s.serializeFamily(context.Background(), "queues"))
	after := time.Now().UnixMilli()
	data, ok := strings.CutPrefix(frame, "event: queues\ndata: ")
	if !ok {
		t.Fatalf("frame %q", frame)
	}
	var fromEvent, fromList map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &fromEvent); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &fromList); err != nil {
		t.Fatal(err)
	}
	// Both carry at_ms, the broker's clock at the listing (the listing
	// was read just before the event: at most as late as it).
	eventAt, _ := fromEvent["at_ms"].(float64)
	listAt, _ := fromList["at_ms"].(float64)
	if int64(eventAt) < before || int64(eventAt) > after || listAt <= 0 || int64(listAt) > int64(eventAt) {
		t.Fatalf("at_ms: event %v (want within [%d, %d]), listing %v", fromEvent["at_ms"], before, after, fromList["at_ms"])
	}
	delete(fromEvent, "at_ms")
	delete(fromList, "at_ms")
	a, _ := json.Marshal(fromEvent)
	b, _ := json.Marshal(fromList)
	if !bytes.Equal(a, b) {
		t.Fatalf("event %s\nlisting %s", a, b)
	}
	if !strings.Contains(string(a), `"ready":4`) {
		t.Fatalf("event without the counts: %s", a)
	}
	if _, err := parseFamilies(httpRequest("/admin/api/events?families=queues,overview")); err != nil {
		t.Fatalf("families=queues refused: %v", err)
	}
}

func httpRequest(target string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://x"+target, nil)
	return r
}
