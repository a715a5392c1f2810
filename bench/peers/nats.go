package peers

// NATS JetStream (github.com/nats-io/nats.go/jetstream), for nats-js and
// nats-js-sync: the same code against two servers that differ only in
// JetStream's sync_interval (the script starts one with the default and one
// with `sync_interval: always`).
//
// As in the harness:
//   - streams are file storage, one replica, no limits, discard old:
//     BENCH_CP (limits retention) for confirmed-publish, BENCH_E2E
//     (work-queue retention) for end-to-end, BENCH_FANOUT (limits) for fanout;
//     each on its own subject bench.<key>;
//   - a publish is PublishMsgAsync; its confirmation is the PubAck, reported
//     by the JetStream context's ack and error handlers; the client's own
//     async limit is above the window, so only the driver's window limits;
//   - end-to-end: one durable pull consumer "work" (deliver all, explicit
//     ack, AckWait 30 s, MaxAckPending = prefetch x consumers, no delivery
//     limit) shared by every consumer connection, each Consume with
//     PullMaxMessages(prefetch), Ack per message;
//   - fanout: one such durable consumer per reader, reader-<i>, with
//     MaxAckPending = prefetch;
//   - left = the stream's message count (a work-queue stream drops acked
//     messages).
//
// Invariants:
//   - The body of an unconfirmed publish stays untouched: the client keeps
//     the *nats.Msg until its PubAck (it may resend it), so PublishAsync
//     copies the body into a buffer of the producer's own, which goes back
//     to the producer's free list only when the handlers have reported it.
//   - The id reported to ConfirmFunc is read from that buffer's header.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-go/fibril/bench"
)

// natsAckWait is how long the server waits for a consumer's ack before it
// redelivers: far longer than any delivery in these runs takes.
const natsAckWait = 30 * time.Second

// natsPendingSlack keeps the client's async-publish limit above the window.
const natsPendingSlack = 64

// NATSTarget runs the scenarios on one JetStream server.
type NATSTarget struct {
	spec Spec
	url  string

	nc *nats.Conn // admin connection, opened by Prepare
	js jetstream.JetStream
	w  bench.Workload

	stream, subject string
}

func newNATSTarget(spec Spec, url string) bench.Target { return &NATSTarget{spec: spec, url: url} }

// natsStream returns the stream name and subject for a scenario key.
func natsStream(key string) (stream, subject string) {
	return "BENCH_" + strings.ToUpper(key), "bench." + key
}

// natsStreamConfig is the stream the harness creates for a scenario.
func natsStreamConfig(scenario string) (jetstream.StreamConfig, error) {
	var key string
	retention := jetstream.LimitsPolicy
	switch scenario {
	case bench.ScenarioConfirmedPublish:
		key = keyConfirmedPublish
	case bench.ScenarioEndToEnd:
		key, retention = keyEndToEnd, jetstream.WorkQueuePolicy
	case bench.ScenarioFanout:
		key = keyFanout
	default:
		return jetstream.StreamConfig{}, fmt.Errorf("unknown scenario %q", scenario)
	}
	name, subject := natsStream(key)
	return jetstream.StreamConfig{
		Name:      name,
		Subjects:  []string{subject},
		Storage:   jetstream.FileStorage,
		Retention: retention,
		Replicas:  1,
		Discard:   jetstream.DiscardOld,
		MaxMsgs:   -1,
		MaxBytes:  -1,
	}, nil
}

// natsConsumerConfig is a durable pull consumer from the first message with
// explicit acks and maxAckPending unacked deliveries.
func natsConsumerConfig(durable string, maxAckPending int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       natsAckWait,
		MaxAckPending: maxAckPending,
		MaxDeliver:    -1,
	}
}

func (t *NATSTarget) connect(name string) (*nats.Conn, error) {
	return nats.Connect(t.url, nats.Name(name), nats.MaxReconnects(0), nats.Timeout(dialTimeout))
}

func (t *NATSTarget) adminJS() (jetstream.JetStream, error) {
	if t.nc == nil || t.nc.IsClosed() {
		nc, err := t.connect("fibril-bench-admin")
		if err != nil {
			return nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, err
		}
		t.nc, t.js = nc, js
	}
	return t.js, nil
}

// prepare deletes and recreates the scenario's stream.
func (t *NATSTarget) prepare(ctx context.Context, w bench.Workload) error {
	t.w = w
	js, err := t.adminJS()
	if err != nil {
		return err
	}
	cfg, err := natsStreamConfig(w.Scenario)
	if err != nil {
		return err
	}
	t.stream, t.subject = cfg.Name, cfg.Subjects[0]
	if err := js.DeleteStream(ctx, t.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete stream: %w", err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	return nil
}

// Prepare creates the queue scenario's stream and, for end-to-end, the shared
// consumer "work".
func (t *NATSTarget) Prepare(ctx context.Context, w bench.Workload) error {
	if err := t.prepare(ctx, w); err != nil {
		return err
	}
	if w.Scenario == bench.ScenarioEndToEnd {
		if _, err := t.js.CreateOrUpdateConsumer(ctx, t.stream, natsConsumerConfig("work", w.Prefetch*w.Consumers)); err != nil {
			return fmt.Errorf("create consumer: %w", err)
		}
	}
	return nil
}

// PrepareLog creates the fanout stream; readers create their consumers.
func (t *NATSTarget) PrepareLog(ctx context.Context, w bench.Workload) error {
	return t.prepare(ctx, w)
}

type natsProducer struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	free    chan []byte // body buffers not held by an unconfirmed publish
}

// NewProducer opens a connection whose JetStream context reports every PubAck
// (or failure) to confirm.
func (t *NATSTarget) NewProducer(ctx context.Context, idx int, confirm bench.ConfirmFunc) (bench.Producer, error) {
	nc, err := t.connect(fmt.Sprintf("fibril-bench-pub-%d", idx))
	if err != nil {
		return nil, err
	}
	p := &natsProducer{nc: nc, subject: t.subject, free: make(chan []byte, t.w.Window)}
	for range cap(p.free) {
		p.free <- make([]byte, t.w.SizeBytes)
	}
	settle := func(m *nats.Msg, ok bool) {
		id, _, _ := bench.ReadHeader(m.Data)
		// back on the free list before the slot returns, so that a full
		// window never finds the list empty
		p.free <- m.Data[:cap(m.Data)]
		confirm(id, ok)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(t.w.Window+natsPendingSlack),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { settle(m, true) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, _ error) { settle(m, false) }),
	)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p.js = js
	return p, nil
}

func (p *natsProducer) PublishAsync(ctx context.Context, id uint64, body []byte) error {
	var buf []byte
	select {
	case buf = <-p.free:
	default:
		return errors.New("nats producer: more publishes unconfirmed than the window allows")
	}
	buf = buf[:copy(buf[:cap(buf)], body)]
	if _, err := p.js.PublishMsgAsync(&nats.Msg{Subject: p.subject, Data: buf}); err != nil {
		p.free <- buf
		return err
	}
	return nil
}

func (p *natsProducer) Close() error {
	waitDone(p.js.PublishAsyncComplete(), closeTimeout)
	p.nc.Close()
	return nil
}

type natsConsumer struct {
	nc *nats.Conn
	cc jetstream.ConsumeContext
}

// consume opens a connection and consumes from durable, acking each message
// right after deliver; config non-nil creates (or updates) that consumer
// first.
func (t *NATSTarget) consume(ctx context.Context, name, durable string, config *jetstream.ConsumerConfig, deliver bench.DeliverFunc) (bench.Consumer, error) {
	nc, err := t.connect(name)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (bench.Consumer, error) { nc.Close(); return nil, err }
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	var cons jetstream.Consumer
	if config != nil {
		cons, err = js.CreateOrUpdateConsumer(ctx, t.stream, *config)
	} else {
		cons, err = js.Consumer(ctx, t.stream, durable)
	}
	if err != nil {
		return fail(fmt.Errorf("consumer %s: %w", durable, err))
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		deliver(m.Data())
		_ = m.Ack() // a lost ack leaves the message in the stream: it shows as left
	}, jetstream.PullMaxMessages(t.w.Prefetch))
	if err != nil {
		return fail(err)
	}
	return &natsConsumer{nc: nc, cc: cc}, nil
}

// NewConsumer consumes from the shared end-to-end consumer "work".
func (t *NATSTarget) NewConsumer(ctx context.Context, idx int, deliver bench.DeliverFunc) (bench.Consumer, error) {
	if t.w.Scenario != bench.ScenarioEndToEnd {
		return nil, fmt.Errorf("scenario %q has no competing consumers", t.w.Scenario)
	}
	return t.consume(ctx, fmt.Sprintf("fibril-bench-sub-%d", idx), "work", nil, deliver)
}

// NewReader creates durable consumer reader-<idx> from the first message.
func (t *NATSTarget) NewReader(ctx context.Context, idx int, deliver bench.DeliverFunc) (bench.Consumer, error) {
	durable := fmt.Sprintf("reader-%d", idx)
	config := natsConsumerConfig(durable, t.w.Prefetch)
	return t.consume(ctx, fmt.Sprintf("fibril-bench-reader-%d", idx), durable, &config, deliver)
}

func (c *natsConsumer) Close() error {
	c.cc.Stop()
	err := c.nc.FlushTimeout(closeTimeout) // the acks still buffered reach the server
	c.nc.Close()
	return err
}

// Remaining is the stream's message count, polled until 0.
func (t *NATSTarget) Remaining(ctx context.Context) (int64, error) {
	return pollRemaining(ctx, func(ctx context.Context) (int64, error) {
		js, err := t.adminJS()
		if err != nil {
			return -1, err
		}
		s, err := js.Stream(ctx, t.stream)
		if err != nil {
			return -1, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return -1, err
		}
		return int64(info.State.Msgs), nil
	})
}

// Cleanup deletes the scenario's stream.
func (t *NATSTarget) Cleanup(ctx context.Context) error {
	if t.stream == "" {
		return nil
	}
	js, err := t.adminJS()
	if err != nil {
		return err
	}
	if err := js.DeleteStream(ctx, t.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	return nil
}

// Close closes the admin connection.
func (t *NATSTarget) Close() error {
	if t.nc != nil {
		t.nc.Close()
		t.nc = nil
	}
	return nil
}

// natsReady reports the server version once JetStream answers.
func natsReady(ctx context.Context, url string) ([][2]string, error) {
	nc, err := nats.Connect(url, nats.Name("fibril-bench-wait"), nats.MaxReconnects(0), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return nil, fmt.Errorf("jetstream not ready: %w", err)
	}
	return [][2]string{{"version", nc.ConnectedServerVersion()}}, nil
}

var (
	_ bench.FanoutTarget = (*NATSTarget)(nil)
	_ bench.Cleaner      = (*NATSTarget)(nil)
)
