package main

// fibril bench sweep <kind>: cost curves. Each point starts a broker of its
// own from this very executable (serve), runs package bench's workload, stops
// it; the sweep prints each point's line, then the table, and writes
// <kind>.tsv and <kind>.svg into --out. The sweep itself lives in package
// bench/sweep; this file is flags.
//
// Invariants:
//   - Every flag is checked, and every point's workload built, before the
//     first broker starts: a typo never costs a half-run sweep.
//   - The exit status is 0 only if every point says status=ok; 1 if a point
//     failed (the table and the files are written all the same); 2 for a bad
//     command line or a sweep that could not start (an unwritable --out).

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fibril-go/fibril/bench"
	benchsweep "github.com/fibril-go/fibril/bench/sweep" // sim.go has a func sweep
	"github.com/fibril-go/fibril/client"
)

func benchSweepUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: fibril bench sweep <kind> [flags] --out DIR")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Runs one workload per x value, each against a fresh broker of its own, and")
	fmt.Fprintln(w, "writes DIR/<kind>.tsv and DIR/<kind>.svg. Kinds (default x values):")
	for _, k := range benchsweep.Kinds {
		var points []string
		for _, x := range k.DefaultPoints {
			points = append(points, benchsweep.FormatX(x))
		}
		fmt.Fprintf(w, "  %-12s %s [%s]\n", k.Name, k.About, strings.Join(points, ","))
	}
	fmt.Fprintln(w, "\nRun 'fibril bench sweep <kind> --help' for flags.")
}

func benchSweep(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		benchSweepUsage(stderr)
		if len(args) > 0 {
			return 0
		}
		return 2
	}
	kind, ok := benchsweep.LookupKind(args[0])
	if !ok {
		fmt.Fprintf(stderr, "fibril bench sweep: unknown kind %q (%s)\n", args[0], benchsweep.KindNames())
		return 2
	}
	fs := flag.NewFlagSet("bench sweep "+kind.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	defaultSize := benchsweep.DefaultSizeBytes
	if kind.Name == benchsweep.KindBacklog {
		defaultSize = benchsweep.DefaultBacklogSize
	}
	out := fs.String("out", "", "directory for <kind>.tsv and <kind>.svg (created if absent; required)")
	transport := fs.String("transport", client.TransportTCP, "quic or tcp")
	msgs := fs.Int("msgs", benchsweep.DefaultMsgs, "messages per point (size: per point at 1 KiB, scaled by size; backlog: x itself)")
	size := fs.Int("size", defaultSize, "message body size in bytes (size: x itself)")
	points := fs.String("points", "", "comma list of x values overriding the defaults, with k M G (1000s) or Ki Mi Gi (1024s) suffixes")
	timeout := fs.Duration("timeout", benchsweep.DefaultPointTimeout, "time limit per point (broker start and stop included)")
	scenario := fs.String("scenario", bench.ScenarioConfirmedPublish,
		"connections, partitions, size: confirmed-publish or end-to-end (connections: half the connections consume)")
	idleSettle := fs.Duration("idle-settle", benchsweep.DefaultIdleSettle, "idle: wait this long before sampling")
	idleSample := fs.Duration("idle-sample", benchsweep.DefaultIdleSample, "idle: sample the broker's CPU over this long")
	bin := fs.String("bin", "", "the fibril executable to start as the broker (default: this one)")
	restart := fs.String("restart", "sigterm", "backlog: how the broker is stopped before the recovery is timed, sigterm (a clean stop) or sigkill (a crash: no shutdown code runs)")
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "fibril bench sweep: want --out DIR and no further arguments")
		return 2
	}
	switch *scenario {
	case bench.ScenarioConfirmedPublish:
	case bench.ScenarioEndToEnd:
		if kind.Name != benchsweep.KindConnections && kind.Name != benchsweep.KindPartitions && kind.Name != benchsweep.KindSize {
			fmt.Fprintf(stderr, "fibril bench sweep: -scenario applies to connections, partitions and size only\n")
			return 2
		}
	default:
		fmt.Fprintf(stderr, "fibril bench sweep: unknown -scenario %q\n", *scenario)
		return 2
	}
	if *restart != "sigterm" && *restart != "sigkill" {
		fmt.Fprintf(stderr, "fibril bench sweep: -restart %q: want sigterm or sigkill\n", *restart)
		return 2
	}
	if *restart != "sigterm" && kind.Name != benchsweep.KindBacklog {
		fmt.Fprintln(stderr, "fibril bench sweep: -restart applies to backlog only")
		return 2
	}
	o := benchsweep.Options{Kind: kind.Name, Bin: *bin, Transport: *transport, Timeout: *timeout, OutDir: *out,
		Base:       benchsweep.Base{Msgs: *msgs, SizeBytes: *size, Scenario: *scenario},
		IdleSettle: *idleSettle, IdleSample: *idleSample, RestartKill: *restart == "sigkill", Stdout: stdout, Stderr: stderr}
	if *points != "" {
		parsed, err := benchsweep.ParsePoints(*points)
		if err != nil {
			fmt.Fprintln(stderr, "fibril bench sweep: -points:", err)
			return 2
		}
		o.Points = parsed
	}
	if o.Bin == "" {
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "fibril bench sweep:", err)
			return 1
		}
		o.Bin = self
	}
	started := time.Now()
	allOK, err := benchsweep.Run(o)
	if err != nil {
		fmt.Fprintln(stderr, "fibril bench sweep:", err)
		return 2
	}
	pointCount := len(o.Points)
	if pointCount == 0 {
		pointCount = len(kind.DefaultPoints)
	}
	fmt.Fprintf(stderr, "fibril bench sweep %s: %d points in %.1f s; wrote %s and %s\n", kind.Name, pointCount,
		time.Since(started).Seconds(), filepath.Join(*out, kind.Name+".tsv"), filepath.Join(*out, kind.Name+".svg"))
	if !allOK {
		return 1
	}
	return 0
}
