package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/e2e/lazyfs"
	"github.com/fibril-go/fibril/internal/syncbuf"
	"github.com/fibril-go/fibril/transport/wire"
)

// TestPowerLossLoop runs the real broker on the lazy filesystem (e2e/lazyfs)
// and pulls the power again and again under confirmed load from three
// clients over QUIC and TCP: payloads below and above the blob threshold,
// acks, nacks with and without retry-after, delayed publishes, TTLs, a
// partitioned queue, a snapshot every few hundred entries. Each power loss
// kills the broker and drops everything it did not make durable (with torn
// tails and lost directory entries as the seed decides), then starts it
// again on what is left. At the end everything is drained, and:
//   - every confirmed message arrived, byte for byte, at the partition and
//     offset its confirm named, and no offset held two messages;
//   - no message came back after a power loss that its ack was fenced
//     before: after its acks the consumer publishes a confirmed message to
//     each partition it acked on, on its own connection, and once that
//     confirm is back the acks before it are durable (PROTOCOL 5.9). An ACK
//     has no reply: its age at the power loss proves nothing (on a loaded
//     machine one round's fsync can hold the log's writer for hundreds of
//     ms, and the acks queued behind it are lost);
//   - no delivery tag of a partition repeated, across every restart (the
//     boot counter survived);
//   - every queue declared (and the settings of two of them) and the user
//     the broker was started with survived every power loss;
//   - the recorded client history passes the checker (`fibril check`).
//
// FIBRIL_E2E_POWERLOSS_CYCLES sets the cycles (10 by default),
// FIBRIL_E2E_POWERLOSS_SEED the seed (printed by every run).
func TestPowerLossLoop(t *testing.T) {
	cycles := envInt("FIBRIL_E2E_POWERLOSS_CYCLES", 10)
	seed := uint64(envInt("FIBRIL_E2E_POWERLOSS_SEED", int(time.Now().UnixNano()&0x7fffffffffff)))
	res := runPowerLoss(t, powerLossConfig{cycles: cycles, seed: seed, bin: fibrilBin})
	t.Logf("power-loss loop (seed %d): %s", seed, res)
	if res.failures() != "" {
		t.Errorf("seed %d: %s (replay the fault choices: FIBRIL_E2E_POWERLOSS_SEED=%d go test ./e2e -run TestPowerLossLoop)",
			seed, res.failures(), seed)
	}
	if res.confirmed < cycles {
		t.Fatalf("only %d confirmed publishes over %d cycles: the loop did not exercise the broker", res.confirmed, cycles)
	}
}

// syncPath fsyncs a file or directory.
func syncPath(t testing.TB, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// requireFUSE skips without FUSE, except in CI (CI=true), where the
// power-loss tests must fail loudly rather than vanish.
// mountLazy mounts a lazy filesystem with seed over a fresh temporary
// directory (its disk in another) and unmounts it when the test ends; it
// returns the filesystem and its mount point.
func mountLazy(t testing.TB, seed uint64) (*lazyfs.FS, string) {
	t.Helper()
	requireFUSE(t)
	base := t.TempDir()
	mnt, disk := filepath.Join(base, "mnt"), filepath.Join(base, "disk")
	for _, d := range []string{mnt, disk} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fsys, err := lazyfs.Mount(mnt, disk, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fsys.Unmount(); err != nil {
			t.Errorf("unmounting the lazy filesystem: %v", err)
		}
	})
	return fsys, mnt
}

func requireFUSE(t testing.TB) {
	t.Helper()
	if err := lazyfs.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("FUSE is required in CI: %v", err)
		}
		t.Skipf("FUSE unavailable (CI=true makes this a failure): %v", err)
	}
}

// Loop shape.
const (
	powerLeaseMs        = 2000
	powerQuietMs        = 200 // the consumer's pause before a power loss (its fences' time to come back)
	powerSnapshotMin    = "300"
	powerSyncDelay      = 2 * time.Millisecond // an fsync's time on a quick SSD
	powerProducers      = 3
	powerPrefetch       = 16
	blobThresholdBytes  = 256 // io/logstore keeps payloads of this size and more in blob files
	longTTL             = 10 * time.Minute
	shortTTL            = 800 * time.Millisecond
	queueMaxRetries     = 10
	powerDrainQuietTime = 2 * powerLeaseMs * time.Millisecond
	powerUser           = "loop"
	powerPassword       = "power-loss-secret"
)

type powerLossConfig struct {
	cycles int
	seed   uint64
	bin    string // the fibril binary
	mutant string // FIBRIL_MUTANT for the broker ("" for none)
	// snapshotEntriesMin is --snapshot-entries-min ("" for the loop's
	// powerSnapshotMin).
	snapshotEntriesMin string
	// dropUnsyncedOps: every power loss drops every unsynced name
	// (lazyfs.SetDropUnsyncedOps).
	dropUnsyncedOps bool
}

// powerLossResult holds a run's figures and what it found.
type powerLossResult struct {
	cycles, confirmed, acked, redelivered, drained, tornTails int
	fencedAcks, unfencedCycles                                int // acks a confirmed fence made durable before a power loss; cycles with a fence not confirmed in time
	lost, moved, doubled, ackedBack, tagRepeats               int
	catalogueLost, settingsLost, userLost, brokerBroken       int
	checkerViolations                                         int
	// caughtAtCycle is the earliest cycle whose power loss did damage that
	// the checks found (0: none): a broken build's cycles to catch.
	caughtAtCycle int
	losses        []lazyfs.LossReport
	examples      []string
}

func (r *powerLossResult) String() string {
	torn := [4]int{}
	bytesLost := int64(0)
	for _, l := range r.losses {
		torn[0] += l.TailsClean
		torn[1] += l.TailsZeros
		torn[2] += l.TailsGarbage
		torn[3] += l.OpsDropped
		bytesLost += l.BytesDropped
	}
	return fmt.Sprintf("%d cycles: %d confirmed, %d acked (%d fenced before a power loss; %d cycles with a fence not confirmed in time), %d redelivered, %d drained; torn tails repaired by the broker %d; "+
		"the filesystem kept %d clean tail prefixes, tore %d with zeros and %d with garbage, dropped %d unsynced entry operations and %d unsynced bytes; "+
		"lost %d, at another offset %d, offsets doubled %d, acked came back %d, tags repeated %d, catalogue lost %d, settings lost %d, user lost %d, checker violations %d",
		r.cycles, r.confirmed, r.acked, r.fencedAcks, r.unfencedCycles, r.redelivered, r.drained, r.tornTails, torn[0], torn[1], torn[2], torn[3], bytesLost,
		r.lost, r.moved, r.doubled, r.ackedBack, r.tagRepeats, r.catalogueLost, r.settingsLost, r.userLost, r.checkerViolations)
}

// failures names every broken promise ("" when none).
func (r *powerLossResult) failures() string {
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(r.lost, "confirmed messages lost")
	add(r.moved, "confirmed messages delivered at another offset")
	add(r.doubled, "offsets holding two messages")
	add(r.ackedBack, "acked messages came back")
	add(r.tagRepeats, "delivery tags repeated")
	add(r.catalogueLost, "declared queues lost")
	add(r.settingsLost, "queue settings lost")
	add(r.userLost, "logins of a seeded user refused")
	add(r.checkerViolations, "checker violations")
	add(r.brokerBroken, "runs stopped by a broken broker")
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, ", ") + "; e.g. " + strings.Join(r.examples, "; ")
}

func (r *powerLossResult) example(format string, args ...any) {
	if len(r.examples) < 8 {
		r.examples = append(r.examples, fmt.Sprintf(format, args...))
	}
}

// brokerProc is one `fibril serve` on the lazy filesystem.
type brokerProc struct {
	t       testing.TB
	bin     string
	env     []string
	dataDir string
	port    int
	args    []string
	cmd     *exec.Cmd
	log     *syncbuf.Buffer
	logs    []string // logs of processes that ended

	snapshotEntriesMin string
}

func (b *brokerProc) addr() string { return "127.0.0.1:" + strconv.Itoa(b.port) }

func (b *brokerProc) start(extra ...string) error {
	b.t.Helper()
	// Many brokers run at once: no admin listener (its default port is fixed).
	args := append([]string{"serve", "--data-dir", b.dataDir, "--listen", b.addr(), "--lease-ms", strconv.Itoa(powerLeaseMs), "--admin-listen=",
		"--resident-payload-mb", "0", "--snapshot-entries-min", b.snapshotEntriesMin}, extra...)
	b.cmd = exec.Command(b.bin, args...)
	b.cmd.Env = append(os.Environ(), b.env...)
	b.log = &syncbuf.Buffer{}
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || b.exited() {
			b.kill()
			return fmt.Errorf("broker did not come up on %s; its log:\n%s", b.dataDir, tail(b.logs[len(b.logs)-1], 2000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *brokerProc) exited() bool {
	return b.cmd.ProcessState != nil || b.cmd.Process.Signal(syscall.Signal(0)) != nil
}

// kill is the power loss's first half: the process stops dead.
func (b *brokerProc) kill() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGKILL)
	_ = b.cmd.Wait()
	b.logs = append(b.logs, b.log.String())
	b.cmd = nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// tornTails counts the broker's warnings about a cut log tail.
func (b *brokerProc) tornTails() int {
	n := 0
	for _, l := range append(append([]string(nil), b.logs...), b.log.String()) {
		for _, line := range strings.Split(l, "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "tail") {
				n++
			}
		}
	}
	return n
}

func (b *brokerProc) dial(ctx context.Context, transport string) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return client.Dial(dctx, b.addr(), client.ClientOptions{Transport: transport,
		Credentials: &client.Credentials{Username: powerUser, Password: powerPassword}, DisableAutoReconnect: true})
}

// powerQueue is one queue of the loop.
type powerQueue struct {
	topic      string
	partitions uint32
}

var powerQueues = []powerQueue{{"pl-plain", 1}, {"pl-parts", 3}}

// powerLoop carries one run's state.
type powerLoop struct {
	t           *testing.T
	cfg         powerLossConfig
	fs          *lazyfs.FS
	broker      *brokerProc
	rec         *recorder
	res         *powerLossResult
	rng         *rand.Rand
	mu          sync.Mutex
	payloads    map[uint64][]byte     // msgID -> payload published
	ttlMs       map[uint64]int64      // msgID -> its TTL, if it has one
	confirm     map[uint64]partOffset // msgID -> where its confirm put it
	confirmedAt map[uint64]int64      // msgID -> Unix ms of its confirm
	deliveries  map[uint64][]delivery // msgID -> every delivery of it
	fencedAcks  map[uint64][]int      // msgID -> the cycles whose power loss came after a confirmed fence of an ack of it
	tags        map[string]bool       // "part/tag" seen
	declared    map[string]uint32     // queue -> partition count, declared and answered
	nextID      uint64
	crashMs     []int64 // Unix ms of each power loss
}

type partOffset struct {
	part   int
	offset uint64
}

func runPowerLoss(t *testing.T, cfg powerLossConfig) *powerLossResult {
	fsys, mnt := mountLazy(t, cfg.seed)
	fsys.SetSyncDelay(powerSyncDelay)
	fsys.SetDropUnsyncedOps(cfg.dropUnsyncedOps)
	l := &powerLoop{t: t, cfg: cfg, fs: fsys, res: &powerLossResult{}, rng: rand.New(rand.NewPCG(cfg.seed, 2)),
		rec: newRecorder("powerloss", cfg.seed, powerLeaseMs), payloads: map[uint64][]byte{},
		ttlMs: map[uint64]int64{}, confirm: map[uint64]partOffset{}, confirmedAt: map[uint64]int64{},
		deliveries: map[uint64][]delivery{}, fencedAcks: map[uint64][]int{}, tags: map[string]bool{}, declared: map[string]uint32{}}
	l.broker = &brokerProc{t: t, bin: cfg.bin, dataDir: filepath.Join(mnt, "data"), port: freePort(t), snapshotEntriesMin: cfg.snapshotEntriesMin}
	if l.broker.snapshotEntriesMin == "" {
		l.broker.snapshotEntriesMin = powerSnapshotMin
	}
	// The data directory exists, durably, before the broker first starts,
	// as an operator's would: `fibril serve` creates a missing one without
	// fsyncing its parent, so a power loss can take the whole directory
	// (found by this loop; reported for io/broker).
	if err := os.Mkdir(l.broker.dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	syncPath(t, mnt)
	if cfg.mutant != "" {
		l.broker.env = []string{"FIBRIL_MUTANT=" + cfg.mutant}
	}
	t.Cleanup(l.broker.kill) // runs before mountLazy's unmount (cleanups run last-in first-out)
	for _, q := range powerQueues {
		l.rec.addQueue(checker.QueueSpec{Topic: q.topic, Partitions: int(q.partitions), MaxRetries: queueMaxRetries,
			DLQKind: uint8(core.DLQDiscard)})
	}
	// The first start seeds the user; later starts do not, so a lost user
	// store shows as a refused login.
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, stopped := p.(loopStopped); !stopped {
					panic(p)
				}
			}
		}()
		if err := l.broker.start("--user", powerUser+":"+powerPassword); err != nil {
			t.Fatal(err)
		}
		l.declareQueues()
		for cycle := 1; cycle <= cfg.cycles; cycle++ {
			l.cycle(cycle)
			l.res.cycles = cycle
		}
		l.drain()
		l.checkSettings()
		l.judge()
	}()
	l.res.tornTails = l.broker.tornTails()
	return l.res
}

// loopStopped unwinds a run that cannot go on (see stop).
type loopStopped struct{}

// stop ends the run: the broker broke a promise in a way that leaves
// nothing to check further (it does not start, refuses the seeded user,
// loses a subscription). It counts as a failure of the cycle under way.
func (l *powerLoop) stop(format string, args ...any) {
	l.res.brokerBroken++
	if b := l.broker; b.cmd != nil {
		state := "running"
		if b.exited() {
			state = "exited"
		}
		format += "; the broker (%s) logged: %s"
		args = append(args, state, tail(b.log.String(), 600))
	}
	l.res.example(format, args...)
	l.markBad(len(l.crashMs)) // the last power loss did it
	panic(loopStopped{})
}

func (l *powerLoop) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	l.t.Cleanup(cancel)
	return ctx
}

// declareQueues declares the loop's queues and the two whose settings are
// checked after the power losses.
func (l *powerLoop) declareQueues() {
	c, err := l.broker.dial(l.ctx(), client.TransportTCP)
	if err != nil {
		l.stop("dial: %v", err)
	}
	defer c.Close()
	for _, q := range powerQueues {
		l.declare(c, q.topic, client.NewQueueConfig(q.topic).PartitionCount(q.partitions).Dlq(client.DlqDiscard()).
			DlqMaxRetries(queueMaxRetries))
	}
	l.declare(c, settingsTTLQueue, client.NewQueueConfig(settingsTTLQueue).PartitionCount(2).DefaultMessageTTL(settingsTTL))
	l.declare(c, settingsRetryQueue, client.NewQueueConfig(settingsRetryQueue).Dlq(client.DlqDiscard()).DlqMaxRetries(1))
}

// declare declares a queue; once answered, it must survive every power loss.
func (l *powerLoop) declare(c *client.Client, topic string, cfg *client.QueueConfig) {
	n, err := c.DeclareQueue(l.ctx(), cfg)
	if err != nil {
		l.stop("declare %s: %v\n%s", topic, err, l.broker.log.String())
	}
	l.declared[topic] = n
}

// checkCatalogue: every queue declared so far still has its count. A
// standalone broker's TOPOLOGY lists nothing (PROTOCOL 5.20), so each queue
// is asked with a bare DECLARE_QUEUE, which changes nothing and answers the
// stored count (a queue the catalogue lost would come back with 1).
func (l *powerLoop) checkCatalogue(c *client.Client, cycle int) {
	topics := make([]string, 0, len(l.declared))
	for topic := range l.declared {
		topics = append(topics, topic)
	}
	sort.Strings(topics)
	for _, topic := range topics {
		n := l.declared[topic]
		got, err := c.DeclareQueue(l.ctx(), client.NewQueueConfig(topic))
		if err != nil {
			l.stop("cycle %d: declare %s to read its count: %v", cycle, topic, err)
		}
		if got != n {
			l.res.catalogueLost++
			l.res.example("cycle %d: queue %s (declared with %d partitions) now has %d", cycle, topic, n, got)
		}
	}
}

// cycle runs load, then pulls the power and brings the broker back.
func (l *powerLoop) cycle(cycle int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin, err := l.broker.dial(l.ctx(), client.TransportTCP)
	if err != nil {
		l.res.userLost++
		l.stop("cycle %d: login as %s refused after a power loss: %v", cycle, powerUser, err)
	}
	l.checkCatalogue(admin, cycle)
	declaredTopic := "pl-decl-" + strconv.Itoa(cycle)
	l.declare(admin, declaredTopic, client.NewQueueConfig(declaredTopic).PartitionCount(uint32(cycle%4+1)))
	admin.Close()

	var wg sync.WaitGroup
	for p := 0; p < powerProducers; p++ {
		transport := transports[p%2]
		c, err := l.broker.dial(ctx, transport)
		if err != nil {
			l.stop("cycle %d: dial %s: %v", cycle, transport, err)
		}
		defer c.Close()
		rng := rand.New(rand.NewPCG(l.cfg.seed, uint64(cycle*16+p)))
		wg.Add(1)
		go func(client uint32) {
			defer wg.Done()
			l.produce(ctx, c, client, rng)
		}(uint32(cycle*16 + p + 1))
	}
	consumerTransport := transports[cycle%2]
	consumer, err := l.broker.dial(ctx, consumerTransport)
	if err != nil {
		l.stop("cycle %d: dial consumer: %v", cycle, err)
	}
	defer consumer.Close()
	ackFor := time.Duration(300+l.rng.IntN(900)) * time.Millisecond
	consumerID := uint32(cycle*16 + 9)
	cons := l.consume(ctx, consumer, consumerID, time.Now().Add(ackFor), false)
	// The fences: a confirmed publish to each partition the consumer acked
	// on, after its acks and on its connection. The power loss does not
	// wait for them; only the acks whose fence was confirmed count as
	// settled across it.
	fences := l.fence(ctx, consumer, consumerID, cons)
	time.Sleep(time.Duration(powerQuietMs+l.rng.IntN(150)) * time.Millisecond) // publishes still flowing
	var fenced fenceResult
	report, err := l.fs.PowerLoss(func() {
		l.broker.kill()
		l.recordUnread(cons)
		cancel()
		wg.Wait()
		fenced = <-fences // its confirms recorded before the crash
		l.rec.crash()
		l.crashMs = append(l.crashMs, time.Now().UnixMilli())
	})
	l.mu.Lock()
	for _, id := range fenced.settled {
		l.fencedAcks[id] = append(l.fencedAcks[id], cycle)
	}
	l.res.fencedAcks += len(fenced.settled)
	if fenced.confirmed < fenced.partitions {
		l.res.unfencedCycles++
	}
	l.mu.Unlock()
	l.fs.SetSyncDelay(powerSyncDelay) // consume may have slowed it (FIBRIL_E2E_LOAD_SYNC_MS)
	if err != nil {
		l.stop("cycle %d: power loss: %v", cycle, err)
	}
	l.res.losses = append(l.res.losses, report)
	l.t.Logf("cycle %d: %s", cycle, report)
	if err := l.broker.start(); err != nil {
		l.stop("cycle %d: the broker does not start after power loss %d: %v", cycle, cycle, err)
	}
}

// produce publishes confirmed messages until ctx ends.
func (l *powerLoop) produce(ctx context.Context, c *client.Client, clientID uint32, rng *rand.Rand) {
	for ctx.Err() == nil {
		q := powerQueues[rng.IntN(len(powerQueues))]
		l.mu.Lock()
		l.nextID++
		id := l.nextID
		l.mu.Unlock()
		size := 16 + rng.IntN(blobThresholdBytes-32) // inline in the record
		if rng.IntN(2) == 0 {
			size = blobThresholdBytes + rng.IntN(2800) // a blob file payload
		}
		payload := powerPayload(id, size)
		key := strconv.FormatUint(id, 10)
		partition := wire.PartitionForKey([]byte(key), q.partitions)
		part := l.rec.part(q.topic, partition)
		msg := client.Raw(payload).PartitionKey(key)
		pub := c.Publisher(q.topic)
		var ttlMs, notBeforeMs int64
		var offset uint64
		var err error
		l.mu.Lock()
		l.payloads[id] = payload
		l.mu.Unlock()
		switch v := rng.IntN(20); {
		case v < 3: // delayed
			notBefore := time.Now().Add(time.Duration(100+rng.IntN(1400)) * time.Millisecond)
			notBeforeMs = notBefore.UnixMilli()
			op := l.rec.publishCall(clientID, part, id, 0, notBeforeMs)
			offset, err = pub.PublishDelayedConfirmed(ctx, msg, notBefore)
			l.published(clientID, op, part, id, offset, err)
		case v < 6: // with a TTL, mostly long, sometimes short enough to expire
			ttl := longTTL
			if v == 5 {
				ttl = shortTTL
			}
			ttlMs = ttl.Milliseconds()
			l.mu.Lock()
			l.ttlMs[id] = ttlMs
			l.mu.Unlock()
			op := l.rec.publishCall(clientID, part, id, ttlMs, 0)
			offset, err = pub.Expiring(ttl).PublishConfirmed(ctx, msg)
			l.published(clientID, op, part, id, offset, err)
		default:
			op := l.rec.publishCall(clientID, part, id, 0, 0)
			offset, err = pub.PublishConfirmed(ctx, msg)
			l.published(clientID, op, part, id, offset, err)
		}
		if err != nil {
			return // the broker died under us: not confirmed, not counted
		}
	}
}

func (l *powerLoop) published(clientID uint32, op uint64, part int, id, offset uint64, err error) {
	if err != nil {
		return // unknown outcome: no return in the history
	}
	l.rec.publishReturn(clientID, op, part, id, true, offset)
	l.mu.Lock()
	l.confirm[id] = partOffset{part, offset}
	l.confirmedAt[id] = time.Now().UnixMilli()
	l.res.confirmed++
	l.mu.Unlock()
}

// powerPayload is message id's payload: its id, then bytes derived from it.
func powerPayload(id uint64, size int) []byte {
	b := []byte(strconv.FormatUint(id, 10) + "|")
	x := id*0x9e3779b97f4a7c15 | 1
	for len(b) < size {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b = append(b, byte(x))
	}
	return b
}

func payloadID(payload []byte) (uint64, bool) {
	head, _, ok := bytes.Cut(payload, []byte("|"))
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(string(head), 10, 64)
	return id, err == nil
}
