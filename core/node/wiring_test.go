package node

import (
	"errors"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// miniDriver wires one Node and its Hosts together as a driver would, with
// storage that makes everything durable at once and envelopes delivered in
// order: enough to follow a dead-letter copy from its source, through the
// Node, into its target and back.
type miniDriver struct {
	t        *testing.T
	cfg      Config
	now      int64
	node     *Node
	hosts    map[core.QueueID]*Host
	queue    []Envelope
	failLoad int // LoadRequests still to fail
	settled  map[core.QueueID][]core.Settlement
	// toSession, when set, sees each envelope to a session (else dropped).
	toSession func(Envelope)
	// toAdmin, when set, sees each envelope to an operator (else dropped).
	toAdmin func(Envelope)
}

func newMiniDriver(t *testing.T) *miniDriver {
	cfg := testHostConfig()
	n, err := NewNode(cfg, nil, nil, entropyOf(3))
	if err != nil {
		t.Fatal(err)
	}
	d := &miniDriver{t: t, cfg: cfg, now: 1_000_000, node: n, hosts: map[core.QueueID]*Host{}, settled: map[core.QueueID][]core.Settlement{}}
	d.stepNode(&Tick{NowMs: d.now})
	return d
}

func (d *miniDriver) stepNode(in Input) {
	d.t.Helper()
	rd := d.node.Step(in)
	if err := d.node.CheckInvariants(); err != nil {
		d.t.Fatal(err)
	}
	upTo := uint64(0)
	if len(rd.Persist) > 0 {
		upTo = rd.Persist[len(rd.Persist)-1].Index
	}
	d.queue = append(d.queue, rd.Out...)
	loads := append([]LoadRequest(nil), rd.Load...)
	if upTo > 0 {
		d.stepNode(&Persisted{NowMs: d.now, UpToIndex: upTo})
	}
	for _, req := range loads {
		d.load(req)
	}
}

func (d *miniDriver) load(req LoadRequest) {
	d.t.Helper()
	if d.failLoad > 0 {
		d.failLoad--
		d.stepNode(&LoadDone{NowMs: d.now, Queue: req.Queue, Err: errors.New("disk full")})
		return
	}
	p, err := core.NewPartition(req.Config)
	if err != nil {
		d.t.Fatal(err)
	}
	d.hosts[req.Queue] = NewHost(d.cfg, p, req)
	d.stepHost(req.Queue, &Tick{NowMs: d.now})
	d.stepNode(&LoadDone{NowMs: d.now, Queue: req.Queue})
}

func (d *miniDriver) stepHost(q core.QueueID, in Input) {
	d.t.Helper()
	h := d.hosts[q]
	rd := h.Step(in)
	if err := h.CheckInvariants(); err != nil {
		d.t.Fatal(err)
	}
	d.queue = append(d.queue, rd.Out...)
	d.settled[q] = append(d.settled[q], rd.Settled...)
	if n := len(rd.PersistEntries); n > 0 {
		d.stepHost(q, &Persisted{NowMs: d.now, UpToIndex: rd.PersistEntries[n-1].Index})
	}
}

// run delivers envelopes until none is left; sessions' are dropped.
func (d *miniDriver) run() {
	d.t.Helper()
	for len(d.queue) > 0 {
		env := d.queue[0]
		d.queue = d.queue[1:]
		switch env.To.Kind {
		case AddrNode:
			d.stepNode(&Deliver{NowMs: d.now, Envelope: env})
		case AddrPartition:
			if d.hosts[env.To.Queue] == nil {
				d.bounce(env)
				continue
			}
			d.stepHost(env.To.Queue, &Deliver{NowMs: d.now, Envelope: env})
		case AddrSession:
			if d.toSession != nil {
				d.toSession(env)
			}
		case AddrAdmin:
			if d.toAdmin != nil {
				d.toAdmin(env)
			}
		}
	}
}

func (d *miniDriver) bounce(env Envelope) {
	if env.From.Kind == AddrNode {
		d.stepNode(&Bounced{NowMs: d.now, Envelope: env})
	} else {
		d.stepHost(env.From.Queue, &Bounced{NowMs: d.now, Envelope: env})
	}
}

func (d *miniDriver) tick(ms int64) {
	d.now += ms
	for q := range d.hosts {
		d.stepHost(q, &Tick{NowMs: d.now})
	}
	d.stepNode(&Tick{NowMs: d.now})
	d.run()
}

func TestDeadLetterTravelsFromSourceToTargetThroughTheNode(t *testing.T) {
	d := newMiniDriver(t)
	src := qid("jobs", 0)
	// The session side: open jobs with a dead-letter policy, then fail a
	// message (a Request from session 1; its answers are dropped here).
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: SessionAddr(1), To: NodeAddr(),
		Msg: &DeclareQueue{Token: 1, Topic: "jobs", DLQ: &core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "dlq"}}, MaxRetries: u32(0)}}})
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: SessionAddr(1), To: NodeAddr(), Msg: &Open{Token: 2, Topic: "jobs"}}})
	d.run()
	if d.hosts[src] == nil {
		t.Fatal("jobs/0 not loaded")
	}
	request := func(in core.Input) {
		d.stepHost(src, &Deliver{NowMs: d.now, Envelope: Envelope{From: SessionAddr(1), To: PartitionAddr(src), Msg: &Request{Input: in}}})
	}
	request(&core.Subscribe{SubID: 7, Prefetch: 1})
	request(&core.Publish{Body: &core.Body{Payload: []byte("poison")}})
	var tag uint64
	for _, env := range d.queue {
		if b, ok := env.Msg.(*Deliveries); ok {
			tag = b.Items[0].Tag
		}
	}
	d.queue = nil
	d.failLoad = 2 // the target fails to load twice: the copy is retried
	request(&core.Nack{SubID: 7, Tags: []uint64{tag}})
	d.run()
	for i := 0; i < 10 && len(d.settled[src]) == 0; i++ {
		if v, _ := d.hosts[src].Partition().Message(0); v.State != core.MessagePendingDLQ {
			t.Fatalf("source left pending before its copy was stored: %v", v.State)
		}
		d.tick(d.cfg.DeadLetterRetryMaxMs)
	}
	if d.failLoad != 0 {
		t.Fatalf("%d load failures never happened", d.failLoad)
	}
	if s := d.settled[src]; len(s) != 1 || s[0].Kind != core.SettledDeadLettered || s[0].Reason != core.ReasonTerminalNack {
		t.Fatalf("source settlements %+v", s)
	}
	target := d.hosts[qid("dlq", 0)]
	if target == nil {
		t.Fatal("the implicit target was never loaded")
	}
	v, ok := target.Partition().Message(0)
	if !ok || string(v.Body.Payload) != "poison" {
		t.Fatalf("target holds %+v", v)
	}
	if reason, _ := headerValueOf(v.Body, core.HeaderDLQReason); reason != "terminal_nack" {
		t.Fatalf("copy headers %+v", v.Body.Headers)
	}
	if d.node.state.queues[queueKey{Topic: "dlq"}] == nil {
		t.Fatal("the target queue is not in the catalogue")
	}
}

func headerValueOf(b *core.Body, key string) (string, bool) {
	for _, h := range b.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return "", false
}

// The moment a session may push DECLARE_QUEUE_OK, every loaded partition of
// the queue holds the declared settings: a publish the client sends next
// can reach a partition before anything else the Node sent it (envelopes of
// different senders are not ordered), so it must find them in force
// (review finding 7).
func TestDeclaredLeavesOnlyOnceLoadedPartitionsHoldTheSettings(t *testing.T) {
	d := newMiniDriver(t)
	session := SessionAddr(1)
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: session, To: NodeAddr(), Msg: &DeclareQueue{Token: 1, Topic: "jobs", PartitionCount: 2}}})
	for p := uint32(0); p < 2; p++ {
		d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: session, To: NodeAddr(), Msg: &Open{Token: 2, Topic: "jobs", Partition: p}}})
	}
	d.run()
	var answered []uint64
	d.toSession = func(env Envelope) {
		decl, ok := env.Msg.(*Declared)
		if !ok {
			return
		}
		answered = append(answered, decl.Token)
		for p := uint32(0); p < 2; p++ {
			if got := d.hosts[qid("jobs", p)].Partition().Settings().MaxRetries; got != 7 {
				t.Fatalf("Declared %d left while jobs/%d has max retries %d, not the declared 7", decl.Token, p, got)
			}
		}
	}
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: session, To: NodeAddr(), Msg: &DeclareQueue{Token: 3, Topic: "jobs", MaxRetries: u32(7)}}})
	// A repeat while the first is still on its way waits for it too.
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: session, To: NodeAddr(), Msg: &DeclareQueue{Token: 4, Topic: "jobs", MaxRetries: u32(7)}}})
	d.run()
	if len(answered) != 2 || answered[0] != 3 || answered[1] != 4 {
		t.Fatalf("declares answered %v, want [3 4]", answered)
	}
}
