package client

// Queue subscriptions: one SUBSCRIBE per partition, fanned into one channel
// (PROTOCOL §5.6-5.8, §5.24, §7.11).
//
// Invariants:
//   - A partition's sub id is registered on the reader goroutine while it handles
//     SUBSCRIBE_OK, before it reads the next frame, so no DELIVER that follows the
//     reply is dropped as unknown (§5.6 ordering rule).
//   - The deliveries channel is closed exactly once, under sendMu, after done is
//     closed; the reader sends only under sendMu and gives up when done or the
//     engine closes, so it never sends on a closed channel nor blocks forever.
//   - A closed subscription registers no further partitions (detached, under mu;
//     lock order: Subscription.mu, then engine.mu).
//   - eng is the engine the subscription's partitions are registered on; a resume
//     moves it to the new engine (session.go) and the deliveries channel stays
//     the same, so consumers see one stream across reconnects.
//   - There is no UNSUBSCRIBE opcode: Close stops delivery locally; the broker keeps
//     the server-side subscription until the connection ends, and unsettled or
//     later deliveries return to the queue when their lease expires.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// ReasonCode is a typed close reason (PROTOCOL §7.9).
type ReasonCode = wire.ReasonCode

// Close reasons a broker sends in SUBSCRIPTION_CLOSED.
const (
	ReasonUnspecified    = wire.ReasonUnspecified
	ReasonTopicDeleted   = wire.ReasonTopicDeleted
	ReasonOwnerMoved     = wire.ReasonOwnerMoved
	ReasonBrokerShutdown = wire.ReasonBrokerShutdown
	ReasonCohortRemoved  = wire.ReasonCohortRemoved
	ReasonLagged         = wire.ReasonLagged
	ReasonServerError    = wire.ReasonServerError
)

// SubscribeOptions configure SubscribeTopic.
type SubscribeOptions struct {
	// Group is the queue namespace ("" and "default" are the default).
	Group string
	// Prefetch is the most unsettled deliveries per partition; 0 means 1.
	Prefetch uint32
	// AutoAck makes the broker settle each delivery as it sends it.
	AutoAck bool
}

type partitionSub struct {
	subID     uint64
	partition uint32
	sub       *Subscription
}

// Subscription fans the deliveries of every partition of a queue into one
// channel.
type Subscription struct {
	topic    string
	group    string
	autoAck  bool
	prefetch uint32
	client   *Client

	deliveries chan *Delivery

	mu       sync.Mutex
	eng      *engine         // guarded by mu
	parts    []*partitionSub // guarded by mu
	detached bool            // guarded by mu

	sendMu     sync.Mutex
	sendClosed bool // guarded by sendMu

	done      chan struct{}
	closeOnce sync.Once
	reason    error // set before done is closed
}

// SubscribeTopic subscribes to every partition of topic (one SUBSCRIBE each,
// counts from the topology) and returns once all are confirmed.
func (c *Client) SubscribeTopic(ctx context.Context, topic string, opts SubscribeOptions) (*Subscription, error) {
	key, err := queueKey(topic, opts.Group)
	if err != nil {
		return nil, err
	}
	prefetch := max(opts.Prefetch, 1)
	eng, err := c.engine(ctx)
	if err != nil {
		return nil, err
	}
	count, err := c.partitionCount(ctx, eng, key)
	if err != nil {
		return nil, err
	}
	// Room for every delivery the broker may have outstanding, so the reader never
	// waits on a consumer that settles in time (auto-ack has no such bound).
	bufferSize := min(uint64(prefetch)*uint64(count), deliveryBufferMax)
	sub := &Subscription{
		topic:      key.topic,
		group:      key.group,
		autoAck:    opts.AutoAck,
		prefetch:   prefetch,
		client:     c,
		eng:        eng,
		deliveries: make(chan *Delivery, bufferSize),
		done:       make(chan struct{}),
	}
	calls := make([]*call, 0, count)
	for partition := range count {
		req := wire.Subscribe{
			Topic: key.topic, Partition: partition, Group: groupOpt(key.group),
			Prefetch: prefetch, AutoAck: opts.AutoAck,
		}
		call, err := eng.startRequest(ctx, wire.OpSubscribe, req, sub.registerOnReply(eng, partition))
		if err != nil {
			sub.closeWith(err)
			return nil, err
		}
		calls = append(calls, call)
	}
	for _, call := range calls {
		if err := sub.awaitSubscribed(ctx, eng, call); err != nil {
			sub.closeWith(err)
			return nil, err
		}
	}
	return sub, nil
}

// registerOnReply runs on e's reader goroutine when a SUBSCRIBE is answered.
func (s *Subscription) registerOnReply(e *engine, partition uint32) func(reply) {
	return func(r reply) {
		ok, isOk := r.body.(wire.SubscribeOk)
		if !isOk {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.detached {
			return // a late reply for a subscription that already failed or closed
		}
		if s.eng != e {
			panic("client: a SUBSCRIBE_OK for an engine the subscription left")
		}
		part := &partitionSub{subID: ok.SubID, partition: partition, sub: s}
		e.mu.Lock()
		e.subs[ok.SubID] = part
		e.mu.Unlock()
		s.parts = append(s.parts, part)
		e.sess.hadSubs.Store(true)
	}
}

func (s *Subscription) awaitSubscribed(ctx context.Context, e *engine, c *call) error {
	r, err := e.await(ctx, c)
	if err != nil {
		return err
	}
	switch body := r.body.(type) {
	case wire.SubscribeOk:
		return nil
	case wire.ErrorBody:
		return brokerError(r.op, body)
	case wire.Redirect:
		return &RedirectError{Topic: body.Topic, Partition: body.Partition, Owners: endpointAddrs(body.OwnerEndpoints)}
	}
	return fmt.Errorf("%w: %s in reply to SUBSCRIBE", ErrProtocol, r.op)
}

// Deliveries is the channel of deliveries from every partition. It is closed when
// the subscription ends; CloseReason then says why.
func (s *Subscription) Deliveries() <-chan *Delivery { return s.deliveries }

// Topic returns the subscribed topic.
func (s *Subscription) Topic() string { return s.topic }

// Close stops delivery to this subscription and closes the channel. The protocol
// has no unsubscribe frame: the broker keeps the subscription until the
// connection ends, and what it has delivered but nobody settled returns to the
// queue when the lease expires.
func (s *Subscription) Close() error {
	s.closeWith(ErrSubscriptionClosed)
	return nil
}

// CloseReason is nil while the subscription is open. Afterwards it is a
// *SubscriptionClosedError when the broker ended it, ErrSubscriptionClosed after
// Close, or the connection error that ended it.
func (s *Subscription) CloseReason() error {
	select {
	case <-s.done:
		return s.reason
	default:
		return nil
	}
}

// closeWith ends the subscription once: unregister, wake the reader, close the
// channel.
func (s *Subscription) closeWith(reason error) {
	s.closeOnce.Do(func() {
		s.reason = reason
		s.mu.Lock()
		s.detached = true
		e := s.eng
		e.mu.Lock()
		for _, part := range s.parts {
			if e.subs[part.subID] == part {
				delete(e.subs, part.subID)
			}
		}
		e.mu.Unlock()
		s.mu.Unlock()
		close(s.done)
		s.sendMu.Lock()
		s.sendClosed = true
		close(s.deliveries)
		s.sendMu.Unlock()
	})
}

// isDetached reports whether the subscription has closed.
func (s *Subscription) isDetached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.detached
}

// push hands a delivery from e to the application, waiting while the channel is
// full (backpressure on the connection) unless the subscription or e closes.
func (s *Subscription) push(e *engine, d *Delivery) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.sendClosed {
		return
	}
	select {
	case s.deliveries <- d:
		return
	default:
	}
	e.deliveringBlocked.Store(true)
	select {
	case s.deliveries <- d:
	case <-s.done:
	case <-e.closed:
	}
	e.deliveringBlocked.Store(false)
	// The wait was ours, not the broker's silence.
	e.lastReceivedNanos.Store(time.Now().UnixNano())
}

// onDeliver routes a DELIVER to its subscription; unknown sub ids are dropped
// (§5.8), and their messages return when the lease expires.
func (e *engine) onDeliver(requestID uint64, d wire.Deliver) {
	if e.onStreamDeliver(requestID, d) {
		return
	}
	e.mu.Lock()
	part := e.subs[d.SubID]
	e.mu.Unlock()
	if part == nil {
		e.log.Debug("client: dropping DELIVER for an unknown subscription", "sub_id", d.SubID)
		return
	}
	part.sub.push(e, newDelivery(e, part.sub.client, part.sub.autoAck, requestID, d))
}

// onSubscriptionClosed ends the whole fanned-in subscription when the broker ends
// any of its partitions: a silent partial stream would go unnoticed.
func (e *engine) onSubscriptionClosed(sc wire.SubscriptionClosed) {
	if e.onStreamClosed(sc) {
		return
	}
	e.mu.Lock()
	part := e.subs[sc.SubID]
	e.mu.Unlock()
	if part == nil {
		return
	}
	part.sub.closeWith(&SubscriptionClosedError{SubID: sc.SubID, Code: sc.Code, Message: sc.Message})
}
