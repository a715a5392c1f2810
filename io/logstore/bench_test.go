package logstore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/tidwall/wal"
)

const benchPayloadBytes = 1024

// BenchmarkCommitter: one partition loop submits 1 KiB publishes, a few at
// a time, as fast as it can; the writer groups them. Reports entries/s,
// fsyncs/s and entries per fsync (the group commit factor).
func BenchmarkCommitter(b *testing.B) {
	for _, perSubmit := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("perSubmit=%d", perSubmit), func(b *testing.B) {
			l, _ := openLog(b, b.TempDir(), DefaultOptions())
			defer l.Close()
			var durable atomic.Uint64
			done := make(chan struct{})
			target := uint64(0)
			c := NewCommitter(l, func(upTo uint64, _ []StoredPayload, err error) {
				if err != nil {
					b.Error(err)
				}
				durable.Store(upTo)
				if upTo == atomic.LoadUint64(&target) {
					close(done)
				}
			})
			total := ((b.N + perSubmit - 1) / perSubmit) * perSubmit
			atomic.StoreUint64(&target, uint64(total))
			batch := publishEntries(1, perSubmit, benchPayloadBytes)
			b.SetBytes(benchPayloadBytes)
			b.ResetTimer()
			start := time.Now()
			for next := uint64(1); next <= uint64(total); next += uint64(perSubmit) {
				for i := range batch {
					batch[i].Index, batch[i].Offset = next+uint64(i), next+uint64(i)-1
				}
				if err := c.Submit(batch); err != nil {
					b.Fatal(err)
				}
			}
			<-done
			elapsed := time.Since(start)
			b.StopTimer()
			if err := c.Close(); err != nil {
				b.Fatal(err)
			}
			s := c.Stats()
			b.ReportMetric(float64(total)/elapsed.Seconds(), "entries/s")
			b.ReportMetric(float64(s.Syncs)/elapsed.Seconds(), "fsyncs/s")
			b.ReportMetric(float64(s.Entries)/float64(max(s.Syncs, 1)), "entries/fsync")
		})
	}
}

// BenchmarkAppendSync: Append a batch of 1 KiB publishes, then Sync, one
// op per batch: PERFORMANCE-NOTES measured ~193k records/s for tidwall at
// a batch of 1024. BenchmarkTidwallAppendSync is the same-run baseline.
func BenchmarkAppendSync(b *testing.B) {
	for _, batchEntries := range []int{1024, 64} {
		b.Run(fmt.Sprintf("batch=%d", batchEntries), func(b *testing.B) {
			l, _ := openLog(b, b.TempDir(), DefaultOptions())
			defer l.Close()
			batch := publishEntries(1, batchEntries, benchPayloadBytes)
			b.SetBytes(int64(batchEntries * benchPayloadBytes))
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				next := l.LastIndex() + 1
				for i := range batch {
					batch[i].Index = next + uint64(i)
				}
				if err := l.Append(batch); err != nil {
					b.Fatal(err)
				}
				if err := l.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batchEntries)/time.Since(start).Seconds(), "records/s")
		})
	}
}

// BenchmarkTidwallAppendSync is tidwall alone, with records the size of
// ours, for comparison in the same run (the machine varies between runs).
func BenchmarkTidwallAppendSync(b *testing.B) {
	for _, segmentSizeBytes := range []int{1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("segmentMiB=%d", segmentSizeBytes>>20), func(b *testing.B) {
			benchTidwallAppendSync(b, segmentSizeBytes)
		})
	}
}

func benchTidwallAppendSync(b *testing.B, segmentSizeBytes int) {
	const batchEntries = 1024
	opts := DefaultOptions()
	opts.SegmentSizeBytes = segmentSizeBytes
	// The options osfs.OpenTidwall uses.
	log, err := wal.Open(b.TempDir(), &wal.Options{NoSync: true, SegmentSize: opts.SegmentSizeBytes,
		SegmentCacheSize: 1, NoCopy: true, AllowEmpty: true, DirPerms: 0o750, FilePerms: 0o640})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	e := publishEntries(1, 1, benchPayloadBytes)[0]
	// A record's size: the CRC, then the entry's bytes.
	record := core.AppendEntry(make([]byte, 4), &e)
	var batch wal.Batch
	next := uint64(1)
	b.SetBytes(int64(batchEntries * benchPayloadBytes))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		for range batchEntries {
			batch.Write(next, record)
			next++
		}
		if err := log.WriteBatch(&batch); err != nil {
			b.Fatal(err)
		}
		if err := log.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batchEntries)/time.Since(start).Seconds(), "records/s")
}

// BenchmarkRecover: Open and scan a log of 1 KiB publishes (recovery speed).
// The sub-benchmark noSync runs the old recovery (mutant.RecoveryNoSync,
// which skips fsyncing what it keeps), to show the cost of those fsyncs
// in the same run.
func BenchmarkRecover(b *testing.B) {
	const entries = 100_000
	dir := b.TempDir()
	l, _ := openLog(b, dir, DefaultOptions())
	for l.LastIndex() < entries {
		appendSync(b, l, publishEntries(l.LastIndex()+1, 1000, benchPayloadBytes))
	}
	l.Close()
	for _, variant := range []string{"", mutant.RecoveryNoSync} {
		name := "fsync"
		if variant != "" {
			name = "noSync"
		}
		b.Run(name, func(b *testing.B) {
			mutant.Active = variant
			defer func() { mutant.Active = "" }()
			start := time.Now()
			for range b.N {
				l, rec := openLog(b, dir, DefaultOptions())
				if len(rec.Entries) != entries {
					b.Fatalf("%d entries", len(rec.Entries))
				}
				l.Close()
			}
			b.ReportMetric(float64(b.N*entries)/time.Since(start).Seconds(), "entries/s")
		})
	}
}
