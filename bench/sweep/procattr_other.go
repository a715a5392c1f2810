//go:build !linux

package sweep

import "syscall"

// brokerProcAttr: without Pdeathsig, a broker outlives a sweep that is
// SIGKILLed (an interrupt still stops it, see onInterrupt).
func brokerProcAttr() *syscall.SysProcAttr { return nil }
