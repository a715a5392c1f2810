package node

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
)

// Entry points. Invariants:
//   - each machine is stepped by one driver context at a time and answers
//     with a Ready valid until its next Step (doc.go);
//   - machines never call each other: every effect on another machine is
//     an Envelope in Ready.Out;
//   - these signatures are what io/broker and sim both code against, so a
//     change here is a change to both drivers.

// The three machines' entry points. This file fixes their signatures, which
// both drivers (io/broker, sim) code against; each machine's state and
// handlers live in files of its own (node_*.go, session_*.go, host_*.go).

// Node is the broker-wide machine: connection admission and handshakes, the
// session directory, the catalogue, partition loading, identities and
// session skeletons, and dead-letter routing. One per broker.
//
//	n, err := NewNode(cfg, snapshot, recovered, entropy)
//	rd := n.Step(in)
//
// snapshot (nil: none) and recovered are the Node's log as storage gave it
// back: its newest snapshot (Ready.Snapshot) and the records after it, in
// index order; entropy mints the owner id on first boot. A new Node
// persists a boot record first: it issues no LoadRequest before that record
// is durable, so every partition's TagFloor comes from a durable boot count.

// Session is one client session (PROTOCOL 7.7). The driver creates it for a
// Ready.Start and drops it after it sent SessionEnded (Ended reports true).

// Host is one loaded queue partition: the core.Partition and everything the
// driver must not decide about it (reply and delivery routing, dead-letter
// forwarding and its retries, when to snapshot, which payloads to spill).
// The driver creates it for a LoadRequest, from the partition recovered
// from storage.

// StreamHost is one loaded stream partition: the stream.Partition and its
// routing (host_stream.go). The driver creates it for a LoadRequest of kind
// KindStream (NewStreamHost) and answers its Reads with StreamReadDone.

var (
	_ interface {
		Step(Input) *Ready
		CheckInvariants() error
	} = (*Node)(nil)
	_ interface {
		Step(Input) *Ready
		CheckInvariants() error
		Ended() bool
	} = (*Session)(nil)
	_ interface {
		Step(Input) *Ready
		CheckInvariants() error
		Partition() *core.Partition
	} = (*Host)(nil)
	_ interface {
		Step(Input) *Ready
		CheckInvariants() error
		Partition() *stream.Partition
	} = (*StreamHost)(nil)
)
