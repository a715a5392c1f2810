package node

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/transport/wire"
)

// Effects of one Step. Invariants:
//   - the driver carries out the fields in the order listed below: a
//     reply released before its record is durable could confirm what a
//     crash takes back;
//   - a Ready and what it points to are valid only until the machine's
//     next Step: the machine reuses its backing arrays;
//   - WakeMs is the earliest deadline the machine holds (0 = none); a
//     driver that wakes it late only delays timeouts, never skips them.

// Ready is the batch of effects of one Step of any machine, in contract
// order; a machine fills only the fields its kind uses. It and everything it
// points to is valid until that machine's next Step: the driver copies what
// it keeps (Sends bytes, Persist data).
//
//  1. Start, then Bind: create Session machines (NewSession) and route
//     the named connections' frames to them from now on.
//  2. Persist (Node records) or PersistEntries (Host entries): append in
//     order after all earlier ones; report durability with Persisted.
//  3. Sends, in order, each appended to its connection's outbox; then
//     Close, each after what was queued for that connection before it.
//  4. Out: deliver each envelope (FIFO per sender/receiver pair).
//  5. Load, CheckPassword, Snapshot, Reads: jobs whose answers come back
//     as LoadDone, AuthChecked, SnapshotDone and StreamReadDone. A
//     StreamHost's Snapshot is a truncation: storage saves Data as the
//     snapshot at Index and drops the entries up to it.
//  6. WakeMs: send a Tick no later than this (0 = nothing scheduled).
type Ready struct {
	Start          []SessionInit
	Bind           []Binding
	Persist        []Record
	PersistEntries []core.Entry
	Sends          []Send
	Close          []ConnID
	Out            []Envelope
	Load           []LoadRequest
	// Remove (Node): queues whose data the driver deletes, after Out is
	// delivered and before any later Load (msg_queueops.go).
	Remove []RemoveRequest
	// Unload (Node): drop each partition's Host and close its storage,
	// then answer UnloadDone (idle eviction, node_idle.go).
	Unload        []core.QueueID
	CheckPassword []PasswordCheck
	Snapshot      *SnapshotRequest
	// Reads (StreamHost): log reads for stream subscriptions behind the
	// tail ring; each is answered by a StreamReadDone with its Token.
	Reads []StreamRead
	// ResidentBytes (Host): the partition's resident payload bytes after
	// this step, for the broker-wide spill budget (Persisted.ResidentTotalBytes).
	ResidentBytes int64
	// Settled (Host): durable final outcomes, for metrics.
	Settled []core.Settlement
	// LeaseExpiries (Host): leases that ran out in this step, for metrics
	// (fibril_broker_expired_total, SPEC decisions).
	LeaseExpiries uint64
	// Counted (Session): what this step did that the broker's metrics
	// count (SPEC 13). Counting never decides anything.
	Counted SessionCounted
	// Quarantine (Node): the quarantine set, when this step changed it.
	Quarantine *QuarantineReport
	// Partitions (Node): the partition budget's figures, when this step
	// changed the declared total (and at the first step), for the
	// fibril_partitions_* gauges. Observation only.
	Partitions *PartitionFigures
	WakeMs     int64
}

// PartitionFigures is every queue's and stream's partitions together,
// loaded or not, against Config.PartitionsMax (node_catalog.go
// overPartitionBudget).
type PartitionFigures struct {
	Declared, Max int
}

// SessionCounted is what one Session step did that only the machine knows:
// a transport loss it now waits out, a grace that ran out, and the
// HELLO_OK it answered (with the resume outcome it told the client).
type SessionCounted struct {
	GraceEntered uint32
	GraceExpired uint32
	// HelloOks counts HELLO_OKs sent this step, by resume outcome (a wire
	// enum, append-only: the array grows with it).
	HelloOks [wire.ResumeResumedAfterRestart + 1]uint32
	// SubsOpened and SubsClosed count subscriptions (queue and stream) the
	// session took on and dropped this step: the driver's open gauge.
	SubsOpened, SubsClosed uint32
	// Reconciles counts RECONCILE_RESULTs sent this step; ReconcileOutcomes
	// their entries by outcome (ReconcileOutcome, session_surface.go).
	Reconciles        uint32
	ReconcileOutcomes [ReconcileOutcomeCount]uint32
}

// SessionInit is everything a new Session machine starts from.
type SessionInit struct {
	ID       SessionID
	ClientID [16]byte
	Token    [16]byte
	OwnerID  [16]byte
	// Runtime is the live runtime values the session starts with (nil:
	// the driver's config, for tests that build sessions by hand).
	Runtime *SessionRuntime
}

// Binding routes a connection's frames to a session from now on.
type Binding struct {
	Conn    ConnID
	Session SessionID
}

// Record is one entry of the Node's own log (catalogue, identities,
// skeletons), encoded by this package; storage frames and checksums it.
type Record struct {
	Index uint64
	Data  []byte
}

// Send is bytes (whole encoded frames) to append to a connection's outbox.
type Send struct {
	Conn  ConnID
	Bytes []byte
}

// LoadRequest asks the driver to open a partition's storage, recover it and
// start its Host, then answer LoadDone. Kind KindQueue: NewHost with Config
// and Settings. Kind KindStream: recover a stream.Partition with
// StreamConfig (stream.Load; a partition with no log yet is
// stream.NewPartition with Stream, the declared settings) and start
// NewStreamHost.
type LoadRequest struct {
	Queue    core.QueueID
	Config   core.Config // TagFloor and Epoch filled in by the Node
	Settings DeclareSettings
	// GlobalDLQ is the global dead-letter target in force (nil: none); the
	// Host brings the partition to it before any request.
	GlobalDLQ *core.DLQTarget
	Kind      PartitionKind
	// Truncate: cut the log at its first bad record (and report it in
	// LoadDone.Cut) instead of refusing it as damaged (node_quarantine.go).
	Truncate bool
	// Reload: the partition was evicted idle in this process and loads
	// again (counted by drivers, node_idle.go).
	Reload bool
	// KindStream only.
	StreamConfig stream.Config
	Stream       core.StreamSettings
}

// StreamRead asks storage for at most MaxEntries entries of a stream
// partition's log from FromIndex on (bodies resolved); the answer is a
// StreamReadDone with Token.
type StreamRead struct {
	Token      uint64
	FromIndex  uint64
	MaxEntries int
}

// PasswordCheck asks the driver to check a password against its user store
// (argon2id: a CPU job kept off the machine's step) and answer AuthChecked.
type PasswordCheck struct {
	Token    uint64
	Username string
	Password string
}

// SnapshotRequest (Host or Node) asks storage to write Data as the snapshot at Index once
// every entry up to Index is durable (it may be ahead of the durable index:
// snapshots are taken under load), keeping the blob files from
// KeepBlobsFrom on (0: keep none a snapshot covers), and to answer
// SnapshotDone.
type SnapshotRequest struct {
	Index         uint64
	Data          []byte
	KeepBlobsFrom uint64
}
