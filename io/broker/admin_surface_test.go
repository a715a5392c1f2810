package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/transport/wire"
)

func waitRows(t *testing.T, what string, list func() ([]ConnectionInfo, error), want func([]ConnectionInfo) bool) []ConnectionInfo {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rows, err := list()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if want(rows) {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never got there: %+v", what, rows)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Listings show what the driver saw and what each session answers; a
// force-close ends the session at once (no dormancy despite a long grace):
// the client hears GOING_AWAY, its socket closes, and its unacked
// deliveries go to the next consumer without waiting for a lease.
func TestConnectionsListingAndForceClose(t *testing.T) {
	b, addr := testBroker(t, "", func(c *Config) { c.ReconnectGraceMs = 60_000; c.Partition.LeaseMs = 60_000 })
	ctx := context.Background()
	sub := connect(t, addr)
	subID := sub.subscribe("fc", 0, 5, false)
	pub := connect(t, addr)
	pub.publish("fc", "one", true)
	pub.publish("fc", "two", true)
	sub.deliver()
	sub.deliver()

	rows, err := b.Connections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want two connections", rows)
	}
	var subRow ConnectionInfo
	for _, r := range rows {
		if r.ClientName != "test" || r.ClientVersion != "0" || r.Transport != "tcp" || r.TLS || r.Session == 0 || r.Dormant || !r.Authenticated || r.SinceMs == 0 || r.Remote == "" {
			t.Fatalf("row %+v", r)
		}
		if r.Subscriptions == 1 {
			subRow = r
		}
	}
	if subRow.ID == 0 {
		t.Fatalf("no row with the subscription: %+v", rows)
	}
	subs, err := b.Subscriptions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 1 || subs[0].SubID != subID || subs[0].Connection != subRow.ID || subs[0].Topic != "fc" || subs[0].Prefetch != 5 || subs[0].AutoAck || subs[0].Kind != "queue" {
		t.Fatalf("subscriptions %+v", subs)
	}
	c := b.Counters()
	if c.SubscriptionsOpen != 1 || c.BytesIn == 0 || c.BytesOut == 0 {
		t.Fatalf("counters %+v", c)
	}

	if _, err := b.CloseConnection(ctx, 999, 0, "x"); !errors.Is(err, ErrNoSuchConnection) {
		t.Fatalf("close of an unknown connection: %v", err)
	}
	closed, err := b.CloseConnection(ctx, subRow.ID, 0, "closed by an operator")
	if err != nil || uint64(closed.Conn) != subRow.ID || closed.WasDormant {
		t.Fatalf("close: %+v %v", closed, err)
	}
	ga := sub.expect(wire.OpGoingAway).body.(wire.GoingAway)
	if ga.GraceMs != 0 || ga.Message != "closed by an operator" {
		t.Fatalf("GOING_AWAY %+v", ga)
	}
	if _, err := sub.tryRead(5 * time.Second); err == nil {
		t.Fatal("the connection stayed open after a force-close")
	}
	waitRows(t, "closed", func() ([]ConnectionInfo, error) { return b.Connections(ctx) },
		func(r []ConnectionInfo) bool { return len(r) == 1 && r[0].ID != subRow.ID })
	if c := b.Counters(); c.SubscriptionsOpen != 0 || c.GraceEntered != 0 {
		t.Fatalf("after the close: %+v (a force-close is no dormancy)", c)
	}
	next := connect(t, addr)
	next.subscribe("fc", 0, 5, false)
	// The lease is 60 s: only the session's end can have requeued them.
	if d := next.deliver(); string(d.Payload) != "one" {
		t.Fatalf("redelivered %q first", d.Payload)
	}
	next.deliver()
	if _, err := b.CloseConnection(ctx, 0, uint64(subRow.Session), "x"); !errors.Is(err, ErrNoSuchConnection) {
		t.Fatalf("close of an ended session: %v", err)
	}
}

// A session whose transport is lost is listed as dormant and can be closed
// by its session id, which ends its grace at once.
func TestDormantSessionListedAndClosedBySession(t *testing.T) {
	b, addr := testBroker(t, "", func(c *Config) { c.ReconnectGraceMs = 60_000 })
	ctx := context.Background()
	p := connect(t, addr)
	p.subscribe("dz", 0, 1, true)
	p.c.Close()
	rows := waitRows(t, "dormant", func() ([]ConnectionInfo, error) { return b.Connections(ctx) },
		func(r []ConnectionInfo) bool { return len(r) == 1 && r[0].Dormant })
	if rows[0].ID != 0 || rows[0].Session == 0 || rows[0].ClientName != "test" || rows[0].Subscriptions != 1 {
		t.Fatalf("dormant row %+v", rows[0])
	}
	closed, err := b.CloseConnection(ctx, 0, rows[0].Session, "x")
	if err != nil || !closed.WasDormant || closed.Conn != 0 {
		t.Fatalf("close dormant: %+v %v", closed, err)
	}
	waitRows(t, "ended", func() ([]ConnectionInfo, error) { return b.Connections(ctx) },
		func(r []ConnectionInfo) bool { return len(r) == 0 })
	if c := b.Counters(); c.SubscriptionsOpen != 0 {
		t.Fatalf("subscriptions open %d after the end", c.SubscriptionsOpen)
	}
}

// Users added, re-passworded and removed through the API take effect for
// the next AUTH at once, verified cache or not.
func TestUsersFollowTheStoreAtOnce(t *testing.T) {
	b, addr := testBroker(t, "", nil)
	if created, err := b.PutUser("alice", "one"); err != nil || !created {
		t.Fatalf("add: %v %v", created, err)
	}
	login := func(pw string, want wire.Opcode) {
		t.Helper()
		p := dialPeer(t, addr)
		p.handshake(nil)
		p.auth("alice", pw, want)
		p.c.Close()
	}
	login("one", wire.OpAuthOk)
	login("one", wire.OpAuthOk) // now answered from the verified cache
	if created, err := b.PutUser("alice", "two"); err != nil || created {
		t.Fatalf("passwd: %v %v", created, err)
	}
	login("one", wire.OpAuthErr)
	login("two", wire.OpAuthOk)
	if got := b.Users(); len(got) != 1 || got[0] != "alice" {
		t.Fatalf("users %v", got)
	}
	if err := b.DeleteUser("alice"); err != nil {
		t.Fatal(err)
	}
	login("two", wire.OpAuthErr)
	if err := b.DeleteUser("alice"); !errors.Is(err, ErrNoSuchUser) {
		t.Fatalf("second delete: %v", err)
	}
	for _, bad := range []struct{ name, pw string }{{"@node", "x"}, {"", "x"}, {"a b", "x"}, {"a:b", "x"}, {"ok", ""}} {
		if _, err := b.PutUser(bad.name, bad.pw); !errors.Is(err, ErrBadUser) {
			t.Fatalf("PutUser(%q, %q): %v", bad.name, bad.pw, err)
		}
	}
	// Durable: a reopened store has the change.
	if _, err := b.PutUser("carol", "pw"); err != nil {
		t.Fatal(err)
	}
	s, err := openUserStore(b.cfg.DataDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if known, match := s.lookup("carol", "pw"); !known || !match {
		t.Fatal("the user file lost an added user")
	}
}

// The admin surface's counting on the wire and commit paths allocates
// nothing and takes no lock.
func TestSurfaceMetricsDoNotAllocate(t *testing.T) {
	m := &metrics{}
	busy := node.SessionCounted{SubsOpened: 2, SubsClosed: 1}
	allocs := testing.AllocsPerRun(1000, func() {
		m.observeRound(17, 1_500_000)
		m.countSession(&busy)
		m.bytesIn.Add(10)
	})
	if allocs != 0 {
		t.Fatalf("surface counting allocated %v times per run", allocs)
	}
	h := (&Broker{metrics: m}).Histograms()
	if h[0].Count == 0 || h[0].Cumulative[0.001] != 0 || h[0].Cumulative[0.0025] != h[0].Count || h[1].Cumulative[32] != h[1].Count || h[1].Cumulative[16] != 0 {
		t.Fatalf("histograms %+v", h)
	}
	if m.subscriptionsOpen.Load() <= 0 {
		t.Fatal("open subscriptions not counted")
	}
}
