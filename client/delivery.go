package client

// Deliveries and their settlement (PROTOCOL §5.8-5.10).
//
// Invariants:
//   - An ACK or NACK reuses the DELIVER's request id (§5.8) and echoes its topic,
//     group and partition exactly as delivered.
//   - A delivery is settled at most once by this client; a settlement that could
//     not be queued leaves it unsettled so the caller may try again.
//   - A delivery belongs to the broker-side session it came from, not to one
//     connection: after a `resumed` reconnect it settles over the new connection
//     (with its original request id and tag). Once its session is stale (a
//     reconnect with any other outcome) settling sends nothing and returns
//     ErrStaleDelivery; the broker redelivers the message.
//   - Settling on a lost connection makes the client's one reconnect attempt
//     (unless auto-reconnect is off) rather than failing at once.
//   - A stream delivery settles only by ACK (a cursor commit by topic, partition
//     and tag = offset, §5.9); its tag outlives the session, so it goes over the
//     client's current connection whatever the resume outcome. Retry and Fail on
//     it send nothing and return ErrStreamSettlement.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/transport/wire"
)

// Delivery is one message handed to a subscription.
type Delivery struct {
	Topic     string
	Group     string // "" for the default namespace
	Partition uint32
	Offset    uint64 // offset in the partition log
	Tag       uint64 // delivery tag: settles this attempt only
	// Retries is how often the message was retried before this delivery, from the
	// broker's fibril.retries header (0 on a first delivery).
	Retries     uint32
	Headers     map[string]string // user headers plus broker system headers
	ContentType string            // MIME type; "" when none was set
	Payload     []byte
	PublishedAt time.Time // the producer's clock at publish
	ReceivedAt  time.Time // the broker's clock when it received the publish

	sess      *session // the broker-side session whose tag this is
	client    *Client
	requestID uint64                // the DELIVER's id, reused by the settlement
	groupWire wire.Optional[string] // the group exactly as delivered
	autoAck   bool
	stream    bool // a Plexus stream record: only Ack settles it
	settled   atomic.Bool
}

// newDelivery builds the application's view of a DELIVER that arrived on e.
func newDelivery(e *engine, c *Client, autoAck bool, requestID uint64, d wire.Deliver) *Delivery {
	headers := make(map[string]string, len(d.Headers))
	for _, kv := range d.Headers {
		headers[kv.Key] = kv.Value // last wins, as the broker stores them
	}
	var retries uint32
	if v, ok := headers[wire.HeaderRetries]; ok {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil {
			retries = uint32(n)
		}
	}
	contentType, _ := d.ContentType.MIME()
	return &Delivery{
		Topic:       d.Topic,
		Group:       d.Group.Or(""),
		Partition:   d.Partition,
		Offset:      d.Offset,
		Tag:         d.DeliveryTag,
		Retries:     retries,
		Headers:     headers,
		ContentType: contentType,
		Payload:     d.Payload,
		PublishedAt: time.UnixMilli(int64(d.PublishedMs)),
		ReceivedAt:  time.UnixMilli(int64(d.PublishReceivedMs)),
		sess:        e.sess,
		client:      c,
		requestID:   requestID,
		groupWire:   d.Group,
		autoAck:     autoAck,
	}
}

// Ack acknowledges the delivery (ACK). On a stream delivery it commits a durable
// cursor past this record (an ephemeral subscription's broker ignores it); on a
// queue delivery it is Complete.
func (d *Delivery) Ack(ctx context.Context) error { return d.Complete(ctx) }

// Speculative reports whether a speculative-tier stream record may run ahead of
// durability (the broker's fibril.speculative header is "1", PROTOCOL §5.8).
func (d *Delivery) Speculative() bool { return d.Headers[wire.HeaderSpeculative] == "1" }

// Stream reports whether the delivery is a Plexus stream record.
func (d *Delivery) Stream() bool { return d.stream }

// Complete acknowledges the delivery: the message is settled for good (ACK).
func (d *Delivery) Complete(ctx context.Context) error {
	return d.settle(ctx, wire.OpAck, wire.Ack{
		Topic: d.Topic, Group: d.groupWire, Partition: d.Partition, Tags: []uint64{d.Tag},
	})
}

// Retry returns the message to the queue now, counting a retry (NACK requeue).
// Past the queue's retry budget it is dead-lettered instead.
func (d *Delivery) Retry(ctx context.Context) error {
	if d.stream {
		return ErrStreamSettlement
	}
	return d.settle(ctx, wire.OpNack, d.nack(true, wire.Optional[uint64]{}))
}

// RetryAfter returns the message to the queue, invisible for delay (NACK requeue
// with not_before = now + delay). It counts as a retry.
func (d *Delivery) RetryAfter(ctx context.Context, delay time.Duration) error {
	if d.stream {
		return ErrStreamSettlement
	}
	notBeforeMs := time.Now().Add(max(delay, 0)).UnixMilli()
	return d.settle(ctx, wire.OpNack, d.nack(true, wire.Some(uint64(notBeforeMs))))
}

// Fail settles the message as failed: it follows the queue's dead-letter policy
// at once (NACK without requeue).
func (d *Delivery) Fail(ctx context.Context) error {
	if d.stream {
		return ErrStreamSettlement
	}
	return d.settle(ctx, wire.OpNack, d.nack(false, wire.Optional[uint64]{}))
}

func (d *Delivery) nack(requeue bool, notBeforeMs wire.Optional[uint64]) wire.Nack {
	return wire.Nack{
		Topic: d.Topic, Group: d.groupWire, Partition: d.Partition, Tags: []uint64{d.Tag},
		Requeue: requeue, NotBeforeMs: notBeforeMs,
	}
}

func (d *Delivery) settle(ctx context.Context, op wire.Opcode, body wire.Body) error {
	if d.autoAck {
		return ErrAutoAck
	}
	eng, err := d.settleEngine(ctx)
	if err != nil {
		return err
	}
	if !d.settled.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	if err := eng.send(ctx, op, d.requestID, body); err != nil {
		// Not queued: the caller may settle again (after a resume, say).
		d.settled.Store(false)
		return err
	}
	return nil
}

// settleEngine is the engine a settlement goes over: for a stream record the
// client's current one (a cursor commit names topic, partition and offset, which
// no reconnect invalidates), else one of the delivery's session.
func (d *Delivery) settleEngine(ctx context.Context) (*engine, error) {
	if d.stream && d.client != nil {
		return d.client.engine(ctx)
	}
	return d.sessionEngine(ctx)
}

// sessionEngine returns a live engine of d's session: the current one, or the
// one the client's reconnect attempt produced when that resumed the session.
func (d *Delivery) sessionEngine(ctx context.Context) (*engine, error) {
	// The mutant settles a stale delivery over whatever connection is newest:
	// a dead tag on another session, which the stale-settle tests must catch.
	if d.sess.stale.Load() && !mutant.On(mutant.ClientSettleStale) {
		return nil, ErrStaleDelivery
	}
	eng := d.sess.engine()
	if eng != nil && !eng.isClosed() {
		return eng, nil
	}
	if d.client == nil {
		return nil, ErrStaleDelivery
	}
	next, err := d.client.engine(ctx)
	if err != nil {
		return nil, err
	}
	if next.sess != d.sess && !mutant.On(mutant.ClientSettleStale) {
		if !d.sess.stale.Load() {
			panic("client: a delivery's session was replaced without being marked stale")
		}
		return nil, ErrStaleDelivery
	}
	return next, nil
}

// Text returns the payload as a string.
func (d *Delivery) Text() string { return string(d.Payload) }

// DecodeJSON unmarshals the payload into v.
func (d *Delivery) DecodeJSON(v any) error {
	if err := json.Unmarshal(d.Payload, v); err != nil {
		contentType := d.ContentType
		if contentType == "" {
			contentType = "no content type"
		}
		return fmt.Errorf("failed to deserialize payload (%s) as JSON: %w", contentType, err)
	}
	return nil
}
