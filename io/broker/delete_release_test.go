package broker

import (
	"context"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
)

// A deleted queue's runner drops its machine and mail once closed: a runner
// may stay referenced after the delete (a session caches the runner it last
// sent to), and the machine holds every live message of the partition.
// Before, a deleted queue of 200k unread messages kept ~35 MiB of the heap
// for as long as anything pointed at its runner.
func TestDeletedQueueRunnerReleasesItsMessages(t *testing.T) {
	b, _ := testBroker(t, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 50 {
		if _, _, err := b.AdminPublish(ctx, "doomed", "", 0, []byte("payload"), core.ContentType{Kind: core.ContentText}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	b.hostMu.RLock()
	r := b.hosts[core.QueueID{Topic: "doomed"}]
	b.hostMu.RUnlock()
	if r == nil {
		t.Fatal("no runner for the loaded partition")
	}
	if err := b.DeleteQueue(ctx, "doomed", ""); err != nil {
		t.Fatal(err)
	}
	// The delete answers once its record is durable; the runner closes on
	// the removal that follows.
	released := func() bool {
		select {
		case <-r.done:
		default:
			return false
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.queue == nil && r.h == nil
	}
	for deadline := time.Now().Add(10 * time.Second); !released() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !released() {
		t.Fatal("the deleted queue's runner still holds its machine")
	}
}
