package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fibril-go/fibril/checker"
)

// fibril check FILE: load a recorded history (JSON lines, as `fibril sim`
// writes for failing runs or with --history) and run every checker over it.

func init() {
	register("check", "check a recorded simulator history", runCheck)
}

func runCheck(args []string) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	htmlPath := fs.String("html", "", "write porcupine's visualisation here on failure (default: FILE with .html)")
	timeout := fs.Duration("timeout", checker.DefaultTimeout, "bound on each porcupine search; running out counts as a failure")
	limit := fs.Int("limit", 50, "violations to print")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: fibril check [flags] FILE")
		fs.PrintDefaults()
		return 2
	}
	path := fs.Arg(0)
	h, err := checker.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fibril check:", err)
		return 2
	}
	start := time.Now()
	r := checker.Check(h, checker.Options{Timeout: *timeout})
	fmt.Printf("%s: scenario %s seed %d, %d events, checked in %v\n", path, h.Meta.Scenario, h.Meta.Seed,
		len(h.Events), time.Since(start).Round(time.Millisecond))
	fmt.Println(r.Summary(*limit))
	if r.OK() {
		return 0
	}
	out := *htmlPath
	if out == "" {
		out = strings.TrimSuffix(strings.TrimSuffix(path, ".jsonl"), ".history") + ".check.html"
	}
	if err := checker.WriteVisualisation(out, r); err != nil {
		fmt.Fprintln(os.Stderr, "fibril check: writing the visualisation:", err)
	} else {
		fmt.Println("visualisation:", out)
	}
	fmt.Println("replay:", h.Meta.Replay)
	return 1
}
