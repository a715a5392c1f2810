package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// Conn is one client connection, whatever carries it (TCP, TLS, a QUIC
// stream). transport.Conn satisfies it.
type Conn interface {
	io.Reader
	io.Writer
	Close() error
	RemoteAddr() net.Addr
}

// Listener yields connections. transport.Listener satisfies it.
type Listener interface {
	Accept(ctx context.Context) (Conn, error)
	Close() error
	Addr() net.Addr
}

// Broker is one standalone Fibril node: the node core's machines (one
// Node, a Session per session, a Host per loaded partition) driven over
// real sockets, logs, timers and goroutines. Invariants:
//   - the broker holds no decision a client can observe: every reply,
//     delivery, timeout and close comes from a machine's Ready;
//   - Close and a fatal error never leave a goroutine waiting forever:
//     every wait in the driver also watches a close or a halt.
type Broker struct {
	cfg     Config
	nodeCfg node.Config
	log     *slog.Logger
	clock   *clock
	users   *userStore
	auth    *authWorkers
	metrics *metrics

	nodeActor *actor
	nodeLog   *nodeLog
	importer  *catalogImport
	admin     adminCalls   // operator requests in flight (admincall.go)
	rates     rateSamples  // listing rates (admin_queueops.go)
	idle      idleCounters // idle eviction counters (host_idle.go)
	diag      diagState    // recovery observations (diagnostics.go)

	sessMu   sync.RWMutex
	sessions map[node.SessionID]*actor

	hostMu      sync.RWMutex
	hosts       map[core.QueueID]*hostRunner
	hostsClosed bool
	loads       sync.WaitGroup
	// detached counts goroutines draining an actor on their own (actor.go).
	detached sync.WaitGroup

	connMu       sync.RWMutex
	conns        map[node.ConnID]*conn
	closingConns bool
	nextConnID   atomic.Uint64

	listenMu  sync.Mutex
	listeners []Listener
	// listening counts listeners handed to Serve (Ready reads it).
	listening atomic.Int32

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closing atomic.Bool

	fatalMu  sync.Mutex
	fatalErr error
	failed   chan struct{}
}

// New opens the data directory, the user store and the Node's log, and
// rebuilds the Node from it. It listens on nothing: hand listeners to Serve.
func New(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	started := time.Now() // the startup recovery's figures (diagnostics.go)
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// MkdirAll may have made the data directory and parents of it: the
	// Node log's storage.Open below fsyncs every ancestor of its directory,
	// so their entries are durable before New returns.
	users, err := openUserStore(cfg.DataDir, cfg.Users)
	if err != nil {
		return nil, err
	}
	rl, rec, err := openRecordLog(filepath.Join(cfg.DataDir, "node"))
	readNs := time.Since(started).Nanoseconds()
	if err != nil {
		return nil, fmt.Errorf("node log: %w", err)
	}
	if cfg.wrapNodeLog != nil {
		rl = cfg.wrapNodeLog(rl)
	}
	var entropy [32]byte
	if _, err := rand.Read(entropy[:]); err != nil {
		rl.Close()
		return nil, err
	}
	nodeCfg := cfg.nodeConfig()
	if nodeCfg.LegacyBootCount, err = readLegacyBoot(cfg.DataDir); err != nil {
		rl.Close()
		return nil, err
	}
	replayStarted := time.Now()
	n, err := node.NewNode(nodeCfg, rec.Snapshot, rec.Records, entropy)
	replayNs := time.Since(replayStarted).Nanoseconds()
	if err != nil {
		rl.Close()
		return nil, fmt.Errorf("node log: %w (refusing to start rather than forget queues)", err)
	}
	logIgnoredSeeds(cfg.Logger, n) // admin_runtime.go
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{
		cfg: cfg, nodeCfg: nodeCfg, log: cfg.Logger, clock: newClock(cfg.wallClock), users: users, metrics: &metrics{},
		nodeActor: newActor(node.NodeAddr(), n, nil),
		sessions:  map[node.SessionID]*actor{}, hosts: map[core.QueueID]*hostRunner{}, conns: map[node.ConnID]*conn{},
		ctx: ctx, cancel: cancel, failed: make(chan struct{}),
	}
	b.nodeLog = newNodeLog(b, rl)
	b.auth = newAuthWorkers(b, max(2, runtime.GOMAXPROCS(0)), cfg.ConnectionsMax)
	// The Node's first step persists its boot record.
	b.deliverTo(b.nodeActor, &node.Tick{})
	if err := b.importLegacyCatalog(); err != nil {
		b.Close()
		return nil, err
	}
	b.diag.startup = StartupRecovery{AtMs: started.UnixMilli(), ReadNs: readNs, ReplayNs: replayNs,
		TotalNs: time.Since(started).Nanoseconds(), SnapshotIndex: rec.SnapshotIndex, SnapshotBytes: len(rec.Snapshot), Records: len(rec.Records)}
	return b, nil
}

// Serve accepts connections from l until the broker closes.
func (b *Broker) Serve(l Listener) {
	b.listenMu.Lock()
	b.listeners = append(b.listeners, l)
	b.listenMu.Unlock()
	b.listening.Add(1)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := l.Accept(b.ctx)
			if err != nil {
				if b.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
					b.log.Error("accept failed; listener stopped", "addr", l.Addr().String(), "err", err)
				}
				return
			}
			b.HandleConn(c)
		}
	}()
}

// Failed is closed when the broker hit an error it cannot serve through
// (a failed fsync, an unreadable stored payload): the process must stop
// and recover from its logs.
func (b *Broker) Failed() <-chan struct{} { return b.failed }

// Err reports the fatal error, if any.
func (b *Broker) Err() error {
	b.fatalMu.Lock()
	defer b.fatalMu.Unlock()
	return b.fatalErr
}

func (b *Broker) fatal(err error) {
	b.fatalMu.Lock()
	defer b.fatalMu.Unlock()
	if b.fatalErr != nil {
		return
	}
	b.fatalErr = err
	b.log.Error("fatal: stopping; restart recovers from the log", "err", err)
	close(b.failed)
}

func (b *Broker) stopped() bool { return b.closing.Load() }

// LoadedPartitions counts partitions loaded into memory.
func (b *Broker) LoadedPartitions() int {
	b.hostMu.RLock()
	defer b.hostMu.RUnlock()
	return len(b.hosts)
}

// goingAwayFlushMs is how long Close lets GOING_AWAY frames leave.
const goingAwayFlushMs = 100

// Close stops the broker: tells clients it is going away, closes every
// connection, flushes every log.
func (b *Broker) Close() error { return b.stop(true) }

// stop is Close; without drain (tests: a crash as the clients and the logs
// see it) sessions are not told and go dormant as their sockets close, so
// their skeletons stay in the Node's log.
func (b *Broker) stop(drain bool) error {
	if !b.closing.CompareAndSwap(false, true) {
		return b.Err()
	}
	if drain {
		b.deliverTo(b.nodeActor, &node.Drain{GraceMs: b.cfg.ReconnectGraceMs, Message: "broker shutting down"})
	}
	b.cancel()
	b.listenMu.Lock()
	for _, l := range b.listeners {
		l.Close()
	}
	b.listenMu.Unlock()
	b.flushConns(goingAwayFlushMs * time.Millisecond)
	b.connMu.Lock()
	b.closingConns = true
	open := make([]*conn, 0, len(b.conns))
	for _, c := range b.conns {
		open = append(open, c)
	}
	b.connMu.Unlock()
	for _, c := range open {
		c.shutdown()
	}
	b.wg.Wait()
	b.loads.Wait()
	b.hostMu.Lock()
	b.hostsClosed = true
	hosts := make([]*hostRunner, 0, len(b.hosts))
	for _, h := range b.hosts {
		hosts = append(hosts, h)
	}
	b.hostMu.Unlock()
	for _, h := range hosts {
		h.close()
	}
	b.auth.close()
	if err := b.nodeLog.close(); err != nil {
		b.log.Error("closing the node log", "err", err)
	}
	b.detached.Wait()
	return b.Err()
}

// flushConns waits up to d for every connection's queued bytes to leave.
func (b *Broker) flushConns(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b.connMu.Lock()
		pending := false
		for _, c := range b.conns {
			c.mu.Lock()
			pending = pending || (len(c.buf) > 0 && !c.shut)
			c.mu.Unlock()
		}
		b.connMu.Unlock()
		if !pending {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// assertTrue panics on a driver bug (STYLE 4: in production too).
func assertTrue(cond bool, why string) {
	if !cond {
		panic("broker: assertion failed: " + why)
	}
}
