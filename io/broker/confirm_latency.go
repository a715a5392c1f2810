package broker

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// Publish-to-confirm latency (fibril_publish_confirm_seconds), sampled.
// The time a broker takes from reading a PUBLISH to writing its PUBLISH_OK
// is what a confirmed producer waits on, fsync included. Timing every
// publish would cost the hot path a map per connection; instead each
// connection times one publish in confirmSampleEvery, at most one at a
// time. Invariants:
//   - the reader arms a sample (request id, read time) only when none is
//     pending or the pending one is older than confirmSampleStaleNs (an
//     unconfirmed publish never gets an answer; a sample must not block
//     the next one forever);
//   - only enqueue, while a sample is armed, walks the frame headers of
//     what it queues (a few per call; one atomic load otherwise), and the
//     first PUBLISH_OK or ERROR with the armed request id ends the sample:
//     one observation per sample, no allocation, no lock of its own;
//   - the latency ends when the answer is queued for the socket, not when
//     the client reads it: the broker's part only.

const (
	// confirmSampleEvery: one publish in this many is timed per connection.
	confirmSampleEvery = 64
	// confirmSampleStaleNs: a sample unanswered this long is given up.
	confirmSampleStaleNs = int64(10 * time.Second)
)

var confirmSecondsBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// HistogramConfirmSeconds is the histogram's name without the fibril_ prefix.
const HistogramConfirmSeconds = "publish_confirm_seconds"

// confirmSampler is a connection's sample state.
type confirmSampler struct {
	publishes uint32        // reader goroutine only
	req       atomic.Uint64 // the armed request id (0: none)
	atNs      atomic.Int64  // when it was read (clock.sinceBootNs)
}

// onRead is called by the reader for each frame read.
func (s *confirmSampler) onRead(hdr wire.Header, nowNs int64) {
	if hdr.Opcode != wire.OpPublish && hdr.Opcode != wire.OpPublishDelayed {
		return
	}
	s.publishes++
	if s.publishes%confirmSampleEvery != 0 || hdr.RequestID == 0 {
		return
	}
	if s.req.Load() != 0 && nowNs-s.atNs.Load() < confirmSampleStaleNs {
		return // the pending sample is still young
	}
	s.atNs.Store(nowNs)
	s.req.Store(hdr.RequestID)
}

// onEnqueue looks for the armed sample's answer among the frames queued.
func (s *confirmSampler) onEnqueue(frames []byte, nowNs int64, h *histogram) {
	req := s.req.Load()
	if req == 0 {
		return
	}
	for len(frames) >= wire.HeaderSizeBytes {
		payloadLen := binary.BigEndian.Uint32(frames[0:4])
		opcode := wire.Opcode(binary.BigEndian.Uint16(frames[6:8]))
		id := binary.BigEndian.Uint64(frames[12:20])
		if id == req && (opcode == wire.OpPublishOk || opcode == wire.OpError) {
			if s.req.CompareAndSwap(req, 0) {
				h.observe(confirmSecondsBounds, float64(nowNs-s.atNs.Load())/1e9)
			}
			return
		}
		if uint64(len(frames)) < uint64(wire.HeaderSizeBytes)+uint64(payloadLen) {
			return // a frame split across enqueues: not ours to parse
		}
		frames = frames[wire.HeaderSizeBytes+int(payloadLen):]
	}
}

// sinceBootNs is a monotonic reading in nanoseconds (latency samples).
func (c *clock) sinceBootNs() int64 { return int64(time.Since(c.boot)) }
