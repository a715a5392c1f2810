package sweep

// The pure arithmetic of a sweep: -points parsing, the workload of each
// point, and the derived figures (CPU per message, bytes per unread message,
// the disk a backlog needs).
//
// Invariants:
//   - ParsePoints accepts only positive-or-zero finite numbers, each with at
//     most one suffix; a malformed list is an error, never a partial list.
//   - A point's workload always passes bench.Workload.Validate for the sizes
//     the kinds allow (producers <= msgs, windows and prefetch >= 1).
//   - Total in-flight stays bounded as connections grow: the windows (and
//     prefetch) of a connections point add up to about inflightTotal; so do
//     the prefetches of an end-to-end partitions point (Fibril's prefetch
//     is per partition, so each consumer gets Prefetch / partitions).

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fibril-go/fibril/bench"
)

// suffixes of -points values: decimal k/M/G (counts: 10k queues) and binary
// Ki/Mi/Gi (sizes: 64Ki bytes). Longest first, so "Mi" is not read as "M".
var suffixes = []struct {
	text string
	mult float64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9},
}

// ParseValue reads one x value: 64, 1.5k, 10M, 256Ki.
func ParseValue(s string) (float64, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	for _, suffix := range suffixes {
		if strings.HasSuffix(s, suffix.text) {
			s, mult = strings.TrimSuffix(s, suffix.text), suffix.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%q is not a number >= 0 (suffixes: k M G Ki Mi Gi)", s)
	}
	return math.Round(v * mult), nil
}

// ParsePoints reads a comma list of x values ("1,10,100,1k") and returns
// them in increasing order: the table and the chart's lines follow x, so a
// list given out of order would zigzag. A value given twice is refused (it
// would be measured twice and drawn as a vertical step).
func ParsePoints(s string) ([]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty -points")
	}
	var out []float64
	for _, field := range strings.Split(s, ",") {
		v, err := ParseValue(field)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return SortPoints(out)
}

// SortPoints returns points in increasing order (a copy), or an error when
// one is given twice: every caller of Run gets the order the table, the
// chart and the marginal figures assume.
func SortPoints(points []float64) ([]float64, error) {
	out := slices.Clone(points)
	slices.Sort(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			return nil, fmt.Errorf("%s is given twice", FormatX(out[i]))
		}
	}
	return out, nil
}

// FormatX prints an x value the way -points takes it back (10000 -> 10k):
// exact only, so 1500 stays 1500 rather than 1.5k.
func FormatX(v float64) string {
	for _, s := range []struct {
		text string
		mult float64
	}{{"M", 1e6}, {"k", 1e3}} {
		if v >= s.mult && math.Mod(v, s.mult) == 0 {
			return strconv.FormatFloat(v/s.mult, 'f', -1, 64) + s.text
		}
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// inflightTotal is the default harness's in-flight budget (2 producers x
// window 1024): a connections point divides it among its connections, so N
// connections measure the cost of connections, not of N times the
// unconfirmed messages.
const inflightTotal = 2048

// Shape is what a point asks of the broker besides the workload.
type Shape struct {
	Partitions int
	Queues     int
}

// Base is a sweep's workload before a kind varies it: the sweep's -msgs,
// -size and -scenario.
type Base struct {
	Msgs      int
	SizeBytes int
	Scenario  string
}

// sizeBudgetBytes is how many bytes a size point moves: Base.Msgs messages of
// 1 KiB, so every size point moves about as many bytes as the 1 KiB point.
func sizeMsgs(base Base, sizeBytes int) int {
	budgetBytes := float64(base.Msgs) * 1024
	return int(min(max(math.Round(budgetBytes/float64(sizeBytes)), sizeMsgsMin), float64(max(base.Msgs*4, sizeMsgsMin))))
}

// sizeMsgsMin keeps enough messages at 1 MiB for a p99 worth printing.
const sizeMsgsMin = 200

// PointWorkload is the workload of point x of kind (not backlog or idle's
// measurement, only their publishing part).
func PointWorkload(kind string, x float64, base Base) (bench.Workload, Shape, error) {
	n := int(x)
	w := bench.Workload{Scenario: base.Scenario, Msgs: base.Msgs, SizeBytes: base.SizeBytes,
		Producers: 2, Consumers: 2, Window: 1024, Prefetch: 1024}
	if w.Scenario == "" {
		w.Scenario = bench.ScenarioConfirmedPublish
	}
	var shape Shape
	switch kind {
	case KindConnections:
		if n < 1 {
			return w, shape, errors.New("connections must be >= 1")
		}
		if w.Scenario == bench.ScenarioEndToEnd {
			// Half the connections publish, the other half consume; one
			// connection alone is one of each.
			w.Producers = max((n+1)/2, 1)
			w.Consumers = max(n-w.Producers, 1)
		} else {
			w.Producers = n
		}
		w.Msgs = max(w.Msgs, w.Producers)
		w.Window = max(inflightTotal/w.Producers, 1)
		w.Prefetch = max(inflightTotal/w.Consumers, 1)
	case KindPartitions:
		if n < 1 {
			return w, shape, errors.New("partitions must be >= 1")
		}
		shape.Partitions = n
		// A consumer subscribes to every partition, each with its own
		// prefetch: undivided, 256 partitions would hold 256 times the
		// deliveries in flight of one, and the curve would measure that.
		w.Prefetch = max(w.Prefetch/n, 1)
	case KindQueues:
		if n < 1 {
			return w, shape, errors.New("queues must be >= 1")
		}
		if w.Scenario != bench.ScenarioConfirmedPublish {
			return w, shape, errors.New("the queues sweep runs confirmed-publish only")
		}
		shape.Queues = n
	case KindSize:
		if n < bench.HeaderBytes {
			return w, shape, fmt.Errorf("size must be >= %d", bench.HeaderBytes)
		}
		w.SizeBytes = n
		w.Msgs = sizeMsgs(base, n)
	case KindConsumers:
		if n < 1 {
			return w, shape, errors.New("consumers must be >= 1")
		}
		w.Scenario, w.Consumers = bench.ScenarioEndToEnd, n
	case KindPrefetch:
		if n < 1 {
			return w, shape, errors.New("prefetch must be >= 1")
		}
		w.Scenario, w.Prefetch = bench.ScenarioEndToEnd, n
	case KindBacklog:
		if n < 1 {
			return w, shape, errors.New("backlog must be >= 1")
		}
		w.Scenario, w.Msgs = bench.ScenarioConfirmedPublish, n
	case KindIdle:
		// One message per idle queue (id mod queues): every queue has a
		// log with a record, as a real idle queue would.
		w.Scenario, w.Msgs, shape.Queues = bench.ScenarioConfirmedPublish, max(n, 1), max(n, 1)
	default:
		return w, shape, fmt.Errorf("unknown sweep %q", kind)
	}
	w.Producers = min(w.Producers, max(w.Msgs, 1))
	if w.Scenario == bench.ScenarioConfirmedPublish {
		w.Consumers, w.Prefetch = 0, 0
	}
	return w, shape, w.Validate()
}

// CPUMicrosPerMsg is server CPU per message counted, or NaN.
func CPUMicrosPerMsg(serverCPUSeconds float64, msgs int64) float64 {
	if msgs <= 0 || serverCPUSeconds < 0 {
		return math.NaN()
	}
	return serverCPUSeconds * 1e6 / float64(msgs)
}

// RSSBytesPerMsg is what each unread message adds to the broker's resident
// memory: (RSS with the backlog - RSS of the same broker idle before it) /
// messages. Counting the whole RSS would charge the runtime's baseline to
// the messages and make small backlogs look expensive.
func RSSBytesPerMsg(rssMB, rssIdleMB float64, msgs int64) float64 {
	if msgs <= 0 || rssMB < 0 || rssIdleMB < 0 {
		return math.NaN()
	}
	return (rssMB - rssIdleMB) * (1 << 20) / float64(msgs)
}

// MarginalBytesPerMsg is what each message added between two backlog
// points: (MiB at this point - MiB at the previous) / (messages here -
// messages there). Unlike RSSBytesPerMsg it charges nothing fixed to the
// messages (the buffers any traffic leaves behind, the GC's headroom over a
// small heap), so it is the slope the curve tends to. NaN when either
// figure is missing or the counts do not grow.
func MarginalBytesPerMsg(prevMB, curMB float64, prevMsgs, curMsgs int64) float64 {
	if curMsgs <= prevMsgs || prevMsgs < 0 || math.IsNaN(prevMB) || math.IsNaN(curMB) || prevMB < 0 || curMB < 0 {
		return math.NaN()
	}
	return (curMB - prevMB) * (1 << 20) / float64(curMsgs-prevMsgs)
}

// recordOverheadBytes is an estimate of what a stored message costs on disk
// beyond its body: the record header, id, timestamps and the WAL's framing
// and CRC. Generous on purpose: the check must refuse too much, not too
// little.
const recordOverheadBytes = 128

// diskHeadroomFactor: the WAL and the compacted storage may both hold a
// record for a while, and a full disk mid-sweep would hurt the other work
// on this machine, so a backlog needs twice its estimate free.
const diskHeadroomFactor = 2

// BacklogDiskBytes is the free disk a backlog of msgs messages of sizeBytes
// needs.
func BacklogDiskBytes(msgs, sizeBytes int) uint64 {
	return uint64(msgs) * uint64(sizeBytes+recordOverheadBytes) * diskHeadroomFactor
}

// CheckDiskSpace refuses a point that needs more than freeBytes.
func CheckDiskSpace(needBytes, freeBytes uint64) error {
	if needBytes > freeBytes {
		return fmt.Errorf("needs about %.1f GiB free for its data, the disk has %.1f GiB",
			float64(needBytes)/(1<<30), float64(freeBytes)/(1<<30))
	}
	return nil
}
