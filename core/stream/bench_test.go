package stream

import (
	"runtime"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// benchPartition is a durable-tier partition with subs subscribers that
// credit everything back each step (the session keeps up).
func benchPartition(b *testing.B, subs int, tune func(*Config)) *Partition {
	cfg := DefaultConfig(core.QueueID{Topic: "bench"})
	if tune != nil {
		tune(&cfg)
	}
	p, err := NewPartition(cfg, core.StreamSettings{Tier: core.TierDurable, PartitionCount: 1})
	if err != nil {
		b.Fatal(err)
	}
	p.Step(&Tick{NowMs: 1})
	p.Step(&Persisted{NowMs: 1, UpToIndex: p.LastIndex()})
	for i := 0; i < subs; i++ {
		p.Step(&Subscribe{NowMs: 1, SubID: uint64(i + 1)})
	}
	return p
}

// BenchmarkAppend: ns per published record (append, confirm at Persisted),
// no subscribers.
func BenchmarkAppend(b *testing.B) {
	p := benchPartition(b, 0, nil)
	body := &core.Body{Payload: make([]byte, 1024)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Step(&Publish{NowMs: 2, Body: body})
		p.Step(&Persisted{NowMs: 2, UpToIndex: p.LastIndex()})
	}
}

// BenchmarkDeliver4: ns per delivered record with 4 live subscribers (each
// record is delivered 4 times; the figure divides by deliveries).
func BenchmarkDeliver4(b *testing.B) {
	const subs = 4
	p := benchPartition(b, subs, nil)
	body := &core.Body{Payload: make([]byte, 1024)}
	credits := make([]Credit, subs)
	for i := range credits {
		credits[i] = Credit{NowMs: 2, SubID: uint64(i + 1), Records: 1}
	}
	b.ReportAllocs()
	b.ResetTimer()
	delivered := 0
	for i := 0; i < b.N; i++ {
		p.Step(&Publish{NowMs: 2, Body: body})
		delivered += len(p.Step(&Persisted{NowMs: 2, UpToIndex: p.LastIndex()}).Deliveries)
		for j := range credits {
			p.Step(&credits[j])
		}
	}
	b.StopTimer()
	if delivered != subs*b.N {
		b.Fatalf("delivered %d, want %d", delivered, subs*b.N)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(delivered), "ns/delivery")
}

// BenchmarkCoreBytesPerRetainedRecord: the partition's heap per retained
// 1 KiB record, over a million records (the ring is bounded, the segment
// table costs one entry per SegmentRecordsMax records).
func BenchmarkCoreBytesPerRetainedRecord(b *testing.B) {
	const records = 1_000_000
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p := benchPartition(b, 0, nil)
		for j := 0; j < records; j++ {
			// A fresh body per record, as the driver hands over: the ones
			// the ring lets go are garbage.
			p.Step(&Publish{NowMs: int64(j), Body: &core.Body{Payload: make([]byte, 1024)}})
			p.Step(&Persisted{NowMs: int64(j), UpToIndex: p.LastIndex()})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if p.segments.retainedRecords != records {
			b.Fatalf("retained %d", p.segments.retainedRecords)
		}
		perRecord := float64(after.HeapAlloc-before.HeapAlloc) / records
		b.ReportMetric(perRecord, "B/record")
		b.ReportMetric(float64(p.segments.len()), "segments")
		runtime.KeepAlive(p)
		if perRecord > 64 {
			b.Fatalf("%.1f bytes of core state per retained record: not far below a 1 KiB record", perRecord)
		}
	}
}
