package broker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/logstore"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/transport/wire"
)

// One test per defect of issue 9 on the production path, each at the frame
// level over loopback.

// bootTagShift: the Node floors delivery tags of boot n at n << 40.
const bootTagShift = 40

// closedWithin reads (answering pings) until the broker closes the
// connection, failing if that takes longer than limit.
func closedWithin(t *testing.T, p *peer, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if _, err := p.tryRead(time.Until(start.Add(limit))); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("connection still open after %v", limit)
			}
			return time.Since(start)
		}
	}
}

func TestPartialHeaderThenSilenceIsClosed(t *testing.T) {
	if took, closed := partialHeaderClosedAfter(t, 3*time.Second); !closed || took < 250*time.Millisecond {
		t.Fatalf("closed %v after %v; want closed after the 300 ms handshake timeout", closed, took)
	}
	mutant.Active = mutant.NoHandshakeTimeout
	defer func() { mutant.Active = "" }()
	if _, closed := partialHeaderClosedAfter(t, time.Second); closed {
		t.Fatal("the no-handshake-timeout mutant was not caught: the test cannot fail")
	}
}

// partialHeaderClosedAfter sends half a header, then waits up to limit for
// the broker to close the connection.
func partialHeaderClosedAfter(t *testing.T, limit time.Duration) (time.Duration, bool) {
	b, addr := testBroker(t, "", func(c *Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	defer b.Close() // before the caller switches the mutant
	p := dialPeer(t, addr)
	p.c.Write(wire.AppendBodyFrame(nil, wire.OpHello, 1, &wire.Hello{ProtocolVersion: 1})[:10])
	start := time.Now()
	_, err := p.tryRead(limit)
	return time.Since(start), err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func TestHelloThenOnlyPingsIsClosed(t *testing.T) {
	_, addr := testBroker(t, "", func(c *Config) { c.AuthTimeout = 400 * time.Millisecond })
	p := dialPeer(t, addr)
	p.handshake(nil)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // keep the connection busy with pings: it is not auth
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				p.c.Write(wire.AppendBodyFrame(nil, wire.OpPing, 9, &wire.Ping{}))
			}
		}
	}()
	if took := closedWithin(t, p, 3*time.Second); took < 300*time.Millisecond {
		t.Fatalf("closed after %v, before the auth timeout", took)
	}
}

func TestConnectionLimit(t *testing.T) {
	_, addr := testBroker(t, "", func(c *Config) { c.ConnectionsMax = 2 })
	a := connect(t, addr)
	connect(t, addr)
	extra := dialPeer(t, addr)
	extra.send(wire.OpHello, 1, &wire.Hello{ClientName: "x", ProtocolVersion: 1})
	f := extra.read()
	if e, ok := f.body.(wire.ErrorBody); !ok || e.Code != wire.CodeInternal {
		t.Fatalf("connection over the limit answered %v %+v, want ERROR 500", f.hdr.Opcode, f.body)
	}
	closedWithin(t, extra, 3*time.Second)
	a.c.Close()
	// A closed connection frees its place.
	deadline := time.Now().Add(5 * time.Second)
	for {
		p := dialPeer(t, addr)
		p.send(wire.OpHello, 1, &wire.Hello{ClientName: "x", ProtocolVersion: 1})
		if f := p.read(); f.hdr.Opcode == wire.OpHelloOk {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a freed place was never given to a new connection")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDormantSessionGetsNoNewDeliveries: messages published while a session
// is dormant wait for a transport (PROTOCOL 7.7). The old broker handed
// them to the dormant session, where auto-ack settled them: when the grace
// expired they were gone, never seen by anyone.
func TestDormantSessionGetsNoNewDeliveries(t *testing.T) {
	_, addr := testBroker(t, "", func(c *Config) { c.ReconnectGraceMs = 1000 })
	p := connect(t, addr)
	p.subscribe("dorm", 0, 10, true)
	p.c.Close()
	time.Sleep(200 * time.Millisecond) // the session goes dormant
	pub := connect(t, addr)
	for i := 0; i < 5; i++ {
		pub.publish("dorm", "m", true)
	}
	time.Sleep(1500 * time.Millisecond) // the grace expires, nobody resumed
	q := connect(t, addr)
	q.subscribe("dorm", 0, 10, false)
	seen := map[uint64]bool{}
	for len(seen) < 5 {
		seen[q.deliver().Offset] = true
	}
}

// TestDormantDeliveriesReachTheResumedSession: the same messages go to the
// session once it resumes within the grace, each once.
func TestDormantDeliveriesReachTheResumedSession(t *testing.T) {
	_, addr := testBroker(t, "", func(c *Config) { c.ReconnectGraceMs = 5000 })
	p := connect(t, addr)
	p.subscribe("dorm", 0, 10, true)
	id := wire.ResumeIdentity{OwnerID: p.hello.OwnerID, ClientID: p.hello.ClientID, ResumeToken: p.hello.ResumeToken}
	p.c.Close()
	time.Sleep(200 * time.Millisecond)
	pub := connect(t, addr)
	for i := 0; i < 5; i++ {
		pub.publish("dorm", "m", true)
	}
	q := dialPeer(t, addr)
	q.handshake(&id)
	if q.hello.ResumeOutcome != wire.ResumeResumed {
		t.Fatalf("outcome %d, want resumed", q.hello.ResumeOutcome)
	}
	q.auth("fibril", "fibril", wire.OpAuthOk)
	seen := map[uint64]bool{}
	for len(seen) < 5 {
		off := q.deliver().Offset
		if seen[off] {
			t.Fatalf("offset %d delivered twice", off)
		}
		seen[off] = true
	}
}

// stallingLog holds the Node log's syncs while stalled is set.
type stallingLog struct {
	recordLog
	mu      sync.Mutex
	stalled bool
	release chan struct{}
}

func (s *stallingLog) Sync() error {
	s.mu.Lock()
	stalled, release := s.stalled, s.release
	s.mu.Unlock()
	if stalled {
		<-release
	}
	return s.recordLog.Sync()
}

// TestDeclareDoesNotStallPublishes: a declare waiting on the Node log's
// fsync holds up no publish to another queue. The old catalogue held its
// lock across its write and fsync, and every publish read it.
func TestDeclareDoesNotStallPublishes(t *testing.T) {
	stall := &stallingLog{release: make(chan struct{})}
	_, addr := testBroker(t, "", func(c *Config) {
		c.wrapNodeLog = func(rl recordLog) recordLog { stall.recordLog = rl; return stall }
	})
	p := connect(t, addr)
	p.publish("busy", "warm", true) // the queue exists and is loaded
	stall.mu.Lock()
	stall.stalled = true
	stall.mu.Unlock()
	declareID := p.request(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "other", PartitionCount: wire.Some[uint32](2)})
	for i := 0; i < 20; i++ {
		p.publish("busy", "m", true) // fails the test if it blocks 10 s
	}
	for _, f := range p.backlog {
		if f.hdr.RequestID == declareID {
			t.Fatal("the declare was answered before its record was durable")
		}
	}
	stall.mu.Lock()
	stall.stalled = false
	stall.mu.Unlock()
	close(stall.release)
	if f := p.reply(declareID); f.hdr.Opcode != wire.OpDeclareQueueOk {
		t.Fatalf("declare: %v %+v", f.hdr.Opcode, f.body)
	}
}

// corruptMiddle flips one byte in the middle of the biggest file under dir.
func corruptMiddle(t *testing.T, dir string) {
	t.Helper()
	var biggest string
	var size int64
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && info.Size() > size {
			biggest, size = path, info.Size()
		}
		return nil
	})
	if biggest == "" {
		t.Fatalf("no file under %s", dir)
	}
	data, err := os.ReadFile(biggest)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/3] ^= 0x5a
	if err := os.WriteFile(biggest, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptNodeLogRecordIsRefused: a bad record in the middle of the Node's
// log refuses the start. The old JSON catalogue silently forgot every queue
// after a bad line, and its rewrite made that permanent.
func TestCorruptNodeLogRecordIsRefused(t *testing.T) {
	dir := t.TempDir()
	b, addr := testBroker(t, dir, nil)
	p := connect(t, addr)
	for _, topic := range []string{"qa", "qb", "qc", "qd", "qe", "qf"} {
		id := p.request(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: topic, PartitionCount: wire.Some[uint32](3)})
		if f := p.reply(id); f.hdr.Opcode != wire.OpDeclareQueueOk {
			t.Fatalf("declare %s: %v", topic, f.hdr.Opcode)
		}
	}
	b.Close()
	corruptMiddle(t, filepath.Join(dir, "node"))
	cfg := DefaultConfig()
	cfg.DataDir = dir
	b2, err := New(cfg)
	if err == nil {
		b2.Close()
		t.Fatal("a broker started over a corrupt node log")
	}
	if !errors.Is(err, logstore.ErrCorrupt) {
		t.Fatalf("refused for another reason than the corrupt record: %v", err)
	}
}

// TestLegacyCatalogImportedOnce: an old catalog.jsonl is imported into the
// Node log at first boot and renamed away; the queues outlive it.
func TestLegacyCatalogImportedOnce(t *testing.T) {
	dir := t.TempDir()
	lines := `{"topic":"orders","partitions":4,"settings":{}}
{"topic":"work","partitions":1,"settings":{"max_retries":2}}
{"topic":"orders","partitions":4,"settings":{"default_ttl_ms":60000}}
{"topic":"torn","partit`
	if err := os.WriteFile(filepath.Join(dir, legacyCatalogName), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	for run := 0; run < 2; run++ {
		b, addr := testBroker(t, dir, nil)
		if _, err := os.Stat(filepath.Join(dir, legacyCatalogName)); !os.IsNotExist(err) {
			t.Fatalf("run %d: the old catalogue is still in place (%v)", run, err)
		}
		p := connect(t, addr)
		id := p.request(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "orders"})
		f := p.reply(id)
		if ok, isOk := f.body.(wire.DeclareQueueOk); !isOk || ok.PartitionCount != 4 {
			t.Fatalf("run %d: orders after import: %v %+v", run, f.hdr.Opcode, f.body)
		}
		id = p.request(wire.OpPublish, &wire.Publish{Topic: "orders", Partition: 3, RequireConfirm: true})
		if f := p.reply(id); f.hdr.Opcode != wire.OpPublishOk {
			t.Fatalf("run %d: publish to partition 3 of orders: %v", run, f.hdr.Opcode)
		}
		b.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, legacyCatalogMoved)); err != nil {
		t.Fatalf("the imported catalogue was not kept aside: %v", err)
	}
}

// TestLegacyCatalogBadLineRefused: a bad line before the last refuses the
// start instead of forgetting the queues after it.
func TestLegacyCatalogBadLineRefused(t *testing.T) {
	dir := t.TempDir()
	lines := "{\"topic\":\"a\",\"partitions\":1,\"settings\":{}}\nnot json\n{\"topic\":\"b\",\"partitions\":1,\"settings\":{}}\n"
	if err := os.WriteFile(filepath.Join(dir, legacyCatalogName), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir = dir
	b, err := New(cfg)
	if err == nil {
		b.Close()
		t.Fatal("started over a catalogue with a corrupt line")
	}
	if !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("error does not name the line: %v", err)
	}
}

// TestResumeRacingDetachKeepsTheNewSocket: a resume whose HELLO races the
// old socket's close leaves the resumed socket working.
func TestResumeRacingDetachKeepsTheNewSocket(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	p.subscribe("race", 0, 100, false)
	for i := 0; i < 20; i++ {
		id := wire.ResumeIdentity{OwnerID: p.hello.OwnerID, ClientID: p.hello.ClientID, ResumeToken: p.hello.ResumeToken}
		q := dialPeer(t, addr)
		done := make(chan struct{})
		go func() { p.c.Close(); close(done) }() // the detach, racing the resume
		q.handshake(&id)
		<-done
		if q.hello.ResumeOutcome != wire.ResumeResumed {
			t.Fatalf("round %d: outcome %d", i, q.hello.ResumeOutcome)
		}
		q.auth("fibril", "fibril", wire.OpAuthOk)
		ping := q.request(wire.OpPing, &wire.Ping{})
		if f := q.reply(ping); f.hdr.Opcode != wire.OpPong {
			t.Fatalf("round %d: PING answered %v", i, f.hdr.Opcode)
		}
		q.publish("race", "m", true)
		d := q.deliver()
		q.ack("race", 0, d.DeliveryTag)
		p = q
	}
}

// TestResumeAfterRestart: a session skeleton lets a restarted broker answer
// resumed_after_restart with the same identity; the old delivery tags are
// dead (an ack of one settles nothing) and the message redelivers.
func TestResumeAfterRestart(t *testing.T) {
	dir := t.TempDir()
	b, addr := testBroker(t, dir, nil)
	p := connect(t, addr)
	p.publish("rr", "m", true)
	p.subscribe("rr", 0, 1, false)
	first := p.deliver()
	id := wire.ResumeIdentity{OwnerID: p.hello.OwnerID, ClientID: p.hello.ClientID, ResumeToken: p.hello.ResumeToken}
	b.stop(false) // a crash: the session is not drained away
	_, addr2 := testBroker(t, dir, nil)
	q := dialPeer(t, addr2)
	q.handshake(&id)
	if q.hello.ResumeOutcome != wire.ResumeResumedAfterRestart || q.hello.ClientID != id.ClientID || q.hello.OwnerID != id.OwnerID {
		t.Fatalf("after restart: outcome %d client %v owner %v", q.hello.ResumeOutcome, q.hello.ClientID, q.hello.OwnerID)
	}
	q.auth("fibril", "fibril", wire.OpAuthOk)
	q.subscribe("rr", 0, 1, false)
	q.ack("rr", 0, first.DeliveryTag) // a dead tag: settles nothing
	d := q.deliver()                  // after the first run's 2 s lease
	if d.Offset != first.Offset || d.DeliveryTag < 2<<bootTagShift {
		t.Fatalf("redelivery %+v of %+v: want the same offset with a second-run tag", d, first)
	}
}

// TestClockStepDoesNotExpireLeases: the wall clock jumping 5 minutes ahead
// expires no lease: the driver's clock is monotonic since boot. Under the
// WallClockLeases mutant (the old runner's time.Now per step) it does.
func TestClockStepDoesNotExpireLeases(t *testing.T) {
	if got := clockStepRedelivers(t); got {
		t.Fatal("a wall clock step expired a lease")
	}
	mutant.Active = mutant.WallClockLeases
	defer func() { mutant.Active = "" }()
	if got := clockStepRedelivers(t); !got {
		t.Fatal("the wall-clock mutant was not caught: the test cannot fail")
	}
}

func clockStepRedelivers(t *testing.T) bool {
	var stepMs atomic.Int64
	b, addr := testBroker(t, "", func(c *Config) {
		// The step (5 min) passes the lease (1 min) but not three
		// heartbeat intervals: the session must not cut the connection.
		c.HeartbeatInterval = 10 * time.Minute
		c.Partition.LeaseMs = 60_000
		c.wallClock = func() time.Time { return time.Now().Add(time.Duration(stepMs.Load()) * time.Millisecond) }
	})
	defer b.Close() // before the caller switches the mutant
	p := connect(t, addr)
	p.publish("clk", "a", true)
	p.subscribe("clk", 0, 2, false)
	first := p.deliver()
	stepMs.Store(int64(5 * time.Minute / time.Millisecond))
	p.publish("clk", "b", true) // steps the partition at the new wall time
	for _, f := range p.backlog {
		if d, ok := f.body.(wire.Deliver); ok && d.Offset == first.Offset {
			return true
		}
	}
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		f, err := p.tryRead(time.Until(deadline))
		if err != nil {
			break
		}
		if d, ok := f.body.(wire.Deliver); ok && d.Offset == first.Offset {
			return true
		}
	}
	return false
}

// failingSyncLog fails every Sync once failing is set.
type failingSyncLog struct {
	recordLog
	failing atomic.Bool
}

func (f *failingSyncLog) Sync() error {
	if f.failing.Load() {
		return errors.New("injected fsync failure")
	}
	return f.recordLog.Sync()
}

// TestNodeLogFsyncFailureStopsCleanly: a failed fsync of the Node's log
// stops the broker (Failed, Err); the declare waiting on it is never
// confirmed, and Close returns.
func TestNodeLogFsyncFailureStopsCleanly(t *testing.T) {
	failing := &failingSyncLog{}
	b, addr := testBroker(t, "", func(c *Config) {
		c.wrapNodeLog = func(rl recordLog) recordLog { failing.recordLog = rl; return failing }
	})
	p := connect(t, addr)
	failing.failing.Store(true)
	id := p.request(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "never", PartitionCount: wire.Some[uint32](2)})
	select {
	case <-b.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("a failed fsync of the node log did not stop the broker")
	}
	if f, err := p.tryRead(300 * time.Millisecond); err == nil && f.hdr.RequestID == id && f.hdr.Opcode == wire.OpDeclareQueueOk {
		t.Fatal("a declare was confirmed though its record's fsync failed")
	}
	done := make(chan struct{})
	go func() { b.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung after a failed fsync")
	}
}

// TestFailedPayloadReadStopsCleanly: a stored payload that cannot be read
// back stops the broker (Failed, Err) and Close returns: nothing hangs.
func TestFailedPayloadReadStopsCleanly(t *testing.T) {
	dir := t.TempDir()
	b, addr := testBroker(t, dir, func(c *Config) { c.ResidentPayloadBytesMax = 0 })
	p := connect(t, addr)
	p.request(wire.OpPublish, &wire.Publish{Topic: "rot", RequireConfirm: true, Payload: spillPayload(1)})
	p.expect(wire.OpPublishOk)
	waitFor(func() bool { return b.metrics.residentPayloadBytes.Load() == 0 })
	qdir := partitionDir(dir, node.KindQueue, core.QueueID{Topic: "rot"})
	blobs, _ := filepath.Glob(filepath.Join(qdir, "blob-*"))
	if len(blobs) == 0 {
		entries, _ := os.ReadDir(qdir)
		t.Fatalf("no blob file to damage: %v", entries)
	}
	for _, path := range blobs {
		os.Truncate(path, 0)
	}
	p.request(wire.OpSubscribe, &wire.Subscribe{Topic: "rot", Prefetch: 1})
	select {
	case <-b.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("an unreadable payload did not stop the broker")
	}
	if b.Err() == nil {
		t.Fatal("Failed closed without an error")
	}
	// The halted partition answers nothing any more, but nobody waits on
	// it: requests to it bounce and their senders answer with an error
	// (the old broker left a restore waiting forever on a halted runner).
	q := connect(t, addr)
	id := q.request(wire.OpPublish, &wire.Publish{Topic: "rot", RequireConfirm: true, Payload: []byte("x")})
	if f := q.reply(id); f.hdr.Opcode != wire.OpError {
		t.Fatalf("a publish to the halted partition answered %v %+v, want ERROR", f.hdr.Opcode, f.body)
	}
	done := make(chan struct{})
	go func() { b.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung after a fatal error")
	}
}

// TestSnapshotsUnderSustainedLoad: a partition that never goes quiescent
// (a publisher pipelining ahead of a consumer that keeps up) still
// snapshots, and restarts from the snapshot. (The old runner's check, run
// only on durability reports, found quiescent moments on loopback: this
// passes on the old broker; the never-quiescent case is the Host's test.)
func TestSnapshotsUnderSustainedLoad(t *testing.T) {
	dir := t.TempDir()
	if !snapshotsUnderLoad(t, dir) {
		t.Fatal("no snapshot was taken while the load lasted")
	}
	b2, addr2 := testBroker(t, dir, nil)
	c := connect(t, addr2)
	if off := c.publish("load", "after", true); off != 3000 {
		t.Fatalf("after a restart from a snapshot the next offset is %d, want 3000", off)
	}
	c.subscribe("load", 0, 1024, false)
	if d := c.deliver(); d.Offset != 3000 {
		t.Fatalf("after a restart offset %d came back though acked", d.Offset)
	}
	b2.Close()
}

// snapshotsUnderLoad runs 3000 pipelined publishes against a consumer that
// keeps up and says whether the partition snapshotted by the end of them.
// It closes its broker before it returns.
func snapshotsUnderLoad(t *testing.T, dir string) bool {
	b, addr := testBroker(t, dir, func(c *Config) { c.SnapshotEntriesMin = 100 })
	defer b.Close()
	pub := connect(t, addr)
	con := connect(t, addr)
	con.subscribe("load", 0, 64, false)
	const messages = 3000
	consumed := make(chan error, 1)
	go func() {
		for seen := 0; seen < messages; seen++ {
			f, err := con.tryRead(10 * time.Second)
			if err != nil {
				consumed <- err
				return
			}
			if d, ok := f.body.(wire.Deliver); ok {
				con.c.Write(wire.AppendBodyFrame(nil, wire.OpAck, 0, &wire.Ack{Topic: "load", Tags: []uint64{d.DeliveryTag}}))
			} else {
				seen--
			}
		}
		consumed <- nil
	}()
	qdir := partitionDir(dir, node.KindQueue, core.QueueID{Topic: "load"})
	snapshotsSeen := false
	for i := 0; i < messages; i++ {
		// Unconfirmed and pipelined: the log always has entries in flight.
		pub.request(wire.OpPublish, &wire.Publish{Topic: "load", Payload: []byte("m")})
		if !snapshotsSeen && i%100 == 99 {
			snaps, _ := filepath.Glob(filepath.Join(qdir, "snapshot-*"))
			snapshotsSeen = len(snaps) > 0
		}
	}
	if err := <-consumed; err != nil {
		t.Fatalf("consumer: %v", err)
	}
	// The Host asks once more than max(SnapshotEntriesMin, factor x live)
	// entries were appended: by the end of the load it has.
	waitFor(func() bool {
		snaps, _ := filepath.Glob(filepath.Join(qdir, "snapshot-*"))
		snapshotsSeen = snapshotsSeen || len(snaps) > 0
		return snapshotsSeen
	})
	// The PONG follows every ack into the session: they reach the partition
	// before the close, which steps them.
	if f := con.reply(con.request(wire.OpPing, &wire.Ping{})); f.hdr.Opcode != wire.OpPong {
		t.Fatalf("PING answered %v", f.hdr.Opcode)
	}
	return snapshotsSeen
}

// TestReaderBackpressureDoesNotDeadlock: with a tiny partition inbox limit
// the reader stops and starts again many times under a flood of pipelined
// publishes (and acks from a consumer on the same partition), and every
// one of them lands: readers wait, machines never do.
func TestReaderBackpressureDoesNotDeadlock(t *testing.T) {
	_, addr := testBroker(t, "", func(c *Config) { c.RunnerInboxMax = 4 })
	pub := connect(t, addr)
	con := connect(t, addr)
	con.subscribe("flood", 0, 16, true)
	const messages = 5000
	for i := 0; i < messages; i++ {
		pub.request(wire.OpPublish, &wire.Publish{Topic: "flood", Payload: []byte("m")})
	}
	if off := pub.publish("flood", "last", true); off != messages {
		t.Fatalf("the confirmed publish after the flood got offset %d, want %d", off, messages)
	}
	seen := 0
	for seen <= messages {
		con.deliver()
		seen++
	}
}

// TestLegacyBootCountKeepsTagsAbove: a data directory an older broker wrote
// kept its boot count in a file; the Node continues above it, so the first
// delivery tag of the new run lies above every tag the old runs handed out
// (tag floor = boot << 40). Without the import the count restarted at 1 and
// a client settling a tag from before the upgrade could settle another
// message.
func TestLegacyBootCountKeepsTagsAbove(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, legacyBootName), []byte("7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, addr := testBroker(t, dir, nil)
	defer b.Close()
	p := connect(t, addr)
	p.publish("legacy", "x", true)
	p.subscribe("legacy", 0, 1, false)
	d := p.deliver()
	if floor := uint64(8) << 40; d.DeliveryTag < floor {
		t.Fatalf("first tag %d is below the tag floor %d of boot 8 (old boot count 7)", d.DeliveryTag, floor)
	}
}

// TestLegacyBootCountCorruptRefused: a boot file that does not parse
// refuses the start rather than guess a count that may be too low.
func TestLegacyBootCountCorruptRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, legacyBootName), []byte("seven"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir = dir
	if b, err := New(cfg); err == nil {
		b.Close()
		t.Fatal("a corrupt legacy boot file was accepted")
	}
}
