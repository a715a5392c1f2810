package node

import "github.com/fibril-go/fibril/core"

// Messages and inputs of idle queue eviction (SPEC 9, docs/idle.md).
// Invariants:
//   - every Opened without an error that a session receives is matched by
//     exactly one Forget to that partition (or the Opened bounced): the
//     Node counts a partition's publishers by grants minus PublisherGone;
//   - Forget travels to the partition, FIFO behind the session's requests,
//     and the Host relays it to the Node: once the Node hears it, every
//     request that session sent under that grant has reached the Host;
//   - a Host answers each UnloadCheck once, and after a yes it stays as it
//     is until the driver drops it (it ignores its timers: the Node keeps
//     its next deadline and reloads it then).

// ---- Node -> Host

// UnloadCheck asks a loaded partition whether it can be unloaded now: no
// subscriptions, leases, pending settles, replies owed or storage work
// (entries not durable, reads, dead-letter copies, a snapshot), and no
// activity for IdleAfterMs. The Host answers UnloadAnswer with Seq.
type UnloadCheck struct {
	Seq         uint64
	IdleAfterMs int64
}

// UnloadCancel takes back an UnloadCheck the Host said yes to: something
// came for the partition meanwhile (an Open, a dead-letter copy), or
// cleanup was turned off. The Host is in use again.
type UnloadCancel struct{ Seq uint64 }

// ---- Host -> Node

// UnloadAnswer answers an UnloadCheck. OK: the Host has stopped and waits
// to be dropped; WakeMs is its next timer deadline (delayed messages, TTL
// deadlines; 0: none), which the Node keeps to reload it in time. Not OK:
// Reason says which condition failed. Subscribers and IdleMs are what the
// Host saw (queues_debug).
type UnloadAnswer struct {
	Seq         uint64
	OK          bool
	Reason      string
	WakeMs      int64
	Subscribers int
	IdleMs      int64
}

// PublisherGone relays a session's Forget: Session no longer holds this
// partition open under one of its grants.
type PublisherGone struct {
	Session SessionID
}

// ---- Node -> Session

// ReleaseIdle asks a session to forget its open of Queue if it has not
// used it for IdleMs and no subscription of its uses it
// (publisher_idle_timeout_ms): an idle publisher then stops holding the
// queue loaded. The session answers nothing when it keeps the open.
type ReleaseIdle struct {
	Queue  core.QueueID
	IdleMs int64
}

// ---- Session -> Host

// Forget says the session forgot one grant of its open of this partition
// (its next use opens it again through the Node). The Host relays it as
// PublisherGone.
type Forget struct{}

func (*UnloadCheck) message()   {}
func (*UnloadCancel) message()  {}
func (*UnloadAnswer) message()  {}
func (*PublisherGone) message() {}
func (*ReleaseIdle) message()   {}
func (*Forget) message()        {}

// UnloadDone answers a Ready.Unload: the driver dropped the partition's
// Host and closed its storage (Err: it could not; the Host is gone all the
// same, and the next use loads it again from what storage holds).
type UnloadDone struct {
	NowMs int64
	Queue core.QueueID
	Err   error
}

func (in *UnloadDone) nowMs() int64 { return in.NowMs }

// ---- operator -> Node

// QueuesDebugRequest asks the Node for the eviction view of every queue
// partition (GET /admin/api/queues_debug); it answers QueuesDebug.
type QueuesDebugRequest struct{}

// QueuesDebug is that view: the cleanup settings in force, one row per
// catalogue partition (at most idleDebugRowsMax; Truncated says more
// exist) and the counters. PartitionsDeclared is every queue's and
// stream's partitions together, loaded or not, and PartitionsMax the
// budget they count against (Config.PartitionsMax): a declare that would
// pass it is refused, so an operator needs both to see how close it is.
type QueuesDebug struct {
	Cleanup            IdleCleanupConfig
	Rows               []QueueDebugRow
	Truncated          bool
	Counters           IdleCounters
	PartitionsDeclared int
	PartitionsMax      int
}

// QueueDebugRow is one partition. State: loaded, unloaded, loading or
// unloading. Subscribers and IdleMs are as the Host reported at the last
// check (0 if never checked); Publishers counts sessions holding it open
// (publishers and subscribers alike). LastCleanup: "evicted", "skipped:
// <reason>" or "" (never swept).
type QueueDebugRow struct {
	Queue       core.QueueID
	State       string
	Subscribers int
	Publishers  int
	IdleMs      int64
	LastCleanup string
}

func (*QueuesDebugRequest) message() {}
func (*QueuesDebug) message()        {}
