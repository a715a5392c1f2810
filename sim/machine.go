package sim

import "github.com/fibril-go/fibril/core"

// Machine is the state machine a partition's Host steps. The real one is
// *core.Partition; tests wrap it to build deliberately broken variants
// (mutants) and show that the checker catches each. Invariants:
//   - the Host steps the partition only through Machine.Step
//     (node.NewHostStepping), so a mutant sees every input and can change
//     every output; a Wrap that returns another *core.Partition replaces
//     the recovered one outright;
//   - a Ready returned by Step is valid until the next Step of the same
//     machine, exactly as core.Partition promises.
type Machine interface {
	Step(in core.Input) *core.Ready
	CheckInvariants() error
	Snapshot() []byte
	Live() int
	SpillBody(offset uint64, ref core.PayloadRef) int64
}

var _ Machine = (*core.Partition)(nil)

// MachineInfo tells a wrapper which partition it wraps and whether it was
// just recovered from the log (after a crash) or created empty.
type MachineInfo struct {
	Queue     core.QueueID
	Recovered bool
	// Entries is the log the partition was recovered from (read-only),
	// after Snapshot (nil: none).
	Entries  []core.Entry
	Snapshot []byte
}

// WrapMachine builds the Machine a node uses around a real partition. Nil
// means the partition itself.
type WrapMachine func(p *core.Partition, info MachineInfo) Machine
