package node

import "github.com/fibril-go/fibril/core"

// Messages of runtime settings and the global dead-letter target
// (node_runtime.go). Invariants:
//   - operator requests come from an AdminAddr and get exactly one answer
//     (a State, perhaps with Err), sent to that address;
//   - a change is answered only once its record is durable and every
//     loaded partition has it in force (SettingsApplied), so whatever the
//     operator does after the answer runs under the new values.

// ---- Admin -> Node

// GetRuntimeSettings asks for the runtime settings in force; the answer is
// a RuntimeSettingsState.
type GetRuntimeSettings struct{}

// PutRuntimeSettings changes the keys Patch sets when ExpectedVersion is
// the version in force; the answer is a RuntimeSettingsState, with Err set
// when refused.
type PutRuntimeSettings struct {
	ExpectedVersion uint64
	Patch           RuntimePatch
}

// GetGlobalDLQ asks for the global dead-letter target; the answer is a
// GlobalDLQState.
type GetGlobalDLQ struct{}

// PutGlobalDLQ sets (Target nil: clears) the global dead-letter target
// when ExpectedVersion is the version in force; answered with a
// GlobalDLQState, with Err set when refused.
type PutGlobalDLQ struct {
	ExpectedVersion uint64
	Target          *core.DLQTarget
}

// ---- Node -> Admin

// RuntimeSettingsState is the runtime settings at Version and the groups
// locked against change. With Err, the request was refused and the rest
// is what is in force (the "current" of a stale version).
type RuntimeSettingsState struct {
	Version  uint64
	Settings RuntimeSettings
	Locked   []string
	Err      *RuntimeRefusal
}

// GlobalDLQState is the global dead-letter target at Version (nil: none).
type GlobalDLQState struct {
	Version uint64
	Target  *core.DLQTarget
	Err     *RuntimeRefusal
}

// RefusalCode says why a change was refused. Append-only.
type RefusalCode uint8

const (
	RefusedStaleVersion RefusalCode = 1 // ExpectedVersion is not the version in force
	RefusedLocked       RefusalCode = 2 // a locked group (Key names it)
	RefusedInvalid      RefusalCode = 3 // a value out of range (Key, Message)
	RefusedBehind       RefusalCode = 4 // storage is too far behind; retry
	RefusedEmpty        RefusalCode = 5 // the patch changes no key
)

// RuntimeRefusal is why a change was refused.
type RuntimeRefusal struct {
	Code    RefusalCode
	Key     string
	Message string
}

// ---- Node -> Host

// PartitionRuntime brings a loaded partition's runtime settings (lease,
// expiry batch) and global dead-letter target up to the Node's. The Host
// answers SettingsApplied{Seq} (the Seq counter of DeclareSettings: one
// order per partition for everything the Node waits on).
type PartitionRuntime struct {
	Seq            uint64
	LeaseMs        int64
	ExpiryBatchMax int
	GlobalDLQ      *core.DLQTarget
}

// ---- Node -> Session

// SessionRuntime gives a session the reconnect grace in force: it applies
// to disconnects the session learns of after it. Not answered (a grace is
// read when a disconnect arrives, and nothing the operator is told waits
// on sessions).
type SessionRuntime struct {
	ReconnectGraceMs int64
}

func (*GetRuntimeSettings) message()   {}
func (*PutRuntimeSettings) message()   {}
func (*GetGlobalDLQ) message()         {}
func (*PutGlobalDLQ) message()         {}
func (*RuntimeSettingsState) message() {}
func (*GlobalDLQState) message()       {}
func (*PartitionRuntime) message()     {}
func (*SessionRuntime) message()       {}
