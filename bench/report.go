package bench

// The comparison report: result lines of every system (ours and the
// harness's) in, one markdown table and one ratio line per scenario, Fibril
// transport and peer out.
//
// Invariants:
//   - A ratio is above 1 when Fibril does better: throughput is Fibril over
//     peer, the paced row's p99 latency is peer over Fibril.
//   - A ratio exists only between two status=ok lines of the same scenario,
//     rate and run; otherwise it is NaN, never a guess.
//   - With several runs, a ratio line carries the median of the per-run
//     ratios (each run compares systems measured minutes apart, not hours).

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Peers the ratios compare against. Fanout has no quorum queue flavour: its
// RabbitMQ peer is the stream queue.
const (
	PeerNATS           = "nats-js"
	PeerRabbitQuorum   = "rabbitmq-quorum"
	PeerRabbitStream   = "rabbitmq-stream"
	fibrilSystemPrefix = "fibril-"
)

// Result is one parsed result line.
type Result map[string]string

// ParseResults reads every line starting with "system=" and skips the rest
// (logs, blank lines).
func ParseResults(text string) ([]Result, error) {
	var results []Result
	for _, raw := range strings.Split(text, "\n") {
		if !strings.HasPrefix(raw, "system=") {
			continue
		}
		fields, err := ParseLine(raw)
		if err != nil {
			return nil, err
		}
		results = append(results, fields)
	}
	return results, nil
}

// ScenarioKey names a row's scenario as the ratio lines do: the paced
// end-to-end is "end-to-end@5000/s".
func (r Result) ScenarioKey() string {
	if rate := r["rate"]; rate != "" {
		return r["scenario"] + "@" + rate + "/s"
	}
	return r["scenario"]
}

func (r Result) paced() bool { return r["rate"] != "" }

func (r Result) number(key string) float64 {
	v, err := strconv.ParseFloat(r[key], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// PeerFor is the peer a ratio column compares with for scenario.
func PeerFor(scenario, column string) string {
	if column == PeerRabbitQuorum && scenario == ScenarioFanout {
		return PeerRabbitStream
	}
	return column
}

// Ratio compares a Fibril result with a peer's: throughput Fibril/peer, or for
// a paced run p99 peer/Fibril. NaN unless both ran cleanly.
func Ratio(fibril, peer Result) float64 {
	if fibril == nil || peer == nil || fibril["status"] != StatusOK || peer["status"] != StatusOK {
		return math.NaN()
	}
	if fibril.paced() {
		return peer.number("p99_ms") / fibril.number("p99_ms")
	}
	return fibril.number("msgs_per_s") / peer.number("msgs_per_s")
}

func formatRatio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "NaN"
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

func median(xs []float64) float64 {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// find returns the result of system for scenario key and run, or nil.
func find(results []Result, key, run, system string) Result {
	for _, r := range results {
		if r.ScenarioKey() == key && r["run"] == run && r["system"] == system {
			return r
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteReport writes the markdown table of every result, with the ratio
// columns filled on Fibril's rows, then the ratio lines.
func WriteReport(w io.Writer, results []Result) {
	columns := []string{PeerNATS, PeerRabbitQuorum}
	fmt.Fprintln(w, "| scenario | system | run | msgs | secs | msgs/s | p50 ms | p99 ms | confirm p50/p99 ms | missing/dups/left "+
		"| server CPU s | server CPU us/msg | server RSS MB | client CPU s | status | fibril/nats-js | fibril/rabbitmq-quorum |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		key := r.ScenarioKey()
		msgs := r["msgs"]
		p50, p99 := orDash(r["p50_ms"]), orDash(r["p99_ms"])
		if r["scenario"] == ScenarioFanout {
			msgs += " x " + r["consumers"]
			p50, p99 = "-", "-"
		}
		confirm := "-"
		if r["scenario"] == ScenarioConfirmedPublish {
			confirm = "(same)"
		} else if r["confirm_p50_ms"] != "" {
			confirm = r["confirm_p50_ms"] + " / " + r["confirm_p99_ms"]
		}
		checks := "-"
		if r["missing"] != "" {
			checks = r["missing"] + " / " + r["dups"] + " / " + orDash(r["left"])
		}
		// us/msg over what the scenario counts: confirmed messages, distinct
		// ids received, or records read.
		perMsg := "-"
		counted := r.number("confirmed")
		if math.IsNaN(counted) {
			counted = r.number("unique")
		}
		if math.IsNaN(counted) {
			counted = r.number("records")
		}
		if cpu := r.number("server_cpu_s"); !math.IsNaN(cpu) && counted > 0 {
			perMsg = strconv.FormatFloat(cpu*1e6/counted, 'f', 1, 64)
		}
		status := r["status"]
		if r["err"] != "" {
			status += ": " + r["err"]
		}
		ratios := []string{"-", "-"}
		if strings.HasPrefix(r["system"], fibrilSystemPrefix) {
			for i, column := range columns {
				ratios[i] = formatRatio(Ratio(r, find(results, key, r["run"], PeerFor(r["scenario"], column))))
			}
		}
		label := key
		if r.paced() {
			label = r["scenario"] + " @" + r["rate"] + "/s"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			label, r["system"], r["run"], msgs, orDash(r["secs"]), orDash(r["msgs_per_s"]), p50, p99, confirm, checks,
			orDash(r["server_cpu_s"]), perMsg, orDash(r["server_rss_mb"]), orDash(r["client_cpu_s"]), status, ratios[0], ratios[1])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratios above 1 favour Fibril: msgs/s Fibril over peer; for the paced (@rate) rows, p99 latency peer over Fibril. "+
		"Fanout compares with rabbitmq-stream in the RabbitMQ column. NaN: one side did not finish with status=ok.")
	fmt.Fprintln(w)
	for _, line := range RatioLines(results) {
		fmt.Fprintln(w, line)
	}
}

// RatioLines gives one line per scenario, Fibril system and peer, in the
// order the results appeared: "ratio scenario=... system=... vs=... value=...",
// the value being the median over runs.
func RatioLines(results []Result) []string {
	type row struct{ key, scenario, system string }
	var rows []row
	seen := map[row]bool{}
	var runs []string
	for _, r := range results {
		if !slices.Contains(runs, r["run"]) {
			runs = append(runs, r["run"])
		}
		if !strings.HasPrefix(r["system"], fibrilSystemPrefix) {
			continue
		}
		k := row{r.ScenarioKey(), r["scenario"], r["system"]}
		if !seen[k] {
			seen[k] = true
			rows = append(rows, k)
		}
	}
	var lines []string
	for _, k := range rows {
		for _, column := range []string{PeerNATS, PeerRabbitQuorum} {
			peer := PeerFor(k.scenario, column)
			var perRun []float64
			for _, run := range runs {
				if f := find(results, k.key, run, k.system); f != nil {
					perRun = append(perRun, Ratio(f, find(results, k.key, run, peer)))
				}
			}
			lines = append(lines, fmt.Sprintf("ratio scenario=%s system=%s vs=%s value=%s", k.key, k.system, peer, formatRatio(median(perRun))))
		}
	}
	return lines
}
