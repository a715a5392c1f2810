package node

import "github.com/fibril-go/fibril/core"

// Recovery checks and quarantine (SPEC 7, recovery.on_mismatch): what the
// driver reports about a damaged partition log, what the Node decides, and
// the operator's requests about it. The decision is the Node's
// (node_quarantine.go); the driver only reads the log, reports the damage,
// cuts when a LoadRequest says so, and publishes the Node's report.

// MismatchPolicy is recovery.on_mismatch: what a damaged partition log
// (a record failing its CRC, an entry its state contradicts, an
// undecodable snapshot; never a torn tail, which is always trimmed) means.
type MismatchPolicy uint8

const (
	// MismatchQuarantine (the default) parks the partition: every
	// operation on it is refused with core.QuarantinedError until an
	// operator repairs it; the rest of the broker serves.
	MismatchQuarantine MismatchPolicy = 0
	// MismatchRefuse parks it too, and the node reports itself not ready
	// (/readyz 503) while any partition is refused.
	MismatchRefuse MismatchPolicy = 1
	// MismatchIgnore cuts the log at its last valid record and serves
	// (what was cut is lost; the driver logs a warning).
	MismatchIgnore MismatchPolicy = 2
)

// ParseMismatchPolicy reads the configuration value.
func ParseMismatchPolicy(s string) (MismatchPolicy, bool) {
	switch s {
	case "quarantine", "":
		return MismatchQuarantine, true
	case "refuse":
		return MismatchRefuse, true
	case "ignore":
		return MismatchIgnore, true
	}
	return 0, false
}

func (p MismatchPolicy) String() string {
	switch p {
	case MismatchQuarantine:
		return "quarantine"
	case MismatchRefuse:
		return "refuse"
	case MismatchIgnore:
		return "ignore"
	}
	return "invalid"
}

// LoadDamage is a LoadDone's report that the partition's log failed a
// recovery check and was not loaded (nothing on disk was changed).
type LoadDamage struct {
	// Kind is what failed: "checksum" (a record that does not decode),
	// "inconsistent" (an entry its preceding state contradicts, such as a
	// settle of a message past the log's tail), "snapshot" (an
	// undecodable snapshot).
	Kind string
	// Reason is the driver's description, for the operator.
	Reason string
	// Index is the first bad record's index (the cut point; 0 when the
	// damage has none, as a snapshot).
	Index uint64
}

// LoadCut is a LoadDone's report that a load with LoadRequest.Truncate cut
// the log at its first bad record before loading it.
type LoadCut struct {
	Index          uint64 // the first record dropped
	DroppedRecords uint64 // records lost from there on, the damaged one included
}

// QuarantineEntry is one parked partition, as the Node reports it.
type QuarantineEntry struct {
	Queue        core.QueueID
	Kind         PartitionKind
	Damage       string // LoadDamage.Kind
	Reason       string
	Index        uint64
	DetectedAtMs int64
	// Refused: parked under MismatchRefuse (the node is not ready).
	Refused bool
}

// QuarantineReport is the Node's quarantine set after a step that changed
// it (Ready.Quarantine): the driver publishes it for /readyz, the listing
// and the metrics. Observations only.
type QuarantineReport struct {
	Entries []QuarantineEntry // sorted by queue
	// Refused: some entry is Refused.
	Refused bool
	// QuarantinesTotal counts partitions parked by this process.
	QuarantinesTotal uint64
}

// ---- Admin -> Node

// RepairQuarantine asks the Node to repair a parked partition: load it
// again with the log cut at its first bad record, then serve it. Answered
// by QuarantineRepaired.
// A topic is a queue's or a stream's, never both: the Node knows which.
type RepairQuarantine struct {
	Queue core.QueueID // normalised group
}

// RepairOutcome says how a RepairQuarantine ended.
type RepairOutcome uint8

const (
	RepairDone           RepairOutcome = 1
	RepairUnknown        RepairOutcome = 2 // no such queue or partition (404)
	RepairNotQuarantined RepairOutcome = 3 // it serves (409)
	RepairBusy           RepairOutcome = 4 // a repair of it runs already (409)
	RepairFailed         RepairOutcome = 5 // the cut or the load failed; still parked
)

// ---- Node -> Admin

// QuarantineRepaired answers RepairQuarantine.
type QuarantineRepaired struct {
	Outcome RepairOutcome
	Entry   QuarantineEntry // what was parked (RepairDone, RepairFailed)
	// TruncatedEntries counts the records the cut dropped (RepairDone).
	TruncatedEntries uint64
	// Err says why a repair failed (RepairFailed).
	Err string
}

func (*RepairQuarantine) message()   {}
func (*QuarantineRepaired) message() {}
