package admin

// What the dashboard's Queues and Queue pages read beyond the queue
// operations (issue 13): the SSE family "queues" and the backlog history
// GET /admin/api/queue-backlog. Invariants:
//   - the family's value is GET /admin/api/queues's answer, built by the
//     same queueListing, so a page fed by the stream and one fed by polling
//     show the same numbers (a handler test compares the two);
//   - the listing carries at_ms, the broker's clock when the counts were
//     read: the same clock as the backlog history's points, so a page
//     charts both on one time axis whatever the browser's clock says;
//   - the backlog history is a read-only copy of what the attention
//     sampler already keeps (surface.go, backlogTracker): nothing is sampled
//     for it, and the answer is bounded by attentionQueuesMax queues times
//     backlogPointsMax points, whatever the sampler was fed.

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/fibril-go/fibril/core"
)

// backlogPointsMax bounds the points one queue's history answers: the
// 10 min window at the 5 s sampling period, plus the point at each edge.
// The tracker trims by time; this caps the copy too, so a sampler driven
// faster (tests) cannot make the answer grow.
const backlogPointsMax = backlogWindowMaxMs/historyIntervalMs + 1

// queueListing is GET /admin/api/queues's answer (listQueues writes it)
// and the queues family's value.
func (s *Server) queueListing(ctx context.Context) (map[string]any, error) {
	b, err := backend[queueBackend](s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, queueCallTimeout)
	defer cancel()
	list, err := b.ListQueues(ctx)
	if err != nil {
		return nil, queueProblem(err)
	}
	out := make([]QueueJSON, 0, len(list.Queues))
	for i := range list.Queues {
		out = append(out, queueJSON(&list.Queues[i], b.DefaultMaxRetries()))
	}
	return map[string]any{"queues": out, "at_ms": time.Now().UnixMilli()}, nil
}

// backlogHistory copies the tracker's points: per queue key (topic + "/" +
// group, the group "" for the default group as in the listing and in the
// attention items' subjects), [at_ms, ready] pairs, oldest first.
func (t *backlogTracker) history() map[string][][2]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string][][2]int64, len(t.queues))
	for key, q := range t.queues {
		points := q.points
		if len(points) > backlogPointsMax {
			points = points[len(points)-backlogPointsMax:]
		}
		pairs := make([][2]int64, 0, len(points))
		for _, p := range points {
			pairs = append(pairs, [2]int64{p.atMs, int64(p.ready)})
		}
		out[key] = pairs
	}
	return out
}

func init() {
	eventFamilies["queues"] = func(s *Server, ctx context.Context) (any, error) { return s.queueListing(ctx) }
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/queue-backlog", s.api(func(w http.ResponseWriter, r *http.Request) error {
			if _, err := backend[Source](s); err != nil {
				return err
			}
			queues := s.surf.backlog.history()
			// ?key=topic/group: one queue's history (the Queue page's),
			// not every queue's.
			if key, ok := r.URL.Query()["key"]; ok {
				topic, group, found := strings.Cut(key[0], "/")
				if !found {
					return problem(http.StatusBadRequest, "bad_parameter", "key %q: want topic/group (the default group spelled \"\", as in \"orders/\")", key[0])
				}
				if err := checkQueueName("key", topic, group); err != nil {
					return err
				}
				k := topic + "/" + core.NormalizeGroup(group)
				one := map[string][][2]int64{}
				if pts, ok := queues[k]; ok {
					one[k] = pts
				}
				queues = one
			}
			writeJSON(w, http.StatusOK, map[string]any{
				"interval_ms": historyIntervalMs, "window_ms": backlogWindowMaxMs,
				"queues_max": attentionQueuesMax, "points_max": backlogPointsMax,
				"queues": queues,
			})
			return nil
		}))
	})
}
