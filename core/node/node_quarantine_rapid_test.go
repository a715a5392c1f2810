package node

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
	"pgregory.net/rapid"
)

// TestQuarantineAgainstModel drives a Node with random Opens, load
// outcomes (served, failed, damaged with or without a cut point), operator
// repairs and restarts, under a drawn recovery.on_mismatch, against a
// plain model of each partition's load state. After every action every
// answer must be the model's (who is told what: Opened ok, 500, the
// quarantine refusal; the repair outcomes), every load asked for must be
// the model's (and truncating exactly when it says), and the parked set
// (and the last report) must be the model's.

// qState is one partition's state in the model.
type qState uint8

const (
	qUnknown qState = iota // never opened: not in the catalogue
	qIdle                  // in the catalogue, not loaded
	qLoading               // a load on its way
	qLoaded
	qParked
)

type qPart struct {
	state     qState
	truncate  bool     // the pending load cuts (ignore's retry, or a repair)
	repairing bool     // qLoading for a repair, or qParked... see below
	waiters   []uint64 // Open tokens waiting on the load
}

// quarantineMachine is a Node driven directly (every record durable at
// once) with the model beside it.
type quarantineMachine struct {
	t      *rapid.T
	cfg    Config
	n      *Node
	now    int64
	log    []Record
	model  map[string]*qPart
	token  uint64
	report *QuarantineReport // the last one the Node made
	boots  byte
}

var quarantineTopics = []string{"t0", "t1", "t2"}

func (m *quarantineMachine) boot() {
	m.boots++
	n, err := NewNode(m.cfg, nil, m.log, entropyOf(m.boots))
	if err != nil {
		m.t.Fatalf("recover: %v", err)
	}
	m.n = n
	m.report = nil
	m.step(&Tick{NowMs: m.now})
}

// step feeds in, makes every new record durable, and returns everything
// the Node sent and asked to load.
func (m *quarantineMachine) step(in Input) ([]Envelope, []LoadRequest) {
	var out []Envelope
	var loads []LoadRequest
	for in != nil {
		rd := m.n.Step(in)
		out = append(out, rd.Out...)
		loads = append(loads, rd.Load...)
		if rd.Quarantine != nil {
			m.report = rd.Quarantine
		}
		for _, r := range rd.Persist {
			m.log = append(m.log, Record{Index: r.Index, Data: append([]byte(nil), r.Data...)})
		}
		if err := m.n.CheckInvariants(); err != nil {
			m.t.Fatalf("after %T: %v", in, err)
		}
		in = nil
		if len(rd.Persist) > 0 {
			in = &Persisted{NowMs: m.now, UpToIndex: m.log[len(m.log)-1].Index}
		}
	}
	return out, loads
}

func (m *quarantineMachine) part(topic string) *qPart {
	p := m.model[topic]
	if p == nil {
		p = &qPart{}
		m.model[topic] = p
	}
	return p
}

// opened collects the Opened answers by token.
func openedByToken(out []Envelope) map[uint64]*Opened {
	got := map[uint64]*Opened{}
	for _, env := range out {
		if o, ok := env.Msg.(*Opened); ok {
			got[o.Token] = o
		}
	}
	return got
}

func (m *quarantineMachine) wantLoads(loads []LoadRequest, topic string, want int, truncate bool) {
	if len(loads) != want {
		m.t.Fatalf("%s: %d loads asked for, want %d: %+v", topic, len(loads), want, loads)
	}
	for _, l := range loads {
		if l.Queue != qid(topic, 0) || l.Truncate != truncate {
			m.t.Fatalf("%s: load %+v, want truncate=%v", topic, l, truncate)
		}
	}
}

func isQuarantineRefusal(err *core.Error, topic string) bool {
	return err != nil && strings.Contains(err.Error(), "partition "+topic+"/0 is quarantined")
}

func (m *quarantineMachine) open(topic string) {
	m.token++
	tok := m.token
	p := m.part(topic)
	out, loads := m.step(&Deliver{NowMs: m.now, Envelope: Envelope{From: SessionAddr(1), To: NodeAddr(), Msg: &Open{Token: tok, Topic: topic}}})
	got := openedByToken(out)
	switch p.state {
	case qParked:
		m.wantLoads(loads, topic, 0, false)
		if !isQuarantineRefusal(got[tok].Err, topic) {
			m.t.Fatalf("open of parked %s: %+v", topic, got[tok])
		}
	case qLoaded:
		m.wantLoads(loads, topic, 0, false)
		if o := got[tok]; o == nil || o.Err != nil {
			m.t.Fatalf("open of loaded %s: %+v", topic, o)
		}
	case qLoading:
		if p.repairing {
			m.t.Fatalf("model: a repairing partition is parked, not loading")
		}
		m.wantLoads(loads, topic, 0, false)
		if len(got) != 0 {
			m.t.Fatalf("open of loading %s answered: %+v", topic, got)
		}
		p.waiters = append(p.waiters, tok)
	default:
		m.wantLoads(loads, topic, 1, false)
		if len(got) != 0 {
			m.t.Fatalf("open of %s answered before its load: %+v", topic, got)
		}
		p.state, p.truncate, p.waiters = qLoading, false, []uint64{tok}
	}
}

// loadOutcome is how the driver answers a load.
type loadOutcome uint8

const (
	loadServed loadOutcome = iota
	loadFailed
	loadDamaged       // with a cut point
	loadDamagedNoCut  // a snapshot: nothing to cut at
	loadOutcomesCount // bound for the draw
)

func (m *quarantineMachine) answer(topic string, outcome loadOutcome) {
	p := m.part(topic)
	done := &LoadDone{NowMs: m.now, Queue: qid(topic, 0)}
	switch outcome {
	case loadFailed:
		done.Err = errors.New("disk full")
	case loadDamaged:
		done.Damage = &LoadDamage{Kind: "checksum", Reason: "checksum mismatch", Index: 3}
	case loadDamagedNoCut:
		done.Damage = &LoadDamage{Kind: "snapshot", Reason: "the snapshot does not decode"}
	case loadServed:
		if p.truncate {
			done.Cut = &LoadCut{Index: 3, DroppedRecords: 2}
		}
	}
	out, loads := m.step(done)
	got := openedByToken(out)
	var repaired []*QuarantineRepaired
	for _, env := range out {
		if r, ok := env.Msg.(*QuarantineRepaired); ok {
			repaired = append(repaired, r)
		}
	}
	if p.repairing {
		m.wantLoads(loads, topic, 0, false)
		if len(got) != 0 || len(repaired) != 1 {
			m.t.Fatalf("repair of %s answered %+v / %+v", topic, got, repaired)
		}
		p.repairing = false
		if outcome == loadServed {
			if repaired[0].Outcome != RepairDone || repaired[0].TruncatedEntries != 2 {
				m.t.Fatalf("repair of %s: %+v", topic, repaired[0])
			}
			p.state = qLoaded
		} else {
			if repaired[0].Outcome != RepairFailed {
				m.t.Fatalf("failed repair of %s: %+v", topic, repaired[0])
			}
			p.state = qParked
		}
		return
	}
	if len(repaired) != 0 {
		m.t.Fatalf("a load answered a repair: %+v", repaired)
	}
	waiters := p.waiters
	p.waiters = nil
	switch {
	case outcome == loadServed:
		m.wantLoads(loads, topic, 0, false)
		m.wantAnswered(got, waiters, func(o *Opened) bool { return o.Err == nil })
		p.state = qLoaded
	case outcome == loadFailed:
		m.wantLoads(loads, topic, 0, false)
		m.wantAnswered(got, waiters, func(o *Opened) bool { return o.Err == core.ErrPartitionLoadFailed })
		p.state = qIdle
	case outcome == loadDamaged && m.cfg.RecoveryOnMismatch == MismatchIgnore && !p.truncate:
		m.wantLoads(loads, topic, 1, true)
		if len(got) != 0 {
			m.t.Fatalf("ignore: waiters answered before the cut: %+v", got)
		}
		p.truncate, p.waiters = true, waiters
	default:
		m.wantLoads(loads, topic, 0, false)
		m.wantAnswered(got, waiters, func(o *Opened) bool { return isQuarantineRefusal(o.Err, topic) })
		p.state = qParked
	}
}

func (m *quarantineMachine) wantAnswered(got map[uint64]*Opened, waiters []uint64, ok func(*Opened) bool) {
	if len(got) != len(waiters) {
		m.t.Fatalf("%d answers for %d waiters: %+v", len(got), len(waiters), got)
	}
	for _, tok := range waiters {
		if o := got[tok]; o == nil || !ok(o) {
			m.t.Fatalf("waiter %d answered %+v", tok, o)
		}
	}
}

func (m *quarantineMachine) repair(topic string) {
	p := m.part(topic)
	out, loads := m.step(&Deliver{NowMs: m.now, Envelope: Envelope{From: AdminAddr(1), To: NodeAddr(), Msg: &RepairQuarantine{Queue: qid(topic, 0)}}})
	var repaired []*QuarantineRepaired
	for _, env := range out {
		if r, ok := env.Msg.(*QuarantineRepaired); ok {
			repaired = append(repaired, r)
		}
	}
	want := RepairOutcome(0)
	switch {
	case p.state == qUnknown:
		want = RepairUnknown
	case p.state == qParked && p.repairing:
		want = RepairBusy
	case p.state == qParked:
		m.wantLoads(loads, topic, 1, true)
		if len(repaired) != 0 {
			m.t.Fatalf("repair of %s answered before its load: %+v", topic, repaired)
		}
		p.repairing, p.truncate = true, true
		return
	default:
		want = RepairNotQuarantined
	}
	m.wantLoads(loads, topic, 0, false)
	if len(repaired) != 1 || repaired[0].Outcome != want {
		m.t.Fatalf("repair of %s (state %d): %+v, want %d", topic, p.state, repaired, want)
	}
}

func (m *quarantineMachine) restart() {
	m.now += 10
	m.boot()
	for _, p := range m.model {
		if p.state != qUnknown {
			// Volatile: the next load finds the damage again.
			*p = qPart{state: qIdle}
		}
	}
}

// check compares the parked set with the model's.
func (m *quarantineMachine) check() {
	var want []string
	for _, topic := range quarantineTopics {
		if p := m.model[topic]; p != nil && p.state == qParked {
			want = append(want, topic)
		}
	}
	var got []string
	for id := range m.n.quar.entries {
		got = append(got, id.Topic)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		m.t.Fatalf("parked %v, model %v", got, want)
	}
	var reported []string
	refused := false
	if m.report != nil {
		for _, e := range m.report.Entries {
			reported = append(reported, e.Queue.Topic)
		}
		refused = m.report.Refused
	}
	if !slices.Equal(reported, want) {
		m.t.Fatalf("reported %v, model %v", reported, want)
	}
	if refused != (len(want) > 0 && m.cfg.RecoveryOnMismatch == MismatchRefuse) {
		m.t.Fatalf("reported refused=%v under %v with %v parked", refused, m.cfg.RecoveryOnMismatch, want)
	}
}

func TestQuarantineAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := testNodeConfig()
		cfg.RecoveryOnMismatch = MismatchPolicy(rapid.IntRange(0, int(MismatchIgnore)).Draw(t, "policy"))
		m := &quarantineMachine{t: t, cfg: cfg, now: 1_000_000, model: map[string]*qPart{}}
		m.boot()
		topic := rapid.SampledFrom(quarantineTopics)
		t.Repeat(map[string]func(*rapid.T){
			"open": func(t *rapid.T) { m.open(topic.Draw(t, "topic")) },
			"answer": func(t *rapid.T) {
				var loading []string
				for _, name := range quarantineTopics {
					if p := m.model[name]; p != nil && (p.state == qLoading || p.repairing) {
						loading = append(loading, name)
					}
				}
				if len(loading) == 0 {
					t.Skip("no load on its way")
				}
				name := rapid.SampledFrom(loading).Draw(t, "loading")
				m.answer(name, loadOutcome(rapid.IntRange(0, int(loadOutcomesCount)-1).Draw(t, "outcome")))
			},
			"repair":  func(t *rapid.T) { m.repair(topic.Draw(t, "topic")) },
			"restart": func(t *rapid.T) { m.restart() },
			"":        func(t *rapid.T) { m.check() },
		})
	})
}
