//go:build !fibril_next

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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
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

// Broker is one standalone Fibril node.
type Broker struct {
	cfg     Config
	log     *slog.Logger
	ownerID wire.UUID
	users   *userStore
	catalog *catalog
	metrics *metrics

	regMu   sync.Mutex
	runners map[core.QueueID]*runnerSlot

	sessMu   sync.Mutex
	sessions map[wire.UUID]*session

	listenMu  sync.Mutex
	listeners []Listener

	authSlots chan struct{} // bounds concurrent password checks

	connMu sync.Mutex
	conns  map[Conn]struct{} // every accepted socket, closed by Close

	nextSubID     atomic.Uint64
	nextSessionID atomic.Uint64

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	fatalMu  sync.Mutex
	fatalErr error
	failed   chan struct{}
	closing  atomic.Bool
	// boot counts starts of this data directory; delivery tags of this run
	// start at boot << bootTagShift, so no tag repeats across restarts.
	boot uint64
}

// bootTagShift leaves 2^40 delivery tags per partition and run.
const bootTagShift = 40

// nextBoot increments and persists the data directory's boot counter.
func nextBoot(dataDir string) (uint64, error) {
	path := filepath.Join(dataDir, "boot")
	var boot uint64
	if data, err := os.ReadFile(path); err == nil {
		if boot, err = strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64); err != nil {
			return 0, fmt.Errorf("boot counter %s is corrupt: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	boot++
	if boot >= 1<<(64-bootTagShift) {
		return 0, fmt.Errorf("boot counter %s exhausted", path)
	}
	if err := writeFileAtomic(path, []byte(strconv.FormatUint(boot, 10)+"\n"), 0o644); err != nil {
		return 0, fmt.Errorf("boot counter: %w", err)
	}
	return boot, nil
}

// runnerSlot is one partition's place in the registry; r and err are set
// before ready is closed and never change after.
type runnerSlot struct {
	ready chan struct{}
	r     *runner
	err   error
}

// New opens the data directory and its stores. It listens on nothing: hand
// listeners to Serve.
func New(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	users, err := openUserStore(cfg.DataDir, cfg.Users)
	if err != nil {
		return nil, err
	}
	cat, err := openCatalog(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	boot, err := nextBoot(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{
		cfg: cfg, log: cfg.Logger, users: users, catalog: cat, metrics: &metrics{},
		runners: map[core.QueueID]*runnerSlot{}, sessions: map[wire.UUID]*session{},
		authSlots: make(chan struct{}, max(2, runtime.GOMAXPROCS(0))), conns: map[Conn]struct{}{},
		ctx: ctx, cancel: cancel, failed: make(chan struct{}), boot: boot,
	}
	if _, err := rand.Read(b.ownerID[:]); err != nil {
		return nil, err
	}
	return b, nil
}

// Serve accepts connections from l until the broker closes.
func (b *Broker) Serve(l Listener) {
	b.listenMu.Lock()
	b.listeners = append(b.listeners, l)
	b.listenMu.Unlock()
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

// HandleConn serves one connection on its own goroutines.
func (b *Broker) HandleConn(c Conn) {
	if b.closing.Load() {
		c.Close()
		return
	}
	b.connMu.Lock()
	b.conns[c] = struct{}{}
	b.connMu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		serveConn(b, c)
		b.connMu.Lock()
		delete(b.conns, c)
		b.connMu.Unlock()
	}()
}

// Failed is closed when the broker hit an error it cannot serve through
// (a failed fsync): the process must stop and recover from its log.
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

// partitionsOf returns a queue's partition count, creating an undeclared queue
// with one partition (implicit queues, SPEC §1).
func (b *Broker) partitionsOf(q queueName) (uint32, error) {
	if count := b.catalog.partitions(q); count != 0 {
		return count, nil
	}
	return b.catalog.ensure(q, 1, b.cfg.QueuesMax)
}

// runnerFor returns the runner of partition (modulo the queue's count),
// loading it on first use.
func (b *Broker) runnerFor(q queueName, partition uint32) (*runner, error) {
	count, err := b.partitionsOf(q)
	if err != nil {
		return nil, err
	}
	return b.loadRunner(core.QueueID{Topic: q.Topic, Group: q.Group, Partition: partition % count})
}

var (
	errPartitionRange = errors.New("partition out of range for this queue")
	errBrokerClosing  = errors.New("broker is shutting down")
)

// runnerForExact loads partition exactly, refusing one out of range.
func (b *Broker) runnerForExact(q queueName, partition uint32) (*runner, error) {
	count, err := b.partitionsOf(q)
	if err != nil {
		return nil, err
	}
	if partition >= count {
		return nil, errPartitionRange
	}
	return b.loadRunner(core.QueueID{Topic: q.Topic, Group: q.Group, Partition: partition})
}

func (b *Broker) loadRunner(id core.QueueID) (*runner, error) {
	if b.closing.Load() {
		return nil, errBrokerClosing
	}
	b.regMu.Lock()
	slot := b.runners[id]
	loader := slot == nil
	if loader {
		slot = &runnerSlot{ready: make(chan struct{})}
		b.runners[id] = slot
	}
	b.regMu.Unlock()
	if !loader {
		<-slot.ready
		return slot.r, slot.err
	}
	slot.r, slot.err = b.startRunner(id)
	if slot.err != nil {
		b.log.Error("queue failed to load", "queue", id.String(), "err", slot.err)
		// Forget the failure, so the next use tries again (a full disk or
		// too many open files can pass).
		b.regMu.Lock()
		delete(b.runners, id)
		b.regMu.Unlock()
	}
	close(slot.ready)
	return slot.r, slot.err
}

// loadedRunner returns the runner of a loaded partition (waiting for a load
// in progress, so a declare is not lost between the catalogue read at load
// time and the registry), or nil.
func (b *Broker) loadedRunner(id core.QueueID) *runner {
	b.regMu.Lock()
	slot := b.runners[id]
	b.regMu.Unlock()
	if slot == nil {
		return nil
	}
	<-slot.ready
	return slot.r
}

// LoadedPartitions counts partitions loaded into memory.
func (b *Broker) LoadedPartitions() int {
	b.regMu.Lock()
	defer b.regMu.Unlock()
	n := 0
	for _, s := range b.runners {
		select {
		case <-s.ready:
			if s.r != nil {
				n++
			}
		default:
		}
	}
	return n
}

// goingAwayFlushMs is how long Close lets GOING_AWAY frames leave.
const goingAwayFlushMs = 100

// Close stops the broker: tells clients it is going away, ends sessions,
// flushes every log.
func (b *Broker) Close() error {
	if !b.closing.CompareAndSwap(false, true) {
		return nil
	}
	b.sessMu.Lock()
	sessions := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	b.sessMu.Unlock()
	for _, s := range sessions {
		s.goingAway("broker shutting down")
	}
	b.cancel()
	b.listenMu.Lock()
	for _, l := range b.listeners {
		l.Close()
	}
	b.listenMu.Unlock()
	// Give the GOING_AWAY frames a moment to leave, then close every socket,
	// including ones still in their handshake.
	time.Sleep(goingAwayFlushMs * time.Millisecond)
	b.connMu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.connMu.Unlock()
	b.wg.Wait()
	b.regMu.Lock()
	slots := make([]*runnerSlot, 0, len(b.runners))
	for _, s := range b.runners {
		slots = append(slots, s)
	}
	b.regMu.Unlock()
	for _, s := range slots {
		<-s.ready
		if s.r != nil {
			s.r.close()
		}
	}
	b.catalog.close()
	return b.Err()
}
