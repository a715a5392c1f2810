package node

import (
	"maps"
	"slices"
	"testing"

	"github.com/fibril-go/fibril/core"
	"pgregory.net/rapid"
)

// hostMachine drives a Host with random requests from three sessions and a
// random Node answering its dead-letter copies (stored, refused, bounced),
// with partial fsyncs and reloads from the durable log. It holds the Host
// to: every envelope goes to the session that owns its subscription or sent
// its request; a source is settled only after its copy was reported
// stored; no pending copy is ever lost (every pending message is tracked,
// and draining stores them all).
type hostMachine struct {
	cfg     Config
	pcfg    core.Config
	h       *Host
	nowMs   int64
	log     []core.Entry
	durable uint64
	bounds  []uint64

	owners    map[uint64]SessionID // SubID -> session, as the model has it
	tokens    map[uint64]SessionID // request token -> session
	held      map[uint64][]uint64  // SubID -> delivery tags held
	nextSub   uint64
	nextToken uint64
	copies    map[uint64]bool // offsets with a DeadLetterOut unanswered
	stored    map[uint64]bool // offsets whose copy was reported stored
}

func newHostMachine(t *rapid.T) *hostMachine {
	cfg := testHostConfig()
	cfg.DeadLettersInflightMax = rapid.IntRange(1, 3).Draw(t, "inflightMax")
	pcfg := testPartitionConfig("jobs")
	mc := &hostMachine{cfg: cfg, pcfg: pcfg, nowMs: 50_000, owners: map[uint64]SessionID{}, tokens: map[uint64]SessionID{},
		held: map[uint64][]uint64{}, copies: map[uint64]bool{}, stored: map[uint64]bool{}}
	p, err := core.NewPartition(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	mc.load(t, p)
	return mc
}

func (mc *hostMachine) load(t *rapid.T, p *core.Partition) {
	mc.h = NewHost(mc.cfg, p, LoadRequest{Queue: mc.pcfg.Queue, Config: mc.pcfg, Settings: deadLetterSettings()})
	mc.step(t, &Tick{NowMs: mc.nowMs})
}

func (mc *hostMachine) step(t *rapid.T, in Input) {
	rd := mc.h.Step(in)
	mc.log = append(mc.log, rd.PersistEntries...)
	for _, env := range rd.Out {
		mc.checkEnvelope(t, env)
	}
	for _, s := range rd.Settled {
		if s.Kind == core.SettledDeadLettered && !mc.stored[s.Offset] {
			t.Fatalf("offset %d settled as dead-lettered before its copy was stored", s.Offset)
		}
	}
	if err := mc.h.CheckInvariants(); err != nil {
		t.Fatalf("after %T: %v", in, err)
	}
	mc.checkNoCopyLost(t)
	last := mc.h.Partition().LastIndex()
	if len(mc.bounds) == 0 || mc.bounds[len(mc.bounds)-1] != last {
		mc.bounds = append(mc.bounds, last)
	}
}

func (mc *hostMachine) checkEnvelope(t *rapid.T, env Envelope) {
	if env.From != PartitionAddr(mc.pcfg.Queue) {
		t.Fatalf("envelope from %v", env.From)
	}
	switch msg := env.Msg.(type) {
	case *Deliveries:
		owner, ok := mc.owners[msg.SubID]
		if !ok || env.To != SessionAddr(owner) {
			t.Fatalf("deliveries of sub %d to %v, owner %d (known %v)", msg.SubID, env.To, owner, ok)
		}
		for _, d := range msg.Items {
			if d.SubID != msg.SubID {
				t.Fatalf("delivery of sub %d in the batch of sub %d", d.SubID, msg.SubID)
			}
			mc.held[msg.SubID] = append(mc.held[msg.SubID], d.Tag)
		}
	case *Response:
		owner, ok := mc.tokens[msg.Token]
		if !ok || env.To != SessionAddr(owner) {
			t.Fatalf("response to token %d sent to %v, asked by %d", msg.Token, env.To, owner)
		}
		delete(mc.tokens, msg.Token) // at most one response per request
		if msg.Reply.Kind == core.ReplyError && msg.Reply.Err == core.ErrAlreadySubscribed {
			return
		}
	case *Responses:
		// A batch is for one session, with more than one answer (one goes
		// as a Response), each checked as if sent alone.
		if len(msg.Items) < 2 {
			t.Fatalf("a batch of %d answers to %v", len(msg.Items), env.To)
		}
		for i := range msg.Items {
			mc.checkEnvelope(t, Envelope{From: env.From, To: env.To, Msg: &msg.Items[i]})
		}
	case *DeadLetterOut:
		if env.To != NodeAddr() || msg.Target.Topic != "dlq" {
			t.Fatalf("dead letter %+v to %v", msg, env.To)
		}
		if mc.copies[msg.Offset] {
			t.Fatalf("copy of %d sent again while unanswered", msg.Offset)
		}
		mc.copies[msg.Offset] = true
	default:
		t.Fatalf("unexpected %T to %v", msg, env.To)
	}
}

// checkNoCopyLost: every message pending dead-lettering is tracked by the
// Host (waiting, on its way, or retrying).
func (mc *hostMachine) checkNoCopyLost(t *rapid.T) {
	p := mc.h.Partition()
	for offset := p.SettledUntil(); offset < p.NextOffset(); offset++ {
		if v, live := p.Message(offset); live && v.State == core.MessagePendingDLQ && mc.h.dlq[offset] == nil {
			if mc.durable >= p.LastIndex() || mc.pendingDurable(offset) {
				t.Fatalf("offset %d is pending dead-lettering and no copy is tracked", offset)
			}
		}
	}
}

// pendingDurable says whether the DeadLetter entry of offset is durable
// (the core releases the copy only then).
func (mc *hostMachine) pendingDurable(offset uint64) bool {
	for _, e := range mc.log {
		if e.Kind == core.EntryDeadLetter && e.Offset == offset {
			return e.Index <= mc.durable
		}
	}
	return true // from before the reload: durable
}

func (mc *hostMachine) request(t *rapid.T, session SessionID, in core.Input, wantAnswer bool) {
	var token uint64
	if wantAnswer {
		mc.nextToken++
		token = mc.nextToken
		mc.tokens[token] = session
	}
	mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: SessionAddr(session), To: PartitionAddr(mc.pcfg.Queue), Msg: &Request{Token: token, Input: in}}})
	if token != 0 {
		if _, confirm := in.(*core.Publish); !confirm {
			delete(mc.tokens, token) // answered in its step, or never
		}
	}
}

func (mc *hostMachine) answerCopy(t *rapid.T, offset uint64, msg Message) {
	delete(mc.copies, offset)
	mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: NodeAddr(), To: PartitionAddr(mc.pcfg.Queue), Msg: msg}})
}

func (mc *hostMachine) pickCopy(t *rapid.T) uint64 {
	offsets := slices.Sorted(maps.Keys(mc.copies))
	if len(offsets) == 0 {
		t.Skip("no copy on its way")
	}
	return rapid.SampledFrom(offsets).Draw(t, "copy")
}

func (mc *hostMachine) persistUpTo(t *rapid.T, upTo uint64) {
	mc.durable = upTo
	mc.step(t, &Persisted{NowMs: mc.nowMs, UpToIndex: upTo})
}

// drain answers every copy as stored until nothing is pending: a copy is
// never lost, whatever was refused before.
func (mc *hostMachine) drain(t *rapid.T) {
	for round := 0; round < 64; round++ {
		if last := mc.h.Partition().LastIndex(); mc.durable < last {
			mc.persistUpTo(t, last)
		}
		for _, offset := range slices.Sorted(maps.Keys(mc.copies)) {
			mc.stored[offset] = true
			mc.answerCopy(t, offset, &DeadLetterStored{Offset: offset})
		}
		if mc.h.Partition().Counts().PendingDLQ == 0 {
			return
		}
		mc.nowMs += mc.cfg.DeadLetterRetryMaxMs
		mc.step(t, &Tick{NowMs: mc.nowMs})
	}
	t.Fatalf("%d messages still pending dead-lettering after draining", mc.h.Partition().Counts().PendingDLQ)
}

func TestHostAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mc := newHostMachine(t)
		session := func(t *rapid.T) SessionID { return SessionID(rapid.IntRange(1, 3).Draw(t, "session")) }
		t.Repeat(map[string]func(*rapid.T){
			"publish": func(t *rapid.T) {
				mc.request(t, session(t), &core.Publish{Confirm: rapid.Bool().Draw(t, "confirm"), Body: &core.Body{Payload: []byte("p")}}, rapid.Bool().Draw(t, "answer?"))
			},
			"subscribe": func(t *rapid.T) {
				if len(mc.owners) >= 4 {
					t.Skip("enough subscriptions")
				}
				mc.nextSub++
				s := session(t)
				mc.owners[mc.nextSub] = s
				mc.request(t, s, &core.Subscribe{SubID: mc.nextSub, Prefetch: uint32(rapid.IntRange(1, 3).Draw(t, "prefetch"))}, true)
			},
			"unsubscribe": func(t *rapid.T) {
				ids := slices.Sorted(maps.Keys(mc.owners))
				if len(ids) == 0 {
					t.Skip("no subscription")
				}
				id := rapid.SampledFrom(ids).Draw(t, "sub")
				mc.request(t, mc.owners[id], &core.Unsubscribe{SubID: id}, rapid.Bool().Draw(t, "answer?"))
				delete(mc.owners, id)
				delete(mc.held, id)
			},
			"settle": func(t *rapid.T) {
				ids := slices.Sorted(maps.Keys(mc.held))
				if len(ids) == 0 {
					t.Skip("nothing held")
				}
				id := rapid.SampledFrom(ids).Draw(t, "sub")
				tags := mc.held[id]
				delete(mc.held, id)
				var in core.Input = &core.Ack{SubID: id, Tags: tags}
				if rapid.Bool().Draw(t, "fail?") {
					in = &core.Nack{SubID: id, Tags: tags, Requeue: false}
				}
				mc.request(t, mc.owners[id], in, rapid.Bool().Draw(t, "answer?"))
			},
			"bounceDeliveries": func(t *rapid.T) {
				ids := slices.Sorted(maps.Keys(mc.owners))
				if len(ids) == 0 {
					t.Skip("no subscription")
				}
				s := mc.owners[rapid.SampledFrom(ids).Draw(t, "sub")]
				for id, owner := range mc.owners {
					if owner == s {
						delete(mc.owners, id)
						delete(mc.held, id)
					}
				}
				env := Envelope{From: PartitionAddr(mc.pcfg.Queue), To: SessionAddr(s), Msg: &Deliveries{}}
				mc.step(t, &Bounced{NowMs: mc.nowMs, Envelope: env})
			},
			"copyStored": func(t *rapid.T) {
				offset := mc.pickCopy(t)
				mc.stored[offset] = true
				mc.answerCopy(t, offset, &DeadLetterStored{Offset: offset})
			},
			"storedBeforeItsTurn": func(t *rapid.T) {
				// An answer to an attempt of before reaches a copy that waits
				// for a slot: it is stored, whatever its state here.
				var waiting []uint64
				for offset, c := range mc.h.dlq {
					if c.state == copyWaiting {
						waiting = append(waiting, offset)
					}
				}
				if len(waiting) == 0 {
					t.Skip("no copy waits for a slot")
				}
				slices.Sort(waiting)
				offset := rapid.SampledFrom(waiting).Draw(t, "waiting")
				mc.stored[offset] = true
				mc.answerCopy(t, offset, &DeadLetterStored{Offset: offset})
			},
			"copyFailed": func(t *rapid.T) {
				offset := mc.pickCopy(t)
				mc.answerCopy(t, offset, &DeadLetterFailed{Offset: offset, Err: core.ErrPartitionLoadFailed})
			},
			"copyBounced": func(t *rapid.T) {
				offset := mc.pickCopy(t)
				delete(mc.copies, offset)
				env := Envelope{From: PartitionAddr(mc.pcfg.Queue), To: NodeAddr(), Msg: &DeadLetterOut{Offset: offset}}
				mc.step(t, &Bounced{NowMs: mc.nowMs, Envelope: env})
			},
			"persist": func(t *rapid.T) {
				var candidates []uint64
				for _, b := range mc.bounds {
					if b > mc.durable {
						candidates = append(candidates, b)
					}
				}
				if len(candidates) == 0 {
					t.Skip("all durable")
				}
				mc.persistUpTo(t, rapid.SampledFrom(candidates).Draw(t, "upTo"))
			},
			"tick": func(t *rapid.T) {
				mc.nowMs += rapid.SampledFrom([]int64{1, 10, 20, 80, 500, 1000}).Draw(t, "dt")
				mc.step(t, &Tick{NowMs: mc.nowMs})
			},
			"reload": func(t *rapid.T) {
				// The process restarts: the partition recovers from its
				// durable log; sessions and copies in flight are gone.
				mc.log = mc.log[:mc.durable]
				p, err := core.Recover(mc.pcfg, nil, mc.log)
				if err != nil {
					t.Fatal(err)
				}
				var kept []uint64
				for _, b := range mc.bounds {
					if b <= mc.durable {
						kept = append(kept, b)
					}
				}
				mc.bounds = kept
				mc.owners, mc.held, mc.tokens, mc.copies = map[uint64]SessionID{}, map[uint64][]uint64{}, map[uint64]SessionID{}, map[uint64]bool{}
				mc.load(t, p)
			},
			"drain": func(t *rapid.T) { mc.drain(t) },
		})
	})
}
