package syncbuf

import (
	"sync"
	"testing"
)

// Writes and reads from several goroutines (run with -race to see the lock
// matter); every byte written is read back, in order per writer.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("ab"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := len(b.String()); got != 800 {
		t.Fatalf("read back %d bytes, want 800", got)
	}
	if !b.Contains("abab") || b.Contains("ba ") {
		t.Fatalf("Contains is wrong on %q", b.String()[:10])
	}
}
