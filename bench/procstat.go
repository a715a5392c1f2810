//go:build linux

package bench

// CPU and memory sampling, the same way as the harness's procstat.go: the
// broker from /proc/PID (all threads), this process from getrusage.
//
// Invariants:
//   - Every reader returns -1 when it cannot read, never a guess.

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// clockTicksPerSec is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every mainstream Linux architecture (Go cannot call sysconf without
// cgo).
const clockTicksPerSec = 100

// ProcessCPUSeconds is the CPU seconds used so far by pid (user+system, all
// threads) plus those of the children it has reaped (utime+stime+cutime+
// cstime, as the harness counts: Redis's forked AOF rewrites show there), or
// -1.
func ProcessCPUSeconds(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	return parseStatCPUSeconds(string(b))
}

// parseStatCPUSeconds reads utime, stime, cutime and cstime from the text of
// /proc/PID/stat, or returns -1.
func parseStatCPUSeconds(s string) float64 {
	// The command name is in parentheses and may contain spaces; fields are
	// counted after the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	// After ")": state is field 3 (1-based), utime 14, stime 15, cutime 16,
	// cstime 17.
	if len(f) < 15 {
		return -1
	}
	var ticks float64
	for _, field := range f[11:15] {
		v, err := strconv.ParseFloat(field, 64)
		if err != nil {
			return -1
		}
		ticks += v
	}
	return ticks / clockTicksPerSec
}

// ProcessRSSMB is the resident set size of pid in MiB, or -1.
func ProcessRSSMB(pid int) float64 { return processStatusMB(pid, "VmRSS:") }

// ProcessPeakRSSMB is the largest resident set size pid had in its life
// (VmHWM) in MiB, or -1: a broker's peak over a run when it was started for
// that run alone.
func ProcessPeakRSSMB(pid int) float64 { return processStatusMB(pid, "VmHWM:") }

// processStatusMB reads a kB field of /proc/PID/status in MiB, or -1.
func processStatusMB(pid int, field string) float64 {
	if pid <= 0 {
		return -1
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == field {
			kib, err := strconv.ParseFloat(fields[1], 64)
			if err != nil {
				return -1
			}
			return kib / 1024
		}
	}
	return -1
}

// SelfCPUSeconds is user+system CPU seconds used by this process, or -1.
func SelfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return seconds(ru.Utime) + seconds(ru.Stime)
}
