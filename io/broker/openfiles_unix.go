//go:build unix

package broker

import "syscall"

// openFilesLimit is the soft RLIMIT_NOFILE in force (Go raises it to the
// hard limit at start), or 0 when unknown.
func openFilesLimit() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur > uint64(1<<62) {
		return 0 // RLIM_INFINITY
	}
	return int64(rl.Cur)
}
