package broker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/transport/wire"
)

// waitCounters polls b.Counters until want holds (bounded; STYLE 7).
func waitCounters(t *testing.T, b *Broker, what string, want func(c Counters) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !want(b.Counters()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: counters never got there: %+v", what, b.Counters())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Counting on the publish, deliver and session paths is atomic adds only:
// no allocation (and no lock: the functions take none).
func TestMetricsCountingDoesNotAllocate(t *testing.T) {
	m := &metrics{}
	publish := node.Envelope{Msg: &node.Request{Input: &core.Publish{}}}
	deliveries := node.Envelope{Msg: &node.Deliveries{Items: make([]core.Delivery, 8)}}
	settled := []core.Settlement{{Kind: core.SettledAcked}, {Kind: core.SettledDeadLettered, Reason: core.ReasonExpired}}
	quiet := node.SessionCounted{}
	busy := node.SessionCounted{GraceEntered: 1}
	busy.HelloOks[wire.ResumeResumed] = 1
	allocs := testing.AllocsPerRun(1000, func() {
		m.countEnvelope(&publish)
		m.countEnvelope(&deliveries)
		m.settled(settled)
		m.countSession(&quiet)
		m.countSession(&busy)
	})
	if allocs != 0 {
		t.Fatalf("counting allocated %v times per run", allocs)
	}
	if m.published.Load() == 0 || m.delivered.Load() == 0 || m.acked.Load() == 0 || m.resumed.Load() == 0 {
		t.Fatal("the counting under test counted nothing")
	}
}

// The session counters come from the machines' own Ready.Counted: a fresh
// HELLO, a transport loss within the grace, a resume, a refused resume
// identity and a grace that runs out each move exactly their counter.
func TestMetricsCountersFollowSessions(t *testing.T) {
	b, addr := testBroker(t, "", func(c *Config) { c.ReconnectGraceMs = 300; c.Partition.LeaseMs = 60_000 })
	if err := b.Ready(); err != nil {
		t.Fatalf("a serving broker is not ready: %v", err)
	}
	p := connect(t, addr)
	p.publish("mc", "m", true)
	p.subscribe("mc", 0, 1, false)
	p.deliver()
	c := b.Counters()
	if c.ResumeNew != 1 || c.Connections != 1 || c.ConnectionsOpen != 1 || c.Published != 1 || c.Delivered != 1 {
		t.Fatalf("after one session that published and got one delivery: %+v", c)
	}
	id := wire.ResumeIdentity{OwnerID: p.hello.OwnerID, ClientID: p.hello.ClientID, ResumeToken: p.hello.ResumeToken}
	p.c.Close()
	waitCounters(t, b, "transport lost", func(c Counters) bool { return c.GraceEntered == 1 && c.ConnectionsOpen == 0 })

	q := dialPeer(t, addr)
	q.handshake(&id)
	if q.hello.ResumeOutcome != wire.ResumeResumed {
		t.Fatalf("outcome %d, want resumed", q.hello.ResumeOutcome)
	}
	wrong := id
	wrong.ResumeToken[0] ^= 0xff
	r := dialPeer(t, addr)
	r.handshake(&wrong)
	if r.hello.ResumeOutcome != wire.ResumeRejected {
		t.Fatalf("outcome %d, want rejected", r.hello.ResumeOutcome)
	}
	c = b.Counters()
	if c.Resumed != 1 || c.ResumeRejected != 1 || c.ResumeNew != 1 || c.GraceExpired != 0 || c.ConnectionsOpen != 2 {
		t.Fatalf("after a resume and a refused one: %+v", c)
	}
	q.c.Close() // and nobody comes back within 300 ms
	waitCounters(t, b, "grace expired", func(c Counters) bool { return c.GraceEntered == 2 && c.GraceExpired == 1 })
	c = b.Counters()
	if c.Resumed != 1 || c.ConnectionsOpen != 1 || c.Connections != 3 {
		t.Fatalf("after the grace ran out: %+v", c)
	}

	b.Close()
	if err := b.Ready(); err == nil || !strings.Contains(err.Error(), "stopping") {
		t.Fatalf("a closed broker says ready: %v", err)
	}
}

func TestHealthReadyNeedsAListener(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Ready(); err == nil || !strings.Contains(err.Error(), "listening") {
		t.Fatalf("a broker with no listener says %v", fmt.Sprint(err))
	}
}
