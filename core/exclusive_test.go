package core

import (
	"fmt"
	"slices"
	"testing"

	"github.com/fibril-go/fibril/mutant"
)

// The exclusive gate (docs/cohorts.md, "The gate"), one test per rule. The
// rapid model (TestPartitionAgainstModel) checks the same rules on random
// sequences; these pin each one down by name.

func (h *harness) subscribeExclusive(id uint64, prefetch uint32, autoAck bool) {
	h.t.Helper()
	h.step(&Subscribe{NowMs: h.now, SubID: id, Prefetch: prefetch, AutoAck: autoAck, Exclusive: true})
}

func (h *harness) setOwner(id, generation uint64) {
	h.t.Helper()
	h.step(&SetOwner{NowMs: h.now, SubID: id, Generation: generation})
}

// offsetsTo lists, in order, the offsets of ds delivered to sub.
func offsetsTo(ds []Delivery, sub uint64) []uint64 {
	var out []uint64
	for _, d := range ds {
		if d.SubID == sub {
			out = append(out, d.Offset)
		}
	}
	return out
}

// wantDeliveries takes the deliveries so far and fails unless sub got
// exactly offsets and nobody else got anything.
func wantDeliveries(h *harness, sub uint64, offsets ...uint64) error {
	ds := h.takeDeliveries()
	if got := offsetsTo(ds, sub); !slices.Equal(got, offsets) || len(ds) != len(got) {
		return fmt.Errorf("want offsets %v to subscription %d and nothing else, got %+v", offsets, sub, ds)
	}
	return nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestExclusiveDeliversOnlyToTheOwner(t *testing.T) {
	h := newHarness(t)
	h.subscribeExclusive(1, 4, false)
	h.publish("a")
	must(t, wantDeliveries(h, 1)) // no SetOwner yet: nobody owns the partition
	h.setOwner(2, 1)
	must(t, wantDeliveries(h, 1))
	h.setOwner(1, 2)
	must(t, wantDeliveries(h, 1, 0))
	h.setOwner(0, 3) // nobody
	h.publish("b")
	must(t, wantDeliveries(h, 1))
}

// scenarioHandOverWaitsForAcks: after a SetOwner from A to B, B gets nothing
// until every delivery A holds is settled. GateOpenEarly breaks it.
func scenarioHandOverWaitsForAcks(t *testing.T) error {
	h := newHarness(t)
	h.subscribeExclusive(1, 2, false)
	h.subscribeExclusive(2, 2, false)
	h.setOwner(1, 1)
	h.publish("a")
	h.publish("b")
	h.publish("c")
	held := h.takeDeliveries()
	if got := offsetsTo(held, 1); !slices.Equal(got, []uint64{0, 1}) || len(held) != 2 {
		return fmt.Errorf("the first owner got %+v, want offsets 0 and 1", held)
	}
	h.setOwner(2, 2)
	if err := wantDeliveries(h, 2); err != nil {
		return fmt.Errorf("while the old owner holds two: %w", err)
	}
	h.ack(1, held[0].Tag) // the old owner may still settle what it holds
	if errs := h.errorsOf(h.takeReplies()); len(errs) != 0 {
		return fmt.Errorf("the old owner's ack was refused: %v", errs)
	}
	if err := wantDeliveries(h, 2); err != nil {
		return fmt.Errorf("while the old owner holds one: %w", err)
	}
	h.ack(1, held[1].Tag)
	if err := wantDeliveries(h, 2, 2); err != nil {
		return fmt.Errorf("once the old owner settled all: %w", err)
	}
	h.publish("d")
	return wantDeliveries(h, 2, 3)
}

func TestExclusiveHandOverWaitsForTheOldOwnersAcks(t *testing.T) {
	must(t, scenarioHandOverWaitsForAcks(t))
}

// Every way a delivery of the old owner can stop being unsettled opens the
// gate, and the message itself follows its usual rules (retry count,
// retry-after, dead-letter policy).
func TestExclusiveHandOverOpensWhenTheOldDeliveryLeaves(t *testing.T) {
	cases := []struct {
		name  string
		leave func(h *harness, tag uint64)
		want  []uint64 // offsets the new owner gets at once
	}{
		{"nack requeue", func(h *harness, tag uint64) { h.nack(1, true, 0, tag) }, []uint64{0, 1}},
		{"nack retry-after", func(h *harness, tag uint64) { h.nack(1, true, h.now+500, tag) }, []uint64{1}},
		{"nack fail", func(h *harness, tag uint64) { h.nack(1, false, 0, tag) }, []uint64{1}},
		{"lease expiry", func(h *harness, _ uint64) { h.advance(h.cfg.LeaseMs) }, []uint64{0, 1}},
		{"old owner unsubscribes", func(h *harness, _ uint64) { h.step(&Unsubscribe{NowMs: h.now, SubID: 1}) }, []uint64{0, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.subscribeExclusive(1, 1, false)
			h.subscribeExclusive(2, 4, false)
			h.setOwner(1, 1)
			h.publish("a")
			h.publish("b")
			held := h.takeDeliveries()
			if len(held) != 1 || held[0].SubID != 1 {
				t.Fatalf("the first owner got %+v", held)
			}
			h.setOwner(2, 2)
			must(t, wantDeliveries(h, 2))
			c.leave(h, held[0].Tag)
			ds := h.takeDeliveries()
			if got := offsetsTo(ds, 2); !slices.Equal(got, c.want) || len(ds) != len(got) {
				t.Fatalf("want %v to the new owner, got %+v", c.want, ds)
			}
			if len(c.want) == 2 && ds[0].Retries != 1 {
				t.Fatalf("the redelivery does not count the attempt: %+v", ds[0])
			}
			if c.name == "nack retry-after" {
				h.advance(500) // the retried message comes back to the new owner
				must(t, wantDeliveries(h, 2, 0))
			}
		})
	}
}

func TestExclusiveRecoveredLeasesKeepTheGateShutUntilTheyExpire(t *testing.T) {
	h := newHarness(t)
	h.subscribeExclusive(1, 1, false)
	h.setOwner(1, 1)
	h.publish("a")
	must(t, wantDeliveries(h, 1, 0))
	h.publish("b")
	h.restart() // the lease on a survives, held by nobody; the owner is forgotten
	if owner, generation := h.p.Owner(); owner != 0 || generation != 0 {
		t.Fatalf("the owner survived a restart: %d (generation %d)", owner, generation)
	}
	h.subscribeExclusive(2, 4, false)
	h.setOwner(2, 1) // a generation need not grow past a restart of the partition
	must(t, wantDeliveries(h, 2))
	h.advance(h.cfg.LeaseMs - 1)
	must(t, wantDeliveries(h, 2))
	h.advance(1) // the recovered lease expires: a comes back, and the gate opens
	ds := h.takeDeliveries()
	if got := offsetsTo(ds, 2); !slices.Equal(got, []uint64{0, 1}) || len(ds) != 2 || ds[0].Retries != 1 {
		t.Fatalf("after the recovered lease expired: %+v", ds)
	}
}

func TestExclusiveStaleGenerationIsIgnored(t *testing.T) {
	h := newHarness(t)
	h.subscribeExclusive(1, 4, false)
	h.subscribeExclusive(2, 4, false)
	h.setOwner(1, 5)
	h.setOwner(2, 4) // a late envelope
	if owner, generation := h.p.Owner(); owner != 1 || generation != 5 {
		t.Fatalf("owner %d generation %d after a stale SetOwner, want 1 and 5", owner, generation)
	}
	h.publish("a")
	must(t, wantDeliveries(h, 1, 0))
	h.setOwner(0, 6)
	h.setOwner(1, 5) // stale again: nobody stays the owner
	h.publish("b")
	must(t, wantDeliveries(h, 1))
	if owner, generation := h.p.Owner(); owner != 0 || generation != 6 {
		t.Fatalf("owner %d generation %d, want nobody at 6", owner, generation)
	}
	h.setOwner(2, 6) // the same generation again applies (only lower ones are late)
	if owner, _ := h.p.Owner(); owner != 2 {
		t.Fatalf("owner %d after an equal generation, want 2", owner)
	}
}

func TestExclusiveOwnerNeedNotBeSubscribed(t *testing.T) {
	h := newHarness(t)
	h.setOwner(7, 1) // overtakes its Subscribe
	h.publish("a")
	h.subscribeExclusive(3, 4, false)
	must(t, wantDeliveries(h, 3))
	h.subscribeExclusive(7, 4, false)
	d := h.takeDeliveries()
	if len(d) != 1 || d[0].SubID != 7 {
		t.Fatalf("the owner got %+v once subscribed", d)
	}
	// Its subscription ends: the owner stays as named, and nobody receives.
	h.step(&Unsubscribe{NowMs: h.now, SubID: 7})
	if owner, _ := h.p.Owner(); owner != 7 {
		t.Fatalf("owner %d after its unsubscribe, want 7 still", owner)
	}
	must(t, wantDeliveries(h, 3))
	h.subscribeExclusive(7, 4, false)
	must(t, wantDeliveries(h, 7, 0))
}

func TestExclusiveNonExclusiveInflightHoldsTheGateShut(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.publish("a")
	held := h.takeDeliveries()
	h.subscribeExclusive(2, 2, false) // prefetch 2: full once it holds a and b
	h.setOwner(2, 1)
	h.publish("b")
	must(t, wantDeliveries(h, 2)) // subscription 1 holds a
	// Once it is gone, the owner takes everything ready.
	h.step(&Unsubscribe{NowMs: h.now, SubID: 1})
	must(t, wantDeliveries(h, 2, 0, 1))
	if held[0].Offset != 0 {
		t.Fatalf("the first delivery was %+v", held)
	}
	// A non-exclusive subscription is not gated: it receives while the
	// owner holds deliveries (a queue mixing both has no ordering promise),
	// and from then on the owner would wait for it.
	h.subscribe(3, 1, false)
	h.publish("c")
	must(t, wantDeliveries(h, 3, 2))
}

func TestExclusiveAutoAckOwner(t *testing.T) {
	h := newHarness(t)
	h.subscribeExclusive(1, 2, true)
	h.subscribeExclusive(2, 1, false)
	h.subscribeExclusive(3, 4, true)
	h.setOwner(1, 1)
	h.publish("a")
	h.publish("b")
	must(t, wantDeliveries(h, 1, 0, 1)) // auto-ack deliveries settle at once: nothing holds the gate
	h.setOwner(2, 2)
	h.publish("c")
	h.publish("d")
	held := h.takeDeliveries() // nothing to wait for after an auto-ack owner
	if len(held) != 1 || held[0].SubID != 2 || held[0].Offset != 2 {
		t.Fatalf("the manual-ack owner got %+v, want offset 2", held)
	}
	// To an auto-ack owner, the hand-over waits all the same.
	h.setOwner(3, 3)
	must(t, wantDeliveries(h, 3)) // subscription 2 holds c
	h.ack(2, held[0].Tag)
	must(t, wantDeliveries(h, 3, 3))
}

func TestExclusivePausedOwners(t *testing.T) {
	h := newHarness(t)
	h.subscribeExclusive(1, 1, false)
	h.subscribeExclusive(2, 4, false)
	h.setOwner(1, 1)
	h.step(&PauseSubscription{NowMs: h.now, SubID: 1, Paused: true})
	h.publish("a")
	must(t, wantDeliveries(h, 1)) // a paused owner gets nothing
	h.step(&PauseSubscription{NowMs: h.now, SubID: 1, Paused: false})
	must(t, wantDeliveries(h, 1, 0))
	// A paused old owner's leases stay, so they keep the gate shut for the
	// new owner until they expire.
	h.step(&PauseSubscription{NowMs: h.now, SubID: 1, Paused: true})
	h.setOwner(2, 2)
	h.publish("b")
	must(t, wantDeliveries(h, 2))
	h.advance(h.cfg.LeaseMs)
	must(t, wantDeliveries(h, 2, 0, 1))
}

func TestExclusiveTTLRunsWhileTheGateIsShut(t *testing.T) {
	h := newHarness(t)
	h.subscribeExclusive(1, 1, false)
	h.subscribeExclusive(2, 4, false)
	h.setOwner(1, 1)
	h.publish("a")
	held := h.takeDeliveries()
	h.setOwner(2, 2)
	off := h.publishWith(&Publish{Body: &Body{Payload: []byte("b")}, HasTTL: true, TTLMs: 1000})
	h.advance(1000) // b expires while waiting behind the gate
	if _, live := h.p.Message(off); live {
		t.Fatal("a message past its TTL is still live behind the shut gate")
	}
	h.ack(1, held[0].Tag)
	must(t, wantDeliveries(h, 2)) // b was discarded, never delivered
	if s := h.settled[len(h.settled)-1]; s.Offset != 0 || h.settled[0].Offset != off || h.settled[0].Reason != ReasonExpired {
		t.Fatalf("settlements %+v", h.settled)
	}
}

func TestExclusiveGateIsNotLogged(t *testing.T) {
	h := newHarness(t)
	before := h.p.LastIndex()
	h.subscribeExclusive(1, 1, false)
	h.takeReplies()
	h.step(&SetOwner{NowMs: h.now, Ref: 9, SubID: 1, Generation: 1})
	h.step(&SetOwner{NowMs: h.now, Ref: 10, SubID: 1, Generation: 0}) // stale
	if h.p.LastIndex() != before {
		t.Fatalf("the gate appended %d entries", h.p.LastIndex()-before)
	}
	if r := h.takeReplies(); len(r) != 0 {
		t.Fatalf("SetOwner replied %+v", r)
	}
}

// TestGateOpenEarlyMutantIsCaught: the hand-over rule holds on the real code
// and fails under mutant.GateOpenEarly, so its check can fail.
func TestGateOpenEarlyMutantIsCaught(t *testing.T) {
	must(t, scenarioHandOverWaitsForAcks(t))
	mutant.Active = mutant.GateOpenEarly
	defer func() { mutant.Active = "" }()
	if err := scenarioHandOverWaitsForAcks(t); err == nil {
		t.Fatalf("mutant %s is not caught", mutant.GateOpenEarly)
	}
}
