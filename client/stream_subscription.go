package client

// Stream subscriptions: one SUBSCRIBE_STREAM per partition, fanned into one
// channel (PROTOCOL §5.11, §7.5), resubscribed by the client after a reconnect.
//
// Invariants:
//   - A partition's sub id is registered on the reader goroutine while it
//     handles SUBSCRIBE_OK, before the next frame, so no DELIVER that follows the
//     reply is dropped (as for queues, §5.6).
//   - Streams are not reconciled (§7.5, §7.8): a stream subscription lives in
//     engine.streamSubs and engine.streams, never in engine.subs, so it is never
//     listed in RECONCILE_CLIENT and never sets session.hadSubs.
//   - After a reconnect (resumed or not) every partition is subscribed again on
//     the new engine: a durable one by its name (the broker resumes at the
//     cursor), an ephemeral one from the offset after the last record it handed
//     to the application, or from its original start when it handed none.
//   - A DELIVER reaches the application only if it names the partition's current
//     sub id on the subscription's current engine; the old server-side
//     subscription of a resumed session (there is no UNSUBSCRIBE) is dropped.
//   - lastOffset is written only under sendMu after a successful hand-off, and a
//     resubscribe reads it under sendMu after the partition left the old engine,
//     so no record is both skipped and handed over, nor handed over twice.
//   - Lock order: sendMu, then mu, then engine.mu; closeWith takes them one at a
//     time.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// StreamStart says where an ephemeral stream subscription begins; the zero
// value is StartLatest. A durable subscription ignores it (its cursor decides).
type StreamStart struct{ start wire.StreamStart }

// StartLatest: only records published after the subscribe (the default).
func StartLatest() StreamStart { return StreamStart{} }

// StartEarliest: the oldest retained record.
func StartEarliest() StreamStart {
	return StreamStart{wire.StreamStart{Kind: wire.StreamStartEarliest}}
}

// StartOffset: the record at offset, clamped to the retained window.
func StartOffset(offset uint64) StreamStart {
	return StreamStart{wire.StreamStart{Kind: wire.StreamStartOffset, Value: offset}}
}

// StartNBack: count records back from the tail (or the oldest retained).
func StartNBack(count uint64) StreamStart {
	return StreamStart{wire.StreamStart{Kind: wire.StreamStartNBack, Value: count}}
}

// StartByTime: the first retained record published at or after at.
func StartByTime(at time.Time) StreamStart {
	return StreamStart{wire.StreamStart{Kind: wire.StreamStartByTime, Value: uint64(max(at.UnixMilli(), 0))}}
}

// FilterClause matches a record that has header Key with a value matching
// Pattern, where '*' matches any run of characters and nothing else is special.
type FilterClause struct {
	Key     string
	Pattern string
}

// StreamOptions configure SubscribeStream and SubscribeStreamPattern.
type StreamOptions struct {
	// Durable names a durable cursor (resumed across reconnects, advanced by
	// Ack); "" is an ephemeral subscription that starts at Start.
	Durable string
	// Start is where an ephemeral subscription begins (default StartLatest).
	Start StreamStart
	// Filter clauses, all of which must match; sent in this order.
	Filter []FilterClause
	// AutoAck: with Durable, the broker commits the cursor after each delivery.
	AutoAck bool
	// Prefetch is sent and echoed; the broker does not enforce it for streams.
	Prefetch uint32
	// PatternPollInterval is how often SubscribeStreamPattern looks for new
	// matching streams; 0 means 5 s.
	PatternPollInterval time.Duration
}

// patternPollIntervalDefault is StreamOptions.PatternPollInterval's default.
const patternPollIntervalDefault = 5 * time.Second

// streamPartitionsProbeMax bounds the partitions probed by subscribing when no
// count is known (a standalone broker's TOPOLOGY lists no streams).
const streamPartitionsProbeMax = 1024

func (o StreamOptions) validate() error {
	if o.Durable != "" {
		if err := validateName("durable name", o.Durable); err != nil {
			return err
		}
	}
	for i, clause := range o.Filter {
		if clause.Key == "" {
			return fmt.Errorf("%w: filter clause %d has an empty header key", ErrInvalidArgument, i)
		}
	}
	if o.PatternPollInterval < 0 {
		return fmt.Errorf("%w: negative pattern poll interval", ErrInvalidArgument)
	}
	return nil
}

type streamPartition struct {
	topic     string
	partition uint32
	sub       *StreamSubscription

	subID      uint64 // guarded by sub.mu; the broker's id on sub.eng
	registered bool   // guarded by sub.mu; subID is live on sub.eng
	lastOffset uint64 // guarded by sub.sendMu; last record handed to the application
	delivered  bool   // guarded by sub.sendMu; lastOffset is set
}

// StreamSubscription fans the records of every partition of one stream (or of
// every stream matching a pattern) into one channel.
type StreamSubscription struct {
	name    string // the topic, or the pattern
	pattern bool
	opts    StreamOptions
	client  *Client

	deliveries chan *Delivery

	mu       sync.Mutex
	eng      *engine            // guarded by mu; where the partitions are registered
	parts    []*streamPartition // guarded by mu
	topics   map[string]bool    // guarded by mu; streams attached (or attaching)
	detached bool               // guarded by mu

	sendMu     sync.Mutex
	sendClosed bool // guarded by sendMu

	done      chan struct{}
	closeOnce sync.Once
	reason    error // set before done is closed
}

func newStreamSubscription(c *Client, name string, pattern bool, opts StreamOptions) *StreamSubscription {
	opts.Filter = append([]FilterClause(nil), opts.Filter...)
	return &StreamSubscription{
		name: name, pattern: pattern, opts: opts, client: c,
		// The broker does not enforce prefetch on streams: the buffer is the cap.
		deliveries: make(chan *Delivery, deliveryBufferMax),
		topics:     make(map[string]bool),
		done:       make(chan struct{}),
	}
}

// SubscribeStream subscribes to every partition of the stream topic (one
// SUBSCRIBE_STREAM each) and returns once all are confirmed. An undeclared
// stream gets a *StreamNotFoundError (errors.Is ErrStreamNotFound).
//
// The partition count comes from what the client knows (its own DeclarePlexus,
// TOPOLOGY's stream entries); when nothing lists the stream, as on a standalone
// broker, partitions 0, 1, ... are subscribed one by one until the broker
// answers 404 for one.
func (c *Client) SubscribeStream(ctx context.Context, topic string, opts StreamOptions) (*StreamSubscription, error) {
	if err := validateName("topic", topic); err != nil {
		return nil, err
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	eng, err := c.engine(ctx)
	if err != nil {
		return nil, err
	}
	sub := newStreamSubscription(c, topic, false, opts)
	sub.attach(eng)
	if err := sub.attachTopic(ctx, eng, topic); err != nil {
		sub.closeWith(err)
		return nil, err
	}
	return sub, nil
}

// attachTopic subscribes every partition of topic on e.
func (s *StreamSubscription) attachTopic(ctx context.Context, e *engine, topic string) error {
	s.mu.Lock()
	s.topics[topic] = true
	s.mu.Unlock()
	count, known, err := s.client.streamPartitionCount(ctx, e, topic)
	if err != nil {
		return err
	}
	if known {
		parts := make([]*streamPartition, 0, count)
		for partition := range count {
			parts = append(parts, s.addPart(topic, partition))
		}
		return s.subscribeParts(ctx, e, parts)
	}
	// Probe: the first partition that does not exist ends the stream.
	for partition := range uint32(streamPartitionsProbeMax) {
		part := s.addPart(topic, partition)
		err := s.subscribeParts(ctx, e, []*streamPartition{part})
		if errors.Is(err, ErrStreamNotFound) && partition > 0 {
			s.removePart(part)
			s.client.streams.learn(topic, partition)
			return nil
		}
		if err != nil {
			return err
		}
	}
	s.client.streams.learn(topic, streamPartitionsProbeMax)
	return nil
}

func (s *StreamSubscription) addPart(topic string, partition uint32) *streamPartition {
	part := &streamPartition{topic: topic, partition: partition, sub: s}
	s.mu.Lock()
	s.parts = append(s.parts, part)
	s.mu.Unlock()
	return part
}

// removePart forgets a partition that was never registered (a 404 probe).
func (s *StreamSubscription) removePart(part *streamPartition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if part.registered {
		panic("client: removing a registered stream partition")
	}
	for i, p := range s.parts {
		if p == part {
			s.parts = append(s.parts[:i], s.parts[i+1:]...)
			return
		}
	}
}

// request builds the SUBSCRIBE_STREAM for part: an ephemeral partition that
// already handed records over resumes right after the last one.
func (s *StreamSubscription) request(part *streamPartition) wire.SubscribeStream {
	req := wire.SubscribeStream{
		Topic: part.topic, Partition: part.partition, Start: s.opts.Start.start,
		Prefetch: s.opts.Prefetch, AutoAck: s.opts.AutoAck,
	}
	if s.opts.Durable != "" {
		req.DurableName = wire.Some(s.opts.Durable)
		req.Start = wire.StreamStart{} // ignored by the broker; the cursor decides
	}
	for _, clause := range s.opts.Filter {
		req.Filter = append(req.Filter, wire.KeyValue{Key: clause.Key, Value: clause.Pattern})
	}
	s.sendMu.Lock()
	if s.opts.Durable == "" && part.delivered {
		req.Start = wire.StreamStart{Kind: wire.StreamStartOffset, Value: part.lastOffset + 1}
	}
	s.sendMu.Unlock()
	return req
}

// subscribeParts sends one SUBSCRIBE_STREAM per part on e, then awaits them all;
// it returns the first failure.
func (s *StreamSubscription) subscribeParts(ctx context.Context, e *engine, parts []*streamPartition) error {
	calls := make([]*call, 0, len(parts))
	var firstErr error
	for _, part := range parts {
		c, err := e.startRequest(ctx, wire.OpSubscribeStream, s.request(part), s.registerOnReply(e, part))
		if err != nil {
			firstErr = err
			break
		}
		calls = append(calls, c)
	}
	for i, c := range calls {
		if err := awaitStreamSubscribed(ctx, e, c, parts[i]); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// registerOnReply runs on e's reader goroutine when a SUBSCRIBE_STREAM is answered.
func (s *StreamSubscription) registerOnReply(e *engine, part *streamPartition) func(reply) {
	return func(r reply) {
		ok, isOk := r.body.(wire.SubscribeOk)
		if !isOk {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.detached || s.eng != e {
			return // closed meanwhile, or moved on to a newer engine
		}
		if part.registered {
			panic("client: a stream partition registered twice on one engine")
		}
		part.subID, part.registered = ok.SubID, true
		e.mu.Lock()
		e.streams[ok.SubID] = part
		e.mu.Unlock()
	}
}

func awaitStreamSubscribed(ctx context.Context, e *engine, c *call, part *streamPartition) error {
	r, err := e.await(ctx, c)
	if err != nil {
		return err
	}
	switch body := r.body.(type) {
	case wire.SubscribeOk:
		return nil
	case wire.ErrorBody:
		brokerErr := brokerError(r.op, body)
		if body.Code == wire.CodeNotFound {
			return &StreamNotFoundError{Topic: part.topic, Partition: part.partition, Broker: brokerErr}
		}
		return brokerErr
	case wire.Redirect:
		return &RedirectError{Topic: body.Topic, Partition: body.Partition, Owners: endpointAddrs(body.OwnerEndpoints)}
	}
	return fmt.Errorf("%w: %s in reply to SUBSCRIBE_STREAM", ErrProtocol, r.op)
}

// attach makes e the subscription's engine: registrations on the previous one
// end (its DELIVERs are dropped from now on). False when already closed.
func (s *StreamSubscription) attach(e *engine) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.detached {
		return false
	}
	old := s.eng
	s.eng = e
	if old != nil && old != e {
		old.mu.Lock()
		for _, part := range s.parts {
			if part.registered && old.streams[part.subID] == part {
				delete(old.streams, part.subID)
			}
		}
		delete(old.streamSubs, s)
		old.mu.Unlock()
	}
	for _, part := range s.parts {
		part.registered = false
	}
	e.mu.Lock()
	e.streamSubs[s] = struct{}{}
	e.mu.Unlock()
	return true
}

// resubscribe subscribes every partition again on e, to which the subscription
// was just attached (streams are not reconciled, §7.5). A broker refusal ends
// the subscription; a lost connection leaves it to the next reconnect.
func (s *StreamSubscription) resubscribe(e *engine) {
	// Barrier: a push from the old engine that got past its check finishes
	// (and records its offset) before the start offsets are read.
	s.sendMu.Lock()
	s.sendMu.Unlock() //nolint:staticcheck // an intentional empty critical section
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.HandshakeTimeout)
	defer cancel()
	s.mu.Lock()
	parts := append([]*streamPartition(nil), s.parts...)
	s.mu.Unlock()
	err := s.subscribeParts(ctx, e, parts)
	if err == nil || e.isClosed() {
		return
	}
	e.log.Info("client: stream resubscribe failed", "stream", s.name, "err", err)
	s.closeWith(err)
}

// Deliveries is the channel of records from every partition. It is closed when
// the subscription ends; CloseReason then says why.
func (s *StreamSubscription) Deliveries() <-chan *Delivery { return s.deliveries }

// Topic returns the stream name, or the pattern of SubscribeStreamPattern.
func (s *StreamSubscription) Topic() string { return s.name }

// Topics returns the streams attached so far (one, unless a pattern).
func (s *StreamSubscription) Topics() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.topics))
	for topic := range s.topics {
		out = append(out, topic)
	}
	return out
}

// Close stops delivery and closes the channel. There is no unsubscribe frame:
// the broker keeps its side until the connection ends.
func (s *StreamSubscription) Close() error {
	s.closeWith(ErrSubscriptionClosed)
	return nil
}

// CloseReason is nil while open; then a *SubscriptionClosedError when the
// broker ended a partition, ErrSubscriptionClosed after Close, a broker error
// from a resubscribe, or the connection error that ended it.
func (s *StreamSubscription) CloseReason() error {
	select {
	case <-s.done:
		return s.reason
	default:
		return nil
	}
}

func (s *StreamSubscription) isDetached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.detached
}

// closeWith ends the subscription once: unregister, wake the reader, close the
// channel.
func (s *StreamSubscription) closeWith(reason error) {
	s.closeOnce.Do(func() {
		s.reason = reason
		s.mu.Lock()
		s.detached = true
		if e := s.eng; e != nil {
			e.mu.Lock()
			for _, part := range s.parts {
				if part.registered && e.streams[part.subID] == part {
					delete(e.streams, part.subID)
				}
			}
			delete(e.streamSubs, s)
			e.mu.Unlock()
		}
		s.mu.Unlock()
		close(s.done)
		s.sendMu.Lock()
		s.sendClosed = true
		close(s.deliveries)
		s.sendMu.Unlock()
	})
}

// push hands a record from e to the application if it is from part's current
// registration, waiting while the channel is full (backpressure).
func (s *StreamSubscription) push(e *engine, part *streamPartition, subID uint64, d *Delivery) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.sendClosed {
		return
	}
	s.mu.Lock()
	current := part.registered && part.subID == subID && s.eng == e
	s.mu.Unlock()
	if !current {
		return
	}
	select {
	case s.deliveries <- d:
		part.lastOffset, part.delivered = d.Offset, true
		return
	default:
	}
	e.deliveringBlocked.Store(true)
	select {
	case s.deliveries <- d:
		part.lastOffset, part.delivered = d.Offset, true
	case <-s.done:
	case <-e.closed:
	}
	e.lastReceivedNanos.Store(time.Now().UnixNano()) // before the flag clears (subscription.go)
	e.deliveringBlocked.Store(false)
}

// liveStreamSubs returns the stream subscriptions attached to e and still open.
func (e *engine) liveStreamSubs() []*StreamSubscription {
	e.mu.Lock()
	subs := make([]*StreamSubscription, 0, len(e.streamSubs))
	for sub := range e.streamSubs {
		subs = append(subs, sub)
	}
	e.mu.Unlock()
	live := subs[:0]
	for _, sub := range subs {
		if !sub.isDetached() {
			live = append(live, sub)
		}
	}
	return live
}

// onStreamDeliver routes a DELIVER of a stream partition; false when subID is
// not a stream subscription of e.
func (e *engine) onStreamDeliver(requestID uint64, d wire.Deliver) bool {
	e.mu.Lock()
	part := e.streams[d.SubID]
	e.mu.Unlock()
	if part == nil {
		return false
	}
	s := part.sub
	delivery := newDelivery(e, s.client, s.opts.AutoAck, requestID, d)
	delivery.stream = true
	s.push(e, part, d.SubID, delivery)
	return true
}

// onStreamClosed ends the whole subscription when the broker ends one of its
// partitions; false when subID is not a stream subscription of e.
func (e *engine) onStreamClosed(sc wire.SubscriptionClosed) bool {
	e.mu.Lock()
	part := e.streams[sc.SubID]
	e.mu.Unlock()
	if part == nil {
		return false
	}
	part.sub.closeWith(&SubscriptionClosedError{SubID: sc.SubID, Code: sc.Code, Message: sc.Message})
	return true
}
