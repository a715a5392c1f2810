// Package admin is the broker's admin HTTP listener (SPEC 11, 13): for now
// /healthz, /readyz and /metrics. Invariants:
//   - the listener only reads the broker (Source): nothing it serves can
//     change what a client of the wire protocol observes;
//   - it is bound before the broker recovers its logs, so /healthz answers
//     and /readyz says 503 while recovery runs; Attach hands it the broker
//     once every wire listener is up;
//   - every error is JSON {"code": ..., "message": ...}, the message saying
//     what to do.
package admin

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fibril-go/fibril/dashboard"
	"github.com/fibril-go/fibril/io/broker"
)

// Source is what the listener reads from the broker. *broker.Broker
// satisfies it; tests pass a fake.
type Source interface {
	// Ready is nil while the broker serves, else why not.
	Ready() error
	// Counters reads the broker's atomics (no lock).
	Counters() broker.Counters
}

// Server is the admin HTTP listener.
type Server struct {
	log      *slog.Logger
	listener net.Listener
	http     *http.Server
	handler  http.Handler
	// source is nil until Attach: the broker is still recovering.
	source atomic.Pointer[sourceBox]
	// stopping is set by Stop before the broker closes: /readyz says 503.
	stopping atomic.Bool
	served   chan struct{}
	auditLog auditRing
	// logControl: the live log level and the startup configuration
	// (api_log.go); nil until SetLogControl.
	logControl atomic.Pointer[logControl]
	// surf is the admin surface's state (surface.go).
	surf surface
	// origin: the browser checks' state (origin.go); failures: failed
	// credentials per peer (ratelimit.go).
	origin   originGuard
	failures failureLimiter
}

// sourceBox lets an interface value live behind an atomic.Pointer.
type sourceBox struct{ Source }

// Listen binds addr (HOST:PORT; port 0 picks one) and starts serving. A
// port already taken is an error naming it.
func Listen(addr string, log *slog.Logger) (*Server, error) {
	return listen(addr, log, nil)
}

// listen is Listen with options (ListenWith, surface.go).
func listen(addr string, log *slog.Logger, opts *Options) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listener on %s: %w (is another broker or program on this port? choose one with --admin-listen, or \"\" to disable)", addr, err)
	}
	s := newServerWith(log, opts)
	if conf := s.tlsConfig(); conf != nil {
		l = tls.NewListener(l, conf)
	}
	s.listener = l
	s.origin.loopbackOnly.Store(isLoopbackAddr(l.Addr()))
	s.http = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	go func() {
		defer close(s.served)
		s.startSurface()
		if err := s.http.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener stopped", "addr", l.Addr().String(), "err", err)
		}
	}()
	return s, nil
}

// newServer builds the handlers without a socket (tests use Handler).
func newServer(log *slog.Logger) *Server { return newServerWith(log, nil) }

func newServerWith(log *slog.Logger, opts *Options) *Server {
	s := &Server{log: log, served: make(chan struct{})}
	s.initSurface(opts)
	registry := prometheus.NewRegistry()
	registry.MustRegister(&collector{server: s}, &queueCollector{server: s}, &surfaceCollector{server: s}, // queues.go, metrics_surface.go
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := promhttp.HandlerFor(registry, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", getOnly(s.healthz))
	mux.HandleFunc("/readyz", getOnly(s.readyz))
	mux.Handle("/metrics", getOnly(metrics.ServeHTTP))
	for _, family := range routeFamilies {
		family(s, mux)
	}
	// The dashboard's pages and assets (package dashboard): files only,
	// every number and change goes through the API above from the browser.
	pages, err := dashboard.New(dashboard.Options{AuthEnabled: s.surf.opts.Auth.Enabled, Node: s.surf.opts.Info.Node})
	if err != nil {
		panic("admin: the embedded dashboard does not parse: " + err.Error()) // a broken build
	}
	pages.Register(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// The catch-all matches every path, so a known path asked with a
		// method it does not take lands here too: 405 naming the methods
		// it does take, as the mux would answer without a catch-all.
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
				fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
			return
		}
		if dashboard.WantsHTML(r) {
			pages.NotFound(w, r) // a person in a browser gets a page, not JSON
			return
		}
		writeError(w, http.StatusNotFound, "not_found",
			fmt.Sprintf("no admin endpoint at %s; this broker serves /healthz, /readyz, /metrics and /admin/api/... (docs/admin.md lists them)", r.URL.Path))
	})
	// origin.go's browser checks first, then auth.go's (a no-op when admin
	// auth is off).
	s.handler = s.withSameOrigin(s.withAuth(mux))
	return s
}

// Addr is the bound address (the port chosen when it was 0).
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// Handler serves the endpoints (tests drive it with httptest).
func (s *Server) Handler() http.Handler { return s.handler }

// Attach hands the listener the broker once it serves.
func (s *Server) Attach(src Source) {
	s.source.Store(&sourceBox{src})
	s.sampleOnce(time.Now().UnixMilli()) // the history starts at the attach (surface.go)
}

// Stopping marks the broker as going away: /readyz answers 503 from now on,
// while the broker closes and the listener keeps answering.
func (s *Server) Stopping() { s.stopping.Store(true) }

// Shutdown stops the listener, letting requests in flight finish within
// timeout.
func (s *Server) Shutdown(timeout time.Duration) error {
	s.Stopping()
	s.stopSurface()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := s.http.Shutdown(ctx)
	<-s.served
	return err
}

func (s *Server) attached() Source {
	if box := s.source.Load(); box != nil {
		return box.Source
	}
	return nil
}

// healthz: the process answers HTTP. Always 200, no auth (SPEC 11).
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeText(w, http.StatusOK, "ok\n")
}

// readyz: 200 once the broker has recovered and listens; 503 with the
// reason before (recovering), while it stops, or after a fatal error.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	src := s.attached()
	switch {
	case s.stopping.Load():
		writeError(w, http.StatusServiceUnavailable, "stopping", "the broker is shutting down")
	case src == nil:
		writeError(w, http.StatusServiceUnavailable, "starting", "the broker is recovering its logs and is not listening yet; retry shortly")
	default:
		if err := src.Ready(); err != nil {
			writeError(w, http.StatusServiceUnavailable, "not_ready", "the broker does not serve: "+err.Error())
			return
		}
		if s.readyzQuarantine(w, src) {
			return // degraded or refused (quarantine.go)
		}
		writeText(w, http.StatusOK, "ok\n")
	}
}

// getOnly answers 405 with a JSON error to any method but GET and HEAD.
func getOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
				fmt.Sprintf("%s %s is not allowed; use GET", r.Method, r.URL.Path))
			return
		}
		h(w, r)
	}
}

func writeText(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// apiError is the body of every error answer.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiError{Code: code, Message: message})
}

// allowedMethods lists the methods for which mux has a route other than
// the catch-all at r's path (none: the path is unknown).
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		if method == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = method
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, method)
		}
	}
	return allow
}
