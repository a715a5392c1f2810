package node

import "github.com/fibril-go/fibril/core"

// Operator messages about a queue's messages (the admin API's messages
// browse, queue-dlq, dlq replay and redrive; SPEC 2, 11). Each is sent by
// an operator request (From an AdminAddr) to the Node, which checks that the
// queue exists (an operator never creates one by asking about it), loads
// the partition if needed and relays the request to the partition's Host
// with ReplyTo set; the Host answers ReplyTo. Invariants:
//   - every request is answered exactly once, by its Host or, when the
//     queue is unknown or its partition cannot be reached, by the Node with
//     OperatorRefused;
//   - nothing here creates a queue;
//   - an answer's size is bounded: a page holds at most BrowseItemsMax items
//     and stops adding bodies past BrowseAnswerBytesMax.

// Browse bounds (the admin API's caps).
const (
	// BrowseItemsMax caps a page's items (limit).
	BrowseItemsMax = 5000
	// BrowsePreviewBytesMax caps the payload preview per item.
	BrowsePreviewBytesMax = 1 << 20
	// BrowseAnswerBytesMax bounds the payload and header bytes one page
	// carries: a page stops before the item that would pass it (the first
	// item is always taken), and next_offset_hint continues from there.
	BrowseAnswerBytesMax = 8 << 20
	// DeadLetterReadsMax caps the offsets of one ReadDeadLetters.
	DeadLetterReadsMax = 100
)

// BrowseStates is a set of message states (bit 1<<core.MessageState).
type BrowseStates uint8

// BrowseActive is every live state.
const BrowseActive = BrowseStates(1<<core.MessageReady | 1<<core.MessageDelayed | 1<<core.MessageInflight | 1<<core.MessagePendingDLQ)

// Has says whether s holds state.
func (s BrowseStates) Has(state core.MessageState) bool { return s&(1<<state) != 0 }

// ---- operator -> Node -> Host

// BrowseMessages asks for a page of one partition's messages from From in
// offset order: live ones in States, and settled offsets too when Settled.
// Limit is at most BrowseItemsMax; each body's payload preview is its first
// PreviewBytes (the driver cuts a stored payload once read back).
type BrowseMessages struct {
	Topic, Group string
	Partition    uint32
	From         uint64
	Limit        uint32
	States       BrowseStates
	Settled      bool
	Payload      bool // include payload previews
	PreviewBytes uint32
	// Set by the Node when it relays the request.
	ReplyTo    Address
	Partitions uint32
}

// ReadDeadLetters asks a dead-letter queue's partition what each of Offsets
// holds for a replay (at most DeadLetterReadsMax).
type ReadDeadLetters struct {
	Topic, Group string
	Partition    uint32
	Offsets      []uint64
	ReplyTo      Address // set by the Node
}

// ScanDeadLetters asks a dead-letter queue's partition for its next ready or
// delayed copies from From that match Filter, at most Limit of them (a
// redrive's page). Inflight copies are skipped: a consumer holds them.
type ScanDeadLetters struct {
	Topic, Group string
	Partition    uint32
	From         uint64
	Limit        uint32
	Filter       DeadLetterFilter
	ReplyTo      Address // set by the Node
}

// DeadLetterFilter selects dead-letter copies; a zero field matches all.
type DeadLetterFilter struct {
	Source       core.DLQTarget // Topic "" = any source
	SourceGroup  bool           // Source.Group is part of the filter
	Reason       string
	FromMs, ToMs int64 // dead_lettered_at_ms in [FromMs, ToMs]; ToMs 0 = no bound
}

// OperatorPublish publishes Body (confirmed, as a client's publish: no
// reserved headers) into Partition when ByPartition and the queue has it,
// else into partition Key mod its partition count. Answered with
// OperatorPublished once durable.
type OperatorPublish struct {
	Topic, Group string
	Key          uint64
	Partition    uint32
	ByPartition  bool
	Body         *core.Body
	ReplyTo      Address // set by the Node
}

// CompleteMessage settles a ready or delayed message of a partition
// (core.Complete). Answered with Completed once durable.
type CompleteMessage struct {
	Topic, Group string
	Partition    uint32
	Offset       uint64
	ReplyTo      Address // set by the Node
}

// SetQueueDLQ changes an existing queue's dead-letter policy (and
// MaxRetries when not nil) through the declare path (DeclareQueue): recorded
// in the catalogue, in force in every loaded partition before the answer.
// Answered with Declared, or OperatorRefused for an unknown queue.
type SetQueueDLQ struct {
	Topic, Group string
	DLQ          core.DLQPolicy
	MaxRetries   *uint32
}

// QueueSettingsOf asks the Node for a queue's catalogue settings; answered
// at once with QueueSettings (or OperatorRefused).
type QueueSettingsOf struct {
	Topic, Group string
}

// ---- Host or Node -> operator

// MessagesPage answers BrowseMessages. Items' bodies are shared with the
// partition (never mutated); a stored payload is read back by the driver
// before the answer leaves it. Next is the offset to continue from;
// NextOffset the partition's next publish offset.
type MessagesPage struct {
	Queue      core.QueueID
	Partitions uint32
	Items      []BrowseItem
	Next       uint64
	NextOffset uint64
}

// BrowseItem is one offset of a page. Live is false for a settled offset
// (only Offset is set then).
type BrowseItem struct {
	core.MessageView
	Live bool
	// PayloadLen is the whole payload's length (in memory or stored);
	// PreviewBytes how much of it the answer carries.
	PayloadLen   uint32
	PreviewBytes uint32
}

// DeadLetterReads answers ReadDeadLetters and ScanDeadLetters, one item per
// offset asked (or per match found), in order. Next is the offset a scan
// continues from (the partition's next offset once it reached the end).
type DeadLetterReads struct {
	Queue core.QueueID
	Items []DeadLetterRead
	Next  uint64
	Done  bool // the scan reached the partition's end
}

// DeadLetterRead is what a replay does with one offset: Skip says why not
// (SkipMissing, SkipInactive, SkipNoSource), else Body is the copy to
// publish to Source (stroma.dlq.* headers stripped; a stored payload is
// read back by the driver first).
type DeadLetterRead struct {
	Offset uint64
	Skip   string
	Info   core.DeadLetterInfo
	Body   *core.Body
}

// Why a replay skips an offset.
const (
	SkipMissing  = "missing"   // never published
	SkipInactive = "inactive"  // settled (or inflight, for a redrive's completion)
	SkipNoSource = "no_source" // no valid stroma.dlq.source_topic, or the source queue is gone
)

// OperatorPublished answers OperatorPublish: durable at Queue/Offset.
type OperatorPublished struct {
	Queue  core.QueueID
	Offset uint64
	Err    *core.Error
}

// Completed answers CompleteMessage.
type Completed struct {
	Offset uint64
	Err    *core.Error
}

// QueueSettings answers QueueSettingsOf: the catalogue's settings, nil
// where the queue declared none (the partition default applies).
type QueueSettings struct {
	Partitions   uint32
	DLQ          *core.DLQPolicy
	MaxRetries   *uint32
	DefaultTTLMs *int64
}

// OperatorRefused answers an operator request the Node could not relay:
// the queue is unknown (core.ErrQueueUnknown), the partition out of range or
// not loadable.
type OperatorRefused struct{ Err *core.Error }

func (*BrowseMessages) message()    {}
func (*ReadDeadLetters) message()   {}
func (*ScanDeadLetters) message()   {}
func (*OperatorPublish) message()   {}
func (*CompleteMessage) message()   {}
func (*SetQueueDLQ) message()       {}
func (*MessagesPage) message()      {}
func (*DeadLetterReads) message()   {}
func (*OperatorPublished) message() {}
func (*Completed) message()         {}
func (*QueueSettings) message()     {}
func (*QueueSettingsOf) message()   {}
func (*OperatorRefused) message()   {}
