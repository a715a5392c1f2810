package node

import (
	"fmt"
	"testing"

	"github.com/fibril-go/fibril/core"
	"pgregory.net/rapid"
)

// A property test of runtime settings and the global dead-letter target:
// operators change them (with current, stale and invalid versions and
// values) while partitions load, records become durable or not, snapshots
// are taken and the Node restarts from its log or its snapshot with changed
// seeds. Against a model of the recorded versions it checks that
//   - versions only grow, and an answered change is never lost by a restart;
//   - a stale, invalid or empty change is refused, an acceptable one
//     accepted with the next version;
//   - a restart holds the settings of the version it recovered, whatever the
//     seeds of that start;
//   - once everything settled, the live copies (the Node's, every loaded
//     partition's lease, expiry batch and global target) equal the latest
//     durable version.

// rtDriver is the Node and its Hosts, with a log whose durability the test
// decides, and a snapshot store.
type rtDriver struct {
	t        *rapid.T
	cfg      Config
	now      int64
	n        *Node
	hosts    map[core.QueueID]*Host
	queue    []Envelope
	log      []Record
	durable  uint64
	snapshot []byte
	snapAt   uint64
	pending  *SnapshotRequest // asked for, written once durable
	loads    []LoadRequest    // asked for, not yet done (the test decides when)
	answers  map[uint64]Message
	// onAnswer, when set, sees each operator answer as it arrives.
	onAnswer func(env Envelope)
	boots    byte
}

func newRTDriver(t *rapid.T) *rtDriver {
	cfg := testHostConfig()
	cfg.NodeSnapshotRecordsMin = 3
	d := &rtDriver{t: t, cfg: cfg, now: 1_000_000, hosts: map[core.QueueID]*Host{}, answers: map[uint64]Message{}}
	d.boot(nil, nil)
	return d
}

func (d *rtDriver) boot(snapshot []byte, records []Record) {
	d.boots++
	n, err := NewNode(d.cfg, snapshot, records, entropyOf(d.boots))
	if err != nil {
		d.t.Fatalf("boot %d: %v", d.boots, err)
	}
	d.n = n
	d.stepNode(&Tick{NowMs: d.now})
}

func (d *rtDriver) stepNode(in Input) {
	rd := d.n.Step(in)
	if err := d.n.CheckInvariants(); err != nil {
		d.t.Fatalf("after %T: %v", in, err)
	}
	for _, r := range rd.Persist {
		d.log = append(d.log, Record{Index: r.Index, Data: append([]byte(nil), r.Data...)})
	}
	if rd.Snapshot != nil {
		s := *rd.Snapshot
		s.Data = append([]byte(nil), s.Data...)
		d.pending = &s
	}
	d.queue = append(d.queue, rd.Out...)
	d.loads = append(d.loads, rd.Load...)
}

// finishLoad completes the i-th load asked for.
func (d *rtDriver) finishLoad(i int) {
	req := d.loads[i]
	d.loads = append(d.loads[:i:i], d.loads[i+1:]...)
	d.load(req)
}

func (d *rtDriver) load(req LoadRequest) {
	p, err := core.NewPartition(req.Config)
	if err != nil {
		d.t.Fatal(err)
	}
	d.hosts[req.Queue] = NewHost(d.cfg, p, req)
	d.stepHost(req.Queue, &Tick{NowMs: d.now})
	d.stepNode(&LoadDone{NowMs: d.now, Queue: req.Queue})
}

func (d *rtDriver) stepHost(q core.QueueID, in Input) {
	h := d.hosts[q]
	rd := h.Step(in)
	if err := h.CheckInvariants(); err != nil {
		d.t.Fatal(err)
	}
	d.queue = append(d.queue, rd.Out...)
	if n := len(rd.PersistEntries); n > 0 {
		d.stepHost(q, &Persisted{NowMs: d.now, UpToIndex: rd.PersistEntries[n-1].Index})
	}
}

// run delivers every envelope (sessions' are dropped, operators' kept).
func (d *rtDriver) run() {
	for len(d.queue) > 0 {
		env := d.queue[0]
		d.queue = d.queue[1:]
		switch env.To.Kind {
		case AddrNode:
			d.stepNode(&Deliver{NowMs: d.now, Envelope: env})
		case AddrPartition:
			if d.hosts[env.To.Queue] == nil {
				d.stepNode(&Bounced{NowMs: d.now, Envelope: env})
				continue
			}
			d.stepHost(env.To.Queue, &Deliver{NowMs: d.now, Envelope: env})
		case AddrAdmin:
			if d.onAnswer != nil {
				d.onAnswer(env)
			}
			if _, dup := d.answers[env.To.Request]; dup {
				d.t.Fatalf("operator request %d answered twice", env.To.Request)
			}
			d.answers[env.To.Request] = env.Msg
		}
	}
}

// persist makes every record durable and writes the snapshot asked for.
func (d *rtDriver) persist() {
	if len(d.log) == 0 || d.durable == d.log[len(d.log)-1].Index {
		return
	}
	d.durable = d.log[len(d.log)-1].Index
	d.stepNode(&Persisted{NowMs: d.now, UpToIndex: d.durable})
	if d.pending != nil && d.pending.Index <= d.durable {
		s := d.pending
		d.pending = nil
		d.snapshot, d.snapAt = s.Data, s.Index
		d.stepNode(&SnapshotDone{NowMs: d.now, Index: s.Index})
	}
}

// seedDurable says whether a runtime record is durable (else the next
// boot is a first boot).
func (d *rtDriver) seedDurable() bool {
	if d.snapshot != nil {
		return true // every snapshot is taken after the first boot's records
	}
	for _, r := range d.log {
		if r.Index > d.durable {
			break
		}
		if rec, err := decodeRecord(r.Data); err == nil && rec.kind == recordRuntime {
			return true
		}
	}
	return false
}

// restart loses what is not durable; fromLog drops the snapshot (a
// recovery from the whole log).
func (d *rtDriver) restart(fromLog bool) {
	keep := 0
	for keep < len(d.log) && d.log[keep].Index <= d.durable {
		keep++
	}
	d.log = d.log[:keep]
	d.queue, d.hosts, d.pending, d.loads = nil, map[core.QueueID]*Host{}, nil, nil
	snapshot, suffix := d.snapshot, []Record(nil)
	if fromLog {
		snapshot = nil
	}
	for _, r := range d.log {
		if snapshot == nil || r.Index > d.snapAt {
			suffix = append(suffix, r)
		}
	}
	d.boot(snapshot, suffix)
}

// rtModel is what the test knows: the recorded versions and the values of
// each, the answered versions, and the requests whose answer is due.
type rtModel struct {
	settings      []RuntimeSettings // settings[v-1] is version v
	targets       []*core.DLQTarget // targets[v-1] is version v
	answered      uint64            // highest settings version answered
	answeredDLQ   uint64
	expect        map[uint64]uint64 // request -> the version its acceptance must carry (0: refusal)
	expectStale   map[uint64]bool
	nextReq       uint64
	targetChoices []*core.DLQTarget
}

func TestRuntimeRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := newRTDriver(t)
		m := &rtModel{settings: []RuntimeSettings{RuntimeSeeds(d.cfg)}, expect: map[uint64]uint64{}, expectStale: map[uint64]bool{},
			targetChoices: []*core.DLQTarget{nil, {Topic: "dlq-a"}, {Topic: "dlq-b", Group: "g"}, {Topic: "Bad"}, {Topic: "jobs"}}}
		// When an acceptance arrives, every partition already holds that
		// version or a later one (the answer waits for them all).
		d.onAnswer = func(env Envelope) {
			st, ok := env.Msg.(*RuntimeSettingsState)
			if !ok || st.Err != nil {
				if g, ok := env.Msg.(*GlobalDLQState); ok && g.Err == nil {
					for id, h := range d.hosts {
						fine := false
						for v := g.Version; v <= uint64(len(m.targets)); v++ {
							fine = fine || sameTarget(h.Partition().GlobalDLQ(), effectiveGlobalDLQ(id, m.targets[v-1]))
						}
						if !fine {
							t.Fatalf("target version %d answered while %v holds %v", g.Version, id, h.Partition().GlobalDLQ())
						}
					}
				}
				return
			}
			for id, h := range d.hosts {
				fine := false
				for v := st.Version; v <= uint64(len(m.settings)); v++ {
					fine = fine || h.Partition().Config().LeaseMs == m.settings[v-1].LeaseMs
				}
				if !fine {
					t.Fatalf("version %d answered while %v leases for %d", st.Version, id, h.Partition().Config().LeaseMs)
				}
			}
		}
		check := func() {
			for req, msg := range d.answers {
				want, ok := m.expect[req]
				if !ok {
					t.Fatalf("an answer for request %d nobody expects", req)
				}
				delete(m.expect, req)
				switch a := msg.(type) {
				case *RuntimeSettingsState:
					checkAnswer(t, req, want, m.expectStale[req], a.Version, a.Err)
					if want != 0 {
						if a.Settings != m.settings[want-1] {
							t.Fatalf("request %d answered settings %+v, recorded %+v", req, a.Settings, m.settings[want-1])
						}
						m.answered = max(m.answered, want)
					}
				case *GlobalDLQState:
					checkAnswer(t, req, want, m.expectStale[req], a.Version, a.Err)
					if want != 0 {
						if !sameTarget(a.Target, m.targets[want-1]) {
							t.Fatalf("request %d answered target %v, recorded %v", req, a.Target, m.targets[want-1])
						}
						m.answeredDLQ = max(m.answeredDLQ, want)
					}
				}
			}
			clear(d.answers)
		}
		t.Repeat(map[string]func(*rapid.T){
			"putSettings": func(t *rapid.T) {
				m.nextReq++
				expected := uint64(len(m.settings))
				stale := rapid.IntRange(0, 4).Draw(t, "staleness") == 0
				if stale {
					expected += uint64(rapid.SampledFrom([]int{-1, 1, 5}).Draw(t, "off"))
				}
				var patch RuntimePatch
				if rapid.Bool().Draw(t, "lease") {
					patch.LeaseMs = i64(rapid.Int64Range(0, 5000).Draw(t, "leaseMs"))
				}
				if rapid.Bool().Draw(t, "batch") {
					patch.ExpiryBatchMax = intp(rapid.IntRange(1, 64).Draw(t, "batchMax"))
				}
				if rapid.Bool().Draw(t, "grace") {
					patch.ReconnectGraceMs = i64(rapid.Int64Range(0, 3000).Draw(t, "graceMs"))
				}
				if rapid.Bool().Draw(t, "partitions") {
					patch.DefaultPartitionCount = u32(uint32(rapid.IntRange(0, 3).Draw(t, "count")))
				}
				next := patch.applyTo(m.settings[len(m.settings)-1])
				accept := !stale && !patch.empty() && validateRuntime(&next, d.cfg.PartitionsPerQueueMax) == nil
				m.expect[m.nextReq], m.expectStale[m.nextReq] = 0, stale
				if accept {
					m.settings = append(m.settings, next)
					m.expect[m.nextReq] = uint64(len(m.settings))
				}
				d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: AdminAddr(m.nextReq), To: NodeAddr(),
					Msg: &PutRuntimeSettings{ExpectedVersion: expected, Patch: patch}}})
			},
			"putGlobalDLQ": func(t *rapid.T) {
				m.nextReq++
				expected := uint64(len(m.targets))
				stale := rapid.IntRange(0, 4).Draw(t, "staleness") == 0
				if stale {
					expected += 1
				}
				target := rapid.SampledFrom(m.targetChoices).Draw(t, "target")
				accept := !stale && (target == nil || target.Topic != "Bad")
				m.expect[m.nextReq], m.expectStale[m.nextReq] = 0, stale
				if accept {
					m.targets = append(m.targets, copyTarget(target))
					m.expect[m.nextReq] = uint64(len(m.targets))
				}
				d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: AdminAddr(m.nextReq), To: NodeAddr(),
					Msg: &PutGlobalDLQ{ExpectedVersion: expected, Target: copyTarget(target)}}})
			},
			"open": func(t *rapid.T) {
				topic := rapid.SampledFrom([]string{"jobs", "mail", "dlq-a"}).Draw(t, "topic")
				d.stepNode(&Deliver{NowMs: d.now, Envelope: Envelope{From: SessionAddr(1), To: NodeAddr(), Msg: &Open{Token: 1, Topic: topic}}})
			},
			"load": func(t *rapid.T) {
				if len(d.loads) == 0 {
					t.Skip("no load asked for")
				}
				d.finishLoad(rapid.IntRange(0, len(d.loads)-1).Draw(t, "which"))
			},
			"run": func(t *rapid.T) {
				d.run()
				check()
			},
			"persist": func(t *rapid.T) {
				d.persist() // envelopes wait for "run": a load may finish first
			},
			"restart": func(t *rapid.T) {
				fromLog := rapid.Bool().Draw(t, "fromLog")
				// Another seed at this start: it must not win.
				d.cfg.Partition.LeaseMs = rapid.Int64Range(1, 100_000).Draw(t, "seedLease")
				seeded := d.seedDurable()
				d.restart(fromLog)
				if !seeded {
					// The first boot's seed record was lost: this boot is the
					// first one again, and its seeds are version 1.
					m.settings = []RuntimeSettings{RuntimeSeeds(d.cfg)}
				}
				recovered, recoveredDLQ := d.n.state.runtimeVersion, d.n.state.globalDLQVersion
				if recovered < max(m.answered, 1) || recovered > uint64(len(m.settings)) {
					t.Fatalf("recovered settings version %d; answered %d, recorded %d", recovered, m.answered, len(m.settings))
				}
				if recoveredDLQ < m.answeredDLQ || recoveredDLQ > uint64(len(m.targets)) {
					t.Fatalf("recovered target version %d; answered %d, recorded %d", recoveredDLQ, m.answeredDLQ, len(m.targets))
				}
				if d.n.liveRuntime() != m.settings[recovered-1] {
					t.Fatalf("version %d recovered as %+v, recorded %+v", recovered, d.n.liveRuntime(), m.settings[recovered-1])
				}
				if recoveredDLQ > 0 && !sameTarget(d.n.rt.globalDLQ, m.targets[recoveredDLQ-1]) {
					t.Fatalf("target version %d recovered as %v", recoveredDLQ, d.n.rt.globalDLQ)
				}
				// What was recorded past the durable prefix is gone; what is
				// still waiting for an answer never gets one.
				m.settings, m.targets = m.settings[:recovered], m.targets[:recoveredDLQ]
				clear(m.expect)
			},
			"": func(t *rapid.T) {
				checkLiveCopies(t, d)
			},
		})
		for len(d.loads) > 0 || len(d.queue) > 0 || (len(d.log) > 0 && d.durable < d.log[len(d.log)-1].Index) {
			for len(d.loads) > 0 {
				d.finishLoad(0)
			}
			d.persist()
			d.run()
			check()
		}
		if len(m.expect) != 0 {
			t.Fatalf("requests never answered: %v", m.expect)
		}
		checkLiveCopies(t, d)
		if d.n.rt.settingsVersion != uint64(len(m.settings)) || d.n.rt.dlqVersion != uint64(len(m.targets)) {
			t.Fatalf("settled at versions %d/%d, recorded %d/%d", d.n.rt.settingsVersion, d.n.rt.dlqVersion, len(m.settings), len(m.targets))
		}
	})
}

// checkAnswer: an acceptance carries the version the model recorded for
// it; a refusal was expected, and a stale one says so.
func checkAnswer(t *rapid.T, req, want uint64, stale bool, version uint64, err *RuntimeRefusal) {
	switch {
	case want == 0 && err == nil:
		t.Fatalf("request %d accepted at version %d, the model refuses it", req, version)
	case want != 0 && err != nil:
		t.Fatalf("request %d refused (%+v), the model accepts it as version %d", req, err, want)
	case want != 0 && version != want:
		t.Fatalf("request %d accepted as version %d, want %d", req, version, want)
	case stale && (err == nil || err.Code != RefusedStaleVersion):
		t.Fatalf("stale request %d answered %+v", req, err)
	}
}

// checkLiveCopies: with nothing on its way every loaded partition holds the
// Node's live values, which are the recorded ones.
func checkLiveCopies(t *rapid.T, d *rtDriver) {
	if len(d.n.rt.pending) != 0 || len(d.queue) != 0 || len(d.n.rt.held) != 0 {
		return
	}
	live := d.n.liveRuntime()
	if live != *d.n.state.runtime {
		t.Fatalf("live settings %+v, recorded %+v", live, *d.n.state.runtime)
	}
	for id, h := range d.hosts {
		cfg := h.Partition().Config()
		if cfg.LeaseMs != live.LeaseMs || cfg.ExpiryBatchMax != live.ExpiryBatchMax {
			t.Fatalf("%v leases for %d (batch %d), live %d (%d)", id, cfg.LeaseMs, cfg.ExpiryBatchMax, live.LeaseMs, live.ExpiryBatchMax)
		}
		if want := effectiveGlobalDLQ(id, d.n.rt.globalDLQ); !sameTarget(h.Partition().GlobalDLQ(), want) {
			t.Fatalf("%v holds global target %v, live %v", id, h.Partition().GlobalDLQ(), fmt.Sprint(want))
		}
	}
}
