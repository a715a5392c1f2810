package bench

import (
	"context"
	"testing"
	"time"
)

// cleaningBroker records when Cleanup ran relative to the scenario.
type cleaningBroker struct {
	*fakeBroker
	cleanups    int
	cleanedWith context.Context
	queueAtEnd  int
}

func (c *cleaningBroker) Cleanup(ctx context.Context) error {
	c.cleanups++
	c.cleanedWith = ctx
	c.queueAtEnd = len(c.queue)
	return nil
}

// Run calls a Cleaner's Cleanup once after the scenario, also after a
// timeout, with a context of its own (the run's has ended by then).
func TestRunCleansUpAfterEveryOutcome(t *testing.T) {
	w := Workload{Scenario: ScenarioConfirmedPublish, Msgs: 200, SizeBytes: 16, Producers: 2, Window: 4}
	ok := &cleaningBroker{fakeBroker: newFakeBroker(w.Producers)}
	if _, status := Run(ok, w, RunOptions{System: "fake", Timeout: 30 * time.Second}); status != StatusOK {
		t.Fatalf("status %s", status)
	}
	if ok.cleanups != 1 || ok.queueAtEnd != w.Msgs {
		t.Fatalf("cleanups %d, queue %d at cleanup: want one Cleanup after all %d publishes", ok.cleanups, ok.queueAtEnd, w.Msgs)
	}
	stuck := &cleaningBroker{fakeBroker: newFakeBroker(w.Producers)}
	stuck.neverConfirm = true
	if _, status := Run(stuck, w, RunOptions{System: "fake", Timeout: 100 * time.Millisecond}); status != StatusTimeout {
		t.Fatalf("status %s", status)
	}
	if stuck.cleanups != 1 || stuck.cleanedWith.Err() == nil {
		// the context is cancelled once Cleanup returned; it was live during it
		t.Fatalf("cleanups %d after a timeout", stuck.cleanups)
	}
}
