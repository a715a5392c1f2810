package node

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/transport/wire"
)

// Messages between machines. Invariants:
//   - the set is closed and each type names its sender and receiver; a
//     machine panics on a message it can never be sent;
//   - a message that asks for an answer carries a token (or an offset) the
//     answer echoes, and every such request is answered at most once;
//   - a receiver owns what an envelope points to once delivered: a sender
//     never writes a message again after handing it out.

// Message is what an Envelope carries: one of the types below. The set is
// closed; the comment on each says who sends it to whom.
type Message interface{ message() }

// ---- Node -> Session

// Attach gives a session a transport. The session answers the HELLO on it
// (HELLO_OK echoing HelloRequestID, with Outcome), holds its pushes until the
// handshake gate opens (PROTOCOL 3.1), replaces any previous transport, and
// resumes the subscriptions it paused while dormant. A session that has
// already ended answers AttachRefused instead.
type Attach struct {
	Conn           ConnID
	Loopback       bool
	HelloRequestID uint64
	Outcome        wire.ResumeOutcome
}

// Opened answers Open: the queue exists (perhaps created now, implicitly)
// with Partitions partitions and the requested one is loaded, or Err says
// why not (400 out of range, 500 failed to load, 500 too many queues).
//
// Kind says what the partition is: a queue partition (a Host) or a stream
// partition (a StreamHost, whose Queue has no group); the session routes
// by it. A topic is one or the other, never both.
type Opened struct {
	Token      uint64
	Queue      core.QueueID
	Partitions uint32
	Kind       PartitionKind
	Err        *core.Error
}

// PartitionKind says whether a partition is a queue's or a stream's.
// Append-only.
type PartitionKind uint8

const (
	KindQueue  PartitionKind = 0
	KindStream PartitionKind = 1
)

// Declared answers DeclareQueue once its catalogue entry is durable.
type Declared struct {
	Token      uint64
	Partitions uint32
	Err        *core.Error
}

// ShuttingDown tells a session the broker is draining: it pushes GOING_AWAY
// with GraceMs.
type ShuttingDown struct {
	GraceMs int64
	Message string
}

// ---- Session -> Node

// Open asks for a queue partition to be made usable: the queue is created
// with one partition if it was never declared (implicit queues, SPEC 1),
// and the partition is loaded. Exact partitions only: one out of range gets
// a 400.
//
// Stream says the requester needs a stream partition (SUBSCRIBE_STREAM):
// an undeclared topic is never created then, it gets a 404 (PROTOCOL 5.11
// step 3), and a queue's topic a 400. Without it a stream's topic opens
// the stream partition (a PUBLISH to a stream) and anything else opens, or
// implicitly creates, a queue.
type Open struct {
	Token     uint64
	Topic     string
	Group     string // normalised
	Partition uint32
	Stream    bool
}

// DeclareStream declares a stream (DECLARE_PLEXUS). Answered with Declared
// once the stream's record is durable: a re-declare with the same settings
// is idempotent, other settings get ErrStreamSettings (400), a queue's
// topic ErrTopicIsQueue (400).
type DeclareStream struct {
	Token    uint64
	Topic    string
	Settings core.StreamSettings
}

// DeclareQueue declares or redeclares a queue. Nil fields keep their value;
// the partition count of an existing queue never changes (the existing one
// is returned).
type DeclareQueue struct {
	Token          uint64
	Topic          string
	Group          string
	PartitionCount uint32
	DLQ            *core.DLQPolicy
	MaxRetries     *uint32
	DefaultTTLMs   *int64
}

// AttachRefused says the session had ended when Attach reached it; the Node
// then answers the HELLO with a fresh session (resume_not_found).
type AttachRefused struct {
	Conn           ConnID
	Loopback       bool
	HelloRequestID uint64
}

// SessionEnded says a session is over (grace expired, or no grace): the
// Node forgets it and its skeleton. It is the session's last envelope.
type SessionEnded struct{}

// SkeletonChanged records a session's queue subscription set, so that a
// restarted broker can answer resumed_after_restart (PROTOCOL 7.7). Sent
// after each SUBSCRIBE_OK and RECONCILE_RESULT; persisted best-effort.
type SkeletonChanged struct {
	Subs []SkeletonSub
}

// SkeletonSub is one queue subscription of a skeleton.
type SkeletonSub struct {
	Queue    core.QueueID
	Prefetch uint32
	AutoAck  bool
}

// ---- Session -> Host

// Request carries a client's partition input: *core.Publish, *core.Subscribe,
// *core.Unsubscribe, *core.Ack, *core.Nack or *core.PauseSubscription. The
// Host stamps NowMs and its own Ref; Token is the session's correlation,
// echoed in Response (0: the session expects no response).
type Request struct {
	Token uint64
	Input core.Input
}

// StreamRequest carries a client's stream partition input to a StreamHost:
// *stream.Subscribe, *stream.Unsubscribe, *stream.Ack or *stream.Credit
// (a PUBLISH to a stream arrives as a Request with a *core.Publish). The
// StreamHost stamps NowMs and its own Ref; Token as for Request.
type StreamRequest struct {
	Token uint64
	Input stream.Input
}

// ---- Host -> Session

// Response answers a Request that carried a Token.
type Response struct {
	Token uint64
	Reply core.Reply
}

// Responses carries, in order, several answers of one partition step to
// one session (a Persisted answers a round of publishes at once); the
// session takes them as that many Responses. The receiver owns Items.
type Responses struct {
	Items []Response
}

// Deliveries hands a batch of deliveries of one subscription to its
// session. Bodies are owned by the envelope (the driver resolves stored
// ones before the session sees them).
type Deliveries struct {
	Queue core.QueueID
	SubID uint64
	Items []core.Delivery
}

// StreamDeliveries hands a batch of one stream subscription's records of
// one partition step to its session (delivery_tag = offset). The receiver
// owns Items; bodies are shared with the partition, never mutated.
type StreamDeliveries struct {
	Stream core.QueueID
	SubID  uint64
	Items  []stream.Delivery
}

// StreamNotice tells a session what a stream partition reports about one
// of its subscriptions without a reply (retention clamped it forward); the
// session counts it, the wire has no frame for it.
type StreamNotice struct {
	Stream core.QueueID
	Notice stream.Notice
}

// SubscriptionEnded says the partition ended a subscription on its own side;
// the session pushes SUBSCRIPTION_CLOSED with Code (PROTOCOL 7.9) when its
// transport is up.
type SubscriptionEnded struct {
	Queue   core.QueueID
	SubID   uint64
	Code    wire.ReasonCode
	Message string
}

// ---- Host -> Node, Node -> Host (dead-letter forwarding)

// DeadLetterOut asks the Node to store a dead-letter copy in its target
// queue. The Node opens the target (partition Offset mod its count) and
// forwards StoreDeadLetter; on any failure it answers DeadLetterFailed.
type DeadLetterOut struct {
	Offset uint64
	Target core.DLQTarget
	Body   *core.Body
}

// StoreDeadLetter asks a target Host to publish a dead-letter copy (system,
// confirmed). Once durable the target sends DeadLetterStored to Source; a
// refusal sends DeadLetterFailed.
type StoreDeadLetter struct {
	Source core.QueueID
	Offset uint64
	Body   *core.Body
}

// DeadLetterStored says the copy of Offset is durable in its target: the
// source Host feeds core.DeadLetterDone.
type DeadLetterStored struct{ Offset uint64 }

// DeadLetterFailed says the copy of Offset could not be stored now; the
// source Host tries again after a backoff, never gives up.
type DeadLetterFailed struct {
	Offset uint64
	Err    *core.Error
}

// DeclareSettings brings a loaded partition's settings up to the catalogue's.
// A non-zero Seq asks the Host to answer SettingsApplied{Seq} once they are
// in force: the Node holds DECLARE_QUEUE_OK (Declared) and Opened answers
// until then, since envelopes of different senders may be delivered in any
// order and a publish must not reach the partition before the settings the
// client was told hold.
type DeclareSettings struct {
	DLQ          *core.DLQPolicy
	MaxRetries   *uint32
	DefaultTTLMs *int64
	Seq          uint64
}

// ---- Host -> Node

// SettingsApplied says the DeclareSettings with Seq (and every one before
// it) is in force in the partition.
type SettingsApplied struct{ Seq uint64 }

func (*Attach) message()            {}
func (*Opened) message()            {}
func (*Declared) message()          {}
func (*ShuttingDown) message()      {}
func (*Open) message()              {}
func (*DeclareQueue) message()      {}
func (*AttachRefused) message()     {}
func (*SessionEnded) message()      {}
func (*SkeletonChanged) message()   {}
func (*Request) message()           {}
func (*Response) message()          {}
func (*Responses) message()         {}
func (*Deliveries) message()        {}
func (*SubscriptionEnded) message() {}
func (*DeadLetterOut) message()     {}
func (*StoreDeadLetter) message()   {}
func (*DeadLetterStored) message()  {}
func (*DeadLetterFailed) message()  {}
func (*DeclareSettings) message()   {}
func (*SettingsApplied) message()   {}
func (*DeclareStream) message()     {}
func (*StreamRequest) message()     {}
func (*StreamDeliveries) message()  {}
func (*StreamNotice) message()      {}
