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
	h := packHarness(t, nil)
	h.subscribe(Subscribe{SubID: 1, Start: Start{Kind: StartEarliest}})
	h.answerReads()
	if got := h.delivered(1); !slices.Equal(got, offsets(0, 40)) {
		t.Fatalf("leader got %v", got)
	}
	// A reader arriving later over the same stretch reads nothing.
	h.subscribe(Subscribe{SubID: 2, Start: Start{Kind: StartEarliest}})
	if len(h.reads) != 0 {
		t.Fatalf("the trailing reader read %v", h.reads)
	}
	if got := h.delivered(2); !slices.Equal(got, offsets(0, 40)) {
		t.Fatalf("trailing reader got %v", got)
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
