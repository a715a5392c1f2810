package core

import (
	"runtime"
	"testing"
)

// BenchmarkPublishDeliverAck measures one publish -> durable -> deliver -> ack
// cycle in the core alone (no I/O): the work the core adds per message.
func BenchmarkPublishDeliverAck(b *testing.B) {
	p, err := NewPartition(DefaultConfig(QueueID{Topic: "bench"}))
	if err != nil {
		b.Fatal(err)
	}
	now := int64(1_000_000)
	p.Step(&Subscribe{NowMs: now, SubID: 1, Prefetch: 1})
	body := &Body{Payload: make([]byte, 1024)}
	pub := &Publish{NowMs: now, Confirm: true, Body: body}
	persisted := &Persisted{NowMs: now}
	tags := make([]uint64, 1)
	ack := &Ack{NowMs: now, SubID: 1, Tags: tags}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Step(pub)
		persisted.UpToIndex = p.LastIndex()
		rd := p.Step(persisted)
		if len(rd.Deliveries) != 1 {
			b.Fatalf("cycle %d: %d deliveries", i, len(rd.Deliveries))
		}
		tags[0] = rd.Deliveries[0].Tag
		p.Step(ack)
		persisted.UpToIndex = p.LastIndex()
		p.Step(persisted)
	}
	b.StopTimer()
	if p.Live() != 0 {
		b.Fatalf("%d messages left live", p.Live())
	}
}

// BenchmarkPublishBatch measures publishes alone, many per durability report,
// as group commit drives the core.
func BenchmarkPublishBatch(b *testing.B) {
	p, _ := NewPartition(DefaultConfig(QueueID{Topic: "bench"}))
	now := int64(1_000_000)
	body := &Body{Payload: make([]byte, 1024)}
	pub := &Publish{NowMs: now, Confirm: true, Body: body}
	persisted := &Persisted{NowMs: now}
	sub := &Subscribe{NowMs: now, SubID: 1, Prefetch: 1 << 16}
	p.Step(sub)
	ack := &Ack{NowMs: now, SubID: 1, Tags: make([]uint64, 0, 1024)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Step(pub)
		if i%256 == 255 {
			persisted.UpToIndex = p.LastIndex()
			rd := p.Step(persisted)
			ack.Tags = ack.Tags[:0]
			for _, d := range rd.Deliveries {
				ack.Tags = append(ack.Tags, d.Tag)
			}
			p.Step(ack)
			persisted.UpToIndex = p.LastIndex()
			p.Step(persisted)
		}
	}
}

// TestReadyMessageFootprint measures the core state held per ready message,
// payload excluded: the store slot, the ready index and the shared Body
// envelope (slices and stamps, not the bytes they point to).
func TestReadyMessageFootprint(t *testing.T) {
	const n = 200_000
	p, _ := NewPartition(DefaultConfig(QueueID{Topic: "mem"}))
	bodies := make([]Body, n) // allocated before measuring: the envelope is counted separately
	payload := []byte("x")
	for i := range bodies {
		bodies[i].Payload = payload
	}
	pubs := make([]Publish, n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		pubs[i] = Publish{NowMs: 1, Body: &bodies[i]}
		p.Step(&pubs[i])
		if i%1024 == 1023 {
			p.Step(&Persisted{NowMs: 1, UpToIndex: p.LastIndex()})
		}
	}
	p.Step(&Persisted{NowMs: 1, UpToIndex: p.LastIndex()})
	runtime.GC()
	runtime.ReadMemStats(&after)
	if p.Counts().Ready != n {
		t.Fatalf("%d ready, want %d", p.Counts().Ready, n)
	}
	perMessage := float64(after.HeapAlloc-before.HeapAlloc) / n
	envelope := float64(unsafeSizeofBody())
	t.Logf("core state per ready message: %.1f bytes (+ %.0f bytes of Body envelope shared with the driver; payload excluded)", perMessage, envelope)
	if perMessage > 128 {
		t.Errorf("core state per ready message %.1f bytes, budget 128", perMessage)
	}
	runtime.KeepAlive(pubs)
	runtime.KeepAlive(p)
}

// BenchmarkSnapshot100k measures encoding a snapshot of 100k ready messages
// of 1 KiB.
func BenchmarkSnapshot100k(b *testing.B) {
	p, _ := NewPartition(DefaultConfig(QueueID{Topic: "snap"}))
	payload := make([]byte, 1024)
	for i := 0; i < 100_000; i++ {
		p.Step(&Publish{NowMs: 1, Body: &Body{Payload: payload}})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(p.Snapshot()) < 100_000*1024 {
			b.Fatal("short snapshot")
		}
	}
}
