package sweep

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/bench"
)

func TestParsePoints(t *testing.T) {
	got, err := ParsePoints("1, 10,1k,2.5k,10M,64Ki,1Mi,0")
	if err != nil {
		t.Fatal(err)
	}
	// In increasing order whatever the given order.
	want := []float64{0, 1, 10, 1000, 2500, 65536, 1 << 20, 10e6}
	if !slices.Equal(got, want) {
		t.Errorf("ParsePoints = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1,,2", "x", "-1", "1kk", "NaN", "Inf", "1,2,k", "1k,10,1000"} {
		if _, err := ParsePoints(bad); err == nil {
			t.Errorf("ParsePoints(%q) accepted", bad)
		}
	}
}

func TestFormatX(t *testing.T) {
	for v, want := range map[float64]string{1: "1", 1000: "1k", 10000: "10k", 1500: "1500", 1e6: "1M", 1e7: "10M", 64: "64"} {
		if got := FormatX(v); got != want {
			t.Errorf("FormatX(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestDefaultPointsAllBuild(t *testing.T) {
	base := Base{Msgs: DefaultMsgs, SizeBytes: DefaultSizeBytes}
	for _, k := range Kinds {
		for _, x := range k.DefaultPoints {
			if _, _, err := PointWorkload(k.Name, x, base); err != nil {
				t.Errorf("%s x=%v: %v", k.Name, x, err)
			}
		}
	}
}

func TestConnectionsBoundInflight(t *testing.T) {
	base := Base{Msgs: 1000, SizeBytes: 1024}
	w, _, err := PointWorkload(KindConnections, 1000, base)
	if err != nil {
		t.Fatal(err)
	}
	if w.Producers != 1000 || w.Window != 2 || w.Scenario != bench.ScenarioConfirmedPublish {
		t.Errorf("1000 connections: %+v, want 1000 producers of window 2", w)
	}
	w, _, _ = PointWorkload(KindConnections, 1, base)
	if w.Producers != 1 || w.Window != inflightTotal {
		t.Errorf("1 connection: %+v, want window %d", w, inflightTotal)
	}
	base.Scenario = bench.ScenarioEndToEnd
	w, _, _ = PointWorkload(KindConnections, 101, base)
	if w.Producers != 51 || w.Consumers != 50 || w.Window != inflightTotal/51 || w.Prefetch != inflightTotal/50 {
		t.Errorf("101 end to end: %+v", w)
	}
	w, _, _ = PointWorkload(KindConnections, 1, base)
	if w.Producers != 1 || w.Consumers != 1 {
		t.Errorf("1 end to end: %+v, want one of each", w)
	}
	// Never more producers than messages.
	w, _, _ = PointWorkload(KindConnections, 1000, Base{Msgs: 10, SizeBytes: 1024})
	if w.Producers > w.Msgs {
		t.Errorf("%d producers for %d messages", w.Producers, w.Msgs)
	}
}

func TestSizeScalesMessages(t *testing.T) {
	base := Base{Msgs: 100000, SizeBytes: 1024}
	for _, c := range []struct{ size, msgs int }{{1024, 100000}, {4096, 25000}, {1 << 20, 200}, {64, 400000}} {
		w, _, err := PointWorkload(KindSize, float64(c.size), base)
		if err != nil {
			t.Fatal(err)
		}
		if w.SizeBytes != c.size || w.Msgs != c.msgs {
			t.Errorf("size %d: %d messages of %d, want %d", c.size, w.Msgs, w.SizeBytes, c.msgs)
		}
	}
	if _, _, err := PointWorkload(KindSize, 8, base); err == nil {
		t.Error("a body smaller than the header was accepted")
	}
}

func TestShapesAndScenarios(t *testing.T) {
	base := Base{Msgs: 1000, SizeBytes: 1024}
	e2e := Base{Msgs: 1000, SizeBytes: 1024, Scenario: bench.ScenarioEndToEnd}
	if w, s, _ := PointWorkload(KindPartitions, 64, e2e); s.Partitions != 64 || w.Prefetch != 1024/64 {
		t.Errorf("partitions shape %+v, prefetch per partition %d (want 16: the total stays 1,024 per consumer)", s, w.Prefetch)
	}
	if w, _, _ := PointWorkload(KindPartitions, 4096, e2e); w.Prefetch != 1 {
		t.Errorf("prefetch per partition %d at 4,096 partitions, want at least 1", w.Prefetch)
	}
	if _, s, _ := PointWorkload(KindQueues, 10000, base); s.Queues != 10000 {
		t.Errorf("queues shape %+v", s)
	}
	if _, _, err := PointWorkload(KindQueues, 10, Base{Msgs: 1000, SizeBytes: 1024, Scenario: bench.ScenarioEndToEnd}); err == nil {
		t.Error("queues accepted end-to-end")
	}
	if w, _, _ := PointWorkload(KindPrefetch, 4096, base); w.Scenario != bench.ScenarioEndToEnd || w.Prefetch != 4096 {
		t.Errorf("prefetch %+v", w)
	}
	if w, _, _ := PointWorkload(KindConsumers, 64, base); w.Scenario != bench.ScenarioEndToEnd || w.Consumers != 64 {
		t.Errorf("consumers %+v", w)
	}
	if w, _, _ := PointWorkload(KindBacklog, 1e7, Base{Msgs: 5, SizeBytes: 128}); w.Msgs != 1e7 || w.SizeBytes != 128 {
		t.Errorf("backlog %+v", w)
	}
	w, s, _ := PointWorkload(KindIdle, 100, base)
	if w.Msgs != 100 || s.Queues != 100 {
		t.Errorf("idle: %d messages over %d queues, want one per queue", w.Msgs, s.Queues)
	}
	if _, _, err := PointWorkload("nope", 1, base); err == nil {
		t.Error("unknown kind accepted")
	}
}

func TestPerMessageArithmetic(t *testing.T) {
	// 1,000,000 messages raised RSS from 50 MiB to 150 MiB: 100 MiB / 1M.
	if got := RSSBytesPerMsg(150, 50, 1_000_000); math.Abs(got-104.8576) > 1e-9 {
		t.Errorf("RSSBytesPerMsg = %v, want 104.8576", got)
	}
	if !math.IsNaN(RSSBytesPerMsg(150, -1, 10)) || !math.IsNaN(RSSBytesPerMsg(150, 50, 0)) {
		t.Error("an unknown sample or no messages must give NaN")
	}
	if got := CPUMicrosPerMsg(0.5, 100000); got != 5 {
		t.Errorf("CPUMicrosPerMsg = %v, want 5", got)
	}
	if !math.IsNaN(CPUMicrosPerMsg(-1, 10)) {
		t.Error("unknown CPU must give NaN")
	}
}

func TestDiskSpace(t *testing.T) {
	need := BacklogDiskBytes(10_000_000, 128)
	if want := uint64(10_000_000 * (128 + recordOverheadBytes) * diskHeadroomFactor); need != want {
		t.Errorf("BacklogDiskBytes = %d, want %d", need, want)
	}
	if err := CheckDiskSpace(need, need); err != nil {
		t.Errorf("exactly enough refused: %v", err)
	}
	err := CheckDiskSpace(need, need-1)
	if err == nil || !strings.Contains(err.Error(), "GiB") {
		t.Errorf("too little accepted or unclear: %v", err)
	}
	free, err := FreeDiskBytes(t.TempDir())
	if err != nil || free == 0 {
		t.Errorf("FreeDiskBytes = %d, %v", free, err)
	}
}

func TestLineKeysKeepsOrderAndQuotes(t *testing.T) {
	s := `sweep=size x=64 err="a b=c \"q\"" status=error`
	if got, want := lineKeys(s), []string{"sweep", "x", "err", "status"}; !slices.Equal(got, want) {
		t.Errorf("lineKeys = %v, want %v", got, want)
	}
}

// sweepLines are two good points and a timed-out one, as a sweep prints them.
var sweepLines = []string{
	"sweep=connections x=1 system=fibril-tcp scenario=confirmed-publish msgs_per_s=100000 p50_ms=1.000 p99_ms=2.000 server_cpu_us_per_msg=8.000 server_rss_mb=80.000 producers=1 window=2048 status=ok",
	"sweep=connections x=10 system=fibril-tcp scenario=confirmed-publish msgs_per_s=150000 p50_ms=1.500 p99_ms=NaN server_cpu_us_per_msg=7.000 server_rss_mb=90.000 producers=10 window=204 status=ok",
	`sweep=connections x=1000 system=fibril-tcp scenario=confirmed-publish status=timeout err="context deadline exceeded"`,
}

func parsed(t *testing.T, lines []string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, l := range lines {
		f, err := bench.ParseLine(l)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

func TestBuildTable(t *testing.T) {
	kind, _ := LookupKind(KindConnections)
	table := BuildTable(kind, parsed(t, sweepLines))
	var md bytes.Buffer
	table.WriteMarkdown(&md)
	text := md.String()
	for _, want := range []string{
		"| x | status | msgs/s | p50 ms | p99 ms | server CPU µs/msg | server RSS MiB | peak RSS MiB | producers | consumers | window | setup s |",
		"| 1 | ok | 100000 | 1.000 | 2.000 | 8.000 | 80.000 | - | 1 | - | 2048 | - |",
		"| 10 | ok | 150000 | 1.500 | - | 7.000 | 90.000 | - | 10 | - | 204 | - |",
		"| 1000 | timeout | - | - | - | - | - | - | - | - | - | - |",
		"failed: x=1000: context deadline exceeded",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	var tsv bytes.Buffer
	if err := table.WriteTSV(&tsv); err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(tsv.String()), "\n")
	if len(rows) != 4 || !strings.HasPrefix(rows[0], "x\tstatus\tmsgs_per_s\t") || !strings.Contains(rows[2], "\tNaN\t") {
		t.Errorf("TSV:\n%s", tsv.String())
	}
}

func TestBuildChartSkipsFailedPoints(t *testing.T) {
	kind, _ := LookupKind(KindConnections)
	c := BuildChart(kind, parsed(t, sweepLines), "fibril-tcp")
	if len(c.Panels) != len(kind.Panels) {
		t.Fatalf("%d panels, want %d", len(c.Panels), len(kind.Panels))
	}
	if got := c.Panels[0].Series[0].Points; len(got) != 2 || got[1].X != 10 || got[1].Y != 150000 {
		t.Errorf("throughput points %v", got)
	}
	if !slices.Equal(c.X.Ticks, []float64{1, 10}) {
		t.Errorf("x ticks %v, want the good points' x values", c.X.Ticks)
	}
	if !strings.Contains(c.Note, "1k (timeout)") {
		t.Errorf("note %q does not name the failed point", c.Note)
	}
}

func TestMarginalBytesPerMsg(t *testing.T) {
	// 10 MiB more for 100k more messages: 104.9 bytes each, whatever the
	// first point's fixed costs.
	if got := MarginalBytesPerMsg(40, 50, 100_000, 200_000); math.Abs(got-104.8576) > 1e-9 {
		t.Errorf("MarginalBytesPerMsg = %v, want 104.8576", got)
	}
	for _, c := range [][4]float64{{40, 50, 100, 100}, {40, 50, 200, 100}, {math.NaN(), 50, 1, 2}, {40, -1, 1, 2}} {
		if got := MarginalBytesPerMsg(c[0], c[1], int64(c[2]), int64(c[3])); !math.IsNaN(got) {
			t.Errorf("MarginalBytesPerMsg%v = %v, want NaN", c, got)
		}
	}
}

func TestAddMarginalsSkipsFailedPoints(t *testing.T) {
	lines := []map[string]string{
		{"x": "1000", "status": "ok", "rss_mb": "40", "heap_mb": "10"},
		{"x": "11000", "status": "ok", "rss_mb": "50", "heap_mb": "15"},
		{"x": "111000", "status": "error"},
		{"x": "1111000", "status": "ok", "rss_mb": "400", "heap_mb": "200"},
	}
	addMarginals(lines)
	if _, ok := lines[0]["rss_marginal_bytes_per_msg"]; ok {
		t.Error("the first point has no previous one")
	}
	if lines[1]["rss_marginal_bytes_per_msg"] != "1048.6" || lines[1]["heap_marginal_bytes_per_msg"] != "524.3" {
		t.Errorf("second point %v", lines[1])
	}
	if _, ok := lines[3]["rss_marginal_bytes_per_msg"]; ok {
		t.Error("a point after a failed one has no marginal figure")
	}
}
