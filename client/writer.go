package client

// The writer goroutine and the heartbeat.
//
// Invariants:
//   - Frames are written through one bufio.Writer and flushed only when the queue
//     is empty: many frames per write syscall under load, no added latency when
//     idle (PERFORMANCE-NOTES: never one syscall per frame).
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
	for {
		var frame []byte
		select {
		case frame = <-e.writeQueue:
		case <-e.stopWriting:
			e.writeQueued(w)
			return
		case <-e.closed:
			return
		}
		if err := writeFrame(w, frame); err != nil {
			e.fail(err)
			return
		}
		if err := e.writeQueued(w); err != nil {
			e.fail(err)
			return
		}
	}
}

// writeQueued writes every frame already queued, then flushes once.
func (e *engine) writeQueued(w *bufio.Writer) error {
	for {
		select {
		case frame := <-e.writeQueue:
			if err := writeFrame(w, frame); err != nil {
				return err
			}
		default:
			return w.Flush()
		}
	}
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
