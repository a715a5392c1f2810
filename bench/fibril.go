package bench

// The Target over Fibril's Go client.
//
// Invariants:
//   - Every producer, consumer and probe has its own client.Client, so its own
//     connection; none reconnects on its own (a silent reconnect would change
//     what is measured).
//   - A producer has at most Window confirmations queued for its waiter, so
//     queueing one never blocks (the driver's slots bound them).
//   - The left probe acknowledges what it counts, so it cannot see a message
//     twice.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fibril-go/fibril/client"
)

// LeftIdleDefault is how long the left probe waits without a delivery before
// it concludes the queue is empty: far above a loopback round trip, short
// enough not to dominate a scenario's wall time.
const LeftIdleDefault = 500 * time.Millisecond

// consumerStopTimeout bounds waiting for a consumer's loop after its client
// closed (Close flushes queued ACKs for at most 2 s first).
const consumerStopTimeout = 5 * time.Second

// Fibril is a Target on one Fibril broker over one transport.
type Fibril struct {
	Addr        string
	Transport   string // client.TransportQUIC or client.TransportTCP
	Credentials *client.Credentials
	TLS         *client.TLSOptions
	// ReconnectGrace is the broker's serve --reconnect-grace-ms: a closed
	// connection's unsettled deliveries return to the queue only after it,
	// so the left probe listens at least this long.
	ReconnectGrace time.Duration
	// LeftIdle ends the left probe after this long without a delivery; zero
	// means LeftIdleDefault.
	LeftIdle time.Duration
	// AdminURL is the broker's admin listener (http://127.0.0.1:8081). When
	// set, Cleanup deletes the run's queue through POST
	// /admin/api/queues/delete, as the peers' drivers delete theirs, so that
	// a run's backlog does not stay in the broker (and in its RSS) for the
	// runs after it. Empty keeps every queue (the broker is not touched).
	AdminURL string
	Logger   *slog.Logger
	// Partitions is the partition count Prepare declares; zero means 1. With
	// more than one, each producer's publishes go round-robin over them (the
	// client's choice for unkeyed messages) and a consumer subscribes to all.
	Partitions int
	// Queues is how many queues Prepare declares; zero means 1. With more
	// than one, a producer publishes message id to queue id mod Queues
	// (a client.Publisher per queue: a small struct, no connection), and
	// only confirmed-publish is supported: a consumer would need one
	// subscription per queue.
	Queues int

	w      Workload
	topic  string
	topics []string // every queue Prepare declared; topics[0] == topic
}

// declareConcurrency bounds the DeclareQueue requests in flight when Prepare
// declares many queues: one round trip each, pipelined on one connection.
const declareConcurrency = 32

// System is the system= name for transport: fibril-quic or fibril-tcp.
func System(transport string) string { return "fibril-" + transport }

func (f *Fibril) dial(ctx context.Context) (*client.Client, error) {
	return client.Dial(ctx, f.Addr, client.ClientOptions{
		Transport:            f.Transport,
		Credentials:          f.Credentials,
		TLS:                  f.TLS,
		DisableAutoReconnect: true,
		ClientName:           "fibril-bench",
		Logger:               f.Logger,
	})
}

// QueueName is a fresh queue name per run: Fibril cannot delete queues yet,
// so a unique name is what makes the destination fresh.
func QueueName(scenario, transport string, now time.Time) string {
	return fmt.Sprintf("bench.%s.%s.%d", scenario, transport, now.UnixNano())
}

// Prepare declares a fresh single-partition queue (the default count, made
// explicit because the workload assumes one offset-ordered log), or the
// Queues queues of Partitions partitions a sweep asks for. Over several
// partitions or queues confirms may arrive out of publish order, so there
// the producer waits for each on a goroutine of its own (fibrilProducer).
func (f *Fibril) Prepare(ctx context.Context, w Workload) error {
	f.w = w
	f.topic = QueueName(w.Scenario, f.Transport, time.Now())
	queues, want := max(f.Queues, 1), uint32(max(f.Partitions, 1))
	if queues > 1 && w.Scenario != ScenarioConfirmedPublish {
		return fmt.Errorf("%d queues: only %s spreads over several queues", queues, ScenarioConfirmedPublish)
	}
	f.topics = []string{f.topic}
	for i := 1; i < queues; i++ {
		f.topics = append(f.topics, fmt.Sprintf("%s.q%d", f.topic, i))
	}
	c, err := f.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return declareAll(ctx, c, f.topics, want)
}

// declareAll declares every topic with want partitions over c, at most
// declareConcurrency at once, and returns the first error. A declaration
// also fills c's route cache, so a producer that declared a queue publishes
// to it without a TOPOLOGY round trip first.
func declareAll(ctx context.Context, c *client.Client, topics []string, want uint32) error {
	errs := make(chan error, len(topics))
	slots := make(chan struct{}, declareConcurrency)
	for _, topic := range topics {
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			partitions, err := c.DeclareQueue(ctx, client.NewQueueConfig(topic).PartitionCount(want))
			if err == nil && partitions != want {
				err = fmt.Errorf("queue %s has %d partitions, want %d", topic, partitions, want)
			}
			errs <- err
		}()
	}
	var first error
	for range topics {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Topic is the queue the last Prepare declared.
func (f *Fibril) Topic() string { return f.topic }

// Close releases nothing: every connection belongs to a producer, consumer or
// probe and is closed by it.
func (f *Fibril) Close() error { return nil }

type pendingConfirm struct {
	id   uint64
	conf *client.Confirmation
}

type fibrilProducer struct {
	c       *client.Client
	pub     *client.Publisher
	pubs    []*client.Publisher // one per queue when Queues > 1, else nil
	pending chan pendingConfirm
	cancel  context.CancelFunc
	done    chan struct{}
	// unordered: confirms may come back out of publish order (several
	// partitions or queues), so each is waited for on its own goroutine
	// (at most Window of them): an in-order waiter would see an early
	// confirm late, overstating its latency and holding its window slot.
	unordered bool
	waitCtx   context.Context
	waiters   sync.WaitGroup
	confirm   ConfirmFunc
}

// NewProducer opens a connection and starts the goroutine that waits for its
// confirmations in publish order (see the package doc for why that order is
// exact on one queue of one partition; over several, each confirmation gets
// a waiter of its own).
func (f *Fibril) NewProducer(ctx context.Context, idx int, confirm ConfirmFunc) (Producer, error) {
	c, err := f.dial(ctx)
	if err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithCancel(ctx)
	p := &fibrilProducer{c: c, pub: c.Publisher(f.topic), pending: make(chan pendingConfirm, f.w.Window),
		cancel: cancel, done: make(chan struct{})}
	if len(f.topics) > 1 {
		// Learn every queue's route before the clock starts: on a standalone
		// broker the first publish to a queue otherwise waits for TOPOLOGY and
		// then DECLARE_QUEUE, two round trips per queue per connection, inside
		// the measured interval (they still count in wall_s and server CPU).
		if err := declareAll(ctx, c, f.topics, uint32(max(f.Partitions, 1))); err != nil {
			cancel()
			c.Close()
			return nil, err
		}
		for _, topic := range f.topics {
			p.pubs = append(p.pubs, c.Publisher(topic))
		}
	}
	if len(f.topics) > 1 || f.Partitions > 1 {
		p.unordered, p.waitCtx, p.confirm = true, waitCtx, confirm
		close(p.done)
		return p, nil
	}
	go p.awaitConfirms(waitCtx, confirm)
	return p, nil
}

// awaitOne waits for one confirmation of an unordered producer.
func (p *fibrilProducer) awaitOne(pc pendingConfirm) {
	defer p.waiters.Done()
	_, err := pc.conf.Wait(p.waitCtx)
	if p.waitCtx.Err() != nil {
		return // the run ended: an unanswered publish stays unconfirmed
	}
	p.confirm(pc.id, err == nil)
}

func (p *fibrilProducer) awaitConfirms(ctx context.Context, confirm ConfirmFunc) {
	defer close(p.done)
	for {
		var pc pendingConfirm
		select {
		case pc = <-p.pending:
		case <-ctx.Done():
			return
		}
		_, err := pc.conf.Wait(ctx)
		if ctx.Err() != nil {
			return // the run ended: unanswered publishes stay unconfirmed
		}
		// A broker rejection and a connection lost after sending both answer
		// the publish negatively and return its slot, as a nack does.
		confirm(pc.id, err == nil)
	}
}

func (p *fibrilProducer) PublishAsync(ctx context.Context, id uint64, body []byte) error {
	// client.Raw does not copy, but the client encodes the frame before
	// PublishWithConfirmation returns, so body is free again afterwards.
	pub := p.pub
	if len(p.pubs) > 0 {
		pub = p.pubs[id%uint64(len(p.pubs))]
	}
	conf, err := pub.PublishWithConfirmation(ctx, client.Raw(body))
	if err != nil {
		return err
	}
	if p.unordered {
		p.waiters.Add(1)
		go p.awaitOne(pendingConfirm{id: id, conf: conf})
		return nil
	}
	select {
	case p.pending <- pendingConfirm{id: id, conf: conf}:
		return nil
	default:
		panic("bench: more confirmations pending than the window allows")
	}
}

func (p *fibrilProducer) Close() error {
	p.cancel()
	<-p.done
	p.waiters.Wait()
	return p.c.Close()
}

type fibrilConsumer struct {
	c    *client.Client
	done chan struct{}
}

// NewConsumer opens a connection, subscribes with the workload's prefetch and
// acknowledges each delivery on its own right after recording it.
func (f *Fibril) NewConsumer(ctx context.Context, idx int, deliver DeliverFunc) (Consumer, error) {
	c, err := f.dial(ctx)
	if err != nil {
		return nil, err
	}
	sub, err := c.SubscribeTopic(ctx, f.topic, client.SubscribeOptions{Prefetch: uint32(f.w.Prefetch)})
	if err != nil {
		c.Close()
		return nil, err
	}
	fc := &fibrilConsumer{c: c, done: make(chan struct{})}
	go func() {
		defer close(fc.done)
		for d := range sub.Deliveries() {
			deliver(d.Payload)
			// An ACK that cannot be queued means the connection is gone;
			// the message comes back to the queue and shows as missing or
			// left, which is where the loss belongs.
			_ = d.Complete(ctx)
		}
	}()
	return fc, nil
}

func (fc *fibrilConsumer) Close() error {
	err := fc.c.Close() // flushes queued ACKs, then closes the subscription
	select {
	case <-fc.done:
	case <-time.After(consumerStopTimeout):
		return errors.Join(err, errors.New("consumer loop did not stop"))
	}
	return err
}

// Remaining subscribes a fresh consumer and counts, acknowledging, what
// arrives until LeftIdle passes without a delivery, listening at least
// ReconnectGrace + LeftIdle (see the package doc).
func (f *Fibril) Remaining(ctx context.Context) (int64, error) {
	idle := f.LeftIdle
	if idle <= 0 {
		idle = LeftIdleDefault
	}
	c, err := f.dial(ctx)
	if err != nil {
		return -1, err
	}
	defer c.Close()
	sub, err := c.SubscribeTopic(ctx, f.topic, client.SubscribeOptions{Prefetch: uint32(max(f.w.Prefetch, 1))})
	if err != nil {
		return -1, err
	}
	quietUntil := time.Now().Add(f.ReconnectGrace + idle)
	idleTimer := time.NewTimer(time.Until(quietUntil))
	defer idleTimer.Stop()
	var count int64
	for {
		select {
		case d, ok := <-sub.Deliveries():
			if !ok {
				return -1, fmt.Errorf("left probe: subscription ended: %w", sub.CloseReason())
			}
			count++
			if err := d.Complete(ctx); err != nil {
				return -1, fmt.Errorf("left probe: %w", err)
			}
			idleTimer.Reset(max(time.Until(quietUntil), idle))
		case <-idleTimer.C:
			return count, nil
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
}

var _ Target = (*Fibril)(nil)

// adminDeleteTimeout bounds one delete request: a delete waits for the
// queue's partitions to stop and its directory to go, which takes
// milliseconds unless the broker is stuck.
const adminDeleteTimeout = 30 * time.Second

// Cleanup deletes the queue the last Prepare declared, when AdminURL is set
// (a stream is kept: the admin API has no stream delete). It runs inside the
// measured interval, as the peers' Cleanup does.
func (f *Fibril) Cleanup(ctx context.Context) error {
	if f.AdminURL == "" || f.topic == "" || f.w.Scenario == ScenarioFanout {
		return nil
	}
	topics := f.topics
	if len(topics) == 0 {
		topics = []string{f.topic}
	}
	var errs []error
	for _, topic := range topics {
		if err := f.deleteQueue(ctx, topic); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteQueue deletes one queue through the admin API.
func (f *Fibril) deleteQueue(ctx context.Context, topic string) error {
	body, err := json.Marshal(map[string]string{"topic": topic})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, adminDeleteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		strings.TrimSuffix(f.AdminURL, "/")+"/admin/api/queues/delete", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("delete %s: %w", topic, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("delete %s: %s: %s", topic, resp.Status, bytes.TrimSpace(answer))
	}
	return nil
}

var _ Cleaner = (*Fibril)(nil)

// PrepareLog declares a fresh single-partition durable stream (the durable
// tier: every record fsynced before its confirm and before any delivery).
func (f *Fibril) PrepareLog(ctx context.Context, w Workload) error {
	f.w = w
	f.topic = QueueName(w.Scenario, f.Transport, time.Now())
	c, err := f.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	partitions, err := c.DeclarePlexus(ctx, client.NewStreamConfig(f.topic).PartitionCount(1).Durability(client.DurabilityDurable))
	if err != nil {
		return err
	}
	if partitions != 1 {
		return fmt.Errorf("stream %s has %d partitions, want 1", f.topic, partitions)
	}
	return nil
}

// NewReader opens a connection and a durable cursor of its own (a new name
// starts at the oldest retained record), acking each delivery.
func (f *Fibril) NewReader(ctx context.Context, idx int, deliver DeliverFunc) (Consumer, error) {
	c, err := f.dial(ctx)
	if err != nil {
		return nil, err
	}
	sub, err := c.SubscribeStream(ctx, f.topic, client.StreamOptions{
		Durable: fmt.Sprintf("reader-%d", idx), Prefetch: uint32(f.w.Prefetch)})
	if err != nil {
		c.Close()
		return nil, err
	}
	fc := &fibrilConsumer{c: c, done: make(chan struct{})}
	go func() {
		defer close(fc.done)
		for d := range sub.Deliveries() {
			deliver(d.Payload)
			_ = d.Ack(ctx)
		}
	}()
	return fc, nil
}

var _ FanoutTarget = (*Fibril)(nil)
