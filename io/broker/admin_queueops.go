package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// Operator queue operations for the admin API (issue 12): the driver's
// part. Invariants:
//   - every decision is the machines' (node.ListQueues, DeleteQueue,
//     PurgeQueue, AdminPublish through Call); this file turns answers into
//     values and errors, and reads observations;
//   - a purge and a test publish are sent to the Node, which loads the
//     partition and relays them to its Host (as the messages family's
//     requests): the driver never calls a queue partition directly for an
//     operator, so nothing of the operator's can reach a Host the Node is
//     unloading, and the operator holds no open that would pin it loaded;
//   - observations cost the publish path nothing while nobody lists: a
//     runner reads one flag per batch (rateSamples.wanted, set by the first
//     listing or scrape); from then on it stores the Host's O(1) counts
//     into atomics once per batch of inputs (not per input), each only when
//     it changed, and readers only load them; a listing that finds a loaded
//     partition not yet observed asks its Host (ObserveQuery); nothing here
//     takes a lock a runner takes;
//   - a queue's data is deleted only on a node.RemoveRequest, which the
//     Node emits once the removal record is durable (and again after a
//     restart until a RemoveDone was recorded), after the partitions' last
//     envelopes (PartitionDeleted) were pushed: a crash leaves the queue
//     whole or gone, never half (node_queueops.go, record_queueops.go).

// hostObs is one runner's last observation of its Host.
type hostObs struct {
	ready, inflight, delayed, pendingDLQ, consumers atomic.Int64
	published, delivered                            atomic.Uint64
	set                                             atomic.Bool
	// last is the runner's own copy of what it stored (runner goroutine
	// only): a value is stored only when it changed, since an atomic store
	// costs a locked instruction and a batch usually moves one or two.
	last node.HostObservation
}

// observe stores the Host's counts (queue partitions only), each only
// when it changed.
func (r *hostRunner) observe() {
	if !r.b.rates.wanted.Load() {
		return // nobody listed or scraped yet: no cost but this load
	}
	h, ok := r.h.(*node.Host)
	if !ok {
		if sh, ok := r.h.(*node.StreamHost); ok {
			r.observeStream(sh) // admin_streams.go
		}
		return
	}
	o := h.Observe()
	last := &r.obs.last
	if o == *last && r.obs.set.Load() {
		return
	}
	if o.Counts.Ready != last.Counts.Ready {
		r.obs.ready.Store(int64(o.Counts.Ready))
	}
	if o.Counts.Inflight != last.Counts.Inflight {
		r.obs.inflight.Store(int64(o.Counts.Inflight))
	}
	if o.Counts.Delayed != last.Counts.Delayed {
		r.obs.delayed.Store(int64(o.Counts.Delayed))
	}
	if o.Counts.PendingDLQ != last.Counts.PendingDLQ {
		r.obs.pendingDLQ.Store(int64(o.Counts.PendingDLQ))
	}
	if o.Consumers != last.Consumers {
		r.obs.consumers.Store(int64(o.Consumers))
	}
	if o.Published != last.Published {
		r.obs.published.Store(o.Published)
	}
	if o.Delivered != last.Delivered {
		r.obs.delivered.Store(o.Delivered)
	}
	*last = o
	if !r.obs.set.Load() {
		r.obs.set.Store(true)
	}
}

// QueueOpError is an operator request the broker refused; Kind says how.
type QueueOpError struct {
	Kind     QueueOpKind
	Message  string
	Inflight int // QueueInUse
}

// QueueOpKind classifies a refusal. The admin API maps each to a status.
type QueueOpKind uint8

const (
	QueueNotFound QueueOpKind = 1 // 404
	QueueInUse    QueueOpKind = 2 // 409 in_use
	QueueBusy     QueueOpKind = 3 // 409 conflict: retry
	QueueBadInput QueueOpKind = 4 // 400
	QueueRetry    QueueOpKind = 5 // 503: the broker cannot now; retry
)

func (e *QueueOpError) Error() string { return e.Message }

func opErr(kind QueueOpKind, format string, args ...any) *QueueOpError {
	return &QueueOpError{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// coreOpErr turns a core refusal into a QueueOpError.
func coreOpErr(err *core.Error) *QueueOpError {
	if err.Retryable() {
		return opErr(QueueRetry, "%s", err.Error())
	}
	if err.Code() == core.CodeNotFound {
		return opErr(QueueNotFound, "%s", err.Error())
	}
	return opErr(QueueBadInput, "%s", err.Error())
}

// QueueStatus is one queue for a listing.
type QueueStatus struct {
	Topic, Group string
	Partitions   uint32
	DLQ          *core.DLQPolicy
	MaxRetries   *uint32
	DefaultTTLMs *int64
	Parts        []PartitionStatus
}

// PartitionStatus is one partition; counts are set only when Loaded.
type PartitionStatus struct {
	Partition                            uint32
	Loaded                               bool
	Ready, Inflight, Delayed, PendingDLQ int64
	Consumers                            int64
	PublishRatePerSec, DeliverRatePerSec float64
	published, delivered                 uint64
}

// StreamStatus is one stream for a topology.
type StreamStatus struct {
	Topic      string
	Partitions uint32
	Settings   core.StreamSettings
}

// QueueListing is the answer of ListQueues.
type QueueListing struct {
	OwnerID [16]byte
	Queues  []QueueStatus
	Streams []StreamStatus
}

// rateSamples remembers, per partition, the counters at the last rate
// sample: a rate is the change since then over the time since then. A
// listing less than rateWindowMinMs after the sample answers the rates of
// that sample and keeps it as the baseline, so listings from several
// callers (dashboard tabs, the event tick, fibrilctl) never cut the window
// into slivers whose rates jump about. Bounded by the catalogue (rebuilt at
// every sample from what is listed).
type rateSamples struct {
	// wanted: a listing or scrape happened; runners observe from then on.
	wanted atomic.Bool
	mu     sync.Mutex
	atMs   int64
	last   map[core.QueueID][2]uint64
	rates  map[core.QueueID][2]float64 // publish, deliver per second at the last sample
}

// rateWindowMinMs is the shortest window a rate is measured over.
const rateWindowMinMs = 2_000

// rateRound is one listing's pass over the partitions (under s.mu).
type rateRound struct {
	s         *rateSamples
	nowMs     int64
	resample  bool    // a new sample: the window is long enough (or the first)
	elapsedS  float64 // the window's length
	next      map[core.QueueID][2]uint64
	nextRates map[core.QueueID][2]float64
}

// round starts a listing's pass at nowMs; the caller holds s.mu.
func (s *rateSamples) round(nowMs int64) *rateRound {
	r := &rateRound{s: s, nowMs: nowMs, elapsedS: float64(nowMs-s.atMs) / 1000,
		resample: s.last == nil || nowMs-s.atMs >= rateWindowMinMs}
	if r.resample {
		r.next = make(map[core.QueueID][2]uint64, len(s.last)) // the listed partitions only
		r.nextRates = make(map[core.QueueID][2]float64, len(s.rates))
	}
	return r
}

// rate answers partition id's publish and deliver rates per second, given
// its counters now: over the window since the last sample, or the last
// sample's rates while the window is too short.
func (r *rateRound) rate(id core.QueueID, published, delivered uint64) (pub, del float64) {
	if !r.resample {
		v := r.s.rates[id]
		return v[0], v[1]
	}
	if prev, ok := r.s.last[id]; ok && r.elapsedS > 0 && published >= prev[0] && delivered >= prev[1] {
		pub, del = float64(published-prev[0])/r.elapsedS, float64(delivered-prev[1])/r.elapsedS
	}
	r.next[id] = [2]uint64{published, delivered}
	r.nextRates[id] = [2]float64{pub, del}
	return pub, del
}

// done ends the pass: a new sample replaces the baseline.
func (r *rateRound) done() {
	if r.resample {
		r.s.last, r.s.atMs, r.s.rates = r.next, r.nowMs, r.nextRates
	}
}

// ListQueues lists the catalogue with the loaded partitions' counts.
func (b *Broker) ListQueues(ctx context.Context) (QueueListing, error) {
	ans, err := b.Call(ctx, node.NodeAddr(), &node.ListQueues{})
	if err != nil {
		return QueueListing{}, err
	}
	list, ok := ans.(*node.QueueList)
	if !ok {
		return QueueListing{}, fmt.Errorf("broker: the Node answered a listing with %T", ans)
	}
	out := QueueListing{OwnerID: list.OwnerID}
	b.wantObservations()
	samples := &b.rates
	samples.mu.Lock()
	defer samples.mu.Unlock()
	rates := samples.round(b.clock.nowMs())
	for _, q := range list.Queues {
		qs := QueueStatus{Topic: q.Topic, Group: q.Group, Partitions: q.Partitions, DLQ: q.DLQ, MaxRetries: q.MaxRetries, DefaultTTLMs: q.DefaultTTLMs}
		for p := range q.Partitions {
			ps := PartitionStatus{Partition: p}
			id := core.QueueID{Topic: q.Topic, Group: q.Group, Partition: p}
			if q.Loaded[p] {
				if r := b.host(id); r != nil && b.observed(ctx, r, &ps) {
					ps.Loaded = true
					ps.PublishRatePerSec, ps.DeliverRatePerSec = rates.rate(id, ps.published, ps.delivered)
				}
			}
			qs.Parts = append(qs.Parts, ps)
		}
		out.Queues = append(out.Queues, qs)
	}
	rates.done()
	for _, s := range list.Streams {
		out.Streams = append(out.Streams, StreamStatus{Topic: s.Topic, Partitions: s.Settings.PartitionCount, Settings: s.Settings})
	}
	return out, nil
}

// wantObservations switches the runners' observations on; the first call
// pokes every runner with a Tick (harmless: machines act on the time it
// carries), so an idle partition, which steps nothing until an input
// comes, is observed too.
func (b *Broker) wantObservations() {
	if b.rates.wanted.Swap(true) {
		return
	}
	b.hostMu.RLock()
	defer b.hostMu.RUnlock()
	for _, r := range b.hosts {
		r.push(&node.Tick{})
	}
}

// observed fills ps from r's stored observation, or asks its Host when
// none is stored yet; false when the partition went away meanwhile.
func (b *Broker) observed(ctx context.Context, r *hostRunner, ps *PartitionStatus) bool {
	if !r.obs.set.Load() {
		ans, err := b.Call(ctx, r.addr, &node.ObserveQuery{})
		o, ok := ans.(*node.Observation)
		if err != nil || !ok {
			return false
		}
		ps.Ready, ps.Inflight = int64(o.Counts.Ready), int64(o.Counts.Inflight)
		ps.Delayed, ps.PendingDLQ = int64(o.Counts.Delayed), int64(o.Counts.PendingDLQ)
		ps.Consumers, ps.published, ps.delivered = int64(o.Consumers), o.Published, o.Delivered
		return true
	}
	ps.Ready, ps.Inflight = r.obs.ready.Load(), r.obs.inflight.Load()
	ps.Delayed, ps.PendingDLQ = r.obs.delayed.Load(), r.obs.pendingDLQ.Load()
	ps.Consumers = r.obs.consumers.Load()
	ps.published, ps.delivered = r.obs.published.Load(), r.obs.delivered.Load()
	return true
}

// QueueDeclare is an operator's create (DECLARE_QUEUE's fields).
type QueueDeclare struct {
	Topic, Group   string
	PartitionCount uint32
	DLQ            *core.DLQPolicy
	MaxRetries     *uint32
	DefaultTTLMs   *int64
}

// DeclareQueue declares a queue through the Node's declare path (as
// DECLARE_QUEUE: a re-declare merges the given settings and keeps the
// partition count). It says whether the queue was new.
func (b *Broker) DeclareQueue(ctx context.Context, d QueueDeclare) (created bool, err error) {
	if err := core.ValidateName(d.Topic); err != nil {
		return false, opErr(QueueBadInput, "topic %q is not a valid name", d.Topic)
	}
	before, err := b.findQueue(ctx, d.Topic, d.Group)
	if err != nil {
		return false, err
	}
	ans, err := b.Call(ctx, node.NodeAddr(), &node.DeclareQueue{Token: 1, Topic: d.Topic, Group: d.Group,
		PartitionCount: d.PartitionCount, DLQ: d.DLQ, MaxRetries: d.MaxRetries, DefaultTTLMs: d.DefaultTTLMs})
	if err != nil {
		return false, err
	}
	decl, ok := ans.(*node.Declared)
	if !ok {
		return false, fmt.Errorf("broker: the Node answered a declare with %T", ans)
	}
	if decl.Err != nil {
		return false, coreOpErr(decl.Err)
	}
	return before == nil, nil
}

// findQueue lists and returns one queue (nil: none).
func (b *Broker) findQueue(ctx context.Context, topic, group string) (*QueueStatus, error) {
	list, err := b.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	group = core.NormalizeGroup(group)
	for i := range list.Queues {
		if q := &list.Queues[i]; q.Topic == topic && q.Group == group {
			return q, nil
		}
	}
	return nil, nil
}

// Queue returns one queue's status, or a QueueNotFound error.
func (b *Broker) Queue(ctx context.Context, topic, group string) (QueueStatus, error) {
	q, err := b.findQueue(ctx, topic, group)
	if err != nil {
		return QueueStatus{}, err
	}
	if q == nil {
		return QueueStatus{}, opErr(QueueNotFound, "no queue %s", queueName(topic, group))
	}
	return *q, nil
}

func queueName(topic, group string) string {
	if g := core.NormalizeGroup(group); g != "" {
		return fmt.Sprintf("%q (group %q)", topic, g)
	}
	return fmt.Sprintf("%q", topic)
}

// DeleteQueue asks the Node to delete a queue (node.DeleteQueue).
func (b *Broker) DeleteQueue(ctx context.Context, topic, group string) error {
	ans, err := b.Call(ctx, node.NodeAddr(), &node.DeleteQueue{Topic: topic, Group: group})
	if err != nil {
		return err
	}
	res, ok := ans.(*node.QueueDeleteResult)
	if !ok {
		return fmt.Errorf("broker: the Node answered a delete with %T", ans)
	}
	switch res.Outcome {
	case node.DeleteDone:
		return nil
	case node.DeleteNotFound:
		return opErr(QueueNotFound, "no queue %s", queueName(topic, group))
	case node.DeleteInUse:
		e := opErr(QueueInUse, "queue %s has %d messages inflight (leased to consumers); settle them or wait for their leases, then delete again", queueName(topic, group), res.Inflight)
		e.Inflight = res.Inflight
		return e
	case node.DeleteInvalid:
		return opErr(QueueBadInput, "%s", res.Reason)
	default:
		return opErr(QueueBusy, "queue %s cannot be deleted now: %s; retry shortly", queueName(topic, group), res.Reason)
	}
}

// PurgeQueue purges every partition of a queue (loading those that are
// not: their messages are on disk) and says how many messages went.
func (b *Broker) PurgeQueue(ctx context.Context, topic, group string) (uint64, error) {
	q, err := b.Queue(ctx, topic, group)
	if err != nil {
		return 0, err
	}
	var total uint64
	for p := range q.Partitions {
		ans, err := b.Call(ctx, node.NodeAddr(), &node.PurgeQueue{Topic: q.Topic, Group: q.Group, Partition: p})
		if err != nil {
			return total, err
		}
		switch res := ans.(type) {
		case *node.Purged:
			if res.Err != nil {
				return total, coreOpErr(res.Err)
			}
			total += res.Count
		case *node.OperatorRefused:
			// An unknown queue (deleted since the listing) is a 404.
			return total, coreOpErr(res.Err)
		default:
			return total, fmt.Errorf("broker: a purge was answered with %T", ans)
		}
	}
	return total, nil
}

// HeaderTest marks an operator's test publish (POST /admin/api/publish).
const HeaderTest = "fibril.test"

// AdminPublish publishes one test message through the partition's publish
// path, confirmed (durable before the answer), with fibril.test: admin.
func (b *Broker) AdminPublish(ctx context.Context, topic, group string, partition uint32, payload []byte, ct core.ContentType) (core.QueueID, uint64, error) {
	id := core.QueueID{Topic: topic, Group: core.NormalizeGroup(group), Partition: partition}
	body := &core.Body{Payload: payload, ContentType: ct, PublishedMs: b.clock.nowMs(),
		Headers: []core.Header{{Key: HeaderTest, Value: "admin"}}}
	// The Node creates the queue implicitly, loads the partition and relays.
	ans, err := b.Call(ctx, node.NodeAddr(), &node.AdminPublish{Topic: topic, Group: group, Partition: partition, Body: body})
	if err != nil {
		return id, 0, err
	}
	switch res := ans.(type) {
	case *node.AdminPublished:
		if res.Err != nil {
			return id, 0, coreOpErr(res.Err)
		}
		return res.Queue, res.Offset, nil
	case *node.OperatorRefused:
		return id, 0, coreOpErr(res.Err)
	default:
		return id, 0, fmt.Errorf("broker: an operator's publish was answered with %T", ans)
	}
}

// NodeInfo is this broker's identity for a topology.
type NodeInfo struct {
	Name          string
	AdvertiseHost string
	AdvertisePort uint16
}

// NodeInfo returns the configured identity.
func (b *Broker) NodeInfo() NodeInfo {
	return NodeInfo{Name: b.cfg.ServerName, AdvertiseHost: b.cfg.AdvertiseHost, AdvertisePort: b.cfg.AdvertisePort}
}

// QueueGauge is one loaded partition's gauges for /metrics.
type QueueGauge struct {
	Queue           core.QueueID
	Ready, Inflight int64
}

// QueueGauges appends every loaded queue partition's gauges to dst (in
// queue order) and returns it; nil when admin.metrics_per_channel is off.
// It reads only the runners' atomics (the host table's read lock, which a
// runner never takes on its publish path).
func (b *Broker) QueueGauges(dst []QueueGauge) []QueueGauge {
	if !b.cfg.AdminMetricsPerChannel {
		return dst
	}
	// The first scrape starts the observations: it reports the partitions
	// observed so far (none), the next ones every loaded partition.
	b.wantObservations()
	b.hostMu.RLock()
	for id, r := range b.hosts {
		if r.obs.set.Load() {
			dst = append(dst, QueueGauge{Queue: id, Ready: r.obs.ready.Load(), Inflight: r.obs.inflight.Load()})
		}
	}
	b.hostMu.RUnlock()
	sort.Slice(dst, func(i, j int) bool {
		a, c := dst[i].Queue, dst[j].Queue
		if a.Topic != c.Topic {
			return a.Topic < c.Topic
		}
		if a.Group != c.Group {
			return a.Group < c.Group
		}
		return a.Partition < c.Partition
	})
	return dst
}

// startRemove carries out a node.RemoveRequest off the Node's context:
// stop the queue's runners (each steps what was pushed to it before, the
// PartitionDeleted among it, so its subscribers are told), delete the
// queue's directory, report RemoveDone. The Node loads nothing of the name
// until then, so no load can race the deletion.
func (b *Broker) startRemove(req node.RemoveRequest) {
	b.loads.Add(1)
	go func() {
		defer b.loads.Done()
		// A failed deletion (a busy or read-only disk) is tried again with
		// a backoff until it succeeds or the broker closes: until then the
		// name stays unusable (the Node's tombstone), never half deleted.
		backoff := removeRetryMin
		for {
			err := b.removeQueueData(req)
			if err == nil {
				b.log.Info("queue deleted", "topic", req.Topic, "group", req.Group)
				b.deliverTo(b.nodeActor, &node.RemoveDone{Topic: req.Topic, Group: req.Group})
				return
			}
			b.log.Error("deleting a removed queue's data; retrying", "topic", req.Topic, "group", req.Group, "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, removeRetryMax)
			case <-b.ctx.Done():
				// Asked again at the next start (the tombstone is durable).
				b.deliverTo(b.nodeActor, &node.RemoveDone{Topic: req.Topic, Group: req.Group, Err: err})
				return
			}
		}
	}()
}

// removeRetryMin and removeRetryMax bound the backoff between attempts to
// delete a removed queue's data.
const (
	removeRetryMin = 500 * time.Millisecond
	removeRetryMax = 30 * time.Second
)

// errRemoveClosing: the broker closes; the next start asks again.
var errRemoveClosing = errors.New("broker closing: the removal is asked again at the next start")

func (b *Broker) removeQueueData(req node.RemoveRequest) error {
	group := core.NormalizeGroup(req.Group)
	var runners []*hostRunner
	b.hostMu.Lock()
	if b.hostsClosed {
		b.hostMu.Unlock()
		return errRemoveClosing
	}
	for id, r := range b.hosts {
		if id.Topic == req.Topic && id.Group == group {
			runners = append(runners, r)
			delete(b.hosts, id) // later envelopes bounce
		}
	}
	b.hostMu.Unlock()
	for _, r := range runners {
		r.close()
	}
	dir := filepath.Dir(partitionDir(b.cfg.DataDir, node.KindQueue, core.QueueID{Topic: req.Topic, Group: group}))
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	// The directory entry's removal is made durable before the Node may
	// record the data gone (and a new queue of the name may be created).
	parent := filepath.Dir(dir)
	if _, err := os.Stat(parent); errors.Is(err, os.ErrNotExist) {
		return nil // never loaded: no data was ever written
	}
	return syncDir(parent)
}

// DefaultMaxRetries is max_retries for a queue that declares none.
func (b *Broker) DefaultMaxRetries() uint32 { return b.cfg.Partition.MaxRetriesDefault }

// halting says whether the runner stopped taking inputs (a non-blocking
// receive on a channel closed once: no lock on the routing path).
func (r *hostRunner) halting() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}
