package client

// Queue subscriptions: one SUBSCRIBE per partition, fanned into one channel
// (PROTOCOL §5.6-5.8, §5.24, §7.11); exclusive ones join a cohort (cohort.go).
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
//   - An exclusive SUBSCRIBE_OK's member id is cached in the cohort table on the
//     reader, before the reply is handed over, so the SUBSCRIBEs sent after it
//     carry the id (cohort.go).
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

// SubscribeOptions configure SubscribeTopic and SubscribeTopicExclusive.
type SubscribeOptions struct {
	// Group is the queue namespace ("" and "default" are the default).
	Group string
	// Prefetch is the most unsettled deliveries per partition; 0 means 1.
	Prefetch uint32
	// AutoAck makes the broker settle each delivery as it sends it.
	AutoAck bool
	// ConsumerGroup, when set, makes the subscription exclusive: it joins the
	// queue's cohort of that id, and each partition is delivered to one member
	// of the cohort at a time (PROTOCOL §7.6). SubscribeTopicExclusive uses
	// DefaultConsumerGroup when it is empty; SubscribeTopic then subscribes as a
	// competing consumer.
	ConsumerGroup string
	// ConsumerTarget is the most partitions this member would like to own, a
	// soft maximum (coverage of every partition wins over it); 0 means no
	// preference. Only meaningful with ConsumerGroup.
	ConsumerTarget uint32
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
	// consumerGroup is the cohort id of an exclusive subscription, "" for
	// competing consumers; consumerTarget its soft maximum (0: none).
	consumerGroup  string
	consumerTarget uint32

	deliveries chan *Delivery

	mu       sync.Mutex
	eng      *engine         // guarded by mu
	parts    []*partitionSub // guarded by mu
	detached bool            // guarded by mu
	memberID UUID            // guarded by mu; the last one the broker resolved for it

	sendMu     sync.Mutex
	sendClosed bool // guarded by sendMu

	done      chan struct{}
	closeOnce sync.Once
	reason    error // set before done is closed
}

// SubscribeTopic subscribes to every partition of topic (one SUBSCRIBE each,
// counts from the topology) and returns once all are confirmed. With
// opts.ConsumerGroup set it is SubscribeTopicExclusive.
func (c *Client) SubscribeTopic(ctx context.Context, topic string, opts SubscribeOptions) (*Subscription, error) {
	key, err := queueKey(topic, opts.Group)
	if err != nil {
		return nil, err
	}
	if opts.ConsumerGroup == "" && opts.ConsumerTarget != 0 {
		return nil, fmt.Errorf("%w: ConsumerTarget %d without a ConsumerGroup", ErrInvalidArgument, opts.ConsumerTarget)
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
		topic:          key.topic,
		group:          key.group,
		autoAck:        opts.AutoAck,
		prefetch:       prefetch,
		client:         c,
		consumerGroup:  opts.ConsumerGroup,
		consumerTarget: opts.ConsumerTarget,
		eng:            eng,
		deliveries:     make(chan *Delivery, bufferSize),
		done:           make(chan struct{}),
	}
	first := uint32(0)
	if sub.isExclusive() {
		// Registered before any SUBSCRIBE goes out: the first notice may follow
		// the first SUBSCRIBE_OK at once.
		c.cohorts.join(sub.cohortKey())
		if first, err = sub.subscribeMinting(ctx, eng, count); err != nil {
			return nil, err
		}
	}
	if err := sub.subscribePartitions(ctx, eng, first, count); err != nil {
		return nil, err
	}
	return sub, nil
}

// SubscribeTopicExclusive subscribes to every partition of topic as a member
// of the queue's exclusive cohort opts.ConsumerGroup (DefaultConsumerGroup when
// empty): the broker delivers each partition to one member of the cohort at a
// time, balanced and sticky, and moves the partitions of a member that leaves
// to the others (PROTOCOL §7.6, SPEC §4). Run the same call in several
// processes and they share the queue, each key in order.
//
// The first exclusive SUBSCRIBE of the client carries no member id; the broker
// mints one, and every later exclusive SUBSCRIBE and reconcile of this client
// carries it (MemberID), over this connection and every later one. Assignment
// and ClientOptions.OnAssignmentChanged tell which partitions this member owns.
// A 409 or 400 answer is a *CohortError.
func (c *Client) SubscribeTopicExclusive(ctx context.Context, topic string, opts SubscribeOptions) (*Subscription, error) {
	if opts.ConsumerGroup == "" {
		opts.ConsumerGroup = DefaultConsumerGroup
	}
	return c.SubscribeTopic(ctx, topic, opts)
}

// subscribeMinting subscribes partition 0 alone, without member_id, when the
// client has no member id yet, so that the broker mints one and the other
// partitions carry it (§5.6); it returns how many partitions it subscribed (0
// or 1). On an error the subscription is closed.
func (s *Subscription) subscribeMinting(ctx context.Context, e *engine, count uint32) (uint32, error) {
	mint, err := s.client.cohorts.beginMint(ctx)
	if err != nil {
		s.closeWith(err)
		return 0, err
	}
	if !mint {
		return 0, nil
	}
	defer s.client.cohorts.endMint()
	if count == 0 {
		return 0, nil
	}
	if err := s.subscribePartitions(ctx, e, 0, 1); err != nil {
		return 0, err
	}
	if _, ok := s.client.cohorts.member(); !ok {
		panic("client: an exclusive SUBSCRIBE_OK left no member id")
	}
	return 1, nil
}

// subscribePartitions sends the SUBSCRIBEs of partitions [from, to) pipelined
// and waits for all; on an error the subscription is closed.
func (s *Subscription) subscribePartitions(ctx context.Context, e *engine, from, to uint32) error {
	type sent struct {
		call *call
		req  wire.Subscribe
	}
	calls := make([]sent, 0, to-from)
	for partition := from; partition < to; partition++ {
		req := s.subscribeRequest(partition)
		call, err := e.startRequest(ctx, wire.OpSubscribe, req, s.registerOnReply(e, partition))
		if err != nil {
			s.closeWith(err)
			return err
		}
		calls = append(calls, sent{call: call, req: req})
	}
	for _, c := range calls {
		if err := s.awaitSubscribed(ctx, e, c.call, c.req); err != nil {
			s.closeWith(err)
			return err
		}
	}
	return nil
}

// subscribeRequest builds the SUBSCRIBE of one partition; an exclusive one
// carries the cohort fields and the client's member id once it has one.
func (s *Subscription) subscribeRequest(partition uint32) wire.Subscribe {
	req := wire.Subscribe{
		Topic: s.topic, Partition: partition, Group: groupOpt(s.group),
		Prefetch: s.prefetch, AutoAck: s.autoAck,
	}
	if !s.isExclusive() {
		return req
	}
	req.ConsumerGroup = wire.Some(s.consumerGroup)
	if s.consumerTarget != 0 {
		req.ConsumerTarget = wire.Some(s.consumerTarget)
	}
	if id, ok := s.client.cohorts.member(); ok {
		req.MemberID = wire.Some(id)
	}
	return req
}

// registerOnReply runs on e's reader goroutine when a SUBSCRIBE is answered.
func (s *Subscription) registerOnReply(e *engine, partition uint32) func(reply) {
	return func(r reply) {
		ok, isOk := r.body.(wire.SubscribeOk)
		if !isOk {
			return
		}
		// The member id is cached here, on the reader, before the caller wakes
		// and sends the next SUBSCRIBE with it. An exclusive reply without one
		// fails in awaitSubscribed.
		memberID, hasMember := ok.MemberID.Get()
		hasMember = hasMember && !memberID.IsNil() && s.isExclusive()
		if hasMember {
			s.client.cohorts.adopt(memberID)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.detached {
			return // a late reply for a subscription that already failed or closed
		}
		if s.eng != e {
			panic("client: a SUBSCRIBE_OK for an engine the subscription left")
		}
		if hasMember {
			s.memberID = memberID
		}
		part := &partitionSub{subID: ok.SubID, partition: partition, sub: s}
		e.mu.Lock()
		e.subs[ok.SubID] = part
		e.mu.Unlock()
		s.parts = append(s.parts, part)
		e.sess.hadSubs.Store(true)
	}
}

func (s *Subscription) awaitSubscribed(ctx context.Context, e *engine, c *call, req wire.Subscribe) error {
	r, err := e.await(ctx, c)
	if err != nil {
		return err
	}
	switch body := r.body.(type) {
	case wire.SubscribeOk:
		if !s.isExclusive() {
			return nil
		}
		if id, ok := body.MemberID.Get(); !ok || id.IsNil() {
			return fmt.Errorf("%w: SUBSCRIBE_OK for an exclusive subscribe to %s partition %d carries no member id",
				ErrProtocol, s.topic, req.Partition)
		}
		return nil
	case wire.ErrorBody:
		brokerErr := brokerError(r.op, body)
		if s.isExclusive() && (brokerErr.Code == CodeConflict || brokerErr.Code == CodeInvalid) {
			return &CohortError{Topic: s.topic, Group: s.group, Partition: req.Partition,
				ConsumerGroup: s.consumerGroup, MemberID: req.MemberID.Value, Broker: brokerErr}
		}
		return brokerErr
	case wire.Redirect:
		return &RedirectError{Topic: body.Topic, Partition: body.Partition, Owners: endpointAddrs(body.OwnerEndpoints)}
	}
	return fmt.Errorf("%w: %s in reply to SUBSCRIBE", ErrProtocol, r.op)
}

// isExclusive reports whether s is a cohort member (it has a consumer group).
func (s *Subscription) isExclusive() bool { return s.consumerGroup != "" }

func (s *Subscription) cohortKey() cohortKey {
	return cohortKey{topic: s.topic, group: s.group, consumerGroup: s.consumerGroup}
}

// ConsumerGroup returns the cohort id of an exclusive subscription, "" for a
// competing-consumer one.
func (s *Subscription) ConsumerGroup() string { return s.consumerGroup }

// MemberID returns the cohort member id the broker resolved for this
// exclusive subscription (the client's member id); the nil UUID for a
// competing-consumer subscription.
func (s *Subscription) MemberID() UUID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memberID
}

// Assignment returns the partitions the last accepted ASSIGNMENT_CHANGED of
// this subscription's cohort assigned to this member, sorted; nil before the
// first notice and for a competing-consumer subscription. It is informational:
// deliveries come only from the partitions the broker's gate lets through.
func (s *Subscription) Assignment() []uint32 {
	if !s.isExclusive() {
		return nil
	}
	return s.client.cohorts.assignment(s.cohortKey())
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
	// The wait was ours, not the broker's silence. Refreshed before the
	// flag clears: the heartbeat reads the flag first, so it never sees
	// "not blocked" with the time from before the wait.
	e.lastReceivedNanos.Store(time.Now().UnixNano())
	e.deliveringBlocked.Store(false)
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
