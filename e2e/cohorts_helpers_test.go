package e2e

// Helpers of cohorts_test.go: in-process cohort members that record what
// they are told and delivered, a cohort member in a process of its own (the
// test binary run again, so the test can SIGKILL it), a raw wire connection
// over either transport, and a UDP proxy that blackholes QUIC flows.

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/certs"
	"github.com/fibril-go/fibril/transport/wire"
)

const cohortPartitions = 4

// cohortKeys returns perPartition keys for each partition of a
// cohortPartitions queue, so a keyed load reaches every partition.
func cohortKeys(perPartition int) []string {
	var keys []string
	count := make(map[uint32]int)
	for i := 0; len(keys) < perPartition*cohortPartitions; i++ {
		k := "k" + strconv.Itoa(i)
		p := wire.PartitionForKey([]byte(k), cohortPartitions)
		if count[p] < perPartition {
			count[p]++
			keys = append(keys, k)
		}
	}
	return keys
}

func sprint(v ...any) string { return fmt.Sprint(v...) }

func keyPartition(key string) uint32 { return wire.PartitionForKey([]byte(key), cohortPartitions) }

// keyedPayload is "key/seq"; parseKeyed reads it back.
func keyedPayload(key string, seq int) string { return key + "/" + strconv.Itoa(seq) }

func parseKeyed(payload string) (string, int, error) {
	key, seqText, ok := strings.Cut(payload, "/")
	seq, err := strconv.Atoi(seqText)
	if !ok || err != nil {
		return "", 0, fmt.Errorf("payload %q is not key/seq", payload)
	}
	return key, seq, nil
}

func declareCohortQueue(t *testing.T, c *client.Client, topic string) {
	t.Helper()
	if n, err := c.DeclareQueue(ctxT(t), client.NewQueueConfig(topic).PartitionCount(cohortPartitions)); err != nil || n != cohortPartitions {
		t.Fatalf("declare %s: %d partitions, %v", topic, n, err)
	}
}

// publishKeyed publishes seqs [from, to) of every key, confirmed,
// interleaved: seq from of every key, then from+1, ...
func publishKeyed(t *testing.T, c *client.Client, topic string, keys []string, from, to int) {
	t.Helper()
	pub := c.Publisher(topic)
	ctx := ctxT(t)
	for seq := from; seq < to; seq++ {
		for _, k := range keys {
			if _, err := pub.PublishConfirmed(ctx, client.Text(keyedPayload(k, seq)).PartitionKey(k)); err != nil {
				t.Fatalf("publish %s: %v", keyedPayload(k, seq), err)
			}
		}
	}
}

// received is one delivery as a member saw it.
type received struct {
	member    string
	partition uint32
	offset    uint64
	retries   uint32
	key       string
	seq       int
	// recvAt is when the consumer read it from the channel, ackAt just
	// before it called Complete, ackErr what Complete returned.
	recvAt, ackAt time.Time
	ackErr        error
}

// cohortMember is one in-process cohort member: its client, its exclusive
// subscription, the notices its callback saw and everything delivered to it
// (each delivery is completed at once).
type cohortMember struct {
	name string
	c    *client.Client
	sub  *client.Subscription // the newest; only the test goroutine touches it

	// manual: the consumer records deliveries and leaves them unsettled
	// until settleHeld.
	manual bool

	mu         sync.Mutex
	notices    []client.AssignmentChange
	deliveries []received
	held       map[int]*client.Delivery // index in deliveries -> unsettled delivery (manual)
}

type memberOptions struct {
	restore     bool          // ClientOptions.ReconcileRestore
	noReconnect bool          // ClientOptions.DisableAutoReconnect
	heartbeat   time.Duration // ClientOptions.HeartbeatInterval; 0: the default
	tls         *client.TLSOptions
}

func dialMember(t *testing.T, name, addr, transport string, mo memberOptions) *cohortMember {
	t.Helper()
	m := &cohortMember{name: name}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.ClientOptions{Transport: transport, TLS: mo.tls,
		Credentials:      &client.Credentials{Username: "fibril", Password: "fibril"},
		ReconcileRestore: mo.restore, DisableAutoReconnect: mo.noReconnect, HeartbeatInterval: mo.heartbeat,
		OnAssignmentChanged: func(ac client.AssignmentChange) {
			m.mu.Lock()
			m.notices = append(m.notices, ac)
			m.mu.Unlock()
		}})
	if err != nil {
		t.Fatalf("dial %s over %s: %v", name, transport, err)
	}
	t.Cleanup(func() { c.Close() })
	m.c = c
	return m
}

// join subscribes m exclusively to topic and starts its consumer.
func (m *cohortMember) join(t *testing.T, topic string, opts client.SubscribeOptions) *client.Subscription {
	t.Helper()
	sub, err := m.tryJoin(ctxT(t), topic, opts)
	if err != nil {
		t.Fatalf("%s: SubscribeTopicExclusive %s: %v", m.name, topic, err)
	}
	return sub
}

func (m *cohortMember) tryJoin(ctx context.Context, topic string, opts client.SubscribeOptions) (*client.Subscription, error) {
	sub, err := m.c.SubscribeTopicExclusive(ctx, topic, opts)
	if err != nil {
		return nil, err
	}
	m.sub = sub
	go m.consume(sub)
	return sub, nil
}

func (m *cohortMember) consume(sub *client.Subscription) {
	for d := range sub.Deliveries() {
		r := received{member: m.name, partition: d.Partition, offset: d.Offset, retries: d.Retries, recvAt: time.Now()}
		var err error
		if r.key, r.seq, err = parseKeyed(d.Text()); err != nil {
			r.key = "?" + d.Text() // reported by the checks as an unknown key
		}
		if m.manual {
			r.ackErr = errHeld
			m.mu.Lock()
			if m.held == nil {
				m.held = map[int]*client.Delivery{}
			}
			m.held[len(m.deliveries)] = d
			m.deliveries = append(m.deliveries, r)
			m.mu.Unlock()
			continue
		}
		r.ackAt = time.Now()
		r.ackErr = d.Complete(context.Background())
		m.mu.Lock()
		m.deliveries = append(m.deliveries, r)
		m.mu.Unlock()
	}
}

// settleHeld completes every delivery a manual member holds.
func (m *cohortMember) settleHeld(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, d := range m.held {
		m.deliveries[i].ackAt = time.Now()
		m.deliveries[i].ackErr = d.Complete(context.Background())
		if m.deliveries[i].ackErr != nil {
			t.Fatalf("%s: completing a held delivery: %v", m.name, m.deliveries[i].ackErr)
		}
	}
	m.held = nil
}

func (m *cohortMember) received() []received {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.deliveries)
}

func (m *cohortMember) noticesSeen() []client.AssignmentChange {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.notices)
}

// assignedNow is the member's assignment as its subscription says, and
// whether the callback agrees (it runs on a goroutine of its own, so it may
// lag: callers poll).
func (m *cohortMember) assignedNow() ([]uint32, bool) {
	assigned := m.sub.Assignment()
	last, ok := m.lastNotice()
	return assigned, ok && slices.Equal(last.Assigned, assigned)
}

// lastNotice is the newest notice of the current subscription's cohort.
func (m *cohortMember) lastNotice() (client.AssignmentChange, bool) {
	notices := m.noticesSeen()
	for i := len(notices) - 1; i >= 0; i-- {
		if notices[i].Topic == m.sub.Topic() && notices[i].ConsumerGroup == m.sub.ConsumerGroup() {
			return notices[i], true
		}
	}
	return client.AssignmentChange{}, false
}

// splitOf reports whether the given assignments are disjoint, cover every
// partition and are balanced (each within one of the others).
func splitOf(assignments ...[]uint32) bool {
	var all []uint32
	least, most := cohortPartitions, 0
	for _, a := range assignments {
		all = append(all, a...)
		least, most = min(least, len(a)), max(most, len(a))
	}
	slices.Sort(all)
	return slices.Equal(all, []uint32{0, 1, 2, 3}) && most-least <= 1
}

// checkNotices checks the notices a member's callback saw, per cohort:
// generations strictly grow, Added and Revoked are the change from the
// previous notice (from nothing for the first), all sorted.
func checkNotices(t *testing.T, m *cohortMember) {
	t.Helper()
	type cohortKey struct{ topic, group, consumerGroup string }
	previous := map[cohortKey][]uint32{}
	generation := map[cohortKey]uint64{}
	for i, n := range m.noticesSeen() {
		key := cohortKey{n.Topic, n.Group, n.ConsumerGroup}
		if last, seen := generation[key]; seen && n.Generation <= last {
			t.Errorf("%s: notice %d has generation %d after %d", m.name, i, n.Generation, last)
		}
		generation[key] = n.Generation
		wantAdded, wantRevoked := setMinus(n.Assigned, previous[key]), setMinus(previous[key], n.Assigned)
		if !slices.IsSorted(n.Assigned) || !slices.Equal(n.Added, wantAdded) || !slices.Equal(n.Revoked, wantRevoked) {
			t.Errorf("%s: notice %d (%s, generation %d) says assigned %v added %v revoked %v after %v; want added %v revoked %v",
				m.name, i, n.Topic, n.Generation, n.Assigned, n.Added, n.Revoked, previous[key], wantAdded, wantRevoked)
		}
		previous[key] = n.Assigned
	}
}

// setMinus is a minus b, both sorted.
func setMinus(a, b []uint32) []uint32 {
	var out []uint32
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// --- a cohort member in a process of its own ---

// memberProcessEnv, when set, makes the test binary a cohort member
// (TestMain calls runMemberProcess): it subscribes exclusively, completes
// the first FIBRIL_E2E_MEMBER_ACK_FIRST deliveries of each partition and
// holds every later one, and reports on stdout, one event a line:
//
//	member <uuid>
//	assign <generation> <p,p,...>
//	deliver <partition> <offset> <retries> <payload> <acked 0|1>
const memberProcessEnv = "FIBRIL_E2E_COHORT_MEMBER"

const memberLinePrefix = "cohort-member "

func runMemberProcess() int {
	env := func(name string) string { return os.Getenv("FIBRIL_E2E_MEMBER_" + name) }
	prefetch, _ := strconv.Atoi(env("PREFETCH"))
	ackFirst, _ := strconv.Atoi(env("ACK_FIRST"))
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(os.Stdout, memberLinePrefix+format+"\n", args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, env("ADDR"), client.ClientOptions{Transport: env("TRANSPORT"),
		Credentials: &client.Credentials{Username: "fibril", Password: "fibril"},
		OnAssignmentChanged: func(ac client.AssignmentChange) {
			parts := make([]string, len(ac.Assigned))
			for i, p := range ac.Assigned {
				parts[i] = strconv.Itoa(int(p))
			}
			say("assign %d %s", ac.Generation, strings.Join(parts, ","))
		}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "member: dial:", err)
		return 1
	}
	sub, err := c.SubscribeTopicExclusive(ctx, env("TOPIC"), client.SubscribeOptions{Prefetch: uint32(prefetch)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "member: subscribe:", err)
		return 1
	}
	say("member %s", sub.MemberID())
	seen := make(map[uint32]int)
	for d := range sub.Deliveries() {
		seen[d.Partition]++
		acked := 0
		if seen[d.Partition] <= ackFirst {
			if err := d.Complete(context.Background()); err != nil {
				fmt.Fprintln(os.Stderr, "member: complete:", err)
				return 1
			}
			acked = 1
		}
		say("deliver %d %d %d %s %d", d.Partition, d.Offset, d.Retries, d.Text(), acked)
	}
	fmt.Fprintln(os.Stderr, "member: subscription ended:", sub.CloseReason())
	return 1
}

// memberProcess is the test's handle on a member process.
type memberProcess struct {
	cmd    *exec.Cmd
	stderr *strings.Builder
	mu     sync.Mutex
	member string
	assign [][]uint32 // every notice's assignment, in order
	gens   []uint64
	got    []received
}

func startMemberProcess(t *testing.T, addr, transport, topic string, prefetch, ackFirst int) *memberProcess {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), memberProcessEnv+"=1",
		"FIBRIL_E2E_MEMBER_ADDR="+addr, "FIBRIL_E2E_MEMBER_TRANSPORT="+transport, "FIBRIL_E2E_MEMBER_TOPIC="+topic,
		"FIBRIL_E2E_MEMBER_PREFETCH="+strconv.Itoa(prefetch), "FIBRIL_E2E_MEMBER_ACK_FIRST="+strconv.Itoa(ackFirst))
	mp := &memberProcess{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = &lockedWriter{w: mp.stderr, mu: &mp.mu}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mp.kill)
	go mp.read(out)
	return mp
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (mp *memberProcess) read(out io.Reader) {
	scanner := bufio.NewScanner(out)
	for scanner.Scan() {
		line, ok := strings.CutPrefix(scanner.Text(), memberLinePrefix)
		if !ok {
			continue
		}
		fields := strings.Fields(line)
		mp.mu.Lock()
		switch {
		case fields[0] == "member" && len(fields) == 2:
			mp.member = fields[1]
		case fields[0] == "assign" && len(fields) >= 2:
			gen, _ := strconv.ParseUint(fields[1], 10, 64)
			var parts []uint32
			if len(fields) == 3 {
				for _, p := range strings.Split(fields[2], ",") {
					n, _ := strconv.Atoi(p)
					parts = append(parts, uint32(n))
				}
			}
			mp.assign = append(mp.assign, parts)
			mp.gens = append(mp.gens, gen)
		case fields[0] == "deliver" && len(fields) == 6:
			p, _ := strconv.Atoi(fields[1])
			off, _ := strconv.ParseUint(fields[2], 10, 64)
			retries, _ := strconv.Atoi(fields[3])
			key, seq, err := parseKeyed(fields[4])
			if err != nil {
				key = "?" + fields[4]
			}
			r := received{member: "process", partition: uint32(p), offset: off, retries: uint32(retries), key: key, seq: seq}
			if fields[5] != "1" {
				r.ackErr = errHeld
			}
			mp.got = append(mp.got, r)
		}
		mp.mu.Unlock()
	}
}

// errHeld marks a delivery held unsettled (by a member process, or a
// manual member until settleHeld).
var errHeld = fmt.Errorf("held by the member process")

func (mp *memberProcess) state() (member string, assigned []uint32, got []received) {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	if len(mp.assign) > 0 {
		assigned = slices.Clone(mp.assign[len(mp.assign)-1])
	}
	return mp.member, assigned, slices.Clone(mp.got)
}

func (mp *memberProcess) log() string {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	return mp.stderr.String()
}

// kill sends SIGKILL: the process's sockets close without a word (TCP) or
// go silent (QUIC).
func (mp *memberProcess) kill() {
	if mp.cmd.Process == nil || mp.cmd.ProcessState != nil {
		return
	}
	_ = mp.cmd.Process.Kill()
	_ = mp.cmd.Wait()
}

// --- raw frames over either transport ---

// rawWire is a hand-driven connection over TCP or QUIC; a reader goroutine
// decodes frames into a channel.
type rawWire struct {
	t      *testing.T
	conn   transport.Conn
	frames chan rawFrame
	nextID uint64
}

type rawFrame struct {
	h       wire.Header
	payload []byte
	err     error
}

func rawWireDial(t *testing.T, s *server, kind string) *rawWire {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var conn transport.Conn
	var err error
	if kind == client.TransportQUIC {
		var conf *tls.Config
		if conf, err = certs.ClientTLSConfigFor(s.addr(), certs.TrustOptions{}); err == nil {
			conn, err = transport.DialQUIC(ctx, s.addr(), conf)
		}
	} else {
		conn, err = transport.DialTCP(ctx, s.addr(), nil)
	}
	if err != nil {
		t.Fatalf("raw dial over %s: %v", kind, err)
	}
	rw := &rawWire{t: t, conn: conn, frames: make(chan rawFrame, 256), nextID: 10}
	t.Cleanup(func() { conn.Close() })
	go func() {
		r := bufio.NewReader(conn)
		for {
			h, payload, err := wire.ReadFrame(r, wire.PayloadSizeBytesMaxDefault, nil)
			rw.frames <- rawFrame{h: h, payload: slices.Clone(payload), err: err}
			if err != nil {
				close(rw.frames)
				return
			}
		}
	}()
	rw.request(wire.OpHello, &wire.Hello{ClientName: "raw-cohort", ProtocolVersion: 1}, wire.OpHelloOk)
	rw.request(wire.OpAuth, &wire.Auth{Username: "fibril", Password: "fibril"}, wire.OpAuthOk)
	return rw
}

// request sends body and returns the reply's opcode and payload, checking
// the opcode is want; pushes in between (PING, DELIVER,
// ASSIGNMENT_CHANGED) are skipped.
func (rw *rawWire) request(op wire.Opcode, body wire.Body, want wire.Opcode) []byte {
	rw.t.Helper()
	rw.nextID++
	id := rw.nextID
	if _, err := rw.conn.Write(wire.AppendBodyFrame(nil, op, id, body)); err != nil {
		rw.t.Fatalf("raw write %v: %v", op, err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-rw.frames:
			if !ok || f.err != nil {
				rw.t.Fatalf("raw %v: connection ended: %v", op, f.err)
			}
			if f.h.RequestID != id || f.h.Opcode == wire.OpPing || f.h.Opcode == wire.OpDeliver || f.h.Opcode == wire.OpAssignmentChanged {
				continue
			}
			if f.h.Opcode != want {
				msg := ""
				if e, err := wire.DecodeErrorBody(f.payload); err == nil {
					msg = fmt.Sprintf(" (code %d: %s)", e.Code, e.Message)
				}
				rw.t.Fatalf("raw %v: reply %v%s, want %v", op, f.h.Opcode, msg, want)
			}
			return f.payload
		case <-deadline:
			rw.t.Fatalf("raw %v: no reply within 10 s", op)
		}
	}
}

func (rw *rawWire) subscribeError(sub wire.Subscribe) wire.ErrorBody {
	rw.t.Helper()
	e, err := wire.DecodeErrorBody(rw.request(wire.OpSubscribe, sub, wire.OpSubscribeErr))
	if err != nil {
		rw.t.Fatal(err)
	}
	return e
}

func (rw *rawWire) subscribeOk(sub wire.Subscribe) wire.SubscribeOk {
	rw.t.Helper()
	ok, err := wire.DecodeSubscribeOk(rw.request(wire.OpSubscribe, sub, wire.OpSubscribeOk))
	if err != nil {
		rw.t.Fatal(err)
	}
	return ok
}

// --- a UDP proxy that can blackhole QUIC ---

// udpProxy forwards loopback UDP datagrams to a broker, one upstream socket
// per client address. cut blackholes every flow it carries, both ways, for
// good, as a dead network path would (a QUIC peer learns nothing and times
// out); datagrams from new client addresses (a new dial) pass.
type udpProxy struct {
	pc     net.PacketConn
	target *net.UDPAddr
	mu     sync.Mutex
	flows  map[string]*udpFlow
	closed bool
}

type udpFlow struct {
	client net.Addr
	up     *net.UDPConn
	dead   bool // guarded by udpProxy.mu
}

func newUDPProxy(t *testing.T, target string) *udpProxy {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	p := &udpProxy{pc: pc, target: addr, flows: make(map[string]*udpFlow)}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *udpProxy) addr() string { return p.pc.LocalAddr().String() }

func (p *udpProxy) serve() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		f := p.flows[from.String()]
		if f == nil && !p.closed {
			up, err := net.DialUDP("udp", nil, p.target)
			if err == nil {
				f = &udpFlow{client: from, up: up}
				p.flows[from.String()] = f
				go p.back(f)
			}
		}
		alive := f != nil && !f.dead
		p.mu.Unlock()
		if alive {
			_, _ = f.up.Write(buf[:n])
		}
	}
}

// back forwards the broker's datagrams of one flow to its client.
func (p *udpProxy) back(f *udpFlow) {
	buf := make([]byte, 64<<10)
	for {
		n, err := f.up.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		dead := f.dead
		p.mu.Unlock()
		if !dead {
			_, _ = p.pc.WriteTo(buf[:n], f.client)
		}
	}
}

func (p *udpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.flows {
		f.dead = true // kept in the map: the old client socket's datagrams stay dropped
	}
}

func (p *udpProxy) close() {
	p.mu.Lock()
	p.closed = true
	for _, f := range p.flows {
		f.dead = true
		f.up.Close()
	}
	p.mu.Unlock()
	p.pc.Close()
}

// brokerCA is the client TLS trust for a broker reached through a proxy
// (the local trust file is per port: the proxy's has none).
func brokerCA(s *server) *client.TLSOptions {
	return &client.TLSOptions{CAFile: filepath.Join(s.dataDir, "tls", "ca.pem")}
}

// startMutantServer runs the broker built with -tags fibril_mutants, with
// the deliberately broken variant name on (package mutant).
func startMutantServer(t *testing.T, name string, extra ...string) *server {
	t.Helper()
	s := &server{t: t, dataDir: t.TempDir(), port: freePort(t), args: extra, bin: mutantBinary(t), env: []string{"FIBRIL_MUTANT=" + name}}
	s.start()
	t.Cleanup(func() { s.kill() })
	return s
}
