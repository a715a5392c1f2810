package client

// Publishing: PUBLISH and PUBLISH_DELAYED, unconfirmed, confirmed and pipelined
// (PROTOCOL §5.3-5.5, §7.2).
//
// Invariants:
//   - The partition is chosen here: FNV-1a-64(key) mod count for keyed messages,
//     round-robin otherwise, partition 0 while the count is unknown or 1 (§2.2).
//   - A confirmed publish resolves only from its own reply (PUBLISH_OK, ERROR or
//     REDIRECT), matched by request id; confirms may arrive in any order.
//   - A REDIRECT is followed at most MaxRedirects times, on the newest connection,
//     under the partitioning version it carried. Unconfirmed publishes never
//     register a waiter, so their REDIRECTs are ignored (§5.22).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// Publisher publishes to one topic (and group). It is cheap and safe for
// concurrent use.
type Publisher struct {
	client     *Client
	key        routeKey
	keyErr     error
	ttlMs      wire.Optional[uint64]
	roundRobin *atomic.Uint32 // shared with Expiring variants
}

// Publisher returns a publisher for topic in the default namespace.
func (c *Client) Publisher(topic string) *Publisher {
	return c.PublisherGrouped(topic, "")
}

// PublisherGrouped returns a publisher for topic in group ("" and "default" are
// the default namespace). Invalid names are reported by each publish.
func (c *Client) PublisherGrouped(topic, group string) *Publisher {
	key, err := queueKey(topic, group)
	return &Publisher{client: c, key: key, keyErr: err, roundRobin: new(atomic.Uint32)}
}

// Expiring returns a variant of p whose messages expire ttl after the broker
// receives them unless consumed (PUBLISH ttl_ms). Per-message TTL wins over the
// queue's default. Delayed publishes carry no TTL and are refused by the variant.
func (p *Publisher) Expiring(ttl time.Duration) *Publisher {
	variant := *p
	if ttl < time.Millisecond {
		variant.keyErr = fmt.Errorf("%w: TTL %v is below 1 ms", ErrInvalidArgument, ttl)
		return &variant
	}
	variant.ttlMs = wire.Some(uint64(ttl / time.Millisecond))
	return &variant
}

// Publish sends msg without waiting for durability. It returns once the frame is
// queued for the connection; broker-side failures are not reported.
func (p *Publisher) Publish(ctx context.Context, msg *Message) error {
	out, eng, err := p.prepare(ctx, msg, time.Time{}, false)
	if err != nil {
		return err
	}
	return eng.send(ctx, out.opcode(), eng.newRequestID(), out.body())
}

// PublishConfirmed sends msg and waits until the broker reports it durable,
// returning its offset in the partition.
func (p *Publisher) PublishConfirmed(ctx context.Context, msg *Message) (uint64, error) {
	conf, err := p.PublishWithConfirmation(ctx, msg)
	if err != nil {
		return 0, err
	}
	return conf.Wait(ctx)
}

// PublishWithConfirmation sends msg and returns at once with a handle whose Wait
// returns the offset: many publishes can be in flight on one connection.
func (p *Publisher) PublishWithConfirmation(ctx context.Context, msg *Message) (*Confirmation, error) {
	return p.startConfirmed(ctx, msg, time.Time{})
}

// PublishDelayed sends msg to be delivered no earlier than notBefore (PUBLISH_DELAYED
// not_before, Unix ms), without waiting for durability.
func (p *Publisher) PublishDelayed(ctx context.Context, msg *Message, notBefore time.Time) error {
	out, eng, err := p.prepare(ctx, msg, notBefore, false)
	if err != nil {
		return err
	}
	return eng.send(ctx, out.opcode(), eng.newRequestID(), out.body())
}

// PublishDelayedConfirmed is PublishDelayed that waits for durability and returns
// the offset.
func (p *Publisher) PublishDelayedConfirmed(ctx context.Context, msg *Message, notBefore time.Time) (uint64, error) {
	conf, err := p.startConfirmed(ctx, msg, notBefore)
	if err != nil {
		return 0, err
	}
	return conf.Wait(ctx)
}

func (p *Publisher) startConfirmed(ctx context.Context, msg *Message, notBefore time.Time) (*Confirmation, error) {
	out, eng, err := p.prepare(ctx, msg, notBefore, true)
	if err != nil {
		return nil, err
	}
	c, err := eng.startRequest(ctx, out.opcode(), out.body(), nil)
	if err != nil {
		return nil, err
	}
	return &Confirmation{publisher: p, out: out, call: c}, nil
}

// outgoing is a publish ready to encode; exactly one of its bodies is used.
type outgoing struct {
	delayed   bool
	publish   wire.Publish
	delayedPB wire.PublishDelayed
}

func (o *outgoing) opcode() wire.Opcode {
	if o.delayed {
		return wire.OpPublishDelayed
	}
	return wire.OpPublish
}

func (o *outgoing) body() wire.Body {
	if o.delayed {
		return o.delayedPB
	}
	return o.publish
}

func (o *outgoing) partition() uint32 {
	if o.delayed {
		return o.delayedPB.Partition
	}
	return o.publish.Partition
}

func (o *outgoing) setPartitioningVersion(version uint64) {
	o.publish.PartitioningVersion = version
	o.delayedPB.PartitioningVersion = version
}

// prepare checks msg, picks the engine and the partition, and builds the body.
// A zero notBefore means an ordinary PUBLISH.
func (p *Publisher) prepare(ctx context.Context, msg *Message, notBefore time.Time, confirm bool) (outgoing, *engine, error) {
	if p.keyErr != nil {
		return outgoing{}, nil, p.keyErr
	}
	if err := msg.validate(); err != nil {
		return outgoing{}, nil, err
	}
	delayed := !notBefore.IsZero()
	if delayed && p.ttlMs.Present {
		return outgoing{}, nil, fmt.Errorf("%w: PUBLISH_DELAYED has no ttl_ms field; "+
			"use a queue default TTL (DeclareQueue DefaultMessageTTL) for delayed messages", ErrInvalidArgument)
	}
	if delayed && notBefore.UnixMilli() < 0 {
		return outgoing{}, nil, fmt.Errorf("%w: not_before %v is before 1970", ErrInvalidArgument, notBefore)
	}
	eng, err := p.client.engine(ctx)
	if err != nil {
		return outgoing{}, nil, err
	}
	count, err := p.client.partitionCount(ctx, eng, p.key)
	if err != nil {
		return outgoing{}, nil, err
	}
	var partition uint32
	if msg.hasKey {
		partition = wire.PartitionForKey(msg.partitionKey, count)
	} else if count > 1 {
		partition = (p.roundRobin.Add(1) - 1) % count
	}
	version := p.client.routes.version(p.key, partition)
	publishedMs := uint64(time.Now().UnixMilli())
	out := outgoing{delayed: delayed}
	if delayed {
		out.delayedPB = wire.PublishDelayed{
			Topic: p.key.topic, Group: groupOpt(p.key.group), Partition: partition,
			RequireConfirm: confirm, NotBeforeMs: uint64(notBefore.UnixMilli()),
			ContentType: msg.contentType, Headers: msg.headers, PublishedMs: publishedMs,
			PartitionKey: msg.partitionKeyOpt(), PartitioningVersion: version, Payload: msg.payload,
		}
	} else {
		out.publish = wire.Publish{
			Topic: p.key.topic, Group: groupOpt(p.key.group), Partition: partition,
			RequireConfirm: confirm, ContentType: msg.contentType, Headers: msg.headers,
			PublishedMs: publishedMs, PartitionKey: msg.partitionKeyOpt(),
			PartitioningVersion: version, Payload: msg.payload, TTLMs: p.ttlMs,
		}
	}
	return out, eng, nil
}

// Confirmation is a pipelined confirmed publish. Wait may be called any number
// of times, from any goroutine; once it has an outcome it keeps returning it.
type Confirmation struct {
	publisher *Publisher
	out       outgoing
	redirects int

	mu     sync.Mutex
	call   *call
	done   bool
	offset uint64
	err    error
}

// Wait returns the offset once the broker confirms durability, or its error. If
// ctx ends first, Wait returns ctx.Err() and a later Wait may still get the
// outcome; the publish itself is not cancelled.
func (cf *Confirmation) Wait(ctx context.Context) (uint64, error) {
	cf.mu.Lock()
	defer cf.mu.Unlock()
	for !cf.done {
		var r reply
		select {
		case r = <-cf.call.reply:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		cf.settle(ctx, r)
	}
	return cf.offset, cf.err
}

// Partition is the partition the publish was routed to.
func (cf *Confirmation) Partition() uint32 { return cf.out.partition() }

// settle records the outcome of a reply, or resends after a REDIRECT.
func (cf *Confirmation) settle(ctx context.Context, r reply) {
	finish := func(offset uint64, err error) { cf.done, cf.offset, cf.err = true, offset, err }
	if r.err != nil {
		finish(0, r.err)
		return
	}
	switch body := r.body.(type) {
	case wire.PublishOk:
		finish(body.Offset, nil)
	case wire.ErrorBody:
		finish(0, brokerError(r.op, body))
	case wire.Redirect:
		client := cf.publisher.client
		client.routes.setVersion(cf.publisher.key, cf.out.partition(), body.PartitioningVersion)
		if cf.redirects >= client.opts.MaxRedirects {
			finish(0, &RedirectError{Topic: body.Topic, Partition: body.Partition, Owners: endpointAddrs(body.OwnerEndpoints)})
			return
		}
		cf.redirects++
		// A standalone broker redirects only to fence a stale partitioning
		// version, so resending under the new version on the current connection
		// is enough; owners on other brokers are not dialed yet.
		cf.out.setPartitioningVersion(body.PartitioningVersion)
		eng, err := client.engine(ctx)
		if err != nil {
			finish(0, err)
			return
		}
		c, err := eng.startRequest(ctx, cf.out.opcode(), cf.out.body(), nil)
		if err != nil {
			finish(0, err)
			return
		}
		cf.call = c
	default:
		finish(0, fmt.Errorf("%w: %s in reply to %s", ErrProtocol, r.op, cf.out.opcode()))
	}
}
