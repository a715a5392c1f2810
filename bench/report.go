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
//   - Fibril is compared with every peer that has a line for the scenario
//     (and rate) in the results, in any run: one table column per peer
//     present anywhere, one ratio line per scenario, Fibril system and peer
//     present for that scenario. A peer that never ran the scenario (the
//     RabbitMQ stream queue runs only fanout, the quorum and classic queues
//     never do) shows "-" and has no ratio line.
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

// The harness's peer systems, in the order of the ratio columns. A peer not
// listed here still gets a column, after these, in order of appearance.
const (
	PeerNATS           = "nats-js"
	PeerNATSSync       = "nats-js-sync"
	PeerRabbitQuorum   = "rabbitmq-quorum"
	PeerRabbitClassic  = "rabbitmq-classic"
	PeerRabbitStream   = "rabbitmq-stream"
	PeerRedisStreams   = "redis-streams"
	fibrilSystemPrefix = "fibril-"
)

// KnownPeers is the column order of the peers the harness runs.
var KnownPeers = []string{PeerNATS, PeerNATSSync, PeerRabbitQuorum, PeerRabbitClassic, PeerRabbitStream, PeerRedisStreams}

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

func isFibril(system string) bool { return strings.HasPrefix(system, fibrilSystemPrefix) }

// Peers lists every non-Fibril system in results: the known peers first, in
// KnownPeers order, then any other in order of appearance.
func Peers(results []Result) []string {
	var present, others []string
	for _, r := range results {
		sys := r["system"]
		if sys == "" || isFibril(sys) || slices.Contains(present, sys) {
			continue
		}
		present = append(present, sys)
		if !slices.Contains(KnownPeers, sys) {
			others = append(others, sys)
		}
	}
	var peers []string
	for _, p := range KnownPeers {
		if slices.Contains(present, p) {
			peers = append(peers, p)
		}
	}
	return append(peers, others...)
}

// ranScenario says whether system has a line for scenario key in any run.
func ranScenario(results []Result, key, system string) bool {
	for _, r := range results {
		if r["system"] == system && r.ScenarioKey() == key {
			return true
		}
	}
	return false
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
	peers := Peers(results)
	header := "| scenario | system | run | msgs | secs | msgs/s | p50 ms | p99 ms | confirm p50/p99 ms | missing/dups/left " +
		"| server CPU s | server CPU us/msg | server RSS MB | client CPU s | status |"
	rule := strings.Repeat("|---", 15) + "|"
	for _, peer := range peers {
		header += " fibril/" + peer + " |"
		rule += "---|"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, rule)
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
		var ratios strings.Builder
		for _, peer := range peers {
			ratio := "-"
			if isFibril(r["system"]) && ranScenario(results, key, peer) {
				ratio = formatRatio(Ratio(r, find(results, key, r["run"], peer)))
			}
			ratios.WriteString(" " + ratio + " |")
		}
		label := key
		if r.paced() {
			label = r["scenario"] + " @" + r["rate"] + "/s"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |%s\n",
			label, r["system"], r["run"], msgs, orDash(r["secs"]), orDash(r["msgs_per_s"]), p50, p99, confirm, checks,
			orDash(r["server_cpu_s"]), perMsg, orDash(r["server_rss_mb"]), orDash(r["client_cpu_s"]), status, ratios.String())
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratios above 1 favour Fibril: msgs/s Fibril over peer; for the paced (@rate) rows, p99 latency peer over Fibril. "+
		"NaN: one side did not finish with status=ok (or has no line in that run). "+
		"-: that peer did not run the scenario (rabbitmq-stream runs only fanout, rabbitmq-quorum and -classic only the queue scenarios).")
	fmt.Fprintln(w)
	for _, line := range RatioLines(results) {
		fmt.Fprintln(w, line)
	}
}

// RatioLines gives one line per scenario, Fibril system and peer that ran the
// scenario, in the order the results appeared (peers in Peers order):
// "ratio scenario=... system=... vs=... value=...", the value being the
// median over runs.
func RatioLines(results []Result) []string {
	type row struct{ key, system string }
	var rows []row
	seen := map[row]bool{}
	var runs []string
	for _, r := range results {
		if !slices.Contains(runs, r["run"]) {
			runs = append(runs, r["run"])
		}
		if !isFibril(r["system"]) {
			continue
		}
		k := row{r.ScenarioKey(), r["system"]}
		if !seen[k] {
			seen[k] = true
			rows = append(rows, k)
		}
	}
	peers := Peers(results)
	var lines []string
	for _, k := range rows {
		for _, peer := range peers {
			if !ranScenario(results, k.key, peer) {
				continue
			}
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
