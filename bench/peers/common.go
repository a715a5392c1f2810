package peers

// Helpers every adapter shares.

import (
	"context"
	"sync"
	"time"
)

// Names of the destinations per scenario, fixed as in the harness (Prepare
// deletes a leftover before creating a fresh one).
const (
	keyConfirmedPublish = "cp"
	keyEndToEnd         = "e2e"
	keyFanout           = "fanout"
)

// remainingPolls and remainingPollEvery bound the left probe as in the
// harness: up to 50 questions 200 ms apart, ending at the first 0 (variables
// only so that tests can shorten them).
var (
	remainingPolls     = 50
	remainingPollEvery = 200 * time.Millisecond
)

// closeTimeout bounds how long closing a producer or consumer waits for its
// goroutines and outstanding confirmations (the harness waits 5 s too).
const closeTimeout = 5 * time.Second

// dialTimeout bounds one connection attempt.
const dialTimeout = 5 * time.Second

// pollRemaining asks count until it answers 0, an error, or the polls run
// out; it returns the last answer, -1 with the error if the first failed.
func pollRemaining(ctx context.Context, count func(context.Context) (int64, error)) (int64, error) {
	left := int64(-1)
	for i := range remainingPolls {
		n, err := count(ctx)
		if err != nil {
			if i == 0 {
				return -1, err
			}
			return left, nil
		}
		left = n
		if n <= 0 {
			return n, nil
		}
		select {
		case <-time.After(remainingPollEvery):
		case <-ctx.Done():
			return left, nil
		}
	}
	return left, nil
}

// waitDone waits for done at most d; false if it timed out.
func waitDone(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// waitGroupDone is waitDone for a WaitGroup.
func waitGroupDone(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return waitDone(done, d)
}
