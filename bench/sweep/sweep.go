// Package sweep runs `fibril bench sweep <kind>`: one workload per x value,
// each against a broker of its own (started fresh, stopped, its data removed),
// printing each point's result line as it ends, then a markdown table, and
// writing <kind>.tsv and <kind>.svg.
//
// Invariants:
//   - A point never sees another point's broker, data or queues: each point
//     starts its own `fibril serve` on a fresh data dir and fresh ports.
//   - Every point prints exactly one line, starting with sweep= and x= and
//     ending with status= (then err= when it failed); a failed point does not
//     stop the sweep.
//   - The workload itself runs through package bench's drivers (bench.Run with
//     bench.Fibril), so a sweep's figures mean what `fibril bench`'s mean.
//   - The trust files the brokers publish for loopback clients go under the
//     sweep's own work dir (XDG_CONFIG_HOME), which is removed at the end.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fibril-go/fibril/bench"
	"github.com/fibril-go/fibril/bench/chart"
	"github.com/fibril-go/fibril/client"
)

// Options are one sweep's command line.
type Options struct {
	Kind      string
	Bin       string // the fibril executable to start as the broker
	Transport string // client.TransportTCP or client.TransportQUIC
	Points    []float64
	Base      Base
	Timeout   time.Duration // per point, broker start and stop included
	OutDir    string
	// WorkDir holds the data dirs; "" = a new directory under os.TempDir.
	WorkDir string
	// IdleSettle and IdleSample are the idle kind's wait before sampling and
	// its sampling window.
	IdleSettle, IdleSample time.Duration
	// RestartKill: the backlog kind's restart is a SIGKILL (no shutdown
	// code, no clean-close mark, so recovery takes the crash path) rather
	// than a SIGTERM and a clean stop.
	RestartKill    bool
	Stdout, Stderr io.Writer
}

// Defaults of the per-kind knobs.
const (
	DefaultMsgs          = 100000
	DefaultSizeBytes     = 1024
	DefaultBacklogSize   = 128
	DefaultIdleSettle    = 10 * time.Second
	DefaultIdleSample    = 10 * time.Second
	DefaultPointTimeout  = 5 * time.Minute
	brokerStartTimeout   = 60 * time.Second
	firstDeliveryTimeout = 60 * time.Second
)

// Run runs the sweep and reports whether every point succeeded; err is for
// what stops the whole sweep (bad options, an unwritable --out).
func Run(o Options) (allOK bool, err error) {
	kind, ok := LookupKind(o.Kind)
	if !ok {
		return false, fmt.Errorf("unknown sweep %q (%s)", o.Kind, KindNames())
	}
	if len(o.Points) == 0 {
		o.Points = kind.DefaultPoints
	}
	if o.Transport != client.TransportTCP && o.Transport != client.TransportQUIC {
		return false, fmt.Errorf("unknown transport %q (quic or tcp)", o.Transport)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultPointTimeout
	}
	if o.IdleSettle < 0 || o.IdleSample <= 0 {
		o.IdleSettle, o.IdleSample = DefaultIdleSettle, DefaultIdleSample
	}
	sorted, err := SortPoints(o.Points)
	if err != nil {
		return false, fmt.Errorf("points: %w", err)
	}
	o.Points = sorted
	for _, x := range o.Points {
		// Check every point's workload before the first broker starts.
		if _, _, err := PointWorkload(kind.Name, x, o.Base); err != nil {
			return false, fmt.Errorf("x=%s: %w", FormatX(x), err)
		}
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return false, err
	}
	workDir := o.WorkDir
	if workDir == "" {
		if workDir, err = os.MkdirTemp("", "fibril-sweep-"); err != nil {
			return false, err
		}
		defer os.RemoveAll(workDir)
	}
	restoreEnv := setEnv("XDG_CONFIG_HOME", filepath.Join(workDir, "config"))
	defer restoreEnv()
	stopInterrupts := onInterrupt(o.Stderr, workDir, o.WorkDir == "")
	defer stopInterrupts()
	var need uint64
	switch kind.Name {
	case KindConnections:
		need = uint64(2*max(slicesMax(o.Points), 1)) + 512
	case KindQueues, KindIdle:
		// The broker (which inherits the limit) holds two descriptors per
		// loaded partition and sizes its partition budget from the limit:
		// below this, the large points are refused (queue declares fail).
		need = uint64(3*max(slicesMax(o.Points), 1)) + 4096
	}
	if need > 0 {
		if got, err := RaiseOpenFiles(need); err != nil || got < need {
			fmt.Fprintf(o.Stderr, "fibril bench sweep: open files limit %d, want %d (%v): large points may fail\n", got, need, err)
		}
	}
	var lines []map[string]string
	allOK = true
	for i, x := range o.Points {
		line := runPoint(kind, x, o, filepath.Join(workDir, fmt.Sprintf("point-%d", i)))
		fmt.Fprintln(o.Stdout, line)
		fields, err := bench.ParseLine(line.String())
		if err != nil {
			return false, fmt.Errorf("reading back the line of x=%s: %w", FormatX(x), err)
		}
		if fields["status"] != bench.StatusOK {
			allOK = false
		}
		lines = append(lines, fields)
	}
	if kind.Name == KindBacklog {
		addMarginals(lines)
	}
	table := BuildTable(kind, lines)
	fmt.Fprintln(o.Stdout)
	table.WriteMarkdown(o.Stdout)
	if err := writeFile(filepath.Join(o.OutDir, kind.Name+".tsv"), table.WriteTSV); err != nil {
		return false, err
	}
	c := BuildChart(kind, lines, bench.System(o.Transport))
	if err := writeFile(filepath.Join(o.OutDir, kind.Name+".svg"), func(w io.Writer) error { return chart.Write(w, c) }); err != nil {
		return false, err
	}
	return allOK, nil
}

// addMarginals adds to each backlog point after the first what each message
// cost between it and the point before (points run in increasing order).
// Only the table, TSV and chart get them: the point's own line was printed
// before the next point ran.
func addMarginals(lines []map[string]string) {
	for i := 1; i < len(lines); i++ {
		prev, cur := lines[i-1], lines[i]
		if prev["status"] != bench.StatusOK || cur["status"] != bench.StatusOK {
			continue
		}
		prevMsgs, curMsgs := int64(number(prev, "x")), int64(number(cur, "x"))
		for _, k := range [][2]string{{"rss_mb", "rss_marginal_bytes_per_msg"}, {"heap_mb", "heap_marginal_bytes_per_msg"}} {
			v := MarginalBytesPerMsg(number(prev, k[0]), number(cur, k[0]), prevMsgs, curMsgs)
			if !math.IsNaN(v) {
				cur[k[1]] = strconv.FormatFloat(v, 'f', 1, 64)
			}
		}
	}
}

func slicesMax(values []float64) float64 {
	m := math.Inf(-1)
	for _, v := range values {
		m = math.Max(m, v)
	}
	return m
}

// setEnv sets key for the sweep's duration and returns the undo.
func setEnv(key, value string) func() {
	old, had := os.LookupEnv(key)
	os.Setenv(key, value)
	return func() {
		if had {
			os.Setenv(key, old)
		} else {
			os.Unsetenv(key)
		}
	}
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pointLine starts a point's line: sweep and x first, then the workload's
// fields as bench prints them.
func pointLine(kind string, x float64) *bench.Line {
	line := bench.NewLine()
	line.Set("sweep", kind)
	line.Set("x", FormatXPlain(x))
	return line
}

// FormatXPlain prints x as a plain number for x= (tables and TSV want it
// numeric; 1e+07 would not sort with the others in a spreadsheet).
func FormatXPlain(x float64) string { return fmt.Sprintf("%.0f", x) }

// copyFields copies every field of from onto to, in from's order, except
// status and err, which it returns: the caller adds its own figures and then
// ends the line with setStatus.
func copyFields(to *bench.Line, from *bench.Line) (status, errText string) {
	text := from.String()
	fields, err := bench.ParseLine(text)
	if err != nil {
		return bench.StatusError, "unreadable result line: " + err.Error()
	}
	for _, key := range lineKeys(text) {
		if key != "status" && key != "err" {
			to.Set(key, fields[key])
		}
	}
	return fields["status"], fields["err"]
}

// setStatus ends line with status (and err when not ok).
func setStatus(line *bench.Line, status, errText string) {
	line.Set("status", status)
	if status != bench.StatusOK && errText != "" {
		line.Set("err", errText)
	}
}

// lineKeys lists the keys of a formatted line in order (bench.ParseLine
// returns a map, and the order of the workload's fields is worth keeping).
func lineKeys(s string) []string {
	var keys []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimLeft(s, " ") {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			break
		}
		keys = append(keys, s[:eq])
		rest := s[eq+1:]
		if quoted, err := strconv.QuotedPrefix(rest); err == nil && strings.HasPrefix(rest, `"`) {
			rest = rest[len(quoted):]
		} else if sp := strings.IndexByte(rest, ' '); sp >= 0 {
			rest = rest[sp:]
		} else {
			rest = ""
		}
		s = rest
	}
	return keys
}

// failLine ends line with a failed status: timeout for a deadline, error
// otherwise.
func failLine(line *bench.Line, err error) {
	status := bench.StatusError
	if errors.Is(err, context.DeadlineExceeded) {
		status = bench.StatusTimeout
	}
	line.Set("status", status)
	line.Set("err", err.Error())
}

// runPoint runs one point on its own broker and returns its line.
// liveBrokers are the broker processes this process runs now, for
// onInterrupt.
var liveBrokers struct {
	sync.Mutex
	set map[*os.Process]struct{}
}

func trackBroker(p *os.Process, live bool) {
	liveBrokers.Lock()
	defer liveBrokers.Unlock()
	if liveBrokers.set == nil {
		liveBrokers.set = map[*os.Process]struct{}{}
	}
	if live {
		liveBrokers.set[p] = struct{}{}
	} else {
		delete(liveBrokers.set, p)
	}
}

// onInterrupt makes Ctrl-C or a SIGTERM to the sweep stop its brokers
// (SIGKILL: the data is thrown away) and remove the work dir, which holds
// gigabytes after a large backlog point, before exiting 130. A SIGKILL to
// the sweep cannot be caught: the brokers die with it (Pdeathsig), the
// work dir stays. The returned func ends the watch.
func onInterrupt(stderr io.Writer, workDir string, removeWorkDir bool) (stop func()) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-signals:
			fmt.Fprintf(stderr, "fibril bench sweep: %s: stopping the brokers and removing %s\n", sig, workDir)
			liveBrokers.Lock()
			for p := range liveBrokers.set {
				_ = p.Kill()
			}
			liveBrokers.Unlock()
			if removeWorkDir {
				_ = os.RemoveAll(workDir)
			}
			os.Exit(130)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(signals)
		close(done)
	}
}

func runPoint(kind Kind, x float64, o Options, dataDir string) *bench.Line {
	line := pointLine(kind.Name, x)
	w, shape, err := PointWorkload(kind.Name, x, o.Base)
	if err != nil {
		failLine(line, err)
		return line
	}
	if kind.Name == KindBacklog {
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			failLine(line, err)
			return line
		}
		free, err := FreeDiskBytes(dataDir)
		if err == nil {
			err = CheckDiskSpace(BacklogDiskBytes(w.Msgs, w.SizeBytes), free)
		}
		if err != nil {
			line.Set("system", bench.System(o.Transport))
			failLine(line, fmt.Errorf("refused: %w", err))
			return line
		}
	}
	defer func() {
		if err := removeDataDir(dataDir); err != nil {
			fmt.Fprintf(o.Stderr, "fibril bench sweep: removing %s: %v\n", dataDir, err)
		}
	}()
	deadline := time.Now().Add(o.Timeout)
	broker, err := StartBroker(o.Bin, dataDir)
	if err != nil {
		failLine(line, fmt.Errorf("starting the broker: %w", err))
		return line
	}
	defer broker.Stop()
	startCtx, cancel := context.WithTimeout(context.Background(), min(brokerStartTimeout, o.Timeout))
	err = broker.WaitReady(startCtx)
	cancel()
	if err != nil {
		failLine(line, err)
		return line
	}
	target := &bench.Fibril{Addr: broker.Addr, Transport: o.Transport, Credentials: benchCredentials,
		Partitions: shape.Partitions, Queues: shape.Queues}
	switch kind.Name {
	case KindBacklog:
		runBacklog(line, broker, target, w, o, deadline)
	case KindIdle:
		runIdle(line, broker, target, w, x, o, deadline)
	default:
		runWorkload(line, broker, target, w, deadline)
	}
	return line
}

// runWorkload is a throughput point: bench.Run, then the derived figures.
func runWorkload(line *bench.Line, broker *Broker, target *bench.Fibril, w bench.Workload, deadline time.Time) {
	result, _ := bench.Run(target, w, bench.RunOptions{System: bench.System(target.Transport), RunLabel: "1",
		Timeout: time.Until(deadline), ServerPID: broker.PID()})
	status, errText := copyFields(line, result)
	addDerived(line, w)
	// The point's broker served this point alone, so its VmHWM is the
	// point's peak: server_rss_mb is read after the connections closed.
	line.Set("server_peak_rss_mb", orNaN(bench.ProcessPeakRSSMB(broker.PID())))
	setStatus(line, status, errText)
}

// addDerived adds server CPU per message counted (confirmed, or received
// once for end-to-end) and MiB/s.
func addDerived(line *bench.Line, w bench.Workload) {
	counted := "confirmed"
	if w.Scenario == bench.ScenarioEndToEnd {
		counted = "unique"
	}
	msgs := lineNumber(line, counted)
	cpu := math.NaN()
	// The broker's CPU over the measured interval only: the whole run's
	// server_cpu_s also holds every connection's login and every declare.
	if cpuSeconds := lineNumber(line, "server_cpu_measured_s"); !math.IsNaN(cpuSeconds) && !math.IsNaN(msgs) {
		cpu = CPUMicrosPerMsg(cpuSeconds, int64(msgs))
	}
	line.Set("server_cpu_us_per_msg", cpu)
	line.Set("mib_per_s", lineNumber(line, "msgs_per_s")*float64(w.SizeBytes)/(1<<20))
	// What the point spent outside the measured interval: declaring, opening
	// the connections (each one's AUTH included), the left probe. The whole
	// run's server_cpu_s covers it too; the per-message figure does not.
	line.Set("setup_s", lineNumber(line, "wall_s")-lineNumber(line, "secs"))
}

// lineNumber reads a figure back from a line; NaN when absent.
func lineNumber(line *bench.Line, key string) float64 {
	v, ok := line.Get(key)
	if !ok {
		return math.NaN()
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}
