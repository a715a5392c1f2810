//go:build fibril_mutants

package main

import (
	"fmt"
	"os"

	"github.com/fibril-go/fibril/mutant"
)

// A fibril binary built with -tags fibril_mutants runs the deliberately
// broken variant named by FIBRIL_MUTANT (one of package mutant's constants),
// so that the end-to-end power-loss loop can show it catches each one. Real
// builds leave out this file, and with it any way to turn a mutant on.

func init() {
	name := os.Getenv("FIBRIL_MUTANT")
	if name == "" {
		return
	}
	mutant.Active = name
	fmt.Fprintf(os.Stderr, "fibril: MUTANT BUILD: running the deliberately broken variant %q\n", name)
}
