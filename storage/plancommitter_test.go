package storage

import "github.com/fibril-go/fibril/core"

// planCommitter is a single-threaded shell around Planner with the
// Committer's API, for tests over every backend (io/logstore's Committer
// is the goroutine shell, tested there over the OS). Time is simulated:
// when a round is not due yet, the deferral's timer fires at once.
type planCommitter struct {
	l         *Log
	p         *Planner
	onDurable func(upTo uint64, stored []StoredPayload, err error)
	nowNs     int64
	round     []core.Entry
	err       error
}

func newPlanCommitter(l *Log, onDurable func(upTo uint64, stored []StoredPayload, err error)) *planCommitter {
	return &planCommitter{l: l, p: NewPlanner(l.Options(), l.LastIndex(), l.SnapshotIndex()), onDurable: onDurable}
}

func (c *planCommitter) Submit(entries []core.Entry) error {
	if c.err != nil {
		return c.err
	}
	c.p.Submit(entries, c.nowNs)
	return c.run(false)
}

func (c *planCommitter) SaveSnapshot(index uint64, data []byte, keepBlobsFrom uint64) error {
	if c.err != nil {
		return c.err
	}
	if err := c.p.RequestSnapshot(SnapshotRequest{Index: index, Data: data, KeepBlobsFrom: keepBlobsFrom}); err != nil {
		return err
	}
	return c.run(false)
}

func (c *planCommitter) Close() error {
	if c.err != nil {
		return c.err
	}
	return c.run(true)
}

// run writes rounds until nothing is queued, letting simulated time pass
// whenever the planner defers.
func (c *planCommitter) run(closing bool) error {
	for !c.p.Idle() {
		due, waitNs := c.p.RoundDue(c.nowNs, closing)
		if !due {
			c.nowNs += max(waitNs, 1)
			continue
		}
		var snapshot *SnapshotRequest
		c.round, snapshot = c.p.TakeRound(c.round[:0], c.nowNs, c.l.LastIndex())
		_, err := c.p.WriteRound(c.l, c.round, snapshot, func(upTo uint64, stored []StoredPayload, _ RoundStats) { c.onDurable(upTo, stored, nil) })
		clear(c.round)
		if err != nil {
			c.err = err
			c.p.Drop()
			c.onDurable(0, nil, err)
			return err
		}
	}
	return nil
}
