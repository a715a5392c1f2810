package client

// Declaring queues (DECLARE_QUEUE, PROTOCOL §5.12-5.13).
//
// Invariants:
//   - Unset settings travel as absent, so the broker keeps the existing or default
//     value (partition count 1, DLQ discard, 5 retries, no TTL).
//   - The effective partition count from DECLARE_QUEUE_OK updates the route cache
//     at once, so the next keyed publish routes over the declared partitions.

import (
	"context"
	"fmt"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// DlqPolicy says what happens to a message that fails terminally or exhausts its
// retries.
type DlqPolicy struct {
	kind  wire.DLQPolicyKind
	topic string
	group string
}

// DlqDiscard drops dead letters (the broker default); every drop is counted.
func DlqDiscard() DlqPolicy { return DlqPolicy{kind: wire.DLQDiscard} }

// DlqGlobal sends dead letters to the operator-configured global DLQ.
func DlqGlobal() DlqPolicy { return DlqPolicy{kind: wire.DLQGlobal} }

// DlqCustom sends dead letters to topic (and group, "" for the default).
func DlqCustom(topic, group string) DlqPolicy {
	return DlqPolicy{kind: wire.DLQCustom, topic: topic, group: normalizeGroup(group)}
}

// QueueConfig describes a queue to declare; build it with NewQueueConfig and the
// chained setters.
type QueueConfig struct {
	topic          string
	group          string
	partitionCount wire.Optional[uint32]
	dlq            wire.Optional[DlqPolicy]
	dlqMaxRetries  wire.Optional[uint32]
	defaultTTL     wire.Optional[time.Duration]
}

// NewQueueConfig starts a declaration of topic in the default namespace.
func NewQueueConfig(topic string) *QueueConfig { return &QueueConfig{topic: topic} }

// Group sets the namespace ("" and "default" are the default namespace).
func (q *QueueConfig) Group(group string) *QueueConfig { q.group = group; return q }

// PartitionCount sets the number of partitions (at least 1).
func (q *QueueConfig) PartitionCount(n uint32) *QueueConfig {
	q.partitionCount = wire.Some(n)
	return q
}

// Dlq sets the dead-letter policy.
func (q *QueueConfig) Dlq(policy DlqPolicy) *QueueConfig { q.dlq = wire.Some(policy); return q }

// DlqMaxRetries sets how many retries a message gets before it is dead-lettered.
func (q *QueueConfig) DlqMaxRetries(n uint32) *QueueConfig {
	q.dlqMaxRetries = wire.Some(n)
	return q
}

// DefaultMessageTTL sets the TTL of messages published without one.
func (q *QueueConfig) DefaultMessageTTL(ttl time.Duration) *QueueConfig {
	q.defaultTTL = wire.Some(ttl)
	return q
}

// body validates q and builds the wire request.
func (q *QueueConfig) body() (wire.DeclareQueue, routeKey, error) {
	key, err := queueKey(q.topic, q.group)
	if err != nil {
		return wire.DeclareQueue{}, routeKey{}, err
	}
	req := wire.DeclareQueue{
		Topic:          key.topic,
		Group:          groupOpt(key.group),
		DLQRetriesMax:  q.dlqMaxRetries,
		PartitionCount: q.partitionCount,
	}
	if count, ok := q.partitionCount.Get(); ok && count == 0 {
		return req, key, fmt.Errorf("%w: partition count must be at least 1", ErrInvalidArgument)
	}
	if policy, ok := q.dlq.Get(); ok {
		wp := wire.DLQPolicy{Kind: policy.kind}
		if policy.kind == wire.DLQCustom {
			dlqKey, err := queueKey(policy.topic, policy.group)
			if err != nil {
				return req, key, fmt.Errorf("DLQ target: %w", err)
			}
			wp.Topic, wp.Group = dlqKey.topic, groupOpt(dlqKey.group)
		}
		req.DLQPolicy = wire.Some(wp)
	}
	if ttl, ok := q.defaultTTL.Get(); ok {
		if ttl < time.Millisecond {
			return req, key, fmt.Errorf("%w: default message TTL %v is below 1 ms", ErrInvalidArgument, ttl)
		}
		req.DefaultMessageTTLMs = wire.Some(uint64(ttl / time.Millisecond))
	}
	return req, key, nil
}

// DeclareQueue creates the queue or updates its settings, and returns its
// effective partition count (for an existing queue, the existing count wins).
func (c *Client) DeclareQueue(ctx context.Context, cfg *QueueConfig) (uint32, error) {
	if cfg == nil {
		return 0, fmt.Errorf("%w: nil QueueConfig", ErrInvalidArgument)
	}
	req, key, err := cfg.body()
	if err != nil {
		return 0, err
	}
	eng, err := c.engine(ctx)
	if err != nil {
		return 0, err
	}
	r, err := eng.request(ctx, wire.OpDeclareQueue, req)
	if err != nil {
		return 0, err
	}
	switch body := r.body.(type) {
	case wire.DeclareQueueOk:
		c.routes.setPartitionCount(key, body.PartitionCount, time.Now())
		return max(body.PartitionCount, 1), nil
	case wire.ErrorBody:
		return 0, brokerError(r.op, body)
	}
	return 0, fmt.Errorf("%w: %s in reply to DECLARE_QUEUE", ErrProtocol, r.op)
}
