package client

// The writer goroutine and the heartbeat.
//
// Invariants:
//   - Frames are written through one bufio.Writer and flushed only when the queue
//     is empty: many frames per write syscall under load, no added latency when
//     idle (PERFORMANCE-NOTES: never one syscall per frame). Consecutive ACKs of
//     one queue key in a drain go out as one ACK (ackRun).
//   - The broker is declared dead after heartbeatMissedMax intervals with no frame
//     received, checked on each heartbeat tick (so the cut falls between 3 and 4
//     intervals, as Fibril's broker does), except while the reader is blocked on a
//     slow local consumer.

import (
	"bufio"
	"fmt"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

func (e *engine) writeLoop() {
	defer close(e.writerDone)
	w := bufio.NewWriterSize(e.conn, writeBufferBytes)
	var acks ackRun
	for {
		var frame []byte
		select {
		case frame = <-e.writeQueue:
		case <-e.stopWriting:
			e.writeQueued(w, &acks)
			return
		case <-e.closed:
			return
		}
		if err := acks.write(w, frame); err != nil {
			e.fail(err)
			return
		}
		if err := e.writeQueued(w, &acks); err != nil {
			e.fail(err)
			return
		}
	}
}

// writeQueued writes every frame already queued, then flushes once.
func (e *engine) writeQueued(w *bufio.Writer, acks *ackRun) error {
	for {
		select {
		case frame := <-e.writeQueue:
			if err := acks.write(w, frame); err != nil {
				return err
			}
		default:
			if err := acks.flush(w); err != nil {
				return err
			}
			return w.Flush()
		}
	}
}

// ackMergePayloadBytesMax bounds a merged ACK's payload: 1 KiB, the
// smallest frame cap a broker may set (ours refuses a lower one), so a merge
// never makes a frame a broker could refuse; about 120 tags of a short
// topic. An ACK already larger is sent as it came.
const ackMergePayloadBytesMax = 1024

// ackRun merges a run of consecutive ACK frames of one queue key, taken
// from the queue in one drain, into one ACK with all their tags (PROTOCOL
// §5.9: an ACK carries a list of tags, each settled as if acked alone).
// Under load a consumer acking each delivery then costs the broker one
// frame per ~120 acks rather than one per delivery. A broker ignores a tag
// it does not know on its own (PROTOCOL 5.9; for a stream, an offset never
// handed out), so a stale tag voids nothing beside it. Invariants:
//   - only consecutive ACKs merge, so no frame overtakes another: the
//     merged frame goes where the run's first ACK was, and a later ACK
//     moves ahead of no other frame;
//   - the merged frame carries the run's first request id (the broker
//     echoes it only in an error, and a merge of well-formed ACKs is one);
//   - the run is written before any other frame and before every flush;
//   - a merged payload stays within ackMergePayloadBytesMax.
type ackRun struct {
	open         bool
	requestID    uint64
	payloadBytes int // the merged ACK's payload size so far
	ack          wire.Ack
	scratch      wire.Ack
	buf          []byte
}

// write writes frame, or holds it in the run when it is an ACK.
func (r *ackRun) write(w *bufio.Writer, frame []byte) error {
	h, err := wire.DecodeHeader(frame)
	if err == nil && h.Opcode == wire.OpAck && wire.DecodeAckInto(frame[wire.HeaderSizeBytes:], &r.scratch) == nil {
		a := &r.scratch
		if r.open && a.QueueKey() == r.ack.QueueKey() && r.payloadBytes+8*len(a.Tags) <= ackMergePayloadBytesMax {
			r.ack.Tags = append(r.ack.Tags, a.Tags...)
			r.payloadBytes += 8 * len(a.Tags)
			putFrameBuffer(frame)
			return nil
		}
		if err := r.flush(w); err != nil {
			putFrameBuffer(frame)
			return err
		}
		r.open, r.requestID = true, h.RequestID
		r.payloadBytes = len(frame) - wire.HeaderSizeBytes
		r.ack.Topic, r.ack.Group, r.ack.Partition = a.Topic, a.Group, a.Partition
		r.ack.Tags = append(r.ack.Tags[:0], a.Tags...)
		putFrameBuffer(frame)
		return nil
	}
	if err := r.flush(w); err != nil {
		putFrameBuffer(frame)
		return err
	}
	return writeFrame(w, frame)
}

// flush writes the run's merged ACK, if one is open.
func (r *ackRun) flush(w *bufio.Writer) error {
	if !r.open {
		return nil
	}
	r.open = false
	r.buf = wire.AppendBodyFrame(r.buf[:0], wire.OpAck, r.requestID, r.ack)
	_, err := w.Write(r.buf)
	if cap(r.buf) > 64<<10 {
		r.buf = nil // one huge run: do not keep its buffer
	}
	return err
}

func writeFrame(w *bufio.Writer, frame []byte) error {
	_, err := w.Write(frame)
	putFrameBuffer(frame)
	return err
}

func (e *engine) heartbeatLoop() {
	interval := e.opts.HeartbeatInterval
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
		case <-e.closed:
			return
		}
		// The flag before the time: a delivery wait refreshes the time and
		// then clears the flag, so "not blocked" always comes with a time
		// at least as new as the wait's end.
		blocked := e.deliveringBlocked.Load()
		silence := time.Since(time.Unix(0, e.lastReceivedNanos.Load()))
		if !blocked && silence > heartbeatMissedMax*interval {
			e.fail(fmt.Errorf("%w (nothing for %v; heartbeat interval %v)",
				ErrHeartbeatTimeout, silence.Round(time.Millisecond), interval))
			return
		}
		// A fresh request id from our own space (§1.5). When the queue is full
		// the writer is already sending, which the broker counts as liveness.
		if frame, err := encode(wire.OpPing, e.newRequestID(), wire.Ping{}); err == nil {
			e.tryEnqueue(frame)
		}
	}
}
