package broker

import (
	"time"

	"github.com/fibril-go/fibril/mutant"
)

// The driver's clock (core/node doc.go, Time). Invariants:
//   - nowMs never goes back and never jumps with the wall clock: it is the
//     wall clock read once at boot plus the monotonic time elapsed since, so
//     a step of the system clock (NTP, an operator) cannot expire every
//     lease at once (defect of the old runner, which read time.Now per step);
//   - it stays Unix milliseconds, as the wire protocol speaks (PUBLISHED_MS,
//     not_before), close to the wall clock as long as the two do not drift.
type clock struct {
	bootWallMs int64
	boot       time.Time // carries Go's monotonic reading
	wall       func() time.Time
}

func newClock(wall func() time.Time) *clock {
	if wall == nil {
		wall = time.Now
	}
	return &clock{bootWallMs: wall().UnixMilli(), boot: time.Now(), wall: wall}
}

// nowMs is the time every machine input carries.
func (c *clock) nowMs() int64 {
	if mutant.On(mutant.WallClockLeases) {
		return c.wall().UnixMilli() // broken on purpose: follows wall steps
	}
	return c.bootWallMs + time.Since(c.boot).Milliseconds()
}

// untilMs is how long from now until the clock reads atMs (0 when past).
func (c *clock) untilMs(atMs int64) time.Duration {
	return time.Duration(max(atMs-c.nowMs(), 0)) * time.Millisecond
}
