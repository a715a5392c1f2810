package main

// fibril bench: the peer-broker workload (../shared/bench-peers, "The
// workload, exactly") against a running Fibril broker, one result line per
// transport in the harness's key=value format. The workload itself lives in
// package bench; this file is flags and output.
//
// Invariants:
//   - Flags, defaults and the line format are the harness's, so that
//     scripts/bench-compare.sh passes both programs the same arguments and
//     reads both programs' lines with one parser.
//   - The exit status is 0 only if every line says status=ok (or
//     status=unsupported, which is a fact about Fibril, not a failed run).

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/fibril-go/fibril/bench"
	"github.com/fibril-go/fibril/client"
)

func init() {
	register("bench", "run the peer-broker benchmark workload against a running broker", runBench)
}

func runBench(args []string) int { return benchMain(args, os.Stdout, os.Stderr) }

// benchFlags are the command line of one scenario.
type benchFlags struct {
	addr           string
	transports     string
	user           string
	caFile         string
	pids           string
	runLabel       string
	timeout        time.Duration
	reconnectGrace time.Duration
	leftIdle       time.Duration
	cpuProfile     string
	workload       bench.Workload
}

func (f *benchFlags) register(fs *flag.FlagSet, scenario string) {
	defaultMsgs, defaultConsumers := 200000, 2
	consumersHelp := "competing consumers on the queue"
	if scenario == bench.ScenarioFanout {
		defaultMsgs, defaultConsumers = 100000, 4
		consumersHelp = "independent readers, each reads every message"
	}
	w := &f.workload
	fs.StringVar(&f.addr, "addr", "127.0.0.1:9876", "broker HOST:PORT")
	fs.StringVar(&f.transports, "transport", client.TransportQUIC, "quic, tcp, or a comma list run in order (system=fibril-<transport>)")
	fs.StringVar(&f.user, "user", "fibril:fibril", "NAME:PASSWORD sent in AUTH; empty sends no AUTH")
	fs.StringVar(&f.caFile, "ca-file", "", "CA to trust (<data-dir>/tls/ca.pem); not needed on loopback")
	fs.StringVar(&f.pids, "pids", "", "server PID to sample CPU/RSS from: fibril=PID")
	fs.StringVar(&f.runLabel, "run", "1", "label printed as run=... (e.g. repetition number)")
	fs.DurationVar(&f.timeout, "timeout", 180*time.Second, "hard time limit per transport for this scenario")
	fs.DurationVar(&f.reconnectGrace, "reconnect-grace", 5*time.Second,
		"the broker's --reconnect-grace-ms: the left probe listens this long plus -left-idle, since closed consumers' unsettled deliveries return only after it (left=-1 if that passes 20 s)")
	fs.DurationVar(&f.leftIdle, "left-idle", bench.LeftIdleDefault, "the left probe stops after this long without a delivery")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write this process's CPU profile to this file")
	fs.IntVar(&w.Msgs, "msgs", defaultMsgs, "messages to publish in total")
	fs.IntVar(&w.SizeBytes, "size", 1024, "message body size in bytes (min 16)")
	fs.IntVar(&w.Producers, "producers", 2, "concurrent producers, one connection each")
	fs.IntVar(&w.Window, "window", 1024, "max unconfirmed publishes per producer")
	if scenario != bench.ScenarioConfirmedPublish {
		fs.IntVar(&w.Consumers, "consumers", defaultConsumers, consumersHelp+", one connection each")
		fs.IntVar(&w.Prefetch, "prefetch", 1024, "max unacked deliveries per consumer/reader")
	}
	if scenario != bench.ScenarioFanout {
		fs.Float64Var(&w.RateMsgsPerSec, "rate", 0, "total publish rate limit in msgs/s (0 = unlimited, window-bound)")
	}
}

// serverPID finds name=PID in the -pids list; 0 when absent.
func serverPID(pids, name string) int {
	for _, kv := range strings.Split(pids, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == name {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	return 0
}

func benchUsage(w io.Writer) {
	fmt.Fprintf(w, `Usage: fibril bench <scenario> [flags]

Runs ../shared/bench-peers' workload against a running broker and prints one
line per transport in the harness's key=value format.

Scenarios:
  confirmed-publish   producers publish persistent messages with confirms
  end-to-end          producers publish (confirmed) while consumers receive+ack
  fanout              producers preload a durable stream, then independent
                      durable readers each read all of it and ack
  report [FILE]       reads result lines (FILE or stdin) of fibril and the
                      harness, prints the markdown table and the ratio lines

Run 'fibril bench <scenario> --help' for flags.
`)
}

func benchMain(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 || strings.HasPrefix(args[0], "-") {
		benchUsage(stderr)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return 0
		}
		return 2
	}
	scenario := args[0]
	if scenario == "report" {
		return benchReport(args[1:], os.Stdin, stdout, stderr)
	}
	switch scenario {
	case bench.ScenarioConfirmedPublish, bench.ScenarioEndToEnd, bench.ScenarioFanout:
	default:
		fmt.Fprintf(stderr, "fibril bench: unknown scenario %q\n\n", scenario)
		benchUsage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("bench "+scenario, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f benchFlags
	f.register(fs, scenario)
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	w := f.workload
	w.Scenario = scenario
	w.Producers = min(w.Producers, max(w.Msgs, 1)) // as the harness: no idle producers
	if err := w.Validate(); err != nil {
		fmt.Fprintln(stderr, "fibril bench:", err)
		return 2
	}
	var credentials *client.Credentials
	if f.user != "" {
		name, password, ok := strings.Cut(f.user, ":")
		if !ok {
			fmt.Fprintln(stderr, "fibril bench: -user wants NAME:PASSWORD")
			return 2
		}
		credentials = &client.Credentials{Username: name, Password: password}
	}
	var tlsOptions *client.TLSOptions
	if f.caFile != "" {
		tlsOptions = &client.TLSOptions{CAFile: f.caFile}
	}
	var transports []string
	for _, transport := range strings.Split(f.transports, ",") {
		switch transport = strings.TrimSpace(transport); transport {
		case "":
		case client.TransportQUIC, client.TransportTCP:
			transports = append(transports, transport)
		default:
			fmt.Fprintf(stderr, "fibril bench: unknown transport %q (quic or tcp)\n", transport)
			return 2
		}
	}
	if f.cpuProfile != "" {
		stop, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "fibril bench:", err)
			return 1
		}
		defer stop()
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	exit := 0
	for _, transport := range transports {
		target := &bench.Fibril{Addr: f.addr, Transport: transport, Credentials: credentials, TLS: tlsOptions,
			ReconnectGrace: f.reconnectGrace, LeftIdle: f.leftIdle, Logger: logger}
		line, status := bench.Run(target, w, bench.RunOptions{System: bench.System(transport), RunLabel: f.runLabel,
			Timeout: f.timeout, ServerPID: serverPID(f.pids, "fibril")})
		_ = target.Close()
		fmt.Fprintln(stdout, line)
		if status != bench.StatusOK && status != bench.StatusUnsupported {
			exit = 1
		}
	}
	return exit
}

// benchReport prints the comparison table and ratio lines of the result
// lines in the file named by args[0], or on stdin.
func benchReport(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	input := stdin
	if len(args) > 1 {
		fmt.Fprintln(stderr, "fibril bench report: want at most one FILE")
		return 2
	}
	if len(args) == 1 && args[0] != "-" {
		file, err := os.Open(args[0])
		if err != nil {
			fmt.Fprintln(stderr, "fibril bench report:", err)
			return 1
		}
		defer file.Close()
		input = file
	}
	text, err := io.ReadAll(input)
	if err != nil {
		fmt.Fprintln(stderr, "fibril bench report:", err)
		return 1
	}
	results, err := bench.ParseResults(string(text))
	if err != nil {
		fmt.Fprintln(stderr, "fibril bench report:", err)
		return 1
	}
	bench.WriteReport(stdout, results)
	return 0
}

// startCPUProfile profiles this process (the client side: the broker is
// another process) until the returned stop runs.
func startCPUProfile(path string) (stop func(), err error) {
	file, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		file.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); file.Close() }, nil
}
