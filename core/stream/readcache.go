package stream

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
)

// The read cache: the records of recent log reads, kept so that
// subscriptions catching up over the same stretch of the log share reads.
//
// A pack of readers starting at the same offset (a fan-out replaying a
// stream, consumers restarting after an outage) would otherwise read and
// decode every entry once per reader; with the cache the first read of a
// stretch serves them all, and a read in flight is joined rather than
// repeated (see requestRead). It is volatile and derived: it holds only
// durable records read back from the log, so dropping it at any moment
// changes which reads are issued, never what is delivered.
//
// Invariants:
//   - it holds only durable, retained records (offset < durableOffsetEnd
//     when cached; retention drops the ones below the oldest offset);
//   - bytes, charged as the ring charges, stay within ReadCacheBytesMax,
//     except that the newest record always stays; eviction is oldest-cached
//     first (insertion order), so it is deterministic;
//   - an offset is cached at most once.

// cachedRecord is one record of a log read, with the log index holding it
// (a subscription served from the cache reads on from index+1).
type cachedRecord struct {
	index uint64
	atMs  int64
	body  *core.Body
}

// readCache maps offsets to records read from the log, evicting in
// insertion order.
type readCache struct {
	recs  map[uint64]cachedRecord
	fifo  []uint64 // offsets in insertion order, from head on
	head  int
	bytes int64
}

// get returns the cached record at offset, if any.
func (c *readCache) get(offset uint64) (cachedRecord, bool) {
	rec, ok := c.recs[offset]
	// Broken on purpose under the mutant: the record before it, if cached.
	if ok && offset > 0 && mutant.On(mutant.StreamReadCacheStale) {
		if prev, held := c.recs[offset-1]; held {
			return prev, true
		}
	}
	return rec, ok
}

// put caches the record at offset (a no-op when it is cached already) and
// evicts the oldest-cached records while over budgetBytes.
func (c *readCache) put(offset uint64, rec cachedRecord, budgetBytes int64) {
	if c.recs == nil {
		c.recs = make(map[uint64]cachedRecord)
	}
	if _, dup := c.recs[offset]; dup {
		return
	}
	c.recs[offset] = rec
	c.fifo = append(c.fifo, offset)
	c.bytes += recordChargeBytes(rec.body)
	for len(c.recs) > 1 && c.bytes > budgetBytes {
		c.evictOldest()
	}
	// Compact the FIFO once its dead front outweighs the live part, so it
	// stays within twice the records held.
	if c.head > len(c.fifo)/2 {
		n := copy(c.fifo, c.fifo[c.head:])
		clear(c.fifo[n:]) // not needed for GC (uint64s), kept tidy
		c.fifo, c.head = c.fifo[:n], 0
	}
	assertTrue(len(c.fifo)-c.head == len(c.recs), "every cached record has one FIFO slot")
}

// evictOldest drops the record cached first.
func (c *readCache) evictOldest() {
	assertTrue(c.head < len(c.fifo), "evict from a non-empty cache")
	offset := c.fifo[c.head]
	c.head++
	rec := c.recs[offset]
	delete(c.recs, offset)
	c.bytes -= recordChargeBytes(rec.body)
	assertTrue(c.bytes >= 0, "cache bytes never go negative")
}

// dropBelow evicts every record below offset (retention moved the oldest
// retained offset). Records are cached in read order, which is offset order
// within a read but not across reads, so it filters the whole FIFO.
func (c *readCache) dropBelow(offset uint64) {
	if len(c.recs) == 0 {
		return
	}
	live := c.fifo[:0]
	for _, off := range c.fifo[c.head:] {
		if off >= offset {
			live = append(live, off)
			continue
		}
		c.bytes -= recordChargeBytes(c.recs[off].body)
		delete(c.recs, off)
	}
	c.fifo, c.head = live, 0
	assertTrue(len(c.fifo) == len(c.recs), "every cached record has one FIFO slot")
	assertTrue(c.bytes >= 0, "cache bytes never go negative")
}

// reset drops every record (and the FIFO's memory).
func (c *readCache) reset() {
	*c = readCache{}
}

// len is the number of cached records.
func (c *readCache) len() int { return len(c.recs) }
