package stream

// Assertions guard invariants that only a bug can break (STYLE.md §4). They
// panic in production too, as core's do.

// assertTrue panics with why when cond is false.
func assertTrue(cond bool, why string) {
	if !cond {
		panic("fibril/core/stream invariant violated: " + why)
	}
}
