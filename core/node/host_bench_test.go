package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
)

// Host benchmarks: what the Host adds per message over the core's own
// BenchmarkPublishDeliverAck (core/bench_test.go): reference bookkeeping,
// envelopes, grouped deliveries. Inputs are reused as a driver's loop would.

func newBenchHost(b *testing.B) *Host {
	p, err := core.NewPartition(core.DefaultConfig(qid("bench", 0)))
	if err != nil {
		b.Fatal(err)
	}
	h := NewHost(DefaultConfig(), p, LoadRequest{Queue: qid("bench", 0)})
	h.Step(&Tick{NowMs: 1_000_000})
	return h
}

// BenchmarkHostPublishConfirm: one confirmed publish -> durable -> Response.
func BenchmarkHostPublishConfirm(b *testing.B) {
	h := newBenchHost(b)
	now := int64(1_000_000)
	body := &core.Body{Payload: make([]byte, 1024)}
	pub := &core.Publish{Confirm: true, Body: body}
	req := &Request{Token: 1, Input: pub}
	deliver := &Deliver{NowMs: now, Envelope: Envelope{From: SessionAddr(1), To: PartitionAddr(qid("bench", 0)), Msg: req}}
	persisted := &Persisted{NowMs: now}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.Step(deliver)
		persisted.UpToIndex = h.p.LastIndex()
		rd := h.Step(persisted)
		if len(rd.Out) != 1 {
			b.Fatalf("cycle %d: %d envelopes", i, len(rd.Out))
		}
	}
}

// BenchmarkHostDeliverAck: publish -> durable -> Deliveries -> ack ->
// durable, the core bench's cycle through the Host.
func BenchmarkHostDeliverAck(b *testing.B) {
	h := newBenchHost(b)
	now := int64(1_000_000)
	env := func(in core.Input) *Deliver {
		return &Deliver{NowMs: now, Envelope: Envelope{From: SessionAddr(1), To: PartitionAddr(qid("bench", 0)), Msg: &Request{Input: in}}}
	}
	h.Step(env(&core.Subscribe{SubID: 1, Prefetch: 1}))
	body := &core.Body{Payload: make([]byte, 1024)}
	publish := env(&core.Publish{Body: body})
	tags := make([]uint64, 1)
	ack := env(&core.Ack{SubID: 1, Tags: tags})
	persisted := &Persisted{NowMs: now}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.Step(publish)
		persisted.UpToIndex = h.p.LastIndex()
		rd := h.Step(persisted)
		if len(rd.Out) != 1 {
			b.Fatalf("cycle %d: %d envelopes", i, len(rd.Out))
		}
		tags[0] = rd.Out[0].Msg.(*Deliveries).Items[0].Tag
		h.Step(ack)
		persisted.UpToIndex = h.p.LastIndex()
		h.Step(persisted)
	}
	b.StopTimer()
	if h.p.Live() != 0 {
		b.Fatalf("%d messages left live", h.p.Live())
	}
}
