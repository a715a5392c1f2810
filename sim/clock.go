package sim

// Simulated clocks. Each node and client reads its own clock, derived from
// the simulator's true time. Invariants:
//   - the core only ever sees time from here (NowMs in every input);
//   - a clock is the true time plus an offset, a drift in parts per million
//     and the sum of the jumps injected so far; jumps may go backwards, and
//     the core must cope (it keeps the largest NowMs it has seen);
//   - wakeAfterMs inverts the clock, so a wake-up asked for at clock time T
//     happens at the first true millisecond at which the clock reads >= T.

// clockEpochMs is the true time 0 of every run as Unix ms (2024-01-01), so the
// core sees realistic timestamps.
const clockEpochMs int64 = 1_704_067_200_000

// Clock is one machine's wall clock.
type Clock struct {
	offsetMs int64 // initial offset from true time
	driftPpm int64 // rate error: +1000 gains 1 ms per true second
	jumpMs   int64 // sum of injected jumps
}

// NowMs is the clock's reading at true time simMs.
func (c *Clock) NowMs(simMs int64) int64 {
	return clockEpochMs + simMs + simMs*c.driftPpm/1_000_000 + c.offsetMs + c.jumpMs
}

// Jump moves the clock by deltaMs (either way).
func (c *Clock) Jump(deltaMs int64) { c.jumpMs += deltaMs }

// wakeAfterMs returns how many true milliseconds after simMs the clock first
// reads at least targetMs (0 when it already does).
func (c *Clock) wakeAfterMs(simMs, targetMs int64) int64 {
	behindMs := targetMs - c.NowMs(simMs)
	if behindMs <= 0 {
		return 0
	}
	// True time runs (1e6 + drift) / 1e6 slower or faster than the clock.
	delayMs := behindMs * 1_000_000 / (1_000_000 + c.driftPpm)
	if delayMs < 1 {
		delayMs = 1
	}
	for c.NowMs(simMs+delayMs) < targetMs { // integer rounding: step up
		delayMs++
	}
	return delayMs
}

func drawClock(rng *Rand, f *Faults) Clock {
	return Clock{
		offsetMs: rng.RangeInt64(-f.ClockOffsetMaxMs, f.ClockOffsetMaxMs),
		driftPpm: rng.RangeInt64(-f.ClockDriftMaxPpm, f.ClockDriftMaxPpm),
	}
}
