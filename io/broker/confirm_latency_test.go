package broker

import (
	"testing"

	"github.com/fibril-go/fibril/transport/wire"
)

func frameBytes(op wire.Opcode, req uint64, payload []byte) []byte {
	h := wire.EncodeHeader(wire.Header{PayloadSizeBytes: uint32(len(payload)), Version: 1, Opcode: op, RequestID: req})
	return append(h[:], payload...)
}

// One publish in confirmSampleEvery is timed, from its read to the queueing
// of the PUBLISH_OK with its request id, once; other frames do not end it;
// an unanswered sample is given up after confirmSampleStaleNs; none of it
// allocates.
func TestConfirmLatencySampling(t *testing.T) {
	var s confirmSampler
	var h histogram
	for i := 1; i < confirmSampleEvery; i++ {
		s.onRead(wire.Header{Opcode: wire.OpPublish, RequestID: uint64(i)}, 1000)
	}
	if s.req.Load() != 0 {
		t.Fatal("armed before the 64th publish")
	}
	s.onRead(wire.Header{Opcode: wire.OpPing, RequestID: 999}, 1000) // not a publish
	s.onRead(wire.Header{Opcode: wire.OpPublish, RequestID: 64}, 1000)
	if s.req.Load() != 64 {
		t.Fatalf("armed %d, want 64", s.req.Load())
	}
	// Another answer, then ours behind it in the same write.
	out := append(frameBytes(wire.OpPublishOk, 63, []byte{1, 2, 3}), frameBytes(wire.OpPublishOk, 64, []byte{4})...)
	s.onEnqueue(frameBytes(wire.OpDeliver, 64, make([]byte, 40)), 2000, &h) // a push reusing the id
	if h.count.Load() != 0 {
		t.Fatal("a DELIVER ended the sample")
	}
	s.onEnqueue(out, 1000+2_500_000, &h)
	if h.count.Load() != 1 || s.req.Load() != 0 {
		t.Fatalf("count %d armed %d after the answer", h.count.Load(), s.req.Load())
	}
	if h.counts[4].Load() != 1 { // 2.5 ms: in the bucket (1 ms, 2.5 ms]
		t.Fatalf("buckets %v", h.counts[:6])
	}
	s.onEnqueue(out, 5_000_000, &h)
	if h.count.Load() != 1 {
		t.Fatal("one sample observed twice")
	}
	// An unconfirmed sample: the next one waits until it is stale.
	for i := 0; i < confirmSampleEvery; i++ {
		s.onRead(wire.Header{Opcode: wire.OpPublish, RequestID: uint64(1000 + i)}, 10_000)
	}
	armed := s.req.Load()
	for i := 0; i < confirmSampleEvery; i++ {
		s.onRead(wire.Header{Opcode: wire.OpPublish, RequestID: uint64(2000 + i)}, 20_000)
	}
	if s.req.Load() != armed {
		t.Fatal("a young pending sample was replaced")
	}
	for i := 0; i < confirmSampleEvery; i++ {
		s.onRead(wire.Header{Opcode: wire.OpPublish, RequestID: uint64(3000 + i)}, 10_000+confirmSampleStaleNs+1)
	}
	if s.req.Load() == armed {
		t.Fatal("a stale sample was never replaced")
	}
	frame := frameBytes(wire.OpPublishOk, 0, nil)
	if a := testing.AllocsPerRun(100, func() {
		s.onRead(wire.Header{Opcode: wire.OpPublish, RequestID: 7}, 1<<51)
		s.onEnqueue(frame, 1<<51, &h)
	}); a != 0 {
		t.Fatalf("%v allocations per call", a)
	}
}
