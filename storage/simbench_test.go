package storage

import (
	"testing"

	"github.com/fibril-go/fibril/storage/simfs"
	"github.com/fibril-go/fibril/storage/simwal"
)

// BenchmarkSimAppendSync: the same rounds as io/logstore's
// BenchmarkAppendSync (1 KiB publishes, payloads in blob files), over
// simfs and simwal: what storage costs the simulator per entry.
func BenchmarkSimAppendSync(b *testing.B) {
	const batchEntries = 64
	fs := simfs.New(simfs.Options{})
	env := Env{FS: fs, OpenSegmentLog: simwal.Opener(fs)}
	opts := DefaultOptions()
	// Snapshots keep the simulated disk bounded, as in a simulated run.
	l, _, err := Open(env, "/bench", opts)
	if err != nil {
		b.Fatal(err)
	}
	batch := publishEntries(1, batchEntries, 1024)
	b.SetBytes(batchEntries * 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		next := l.LastIndex() + 1
		for k := range batch {
			batch[k].Index = next + uint64(k)
		}
		if err := l.Append(batch); err != nil {
			b.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			if err := l.SaveSnapshot(l.LastIndex(), []byte("state"), 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*batchEntries)/b.Elapsed().Seconds(), "entries/s")
}
