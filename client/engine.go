package client

// The engine: one wire connection with its reader, writer and heartbeat
// goroutines, the table of requests awaiting replies, and the table of live
// subscriptions by sub id.
//
// Invariants:
//   - Only the reader goroutine reads the connection; only the writer goroutine
//     writes it after the handshake.
//   - A request is registered in pending before its frame is queued, so a reply can
//     never arrive for an unknown id. Whoever removes a call from pending (reader on
//     reply, fail on close, the caller on cancel) releases its request slot, once.
//   - After fail, closed is closed, closeErr is set and pending is empty; nothing
//     is ever replayed. Subscriptions close too, unless the client will try to
//     resume them (auto-reconnect on, or an explicit Reconnect): they then stay in
//     subs for the reconnect to reconcile, and onLost is told.
//   - Replies are dispatched by request id, pushes by opcode (§7.1).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/wire"
)

// Request ids reserved by the handshake (§7.1); the engine numbers the rest
// from firstRequestID.
const (
	helloRequestID     uint64 = 1
	authRequestID      uint64 = 2
	reconcileRequestID uint64 = 3
	firstRequestID     uint64 = 4
)

// reply is what the reader hands to a waiting request: the reply opcode and its
// decoded body, or an error (connection lost, malformed reply).
type reply struct {
	op   wire.Opcode
	body wire.Body
	err  error
}

// call is one request awaiting its reply.
type call struct {
	id    uint64
	reply chan reply // capacity 1: the reader never blocks on it
	// onReply, when set, runs on the reader goroutine before the reply is handed
	// over, so that state it creates (a subscription's sub id) exists before the
	// reader processes the next frame (a DELIVER for that sub id).
	onReply func(reply)
}

type engine struct {
	conn   transport.Conn
	reader *bufio.Reader
	opts   ClientOptions
	routes *routeCache
	// cohorts is the client's cohort table (cohort.go), shared by its engines.
	cohorts *cohortTable
	log     *slog.Logger

	helloOk wire.HelloOk
	// sess is the broker-side session this engine serves; set once the handshake
	// succeeded, before any delivery is created.
	sess *session
	// heldFrames are pushes received during the handshake (session.go).
	heldFrames []heldFrame
	// onLost, when set, runs on its own goroutine after fail kept the
	// subscriptions for a resume.
	onLost func(*engine)

	lastRequestID atomic.Uint64
	writeQueue    chan []byte
	requestSlots  chan struct{}

	mu      sync.Mutex
	pending map[uint64]*call
	subs    map[uint64]*partitionSub
	// streams routes DELIVERs of stream partitions by sub id; streamSubs are the
	// stream subscriptions attached to this engine (stream_subscription.go).
	// Neither is ever reconciled.
	streams    map[uint64]*streamPartition
	streamSubs map[*StreamSubscription]struct{}

	lastReceivedNanos atomic.Int64
	// deliveringBlocked is set while the reader waits for a slow consumer; the
	// broker is not silent then, we are just not reading.
	deliveringBlocked atomic.Bool

	closed      chan struct{}
	closeOnce   sync.Once
	closeErr    error // set before closed is closed
	stopWriting chan struct{}
	stopOnce    sync.Once
	writerDone  chan struct{}
	readerDone  chan struct{}
}

func newEngine(conn transport.Conn, opts ClientOptions, routes *routeCache, cohorts *cohortTable) *engine {
	e := &engine{
		conn:         conn,
		reader:       bufio.NewReaderSize(conn, readBufferBytes),
		opts:         opts,
		routes:       routes,
		cohorts:      cohorts,
		log:          opts.Logger.With("broker", conn.RemoteAddr().String(), "transport", conn.Kind()),
		writeQueue:   make(chan []byte, writeQueueFramesMax),
		requestSlots: make(chan struct{}, requestsPendingMax),
		pending:      make(map[uint64]*call),
		subs:         make(map[uint64]*partitionSub),
		streams:      make(map[uint64]*streamPartition),
		streamSubs:   make(map[*StreamSubscription]struct{}),
		closed:       make(chan struct{}),
		stopWriting:  make(chan struct{}),
		writerDone:   make(chan struct{}),
		readerDone:   make(chan struct{}),
	}
	e.lastRequestID.Store(firstRequestID - 1)
	return e
}

// start launches the goroutines once the handshake has succeeded.
func (e *engine) start() {
	e.lastReceivedNanos.Store(time.Now().UnixNano())
	go e.readLoop()
	go e.writeLoop()
	go e.heartbeatLoop()
}

func (e *engine) newRequestID() uint64 { return e.lastRequestID.Add(1) }

func (e *engine) isClosed() bool {
	select {
	case <-e.closed:
		return true
	default:
		return false
	}
}

// err returns why the engine closed (nil while open).
func (e *engine) err() error {
	if !e.isClosed() {
		return nil
	}
	return e.closeErr
}

// fail closes the engine with cause: pending requests and subscriptions end.
func (e *engine) fail(cause error) {
	e.closeOnce.Do(func() {
		e.closeErr = cause
		close(e.closed)
		_ = e.conn.Close()
		e.mu.Lock()
		calls := e.pending
		e.pending = make(map[uint64]*call)
		e.mu.Unlock()
		lost := connectionLost(cause)
		for _, c := range calls {
			e.releaseSlot()
			c.reply <- reply{err: lost}
		}
		if !e.keepsSubscriptions(cause) {
			e.closeSubscriptions(lost)
			return
		}
		if e.onLost != nil {
			go e.onLost(e)
		}
	})
}

// keepsSubscriptions says whether the subscriptions outlive this engine, to be
// reconciled by the next connection: with auto-reconnect, or when the
// application asked for the reconnect; never after Close.
func (e *engine) keepsSubscriptions(cause error) bool {
	if errors.Is(cause, ErrClientClosed) {
		return false
	}
	return !e.opts.DisableAutoReconnect || errors.Is(cause, errReconnectRequested)
}

// closeSubscriptions ends every subscription still registered on e.
func (e *engine) closeSubscriptions(reason error) {
	e.mu.Lock()
	subs := make([]*Subscription, 0, len(e.subs))
	seen := make(map[*Subscription]bool, len(e.subs))
	for _, part := range e.subs {
		if !seen[part.sub] {
			seen[part.sub] = true
			subs = append(subs, part.sub)
		}
	}
	e.mu.Unlock()
	for _, sub := range subs {
		sub.closeWith(reason)
	}
	for _, sub := range e.liveStreamSubs() {
		sub.closeWith(reason)
	}
}

// shutdown closes gracefully: frames already queued (ACKs) are written first,
// within closeFlushTimeout.
func (e *engine) shutdown(cause error) {
	e.stopOnce.Do(func() { close(e.stopWriting) })
	select {
	case <-e.writerDone:
	case <-e.closed:
	case <-time.After(closeFlushTimeout):
	}
	e.fail(cause)
}

// connectionLost wraps a transport failure for callers.
func connectionLost(cause error) error {
	return fmt.Errorf("%w: %w", ErrConnectionLost, cause)
}

// encode appends a frame to a pooled buffer.
func encode(op wire.Opcode, requestID uint64, body wire.Body) ([]byte, error) {
	frame := wire.AppendBodyFrame(getFrameBuffer(), op, requestID, body)
	if len(frame)-wire.HeaderSizeBytes > int(wire.PayloadSizeBytesMaxDefault) {
		putFrameBuffer(frame)
		return nil, fmt.Errorf("%w: %s frame of %d bytes exceeds the %d-byte cap",
			ErrMessageTooLarge, op, len(frame), wire.PayloadSizeBytesMaxDefault)
	}
	return frame, nil
}

// enqueue hands a frame to the writer, waiting while the queue is full.
func (e *engine) enqueue(ctx context.Context, frame []byte) error {
	// A closed engine refuses the frame (a settle must learn that its ACK
	// was not sent, so that it can be retried after a resume). Then the
	// queue has room almost always: a one-case try is a plain channel send,
	// where the three-case select below locks all three channels.
	select {
	case <-e.closed:
		putFrameBuffer(frame)
		return connectionLost(e.closeErr)
	default:
	}
	select {
	case e.writeQueue <- frame:
		return nil
	default:
	}
	select {
	case e.writeQueue <- frame:
		return nil
	case <-e.closed:
		putFrameBuffer(frame)
		return connectionLost(e.closeErr)
	case <-ctx.Done():
		putFrameBuffer(frame)
		return ctx.Err()
	}
}

// tryEnqueue queues a frame only if there is room: for frames the reader or the
// heartbeat send, which must never block behind a stalled socket.
func (e *engine) tryEnqueue(frame []byte) bool {
	select {
	case e.writeQueue <- frame:
		return true
	default:
		putFrameBuffer(frame)
		return false
	}
}

// send queues a fire-and-forget frame (unconfirmed publish, ACK, NACK).
func (e *engine) send(ctx context.Context, op wire.Opcode, requestID uint64, body wire.Body) error {
	frame, err := encode(op, requestID, body)
	if err != nil {
		return err
	}
	return e.enqueue(ctx, frame)
}

// startRequest registers a call under a fresh request id and queues its frame.
func (e *engine) startRequest(ctx context.Context, op wire.Opcode, body wire.Body, onReply func(reply)) (*call, error) {
	select {
	case e.requestSlots <- struct{}{}: // a free slot: no three-way select (see enqueue)
	default:
		if err := e.waitRequestSlot(ctx); err != nil {
			return nil, err
		}
	}
	c := &call{id: e.newRequestID(), reply: make(chan reply, 1), onReply: onReply}
	if c.id < firstRequestID {
		panic("client: request id collides with the handshake ids 1-3")
	}
	frame, err := encode(op, c.id, body)
	if err != nil {
		e.releaseSlot()
		return nil, err
	}
	e.mu.Lock()
	if e.isClosed() {
		e.mu.Unlock()
		e.releaseSlot()
		putFrameBuffer(frame)
		return nil, connectionLost(e.closeErr)
	}
	e.pending[c.id] = c
	e.mu.Unlock()
	if err := e.enqueue(ctx, frame); err != nil {
		e.abandon(c)
		return nil, err
	}
	return c, nil
}

// waitRequestSlot blocks for a request slot until the engine closes or ctx
// ends. A slot taken on a closed engine is given back by startRequest's
// closed check.
func (e *engine) waitRequestSlot(ctx context.Context) error {
	select {
	case e.requestSlots <- struct{}{}:
		return nil
	case <-e.closed:
		return connectionLost(e.closeErr)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await waits for c's reply. On ctx expiry the call is abandoned: a late reply
// is dropped.
func (e *engine) await(ctx context.Context, c *call) (reply, error) {
	select {
	case r := <-c.reply:
		return r, r.err
	case <-ctx.Done():
		e.abandon(c)
		// The reply may have raced the cancellation; prefer it.
		select {
		case r := <-c.reply:
			return r, r.err
		default:
		}
		return reply{}, ctx.Err()
	}
}

// request is startRequest then await.
func (e *engine) request(ctx context.Context, op wire.Opcode, body wire.Body) (reply, error) {
	c, err := e.startRequest(ctx, op, body, nil)
	if err != nil {
		return reply{}, err
	}
	return e.await(ctx, c)
}

// take removes and returns the call for id, releasing its slot.
func (e *engine) take(id uint64) *call {
	e.mu.Lock()
	c, ok := e.pending[id]
	if ok {
		delete(e.pending, id)
	}
	e.mu.Unlock()
	if ok {
		e.releaseSlot()
	}
	return c
}

// abandon forgets c if it is still pending.
func (e *engine) abandon(c *call) {
	e.mu.Lock()
	cur, ok := e.pending[c.id]
	if ok && cur == c {
		delete(e.pending, c.id)
	}
	e.mu.Unlock()
	if ok && cur == c {
		e.releaseSlot()
	}
}

// releaseSlot frees one request slot. Every slot is released by whoever removed
// its call from pending, exactly once; an extra release is a bug, and blocking
// on it would hang the caller silently, so it panics instead.
func (e *engine) releaseSlot() {
	select {
	case <-e.requestSlots:
	default:
		panic("client: request slot released more often than taken")
	}
}

// framePool recycles encoded frames between senders and the writer.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getFrameBuffer() []byte { return (*framePool.Get().(*[]byte))[:0] }

func putFrameBuffer(b []byte) {
	if cap(b) == 0 || cap(b) > pooledFrameBytesMax {
		return
	}
	b = b[:0]
	framePool.Put(&b)
}
