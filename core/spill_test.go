package core

import (
	"bytes"
	"testing"
)

func refFor(payload string, file uint64) PayloadRef {
	return PayloadRef{File: file, OffsetBytes: 7, LengthBytes: uint32(len(payload)), Checksum: 42}
}

func TestSpillBodyGivesBackResidentBytesAndKeepsState(t *testing.T) {
	h := newHarness(t)
	a := h.publish("aaaa")
	b := h.publish("bbbbbbbb")
	if got := h.p.ResidentPayloadBytes(); got != 12 {
		t.Fatalf("resident %d, want 12", got)
	}
	if freed := h.p.SpillBody(b, refFor("bbbbbbbb", 3)); freed != 8 {
		t.Fatalf("freed %d, want 8", freed)
	}
	h.check()
	if freed := h.p.SpillBody(b, refFor("bbbbbbbb", 3)); freed != 0 {
		t.Fatalf("spilling a stored body again freed %d", freed)
	}
	if got := h.p.ResidentPayloadBytes(); got != 4 {
		t.Fatalf("resident %d after the spill, want 4", got)
	}
	h.subscribe(1, 10, false)
	ds := h.takeDeliveries()
	if len(ds) != 2 || ds[0].Offset != a || ds[1].Offset != b {
		t.Fatalf("deliveries %+v", ds)
	}
	if string(ds[0].Body.Payload) != "aaaa" || ds[0].Body.IsStored() {
		t.Fatalf("the resident body changed: %+v", ds[0].Body)
	}
	if ds[1].Body.Payload != nil || ds[1].Body.Ref != refFor("bbbbbbbb", 3) {
		t.Fatalf("the spilled body is not delivered as stored: %+v", ds[1].Body)
	}
	h.ack(1, ds[0].Tag, ds[1].Tag)
	if got := h.p.ResidentPayloadBytes(); got != 0 || h.p.Live() != 0 {
		t.Fatalf("after acks: resident %d live %d", got, h.p.Live())
	}
	if freed := h.p.SpillBody(a, refFor("aaaa", 1)); freed != 0 {
		t.Fatalf("spilling a settled message freed %d", freed)
	}
}

func TestSpillKeepsDeliveriesAlreadyHandedOut(t *testing.T) {
	h := newHarness(t)
	off := h.publish("payload")
	h.subscribe(1, 10, false)
	ds := h.takeDeliveries()
	h.p.SpillBody(off, refFor("payload", 9))
	if string(ds[0].Body.Payload) != "payload" {
		t.Fatal("a spill changed a body a delivery holds")
	}
	h.nack(1, true, 0, ds[0].Tag)
	again := h.takeDeliveries()
	if len(again) != 1 || !again[0].Body.IsStored() {
		t.Fatalf("the redelivery does not carry the stored body: %+v", again)
	}
}

func TestSnapshotCarriesStoredBodies(t *testing.T) {
	h := newHarness(t)
	h.publish("one")
	two := h.publish("twotwo")
	h.publish("three")
	h.p.SpillBody(two, refFor("twotwo", 5))
	snap := h.p.Snapshot()
	p, err := Recover(h.cfg, snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Snapshot(), snap) {
		t.Fatal("snapshot of the restored partition differs")
	}
	if got := p.ResidentPayloadBytes(); got != int64(len("one")+len("three")) {
		t.Fatalf("restored resident bytes %d", got)
	}
	if file, ok := p.LowestStoredFile(); !ok || file != 5 {
		t.Fatalf("lowest stored file %d %v, want 5", file, ok)
	}
}

func TestSnapshotV1StillReads(t *testing.T) {
	h := newHarness(t)
	h.publish("one")
	h.publish("two")
	// An FSN1 snapshot is FSN2 without the per-message flag bytes; build
	// one by hand from a partition with no stored body.
	v2 := h.p.Snapshot()
	p, err := Recover(h.cfg, toSnapshotV1(t, h.p), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Snapshot(), v2) {
		t.Fatal("an FSN1 snapshot restores to a different state")
	}
}

// toSnapshotV1 encodes p's state the way FSN1 did (no stored bodies).
func toSnapshotV1(t *testing.T, p *Partition) []byte {
	t.Helper()
	v2 := p.Snapshot()
	// Re-encode: FSN1 = FSN2 with the magic changed and each message's
	// flag byte (always inline here) removed. Walk with the reader to find
	// the flag positions.
	var out []byte
	out = append(out, snapshotMagicV1[:]...)
	r := reader{b: v2[4:]}
	start := len(v2) - len(r.b)
	r.u64()
	r.u64()
	r.u64()
	r.u64()
	r.settings()
	r.optTarget()
	count := r.u64()
	out = append(out, v2[start:len(v2)-len(r.b)]...)
	for i := uint64(0); i < count; i++ {
		from := len(v2) - len(r.b)
		r.u64()
		r.u8()
		r.u8()
		r.u32()
		r.u64()
		r.u64()
		r.u64()
		r.body()
		out = append(out, v2[from:len(v2)-len(r.b)]...)
		if flag := r.u8(); flag != snapshotBodyInline {
			t.Fatalf("flag %d", flag)
		}
	}
	if r.bad || len(r.b) != 0 {
		t.Fatal("could not walk the snapshot")
	}
	return out
}

func TestDeadLetterCopyOfStoredBodyKeepsTheRef(t *testing.T) {
	h := newHarness(t)
	declare(h, &DLQPolicy{Kind: DLQCustom, Target: DLQTarget{Topic: "dead"}}, nil, nil)
	off := h.publish("doomed!")
	h.p.SpillBody(off, refFor("doomed!", 11))
	h.subscribe(1, 1, false)
	ds := h.takeDeliveries()
	h.nack(1, false, 0, ds[0].Tag)
	if len(h.deadLetters) != 1 {
		t.Fatalf("dead letters %+v", h.deadLetters)
	}
	if body := h.deadLetters[0].Body; !body.IsStored() || body.Ref != refFor("doomed!", 11) || body.Payload != nil {
		t.Fatalf("dead-letter copy %+v does not point at the stored payload", body)
	}
}

func TestPublishEntryOfStoredBodyIsRefused(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("encoding a publish entry with a stored body did not panic")
		}
	}()
	AppendEntry(nil, &Entry{Kind: EntryPublish, Body: &Body{Ref: refFor("x", 1)}})
}
