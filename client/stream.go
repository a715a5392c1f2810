package client

// Declaring Plexus streams (DECLARE_PLEXUS, PROTOCOL §5.14-5.15) and the
// client's catalogue of the streams it knows and their partition counts.
//
// Invariants:
//   - Unset retention bounds and replication factor travel as absent; durability
//     always travels (it is a plain u8 on the wire) and defaults to durable.
//   - The catalogue only grows from what a broker said: DECLARE_PLEXUS_OK, the
//     stream entries of TOPOLOGY, or a partition probe that ended in 404. A count
//     once learned is kept (stream counts are fixed on a standalone broker).
//   - Learning a stream's count never creates the stream: a standalone broker
//     lists no streams in TOPOLOGY, and a bare DECLARE_PLEXUS would create an
//     undeclared stream (defeating SUBSCRIBE_ERR 404) and, for a stream declared
//     with another tier, be refused ("a re-declare with other settings is
//     refused", docs/streams.md). So the count is probed by subscribing
//     (stream_subscription.go) instead.

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// Durability is a stream's tier (PROTOCOL §7.5).
type Durability = wire.Durability

// Stream tiers.
const (
	// DurabilityEphemeral delivers and confirms at staging; never fsynced.
	DurabilityEphemeral = wire.DurabilityEphemeral
	// DurabilitySpeculative delivers at staging, flagged fibril.speculative = 1,
	// and confirms once durable.
	DurabilitySpeculative = wire.DurabilitySpeculative
	// DurabilityDurable delivers and confirms after persistence (the default).
	DurabilityDurable = wire.DurabilityDurable
)

// StreamConfig describes a stream to declare; build it with NewStreamConfig and
// the chained setters.
type StreamConfig struct {
	topic             string
	partitionCount    wire.Optional[uint32]
	durability        wire.Optional[Durability]
	maxAgeMs          wire.Optional[uint64]
	maxBytes          wire.Optional[uint64]
	maxRecords        wire.Optional[uint64]
	replicationFactor wire.Optional[uint32]
}

// NewStreamConfig starts a declaration of the stream topic (durable, one
// partition, unbounded retention unless set).
func NewStreamConfig(topic string) *StreamConfig { return &StreamConfig{topic: topic} }

// PartitionCount sets the number of partitions (at least 1).
func (s *StreamConfig) PartitionCount(n uint32) *StreamConfig {
	s.partitionCount = wire.Some(n)
	return s
}

// Durability sets the tier (default DurabilityDurable).
func (s *StreamConfig) Durability(d Durability) *StreamConfig { s.durability = wire.Some(d); return s }

// MaxAgeMs bounds retention by age: sealed segments older than this are dropped.
func (s *StreamConfig) MaxAgeMs(ms uint64) *StreamConfig { s.maxAgeMs = wire.Some(ms); return s }

// MaxBytes bounds the retained payload bytes.
func (s *StreamConfig) MaxBytes(n uint64) *StreamConfig { s.maxBytes = wire.Some(n); return s }

// MaxRecords bounds the retained records.
func (s *StreamConfig) MaxRecords(n uint64) *StreamConfig { s.maxRecords = wire.Some(n); return s }

// ReplicationFactor sets the durable tier's follower count (absent: the cluster
// default).
func (s *StreamConfig) ReplicationFactor(n uint32) *StreamConfig {
	s.replicationFactor = wire.Some(n)
	return s
}

// body validates s and builds the wire request.
func (s *StreamConfig) body() (wire.DeclarePlexus, error) {
	if err := validateName("topic", s.topic); err != nil {
		return wire.DeclarePlexus{}, err
	}
	req := wire.DeclarePlexus{
		Topic:               s.topic,
		PartitionCount:      s.partitionCount,
		Durability:          s.durability.Or(DurabilityDurable),
		RetentionAgeMsMax:   s.maxAgeMs,
		RetentionBytesMax:   s.maxBytes,
		RetentionRecordsMax: s.maxRecords,
		ReplicationFactor:   s.replicationFactor,
	}
	if count, ok := s.partitionCount.Get(); ok && count == 0 {
		return req, fmt.Errorf("%w: partition count must be at least 1", ErrInvalidArgument)
	}
	if req.Durability > DurabilityDurable {
		return req, fmt.Errorf("%w: unknown durability %d", ErrInvalidArgument, req.Durability)
	}
	return req, nil
}

// DeclarePlexus creates the stream (idempotently) and returns its effective
// partition count. A topic that is already a queue gets a *BrokerError 400.
func (c *Client) DeclarePlexus(ctx context.Context, cfg *StreamConfig) (uint32, error) {
	if cfg == nil {
		return 0, fmt.Errorf("%w: nil StreamConfig", ErrInvalidArgument)
	}
	req, err := cfg.body()
	if err != nil {
		return 0, err
	}
	eng, err := c.engine(ctx)
	if err != nil {
		return 0, err
	}
	r, err := eng.request(ctx, wire.OpDeclarePlexus, req)
	if err != nil {
		return 0, err
	}
	switch body := r.body.(type) {
	case wire.DeclarePlexusOk:
		count := max(body.PartitionCount, 1)
		c.streams.learn(req.Topic, count)
		// Publishes to the stream route over its partitions at once.
		c.routes.setPartitionCount(routeKey{topic: req.Topic}, count, time.Now())
		return count, nil
	case wire.ErrorBody:
		return 0, brokerError(r.op, body)
	}
	return 0, fmt.Errorf("%w: %s in reply to DECLARE_PLEXUS", ErrProtocol, r.op)
}

// streamCatalogue is what the client knows of streams: name → partition count.
type streamCatalogue struct {
	mu     sync.Mutex
	counts map[string]uint32 // guarded by mu
}

func newStreamCatalogue() *streamCatalogue {
	return &streamCatalogue{counts: make(map[string]uint32)}
}

func (sc *streamCatalogue) learn(topic string, count uint32) {
	if count == 0 {
		panic("client: a stream of zero partitions in the catalogue")
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.counts[topic] = count
}

func (sc *streamCatalogue) lookup(topic string) (uint32, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	count, ok := sc.counts[topic]
	return count, ok
}

// learnSnapshot records the stream entries of a topology snapshot.
func (sc *streamCatalogue) learnSnapshot(s wire.TopologySnapshot) {
	for _, st := range s.Streams {
		sc.learn(st.Topic, max(st.PartitionCount, 1))
	}
}

// names returns the known stream names, sorted.
func (sc *streamCatalogue) names() []string {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	out := make([]string, 0, len(sc.counts))
	for name := range sc.counts {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Streams returns the streams this client knows with their partition counts:
// those TOPOLOGY listed, those it declared, and those it subscribed to. A
// standalone broker lists no streams, so there it is only the latter two.
func (c *Client) Streams() map[string]uint32 {
	c.streams.mu.Lock()
	defer c.streams.mu.Unlock()
	out := make(map[string]uint32, len(c.streams.counts))
	for name, count := range c.streams.counts {
		out[name] = count
	}
	return out
}

// streamPartitionCount returns the stream's partition count when it is known
// (catalogue, else TOPOLOGY); known is false when the broker lists nothing for
// it (standalone, or undeclared), and the caller probes by subscribing.
func (c *Client) streamPartitionCount(ctx context.Context, eng *engine, topic string) (count uint32, known bool, err error) {
	if count, ok := c.streams.lookup(topic); ok {
		return count, true, nil
	}
	r, err := eng.request(ctx, wire.OpTopology, wire.Topology{Topic: wire.Some(topic)})
	if err != nil {
		return 0, false, err
	}
	if body, ok := r.body.(wire.TopologyOk); ok {
		snapshot := wire.TopologySnapshot(body)
		c.streams.learnSnapshot(snapshot)
		_, _ = c.routes.applySnapshot(snapshot, time.Now())
	}
	// An ERROR (no topology support) says nothing: probe.
	count, ok := c.streams.lookup(topic)
	return count, ok, nil
}
