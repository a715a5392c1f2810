package broker

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// Streams and cohorts for the admin API (GET|POST /admin/api/streams, GET
// /admin/api/cohorts): the driver's part. Invariants:
//   - the catalogue, a declare and the cohort registry are the Node's
//     (node.ListQueues, node.DeclareStream, node.CohortsRequest through
//     Call): a declare takes the very path a client's DECLARE_PLEXUS does
//     and is decided there;
//   - a loaded stream partition's offsets and subscription count are the
//     runner's observation, stored once per batch of inputs and only while
//     observations are wanted, exactly as for queue partitions
//     (hostRunner.observe): three compares per batch, a store only when a
//     value changed; a listing only loads atomics and never steps a
//     partition, so it costs the publish path nothing it does not already
//     pay for queues. A partition not observed yet (loaded and stepped
//     nothing since observations were switched on) is listed without them.

// streamObs is one stream runner's last observation of its partition.
type streamObs struct {
	oldest, next atomic.Uint64
	subs         atomic.Int64
	set          atomic.Bool
	// Runner goroutine only: what was stored last.
	last struct {
		oldest, next uint64
		subs         int
	}
}

// observeStream stores the stream partition's offsets and subscription
// count, each only when it changed (called by observe, runner goroutine).
func (r *hostRunner) observeStream(h *node.StreamHost) {
	p := h.Partition()
	o := &r.sobs
	oldest, next, subs := p.Oldest(), p.NextOffset(), p.SubscriptionCount()
	set := o.set.Load()
	if set && oldest == o.last.oldest && next == o.last.next && subs == o.last.subs {
		return
	}
	if !set || oldest != o.last.oldest {
		o.oldest.Store(oldest)
	}
	if !set || next != o.last.next {
		o.next.Store(next)
	}
	if !set || subs != o.last.subs {
		o.subs.Store(int64(subs))
	}
	o.last.oldest, o.last.next, o.last.subs = oldest, next, subs
	if !set {
		o.set.Store(true)
	}
}

// StreamState is one declared stream for GET /admin/api/streams.
type StreamState struct {
	Topic    string
	Settings core.StreamSettings
	Parts    []StreamPartState
}

// StreamPartState is one partition. Observed says the offsets and
// subscriptions are set: the partition is loaded and its runner has
// observed it.
type StreamPartState struct {
	Partition     uint32
	Loaded        bool
	Observed      bool
	Oldest, Next  uint64 // the oldest retained offset; the offset the next record gets
	Subscriptions int64
}

// ListStreams lists every declared stream, loaded or not, in name order.
func (b *Broker) ListStreams(ctx context.Context) ([]StreamState, error) {
	ans, err := b.Call(ctx, node.NodeAddr(), &node.ListQueues{})
	if err != nil {
		return nil, err
	}
	list, ok := ans.(*node.QueueList)
	if !ok {
		return nil, fmt.Errorf("broker: the Node answered a listing with %T", ans)
	}
	b.wantObservations()
	out := make([]StreamState, 0, len(list.Streams))
	for _, s := range list.Streams {
		st := StreamState{Topic: s.Topic, Settings: s.Settings, Parts: make([]StreamPartState, 0, s.Settings.PartitionCount)}
		for p := range s.Settings.PartitionCount {
			ps := StreamPartState{Partition: p, Loaded: int(p) < len(s.Loaded) && s.Loaded[p]}
			if ps.Loaded {
				if r := b.host(core.QueueID{Topic: s.Topic, Partition: p}); r != nil && r.sobs.set.Load() {
					ps.Observed = true
					ps.Oldest, ps.Next, ps.Subscriptions = r.sobs.oldest.Load(), r.sobs.next.Load(), r.sobs.subs.Load()
				}
			}
			st.Parts = append(st.Parts, ps)
		}
		out = append(out, st)
	}
	return out, nil
}

// DeclareStream declares a stream through the Node's declare path (as
// DECLARE_PLEXUS: the same settings again are idempotent, others are
// refused). It says whether the stream was new; it answers once the
// stream's record is durable.
func (b *Broker) DeclareStream(ctx context.Context, topic string, settings core.StreamSettings) (created bool, err error) {
	before, err := b.ListStreams(ctx)
	if err != nil {
		return false, err
	}
	existed := false
	for _, s := range before {
		existed = existed || s.Topic == topic
	}
	ans, err := b.Call(ctx, node.NodeAddr(), &node.DeclareStream{Token: 1, Topic: topic, Settings: settings})
	if err != nil {
		return false, err
	}
	decl, ok := ans.(*node.Declared)
	if !ok {
		return false, fmt.Errorf("broker: the Node answered a stream declare with %T", ans)
	}
	if decl.Err != nil {
		return false, coreOpErr(decl.Err)
	}
	return !existed, nil
}

// Cohorts asks the Node for its cohort registry.
func (b *Broker) Cohorts(ctx context.Context) (*node.CohortList, error) {
	ans, err := b.Call(ctx, node.NodeAddr(), &node.CohortsRequest{})
	if err != nil {
		return nil, err
	}
	list, ok := ans.(*node.CohortList)
	if !ok {
		return nil, fmt.Errorf("broker: the Node answered a cohorts request with %T", ans)
	}
	return list, nil
}
