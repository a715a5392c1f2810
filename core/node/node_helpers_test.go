package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// nodeHarness drives one Node the way a driver would: it keeps the records
// handed to storage, reports them durable on demand, collects the effects
// of each step (copied: a Ready is reused) and checks the invariants after
// every step.
type nodeHarness struct {
	t       testing.TB
	cfg     Config
	n       *Node
	now     int64
	log     []Record
	durable uint64
	// snapshot and its index: what storage holds after a SnapshotDone.
	snapshot      []byte
	snapshotIndex uint64
	autoPersist   bool
	nextConn      ConnID
}

// effects is one step's Ready, copied.
type effects struct {
	start    []SessionInit
	bind     []Binding
	persist  []Record
	sends    []Send
	close    []ConnID
	out      []Envelope
	load     []LoadRequest
	remove   []RemoveRequest // node_queueops.go
	snapshot *SnapshotRequest
	wakeMs   int64
	stepped  bool // from at least one step (wakeMs is its answer)
}

func testNodeConfig() Config {
	cfg := DefaultConfig()
	cfg.ConnectionsMax = 8
	cfg.QueuesMax = 16
	cfg.PartitionsPerQueueMax = 8
	cfg.HandshakeTimeoutMs = 1000
	cfg.ResumeRestartTTLMs = 60_000
	return cfg
}

func entropyOf(seed byte) [32]byte {
	var e [32]byte
	for i := range e {
		e[i] = seed*31 + byte(i)*7 + 1
	}
	return e
}

func newNodeHarness(t testing.TB, cfg Config) *nodeHarness {
	t.Helper()
	n, err := NewNode(cfg, nil, nil, entropyOf(200))
	if err != nil {
		t.Fatal(err)
	}
	h := &nodeHarness{t: t, cfg: cfg, n: n, now: 1_000_000, autoPersist: true}
	h.tick(0)
	return h
}

// restart recovers a new Node from what storage holds durably (its
// snapshot, if any, and the records after it).
func (h *nodeHarness) restart(entropy byte) {
	h.t.Helper()
	h.log = h.log[:h.durable]
	var suffix []Record
	for _, r := range h.log {
		if r.Index > h.snapshotIndex {
			suffix = append(suffix, r)
		}
	}
	n, err := NewNode(h.cfg, h.snapshot, suffix, entropyOf(entropy))
	if err != nil {
		h.t.Fatalf("recover: %v", err)
	}
	h.n = n
}

func (h *nodeHarness) step(in Input) effects {
	h.t.Helper()
	e := h.stepRaw(in)
	if h.autoPersist {
		more := h.persist()
		e.merge(more)
	}
	return e
}

func (h *nodeHarness) stepRaw(in Input) effects {
	h.t.Helper()
	rd := h.n.Step(in)
	e := effects{
		start: append([]SessionInit(nil), rd.Start...), bind: append([]Binding(nil), rd.Bind...),
		persist: append([]Record(nil), rd.Persist...), sends: append([]Send(nil), rd.Sends...),
		close: append([]ConnID(nil), rd.Close...), out: append([]Envelope(nil), rd.Out...),
		load: append([]LoadRequest(nil), rd.Load...), snapshot: rd.Snapshot, wakeMs: rd.WakeMs, stepped: true,
		remove: append([]RemoveRequest(nil), rd.Remove...),
	}
	for _, r := range rd.Persist {
		if len(h.log) > 0 && h.log[len(h.log)-1].Index+1 != r.Index {
			h.t.Fatalf("record %d after %d", r.Index, h.log[len(h.log)-1].Index)
		}
		h.log = append(h.log, Record{Index: r.Index, Data: append([]byte(nil), r.Data...)})
	}
	if err := h.n.CheckInvariants(); err != nil {
		h.t.Fatalf("after %T: %v", in, err)
	}
	if e.wakeMs != 0 && e.wakeMs < h.now {
		h.t.Fatalf("wake %d in the past (now %d)", e.wakeMs, h.now)
	}
	return e
}

// persist reports every record durable, as storage would after fsync.
func (h *nodeHarness) persist() effects {
	h.t.Helper()
	var all effects
	for len(h.log) > 0 && h.durable < h.log[len(h.log)-1].Index {
		h.durable = h.log[len(h.log)-1].Index
		all.merge(h.stepRaw(&Persisted{NowMs: h.now, UpToIndex: h.durable}))
	}
	return all
}

func (e *effects) merge(o effects) {
	e.start = append(e.start, o.start...)
	e.bind = append(e.bind, o.bind...)
	e.persist = append(e.persist, o.persist...)
	e.sends = append(e.sends, o.sends...)
	e.close = append(e.close, o.close...)
	e.out = append(e.out, o.out...)
	e.load = append(e.load, o.load...)
	e.remove = append(e.remove, o.remove...)
	if o.snapshot != nil {
		e.snapshot = o.snapshot
	}
	if o.stepped {
		e.wakeMs, e.stepped = o.wakeMs, true
	}
}

func (h *nodeHarness) tick(ms int64) effects {
	h.t.Helper()
	h.now += ms
	return h.step(&Tick{NowMs: h.now})
}

func (h *nodeHarness) open() ConnID {
	h.t.Helper()
	h.nextConn++
	id := h.nextConn
	e := h.step(&ConnOpened{NowMs: h.now, Conn: id, Entropy: entropyOf(byte(id))})
	if len(e.close) != 0 {
		h.t.Fatalf("connection %d refused: %v", id, decodeSends(h.t, e.sends))
	}
	return id
}

func helloFrame(now int64, id ConnID, requestID uint64, resume *wire.ResumeIdentity) *Frame {
	hello := wire.Hello{ClientName: "test", ClientVersion: "1", ProtocolVersion: 1}
	if resume != nil {
		hello.Resume = wire.Some(*resume)
	}
	payload := hello.AppendTo(nil)
	return &Frame{NowMs: now, Conn: id, Payload: payload,
		Header: wire.Header{PayloadSizeBytes: uint32(len(payload)), Version: 1, Opcode: wire.OpHello, RequestID: requestID}}
}

// hello opens a connection and sends HELLO; it returns the conn and the
// Attach the Node sent (with the session it went to).
func (h *nodeHarness) hello(resume *wire.ResumeIdentity) (ConnID, SessionID, *Attach, effects) {
	h.t.Helper()
	id := h.open()
	e := h.step(helloFrame(h.now, id, 1, resume))
	sid, at := attachIn(h.t, e)
	return id, sid, at, e
}

func attachIn(t testing.TB, e effects) (SessionID, *Attach) {
	t.Helper()
	for _, env := range e.out {
		if at, ok := env.Msg.(*Attach); ok {
			if len(e.bind) == 0 || e.bind[len(e.bind)-1].Session != env.To.Session || e.bind[len(e.bind)-1].Conn != at.Conn {
				t.Fatalf("Attach to %v without its Bind (%+v)", env.To, e.bind)
			}
			return env.To.Session, at
		}
	}
	t.Fatalf("no Attach in %+v", e.out)
	return 0, nil
}

// sentFrame is one decoded frame the Node sent.
type sentFrame struct {
	conn      ConnID
	op        wire.Opcode
	requestID uint64
	body      wire.ErrorBody
}

func decodeSends(t testing.TB, sends []Send) []sentFrame {
	t.Helper()
	var out []sentFrame
	for _, s := range sends {
		hdr, err := wire.DecodeHeader(s.Bytes[:wire.HeaderSizeBytes])
		if err != nil {
			t.Fatal(err)
		}
		body, err := wire.DecodeErrorBody(s.Bytes[wire.HeaderSizeBytes:])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sentFrame{conn: s.Conn, op: hdr.Opcode, requestID: hdr.RequestID, body: body})
	}
	return out
}

// envelopesOf lists the messages of type T in e, with their receivers.
func envelopesOf[T Message](e effects) ([]T, []Address) {
	var msgs []T
	var to []Address
	for _, env := range e.out {
		if m, ok := env.Msg.(T); ok {
			msgs = append(msgs, m)
			to = append(to, env.To)
		}
	}
	return msgs, to
}

func (h *nodeHarness) deliver(from Address, msg Message) effects {
	h.t.Helper()
	return h.step(&Deliver{NowMs: h.now, Envelope: Envelope{From: from, To: NodeAddr(), Msg: msg}})
}

// openQueue sends an Open from session and answers its load, if any.
func (h *nodeHarness) openQueue(session SessionID, topic string, partition uint32) *Opened {
	h.t.Helper()
	e := h.deliver(SessionAddr(session), &Open{Token: 9, Topic: topic, Partition: partition})
	for _, l := range e.load {
		e.merge(h.step(&LoadDone{NowMs: h.now, Queue: l.Queue}))
	}
	opened, _ := envelopesOf[*Opened](e)
	if len(opened) != 1 {
		h.t.Fatalf("want one Opened, got %+v", e.out)
	}
	return opened[0]
}

func u32(v uint32) *uint32 { return &v }
func i64(v int64) *int64   { return &v }

func qid(topic string, partition uint32) core.QueueID {
	return core.QueueID{Topic: topic, Partition: partition}
}
