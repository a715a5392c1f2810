package sim

import (
	"testing"

	"pgregory.net/rapid"
)

func TestRandIsDeterministicAndBounded(t *testing.T) {
	a, b := NewRand(42), NewRand(42)
	for i := 0; i < 1000; i++ {
		if a.Uint64() != b.Uint64() {
			t.Fatal("equal seeds must give equal streams")
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		r := NewRand(rapid.Uint64().Draw(t, "seed"))
		lo := rapid.Int64Range(-1000, 1000).Draw(t, "lo")
		hi := lo + rapid.Int64Range(0, 1000).Draw(t, "span")
		if v := r.RangeInt64(lo, hi); v < lo || v > hi {
			t.Fatalf("RangeInt64(%d, %d) = %d", lo, hi, v)
		}
		n := rapid.IntRange(1, 100).Draw(t, "n")
		if v := r.Intn(n); v < 0 || v >= n {
			t.Fatalf("Intn(%d) = %d", n, v)
		}
		if f := r.Float64(); f < 0 || f >= 1 {
			t.Fatalf("Float64() = %v", f)
		}
	})
}

// Events run in (time, scheduling order), whatever order they were pushed in.
func TestEventQueueOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var q eventQueue
		type stamp struct {
			atMs int64
			seq  int
		}
		var ran []stamp
		n := rapid.IntRange(1, 200).Draw(t, "n")
		for i := 0; i < n; i++ {
			at, seq := rapid.Int64Range(0, 20).Draw(t, "at"), i
			q.push(at, func() { ran = append(ran, stamp{at, seq}) })
		}
		for q.len() > 0 {
			q.pop().run()
		}
		for i := 1; i < len(ran); i++ {
			prev, cur := ran[i-1], ran[i]
			if cur.atMs < prev.atMs || cur.atMs == prev.atMs && cur.seq < prev.seq {
				t.Fatalf("event %v ran after %v", cur, prev)
			}
		}
	})
}

// Pushes between pops, as the run makes them (mostly for the millisecond
// being run, which take the queue's FIFO path, some for earlier or later
// ones), still pop in (time, scheduling order) among the events queued.
func TestEventQueueOrderInterleaved(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var q eventQueue
		type stamp struct {
			atMs int64
			seq  int
		}
		var pending []stamp // the reference: what is queued
		var last stamp
		n := rapid.IntRange(1, 300).Draw(t, "n")
		for i := 0; i < n; i++ {
			if rapid.Bool().Draw(t, "pop") && q.len() > 0 {
				got := q.pop()
				best := 0
				for j, s := range pending {
					if s.atMs < pending[best].atMs || s.atMs == pending[best].atMs && s.seq < pending[best].seq {
						best = j
					}
				}
				got.run()
				if last != pending[best] {
					t.Fatalf("popped %v, want %v", last, pending[best])
				}
				pending = append(pending[:best], pending[best+1:]...)
				continue
			}
			at := last.atMs + rapid.Int64Range(-2, 3).Draw(t, "ahead")
			if rapid.Bool().Draw(t, "now") {
				at = last.atMs
			}
			s := stamp{at, i + 1}
			pending = append(pending, s)
			q.push(at, func() { last = s })
		}
		if q.len() != len(pending) {
			t.Fatalf("queue holds %d events, want %d", q.len(), len(pending))
		}
	})
}

// A wake-up asked for at clock time T fires at the first true millisecond
// at which the clock reads at least T.
func TestClockWakeAfterInvertsTheClock(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Clock{offsetMs: rapid.Int64Range(-5000, 5000).Draw(t, "offset"),
			driftPpm: rapid.Int64Range(-100_000, 100_000).Draw(t, "drift")}
		c.Jump(rapid.Int64Range(-10_000, 10_000).Draw(t, "jump"))
		now := rapid.Int64Range(0, 1_000_000).Draw(t, "now")
		target := c.NowMs(now) + rapid.Int64Range(-100, 100_000).Draw(t, "ahead")
		d := c.wakeAfterMs(now, target)
		if d < 0 || c.NowMs(now+d) < target {
			t.Fatalf("woke after %dms at clock %d, before %d", d, c.NowMs(now+d), target)
		}
		if d > 0 && c.NowMs(now+d-1) >= target {
			t.Fatalf("woke after %dms, but the clock read %d >= %d a millisecond earlier", d, c.NowMs(now+d-1), target)
		}
	})
}
