package core

import "fmt"

// Config holds every limit and default of one queue partition. Invariants:
//   - defaults live only in DefaultConfig; call sites pass full configs;
//   - Validate checks relations and changes nothing;
//   - every buffer, map and loop in the partition is bounded by a field here.
type Config struct {
	// Queue is the partition's identity; dead-letter headers name it.
	Queue QueueID
	// Epoch stamps every entry this partition appends. Standalone brokers use 1;
	// a cluster controller bumps it on every ownership change.
	Epoch uint64

	// LeaseMs is how long a delivery stays inflight without a settle before it
	// returns to ready (SPEC delivery.inflight_ttl_ms).
	LeaseMs int64
	// MaxRetriesDefault is dlq_max_retries for a queue that declares none.
	MaxRetriesDefault uint32

	// PayloadBytesMax bounds one message body.
	PayloadBytesMax int
	// HeaderCountMax and HeaderBytesMax bound one message's user headers.
	HeaderCountMax int
	HeaderBytesMax int
	// QueueDepthMax bounds live messages (ready, delayed, inflight, pending
	// dead-letter). A publish beyond it is refused with ErrQueueFull.
	QueueDepthMax int
	// SubscriptionsMax bounds concurrent subscriptions on the partition.
	SubscriptionsMax int
	// PrefetchMax clamps a subscription's prefetch from above (it is clamped
	// to at least 1 from below, PROTOCOL.md §5.6).
	PrefetchMax uint32
	// SettleBatchMax bounds the tags in one ack or nack.
	SettleBatchMax int
	// UnpersistedEntriesMax bounds entries handed to storage and not yet
	// reported durable; past it publishes get ErrStorageBehind (backpressure).
	UnpersistedEntriesMax int
	// ExpiryBatchMax bounds lease, delay and TTL expiries handled in one step
	// (SPEC delivery.expiry_batch_max); the rest wait for the next wake-up.
	ExpiryBatchMax int
	// DeliveryBatchMax bounds deliveries handed out in one step.
	DeliveryBatchMax int
	// TagFloor: delivery tags are at least this. Tags handed out from a log
	// tail that a crash lost would otherwise be handed out again after
	// recovery; a driver that persists a boot counter sets the floor from it
	// (e.g. boot << 40) so a tag never names two deliveries. 0 = no floor.
	TagFloor uint64
}

// QueueID names one partition of one queue. Group "" is the default namespace.
type QueueID struct {
	Topic     string
	Group     string
	Partition uint32
}

func (q QueueID) String() string {
	if q.Group == "" {
		return fmt.Sprintf("%s/%d", q.Topic, q.Partition)
	}
	return fmt.Sprintf("%s/%s/%d", q.Topic, q.Group, q.Partition)
}

// DefaultConfig returns the defaults of SPEC §1, §2 and §14 for queue id.
func DefaultConfig(id QueueID) Config {
	return Config{
		Queue:                 id,
		Epoch:                 1,
		LeaseMs:               30_000,
		MaxRetriesDefault:     5,
		PayloadBytesMax:       16 << 20,
		HeaderCountMax:        128,
		HeaderBytesMax:        64 << 10,
		QueueDepthMax:         10_000_000,
		SubscriptionsMax:      4096,
		PrefetchMax:           65_536,
		SettleBatchMax:        8192,
		UnpersistedEntriesMax: 1 << 20,
		ExpiryBatchMax:        8192,
		DeliveryBatchMax:      65_536,
	}
}

// Validate reports the first relation the config breaks. It changes nothing.
func (c Config) Validate() error {
	switch {
	case ValidateName(c.Queue.Topic) != nil:
		return fmt.Errorf("config: queue topic %q: %w", c.Queue.Topic, ErrInvalidName)
	case c.Queue.Group != "" && ValidateName(c.Queue.Group) != nil:
		return fmt.Errorf("config: queue group %q: %w", c.Queue.Group, ErrInvalidName)
	case c.Epoch == 0:
		return fmt.Errorf("config: Epoch must be at least 1")
	case c.LeaseMs < 1:
		return fmt.Errorf("config: LeaseMs must be at least 1")
	case c.PayloadBytesMax < 1 || c.HeaderCountMax < 0 || c.HeaderBytesMax < 0:
		return fmt.Errorf("config: payload and header limits must be positive")
	case c.QueueDepthMax < 1 || c.SubscriptionsMax < 1 || c.PrefetchMax < 1:
		return fmt.Errorf("config: QueueDepthMax, SubscriptionsMax and PrefetchMax must be at least 1")
	case c.SettleBatchMax < 1 || c.UnpersistedEntriesMax < 1:
		return fmt.Errorf("config: SettleBatchMax and UnpersistedEntriesMax must be at least 1")
	case c.ExpiryBatchMax < 1 || c.DeliveryBatchMax < 1:
		return fmt.Errorf("config: ExpiryBatchMax and DeliveryBatchMax must be at least 1")
	}
	return nil
}
