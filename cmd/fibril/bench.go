package main

// fibril bench: the peer-broker workload (../shared/bench-peers, "The
// workload, exactly") against a running Fibril broker, one result line per
// transport, or against one peer broker (--system nats-js --url ...,
// package bench/peers), in the harness's key=value format. The workload
// itself lives in package bench; this file is flags and output.
//
// Invariants:
//   - Flags, defaults and the line format are the harness's, so that
//     scripts/bench-compare.sh passes every system the same arguments and
//     reads every line with one parser.
//   - A peer's URL must be one loopback address (peers.RequireLoopback); it
//     is checked before anything is dialled.
//   - The exit status is 0 only if every line says status=ok (or
//     status=unsupported, which is a fact about Fibril, not a failed run).

import (
	"context"
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
	"github.com/fibril-go/fibril/bench/peers"
	"github.com/fibril-go/fibril/client"
)

func init() {
	register("bench", "run the peer-broker benchmark workload against a running broker", runBench)
}

func runBench(args []string) int { return benchMain(args, os.Stdout, os.Stderr) }

// benchFlags are the command line of one scenario.
type benchFlags struct {
	system         string
	url            string
	addr           string
	adminAddr      string
	partitions     int
	queues         int
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
	fs.StringVar(&f.system, "system", "", "the system to run: fibril-quic, fibril-tcp or a peer ("+peers.Names()+"); empty = Fibril over -transport")
	fs.StringVar(&f.url, "url", "", "a peer's server URL, loopback only (default: the harness's default for -system, e.g. nats://127.0.0.1:4222)")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:9876", "broker HOST:PORT")
	fs.StringVar(&f.adminAddr, "admin-addr", "", "the broker's admin HOST:PORT (serve --admin-listen): each run's queue is deleted through it afterwards, as the peers' drivers delete theirs; empty keeps it")
	fs.IntVar(&f.partitions, "partitions", 1, "Fibril: partitions of the queue (unkeyed publishes spread round-robin); the peers have one")
	fs.IntVar(&f.queues, "queues", 1, "Fibril: queues the producers spread their publishes over (message id mod queues)")
	fs.StringVar(&f.transports, "transport", client.TransportQUIC, "quic, tcp, or a comma list run in order (system=fibril-<transport>)")
	fs.StringVar(&f.user, "user", "fibril:fibril", "NAME:PASSWORD sent in AUTH; empty sends no AUTH")
	fs.StringVar(&f.caFile, "ca-file", "", "CA to trust (<data-dir>/tls/ca.pem); not needed on loopback")
	fs.StringVar(&f.pids, "pids", "", "server PIDs to sample CPU/RSS from: fibril=PID,nats=PID,nats-sync=PID,rabbitmq=PID,redis=PID (the key of the system run is used)")
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
line per transport (Fibril) or one line (a peer: --system NAME --url URL) in
the harness's key=value format.

Scenarios:
  confirmed-publish   producers publish persistent messages with confirms
  end-to-end          producers publish (confirmed) while consumers receive+ack
  fanout              producers preload a durable stream, then independent
                      durable readers each read all of it and ack
  report [FILE]       reads result lines (FILE or stdin) of fibril and the
                      peers, prints the markdown table and the ratio lines
  sweep <kind>        cost curves, a fresh broker per point (bench_sweep.go)
  wait                waits until a peer server works (--system NAME --url
                      URL --timeout D) and prints its version and settings

Peers (--system): %s

Run 'fibril bench <scenario> --help' for flags.
`, peers.Names())
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
	if scenario == "wait" {
		return benchWait(args[1:], stdout, stderr)
	}
	if scenario == "sweep" {
		return benchSweep(args[1:], stdout, stderr)
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
	if f.system != "" && !strings.HasPrefix(f.system, "fibril-") {
		// a peer: refuse Fibril's connection flags rather than ignore them
		var fibrilOnly []string
		fs.Visit(func(fl *flag.Flag) {
			switch fl.Name {
			case "addr", "admin-addr", "partitions", "queues", "transport", "user", "ca-file", "reconnect-grace", "left-idle":
				fibrilOnly = append(fibrilOnly, "-"+fl.Name)
			}
		})
		if len(fibrilOnly) > 0 {
			fmt.Fprintf(stderr, "fibril bench: %s apply to Fibril, not to -system %s (it takes -url)\n", strings.Join(fibrilOnly, ", "), f.system)
			return 2
		}
	}
	w := f.workload
	w.Scenario = scenario
	w.Producers = min(w.Producers, max(w.Msgs, 1)) // as the harness: no idle producers
	if err := w.Validate(); err != nil {
		fmt.Fprintln(stderr, "fibril bench:", err)
		return 2
	}
	if f.cpuProfile != "" {
		stop, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "fibril bench:", err)
			return 1
		}
		defer stop()
	}
	switch {
	case strings.HasPrefix(f.system, "fibril-"):
		f.transports = strings.TrimPrefix(f.system, "fibril-")
	case f.system != "":
		return benchPeer(f, w, stdout, stderr)
	}
	if f.url != "" {
		fmt.Fprintln(stderr, "fibril bench: -url is for a peer (-system NAME); Fibril takes -addr")
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
	if f.partitions < 1 || f.queues < 1 {
		fmt.Fprintln(stderr, "fibril bench: -partitions and -queues must be >= 1")
		return 2
	}
	adminURL := ""
	if f.adminAddr != "" {
		if err := peers.RequireLoopback("http://" + f.adminAddr); err != nil {
			fmt.Fprintln(stderr, "fibril bench: -admin-addr:", err)
			return 2
		}
		adminURL = "http://" + f.adminAddr
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	exit := 0
	for _, transport := range transports {
		target := &bench.Fibril{Addr: f.addr, Transport: transport, Credentials: credentials, TLS: tlsOptions,
			ReconnectGrace: f.reconnectGrace, LeftIdle: f.leftIdle, AdminURL: adminURL, Logger: logger,
			Partitions: f.partitions, Queues: f.queues}
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

// benchPeer runs w against the peer f.system at f.url and prints its line.
func benchPeer(f benchFlags, w bench.Workload, stdout, stderr io.Writer) int {
	spec, ok := peers.Lookup(f.system)
	if !ok {
		fmt.Fprintf(stderr, "fibril bench: unknown system %q (fibril-quic, fibril-tcp, %s)\n", f.system, peers.Names())
		return 2
	}
	target, err := peers.New(f.system, f.url)
	if err != nil {
		fmt.Fprintln(stderr, "fibril bench:", err)
		return 2
	}
	line, status := bench.Run(target, w, bench.RunOptions{System: spec.Name, RunLabel: f.runLabel,
		Timeout: f.timeout, ServerPID: serverPID(f.pids, spec.Server)})
	_ = target.Close()
	fmt.Fprintln(stdout, line)
	if status != bench.StatusOK && status != bench.StatusUnsupported {
		return 1
	}
	return 0
}

// benchWait waits until each peer server works and prints one line per
// peer, "system=NAME status=ready version=..." (for Redis also appendonly,
// appendfsync and save), or status=error and then exits 1. The peers are
// -system NAME [-url URL] and/or arguments NAME=URL, waited for in order
// within one -timeout.
func benchWait(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench wait", flag.ContinueOnError)
	fs.SetOutput(stderr)
	system := fs.String("system", "", "a peer to wait for ("+peers.Names()+")")
	rawURL := fs.String("url", "", "its server URL, loopback only (default: the harness's default)")
	timeout := fs.Duration("timeout", 90*time.Second, "give up after this long (all peers together)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: fibril bench wait [-system NAME [-url URL]] [-timeout D] [NAME=URL ...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	type peerAt struct {
		spec peers.Spec
		url  string
	}
	var waits []peerAt
	add := func(name, url string) bool {
		spec, ok := peers.Lookup(name)
		if !ok {
			fmt.Fprintf(stderr, "fibril bench wait: unknown peer %q (known: %s)\n", name, peers.Names())
			return false
		}
		if url != "" {
			if err := spec.CheckURL(url); err != nil {
				fmt.Fprintln(stderr, "fibril bench wait:", err)
				return false
			}
		}
		waits = append(waits, peerAt{spec, url})
		return true
	}
	if *system != "" && !add(*system, *rawURL) {
		return 2
	}
	for _, arg := range fs.Args() {
		name, url, ok := strings.Cut(arg, "=")
		if !ok || url == "" {
			fmt.Fprintf(stderr, "fibril bench wait: want NAME=URL, not %q\n", arg)
			return 2
		}
		if !add(name, url) {
			return 2
		}
	}
	if len(waits) == 0 {
		fs.Usage()
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	exit := 0
	for _, p := range waits {
		facts, err := peers.WaitReady(ctx, p.spec.Name, p.url)
		out := bench.NewLine()
		out.Set("system", p.spec.Name)
		if err != nil {
			out.Set("status", "error")
			out.Set("err", err.Error())
			exit = 1
		} else {
			out.Set("status", "ready")
			for _, kv := range facts {
				out.Set(kv[0], kv[1])
			}
		}
		fmt.Fprintln(stdout, out)
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
