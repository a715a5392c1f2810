package stream

import (
	"slices"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// A log older than the ring, read by a pack of subscriptions.
func packHarness(t *testing.T, tune func(*Config)) *harness {
	h := newHarness(t, durableSettings(), func(c *Config) {
		c.TailBytesMax = 1 // only the newest record stays in the ring
		c.ReadBatchMax = 8
		c.SubWindowMax = 64
		if tune != nil {
			tune(c)
		}
	})
	h.publishN(40)
	return h
}

func TestPackOfReadersSharesOneReadPerStretch(t *testing.T) {
	h := packHarness(t, nil)
	for id := uint64(1); id <= 4; id++ {
		h.subscribe(Subscribe{SubID: id, Start: Start{Kind: StartEarliest}})
	}
	issued := 0
	for rounds := 0; len(h.reads) > 0; rounds++ {
		if rounds > 1000 {
			t.Fatal("reads never end")
		}
		issued += len(h.reads)
		if len(h.reads) != 1 {
			t.Fatalf("%d reads in flight for readers in step: %v", len(h.reads), h.reads)
		}
		r := h.reads[0]
		h.reads = h.reads[1:]
		h.step(h.readDone(r))
	}
	for id := uint64(1); id <= 4; id++ {
		if got := h.delivered(id); !slices.Equal(got, offsets(0, 40)) {
			t.Fatalf("reader %d got %v", id, got)
		}
	}
	// Records 0..38 at indexes 2..40 (the declare is entry 1, the ring
	// holds record 39), 8 entries a read: 5 reads, not 20.
	if issued != 5 {
		t.Fatalf("%d reads issued for four readers of 41 entries", issued)
	}
}

func TestTrailingReaderIsServedFromTheCache(t *testing.T) {
	// The leader's window (8) keeps it behind after each read of 8.
	h := packHarness(t, func(c *Config) { c.SubWindowMax = 8 })
	h.subscribe(Subscribe{SubID: 1, Start: Start{Kind: StartEarliest}})
	for i := 0; i < 3; i++ { // three stretches read; the leader is still behind
		h.answerReads()
		h.credit(1, h.p.subs[1].window)
	}
	h.reads = nil // the leader's next read stays unanswered
	lead := h.delivered(1)
	if len(lead) != 24 {
		t.Fatalf("leader got %v", lead)
	}
	// A reader arriving now over the same stretch reads nothing for it.
	h.subscribe(Subscribe{SubID: 2, Start: Start{Kind: StartEarliest}, Filter: nil})
	if got := h.delivered(2); !slices.Equal(got, offsets(0, 8)) || len(h.reads) != 0 {
		t.Fatalf("trailing reader got %v, reads %v", got, h.reads)
	}
	h.credit(2, 8)
	if got := h.delivered(2); !slices.Equal(got, offsets(8, 16)) || len(h.reads) != 0 {
		t.Fatalf("trailing reader then got %v, reads %v", got, h.reads)
	}
}

func TestReadCacheIsDroppedOnceNobodyIsBehind(t *testing.T) {
	h := packHarness(t, nil)
	h.subscribe(Subscribe{SubID: 1, Start: Start{Kind: StartEarliest}})
	h.subscribe(Subscribe{SubID: 2, Start: Start{Kind: StartEarliest}})
	h.answerReads()
	if got := h.delivered(1); len(got) != 40 {
		t.Fatalf("reader 1 got %d records", len(got))
	}
	if n := h.p.cache.len(); n != 0 {
		t.Fatalf("both readers caught up, yet the cache holds %d records", n)
	}
}

// TestShortJoinedReadThenRetentionDoesNotStall: a read answered short (the
// driver caps a read's bytes) must leave a joined waiter reading from its
// own segment, not from an index retention may drop while its next offset
// is kept; and a truncation forgets read positions in what it dropped.
// (Found by review: the waiter retried a dropped index forever.)
func TestShortJoinedReadThenRetentionDoesNotStall(t *testing.T) {
	h := newHarness(t, core.StreamSettings{Tier: core.TierDurable, PartitionCount: 1, MaxAgeMs: 5000}, func(c *Config) {
		c.TailBytesMax, c.ReadBatchMax, c.SegmentRecordsMax = 1, 8, 4
	})
	h.publishN(4) // segment A: offsets 0-3 at indexes 2-5
	h.advance(3000)
	h.publishN(8)                                                               // B: 4-7 at 6-9, C: 8-11 at 10-13
	h.subscribe(Subscribe{SubID: 1, Start: Start{Kind: StartEarliest}})         // reads from index 2
	h.subscribe(Subscribe{SubID: 2, Start: Start{Kind: StartOffset, Value: 5}}) // would read from 6: joins
	if len(h.reads) != 1 {
		t.Fatalf("reads %+v (subscription 2 should have joined)", h.reads)
	}
	done := h.readDone(h.reads[0])
	h.reads = nil
	done.Entries = done.Entries[:3] // short: indexes 2-4
	h.step(done)
	h.step(&Unsubscribe{NowMs: h.nowMs, Ref: 1, SubID: 1})
	h.advance(2001) // A ages out
	if h.truncate == nil {
		t.Fatal("no truncation")
	}
	tr := *h.truncate
	var kept []core.Entry
	for _, e := range h.log {
		if e.Index > tr.UpToIndex {
			kept = append(kept, e)
		}
	}
	h.log = kept // storage truncated, and answers reads before SnapshotDone
	h.answerReads()
	h.truncate = nil
	h.step(&SnapshotDone{NowMs: h.nowMs, Index: tr.UpToIndex})
	for i := 0; i < 5; i++ {
		h.advance(h.cfg.ReadRetryMs)
		h.answerReads()
	}
	if got := h.delivered(2); !slices.Equal(got, offsets(5, 12)) {
		t.Fatalf("subscription 2 (next %d, read index %d) got %v", h.p.subs[2].next, h.p.subs[2].readIndex, got)
	}
}

func TestCacheTooSmallForARecordStillMakesProgress(t *testing.T) {
	// Every record is bigger than the cache: each read's records are
	// evicted at once, and waiters must still get them (from the answer).
	h := packHarness(t, func(c *Config) { c.ReadCacheBytesMax = 1 })
	for id := uint64(1); id <= 3; id++ {
		h.subscribe(Subscribe{SubID: id, Start: Start{Kind: StartEarliest}})
	}
	h.answerReads()
	for id := uint64(1); id <= 3; id++ {
		if got := h.delivered(id); !slices.Equal(got, offsets(0, 40)) {
			t.Fatalf("reader %d got %v", id, got)
		}
	}
	if n := h.p.cache.len(); n > 1 {
		t.Fatalf("the cache holds %d records over its budget", n)
	}
}

func TestReadCacheStaysWithinBudget(t *testing.T) {
	var c readCache
	body := &core.Body{Payload: make([]byte, 100)}
	budget := 5 * recordChargeBytes(body)
	for off := uint64(0); off < 50; off++ {
		c.put(off, cachedRecord{index: off + 2, body: body}, budget)
		c.put(off, cachedRecord{index: off + 2, body: body}, budget) // again: a no-op
		if c.bytes > budget || c.len() > 5 {
			t.Fatalf("after %d: %d bytes, %d records", off, c.bytes, c.len())
		}
	}
	for off := uint64(45); off < 50; off++ {
		if rec, ok := c.get(off); !ok || rec.index != off+2 {
			t.Fatalf("newest record %d missing (%v)", off, ok)
		}
	}
	if _, ok := c.get(44); ok {
		t.Fatal("an evicted record is still there")
	}
	c.dropBelow(48)
	if c.len() != 2 || c.bytes != 2*recordChargeBytes(body) {
		t.Fatalf("after dropBelow: %d records, %d bytes", c.len(), c.bytes)
	}
}

func TestRetentionForgetsReadsOfDroppedEntries(t *testing.T) {
	h := newHarness(t, core.StreamSettings{Tier: core.TierDurable, PartitionCount: 1, MaxRecords: 4}, func(c *Config) {
		c.TailBytesMax, c.ReadBatchMax, c.SegmentRecordsMax = 1, 2, 4
	})
	h.publishN(3)
	h.subscribe(Subscribe{SubID: 1, Start: Start{Kind: StartEarliest}})
	if len(h.reads) != 1 {
		t.Fatalf("reads %v", h.reads)
	}
	stale := h.reads[0]
	h.reads = nil
	h.publishN(10) // seals segments past the bound: retention runs
	if h.truncate == nil {
		t.Fatal("no truncation")
	}
	h.saveSnapshot()
	if len(h.p.reads) != 0 && h.p.reads[0].token == stale.Token {
		t.Fatal("a read of dropped entries is still in flight")
	}
	// The stale answer is ignored; the clamped reader reads again.
	h.step(&ReadDone{NowMs: h.nowMs, SubID: 1, Token: stale.Token, Err: core.ErrStorageBehind})
	h.answerReads()
	got := h.delivered(1)
	if len(got) == 0 || got[0] != h.p.Oldest() || got[len(got)-1] != 12 {
		t.Fatalf("after retention the reader got %v (oldest %d)", got, h.p.Oldest())
	}
}
