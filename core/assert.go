package core

// Assertions guard invariants that only a bug can break (STYLE.md §4). They
// panic in production too: a broker that has corrupted its own state must
// stop before it confirms or delivers on the strength of that state.

// assertTrue panics with why when cond is false.
func assertTrue(cond bool, why string) {
	if !cond {
		panic("fibril/core invariant violated: " + why)
	}
}
