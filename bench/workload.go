package bench

// The pure parts of the workload: body layout, id blocks, pacing, percentiles.
//
// Invariants:
//   - A body is at least HeaderBytes long; the header is written in place, so
//     one body buffer per producer serves every publish.
//   - SplitBlocks covers 0..msgs-1 exactly once, in contiguous ascending blocks
//     whose sizes differ by at most one, larger blocks first.
//   - Percentiles ignore negative values (the "never measured" mark) and use
//     nearest rank, as the harness does.

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

// Scenario names, as on the command line and in scenario=.
const (
	ScenarioConfirmedPublish = "confirmed-publish"
	ScenarioEndToEnd         = "end-to-end"
	ScenarioFanout           = "fanout"
)

// HeaderBytes is the id (8 bytes) plus the send time (8 bytes).
const HeaderBytes = 16

// Workload is one scenario's parameters; every system of a run gets the same.
type Workload struct {
	Scenario       string
	Msgs           int     // published in total, all producers together
	SizeBytes      int     // body size, >= HeaderBytes
	Producers      int     // publishing connections
	Consumers      int     // competing consumers (end-to-end), readers (fanout)
	Window         int     // unconfirmed publishes per producer
	Prefetch       int     // unsettled deliveries per consumer
	RateMsgsPerSec float64 // total publish rate; 0 = as fast as the windows allow
}

// Validate checks the parameters the way the harness does.
func (w Workload) Validate() error {
	if w.SizeBytes < HeaderBytes {
		return fmt.Errorf("-size must be >= %d", HeaderBytes)
	}
	if w.Msgs < 1 || w.Producers < 1 || w.Window < 1 {
		return fmt.Errorf("-msgs, -producers and -window must be >= 1")
	}
	if w.Scenario != ScenarioConfirmedPublish && (w.Consumers < 1 || w.Prefetch < 1) {
		return fmt.Errorf("-consumers and -prefetch must be >= 1")
	}
	if w.RateMsgsPerSec < 0 || math.IsNaN(w.RateMsgsPerSec) || math.IsInf(w.RateMsgsPerSec, 0) {
		return fmt.Errorf("-rate must be a finite number >= 0")
	}
	return nil
}

// clockBase anchors MonoNs: time.Since reads the monotonic clock, so send and
// receive times stay comparable even if the wall clock is stepped.
var clockBase = time.Now()

// MonoNs is nanoseconds since process start on the monotonic clock.
func MonoNs() int64 { return int64(time.Since(clockBase)) }

// PutHeader writes id and sendNs into the first HeaderBytes of body.
func PutHeader(body []byte, id uint64, sendNs int64) {
	binary.LittleEndian.PutUint64(body[0:8], id)
	binary.LittleEndian.PutUint64(body[8:16], uint64(sendNs))
}

// ReadHeader returns the id and send time of body; ok is false if body is
// shorter than the header.
func ReadHeader(body []byte) (id uint64, sendNs int64, ok bool) {
	if len(body) < HeaderBytes {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(body[0:8]), int64(binary.LittleEndian.Uint64(body[8:16])), true
}

// NewBody returns a body of sizeBytes whose bytes after the header are the
// fixed filler for seed: a xorshift32 sequence, deterministic and not
// trivially compressible, so neither a compressing transport nor a
// deduplicating disk gets an advantage.
func NewBody(sizeBytes int, seed int) []byte {
	body := make([]byte, sizeBytes)
	x := uint32(2166136261) ^ uint32(seed)
	for i := HeaderBytes; i < len(body); i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		body[i] = byte(x)
	}
	return body
}

// Block is one producer's contiguous range of ids.
type Block struct {
	FirstID uint64
	Count   int
}

// SplitBlocks divides ids 0..msgs-1 among producers: msgs/producers each, the
// first msgs%producers producers one more.
func SplitBlocks(msgs, producers int) []Block {
	if producers < 1 || msgs < 0 {
		panic("bench: SplitBlocks needs producers >= 1 and msgs >= 0")
	}
	per, extra := msgs/producers, msgs%producers
	blocks := make([]Block, producers)
	next := uint64(0)
	for i := range blocks {
		count := per
		if i < extra {
			count++
		}
		blocks[i] = Block{FirstID: next, Count: count}
		next += uint64(count)
	}
	if next != uint64(msgs) {
		panic("bench: SplitBlocks lost ids")
	}
	return blocks
}

// DueNs is when a paced producer may send its message k: start + k*P/R
// seconds, computed as the harness does (a float interval per producer), so
// both pace identically. rate <= 0 means unpaced: every message is due at
// once.
func DueNs(startNs int64, k, producers int, rateMsgsPerSec float64) int64 {
	if rateMsgsPerSec <= 0 {
		return startNs
	}
	intervalNs := 1e9 / (rateMsgsPerSec / float64(producers))
	return startNs + int64(float64(k)*intervalNs)
}

// Latency summarises latencies in milliseconds; NaN when nothing was measured.
type Latency struct {
	P50Ms, P99Ms, MaxMs float64
}

// Percentiles computes nearest-rank p50, p99 and the maximum of the
// non-negative values of latenciesNs (negative = not measured) and returns
// how many values counted. latenciesNs is not modified.
func Percentiles(latenciesNs []int64) (Latency, int) {
	measured := make([]int64, 0, len(latenciesNs))
	for _, v := range latenciesNs {
		if v >= 0 {
			measured = append(measured, v)
		}
	}
	if len(measured) == 0 {
		return Latency{math.NaN(), math.NaN(), math.NaN()}, 0
	}
	slices.Sort(measured)
	rank := func(q float64) float64 {
		k := max(int(math.Ceil(q*float64(len(measured))))-1, 0)
		return float64(measured[k]) / 1e6
	}
	return Latency{rank(0.50), rank(0.99), float64(measured[len(measured)-1]) / 1e6}, len(measured)
}
