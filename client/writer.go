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

// ackMergeTagsMax bounds the tags of one merged ACK (a broker applies an
// ACK's tags in one go; 1024 keeps a frame at ~8 KiB).
const ackMergeTagsMax = 1024

// ackRun merges a run of consecutive ACK frames of one queue key, taken
// from the queue in one drain, into one ACK with all their tags (PROTOCOL
// §5.9: an ACK carries a list of tags, each settled as if acked alone).
// Under load a consumer acking each delivery then costs the broker one
// frame per drain rather than one per delivery. Invariants:
//   - only consecutive ACKs merge, so no frame overtakes another: the
//     merged frame goes where the run's first ACK was, and a later ACK
//     moves ahead of no other frame;
//   - the merged frame carries the run's first request id (the broker
//     echoes it only in an error, and a merge of well-formed ACKs is one);
//   - the run is written before any other frame and before every flush.
type ackRun struct {
	open      bool
	requestID uint64
	ack       wire.Ack
	scratch   wire.Ack
	buf       []byte
}

// write writes frame, or holds it in the run when it is an ACK.
func (r *ackRun) write(w *bufio.Writer, frame []byte) error {
	h, err := wire.DecodeHeader(frame)
	if err == nil && h.Opcode == wire.OpAck && wire.DecodeAckInto(frame[wire.HeaderSizeBytes:], &r.scratch) == nil {
		a := &r.scratch
		if r.open && a.QueueKey() == r.ack.QueueKey() && len(r.ack.Tags)+len(a.Tags) <= ackMergeTagsMax {
			r.ack.Tags = append(r.ack.Tags, a.Tags...)
			putFrameBuffer(frame)
			return nil
		}
		if err := r.flush(w); err != nil {
			putFrameBuffer(frame)
			return err
		}
		r.open, r.requestID = true, h.RequestID
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
		silence := time.Since(time.Unix(0, e.lastReceivedNanos.Load()))
		if !e.deliveringBlocked.Load() && silence > heartbeatMissedMax*interval {
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
