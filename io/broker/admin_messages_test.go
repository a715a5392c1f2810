package broker

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/transport/wire"
)

// browseLive answers the live messages of topic/0 (a page of up to 100).
func browseLive(t *testing.T, b *Broker, topic string) []node.BrowseItem {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	page, err := b.BrowseMessages(ctx, node.BrowseMessages{Topic: topic, Limit: 100, States: node.BrowseActive})
	var op *ErrOperator
	if errors.As(err, &op) {
		return nil // not created yet
	}
	if err != nil {
		t.Fatal(err)
	}
	return page.Items
}

// A redrive cut short between a copy made durable in its source and the
// completion of its DLQ copy (as a crash there would) leaves both: after a
// restart the source holds the copy and the DLQ still holds all three, and
// the next redrive moves them all, the interrupted one twice (a duplicate,
// never a loss).
func TestRedriveCutShortDuplicatesNeverLoses(t *testing.T) {
	dir := t.TempDir()
	b, addr := testBroker(t, dir, nil)
	p := connect(t, addr)
	id := p.request(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "work",
		DLQPolicy: wire.Some(wire.DLQPolicy{Kind: wire.DLQCustom, Topic: "work-dlq"}), DLQRetriesMax: wire.Some[uint32](0)})
	if f := p.reply(id); f.hdr.Opcode != wire.OpDeclareQueueOk {
		t.Fatalf("declare: %v %+v", f.hdr.Opcode, f.body)
	}
	for i := range 3 {
		p.publish("work", "m"+strconv.Itoa(i), true)
	}
	p.subscribe("work", 0, 3, false)
	for range 3 {
		p.nack("work", 0, false, wire.Optional[uint64]{}, p.deliver().DeliveryTag)
	}
	// Both sides settled: the copies stored and the sources' completions
	// (which follow the copies' confirms) durable (the counter counts
	// durable settlements); else a restart sends the copies again.
	for deadline := time.Now().Add(10 * time.Second); len(browseLive(t, b, "work-dlq")) != 3 || b.Counters().DeadLettered != 3; {
		if time.Now().After(deadline) {
			t.Fatal("the three dead letters never settled into work-dlq")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.c.Close()

	crash := errors.New("crash")
	redriveHook = func(ans node.Message) error {
		if pub, ok := ans.(*node.OperatorPublished); ok && pub.Err == nil {
			return crash // the copy is durable; its completion never goes out
		}
		return nil
	}
	t.Cleanup(func() { redriveHook = nil })
	plan := node.ReplayPlan{Topic: "work-dlq", Redrive: true, Limit: 10}
	if _, err := b.RunReplay(context.Background(), plan); !errors.Is(err, crash) {
		t.Fatalf("the cut redrive answered %v", err)
	}
	redriveHook = nil
	b.Close()

	b, _ = testBroker(t, dir, nil)
	if got := browseLive(t, b, "work"); len(got) != 1 {
		t.Fatalf("after the restart work holds %d messages, want the 1 durable copy", len(got))
	}
	if got := browseLive(t, b, "work-dlq"); len(got) != 3 {
		t.Fatalf("after the restart work-dlq holds %d, want all 3 (none was completed)", len(got))
	}
	res, err := b.RunReplay(context.Background(), plan)
	if err != nil || res.Matched != 3 || res.Replayed != 3 || !res.Done {
		t.Fatalf("the second redrive: %+v, %v", res, err)
	}
	if got := browseLive(t, b, "work-dlq"); len(got) != 0 {
		t.Fatalf("work-dlq still holds %d after the redrive", len(got))
	}
	count := map[string]int{}
	for _, it := range browseLive(t, b, "work") {
		count[string(it.Body.Payload)]++
	}
	if count["m0"] != 2 || count["m1"] != 1 || count["m2"] != 1 {
		t.Fatalf("work holds %v: want m0 twice (the cut one), m1 and m2 once", count)
	}
}
