package node

import (
	"bytes"
	"errors"
	"testing"

	"github.com/fibril-go/fibril/core"
)

func sampleRecords() []*record {
	dlq := &core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "dead", Group: "g"}}
	return []*record{
		{kind: recordBoot, boot: 3, ownerID: [16]byte{1, 2, 3}},
		{kind: recordQueue, queue: &catalogEntry{key: queueKey{Topic: "jobs"}, partitions: 1}},
		{kind: recordQueue, queue: &catalogEntry{key: queueKey{Topic: "jobs", Group: "g1"}, partitions: 4,
			settings: catalogSettings{DLQ: dlq, MaxRetries: u32(2), DefaultTTLMs: i64(1500)}}},
		{kind: recordSkeleton, skeleton: &skeleton{clientID: [16]byte{9}, token: [16]byte{8}, savedAtMs: 123,
			subs: []SkeletonSub{{Queue: core.QueueID{Topic: "jobs", Group: "g1", Partition: 3}, Prefetch: 10, AutoAck: true}}}},
		{kind: recordSkeletonRemoved, removed: [16]byte{9}},
		{kind: recordSessionIDs, sessionIDCeiling: 3 << 16},
		{kind: recordStream, stream: &streamEntry{topic: "ticks", settings: core.StreamSettings{
			Tier: core.TierSpeculative, MaxAgeMs: 60_000, MaxBytes: 1 << 30, MaxRecords: 7, PartitionCount: 3}}},
	}
}

// TestRecordsRoundTripAndRefuseEveryTruncation: each kind decodes to what
// was encoded, and every proper prefix of it, or it with a byte more, is
// an error (storage's CRC catches torn records; this catches the rest).
func TestRecordsRoundTripAndRefuseEveryTruncation(t *testing.T) {
	for _, r := range sampleRecords() {
		data := appendRecord(nil, r)
		back, err := decodeRecord(data)
		if err != nil {
			t.Fatalf("kind %d: %v", r.kind, err)
		}
		if again := appendRecord(nil, back); !bytes.Equal(again, data) {
			t.Fatalf("kind %d does not round-trip", r.kind)
		}
		for cut := 0; cut < len(data); cut++ {
			if _, err := decodeRecord(data[:cut]); !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("kind %d cut at %d of %d: %v", r.kind, cut, len(data), err)
			}
		}
		if _, err := decodeRecord(append(append([]byte(nil), data...), 0)); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("kind %d with a trailing byte: %v", r.kind, err)
		}
	}
}

// TestRecordsRefuseWhatNoEncoderWrites: values a declare would refuse are
// refused on the way back in too.
func TestRecordsRefuseWhatNoEncoderWrites(t *testing.T) {
	bad := []struct {
		name string
		r    *record
	}{
		{"bad topic", &record{kind: recordQueue, queue: &catalogEntry{key: queueKey{Topic: "Bad"}, partitions: 1}}},
		{"group default", &record{kind: recordQueue, queue: &catalogEntry{key: queueKey{Topic: "a", Group: "default"}, partitions: 1}}},
		{"no partitions", &record{kind: recordQueue, queue: &catalogEntry{key: queueKey{Topic: "a"}}}},
		{"bad target", &record{kind: recordQueue, queue: &catalogEntry{key: queueKey{Topic: "a"}, partitions: 1,
			settings: catalogSettings{DLQ: &core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: ".x"}}}}}},
		{"target without custom", &record{kind: recordQueue, queue: &catalogEntry{key: queueKey{Topic: "a"}, partitions: 1,
			settings: catalogSettings{DLQ: &core.DLQPolicy{Kind: core.DLQGlobal, Target: core.DLQTarget{Topic: "x"}}}}}},
		{"negative TTL", &record{kind: recordQueue, queue: &catalogEntry{key: queueKey{Topic: "a"}, partitions: 1,
			settings: catalogSettings{DefaultTTLMs: i64(-1)}}}},
		{"boot 0", &record{kind: recordBoot}},
		{"session ids 0", &record{kind: recordSessionIDs}},
		{"session ids past the budget", &record{kind: recordSessionIDs, sessionIDCeiling: sessionSeqMax + 1}},
	}
	for _, c := range bad {
		if _, err := decodeRecord(appendRecord(nil, c.r)); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("%s: accepted (%v)", c.name, err)
		}
	}
	data := appendRecord(nil, sampleRecords()[0])
	for i, b := range [][]byte{{0xFE, 1, 1}, {recordMagic, 2, 1}, {recordMagic, recordVersion, 99}} {
		if _, err := decodeRecord(append(b, data[3:]...)); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("header %d accepted: %v", i, err)
		}
	}
}

// TestSnapshotRoundTripsAndIsDeterministic: equal states give equal bytes,
// whatever order their maps were filled in.
func TestSnapshotRoundTripsAndIsDeterministic(t *testing.T) {
	a, b := newDurableState(), newDurableState()
	recs := sampleRecords()[:4]
	for i, r := range recs {
		a.apply(uint64(i+1), r)
	}
	// b gets the same state in another order (boot first: it is the index).
	b.apply(1, recs[0])
	b.apply(2, recs[3])
	b.apply(3, recs[2])
	b.apply(4, recs[1])
	sa, sb := appendSnapshot(nil, &a), appendSnapshot(nil, &b)
	if !bytes.Equal(sa, sb) {
		t.Fatal("equal states encode differently")
	}
	back, err := decodeSnapshot(sa)
	if err != nil || !bytes.Equal(appendSnapshot(nil, &back), sa) {
		t.Fatalf("snapshot round trip: %v", err)
	}
	for cut := 0; cut < len(sa); cut++ {
		if _, err := decodeSnapshot(sa[:cut]); err == nil {
			t.Fatalf("snapshot cut at %d accepted", cut)
		}
	}
}

// TestSnapshotVersion1StaysReadable: a snapshot written before the session
// id ceiling existed decodes with ceiling 0.
func TestSnapshotVersion1StaysReadable(t *testing.T) {
	s := newDurableState()
	for i, r := range sampleRecords()[:4] {
		s.apply(uint64(i+1), r)
	}
	v3 := appendSnapshot(nil, &s)
	// magic 4, version 1, last index 8, boot 8, owner 16: the ceiling follows;
	// version 1 (as 2) ends before the stream list (its count, 0 here).
	const ceilingAt = 4 + 1 + 8 + 8 + 16
	v1 := append(append([]byte(nil), v3[:ceilingAt]...), v3[ceilingAt+8:len(v3)-4-emptyRuntimeSnapshotBytes]...)
	v1[4] = snapshotVersionV1
	back, err := decodeSnapshot(v1)
	if err != nil || back.sessionIDCeiling != 0 || !bytes.Equal(appendSnapshot(nil, &back), v3) {
		t.Fatalf("version 1 snapshot: %v, ceiling %d", err, back.sessionIDCeiling)
	}
}
