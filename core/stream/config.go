package stream

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// Config holds every limit of one stream partition. Invariants (as for
// core.Config):
//   - defaults live only in DefaultConfig; call sites pass full configs;
//   - Validate checks relations and changes nothing;
//   - every buffer, map and loop of the partition is bounded by a field here
//     (the segment table is bounded by retention, one entry per sealed
//     segment, see docs/streams.md "Memory").
type Config struct {
	// Stream names the partition (topic, partition; Group is unused).
	Stream core.QueueID
	// Epoch stamps every entry this partition appends (as core.Config.Epoch).
	Epoch uint64

	// SegmentRecordsMax and SegmentBytesMax seal a segment: once it holds
	// that many records or payload bytes, the next record opens a new one.
	SegmentRecordsMax uint64
	SegmentBytesMax   uint64
	// TailBytesMax bounds the tail ring (payload, headers and a fixed
	// per-record charge), which serves live subscribers without a read.
	TailBytesMax int64
	// SubWindowMax bounds the records handed to one subscription and not yet
	// credited back.
	SubWindowMax int
	// ReadBatchMax bounds the entries one Read asks for.
	ReadBatchMax int
	// ReadCacheBytesMax bounds the read cache (charged as the ring is):
	// records read back from the log, kept so that subscriptions catching
	// up over the same stretch share one read.
	ReadCacheBytesMax int64
	// CommitBatchMax bounds the cursors in one EntryCursorCommit.
	CommitBatchMax int
	// SubscriptionsMax bounds concurrent subscriptions; CursorsMax bounds
	// durable names (stored cursors and names of active subscriptions).
	SubscriptionsMax int
	CursorsMax       int
	// FilterClausesMax bounds the clauses of one subscription's filter.
	FilterClausesMax int
	// AckBatchMax bounds the offsets of one Ack.
	AckBatchMax int

	// Beyond the brief's list, the same limits as a queue partition:
	// PayloadBytesMax, HeaderCountMax and HeaderBytesMax bound one record;
	// UnpersistedEntriesMax bounds entries handed to storage and not yet
	// durable (past it publishes get ErrStorageBehind: backpressure).
	PayloadBytesMax       int
	HeaderCountMax        int
	HeaderBytesMax        int
	UnpersistedEntriesMax int
	// ReadRetryMs: after a failed or empty read, a subscription waits this
	// long before reading again, so a failing storage is not spun on.
	ReadRetryMs int64
}

// DefaultConfig returns the defaults for stream partition id.
func DefaultConfig(id core.QueueID) Config {
	return Config{
		Stream:                id,
		Epoch:                 1,
		SegmentRecordsMax:     4096,
		SegmentBytesMax:       8 << 20,
		TailBytesMax:          4 << 20,
		SubWindowMax:          1024,
		ReadBatchMax:          256,
		ReadCacheBytesMax:     4 << 20,
		CommitBatchMax:        1024,
		SubscriptionsMax:      4096,
		CursorsMax:            65_536,
		FilterClausesMax:      16,
		AckBatchMax:           8192,
		PayloadBytesMax:       16 << 20,
		HeaderCountMax:        128,
		HeaderBytesMax:        64 << 10,
		UnpersistedEntriesMax: 1 << 20,
		ReadRetryMs:           100,
	}
}

// Validate reports the first relation the config breaks. It changes nothing.
func (c Config) Validate() error {
	switch {
	case core.ValidateName(c.Stream.Topic) != nil:
		return fmt.Errorf("stream config: topic %q: %w", c.Stream.Topic, core.ErrInvalidName)
	case c.Epoch == 0:
		return fmt.Errorf("stream config: Epoch must be at least 1")
	case c.SegmentRecordsMax < 1 || c.SegmentBytesMax < 1:
		return fmt.Errorf("stream config: SegmentRecordsMax and SegmentBytesMax must be at least 1")
	case c.TailBytesMax < 1 || c.ReadCacheBytesMax < 1:
		return fmt.Errorf("stream config: TailBytesMax and ReadCacheBytesMax must be at least 1")
	case c.SubWindowMax < 1 || c.ReadBatchMax < 1 || c.CommitBatchMax < 1:
		return fmt.Errorf("stream config: SubWindowMax, ReadBatchMax and CommitBatchMax must be at least 1")
	case c.SubscriptionsMax < 1 || c.CursorsMax < 1 || c.FilterClausesMax < 0 || c.AckBatchMax < 1:
		return fmt.Errorf("stream config: SubscriptionsMax, CursorsMax and AckBatchMax must be at least 1")
	case c.PayloadBytesMax < 1 || c.HeaderCountMax < 0 || c.HeaderBytesMax < 0:
		return fmt.Errorf("stream config: payload and header limits must be positive")
	case c.UnpersistedEntriesMax < 1 || c.ReadRetryMs < 1:
		return fmt.Errorf("stream config: UnpersistedEntriesMax and ReadRetryMs must be at least 1")
	}
	return nil
}

// validateSettings checks declared settings (PROTOCOL 5.14).
func validateSettings(s core.StreamSettings) error {
	if s.Tier > core.TierDurable || s.PartitionCount == 0 {
		return fmt.Errorf("stream settings: tier %d, partition count %d: %w", s.Tier, s.PartitionCount, core.ErrStreamSettings)
	}
	return nil
}
