package admin

// The admin surface (issue 12, SPEC 11): the listener's options (auth,
// HTTPS, the loopback rule), GET /admin/api/overview, /history and
// /attention. Invariants:
//   - everything here is an observation: counters read from the broker's
//     atomics, the process's memory, the data directory's filesystem;
//   - the history is sampled by one goroutine every historyIntervalMs into
//     a ring of historySamples: nothing on the broker's hot path, and
//     memory that never grows;
//   - per-queue backlog samples (for backlog_rising) are bounded by
//     attentionQueuesMax queues and the 10 min window.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fibril-go/fibril/io/broker"
	"github.com/fibril-go/fibril/transport/certs"
)

const (
	// historyIntervalMs is the sampling period of GET /admin/api/history.
	historyIntervalMs = 5_000
	// historySamples is the ring's length: 30 minutes at 5 s.
	historySamples = 360
	// attentionQueuesMax bounds the queues whose backlog is tracked.
	attentionQueuesMax = 1_000
	// backlogWindowMinMs and backlogWindowMaxMs are SPEC 11's window for
	// backlog_rising: compared against a sample 2-10 min old.
	backlogWindowMinMs = 2 * 60_000
	backlogWindowMaxMs = 10 * 60_000
	// backlogReadyMin and backlogGrowthMin are SPEC 11's floors.
	backlogReadyMin  = 100
	backlogGrowthMin = 100
	// certWarnMs: a leaf expiring within 30 days is a warning.
	certWarnMs = 30 * 24 * 3600_000
	// diskWarnPct and diskCriticalPct: free space of the data dir.
	diskWarnPct     = 10
	diskCriticalPct = 3
)

// Options configure the admin listener beyond its address.
type Options struct {
	// Auth, when Enabled, asks every request but /healthz and /readyz for
	// Username/Password (basic auth) or a session cookie from POST /login.
	Auth AuthOptions
	// AllowUnauthenticated accepts a non-loopback address with Auth off.
	AllowUnauthenticated bool
	// TLS is the broker's TLS material: GET /admin/api/tls, the reload,
	// cert_expiring. Nil: those answer 501.
	TLS *certs.Holder
	// ServeTLS serves HTTPS on the admin listener with TLS's leaf.
	ServeTLS bool
	// Info is what the overview names.
	Info Info
}

// AuthOptions is admin.auth (SPEC 11).
type AuthOptions struct {
	Enabled            bool
	Username, Password string
}

// Info is the static part of the overview.
type Info struct {
	Node      string     `json:"node"`
	Version   string     `json:"version"`
	DataDir   string     `json:"data_dir"`
	Listeners []Listener `json:"listeners"`
}

// Listener is one address the broker serves.
type Listener struct {
	Kind string `json:"kind"` // tcp, tls, quic, admin
	Addr string `json:"addr"`
}

// ErrUnauthenticatedRemote refuses a non-loopback admin address without
// auth (unless Options.AllowUnauthenticated).
var ErrUnauthenticatedRemote = errors.New("admin: unauthenticated listener on a non-loopback address")

// surface is the Server's admin-surface state.
type surface struct {
	opts    Options
	started time.Time
	infoMu  sync.Mutex
	info    Info
	hist    history
	backlog backlogTracker
	stopped chan struct{}
	stop    sync.Once
	events  eventHub
	auth    authState
}

// ListenWith is Listen with options: it enforces the loopback rule, serves
// HTTPS when asked, and starts the history sampler.
func ListenWith(addr string, log *slog.Logger, opts Options) (*Server, error) {
	if opts.Auth.Enabled && (opts.Auth.Username == "" || opts.Auth.Password == "") {
		return nil, errors.New("admin auth is on but has no username or password: give --admin-username and --admin-password")
	}
	if !opts.Auth.Enabled && !opts.AllowUnauthenticated && !loopbackAddr(addr) {
		return nil, fmt.Errorf("%w: the admin listener on %s is reachable from the network and admin auth is off; turn it on (--admin-auth with --admin-username and --admin-password), listen on 127.0.0.1, or pass --admin-allow-unauthenticated to accept that anyone who reaches it can administer this broker",
			ErrUnauthenticatedRemote, addr)
	}
	if opts.ServeTLS && opts.TLS == nil {
		return nil, errors.New("admin: HTTPS asked without TLS material")
	}
	s, err := listen(addr, log, &opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// loopbackAddr: HOST:PORT with a loopback host ("" and 0.0.0.0 are not).
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// initSurface sets up the surface state (newServer calls it).
func (s *Server) initSurface(opts *Options) {
	if opts == nil {
		opts = &Options{}
	}
	s.surf.opts = *opts
	s.surf.info = opts.Info
	s.surf.started = time.Now()
	s.surf.stopped = make(chan struct{})
	s.surf.auth.init()
}

// tlsConfig is the HTTPS configuration, nil for plain HTTP.
func (s *Server) tlsConfig() *tls.Config {
	if !s.surf.opts.ServeTLS {
		return nil
	}
	return s.surf.opts.TLS.ServerTLS()
}

// SetInfo replaces what the overview names (listeners bound after Listen).
func (s *Server) SetInfo(info Info) {
	s.surf.infoMu.Lock()
	s.surf.info = info
	s.surf.infoMu.Unlock()
}

func (s *Server) infoNow() Info {
	s.surf.infoMu.Lock()
	defer s.surf.infoMu.Unlock()
	return s.surf.info
}

// startSurface runs the sampler and the event ticker until stopSurface.
func (s *Server) startSurface() {
	go s.sampleLoop()
	go s.eventLoop()
}

func (s *Server) stopSurface() { s.surf.stop.Do(func() { close(s.surf.stopped) }) }

// ---- history

// Sample is one history point.
type Sample struct {
	AtMs            int64   `json:"at_ms"`
	Published       uint64  `json:"published"`
	Delivered       uint64  `json:"delivered"`
	Acked           uint64  `json:"acked"`
	Redelivered     uint64  `json:"redelivered"`
	DeadLettered    uint64  `json:"dead_lettered"`
	ConnectionsOpen int64   `json:"connections_open"`
	PublishRate     float64 `json:"publish_rate"` // per second, since the previous sample
	DeliverRate     float64 `json:"deliver_rate"`
	AckRate         float64 `json:"ack_rate"`
}

type history struct {
	mu      sync.Mutex
	samples [historySamples]Sample
	n       int // samples taken
}

func (h *history) add(now int64, c *broker.Counters) Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	smp := Sample{AtMs: now, Published: c.Published, Delivered: c.Delivered, Acked: c.Acked,
		Redelivered: c.Redelivered, DeadLettered: c.DeadLettered, ConnectionsOpen: c.ConnectionsOpen}
	if h.n > 0 {
		prev := h.samples[(h.n-1)%historySamples]
		if dt := float64(now-prev.AtMs) / 1000; dt > 0 {
			smp.PublishRate = rate(prev.Published, smp.Published, dt)
			smp.DeliverRate = rate(prev.Delivered, smp.Delivered, dt)
			smp.AckRate = rate(prev.Acked, smp.Acked, dt)
		}
	}
	h.samples[h.n%historySamples] = smp
	h.n++
	return smp
}

// rate of a counter between two samples; a counter that went back (never,
// in one process) counts as 0.
func rate(a, b uint64, dt float64) float64 {
	if b < a {
		return 0
	}
	return float64(b-a) / dt
}

// all returns the samples, oldest first.
func (h *history) all() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := min(h.n, historySamples)
	out := make([]Sample, 0, k)
	for i := h.n - k; i < h.n; i++ {
		out = append(out, h.samples[i%historySamples])
	}
	return out
}

func (h *history) last() (Sample, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return Sample{}, false
	}
	return h.samples[(h.n-1)%historySamples], true
}

// sampleLoop takes a sample every historyIntervalMs while attached.
func (s *Server) sampleLoop() {
	t := time.NewTicker(historyIntervalMs * time.Millisecond)
	defer t.Stop()
	for {
		s.sampleOnce(time.Now().UnixMilli())
		select {
		case <-t.C:
		case <-s.surf.stopped:
			return
		}
	}
}

// sampleOnce records one history sample and the backlog of every queue
// the broker reports (tests call it with their own clock).
func (s *Server) sampleOnce(now int64) {
	src := s.attached()
	if src == nil {
		return
	}
	c := src.Counters()
	s.surf.hist.add(now, &c)
	if q, ok := src.(QueueReadyCounter); ok {
		s.surf.backlog.add(now, q.QueueReadyCounts())
	}
}

// ---- attention

// QueueReadyCounter is what backlog_rising and no_consumer need: the ready
// count and consumers of every loaded queue (io/broker/admin_attention.go:
// read from the partition runners' observations, no call into the core).
type QueueReadyCounter interface {
	QueueReadyCounts() []QueueReady
}

// QueueReady is one queue's backlog.
type QueueReady = broker.QueueReady

type backlogPoint struct {
	atMs  int64
	ready uint64
}

type backlogTracker struct {
	mu     sync.Mutex
	queues map[string]*backlogQueue
}

type backlogQueue struct {
	points    []backlogPoint // oldest first, within backlogWindowMaxMs
	consumers int
	seenMs    int64
}

func (t *backlogTracker) add(now int64, counts []QueueReady) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.queues == nil {
		t.queues = map[string]*backlogQueue{}
	}
	for _, c := range counts {
		key := c.Topic + "/" + c.Group
		q := t.queues[key]
		if q == nil {
			if len(t.queues) >= attentionQueuesMax {
				continue
			}
			q = &backlogQueue{}
			t.queues[key] = q
		}
		q.points = append(q.points, backlogPoint{now, c.Ready})
		q.consumers, q.seenMs = c.Consumers, now
		for len(q.points) > 0 && now-q.points[0].atMs > backlogWindowMaxMs {
			q.points = q.points[1:]
		}
	}
	for key, q := range t.queues {
		if q.seenMs != now {
			delete(t.queues, key) // no longer loaded
		}
	}
}

// items are the queue attention items: no_consumer and backlog_rising.
func (t *backlogTracker) items(now int64) []AttentionItem {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []AttentionItem
	for key, q := range t.queues {
		if len(q.points) == 0 {
			continue
		}
		last := q.points[len(q.points)-1]
		if last.ready > 0 && q.consumers == 0 {
			out = append(out, AttentionItem{Kind: "no_consumer", Severity: "warning", Subject: key,
				Message: fmt.Sprintf("%d messages ready and no consumer", last.ready), SinceMs: q.points[0].atMs})
		}
		if first, ok := backlogFirst(q.points, now); ok && backlogRising(first.ready, last.ready) {
			out = append(out, AttentionItem{Kind: "backlog_rising", Severity: "warning", Subject: key,
				Message: fmt.Sprintf("ready grew from %d to %d in %d s", first.ready, last.ready, (last.atMs-first.atMs)/1000),
				SinceMs: first.atMs})
		}
	}
	return out
}

// backlogFirst is the oldest point 2-10 min old.
func backlogFirst(points []backlogPoint, now int64) (backlogPoint, bool) {
	for _, p := range points {
		if age := now - p.atMs; age <= backlogWindowMaxMs && age >= backlogWindowMinMs {
			return p, true
		}
	}
	return backlogPoint{}, false
}

// backlogRising is SPEC 11's rule: last >= 100 and growth >= max(first/2, 100).
func backlogRising(first, last uint64) bool {
	return last >= backlogReadyMin && last > first && last-first >= max(first/2, backlogGrowthMin)
}

// AttentionItem is one thing an operator should look at.
type AttentionItem struct {
	Kind     string `json:"kind"`
	Severity string `json:"severity"` // warning or critical
	Subject  string `json:"subject"`
	Message  string `json:"message"`
	SinceMs  int64  `json:"since_ms"`
}

// attentionHooks add items from other families (quarantine: helper C
// appends one from its own file).
var attentionHooks []func(s *Server) []AttentionItem

// attention gathers every item now.
func (s *Server) attention(now time.Time) []AttentionItem {
	var out []AttentionItem
	if h := s.surf.opts.TLS; h != nil {
		out = append(out, certAttention(h.Current(), now)...)
	}
	if dir := s.infoNow().DataDir; dir != "" {
		if d, err := diskOf(dir); err == nil {
			out = append(out, diskAttention(dir, d, now)...)
		}
	}
	src := s.attached()
	if s.stopping.Load() || (src != nil && src.Ready() != nil && strings.Contains(src.Ready().Error(), "stopping")) {
		out = append(out, AttentionItem{Kind: "draining", Severity: "warning", Subject: "broker",
			Message: "the broker is shutting down; clients are told to go away", SinceMs: now.UnixMilli()})
	}
	out = append(out, s.surf.backlog.items(now.UnixMilli())...)
	for _, hook := range attentionHooks {
		out = append(out, hook(s)...)
	}
	return out
}

func certAttention(m *certs.Material, now time.Time) []AttentionItem {
	if m == nil || m.LeafCert == nil {
		return nil
	}
	left := m.LeafCert.NotAfter.Sub(now)
	switch {
	case left <= 0:
		return []AttentionItem{{Kind: "cert_expiring", Severity: "critical", Subject: m.LeafFingerprintSHA256,
			Message: "the server certificate expired at " + m.LeafCert.NotAfter.UTC().Format(time.RFC3339) + "; put a new one in the data dir's tls/ and POST /admin/api/tls/reload",
			SinceMs: m.LeafCert.NotAfter.UnixMilli()}}
	case left.Milliseconds() <= certWarnMs:
		return []AttentionItem{{Kind: "cert_expiring", Severity: "warning", Subject: m.LeafFingerprintSHA256,
			Message: fmt.Sprintf("the server certificate expires in %d days (%s)", int(left.Hours()/24), m.LeafCert.NotAfter.UTC().Format(time.RFC3339)),
			SinceMs: m.LeafCert.NotAfter.Add(-certWarnMs * time.Millisecond).UnixMilli()}}
	}
	return nil
}

// Disk is the data directory's filesystem.
type Disk struct {
	TotalBytes uint64 `json:"total_bytes"`
	UsedBytes  uint64 `json:"used_bytes"`
	FreeBytes  uint64 `json:"free_bytes"` // available to the broker's user
}

func diskOf(dir string) (Disk, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return Disk{}, err
	}
	bs := uint64(st.Bsize)
	total, free := st.Blocks*bs, st.Bavail*bs
	return Disk{TotalBytes: total, FreeBytes: free, UsedBytes: total - st.Bfree*bs}, nil
}

func diskAttention(dir string, d Disk, now time.Time) []AttentionItem {
	if d.TotalBytes == 0 {
		return nil
	}
	pct := float64(d.FreeBytes) * 100 / float64(d.TotalBytes)
	sev := ""
	switch {
	case pct < diskCriticalPct:
		sev = "critical"
	case pct < diskWarnPct:
		sev = "warning"
	default:
		return nil
	}
	return []AttentionItem{{Kind: "disk_low", Severity: sev, Subject: dir,
		Message: fmt.Sprintf("%.1f %% of the data dir's filesystem is free (%d bytes); free space or move the data dir", pct, d.FreeBytes),
		SinceMs: now.UnixMilli()}}
}

// ---- overview

// overviewBackend is what the overview needs beyond Source.
type overviewBackend interface {
	LoadedPartitions() int
}

// DeclaredQueuesCounter, when the broker implements it (queue operations),
// adds the declared queue count to the overview.
type DeclaredQueuesCounter interface {
	DeclaredQueues() int
}

// Memory is the process's memory.
type Memory struct {
	RSSBytes  uint64 `json:"rss_bytes"`
	HeapBytes uint64 `json:"heap_bytes"`
}

func memoryNow() Memory {
	var m Memory
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		m.HeapBytes = sample[0].Value.Uint64()
	}
	// /proc/self/statm: size resident ... in pages (Linux).
	if data, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(data)); len(f) > 1 {
			if pages, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				m.RSSBytes = pages * uint64(os.Getpagesize())
			}
		}
	}
	return m
}

// overview builds GET /admin/api/overview's answer.
func (s *Server) overview() (map[string]any, error) {
	src, err := backend[Source](s)
	if err != nil {
		return nil, err
	}
	c := src.Counters()
	info := s.infoNow()
	now := time.Now()
	queues := map[string]any{}
	if ob, ok := src.(overviewBackend); ok {
		queues["loaded_partitions"] = ob.LoadedPartitions()
	}
	if dq, ok := src.(DeclaredQueuesCounter); ok {
		queues["declared"] = dq.DeclaredQueues()
	}
	rates := map[string]float64{"publish": 0, "deliver": 0, "ack": 0}
	if last, ok := s.surf.hist.last(); ok {
		rates = map[string]float64{"publish": last.PublishRate, "deliver": last.DeliverRate, "ack": last.AckRate}
	}
	out := map[string]any{
		"node": info.Node, "version": info.Version, "data_dir": info.DataDir, "listeners": info.Listeners,
		"started_at_ms": s.surf.started.UnixMilli(), "uptime_ms": now.Sub(s.surf.started).Milliseconds(),
		"totals": map[string]uint64{"published": c.Published, "delivered": c.Delivered, "acked": c.Acked,
			"redelivered": c.Redelivered, "dead_lettered": c.DeadLettered},
		"rates_per_s":   rates,
		"connections":   c.ConnectionsOpen,
		"subscriptions": c.SubscriptionsOpen,
		"queues":        queues,
		"memory":        memoryNow(),
		"attention":     len(s.attention(now)),
	}
	if info.DataDir != "" {
		if d, err := diskOf(info.DataDir); err == nil {
			out["disk"] = d
		}
	}
	return out, nil
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/overview", s.api(func(w http.ResponseWriter, r *http.Request) error {
			ov, err := s.overview()
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, ov)
			return nil
		}))
		mux.HandleFunc("GET /admin/api/history", s.api(func(w http.ResponseWriter, r *http.Request) error {
			if _, err := backend[Source](s); err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, map[string]any{"interval_ms": historyIntervalMs, "samples": s.surf.hist.all()})
			return nil
		}))
		mux.HandleFunc("GET /admin/api/attention", s.api(func(w http.ResponseWriter, r *http.Request) error {
			items := s.attention(time.Now())
			if items == nil {
				items = []AttentionItem{}
			}
			writeJSON(w, http.StatusOK, map[string]any{"items": items})
			return nil
		}))
	})
}
