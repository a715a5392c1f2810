package ctl

import "os"

// OSEnv is the process's own streams and environment.
func OSEnv() Env {
	return Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv,
		StdinIsTerminal: func() bool {
			info, err := os.Stdin.Stat()
			return err == nil && info.Mode()&os.ModeCharDevice != 0
		},
		ReadPasswordNoEcho: func() (string, bool, error) { return readPasswordNoEcho(os.Stdin) },
	}
}
