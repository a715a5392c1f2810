package chart

// Tick labels short enough to sit under a tick: counts with k/M/G suffixes,
// sizes in binary units, as the sweeps' own x values are written.
//
// Invariants:
//   - A label never shows more than three significant digits.
//   - Whole values print without a decimal point (1k, not 1.0k).

import (
	"math"
	"strconv"
)

// FormatCount prints 950, 1k, 2.5k, 10k, 1M, 1.5G; values below 1 keep up to
// three significant digits (0.25, 0.001).
func FormatCount(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return short(v/1e9) + "G"
	case a >= 1e6:
		return short(v/1e6) + "M"
	case a >= 1e3:
		return short(v/1e3) + "k"
	}
	return short(v)
}

// FormatBytes prints 64 B, 1 KiB, 1.5 MiB (binary units: message sizes are
// powers of two).
func FormatBytes(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1<<30:
		return short(v/(1<<30)) + " GiB"
	case a >= 1<<20:
		return short(v/(1<<20)) + " MiB"
	case a >= 1<<10:
		return short(v/(1<<10)) + " KiB"
	}
	return short(v) + " B"
}

// short prints v with at most three significant digits and no trailing zeros.
func short(v float64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
