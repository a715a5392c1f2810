package peers

// RabbitMQ over AMQP 0-9-1 (github.com/rabbitmq/amqp091-go), for
// rabbitmq-quorum, rabbitmq-classic and rabbitmq-stream.
//
// As in the harness:
//   - one durable queue bench.<scenario>.<type> declared with x-queue-type
//     quorum, classic or stream (deleted first, deleted again by Cleanup);
//   - persistent messages (delivery_mode 2) through the default exchange,
//     routing key = the queue, on a channel in confirm mode; a confirmation
//     is basic.ack / basic.nack, which the client hands over one per delivery
//     tag (it expands multiple=true) in tag order;
//   - consumers: basic.qos(prefetch) on their channel, basic.consume with
//     manual acks, basic.ack(multiple=false) per delivery right after it was
//     recorded;
//   - fanout (stream queue only): each reader consumes with
//     x-stream-offset=first on its own connection and acks each delivery;
//   - left = the ready count of a passive queue.declare once the consumers'
//     channels are closed (closing requeues their unacked deliveries).
//
// Invariants:
//   - Delivery tag n of a producer's channel is its n-th publish, whose id the
//     producer wrote at ids[n-1] before publishing; a tag outside that range
//     is ignored (it cannot be one of ours).
//   - The quorum and classic targets are not bench.FanoutTargets (a queue
//     delivers each message once), so their fanout line says unsupported;
//     the stream target refuses end-to-end (stream consumers do not compete).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fibril-go/fibril/bench"
)

// rabbitHeartbeat is the AMQP heartbeat the client negotiates.
const rabbitHeartbeat = 10 * time.Second

// RabbitTarget runs the queue scenarios on one RabbitMQ queue type.
type RabbitTarget struct {
	spec  Spec
	url   string
	qtype string // quorum, classic or stream

	conn  *amqp.Connection // admin connection
	w     bench.Workload
	queue string
}

// RabbitStreamTarget is the stream queue: a RabbitTarget with fanout.
type RabbitStreamTarget struct{ RabbitTarget }

func newRabbitTarget(spec Spec, url string) bench.Target {
	t := RabbitTarget{spec: spec, url: url, qtype: strings.TrimPrefix(spec.Name, "rabbitmq-")}
	if t.qtype == "stream" {
		return &RabbitStreamTarget{t}
	}
	return &t
}

// rabbitQueueName is the harness's queue name for a scenario and type.
func rabbitQueueName(scenario, qtype string) string { return "bench." + scenario + "." + qtype }

func (t *RabbitTarget) dial(name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	return amqp.DialConfig(t.url, amqp.Config{
		Heartbeat:  rabbitHeartbeat,
		Locale:     "en_US",
		Properties: props,
		Dial:       amqp.DefaultDial(dialTimeout),
	})
}

// adminChannel opens a channel on the admin connection, dialling it first if
// needed; the caller closes the channel.
func (t *RabbitTarget) adminChannel() (*amqp.Channel, error) {
	if t.conn == nil || t.conn.IsClosed() {
		conn, err := t.dial("fibril-bench-admin")
		if err != nil {
			return nil, err
		}
		t.conn = conn
	}
	return t.conn.Channel()
}

func (t *RabbitTarget) prepare(w bench.Workload) error {
	t.w = w
	t.queue = rabbitQueueName(w.Scenario, t.qtype)
	ch, err := t.adminChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	// deleting a queue that does not exist succeeds in RabbitMQ
	if _, err := ch.QueueDelete(t.queue, false, false, false); err != nil {
		return fmt.Errorf("delete queue: %w", err)
	}
	if _, err := ch.QueueDeclare(t.queue, true, false, false, false, amqp.Table{"x-queue-type": t.qtype}); err != nil {
		return fmt.Errorf("declare queue: %w", err)
	}
	return nil
}

// Prepare declares a fresh durable queue of the target's type.
func (t *RabbitTarget) Prepare(ctx context.Context, w bench.Workload) error {
	if t.qtype == "stream" && w.Scenario == bench.ScenarioEndToEnd {
		return errors.New("end-to-end needs a queue, not a stream (stream consumers do not compete)")
	}
	return t.prepare(w)
}

// PrepareLog declares a fresh stream queue.
func (t *RabbitStreamTarget) PrepareLog(ctx context.Context, w bench.Workload) error {
	return t.prepare(w)
}

type rabbitProducer struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string
	ids   []uint64 // ids[n-1] = id of the n-th publish (delivery tag n)
	next  int
	done  chan struct{}
}

// NewProducer opens a connection with one channel in confirm mode and a
// goroutine that turns each confirmation into a ConfirmFunc call.
func (t *RabbitTarget) NewProducer(ctx context.Context, idx int, confirm bench.ConfirmFunc) (bench.Producer, error) {
	blocks := bench.SplitBlocks(t.w.Msgs, t.w.Producers)
	if idx < 0 || idx >= len(blocks) {
		return nil, fmt.Errorf("producer %d of %d", idx, len(blocks))
	}
	conn, err := t.dial(fmt.Sprintf("fibril-bench-pub-%d", idx))
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	p := &rabbitProducer{conn: conn, ch: ch, queue: t.queue, ids: make([]uint64, blocks[idx].Count), done: make(chan struct{})}
	// The client must never block handing over a confirmation: at most a
	// window is unconfirmed, so a window's room suffices.
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, t.w.Window+1))
	go func() {
		defer close(p.done)
		for c := range confirms { // closed with the channel
			if c.DeliveryTag == 0 || c.DeliveryTag > uint64(len(p.ids)) {
				continue
			}
			confirm(atomic.LoadUint64(&p.ids[c.DeliveryTag-1]), c.Ack)
		}
	}()
	return p, nil
}

func (p *rabbitProducer) PublishAsync(ctx context.Context, id uint64, body []byte) error {
	if p.next >= len(p.ids) {
		return errors.New("rabbitmq producer: more publishes than its block of ids")
	}
	atomic.StoreUint64(&p.ids[p.next], id)
	// The frames are written before PublishWithContext returns, so body is
	// free again afterwards.
	err := p.ch.PublishWithContext(ctx, "", p.queue, false, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		Body:         body,
	})
	if err != nil {
		return err
	}
	p.next++
	return nil
}

func (p *rabbitProducer) Close() error {
	_ = p.ch.Close()
	err := p.conn.Close()
	waitDone(p.done, closeTimeout)
	if errors.Is(err, amqp.ErrClosed) {
		err = nil
	}
	return err
}

type rabbitConsumer struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	wg   sync.WaitGroup
}

func (t *RabbitTarget) consume(idx int, kind string, args amqp.Table, deliver bench.DeliverFunc) (bench.Consumer, error) {
	conn, err := t.dial(fmt.Sprintf("fibril-bench-%s-%d", kind, idx))
	if err != nil {
		return nil, err
	}
	fail := func(err error) (bench.Consumer, error) { conn.Close(); return nil, err }
	ch, err := conn.Channel()
	if err != nil {
		return fail(err)
	}
	if err := ch.Qos(t.w.Prefetch, 0, false); err != nil {
		return fail(err)
	}
	deliveries, err := ch.Consume(t.queue, fmt.Sprintf("fibril-bench-%s-%d", kind, idx), false, false, false, false, args)
	if err != nil {
		return fail(err)
	}
	c := &rabbitConsumer{conn: conn, ch: ch}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for d := range deliveries { // closed with the channel
			deliver(d.Body)
			_ = d.Ack(false) // a lost ack requeues the message: it shows as left
		}
	}()
	return c, nil
}

// NewConsumer is a competing consumer on the queue.
func (t *RabbitTarget) NewConsumer(ctx context.Context, idx int, deliver bench.DeliverFunc) (bench.Consumer, error) {
	return t.consume(idx, "sub", nil, deliver)
}

// NewReader reads the stream from its first message.
func (t *RabbitStreamTarget) NewReader(ctx context.Context, idx int, deliver bench.DeliverFunc) (bench.Consumer, error) {
	return t.consume(idx, "reader", amqp.Table{"x-stream-offset": "first"}, deliver)
}

func (c *rabbitConsumer) Close() error {
	_ = c.ch.Close()
	err := c.conn.Close()
	waitGroupDone(&c.wg, closeTimeout)
	if errors.Is(err, amqp.ErrClosed) {
		err = nil
	}
	return err
}

// Remaining is the queue's ready count, polled until 0.
func (t *RabbitTarget) Remaining(ctx context.Context) (int64, error) {
	return pollRemaining(ctx, func(context.Context) (int64, error) {
		ch, err := t.adminChannel()
		if err != nil {
			return -1, err
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(t.queue, true, false, false, false, nil)
		if err != nil {
			return -1, err
		}
		return int64(q.Messages), nil
	})
}

// Cleanup deletes the queue.
func (t *RabbitTarget) Cleanup(ctx context.Context) error {
	if t.queue == "" {
		return nil
	}
	ch, err := t.adminChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDelete(t.queue, false, false, false)
	return err
}

// Close closes the admin connection.
func (t *RabbitTarget) Close() error {
	if t.conn != nil {
		_ = t.conn.Close()
		t.conn = nil
	}
	return nil
}

// rabbitReady reports the server version once a channel opens.
func rabbitReady(ctx context.Context, url string) ([][2]string, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	_ = ch.Close()
	version, _ := conn.Properties["version"].(string)
	return [][2]string{{"version", version}}, nil
}

var (
	_ bench.Target       = (*RabbitTarget)(nil)
	_ bench.Cleaner      = (*RabbitTarget)(nil)
	_ bench.FanoutTarget = (*RabbitStreamTarget)(nil)
)
