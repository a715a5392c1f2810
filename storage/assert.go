package storage

// Assertions guard invariants that only a bug can break (STYLE.md §4). They
// panic in production too: a log that has lost track of its own indexes must
// stop before the broker confirms anything on the strength of it.

// assertTrue panics with why when cond is false.
func assertTrue(cond bool, why string) {
	if !cond {
		panic("fibril/storage invariant violated: " + why)
	}
}
