package stream

import "github.com/fibril-go/fibril/core"

// Inputs: the closed set of things that can happen to a stream partition.
// As in core, each carries NowMs (the driver's clock, Unix ms; the partition
// never reads a clock) and Ref is the driver's opaque correlation, echoed in
// the reply.

// Input is one of the types below.
type Input interface {
	nowMs() int64
}

// Publish appends one record.
type Publish struct {
	NowMs int64
	Ref   uint64
	Body  *core.Body
}

// StartKind is how an ephemeral subscription picks its first offset
// (PROTOCOL 5.11 stream_start). Wire enum: append-only.
type StartKind uint8

const (
	StartLatest   StartKind = 0
	StartEarliest StartKind = 1
	StartOffset   StartKind = 2 // Value = offset
	StartNBack    StartKind = 3 // Value = count
	StartByTime   StartKind = 4 // Value = Unix ms
)

// Start is a stream_start.
type Start struct {
	Kind  StartKind
	Value uint64
}

// Clause is one filter clause: the record has header Key and its value
// matches Pattern ('*' matches any run, nothing else is special).
type Clause struct {
	Key     string
	Pattern string
}

// Subscribe opens subscription SubID (allocated by the driver, unique while
// it lives). DurableName "" is an ephemeral subscription (Start applies);
// otherwise Start is ignored and the named cursor decides.
type Subscribe struct {
	NowMs       int64
	Ref         uint64
	SubID       uint64
	DurableName string
	Start       Start
	Filter      []Clause
	AutoAck     bool
}

// Unsubscribe ends a subscription. Its cursor keeps what it committed.
type Unsubscribe struct {
	NowMs int64
	Ref   uint64
	SubID uint64
}

// Ack acknowledges delivered offsets (delivery_tag = offset).
type Ack struct {
	NowMs   int64
	Ref     uint64
	SubID   uint64
	Offsets []uint64
}

// Credit gives back window: Records deliveries of SubID are queued on the
// connection.
type Credit struct {
	NowMs   int64
	SubID   uint64
	Records int
}

// Persisted says storage made every entry up to UpToIndex durable.
type Persisted struct {
	NowMs     int64
	UpToIndex uint64
}

// ReadDone answers a Read: the entries from its FromIndex on (bodies
// resolved), or Err. Token names the read it answers; a stale one is ignored.
type ReadDone struct {
	NowMs   int64
	SubID   uint64
	Token   uint64
	Entries []core.Entry
	Err     *core.Error
}

// Tick says time passed; the driver sends it at Ready.NextWakeMs.
type Tick struct{ NowMs int64 }

// SnapshotDone says storage saved the snapshot of the pending Truncate and
// dropped the entries up to Index.
type SnapshotDone struct {
	NowMs int64
	Index uint64
}

func (in *Publish) nowMs() int64      { return in.NowMs }
func (in *Subscribe) nowMs() int64    { return in.NowMs }
func (in *Unsubscribe) nowMs() int64  { return in.NowMs }
func (in *Ack) nowMs() int64          { return in.NowMs }
func (in *Credit) nowMs() int64       { return in.NowMs }
func (in *Persisted) nowMs() int64    { return in.NowMs }
func (in *ReadDone) nowMs() int64     { return in.NowMs }
func (in *Tick) nowMs() int64         { return in.NowMs }
func (in *SnapshotDone) nowMs() int64 { return in.NowMs }
