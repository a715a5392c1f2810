//go:build !linux

package ctl

import "os"

// readPasswordNoEcho is only implemented on Linux; elsewhere the prompt
// echoes (the prompt says so).
func readPasswordNoEcho(*os.File) (string, bool, error) { return "", false, nil }
