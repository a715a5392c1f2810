package broker

import (
	"context"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// An operator's test publish and purge go through the Node (relayed to
// the partition, never called on it directly), and hold the partition
// only while they run: once idle it is evicted, as if nobody had touched
// it. Before, the driver's AdminOpen was granted as an open under session
// 0 that nothing forgot, and the partition stayed loaded forever.
func TestAdminPublishAndPurgeLeaveThePartitionEvictable(t *testing.T) {
	b, _ := testBroker(t, "", func(c *Config) {
		c.IdleCleanup = node.IdleCleanupConfig{Enabled: true, EvictAfterMs: 1000, SweepIntervalMs: 100}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, offset, err := b.AdminPublish(ctx, "ops", "", 0, []byte("t"), core.ContentType{Kind: core.ContentText})
	if err != nil || id != (core.QueueID{Topic: "ops"}) || offset != 0 {
		t.Fatalf("admin publish: %v %d %v", id, offset, err)
	}
	if n, err := b.PurgeQueue(ctx, "ops", ""); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if _, _, err := b.AdminPublish(ctx, "ops", "", 3, []byte("t"), core.ContentType{Kind: core.ContentText}); err == nil {
		t.Fatal("a publish to a partition out of range was accepted")
	}
	if _, err := b.PurgeQueue(ctx, "nope", ""); err == nil {
		t.Fatal("a purge of an unknown queue was accepted")
	}
	evicted := func() bool {
		q, err := b.Queue(ctx, "ops", "")
		return err == nil && len(q.Parts) == 1 && !q.Parts[0].Loaded && b.IdleEvictions() >= 1
	}
	for deadline := time.Now().Add(10 * time.Second); !evicted() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if !evicted() {
		t.Fatalf("the operator's use pinned the partition (evictions %d)", b.IdleEvictions())
	}
	// The next operator publish reloads it.
	if _, offset, err := b.AdminPublish(ctx, "ops", "", 0, []byte("t"), core.ContentType{Kind: core.ContentText}); err != nil || offset != 1 {
		t.Fatalf("admin publish after the eviction: %d %v", offset, err)
	}
}
