package core

import (
	"bytes"
	"flag"
	"os"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestMain raises rapid's defaults to 1000 sequences of up to 100 steps per
// property, so CI runs at least that many; the command line still wins.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if !explicit["rapid.checks"] {
		_ = flag.Set("rapid.checks", "1000")
	}
	if !explicit["rapid.steps"] {
		_ = flag.Set("rapid.steps", "100")
	}
	os.Exit(m.Run())
}

// machine drives the core and the model side by side with rapid-drawn inputs.
type machine struct {
	cfg        Config
	p          *Partition
	m          *model
	clockMs    int64    // the driver's clock; may step back
	log        []Entry  // everything handed to storage
	boundaries []uint64 // lastIndex after each step: where a crash may cut
	history    map[uint64]*model
	nextSub    uint64
	// generation: the highest SetOwner generation drawn so far; like the
	// Node's, it keeps growing across restarts of the partition.
	generation uint64
	oldTags    []uint64 // tags seen, for stale settles
	// spilled holds, per offset the driver spilled (SpillBody), the ref it
	// gave; a process-local choice, so a restart forgets it.
	spilled map[uint64]PayloadRef

	wantErrors []*Error
	// wantPurged: the counts the model expects purges to answer, in order
	// (a purge's answer waits for its entry; a restart drops the waiting).
	wantPurged []uint64
}

func newMachine(t *rapid.T) *machine {
	cfg := DefaultConfig(QueueID{Topic: "jobs", Group: rapid.SampledFrom([]string{"", "g1"}).Draw(t, "group")})
	cfg.LeaseMs = 1000
	p, err := NewPartition(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A small retry budget, so sequences reach dead-lettering often.
	cfg.MaxRetriesDefault = uint32(rapid.IntRange(0, 2).Draw(t, "maxRetriesDefault"))
	p, err = NewPartition(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mc := &machine{cfg: cfg, p: p, m: newModel(cfg), clockMs: 10_000, history: map[uint64]*model{}, nextSub: 1, spilled: map[uint64]PayloadRef{}}
	mc.history[0] = mc.m.clone()
	return mc
}

// step feeds in to the model's expectations and the core, then checks every
// output and the whole state against the model.
func (mc *machine) step(t *rapid.T, in Input) {
	if now := in.nowMs(); now > mc.m.nowMs {
		mc.m.nowMs = now
	}
	mc.applyInputToModel(in)
	mc.m.advanceTime()
	for _, s := range mc.m.subs {
		s.sentStep = 0
	}
	rd := mc.p.Step(in)
	mc.m.noteEntries(rd.Persist)
	mc.log = append(mc.log, rd.Persist...)
	var exclusiveReceiver uint64
	for _, d := range rd.Deliveries {
		if sub := mc.m.subs[d.SubID]; sub != nil && sub.exclusive {
			if exclusiveReceiver != 0 && exclusiveReceiver != d.SubID {
				t.Fatalf("one step delivered to exclusive subscriptions %d and %d", exclusiveReceiver, d.SubID)
			}
			exclusiveReceiver = d.SubID
		}
		if err := mc.m.checkDelivery(d); err != nil {
			t.Fatalf("delivery rule: %v", err)
		}
		mc.checkBody(t, d.Offset, d.Body)
		mc.oldTags = append(mc.oldTags, d.Tag)
	}
	if err := mc.m.checkExclusiveStep(exclusiveReceiver); err != nil {
		t.Fatalf("exclusive rule: %v", err)
	}
	mc.checkReplies(t, rd.Replies)
	for _, s := range rd.Settled {
		if err := mc.m.checkSettlement(s); err != nil {
			t.Fatalf("settlement rule: %v", err)
		}
	}
	for _, dl := range rd.DeadLetters {
		if err := mc.m.checkDeadLetter(dl); err != nil {
			t.Fatalf("dead-letter rule: %v", err)
		}
		mc.checkBody(t, dl.Offset, dl.Body)
	}
	if fast, slow := mc.p.FastCounts(), mc.p.Counts(); fast != slow {
		t.Fatalf("after %T: FastCounts %+v, Counts %+v", in, fast, slow)
	}
	for _, check := range []func() error{mc.m.checkWorkConserving, mc.m.checkGateComplete, mc.p.CheckInvariants} {
		if err := check(); err != nil {
			t.Fatalf("after %T: %v", in, err)
		}
	}
	if err := mc.m.checkAgainst(mc.p); err != nil {
		t.Fatalf("after %T: state differs from the model: %v", in, err)
	}
	if rd.NextWakeMs != 0 && rd.NextWakeMs < mc.m.nowMs {
		t.Fatalf("next wake %d is in the past (now %d)", rd.NextWakeMs, mc.m.nowMs)
	}
	last := mc.p.LastIndex()
	if len(mc.boundaries) == 0 || mc.boundaries[len(mc.boundaries)-1] != last {
		mc.boundaries = append(mc.boundaries, last)
	}
	mc.history[last] = mc.m.clone()
}

func (mc *machine) checkReplies(t *rapid.T, replies []Reply) {
	var gotErrors []*Error
	for _, r := range replies {
		switch r.Kind {
		case ReplyError:
			gotErrors = append(gotErrors, r.Err)
		case ReplyPublished:
			x := mc.m.msgs[r.Offset]
			switch {
			case x == nil || !x.confirmWanted:
				t.Fatalf("confirm for offset %d that wanted none", r.Offset)
			case x.confirmed:
				t.Fatalf("offset %d confirmed twice", r.Offset)
			case x.publishIndex > mc.m.durable:
				t.Fatalf("offset %d confirmed before durable (index %d, durable %d)", r.Offset, x.publishIndex, mc.m.durable)
			}
			x.confirmed = true
		case ReplyCompleted:
			mc.checkCompleted(t, r) // operator_test.go
		case ReplyPurged:
			if len(mc.wantPurged) == 0 {
				t.Fatalf("a purge answer (%d) nobody asked for", r.Offset)
			}
			if r.Offset != mc.wantPurged[0] {
				t.Fatalf("purge answered %d removed, model %d", r.Offset, mc.wantPurged[0])
			}
			mc.wantPurged = mc.wantPurged[1:]
		}
	}
	if !slices.Equal(gotErrors, mc.wantErrors) {
		t.Fatalf("errors %v, model expects %v", gotErrors, mc.wantErrors)
	}
	mc.wantErrors = nil
}

// applyInputToModel makes the model's decision for in, and the errors it expects.
func (mc *machine) applyInputToModel(in Input) {
	m := mc.m
	switch in := in.(type) {
	case *Persisted:
		m.durable = max(m.durable, in.UpToIndex)
	case *Publish:
		for _, h := range in.Body.Headers {
			if IsReservedHeader(h.Key) {
				mc.wantErrors = append(mc.wantErrors, ErrReservedHeader)
				return
			}
		}
		x := &mMsg{offset: m.nextOffset, state: mReady, confirmWanted: in.Confirm}
		m.nextOffset++
		if in.HasTTL {
			x.expiresAtMs = m.nowMs + in.TTLMs
		} else if m.settings.DefaultTTLMs > 0 {
			x.expiresAtMs = m.nowMs + m.settings.DefaultTTLMs
		}
		if in.NotBeforeMs > m.nowMs {
			x.state, x.dueMs = mDelayed, in.NotBeforeMs
		}
		m.msgs[x.offset] = x
	case *Subscribe:
		m.subs[in.SubID] = &mSub{prefetch: max(in.Prefetch, 1), autoAck: in.AutoAck, exclusive: in.Exclusive, tags: map[uint64]uint64{}}
	case *SetOwner:
		if in.Generation >= m.ownerGeneration { // a lower one is a late envelope
			m.owner, m.ownerGeneration = in.SubID, in.Generation
		}
	case *Unsubscribe:
		sub := m.subs[in.SubID]
		for _, tag := range slices.Sorted(mapKeys(sub.tags)) {
			m.requeue(m.msgs[sub.tags[tag]], 0)
		}
		delete(m.subs, in.SubID)
	case *Ack:
		mc.modelSettle(in.SubID, in.Tags, func(x *mMsg) {
			delete(m.subs[in.SubID].tags, x.tag)
			x.state, x.settleKind, x.everAcked, x.tag, x.sub = mSettled, SettledAcked, true, 0, 0
		})
	case *Nack:
		if !in.Requeue && in.NotBeforeMs != 0 {
			mc.wantErrors = append(mc.wantErrors, ErrNotBeforeWithoutRetry)
			return
		}
		mc.modelSettle(in.SubID, in.Tags, func(x *mMsg) {
			if in.Requeue {
				m.requeue(x, in.NotBeforeMs)
				return
			}
			delete(m.subs[in.SubID].tags, x.tag)
			m.deadLetter(x, ReasonTerminalNack)
		})
	case *Declare:
		next, err := resolveSettings(&mc.cfg, m.settings, in)
		if err != nil {
			mc.wantErrors = append(mc.wantErrors, err)
			return
		}
		m.settings = next
	case *SetGlobalDLQ:
		m.globalDLQ = in.Target
	case *PauseSubscription:
		sub := m.subs[in.SubID]
		if sub == nil {
			mc.wantErrors = append(mc.wantErrors, ErrUnknownSubscription)
			return
		}
		sub.paused = in.Paused
	case *DeadLetterDone:
		x := m.msgs[in.Offset]
		x.state, x.settleKind = mSettled, SettledDeadLettered
	case *Complete:
		mc.modelComplete(in) // operator_test.go
	case *Purge:
		// Ready and delayed go (no settlement is reported: nobody settled
		// them); inflight and pending stay.
		var n uint64
		for _, x := range m.msgs {
			if x.state == mReady || x.state == mDelayed {
				x.state, x.tag, x.sub = mSettled, 0, 0
				n++
			}
		}
		mc.wantPurged = append(mc.wantPurged, n)
	}
}

func mapKeys(m map[uint64]uint64) func(func(uint64) bool) {
	return func(yield func(uint64) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (mc *machine) modelSettle(subID uint64, tags []uint64, settle func(*mMsg)) {
	sub := mc.m.subs[subID]
	if sub == nil {
		mc.wantErrors = append(mc.wantErrors, ErrUnknownSubscription)
		return
	}
	if sub.autoAck {
		mc.wantErrors = append(mc.wantErrors, ErrAutoAckSubscription)
		return
	}
	for _, tag := range tags {
		off, ok := sub.tags[tag]
		if !ok {
			mc.wantErrors = append(mc.wantErrors, ErrStaleTag)
			continue
		}
		settle(mc.m.msgs[off])
	}
}

// checkBody: a delivered or dead-lettered body is the published payload,
// or exactly the stored reference the driver spilled it to.
func (mc *machine) checkBody(t *rapid.T, offset uint64, b *Body) {
	if ref, ok := mc.spilled[offset]; ok {
		if b.Payload != nil || b.Ref != ref {
			t.Fatalf("offset %d was spilled to %+v, but its body is %+v", offset, ref, b)
		}
		return
	}
	if b.IsStored() || string(b.Payload) != "p" {
		t.Fatalf("offset %d was never spilled, but its body is %+v", offset, b)
	}
}

// spill swaps the payload of a random live message for a stored reference,
// as the broker does under memory pressure.
func (mc *machine) spill(t *rapid.T) {
	offsets := mc.m.sortedOffsets()
	if len(offsets) == 0 {
		t.Skip("nothing live")
	}
	offset := rapid.SampledFrom(offsets).Draw(t, "spillOffset")
	ref := PayloadRef{File: offset/8 + 1, OffsetBytes: offset, LengthBytes: 1, Checksum: uint32(offset)}
	_, live := mc.p.Message(offset) // the model may still list a message the core has settled
	before := mc.p.ResidentPayloadBytes()
	freed := mc.p.SpillBody(offset, ref)
	_, already := mc.spilled[offset]
	switch {
	case (already || !live) && freed != 0:
		t.Fatalf("offset %d (live %v, spilled before %v) freed %d bytes", offset, live, already, freed)
	case live && !already && freed != 1:
		t.Fatalf("spilling the live offset %d freed %d bytes", offset, freed)
	case mc.p.ResidentPayloadBytes() != before-freed:
		t.Fatalf("resident bytes %d after freeing %d from %d", mc.p.ResidentPayloadBytes(), freed, before)
	}
	if live && !already {
		mc.spilled[offset] = ref
	}
	if err := mc.p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if err := mc.m.checkAgainst(mc.p); err != nil {
		t.Fatalf("a spill changed the state: %v", err)
	}
}

// snapshotUnspilled is the live snapshot with every spilled body given its
// payload back, so it compares with a replay (which never spills).
func (mc *machine) snapshotUnspilled() []byte {
	var swapped []*message
	var stored []*Body
	mc.p.store.forEach(func(_ uint64, m *message) {
		if m.body.IsStored() {
			inline := *m.body
			inline.Payload, inline.Ref = []byte("p"), PayloadRef{}
			swapped, stored = append(swapped, m), append(stored, m.body)
			m.body = &inline
		}
	})
	snap := mc.p.Snapshot()
	for i, m := range swapped {
		m.body = stored[i]
	}
	return snap
}

// restart recovers from the durable prefix (and, half the time, through a
// snapshot of a shorter prefix plus the suffix), and rolls the model back.
func (mc *machine) restart(t *rapid.T) {
	durable := mc.m.durable
	prefix := mc.log[:durable]
	var snapshot []byte
	suffix := prefix
	if cut := rapid.IntRange(0, len(prefix)).Draw(t, "snapshotAt"); cut > 0 && rapid.Bool().Draw(t, "viaSnapshot") {
		at, err := Recover(mc.cfg, nil, prefix[:cut])
		if err != nil {
			t.Fatalf("recover prefix %d: %v", cut, err)
		}
		snapshot, suffix = at.Snapshot(), prefix[cut:]
	}
	p, err := Recover(mc.cfg, snapshot, suffix)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	full, _ := Recover(mc.cfg, nil, prefix)
	if !bytes.Equal(p.Snapshot(), full.Snapshot()) {
		t.Fatalf("snapshot + suffix recovery differs from full replay")
	}
	back := mc.history[durable]
	if back == nil {
		t.Fatalf("no model state at durable index %d", durable)
	}
	mc.p, mc.log = p, mc.log[:durable]
	mc.spilled = map[uint64]PayloadRef{}
	mc.wantPurged = nil // their answers died with the process
	mc.m = back.clone()
	mc.m.nowMs, mc.m.durable = 0, durable
	mc.m.owner, mc.m.ownerGeneration = 0, 0 // volatile: the Node names the owner again
	for _, x := range mc.m.msgs {
		if x.state == mInflight {
			x.sub = 0 // a recovered lease: held by no live subscription
		}
		x.confirmWanted = false // the connections that wanted them are gone
		x.copySeen = false      // pending copies are sent again
		if x.state == mSettled {
			x.settleSeen = true // reported, if at all, by the old process
		}
	}
	var kept []uint64
	for _, b := range mc.boundaries {
		if b <= durable {
			kept = append(kept, b)
		}
	}
	mc.boundaries = kept
	if err := p.CheckInvariants(); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	// The first step after recovery re-emits pending dead-letter copies.
	mc.step(t, &Tick{NowMs: mc.clockMs})
}

func (mc *machine) drawTags(t *rapid.T, sub *mSub) []uint64 {
	var tags []uint64
	if sub != nil {
		held := slices.Sorted(mapKeys(sub.tags))
		if len(held) > 0 {
			n := rapid.IntRange(1, min(len(held), 3)).Draw(t, "ntags")
			for i := 0; i < n; i++ {
				tags = append(tags, rapid.SampledFrom(held).Draw(t, "tag"))
			}
		}
	}
	if len(mc.oldTags) > 0 && rapid.IntRange(0, 9).Draw(t, "stale") == 0 {
		tags = append(tags, rapid.SampledFrom(mc.oldTags).Draw(t, "staleTag"))
	}
	return slices.Compact(tags)
}

func (mc *machine) pickSub(t *rapid.T) (uint64, *mSub) {
	if len(mc.m.subs) == 0 {
		return 0, nil
	}
	ids := slices.Sorted(func(yield func(uint64) bool) {
		for k := range mc.m.subs {
			if !yield(k) {
				return
			}
		}
	})
	id := rapid.SampledFrom(ids).Draw(t, "sub")
	return id, mc.m.subs[id]
}

// setOwner names a random owner: mostly a live subscription, sometimes
// nobody, the next id to be subscribed (SetOwner overtaking its Subscribe)
// or an id that is gone; with a generation that mostly grows and sometimes
// goes back (a late envelope, to be ignored).
func (mc *machine) setOwner(t *rapid.T) {
	candidates := []uint64{0, mc.nextSub}
	if mc.nextSub > 1 {
		candidates = append(candidates, mc.nextSub-1) // live or gone
	}
	for id := range mc.m.subs {
		candidates = append(candidates, id, id) // live ones twice as likely
	}
	slices.Sort(candidates)
	subID := rapid.SampledFrom(candidates).Draw(t, "owner")
	step := rapid.IntRange(-2, 2).Draw(t, "generationStep")
	generation := mc.generation + uint64(max(step, 0))
	if step < 0 {
		generation = mc.generation - min(mc.generation, uint64(-step))
	}
	mc.generation = max(mc.generation, generation)
	mc.step(t, &SetOwner{NowMs: mc.clockMs, SubID: subID, Generation: generation})
}

func TestPartitionAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mc := newMachine(t)
		t.Repeat(map[string]func(*rapid.T){
			"publish": func(t *rapid.T) {
				in := &Publish{NowMs: mc.clockMs, Confirm: rapid.Bool().Draw(t, "confirm"),
					Body: &Body{Payload: []byte("p"), PublishedMs: 1}}
				if rapid.IntRange(0, 3).Draw(t, "ttl?") == 0 {
					in.HasTTL, in.TTLMs = true, rapid.Int64Range(0, 3000).Draw(t, "ttl")
				}
				if rapid.IntRange(0, 3).Draw(t, "delay?") == 0 {
					in.NotBeforeMs = mc.clockMs + rapid.Int64Range(-500, 3000).Draw(t, "delay")
				}
				if rapid.IntRange(0, 15).Draw(t, "reserved?") == 0 {
					in.Body.Headers = []Header{{Key: rapid.SampledFrom([]string{"fibril.retries", "stroma.x", "fibril.client.id", "x-a"}).Draw(t, "hdr"), Value: "1"}}
				}
				mc.step(t, in)
			},
			"subscribe": func(t *rapid.T) {
				if len(mc.m.subs) >= 4 {
					t.Skip("enough subscriptions")
				}
				id := mc.nextSub
				mc.nextSub++
				mc.step(t, &Subscribe{NowMs: mc.clockMs, SubID: id, Prefetch: uint32(rapid.IntRange(0, 4).Draw(t, "prefetch")),
					AutoAck: rapid.IntRange(0, 4).Draw(t, "autoAck?") == 0, Exclusive: rapid.Bool().Draw(t, "exclusive?")})
			},
			"setOwner": func(t *rapid.T) { mc.setOwner(t) },
			"unsubscribe": func(t *rapid.T) {
				id, sub := mc.pickSub(t)
				if sub == nil {
					t.Skip("no subscription")
				}
				mc.step(t, &Unsubscribe{NowMs: mc.clockMs, SubID: id})
			},
			"pause": func(t *rapid.T) {
				id, _ := mc.pickSub(t)
				if rapid.IntRange(0, 9).Draw(t, "unknownPause?") == 0 {
					id = 999
				}
				mc.step(t, &PauseSubscription{NowMs: mc.clockMs, SubID: id, Paused: rapid.IntRange(0, 2).Draw(t, "paused?") != 0})
			},
			"ack": func(t *rapid.T) {
				id, sub := mc.pickSub(t)
				if rapid.IntRange(0, 19).Draw(t, "unknownSub?") == 0 {
					id, sub = 999, nil
				}
				mc.step(t, &Ack{NowMs: mc.clockMs, SubID: id, Tags: mc.drawTags(t, sub)})
			},
			"nack": func(t *rapid.T) {
				id, sub := mc.pickSub(t)
				in := &Nack{NowMs: mc.clockMs, SubID: id, Tags: mc.drawTags(t, sub), Requeue: rapid.IntRange(0, 3).Draw(t, "fail?") != 0}
				if rapid.Bool().Draw(t, "after?") {
					in.NotBeforeMs = mc.clockMs + rapid.Int64Range(1, 3000).Draw(t, "after")
				}
				mc.step(t, in)
			},
			"tick": func(t *rapid.T) {
				mc.clockMs += rapid.SampledFrom([]int64{0, 1, 10, 250, 999, 1000, 1001, 2500}).Draw(t, "dt")
				mc.step(t, &Tick{NowMs: mc.clockMs})
			},
			"clockJump": func(t *rapid.T) {
				mc.clockMs += rapid.Int64Range(-5000, 10_000).Draw(t, "jump")
				mc.step(t, &Tick{NowMs: mc.clockMs})
			},
			"persist": func(t *rapid.T) {
				var candidates []uint64
				for _, b := range mc.boundaries {
					if b > mc.m.durable {
						candidates = append(candidates, b)
					}
				}
				if len(candidates) == 0 {
					t.Skip("all durable")
				}
				upTo := rapid.SampledFrom(candidates).Draw(t, "upTo")
				mc.step(t, &Persisted{NowMs: mc.clockMs, UpToIndex: upTo})
			},
			"restart": func(t *rapid.T) { mc.restart(t) },
			"spill":   func(t *rapid.T) { mc.spill(t) },

			// Operator requests (operator_test.go).
			"complete": func(t *rapid.T) { mc.step(t, mc.drawComplete(t)) },
			"browse":   func(t *rapid.T) { mc.checkBrowse(t) },

			"purge": func(t *rapid.T) {
				mc.step(t, &Purge{NowMs: mc.clockMs, Ref: 1})
			},
			"declare": func(t *rapid.T) {
				in := &Declare{NowMs: mc.clockMs}
				if rapid.Bool().Draw(t, "policy?") {
					in.DLQ = &DLQPolicy{Kind: DLQPolicyKind(rapid.IntRange(0, 2).Draw(t, "kind")),
						Target: DLQTarget{Topic: rapid.SampledFrom([]string{"dlq", "jobs", "Bad"}).Draw(t, "target")}}
				}
				if rapid.Bool().Draw(t, "retries?") {
					in.MaxRetries = u32(uint32(rapid.IntRange(0, 2).Draw(t, "maxRetries")))
				}
				if rapid.Bool().Draw(t, "ttl?") {
					in.DefaultTTLMs = i64(rapid.Int64Range(0, 3000).Draw(t, "defaultTTL"))
				}
				mc.step(t, in)
			},
			"setGlobalDLQ": func(t *rapid.T) {
				var target *DLQTarget
				if rapid.Bool().Draw(t, "set?") {
					target = &DLQTarget{Topic: "global-dlq"}
				}
				mc.step(t, &SetGlobalDLQ{NowMs: mc.clockMs, Target: target})
			},
			"deadLetterDone": func(t *rapid.T) {
				var pending []uint64
				for _, off := range mc.m.sortedOffsets() {
					if x := mc.m.msgs[off]; x.state == mPending && x.copySeen {
						pending = append(pending, off)
					}
				}
				if len(pending) == 0 {
					t.Skip("nothing pending")
				}
				mc.step(t, &DeadLetterDone{NowMs: mc.clockMs, Offset: rapid.SampledFrom(pending).Draw(t, "offset")})
			},
			"": func(t *rapid.T) {
				// Replay equivalence: the whole log, replayed, is the live state.
				replayed, err := Recover(mc.cfg, nil, mc.log)
				if err != nil {
					t.Fatalf("replay: %v", err)
				}
				if !bytes.Equal(replayed.Snapshot(), mc.snapshotUnspilled()) {
					t.Fatalf("replayed state differs from the live state at index %d", mc.p.LastIndex())
				}
			},
		})
	})
}
