package main

import (
	"bytes"
	"strings"
	"testing"
)

// The sweep's command line refuses what it cannot run before any broker
// starts (the sweep itself is tested end to end in bench/sweep).
func TestBenchSweepRefusesBadCommandLines(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"sweep"}, "Usage: fibril bench sweep"},
		{[]string{"sweep", "nope", "--out", "x"}, "unknown kind"},
		{[]string{"sweep", "size"}, "want --out DIR"},
		{[]string{"sweep", "size", "--out", "x", "-points", "64,,1k"}, "-points"},
		{[]string{"sweep", "queues", "--out", "x", "-scenario", "end-to-end"}, "-scenario applies to"},
		{[]string{"sweep", "connections", "--out", "x", "-points", "0"}, "connections must be >= 1"},
		{[]string{"sweep", "size", "--out", "x", "-transport", "udp"}, "unknown transport"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		if code := benchMain(c.args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, stderr.String())
		}
		if !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: stderr %q lacks %q", c.args, stderr.String(), c.want)
		}
	}
}
