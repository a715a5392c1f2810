package broker

// The admin surface's view of connections and sessions (issue 12; the
// admin package's connections, subscriptions and force-close endpoints).
// Invariants:
//   - listings are observations: what the driver saw of a connection
//     (its transport, peer, HELLO's client name) and what each session
//     answers to a SessionInfoQuery; nothing here decides anything;
//   - a force-close is the Session's decision (node.CloseSession through
//     Call): the driver only finds which session a connection is bound to;
//   - every listing is bounded (listConnectionsMax) and every Call has the
//     caller's context, so a busy session slows a listing, never hangs it.

import (
	"context"
	"errors"
	"io"
	"sort"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/transport/wire"
)

// listConnectionsMax bounds the sessions and connections one listing asks.
const listConnectionsMax = 10_000

// clientFieldBytesMax bounds a client's name or version as kept for a
// listing (the wire allows longer strings; a listing need not).
const clientFieldBytesMax = 256

// connSeen is what a listing shows of one connection.
type connSeen struct {
	openedMs  int64
	transport string // tcp, tls or quic
	remote    string
	hello     atomic.Pointer[helloSeen]
}

type helloSeen struct{ name, version string }

// observeOpen records the transport facts at accept.
func (s *connSeen) observeOpen(sock Conn) {
	s.openedMs = time.Now().UnixMilli()
	s.transport = "tcp"
	if k, ok := sock.(interface{ Kind() string }); ok {
		s.transport = k.Kind()
	}
	if a := sock.RemoteAddr(); a != nil {
		s.remote = a.String()
	}
}

// observeHello keeps the HELLO's informational client name and version. A
// HELLO that does not decode is the Node's to refuse; nothing is kept.
func (s *connSeen) observeHello(payload []byte) {
	h, err := wire.DecodeHello(payload)
	if err != nil {
		return
	}
	s.hello.Store(&helloSeen{name: clip(h.ClientName), version: clip(h.ClientVersion)})
}

func clip(v string) string {
	if len(v) > clientFieldBytesMax {
		return v[:clientFieldBytesMax]
	}
	return v
}

// countingReader counts the bytes read from a socket (one atomic add per
// Read of the 64 KiB buffer, not per frame).
type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// ConnectionInfo is one row of GET /admin/api/connections: a connection
// the broker holds (ID set), or a dormant session without one (ID 0).
type ConnectionInfo struct {
	ID            uint64 `json:"id"`
	Session       uint64 `json:"session"`
	ClientName    string `json:"client_name"`
	ClientVersion string `json:"client_version"`
	Transport     string `json:"transport"` // tcp or quic
	TLS           bool   `json:"tls"`
	Remote        string `json:"remote"`
	SinceMs       int64  `json:"since_ms"` // when it was accepted, Unix ms
	Dormant       bool   `json:"dormant"`
	Authenticated bool   `json:"authenticated"`
	Subscriptions int    `json:"subscriptions"`
}

// SubscriptionInfo is one row of GET /admin/api/subscriptions.
type SubscriptionInfo struct {
	Connection uint64 `json:"connection"` // 0: the session is dormant
	Session    uint64 `json:"session"`
	SubID      uint64 `json:"sub_id"`
	Topic      string `json:"topic"`
	Group      string `json:"group"`
	Partition  uint32 `json:"partition"`
	Prefetch   uint32 `json:"prefetch"`
	// Held counts deliveries the session holds and has not sent (dormant,
	// gate closed); the partition's leases are not counted per subscription.
	Held    int    `json:"held"`
	AutoAck bool   `json:"auto_ack"`
	Kind    string `json:"kind"` // queue, stream or cohort
}

// sessionRow is one session's answer with what the driver saw of it.
type sessionRow struct {
	id   node.SessionID
	info *node.SessionInfo
	seen *connSeen
}

// sessionRows asks every session (up to listConnectionsMax) for its info,
// in session id order.
func (b *Broker) sessionRows(ctx context.Context) ([]sessionRow, error) {
	b.sessMu.RLock()
	actors := make([]*actor, 0, min(len(b.sessions), listConnectionsMax))
	for _, a := range b.sessions {
		if len(actors) >= listConnectionsMax {
			break
		}
		actors = append(actors, a)
	}
	b.sessMu.RUnlock()
	sort.Slice(actors, func(i, j int) bool { return actors[i].addr.Session < actors[j].addr.Session })
	rows := make([]sessionRow, 0, len(actors))
	for _, a := range actors {
		msg, err := b.Call(ctx, a.addr, &node.SessionInfoQuery{})
		if errors.Is(err, ErrNoSuchMachine) {
			continue // ended meanwhile
		}
		if err != nil {
			return nil, err
		}
		info, ok := msg.(*node.SessionInfo)
		assertTrue(ok, "a session answers SessionInfoQuery with SessionInfo")
		if info.Ended {
			continue
		}
		rows = append(rows, sessionRow{id: a.addr.Session, info: info, seen: a.seen.Load()})
	}
	return rows, nil
}

func (s *connSeen) fill(ci *ConnectionInfo) {
	ci.Transport, ci.TLS, ci.Remote, ci.SinceMs = s.transport, s.transport != "tcp", s.remote, s.openedMs
	if ci.Transport == "tls" {
		ci.Transport = "tcp"
	}
	if h := s.hello.Load(); h != nil {
		ci.ClientName, ci.ClientVersion = h.name, h.version
	}
}

// Connections lists open connections (bound or not) and dormant sessions.
func (b *Broker) Connections(ctx context.Context) ([]ConnectionInfo, error) {
	rows, err := b.sessionRows(ctx)
	if err != nil {
		return nil, err
	}
	bySession := make(map[node.SessionID]*node.SessionInfo, len(rows))
	for _, r := range rows {
		bySession[r.id] = r.info
	}
	b.connMu.RLock()
	conns := make([]*conn, 0, min(len(b.conns), listConnectionsMax))
	for _, c := range b.conns {
		if len(conns) >= listConnectionsMax {
			break
		}
		conns = append(conns, c)
	}
	b.connMu.RUnlock()
	sort.Slice(conns, func(i, j int) bool { return conns[i].id < conns[j].id })
	out := make([]ConnectionInfo, 0, len(conns)+len(rows))
	for _, c := range conns {
		ci := ConnectionInfo{ID: uint64(c.id)}
		c.seen.fill(&ci)
		if a := c.boundTo(); a != nil {
			ci.Session = uint64(a.addr.Session)
			if info := bySession[a.addr.Session]; info != nil && info.Conn == c.id {
				ci.Subscriptions, ci.Authenticated = info.SubsTotal, info.Authed
			}
		}
		out = append(out, ci)
	}
	for _, r := range rows {
		if !r.info.Dormant {
			continue
		}
		ci := ConnectionInfo{Session: uint64(r.id), Dormant: true, Subscriptions: r.info.SubsTotal, Authenticated: r.info.Authed}
		if r.seen != nil {
			r.seen.fill(&ci)
		}
		out = append(out, ci)
	}
	return out, nil
}

// Subscriptions lists every session's subscriptions.
func (b *Broker) Subscriptions(ctx context.Context) ([]SubscriptionInfo, error) {
	rows, err := b.sessionRows(ctx)
	if err != nil {
		return nil, err
	}
	var out []SubscriptionInfo
	for _, r := range rows {
		for _, s := range r.info.Subs {
			out = append(out, SubscriptionInfo{Connection: uint64(r.info.Conn), Session: uint64(r.id), SubID: s.SubID,
				Topic: s.Topic, Group: s.Group, Partition: s.Partition, Prefetch: s.Prefetch, Held: s.Held,
				AutoAck: s.AutoAck, Kind: s.Kind})
		}
	}
	return out, nil
}

// ErrNoSuchConnection answers a close of a connection or session the
// broker does not hold.
var ErrNoSuchConnection = errors.New("broker: no such connection or session")

// ErrConnectionNotBound answers a close of a connection still in its
// handshake: no session decides for it yet.
var ErrConnectionNotBound = errors.New("broker: the connection has no session yet")

// CloseConnection force-closes the session bound to connection connID, or
// session sessionID when connID is 0 (a dormant session), through the
// Session machine (node.CloseSession).
func (b *Broker) CloseConnection(ctx context.Context, connID, sessionID uint64, message string) (*node.SessionClosed, error) {
	sid := node.SessionID(sessionID)
	if connID != 0 {
		c := b.connByID(node.ConnID(connID))
		if c == nil {
			return nil, ErrNoSuchConnection
		}
		a := c.boundTo()
		if a == nil {
			return nil, ErrConnectionNotBound
		}
		if sid != 0 && sid != a.addr.Session {
			return nil, ErrNoSuchConnection
		}
		sid = a.addr.Session
	}
	if sid == 0 || b.session(sid) == nil {
		return nil, ErrNoSuchConnection
	}
	msg, err := b.Call(ctx, node.SessionAddr(sid), &node.CloseSession{Message: message})
	if errors.Is(err, ErrNoSuchMachine) {
		return nil, ErrNoSuchConnection
	}
	if err != nil {
		return nil, err
	}
	closed, ok := msg.(*node.SessionClosed)
	assertTrue(ok, "a session answers CloseSession with SessionClosed")
	if closed.AlreadyEnded {
		return nil, ErrNoSuchConnection
	}
	return closed, nil
}
