package node

import (
	"github.com/fibril-go/fibril/core"
)

// idleDriver wires a Node and its Hosts as a driver would, with storage
// that keeps every partition's entries across an unload (everything is
// durable at once), envelopes delivered in one FIFO, and the test playing
// the sessions: what the Node and Hosts send to a session is kept in its
// inbox. Enough to follow an eviction and a reload end to end.
// idleT is what the driver needs of *testing.T and *rapid.T.
type idleT interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

type idleDriver struct {
	t      idleT
	cfg    Config
	now    int64
	node   *Node
	hosts  map[core.QueueID]*Host
	logs   map[core.QueueID][]core.Entry
	queue  []Envelope
	inbox  map[SessionID][]Message
	tokens uint64
	// unloads counts Ready.Unload per partition; onUnload, when set, sees
	// each before it is carried out (the rapid model's check).
	unloads  map[core.QueueID]int
	loads    map[core.QueueID]int
	onUnload func(core.QueueID, *Host)
	// bounced keeps the test sessions' envelopes that found no Host.
	bounced []Envelope
	// holdUnloads: Ready.Unload waits in held until finishUnloads (an
	// unload still on its way when the next input comes).
	holdUnloads bool
	held        []core.QueueID
	// sparseChecks: the Node's invariants (O(catalogue)) are checked by
	// the test at its samples, not after every step.
	sparseChecks bool
}

// finishUnloads carries out the held unloads.
func (d *idleDriver) finishUnloads() {
	d.t.Helper()
	held := d.held
	d.held = nil
	for _, id := range held {
		d.unload(id)
	}
	d.run()
}

func newIdleDriver(t idleT, idle IdleCleanupConfig) *idleDriver {
	cfg := testHostConfig()
	cfg.IdleCleanup = idle
	n, err := NewNode(cfg, nil, nil, entropyOf(5))
	if err != nil {
		t.Fatal(err)
	}
	d := &idleDriver{t: t, cfg: cfg, now: 1_000_000, node: n, hosts: map[core.QueueID]*Host{},
		logs: map[core.QueueID][]core.Entry{}, inbox: map[SessionID][]Message{},
		unloads: map[core.QueueID]int{}, loads: map[core.QueueID]int{}}
	d.stepNode(&Tick{NowMs: d.now})
	return d
}

func (d *idleDriver) stepNode(in Input) {
	d.t.Helper()
	rd := d.node.Step(in)
	if !d.sparseChecks {
		if err := d.node.CheckInvariants(); err != nil {
			d.t.Fatal(err)
		}
	}
	d.queue = append(d.queue, rd.Out...)
	upTo := uint64(0)
	if len(rd.Persist) > 0 {
		upTo = rd.Persist[len(rd.Persist)-1].Index
	}
	loads := append([]LoadRequest(nil), rd.Load...)
	unloads := append([]core.QueueID(nil), rd.Unload...)
	if upTo > 0 {
		d.stepNode(&Persisted{NowMs: d.now, UpToIndex: upTo})
	}
	for _, req := range loads {
		d.load(req)
	}
	for _, id := range unloads {
		// The decision is checked when the Node makes it (cleanup may be
		// turned off while the unload is on its way).
		if d.onUnload != nil {
			d.onUnload(id, d.hosts[id])
		}
		if d.holdUnloads {
			d.held = append(d.held, id)
			continue
		}
		d.unload(id)
	}
}

func (d *idleDriver) load(req LoadRequest) {
	d.t.Helper()
	if d.hosts[req.Queue] != nil {
		d.t.Fatalf("%v loaded twice", req.Queue)
	}
	p, err := core.Recover(req.Config, nil, d.logs[req.Queue])
	if err != nil {
		d.t.Fatal(err)
	}
	d.loads[req.Queue]++
	d.hosts[req.Queue] = NewHost(d.cfg, p, req)
	d.stepHost(req.Queue, &Tick{NowMs: d.now})
	d.stepNode(&LoadDone{NowMs: d.now, Queue: req.Queue})
}

func (d *idleDriver) unload(id core.QueueID) {
	d.t.Helper()
	h := d.hosts[id]
	if h == nil || !h.Released() {
		d.t.Fatalf("unload of %v, whose Host did not agree", id)
	}
	d.unloads[id]++
	delete(d.hosts, id)
	d.stepNode(&UnloadDone{NowMs: d.now, Queue: id})
}

func (d *idleDriver) stepHost(q core.QueueID, in Input) {
	d.t.Helper()
	h := d.hosts[q]
	rd := h.Step(in)
	if err := h.CheckInvariants(); err != nil {
		d.t.Fatal(err)
	}
	d.queue = append(d.queue, rd.Out...)
	if n := len(rd.PersistEntries); n > 0 {
		d.logs[q] = append(d.logs[q], rd.PersistEntries...)
		d.stepHost(q, &Persisted{NowMs: d.now, UpToIndex: rd.PersistEntries[n-1].Index})
	}
}

// run delivers envelopes until none is left.
func (d *idleDriver) run() {
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
			d.inbox[env.To.Session] = append(d.inbox[env.To.Session], env.Msg)
		case AddrAdmin:
			if _, ok := env.Msg.(*RuntimeSettingsState); ok {
				continue // setCleanup's answer: it checks the config instead
			}
			d.inbox[0] = append(d.inbox[0], env.Msg)
		}
	}
}

func (d *idleDriver) bounce(env Envelope) {
	d.t.Helper()
	switch env.From.Kind {
	case AddrNode:
		d.stepNode(&Bounced{NowMs: d.now, Envelope: env})
	case AddrPartition:
		if d.hosts[env.From.Queue] != nil {
			d.stepHost(env.From.Queue, &Bounced{NowMs: d.now, Envelope: env})
		}
	case AddrSession:
		d.bounced = append(d.bounced, env)
	}
}

// advance moves time by ms in steps of at most the sweep interval, ticking
// every machine that asked.
func (d *idleDriver) advance(ms int64) {
	d.t.Helper()
	// Eviction timing is approximate (SPEC 9): at most 20 ticks an advance.
	step := max(d.node.cfg.IdleCleanup.SweepIntervalMs, ms/20, 1)
	for ms > 0 {
		dt := min(ms, step)
		ms -= dt
		d.now += dt
		for _, q := range sortedHostIDs(d.hosts) {
			d.stepHost(q, &Tick{NowMs: d.now})
		}
		d.stepNode(&Tick{NowMs: d.now})
		d.run()
	}
}

func sortedHostIDs(hosts map[core.QueueID]*Host) []core.QueueID {
	opens := make(map[core.QueueID]*partitionOpen, len(hosts))
	for q := range hosts {
		opens[q] = nil
	}
	return sortedOpenKeys(opens)
}

// take returns and clears what session s received.
func (d *idleDriver) take(s SessionID) []Message {
	m := d.inbox[s]
	d.inbox[s] = nil
	return m
}

// open opens q for session s and says whether the Opened came back.
func (d *idleDriver) open(s SessionID, q core.QueueID) bool {
	d.t.Helper()
	d.tokens++
	d.queue = append(d.queue, Envelope{From: SessionAddr(s), To: NodeAddr(),
		Msg: &Open{Token: d.tokens, Topic: q.Topic, Group: q.Group, Partition: q.Partition}})
	d.run()
	for _, m := range d.take(s) {
		if o, ok := m.(*Opened); ok && o.Token == d.tokens {
			if o.Err != nil {
				d.t.Fatalf("open %v: %v", q, o.Err)
			}
			return true
		}
	}
	return false
}

// request sends a session's partition input (confirmed: a Token).
func (d *idleDriver) request(s SessionID, q core.QueueID, in core.Input) {
	d.tokens++
	d.queue = append(d.queue, Envelope{From: SessionAddr(s), To: PartitionAddr(q), Msg: &Request{Token: d.tokens, Input: in}})
	d.run()
}

func (d *idleDriver) forget(s SessionID, q core.QueueID) {
	d.queue = append(d.queue, Envelope{From: SessionAddr(s), To: PartitionAddr(q), Msg: &Forget{}})
	d.run()
}

func (d *idleDriver) publish(s SessionID, q core.QueueID, payload string) {
	d.t.Helper()
	d.request(s, q, &core.Publish{Confirm: true, Body: &core.Body{Payload: []byte(payload)}})
}

// debug asks the Node for its queues debug view.
func (d *idleDriver) debug() *QueuesDebug {
	d.t.Helper()
	d.queue = append(d.queue, Envelope{From: AdminAddr(1), To: NodeAddr(), Msg: &QueuesDebugRequest{}})
	d.run()
	msgs := d.take(0)
	if len(msgs) != 1 {
		d.t.Fatalf("queues debug answered %d messages", len(msgs))
	}
	return msgs[0].(*QueuesDebug)
}

func (d *idleDriver) row(q core.QueueID) QueueDebugRow {
	d.t.Helper()
	for _, r := range d.debug().Rows {
		if r.Queue == q {
			return r
		}
	}
	d.t.Fatalf("no debug row for %v", q)
	return QueueDebugRow{}
}

// drain subscribes s to q, takes every delivery (acking each) and returns
// the payloads in delivery order, then unsubscribes.
func (d *idleDriver) drain(s SessionID, q core.QueueID, subID uint64) []string {
	d.t.Helper()
	d.request(s, q, &core.Subscribe{SubID: subID, Prefetch: 1000})
	var got []string
	for {
		var tags []uint64
		for _, m := range d.take(s) {
			if ds, ok := m.(*Deliveries); ok {
				for _, it := range ds.Items {
					got = append(got, string(it.Body.Payload))
					tags = append(tags, it.Tag)
				}
			}
		}
		if len(tags) == 0 {
			break
		}
		d.request(s, q, &core.Ack{SubID: subID, Tags: tags})
	}
	d.request(s, q, &core.Unsubscribe{SubID: subID})
	d.take(s)
	return got
}

// setCleanup changes idle_queue_cleanup as an operator does (a
// PutRuntimeSettings, recorded and made durable by this driver), so the
// Node's live copy stays its recorded one (checkRuntimeInvariants).
// publisher_idle_timeout_ms is not a runtime setting: it is set directly.
func (d *idleDriver) setCleanup(c IdleCleanupConfig) {
	d.t.Helper()
	d.node.cfg.IdleCleanup.PublisherIdleTimeoutMs = c.PublisherIdleTimeoutMs
	patch := RuntimePatch{IdleCleanupEnabled: &c.Enabled, IdleEvictAfterMs: &c.EvictAfterMs, IdleSweepIntervalMs: &c.SweepIntervalMs}
	d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: AdminAddr(1), To: NodeAddr(),
		Msg: &PutRuntimeSettings{ExpectedVersion: d.node.state.runtimeVersion, Patch: patch}}})
	d.run()
	if got := d.node.cfg.IdleCleanup; got.Enabled != c.Enabled || got.EvictAfterMs != c.EvictAfterMs || got.SweepIntervalMs != c.SweepIntervalMs {
		d.t.Fatalf("cleanup %+v after the change to %+v", got, c)
	}
}
