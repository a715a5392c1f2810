//go:build linux

package bench

import (
	"os"
	"testing"
)

// The server's CPU counts its reaped children (cutime, cstime) too, as the
// harness does: Redis's AOF rewrites run in forked children.
func TestParseStatCountsReapedChildren(t *testing.T) {
	// pid (comm with ) and spaces) state ppid ... utime=100 stime=50 cutime=30 cstime=20 ...
	stat := "1234 (redis server) R 1 2 3 4 5 6 7 8 9 10 100 50 30 20 20 0 4 0 99 1000 10\n"
	if got := parseStatCPUSeconds(stat); got != 2.0 {
		t.Fatalf("parseStatCPUSeconds = %v, want 2.0 ((100+50+30+20)/100)", got)
	}
	for _, bad := range []string{"", "1234 (x R 1", "1234 (x) R 1 2 3", "1234 (x) R 1 2 3 4 5 6 7 8 9 10 u 50 30 20"} {
		if got := parseStatCPUSeconds(bad); got != -1 {
			t.Errorf("parseStatCPUSeconds(%q) = %v, want -1", bad, got)
		}
	}
	if got := ProcessCPUSeconds(os.Getpid()); got < 0 {
		t.Errorf("own CPU = %v", got)
	}
}
