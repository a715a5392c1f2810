//go:build !linux

package bench

// Off Linux there is no /proc to read the same way; the figures are reported as
// unknown rather than measured differently.

// ProcessCPUSeconds is unknown (-1) off Linux.
func ProcessCPUSeconds(pid int) float64 { return -1 }

// ProcessRSSMB is unknown (-1) off Linux.
func ProcessRSSMB(pid int) float64 { return -1 }

// ProcessPeakRSSMB is unknown (-1) off Linux.
func ProcessPeakRSSMB(pid int) float64 { return -1 }

// SelfCPUSeconds is unknown (-1) off Linux.
func SelfCPUSeconds() float64 { return -1 }
