package node

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// The durable side of runtime settings and the global dead-letter target:
// how their records apply, and how a snapshot keeps them. Invariants:
//   - each version only grows, by exactly one per record, so a replay that
//     skipped or repeated a record is caught (apply asserts, recovery
//     refuses the log);
//   - a snapshot carries both as they stand, so a Node recovered from a
//     snapshot holds what the records before it built.

// applyRuntime applies a recordRuntime or recordGlobalDLQ.
func (s *durableState) applyRuntime(r *record) {
	switch r.kind {
	case recordRuntime:
		// A version that does not follow would mean a lost or replayed change:
		// the operator's expected_version check would then compare with a lie.
		assertHold(r.runtimeVersion == s.runtimeVersion+1, "runtime settings versions grow by one")
		assertHold(r.runtime != nil, "a runtime record carries its settings")
		v := *r.runtime
		s.runtime, s.runtimeVersion = &v, r.runtimeVersion
	case recordGlobalDLQ:
		assertHold(r.globalDLQVersion == s.globalDLQVersion+1, "global dead-letter target versions grow by one")
		s.globalDLQVersion, s.globalDLQ = r.globalDLQVersion, copyTarget(r.globalDLQ)
	default:
		panic("fibril/core/node invariant violated: applyRuntime given another kind")
	}
}

// checkRuntimeApplicable reports a runtime record its state cannot take.
func checkRuntimeApplicable(s *durableState, r *record) error {
	switch {
	case r.kind == recordRuntime && r.runtimeVersion != s.runtimeVersion+1:
		return fmt.Errorf("%w: runtime settings version %d after %d", ErrCorruptRecord, r.runtimeVersion, s.runtimeVersion)
	case r.kind == recordGlobalDLQ && r.globalDLQVersion != s.globalDLQVersion+1:
		return fmt.Errorf("%w: global dead-letter version %d after %d", ErrCorruptRecord, r.globalDLQVersion, s.globalDLQVersion)
	}
	return nil
}

// appendRuntimeSnapshot writes the snapshot's runtime section (version 4).
func appendRuntimeSnapshot(dst []byte, s *durableState) []byte {
	// Before the first boot's seed record there are no settings: a presence
	// byte keeps "none" apart from any value.
	if s.runtime == nil {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
		dst = appendRuntime(dst, s.runtimeVersion, s.runtime)
	}
	return appendGlobalDLQ(dst, s.globalDLQVersion, s.globalDLQ)
}

// decodeRuntimeSnapshot reads the snapshot's runtime section.
func decodeRuntimeSnapshot(d *decoder, s *durableState) {
	if d.flag() {
		s.runtimeVersion, s.runtime = d.runtime()
	}
	s.globalDLQVersion, s.globalDLQ = d.globalDLQ()
	// A target with version 0 was never set by any record.
	if d.err == nil && s.globalDLQVersion == 0 && s.globalDLQ != nil {
		d.fail("a global dead-letter target at version 0")
	}
}

// copyTarget copies a target (nil stays nil): records, states and
// messages never share one.
func copyTarget(t *core.DLQTarget) *core.DLQTarget {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// sameTarget says whether two targets (nil: none) are equal.
func sameTarget(a, b *core.DLQTarget) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
