package cohort

// Assertions guard invariants that only a bug can break (STYLE.md §4). They
// panic in production too, as core's do: a Node that handed one partition
// to two members, or to none while a member wants it, must stop before it
// sends the SetOwner that would act on it.

// assertTrue panics with why when cond is false.
func assertTrue(cond bool, why string) {
	if !cond {
		panic("fibril/core/cohort invariant violated: " + why)
	}
}
