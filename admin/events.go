package admin

// GET /admin/api/events: server-sent events (SPEC 11). Invariants:
//   - one ticker (eventTickMs) serializes each family asked by at least
//     one watcher once per tick, for all of them, and a family nobody
//     watches not at all (serialized counts it; a test holds it at 0);
//   - at most eventWatchersMax watchers; a watcher whose buffer is full is
//     dropped (its stream ends), never waited for: the tick never blocks;
//   - each write has its own deadline, so a peer that stops reading costs
//     one buffer, not a goroutine forever.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// eventTickMs is the period of the event stream.
	eventTickMs = 2_000
	// eventWatchersMax bounds the open event streams.
	eventWatchersMax = 64
	// eventBufferMax is how many events a watcher may have unwritten; past
	// it the watcher is dropped.
	eventBufferMax = 32
	// eventWriteTimeout bounds one write to a watcher.
	eventWriteTimeout = 10 * time.Second
	// eventAuditEntries is how many audit entries the audit family carries.
	eventAuditEntries = 50
)

// eventFamilies are the families a watcher may ask for, each building its
// value once per tick. Other families may add theirs from their own files.
var eventFamilies = map[string]func(s *Server, ctx context.Context) (any, error){
	"overview": func(s *Server, _ context.Context) (any, error) { return s.overview() },
	"history": func(s *Server, _ context.Context) (any, error) {
		last, ok := s.surf.hist.last()
		if !ok {
			return map[string]any{"sample": nil}, nil
		}
		return map[string]any{"sample": last}, nil
	},
	"attention": func(s *Server, _ context.Context) (any, error) {
		items := s.attention(time.Now())
		if items == nil {
			items = []AttentionItem{}
		}
		return map[string]any{"items": items}, nil
	},
	"connections": func(s *Server, ctx context.Context) (any, error) {
		b, err := backend[connectionsBackend](s)
		if err != nil {
			return nil, err
		}
		list, err := b.Connections(ctx)
		return map[string]any{"connections": list}, err
	},
	"subscriptions": func(s *Server, ctx context.Context) (any, error) {
		b, err := backend[connectionsBackend](s)
		if err != nil {
			return nil, err
		}
		list, err := b.Subscriptions(ctx)
		return map[string]any{"subscriptions": list}, err
	},
	"audit": func(s *Server, _ context.Context) (any, error) {
		return map[string]any{"entries": s.auditLog.newest(0, eventAuditEntries)}, nil
	},
}

type watcher struct {
	families map[string]bool
	ch       chan []byte
	dropped  chan struct{}
}

type eventHub struct {
	mu         sync.Mutex
	watchers   map[*watcher]struct{}
	serialized atomic.Uint64 // family values serialized, over all ticks
	dropped    atomic.Uint64 // watchers dropped for falling behind
}

func (h *eventHub) add(w *watcher) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watchers == nil {
		h.watchers = map[*watcher]struct{}{}
	}
	if len(h.watchers) >= eventWatchersMax {
		return false
	}
	h.watchers[w] = struct{}{}
	return true
}

func (h *eventHub) remove(w *watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
}

// eventLoop ticks until the listener stops.
func (s *Server) eventLoop() {
	t := time.NewTicker(eventTickMs * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.eventTick()
		case <-s.surf.stopped:
			return
		}
	}
}

// eventTick serializes every watched family once and hands it to every
// watcher of it without waiting (tests call it directly).
func (s *Server) eventTick() {
	h := &s.surf.events
	h.mu.Lock()
	wanted := map[string]bool{}
	for w := range h.watchers {
		for f := range w.families {
			wanted[f] = true
		}
	}
	h.mu.Unlock()
	if len(wanted) == 0 {
		return
	}
	names := make([]string, 0, len(wanted))
	for f := range wanted {
		names = append(names, f)
	}
	sort.Strings(names)
	ctx, cancel := context.WithTimeout(context.Background(), eventTickMs*time.Millisecond)
	defer cancel()
	frames := make(map[string][]byte, len(names))
	for _, f := range names {
		frames[f] = s.serializeFamily(ctx, f)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		for _, f := range names {
			if !w.families[f] {
				continue
			}
			select {
			case w.ch <- frames[f]:
			default:
				// Behind by eventBufferMax events: dropped, never waited for.
				delete(h.watchers, w)
				close(w.dropped)
				h.dropped.Add(1)
			}
			if _, still := h.watchers[w]; !still {
				break
			}
		}
	}
}

// serializeFamily is one SSE event of family f (an error event when the
// family could not be built this tick).
func (s *Server) serializeFamily(ctx context.Context, f string) []byte {
	s.surf.events.serialized.Add(1)
	v, err := eventFamilies[f](s, ctx)
	event := f
	if err != nil {
		event = "error"
		code := "internal"
		if p, ok := err.(*Problem); ok {
			code = p.Code
		}
		v = map[string]string{"family": f, "code": code, "message": err.Error()}
	}
	data, mErr := json.Marshal(v)
	if mErr != nil {
		data = []byte(fmt.Sprintf(`{"family":%q,"code":"internal"}`, f))
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", event, data)
	return b.Bytes()
}

// parseFamilies reads ?families=a,b (default: overview).
func parseFamilies(r *http.Request) (map[string]bool, error) {
	text := r.URL.Query().Get("families")
	if text == "" {
		text = "overview"
	}
	out := map[string]bool{}
	for _, f := range strings.Split(text, ",") {
		f = strings.TrimSpace(f)
		if _, ok := eventFamilies[f]; !ok {
			known := make([]string, 0, len(eventFamilies))
			for k := range eventFamilies {
				known = append(known, k)
			}
			sort.Strings(known)
			return nil, problem(http.StatusBadRequest, "bad_parameter", "families: unknown family %q; ask for some of %s", f, strings.Join(known, ","))
		}
		out[f] = true
	}
	return out, nil
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/events", s.api(func(w http.ResponseWriter, r *http.Request) error {
			families, err := parseFamilies(r)
			if err != nil {
				return err
			}
			if _, err := backend[Source](s); err != nil {
				return err
			}
			wt := &watcher{families: families, ch: make(chan []byte, eventBufferMax), dropped: make(chan struct{})}
			if !s.surf.events.add(wt) {
				return problem(http.StatusServiceUnavailable, "too_many_watchers",
					"%d event streams are open, the cap; close one or poll the endpoints instead", eventWatchersMax)
			}
			defer s.surf.events.remove(wt)
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Time{}) // a stream outlives the server's ReadTimeout
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
			write := func(b []byte) bool {
				_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
				if _, err := w.Write(b); err != nil {
					return false
				}
				return rc.Flush() == nil
			}
			if !write([]byte(fmt.Sprintf(": fibril events, every %d ms\nretry: %d\n\n", eventTickMs, eventTickMs))) {
				return nil
			}
			for {
				select {
				case b := <-wt.ch:
					// A stream lives longer than the login it opened with:
					// a logout or an expired session ends it at the next
					// tick (basic auth is checked again too, cheaply).
					if s.surf.opts.Auth.Enabled {
						if _, ok := s.authenticate(r); !ok {
							write([]byte("event: unauthorized\ndata: {\"message\":\"the session ended (logout or expiry); log in again\"}\n\n"))
							return nil
						}
					}
					if !write(b) {
						return nil
					}
				case <-wt.dropped:
					write([]byte("event: dropped\ndata: {\"message\":\"this stream fell behind and was dropped; reconnect\"}\n\n"))
					return nil
				case <-r.Context().Done():
					return nil
				case <-s.surf.stopped:
					return nil
				}
			}
		}))
	})
}
