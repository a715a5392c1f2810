// Command fibrilctl operates a Fibril broker: queues over the wire protocol,
// everything else over the admin HTTP API, and local TLS and secret files.
// The same commands run as `fibril ctl ...`; both are package ctl.
// docs/fibrilctl.md lists every command and the exit codes.
package main

import (
	"os"

	"github.com/fibril-go/fibril/ctl"
)

func main() {
	os.Exit(ctl.Main("fibrilctl", os.Args[1:], ctl.OSEnv()))
}
