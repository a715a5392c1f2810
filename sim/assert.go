package sim

// assert panics when cond is false: a broken simulator invariant is a bug in
// the simulator, and a run that continues past one proves nothing.
func assert(cond bool, why string) {
	if !cond {
		panic("fibril/sim invariant violated: " + why)
	}
}
