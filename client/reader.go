package client

// The reader goroutine: reads frames, dispatches replies by request id and pushes
// by opcode (PROTOCOL §7.1).
//
// Invariants:
//   - Every received frame counts for liveness (§1.5), whatever its opcode.
//   - An ERROR that matches no pending request is connection-fatal (§6.1); an
//     unmatched REDIRECT or SUBSCRIBE_ERR is ignored; unknown opcodes are ignored.
//   - The reader never blocks on the writer: PONG is dropped when the write queue
//     is full (the writer is busy, so the broker is hearing from us anyway).
//   - The reader never waits for ClientOptions.OnAssignmentChanged: notices are
//     recorded and queued for the cohort table's own goroutine (cohort.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

func (e *engine) readLoop() {
	defer close(e.readerDone)
	// Pushes held during the handshake come first, here rather than on the
	// dialing goroutine: a full deliveries channel then blocks only the reader.
	if err := e.dispatchHeld(); err != nil {
		e.fail(err)
		return
	}
	var buf []byte
	for {
		h, payload, err := wire.ReadFrame(e.reader, wire.PayloadSizeBytesMaxDefault, buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("the broker closed the connection: %w", err)
			}
			e.fail(err)
			return
		}
		if cap(payload) > cap(buf) {
			buf = payload[:0] // reuse the larger buffer; bodies copy what they keep
		}
		e.lastReceivedNanos.Store(time.Now().UnixNano())
		if err := e.dispatch(h, payload); err != nil {
			e.fail(err)
			return
		}
	}
}

// dispatch handles one frame; an error is connection-fatal.
func (e *engine) dispatch(h wire.Header, payload []byte) error {
	switch h.Opcode {
	case wire.OpPing:
		if frame, err := encode(wire.OpPong, h.RequestID, wire.Pong{}); err == nil {
			e.tryEnqueue(frame)
		}
		return nil
	case wire.OpPong:
		return nil
	case wire.OpDeliver:
		d, err := wire.DecodeDeliver(payload)
		if err != nil {
			return fmt.Errorf("%w: malformed DELIVER: %w", ErrProtocol, err)
		}
		e.onDeliver(h.RequestID, d)
		return nil
	case wire.OpSubscriptionClosed:
		sc, err := wire.DecodeSubscriptionClosed(payload)
		if err != nil {
			return fmt.Errorf("%w: malformed SUBSCRIPTION_CLOSED: %w", ErrProtocol, err)
		}
		e.onSubscriptionClosed(sc)
		return nil
	case wire.OpTopologyUpdate:
		tu, err := wire.DecodeTopologyUpdate(payload)
		if err != nil {
			return fmt.Errorf("%w: malformed TOPOLOGY_UPDATE: %w", ErrProtocol, err)
		}
		e.onTopologyUpdate(h.RequestID, tu)
		return nil
	case wire.OpAssignmentChanged:
		ac, err := wire.DecodeAssignmentChanged(payload)
		if err != nil {
			return fmt.Errorf("%w: malformed ASSIGNMENT_CHANGED: %w", ErrProtocol, err)
		}
		e.onAssignmentChanged(ac)
		return nil
	case wire.OpGoingAway:
		if ga, err := wire.DecodeGoingAway(payload); err == nil {
			// Like Fibril's Go client we do not act on it: the reconnect path
			// handles the disconnect that follows.
			e.log.Info("client: broker is going away", "grace_ms", ga.GraceMs, "message", ga.Message)
		}
		return nil
	case wire.OpError:
		body, err := wire.DecodeErrorBody(payload)
		if err != nil {
			return fmt.Errorf("%w: malformed ERROR: %w", ErrProtocol, err)
		}
		c := e.take(h.RequestID)
		if c == nil {
			return brokerError(h.Opcode, body)
		}
		e.resolve(c, reply{op: h.Opcode, body: body})
		return nil
	}
	if isReplyOpcode(h.Opcode) {
		c := e.take(h.RequestID)
		if c == nil {
			return nil // a late reply to an abandoned request, or an unmatched REDIRECT
		}
		body, err := wire.DecodeBody(h.Opcode, payload)
		if err != nil {
			e.resolve(c, reply{err: fmt.Errorf("%w: malformed %s: %w", ErrProtocol, h.Opcode, err)})
			return nil
		}
		e.resolve(c, reply{op: h.Opcode, body: body})
	}
	return nil // RECONCILE_SERVER, unknown opcodes
}

// isReplyOpcode lists the frames that answer a request by its id.
func isReplyOpcode(op wire.Opcode) bool {
	switch op {
	case wire.OpPublishOk, wire.OpSubscribeOk, wire.OpSubscribeErr, wire.OpDeclareQueueOk,
		wire.OpDeclarePlexusOk, wire.OpTopologyOk, wire.OpRedirect, wire.OpReconcileResult,
		wire.OpAuthOk, wire.OpAuthErr, wire.OpHelloOk, wire.OpHelloErr:
		return true
	}
	return false
}

func (e *engine) resolve(c *call, r reply) {
	if c.onReply != nil {
		c.onReply(r)
	}
	c.reply <- r
}

// onTopologyUpdate applies a routing push and acknowledges the generation.
func (e *engine) onTopologyUpdate(requestID uint64, tu wire.TopologyUpdate) {
	generation, _ := e.routes.applySnapshot(wire.TopologySnapshot(tu), time.Now())
	frame, err := encode(wire.OpTopologyUpdateAck, requestID, wire.TopologyUpdateAck{Generation: generation})
	if err != nil {
		return
	}
	if !e.tryEnqueue(frame) {
		// Rare (a push while the writer is saturated): queue it without blocking
		// the reader.
		frame, _ = encode(wire.OpTopologyUpdateAck, requestID, wire.TopologyUpdateAck{Generation: generation})
		go func() { _ = e.enqueue(context.Background(), frame) }() // enqueue gives up when the engine closes
	}
}
