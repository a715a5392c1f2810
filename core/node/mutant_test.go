package node

import (
	"fmt"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
)

// Each defect this package fixes has a deliberately broken variant (package
// mutant) that restores the old behaviour; the scenario below that checks
// the rule must pass on the real code and fail on the mutant, so the check
// is shown able to fail.

// scenarioRefusedCopyIsResent: a copy its target refused is sent again
// after the backoff (the old forwarding gave up until a restart).
func scenarioRefusedCopyIsResent(t *testing.T) error {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), deadLetterSettings())
	deadLetterMessages(hh, 1)
	take[*DeadLetterOut](hh)
	hh.deliver(NodeAddr(), &DeadLetterFailed{Offset: 0, Err: core.ErrPartitionLoadFailed})
	hh.tick(hh.cfg.DeadLetterRetryMaxMs)
	if outs, _ := take[*DeadLetterOut](hh); len(outs) != 1 {
		return fmt.Errorf("a refused copy was sent %d times after its backoff", len(outs))
	}
	return nil
}

// scenarioBouncedDeliveriesEndTheSubscription: the gone session's
// subscription ends, and what it held is ready again at once.
func scenarioBouncedDeliveriesEndTheSubscription(t *testing.T) error {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.subscribe(1, 5, 1)
	hh.publish(2, 0, "a")
	batches, to := take[*Deliveries](hh)
	hh.step(&Bounced{NowMs: hh.now, Envelope: Envelope{From: PartitionAddr(hh.pcfg.Queue), To: to[0], Msg: batches[0]}})
	if c := hh.h.Partition().Counts(); c.Ready != 1 || len(hh.h.Partition().SubscriptionIDs()) != 0 {
		return fmt.Errorf("after a bounce: %+v, subscriptions %v", c, hh.h.Partition().SubscriptionIDs())
	}
	return nil
}

// scenarioStalledHandshakeIsClosed: a connection with no whole HELLO is
// closed at its deadline.
func scenarioStalledHandshakeIsClosed(t *testing.T) error {
	h := newNodeHarness(t, testNodeConfig())
	id := h.open()
	if e := h.tick(h.cfg.HandshakeTimeoutMs); len(e.close) != 1 || e.close[0] != id {
		return fmt.Errorf("a stalled handshake was not closed (%v)", e.close)
	}
	return nil
}

// scenarioSnapshotUnderLoad: a partition never quiescent still snapshots.
func scenarioSnapshotUnderLoad(t *testing.T) error {
	cfg := testHostConfig()
	cfg.SnapshotEntriesMin = 20
	hh := newHostHarness(t, cfg, testPartitionConfig("jobs"), DeclareSettings{})
	hh.request(1, 0, &core.Subscribe{SubID: 5, Prefetch: 1, AutoAck: true})
	hh.autoPersist = false
	for i := 0; i < 30; i++ {
		hh.publish(1, 0, "m")
		hh.step(&Persisted{NowMs: hh.now, UpToIndex: hh.h.Partition().LastIndex() - 1})
	}
	if len(hh.snapshots) == 0 {
		return fmt.Errorf("no snapshot after %d entries under load", hh.h.Partition().LastIndex())
	}
	return nil
}

func TestMutantsAreCaught(t *testing.T) {
	cases := []struct {
		mutant   string
		scenario func(*testing.T) error
	}{
		{mutant.DeadLetterGiveUp, scenarioRefusedCopyIsResent},
		{mutant.GhostSubscription, scenarioBouncedDeliveriesEndTheSubscription},
		{mutant.NoHandshakeTimeout, scenarioStalledHandshakeIsClosed},
		{mutant.SnapshotOnlyWhenQuiescent, scenarioSnapshotUnderLoad},
	}
	for _, c := range cases {
		t.Run(c.mutant, func(t *testing.T) {
			if err := c.scenario(t); err != nil {
				t.Fatalf("the real code fails: %v", err)
			}
			mutant.Active = c.mutant
			defer func() { mutant.Active = "" }()
			if err := c.scenario(t); err == nil {
				t.Fatalf("mutant %s is not caught", c.mutant)
			}
		})
	}
}
