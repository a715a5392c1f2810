package client

// Client-side routing (PROTOCOL §2.2, §7.10): partition counts and partitioning
// versions per (topic, group), learned from TOPOLOGY / TOPOLOGY_UPDATE, corrected
// by REDIRECT and DECLARE_QUEUE_OK.
//
// Invariants:
//   - A snapshot older than the generation already applied is ignored (a standalone
//     broker always sends generation 0, which is never "older").
//   - A topic the broker does not list routes as one partition (the broker default),
//     and is asked again after routeCacheTTL.
//   - At most one TOPOLOGY request per (topic, group) is in flight; concurrent
//     publishers wait for it.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

type routeKey struct {
	topic string
	group string // "" for the default namespace and for streams
}

type route struct {
	partitionCount uint32
	versions       []uint64 // partitioning version per partition; 0 = unknown
	fetchedAt      time.Time
}

type routeCache struct {
	mu         sync.Mutex
	generation uint64
	routes     map[routeKey]*route
	inflight   map[routeKey]chan struct{} // closed when the fetch for the key ends
}

func newRouteCache() *routeCache {
	return &routeCache{routes: make(map[routeKey]*route), inflight: make(map[routeKey]chan struct{})}
}

// applySnapshot merges a topology snapshot and returns the generation now held
// and whether the snapshot was applied (false when it is older).
func (rc *routeCache) applySnapshot(s wire.TopologySnapshot, now time.Time) (uint64, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if s.Generation < rc.generation {
		return rc.generation, false
	}
	rc.generation = s.Generation
	fresh := make(map[routeKey]*route)
	add := func(key routeKey, partition, count uint32, version uint64) {
		r := fresh[key]
		if r == nil {
			r = &route{partitionCount: max(count, 1), fetchedAt: now}
			r.versions = make([]uint64, r.partitionCount)
			fresh[key] = r
		}
		if partition < uint32(len(r.versions)) {
			r.versions[partition] = version
		}
	}
	for _, q := range s.Queues {
		add(routeKey{q.Topic, normalizeGroup(q.Group.Or(""))}, q.Partition, q.PartitionCount, q.PartitioningVersion)
	}
	for _, st := range s.Streams {
		add(routeKey{st.Topic, ""}, st.Partition, st.PartitionCount, st.PartitioningVersion)
	}
	for key, r := range fresh {
		rc.routes[key] = r
	}
	return rc.generation, true
}

// lookup returns the partition count of key if it is cached and fresh.
func (rc *routeCache) lookup(key routeKey, now time.Time) (uint32, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r, ok := rc.routes[key]
	if !ok || now.Sub(r.fetchedAt) > routeCacheTTL {
		return 0, false
	}
	return r.partitionCount, true
}

// version returns the partitioning version to publish under (0 when unknown).
func (rc *routeCache) version(key routeKey, partition uint32) uint64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if r, ok := rc.routes[key]; ok && partition < uint32(len(r.versions)) {
		return r.versions[partition]
	}
	return 0
}

// setPartitionCount records a count learned outside topology (DECLARE_QUEUE_OK,
// or "not listed": 1). Versions are kept when the count is unchanged.
func (rc *routeCache) setPartitionCount(key routeKey, count uint32, now time.Time) {
	count = max(count, 1)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r, ok := rc.routes[key]
	if ok && r.partitionCount == count {
		r.fetchedAt = now
		return
	}
	rc.routes[key] = &route{partitionCount: count, versions: make([]uint64, count), fetchedAt: now}
}

// touch marks a cached route fresh again; it reports false when there is none.
func (rc *routeCache) touch(key routeKey, now time.Time) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r, ok := rc.routes[key]
	if ok {
		r.fetchedAt = now
	}
	return ok
}

// setVersion records the version a REDIRECT carried.
func (rc *routeCache) setVersion(key routeKey, partition uint32, version uint64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if r, ok := rc.routes[key]; ok && partition < uint32(len(r.versions)) {
		r.versions[partition] = version
	}
}

// beginFetch returns (nil, true) when the caller should fetch key, or a channel
// to wait on while another caller fetches it.
func (rc *routeCache) beginFetch(key routeKey) (<-chan struct{}, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if wait, ok := rc.inflight[key]; ok {
		return wait, false
	}
	rc.inflight[key] = make(chan struct{})
	return nil, true
}

func (rc *routeCache) endFetch(key routeKey) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	close(rc.inflight[key])
	delete(rc.inflight, key)
}

// partitionCount returns the partition count for (topic, group), asking the
// broker when the cache has no fresh answer.
func (c *Client) partitionCount(ctx context.Context, eng *engine, key routeKey) (uint32, error) {
	for {
		if count, ok := c.routes.lookup(key, time.Now()); ok {
			return count, nil
		}
		wait, leader := c.routes.beginFetch(key)
		if !leader {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		err := c.fetchRoute(ctx, eng, key)
		c.routes.endFetch(key)
		if err != nil {
			return 0, err
		}
	}
}

// fetchRoute asks TOPOLOGY for one (topic, group).
func (c *Client) fetchRoute(ctx context.Context, eng *engine, key routeKey) error {
	req := wire.Topology{Topic: wire.Some(key.topic)}
	if key.group != "" {
		req.Group = wire.Some(key.group)
	}
	r, err := eng.request(ctx, wire.OpTopology, req)
	now := time.Now()
	if err != nil {
		return err
	}
	switch body := r.body.(type) {
	case wire.TopologyOk:
		if body.Generation == 0 && len(body.Queues) == 0 && len(body.Streams) == 0 {
			// A standalone broker lists nothing (PROTOCOL 5.20): ask the
			// queue itself. A DECLARE_QUEUE naming no setting changes
			// nothing and answers the queue's partition count (an
			// undeclared queue is created with one partition, as a publish
			// to it would create it). Not for a stream the client knows:
			// that DECLARE_QUEUE would be refused (the topic is a stream).
			if count, ok := c.streams.lookup(key.topic); ok && key.group == "" {
				c.routes.setPartitionCount(key, count, now)
				return nil
			}
			return c.fetchCountByDeclare(ctx, eng, key)
		}
		_, applied := c.routes.applySnapshot(wire.TopologySnapshot(body), now)
		if _, ok := c.routes.lookup(key, now); ok {
			return nil
		}
		if !applied && c.routes.touch(key, now) {
			return nil // an older snapshot says nothing new: keep what we know
		}
		c.routes.setPartitionCount(key, 1, now) // not listed: the broker default, 1
		return nil
	case wire.ErrorBody:
		// A broker without topology support: route to partition 0 for a while
		// rather than failing every publish.
		c.opts.Logger.Debug("client: TOPOLOGY refused; routing to partition 0", "topic", key.topic, "err", brokerError(r.op, body))
		c.routes.setPartitionCount(key, 1, now)
		return nil
	}
	return fmt.Errorf("%w: %s in reply to TOPOLOGY", ErrProtocol, r.op)
}

// Topology is a routing snapshot.
type Topology struct {
	Generation uint64
	Queues     []TopologyEntry
	Streams    []TopologyEntry
}

// TopologyEntry is one partition of a queue or stream.
type TopologyEntry struct {
	Topic               string
	Group               string // "" for the default namespace, and for streams
	Partition           uint32
	PartitionCount      uint32
	PartitioningVersion uint64
	Owners              []string // host:port in priority order; empty when unknown
}

// FetchTopology asks the broker for its full routing snapshot and refreshes the
// route cache with it.
func (c *Client) FetchTopology(ctx context.Context) (*Topology, error) {
	eng, err := c.engine(ctx)
	if err != nil {
		return nil, err
	}
	r, err := eng.request(ctx, wire.OpTopology, wire.Topology{})
	if err != nil {
		return nil, err
	}
	switch body := r.body.(type) {
	case wire.TopologyOk:
		snapshot := wire.TopologySnapshot(body)
		_, _ = c.routes.applySnapshot(snapshot, time.Now())
		c.streams.learnSnapshot(snapshot)
		return topologyFromWire(snapshot), nil
	case wire.ErrorBody:
		return nil, brokerError(r.op, body)
	}
	return nil, fmt.Errorf("%w: %s in reply to TOPOLOGY", ErrProtocol, r.op)
}

func topologyFromWire(s wire.TopologySnapshot) *Topology {
	t := &Topology{Generation: s.Generation}
	for _, q := range s.Queues {
		t.Queues = append(t.Queues, TopologyEntry{
			Topic: q.Topic, Group: q.Group.Or(""), Partition: q.Partition, PartitionCount: q.PartitionCount,
			PartitioningVersion: q.PartitioningVersion, Owners: endpointAddrs(q.OwnerEndpoints),
		})
	}
	for _, st := range s.Streams {
		t.Streams = append(t.Streams, TopologyEntry{
			Topic: st.Topic, Partition: st.Partition, PartitionCount: st.PartitionCount,
			PartitioningVersion: st.PartitioningVersion, Owners: endpointAddrs(st.OwnerEndpoints),
		})
	}
	return t
}

func endpointAddrs(endpoints []wire.Endpoint) []string {
	addrs := make([]string, 0, len(endpoints))
	for _, ep := range endpoints {
		host := strings.TrimSuffix(strings.TrimPrefix(ep.Host, "["), "]")
		addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(int(ep.Port))))
	}
	return addrs
}

// fetchCountByDeclare learns a queue's partition count from a bare
// DECLARE_QUEUE (standalone brokers have no topology to list).
func (c *Client) fetchCountByDeclare(ctx context.Context, eng *engine, key routeKey) error {
	req := wire.DeclareQueue{Topic: key.topic}
	if key.group != "" {
		req.Group = wire.Some(key.group)
	}
	r, err := eng.request(ctx, wire.OpDeclareQueue, req)
	if err != nil {
		return err
	}
	now := time.Now()
	switch body := r.body.(type) {
	case wire.DeclareQueueOk:
		c.routes.setPartitionCount(key, body.PartitionCount, now)
		return nil
	case wire.ErrorBody:
		declareErr := brokerError(r.op, body)
		if body.Code != wire.CodeInvalid || key.group != "" {
			return declareErr
		}
		// Refused as invalid: the topic may be a stream (a topic is a queue
		// or a stream, never both), which a standalone broker lists nowhere.
		count, err := c.probeStreamCount(ctx, eng, key.topic)
		if err != nil || count == 0 {
			return declareErr // not a stream either: the declare's own answer
		}
		c.streams.learn(key.topic, count)
		c.routes.setPartitionCount(key, count, time.Now())
		return nil
	}
	return fmt.Errorf("%w: %s in reply to DECLARE_QUEUE", ErrProtocol, r.op)
}

// probeFilter matches no record: fibril.* headers are the broker's
// (PROTOCOL 7.12), and it never sets this one, so a probe subscription
// delivers nothing and costs the connection no traffic.
var probeFilter = []wire.KeyValue{{Key: "fibril.partition-probe", Value: "-"}}

// probeStreamCount counts a stream's partitions by subscribing to 0, 1, ...
// with a filter that matches nothing, until one answers 404 (PROTOCOL 5.11
// step 3); 0 when partition 0 is refused. For publishers on a standalone
// broker, whose TOPOLOGY lists no streams. The subscriptions end with the
// connection (the protocol has no unsubscribe, PROTOCOL 7.11).
func (c *Client) probeStreamCount(ctx context.Context, eng *engine, topic string) (uint32, error) {
	for partition := uint32(0); partition < streamPartitionsProbeMax; partition++ {
		r, err := eng.request(ctx, wire.OpSubscribeStream, wire.SubscribeStream{Topic: topic, Partition: partition,
			Start: wire.StreamStart{Kind: wire.StreamStartLatest}, Filter: probeFilter})
		if err != nil {
			return 0, err
		}
		switch body := r.body.(type) {
		case wire.SubscribeOk:
			continue
		case wire.ErrorBody:
			if body.Code == wire.CodeNotFound {
				return partition, nil
			}
			return 0, brokerError(r.op, body)
		default:
			return 0, fmt.Errorf("%w: %s in reply to SUBSCRIBE_STREAM", ErrProtocol, r.op)
		}
	}
	return 0, fmt.Errorf("%w: stream %s: no 404 within %d partitions", ErrProtocol, topic, streamPartitionsProbeMax)
}
