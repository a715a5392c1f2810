package storage

import (
	"fmt"
	"time"
)

// Options and limits of one Log and its Committer. Invariants:
//   - defaults live only in DefaultOptions; call sites pass full options;
//   - Validate checks relations and changes nothing;
//   - every buffer this package keeps is bounded by a field here.

// CorruptionPolicy says what Open does with a bad record that is not a torn
// tail (a torn tail is always trimmed: it only ever holds unsynced writes).
// Values map to SPEC §7 recovery.on_mismatch: quarantine and refuse use
// CorruptionRefuse, ignore and the admin repair use CorruptionTruncate.
type CorruptionPolicy uint8

const (
	// CorruptionRefuse leaves every file untouched and returns a
	// *CorruptionError naming the cut.
	CorruptionRefuse CorruptionPolicy = 1
	// CorruptionTruncate cuts the log just before the bad record, as for a
	// torn tail, and reports the cut in Recovered.
	CorruptionTruncate CorruptionPolicy = 2
)

// Options configures a Log.
type Options struct {
	// SegmentSizeBytes is tidwall's target segment size. tidwall holds the
	// whole tail segment in memory (and copies it as it grows), so this is
	// also about the memory one open log keeps.
	SegmentSizeBytes int
	// BatchEntriesMax and BatchBytesMax bound one tidwall WriteBatch (Append
	// splits longer inputs) and one Committer round (one fsync). Past a few
	// thousand entries an fsync is amortized already, and a bigger round
	// only makes its first entry wait longer. tidwall's Batch keeps its
	// buffer for reuse, so they also bound what it retains (plus one record,
	// which may be larger).
	BatchEntriesMax int
	BatchBytesMax   int
	// PendingEntriesMax bounds entries submitted to a Committer and not yet
	// taken by its writer; Submit blocks beyond it (backpressure). A few
	// rounds' worth keeps the writer fed while bounding queueing delay.
	PendingEntriesMax int
	// DeferrableWaitMax and DeferrableEntriesMax: a Committer queue of only
	// deferrable entries (settles, leases, requeues) waits this long, or
	// until this many are queued, for an urgent entry to share a round
	// with (committer.go). It bounds how much later an ack becomes durable.
	DeferrableWaitMax    time.Duration
	DeferrableEntriesMax int
	// OnCorruption is what Open does with corruption that is not a torn tail.
	OnCorruption CorruptionPolicy
	// CutFromIndex, when not 0, makes Open treat the record at that index
	// (if the log holds it) as the first bad record (CutRequested): core
	// recovery refused its entry, and a repair (SPEC 7) cuts there. Only
	// with CorruptionTruncate; every record before it is kept.
	CutFromIndex uint64
	// MarkCleanClose makes Close leave a clean-close mark (closedmark.go)
	// so that the next Open takes damage to the last round for corruption,
	// not a torn tail. Open honours a mark whatever this says.
	MarkCleanClose bool
	// BlobPayloadBytesMin: a publish payload at least this long is written
	// to the blob files (blob.go) and its tidwall record holds a reference;
	// shorter ones stay inline, where a reference (24 bytes) and a second
	// write would cost more than the copies tidwall makes.
	BlobPayloadBytesMin int
	// BlobFileSizeBytes is the size at which a blob file is closed and the
	// next one started. A blob file is deleted only when a snapshot covers
	// every entry referring to it, so this is the granularity of reclaiming
	// payload bytes; one payload larger than it gets a file of its own.
	BlobFileSizeBytes int64
}

// DefaultOptions returns the defaults. Corruption is refused by default, as
// SPEC §7 quarantines by default: cutting confirmed data is an operator's call.
// Segments are 1 MiB: tidwall keeps its tail segment in memory and regrows
// it by append as it fills, and each regrowth of a large buffer faults in
// fresh pages at ~12 us each on our VM, stalling the round that pays for
// it. With payloads in blob files a record is ~100 bytes, so 1 MiB still
// holds ~10,000 entries; paced end to end at 5,000/s the p99 fell from
// 28-31 ms (8 MiB) to 5.6-8.8 ms (1 MiB), with throughput unchanged within
// noise (docs/PERF-LOG.md). It also caps what an open log holds in memory
// and the rewrite a snapshot's TruncateFront may cost.
func DefaultOptions() Options {
	return Options{
		SegmentSizeBytes:  1 << 20,
		BatchEntriesMax:   4096,
		BatchBytesMax:     8 << 20,
		PendingEntriesMax: 4 * 4096,
		// Two milliseconds: several publish rounds at moderate rates, far
		// below any lease.
		DeferrableWaitMax:    2 * time.Millisecond,
		DeferrableEntriesMax: 1024,
		OnCorruption:         CorruptionRefuse,
		BlobPayloadBytesMin:  256,
		BlobFileSizeBytes:    64 << 20,
	}
}

// Validate reports the first rule the options break. It changes nothing.
func (o Options) Validate() error {
	switch {
	case o.SegmentSizeBytes < 1:
		return fmt.Errorf("logstore options: SegmentSizeBytes must be at least 1")
	case o.BatchEntriesMax < 1 || o.BatchBytesMax < 1:
		return fmt.Errorf("logstore options: BatchEntriesMax and BatchBytesMax must be at least 1")
	case o.PendingEntriesMax < 1:
		return fmt.Errorf("logstore options: PendingEntriesMax must be at least 1")
	case o.DeferrableWaitMax < 0 || o.DeferrableEntriesMax < 1:
		return fmt.Errorf("logstore options: DeferrableWaitMax must not be negative and DeferrableEntriesMax must be at least 1")
	case o.OnCorruption != CorruptionRefuse && o.OnCorruption != CorruptionTruncate:
		return fmt.Errorf("logstore options: OnCorruption %d is not a policy", o.OnCorruption)
	case o.CutFromIndex != 0 && o.OnCorruption != CorruptionTruncate:
		return fmt.Errorf("logstore options: CutFromIndex needs OnCorruption CorruptionTruncate")
	case o.BlobPayloadBytesMin < 1:
		return fmt.Errorf("logstore options: BlobPayloadBytesMin must be at least 1")
	case o.BlobFileSizeBytes < 1:
		return fmt.Errorf("logstore options: BlobFileSizeBytes must be at least 1")
	}
	return nil
}
