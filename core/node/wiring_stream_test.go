package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/transport/wire"
)

// streamWorld wires a Node, its sessions and its stream Hosts as a driver
// would (storage durable at once, envelopes in order, every byte written
// at once): a client's frames go in, the frames it would read come out.
type streamWorld struct {
	t        *testing.T
	cfg      Config
	now      int64
	node     *Node
	sessions map[SessionID]*Session
	hosts    map[core.QueueID]*StreamHost
	qhosts   map[core.QueueID]*Host // queue partitions (cohort_test.go)
	logs     map[core.QueueID]map[uint64]core.Entry
	bound    map[ConnID]SessionID
	queue    []Envelope
	frames   map[ConnID][]sessFrame
	reqID    uint64
	reads    int   // log reads served
	nodeWake int64 // the Node's WakeMs (0: none): run ticks it once idle
}

func newStreamWorld(t *testing.T) *streamWorld {
	cfg := testHostConfig()
	// Small ring, window and reads: credit and log reads both flow.
	cfg.StreamPartition.TailBytesMax = 2048
	cfg.StreamPartition.SubWindowMax = 16
	cfg.StreamPartition.ReadBatchMax = 10
	cfg.StreamPartition.SegmentRecordsMax = 50
	n, err := NewNode(cfg, nil, nil, entropyOf(5))
	if err != nil {
		t.Fatal(err)
	}
	w := &streamWorld{t: t, cfg: cfg, now: 1_000_000, node: n, sessions: map[SessionID]*Session{},
		hosts: map[core.QueueID]*StreamHost{}, qhosts: map[core.QueueID]*Host{}, logs: map[core.QueueID]map[uint64]core.Entry{},
		bound: map[ConnID]SessionID{}, frames: map[ConnID][]sessFrame{}}
	w.effects(NodeAddr(), w.node.Step(&Tick{NowMs: w.now}))
	w.run()
	return w
}

func (w *streamWorld) step(at Address, in Input) {
	w.t.Helper()
	switch at.Kind {
	case AddrNode:
		rd := w.node.Step(in)
		w.nodeWake = rd.WakeMs
		w.effects(at, rd)
		if err := w.node.CheckInvariants(); err != nil {
			w.t.Fatal(err)
		}
	case AddrSession:
		s := w.sessions[at.Session]
		w.effects(at, s.Step(in))
		if err := s.CheckInvariants(); err != nil {
			w.t.Fatal(err)
		}
	case AddrPartition:
		if qh := w.qhosts[at.Queue]; qh != nil {
			w.effects(at, qh.Step(in))
			if err := qh.CheckInvariants(); err != nil {
				w.t.Fatal(err)
			}
			return
		}
		h := w.hosts[at.Queue]
		w.effects(at, h.Step(in))
		if err := h.CheckInvariants(); err != nil {
			w.t.Fatal(err)
		}
	}
}

// effects carries out one Ready in contract order.
func (w *streamWorld) effects(at Address, rd *Ready) {
	w.t.Helper()
	for _, st := range rd.Start {
		w.sessions[st.ID] = NewSession(w.cfg, st)
	}
	for _, b := range rd.Bind {
		w.bound[b.Conn] = b.Session
	}
	persist := len(rd.Persist) > 0
	var upTo uint64
	if n := len(rd.PersistEntries); n > 0 {
		log := w.logs[at.Queue]
		for _, e := range rd.PersistEntries {
			log[e.Index] = e
		}
		upTo = rd.PersistEntries[n-1].Index
	}
	if persist {
		upTo = rd.Persist[len(rd.Persist)-1].Index
	}
	for _, snd := range rd.Sends {
		w.frames[snd.Conn] = append(w.frames[snd.Conn], sessDecodeFrames(w.t, snd.Bytes)...)
		if sid, ok := w.bound[snd.Conn]; ok && at.Kind == AddrSession {
			defer w.step(SessionAddr(sid), &Written{NowMs: w.now, Conn: snd.Conn, Bytes: len(snd.Bytes)})
		}
	}
	w.queue = append(w.queue, rd.Out...)
	loads := append([]LoadRequest(nil), rd.Load...)
	checks := append([]PasswordCheck(nil), rd.CheckPassword...)
	reads := append([]StreamRead(nil), rd.Reads...)
	snapshot := rd.Snapshot
	if upTo > 0 {
		defer w.step(at, &Persisted{NowMs: w.now, UpToIndex: upTo})
	}
	for _, l := range loads {
		w.load(l)
	}
	for _, c := range checks {
		w.step(at, &AuthChecked{NowMs: w.now, Token: c.Token, Known: true, Match: true})
	}
	for _, r := range reads {
		w.reads++
		log := w.logs[at.Queue]
		var entries []core.Entry
		for i := r.FromIndex; len(entries) < r.MaxEntries; i++ {
			e, ok := log[i]
			if !ok {
				break
			}
			entries = append(entries, e)
		}
		defer w.step(at, &StreamReadDone{NowMs: w.now, Token: r.Token, Entries: entries})
	}
	if snapshot != nil && at.Kind == AddrPartition {
		idx := snapshot.Index
		defer func() {
			for i := range w.logs[at.Queue] {
				if i <= idx {
					delete(w.logs[at.Queue], i)
				}
			}
			w.step(at, &SnapshotDone{NowMs: w.now, Index: idx})
		}()
	}
}

func (w *streamWorld) load(req LoadRequest) {
	w.t.Helper()
	if req.Kind == KindQueue {
		qp, err := core.NewPartition(req.Config)
		if err != nil {
			w.t.Fatal(err)
		}
		w.qhosts[req.Queue] = NewHost(w.cfg, qp, req)
		w.logs[req.Queue] = map[uint64]core.Entry{}
		w.step(PartitionAddr(req.Queue), &Tick{NowMs: w.now})
		w.step(NodeAddr(), &LoadDone{NowMs: w.now, Queue: req.Queue})
		return
	}
	p, err := stream.NewPartition(req.StreamConfig, req.Stream)
	if err != nil {
		w.t.Fatal(err)
	}
	h, err := NewStreamHost(w.cfg, p, req)
	if err != nil {
		w.t.Fatal(err)
	}
	w.hosts[req.Queue] = h
	w.logs[req.Queue] = map[uint64]core.Entry{}
	w.step(PartitionAddr(req.Queue), &Tick{NowMs: w.now})
	w.step(NodeAddr(), &LoadDone{NowMs: w.now, Queue: req.Queue})
}

func (w *streamWorld) run() {
	w.t.Helper()
	for {
		w.drain()
		// A Node timer due now fires once the queue is idle, as a
		// driver's timer fires after the envelopes already queued.
		if w.nodeWake == 0 || w.nodeWake > w.now {
			return
		}
		w.nodeWake = 0
		w.step(NodeAddr(), &Tick{NowMs: w.now})
	}
}

func (w *streamWorld) drain() {
	w.t.Helper()
	for len(w.queue) > 0 {
		env := w.queue[0]
		w.queue = w.queue[1:]
		switch {
		case env.To.Kind == AddrSession && w.sessions[env.To.Session] == nil,
			env.To.Kind == AddrPartition && w.hosts[env.To.Queue] == nil && w.qhosts[env.To.Queue] == nil:
			w.step(env.From, &Bounced{NowMs: w.now, Envelope: env})
		default:
			w.step(env.To, &Deliver{NowMs: w.now, Envelope: env})
		}
	}
}

// frame sends a client frame on conn (to the Node until bound).
func (w *streamWorld) frame(conn ConnID, op wire.Opcode, body wire.Body) uint64 {
	w.t.Helper()
	w.reqID++
	payload := body.AppendTo(nil)
	in := &Frame{NowMs: w.now, Conn: conn, Payload: payload,
		Header: wire.Header{PayloadSizeBytes: uint32(len(payload)), Version: 1, Opcode: op, RequestID: w.reqID}}
	if sid, ok := w.bound[conn]; ok {
		w.step(SessionAddr(sid), in)
	} else {
		w.step(NodeAddr(), in)
	}
	w.run()
	return w.reqID
}

func (w *streamWorld) connect(conn ConnID) {
	w.t.Helper()
	w.step(NodeAddr(), &ConnOpened{NowMs: w.now, Conn: conn, Loopback: true, Entropy: entropyOf(byte(conn))})
	w.frame(conn, wire.OpHello, wire.Hello{ClientName: "t", ClientVersion: "1", ProtocolVersion: 1})
	w.frame(conn, wire.OpAuth, wire.Auth{Username: "u", Password: "p"})
	w.frame(conn, wire.OpTopology, wire.Topology{})
}

// take returns and forgets the frames conn received with opcode op.
func (w *streamWorld) take(conn ConnID, op wire.Opcode) []sessFrame {
	var got, rest []sessFrame
	for _, f := range w.frames[conn] {
		if f.hdr.Opcode == op {
			got = append(got, f)
		} else {
			rest = append(rest, f)
		}
	}
	w.frames[conn] = rest
	return got
}

// TestStreamEndToEnd: a declared stream, a durable subscriber, publishes
// from another connection, DELIVERs with tag = offset in order, ACKs
// committing the cursor, backfill of a late subscriber through the log.
func TestStreamEndToEnd(t *testing.T) {
	w := newStreamWorld(t)
	w.connect(1)
	w.connect(2)
	id := w.frame(1, wire.OpDeclarePlexus, wire.DeclarePlexus{Topic: "ticks", PartitionCount: wire.Some(uint32(2)), Durability: wire.DurabilityDurable})
	if ok := w.take(1, wire.OpDeclarePlexusOk); len(ok) != 1 || ok[0].hdr.RequestID != id || ok[0].body.(wire.DeclarePlexusOk).PartitionCount != 2 {
		t.Fatalf("DECLARE_PLEXUS_OK: %+v", w.frames[1])
	}
	w.frame(1, wire.OpSubscribeStream, wire.SubscribeStream{Topic: "ticks", Partition: 1, DurableName: wire.Some("c")})
	if ok := w.take(1, wire.OpSubscribeOk); len(ok) != 1 {
		t.Fatalf("SUBSCRIBE_OK: %+v", w.frames[1])
	}
	// An undeclared stream: 404.
	w.frame(1, wire.OpSubscribeStream, wire.SubscribeStream{Topic: "nope"})
	if e := w.take(1, wire.OpSubscribeErr); len(e) != 1 || e[0].body.(wire.ErrorBody).Code != wire.CodeNotFound {
		t.Fatalf("404: %+v", w.frames[1])
	}
	const n = 600 // far beyond the window (16) and the ring (2 KiB)
	for i := 0; i < n; i++ {
		w.frame(2, wire.OpPublish, wire.Publish{Topic: "ticks", Partition: 1, RequireConfirm: true, Payload: []byte("x"),
			Headers: wire.Headers{{Key: "i", Value: "v"}}})
	}
	if ok := w.take(2, wire.OpPublishOk); len(ok) != n || ok[n-1].body.(wire.PublishOk).Offset != n-1 {
		t.Fatalf("PUBLISH_OK: %d", len(ok))
	}
	ds := w.take(1, wire.OpDeliver)
	if len(ds) != n {
		t.Fatalf("delivered %d of %d", len(ds), n)
	}
	for i, f := range ds {
		if d := f.body.(wire.Deliver); d.Offset != uint64(i) || d.DeliveryTag != uint64(i) {
			t.Fatalf("DELIVER %d: %+v", i, d)
		}
	}
	w.frame(1, wire.OpAck, wire.Ack{Topic: "ticks", Partition: 1, Tags: []uint64{n - 1}})
	if next, ok := w.hosts[qid("ticks", 1)].Partition().Cursor("c"); !ok || next != n {
		t.Fatalf("cursor %d %v", next, ok)
	}
	// A late subscriber from the earliest record reads the log back.
	w.frame(2, wire.OpSubscribeStream, wire.SubscribeStream{Topic: "ticks", Partition: 1, Start: wire.StreamStart{Kind: wire.StreamStartEarliest}})
	ds = w.take(2, wire.OpDeliver)
	if len(ds) != n {
		t.Fatalf("backfill %d of %d", len(ds), n)
	}
	for i, f := range ds {
		if d := f.body.(wire.Deliver); d.Offset != uint64(i) {
			t.Fatalf("backfill %d: %+v", i, d)
		}
	}
	if w.reads == 0 {
		t.Fatal("the backfill never read the log")
	}
	// A queue SUBSCRIBE on a stream: 400.
	w.frame(2, wire.OpSubscribe, wire.Subscribe{Topic: "ticks", Partition: 0, Prefetch: 1})
	if e := w.take(2, wire.OpSubscribeErr); len(e) != 1 || e[0].body.(wire.ErrorBody).Code != wire.CodeInvalid {
		t.Fatalf("queue subscribe on a stream: %+v", w.frames[2])
	}
}
