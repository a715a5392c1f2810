package node

import (
	"github.com/fibril-go/fibril/core"
)

// Operator queue operations (issue 12, SPEC 11): the messages an AdminAddr
// request exchanges with the Node and the Hosts, and the Node's removal
// effect. Invariants:
//   - every request below is answered exactly once, to its From (an
//     AdminAddr; ReplyTo for the ones the Node relays); a request for a
//     machine that does not exist bounces to the driver, which answers its
//     caller (ErrNoSuchMachine), and a relayed one bounces to the Node,
//     which refuses it (OperatorRefused);
//   - the decisions (may this queue be deleted, what a purge removes, where
//     an operator's publish goes) are made by the machine addressed; the
//     driver only carries the request and reads the answer;
//   - answers carry copies: nothing in them points into machine state.

// ---- Admin -> Node

// ListQueues asks the Node for its catalogue: every declared queue (loaded
// or not) and stream, with which partitions are loaded. Answered with a
// QueueList. Nothing is loaded to answer it.
type ListQueues struct{}

// QueueList answers ListQueues, queues and streams each in name order.
type QueueList struct {
	OwnerID [16]byte
	Queues  []QueueInfo
	Streams []StreamInfo
}

// QueueInfo is one queue of the catalogue. Nil settings were never declared
// (the partition's defaults apply). Loaded has one flag per partition.
type QueueInfo struct {
	Topic, Group string
	Partitions   uint32
	DLQ          *core.DLQPolicy
	MaxRetries   *uint32
	DefaultTTLMs *int64
	Loaded       []bool
}

// StreamInfo is one declared stream, Loaded as for QueueInfo.
type StreamInfo struct {
	Topic    string
	Settings core.StreamSettings
	Loaded   []bool
}

// DeleteQueue asks the Node to delete a queue: refused while any loaded
// partition holds an inflight message, otherwise recorded durably, the
// partitions stopped (their subscribers told SUBSCRIPTION_CLOSED 20
// topic_deleted) and the data deleted by the driver after the record is
// durable. Answered with QueueDeleteResult once durable (or refused).
type DeleteQueue struct {
	Topic, Group string
}

// DeleteOutcome says how a DeleteQueue ended. Append-only.
type DeleteOutcome uint8

const (
	DeleteDone     DeleteOutcome = 1 // the removal record is durable
	DeleteNotFound DeleteOutcome = 2 // no such queue
	DeleteInUse    DeleteOutcome = 3 // Inflight messages are leased
	DeleteBusy     DeleteOutcome = 4 // the queue is being created, loaded, declared or deleted: retry
	DeleteInvalid  DeleteOutcome = 5 // a bad name
)

// QueueDeleteResult answers DeleteQueue.
type QueueDeleteResult struct {
	Outcome  DeleteOutcome
	Inflight int    // DeleteInUse: how many, over all loaded partitions
	Reason   string // DeleteBusy, DeleteInvalid: what to do
}

// ---- Node -> Host, Host -> Node (deletion)

// InflightQuery asks a Host how many of its messages are inflight; it
// answers InflightCount with Token.
type InflightQuery struct{ Token uint64 }

// InflightCount answers InflightQuery.
type InflightCount struct {
	Token    uint64
	Inflight int
}

// PartitionDeleted tells a Host its queue's removal is durable: it ends
// every subscription (SUBSCRIPTION_CLOSED 20 topic_deleted) and refuses
// every later request; the driver then stops it and deletes its data.
type PartitionDeleted struct{}

// ---- Admin -> Node -> Host

// PurgeQueue asks for one partition of a queue to be purged (core.Purge:
// ready and delayed messages go, inflight stay). An operator sends it to
// the Node, which loads the partition and relays it to the Host with
// ReplyTo set, as it relays the messages family's requests
// (node_messages.go): the operator never holds an open of the partition,
// so idle eviction is not pinned by it, and nothing of the operator's can
// reach a Host that agreed to be unloaded. Answered with Purged by the Host
// once durable, or OperatorRefused by the Node (an unknown queue,
// ErrQueueUnknown; a partition out of range; a failed load).
type PurgeQueue struct {
	Topic, Group string
	Partition    uint32
	ReplyTo      Address // set by the Node
}

// Purged answers PurgeQueue.
type Purged struct {
	Count uint64
	Err   *core.Error
}

// AdminPublish asks for Body to be published to a queue partition as the
// operator's test message (confirmed: answered once durable, through the
// partition's own publish path). It is a system publish: the broker adds
// its own fibril.test header, which a client may not set. Sent to the
// Node and relayed as PurgeQueue is, except that an unknown queue is
// created implicitly (one partition), as a session's publish would.
// Answered with AdminPublished by the Host, or OperatorRefused by the Node.
type AdminPublish struct {
	Topic, Group string
	Partition    uint32
	Body         *core.Body
	ReplyTo      Address // set by the Node
}

// ObserveQuery asks a Host for its HostObservation now (a listing that
// found no stored observation of a loaded partition); answered with
// Observation.
type ObserveQuery struct{}

// Observation answers ObserveQuery.
type Observation struct{ HostObservation }

// AdminPublished answers AdminPublish.
type AdminPublished struct {
	Queue  core.QueueID
	Offset uint64
	Err    *core.Error
}

func (*ListQueues) message()        {}
func (*QueueList) message()         {}
func (*DeleteQueue) message()       {}
func (*QueueDeleteResult) message() {}
func (*InflightQuery) message()     {}
func (*InflightCount) message()     {}
func (*PartitionDeleted) message()  {}
func (*PurgeQueue) message()        {}
func (*Purged) message()            {}
func (*AdminPublish) message()      {}
func (*AdminPublished) message()    {}
func (*ObserveQuery) message()      {}
func (*Observation) message()       {}

// ---- the removal effect and its report

// RemoveRequest (Node Ready.Remove) asks the driver to stop the queue's
// loaded partitions (after delivering the envelopes of the same Ready) and
// delete every partition's data of the queue, then answer RemoveDone. It is
// emitted only once the queue's removal record is durable, and again after
// a restart for every removal whose RemoveDone was not recorded.
type RemoveRequest struct {
	Topic, Group string
}

// RemoveDone reports a RemoveRequest carried out (Err: the data could not
// be deleted and the driver gave up, closing; the name stays unusable until
// a restart asks again). The production driver retries a failed deletion
// with a backoff before it reports.
type RemoveDone struct {
	NowMs        int64
	Topic, Group string
	Err          error
}

func (in *RemoveDone) nowMs() int64 { return in.NowMs }
