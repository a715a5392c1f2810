//go:build linux

package sweep

import "syscall"

// brokerProcAttr makes the kernel SIGKILL the broker when the sweep dies,
// however it dies: a broker outliving its sweep would hold a port and a
// data dir nobody removes.
func brokerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
