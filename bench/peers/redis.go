package peers

// Redis Streams (github.com/redis/go-redis/v9), for redis-streams. The script
// starts redis-server with `appendonly yes` and `appendfsync always`, so a
// write command's reply leaves the server only after the AOF write and
// fdatasync of the event-loop iteration that ran it.
//
// As in the harness:
//   - one stream key per scenario, bench:cp, bench:e2e, bench:fanout,
//     deleted by Prepare and Cleanup, created by the first XADD, no MAXLEN;
//     every entry has one field "d" holding the body;
//   - a publish is `XADD <key> * d <body>`, its confirmation the reply (an
//     error reply counts as a nack). Each producer's sender goroutine writes
//     everything its producer has queued (at most a window) as one pipeline
//     on the producer's single connection and reads the replies in order; the
//     next batch accumulates meanwhile;
//   - end-to-end: one consumer group "work" created at id 0 by Prepare;
//     consumer i loops `XREADGROUP GROUP work c<i> COUNT <prefetch> BLOCK 100
//     STREAMS <key> >`, records each entry and queues one XACK with that
//     single id; the queued XACKs go out in one pipeline in front of its
//     next XREADGROUP, so it never holds more than prefetch pending entries;
//   - fanout: one group per reader, reader-<i>, created at id 0, read the
//     same way;
//   - left = pending + lag of group "work" (acked entries stay in a stream,
//     as XACK only clears the pending list);
//   - every client has exactly one connection (PoolSize 1, no separate
//     pipeline pool), RESP2, no command retries (a retried XADD could
//     duplicate a message), 30 s read and write timeouts, no CLIENT SETINFO
//     (Redis 7.0 lacks it), no maintenance notifications.
//
// Invariants:
//   - A producer reports every queued message exactly once: a transport
//     failure of a batch nacks the whole batch and fails later publishes.
//   - A consumer that is asked to stop sends the XACKs it still owes, then
//     ends.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fibril-go/fibril/bench"
)

const (
	redisField     = "d"    // the one field of every entry: the body
	redisWorkGroup = "work" // the end-to-end consumer group
	// redisBlock bounds one XREADGROUP's wait: it only decides how soon a
	// consumer notices Close, not how soon it sees a new entry.
	redisBlock = 100 * time.Millisecond
	// redisIOTimeout is far above a batch's wait for its fsyncs.
	redisIOTimeout = 30 * time.Second
	// redisRetryPause is how long a consumer waits after a failed read.
	redisRetryPause = 100 * time.Millisecond
)

// RedisTarget runs the scenarios on Redis Streams.
type RedisTarget struct {
	spec  Spec
	url   string
	admin *redis.Client
	w     bench.Workload
	key   string
}

func newRedisTarget(spec Spec, url string) bench.Target { return &RedisTarget{spec: spec, url: url} }

// redisOptions are the client options of one connection named name.
func redisOptions(rawURL, name string) (*redis.Options, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opt.ClientName = name
	opt.Protocol = 2
	opt.PoolSize = 1
	opt.MinIdleConns = 0
	opt.PipelinePoolSize = -1
	opt.MaxRetries = -1
	opt.DialTimeout = dialTimeout
	opt.ReadTimeout = redisIOTimeout
	opt.WriteTimeout = redisIOTimeout
	opt.PoolTimeout = redisIOTimeout
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opt, nil
}

// redisConnect returns a client with its one connection already open.
func redisConnect(ctx context.Context, rawURL, name string) (*redis.Client, error) {
	opt, err := redisOptions(rawURL, name)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(opt)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// redisKey is the stream key of a scenario.
func redisKey(scenario string) (string, error) {
	switch scenario {
	case bench.ScenarioConfirmedPublish:
		return "bench:" + keyConfirmedPublish, nil
	case bench.ScenarioEndToEnd:
		return "bench:" + keyEndToEnd, nil
	case bench.ScenarioFanout:
		return "bench:" + keyFanout, nil
	}
	return "", fmt.Errorf("unknown scenario %q", scenario)
}

func (t *RedisTarget) adminClient(ctx context.Context) (*redis.Client, error) {
	if t.admin == nil {
		c, err := redisConnect(ctx, t.url, "fibril-bench-admin")
		if err != nil {
			return nil, err
		}
		t.admin = c
	}
	return t.admin, nil
}

func (t *RedisTarget) prepare(ctx context.Context, w bench.Workload) error {
	t.w = w
	key, err := redisKey(w.Scenario)
	if err != nil {
		return err
	}
	t.key = key
	admin, err := t.adminClient(ctx)
	if err != nil {
		return err
	}
	if err := admin.Del(ctx, t.key).Err(); err != nil {
		return fmt.Errorf("delete stream: %w", err)
	}
	return nil
}

// Prepare deletes the scenario's stream; for end-to-end it creates the stream
// with group "work" at id 0 before anything is published.
func (t *RedisTarget) Prepare(ctx context.Context, w bench.Workload) error {
	if err := t.prepare(ctx, w); err != nil {
		return err
	}
	if w.Scenario == bench.ScenarioEndToEnd {
		if err := t.admin.XGroupCreateMkStream(ctx, t.key, redisWorkGroup, "0").Err(); err != nil {
			return fmt.Errorf("create group: %w", err)
		}
	}
	return nil
}

// PrepareLog deletes the fanout stream; each reader creates its group.
func (t *RedisTarget) PrepareLog(ctx context.Context, w bench.Workload) error {
	return t.prepare(ctx, w)
}

// redisPending is one queued publish.
type redisPending struct {
	id   uint64
	body []byte
}

type redisProducer struct {
	rdb     *redis.Client
	key     string
	confirm bench.ConfirmFunc
	queue   chan redisPending // bodies handed to the sender, at most a window
	free    chan []byte       // body buffers back from the sender
	quit    chan struct{}
	done    chan struct{}
	failure atomic.Pointer[error] // the first transport failure
	stop    sync.Once
}

// NewProducer opens the producer's connection and starts its sender.
func (t *RedisTarget) NewProducer(ctx context.Context, idx int, confirm bench.ConfirmFunc) (bench.Producer, error) {
	rdb, err := redisConnect(ctx, t.url, fmt.Sprintf("fibril-bench-pub-%d", idx))
	if err != nil {
		return nil, err
	}
	p := &redisProducer{rdb: rdb, key: t.key, confirm: confirm,
		queue: make(chan redisPending, t.w.Window), free: make(chan []byte, t.w.Window),
		quit: make(chan struct{}), done: make(chan struct{})}
	for range t.w.Window {
		p.free <- make([]byte, 0, t.w.SizeBytes)
	}
	go p.send(t.w.Window)
	return p, nil
}

func (p *redisProducer) PublishAsync(ctx context.Context, id uint64, body []byte) error {
	if err := p.failure.Load(); err != nil {
		return *err
	}
	var buf []byte
	select {
	case buf = <-p.free:
	default:
		return errors.New("redis producer: more publishes unconfirmed than the window allows")
	}
	// The driver holds a slot for this message until its confirmation, so
	// the queue (a window long) has room.
	p.queue <- redisPending{id: id, body: append(buf[:0], body...)}
	return nil
}

// send writes batches of queued XADDs as pipelines until quit.
func (p *redisProducer) send(window int) {
	defer close(p.done)
	ctx := context.Background()
	batch := make([]redisPending, 0, window)
	replies := make([]*redis.StringCmd, 0, window)
	for {
		batch = batch[:0]
		select {
		case x := <-p.queue:
			batch = append(batch, x)
		case <-p.quit:
			return
		}
	more: // everything else already queued joins the batch; nothing waits for more
		for len(batch) < window {
			select {
			case x := <-p.queue:
				batch = append(batch, x)
			default:
				break more
			}
		}
		pipe := p.rdb.Pipeline()
		replies = replies[:0]
		for _, x := range batch {
			replies = append(replies, pipe.XAdd(ctx, &redis.XAddArgs{Stream: p.key, ID: "*", Values: []any{redisField, x.body}}))
		}
		_, err := pipe.Exec(ctx)
		if err != nil && !isRedisErrorReply(err) {
			failure := fmt.Errorf("redis pipeline: %w", err)
			p.failure.CompareAndSwap(nil, &failure)
		}
		for i, x := range batch {
			p.free <- x.body // before the slot returns: the free list never runs dry
			p.confirm(x.id, replies[i].Err() == nil)
		}
	}
}

// isRedisErrorReply tells an error reply (the server refused that command)
// from a transport failure.
func isRedisErrorReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

func (p *redisProducer) Close() error {
	p.stop.Do(func() { close(p.quit) })
	waitDone(p.done, closeTimeout)
	return p.rdb.Close()
}

type redisConsumer struct {
	rdb      *redis.Client
	stopping atomic.Bool
	done     chan struct{}
}

func (t *RedisTarget) consume(ctx context.Context, idx int, kind, group string, createGroup bool, deliver bench.DeliverFunc) (bench.Consumer, error) {
	rdb, err := redisConnect(ctx, t.url, fmt.Sprintf("fibril-bench-%s-%d", kind, idx))
	if err != nil {
		return nil, err
	}
	if createGroup {
		if err := rdb.XGroupCreateMkStream(ctx, t.key, group, "0").Err(); err != nil {
			rdb.Close()
			return nil, fmt.Errorf("create group %s: %w", group, err)
		}
	}
	c := &redisConsumer{rdb: rdb, done: make(chan struct{})}
	go c.loop(t.key, group, fmt.Sprintf("c%d", idx), t.w.Prefetch, deliver)
	return c, nil
}

// NewConsumer reads from the shared group "work" as consumer c<idx>.
func (t *RedisTarget) NewConsumer(ctx context.Context, idx int, deliver bench.DeliverFunc) (bench.Consumer, error) {
	if t.w.Scenario != bench.ScenarioEndToEnd {
		return nil, fmt.Errorf("scenario %q has no competing consumers", t.w.Scenario)
	}
	return t.consume(ctx, idx, "sub", redisWorkGroup, false, deliver)
}

// NewReader creates group reader-<idx> at the first entry and reads it.
func (t *RedisTarget) NewReader(ctx context.Context, idx int, deliver bench.DeliverFunc) (bench.Consumer, error) {
	return t.consume(ctx, idx, "reader", fmt.Sprintf("reader-%d", idx), true, deliver)
}

// loop: [XACK id]... XREADGROUP in one pipeline, deliver what came, repeat.
func (c *redisConsumer) loop(key, group, name string, prefetch int, deliver bench.DeliverFunc) {
	defer close(c.done)
	ctx := context.Background()
	read := &redis.XReadGroupArgs{Group: group, Consumer: name, Streams: []string{key, ">"},
		Count: int64(prefetch), Block: redisBlock}
	owed := make([]string, 0, prefetch) // entry ids to XACK, one per command
	for {
		stopping := c.stopping.Load()
		if stopping && len(owed) == 0 {
			return
		}
		pipe := c.rdb.Pipeline()
		for _, id := range owed {
			pipe.XAck(ctx, key, group, id)
		}
		var reply *redis.XStreamSliceCmd
		if !stopping {
			reply = pipe.XReadGroup(ctx, read)
		}
		_, _ = pipe.Exec(ctx) // a lost XACK leaves the entry pending: it shows as left
		owed = owed[:0]
		if stopping {
			return
		}
		if err := reply.Err(); err != nil {
			if !errors.Is(err, redis.Nil) && !c.stopping.Load() {
				time.Sleep(redisRetryPause)
			}
			continue
		}
		for _, stream := range reply.Val() {
			for _, entry := range stream.Messages {
				body, _ := entry.Values[redisField].(string)
				deliver([]byte(body))
				owed = append(owed, entry.ID)
			}
		}
	}
}

func (c *redisConsumer) Close() error {
	c.stopping.Store(true)
	waitDone(c.done, closeTimeout)
	return c.rdb.Close()
}

// Remaining is pending + lag of group "work", polled until 0.
func (t *RedisTarget) Remaining(ctx context.Context) (int64, error) {
	return pollRemaining(ctx, func(ctx context.Context) (int64, error) {
		admin, err := t.adminClient(ctx)
		if err != nil {
			return -1, err
		}
		groups, err := admin.XInfoGroups(ctx, t.key).Result()
		if err != nil {
			return -1, err
		}
		for _, g := range groups {
			if g.Name == redisWorkGroup {
				if g.Lag < 0 {
					return -1, errors.New("group lag unknown")
				}
				return g.Pending + g.Lag, nil
			}
		}
		return -1, fmt.Errorf("group %q not found", redisWorkGroup)
	})
}

// Cleanup deletes the scenario's stream.
func (t *RedisTarget) Cleanup(ctx context.Context) error {
	if t.key == "" {
		return nil
	}
	admin, err := t.adminClient(ctx)
	if err != nil {
		return err
	}
	return admin.Del(ctx, t.key).Err()
}

// Close closes the admin connection.
func (t *RedisTarget) Close() error {
	if t.admin != nil {
		_ = t.admin.Close()
		t.admin = nil
	}
	return nil
}

// redisReady reports the version and the persistence settings.
func redisReady(ctx context.Context, rawURL string) ([][2]string, error) {
	c, err := redisConnect(ctx, rawURL, "fibril-bench-wait")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return nil, err
	}
	version := infoField(info, "redis_version")
	if version == "" {
		return nil, errors.New("no redis_version in INFO server")
	}
	fields := [][2]string{{"version", version}}
	for _, key := range []string{"appendonly", "appendfsync", "save"} {
		v, err := c.ConfigGet(ctx, key).Result()
		if err != nil {
			return nil, err
		}
		fields = append(fields, [2]string{key, v[key]})
	}
	return fields, nil
}

// infoField finds key in an INFO reply ("key:value" lines).
func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == key {
			return v
		}
	}
	return ""
}

var (
	_ bench.FanoutTarget = (*RedisTarget)(nil)
	_ bench.Cleaner      = (*RedisTarget)(nil)
)
