package node

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// Addresses and envelopes. Invariants:
//   - a ConnID or SessionID is never 0 and never reused (ConnID within a
//     process): 0 means "none" in every field that holds one, and a reused
//     id would let a stale report or envelope reach a newer connection or
//     session;
//   - AddrKind is append-only, like our other uint8 enums (STYLE 5): both
//     drivers and the simulator's traces use its values;
//   - machines talk only through Envelopes, delivered FIFO per (From, To)
//     pair (doc.go), never by calling each other.

// ConnID names one transport connection. The driver mints it, never reuses
// it within a process, and never uses 0.
type ConnID uint64

// SessionID names one Session machine. The Node mints it from its log-derived
// counter, so it never repeats across restarts either; 0 is never used.
type SessionID uint64

// AddrKind says which kind of machine an Address names. Append-only.
type AddrKind uint8

const (
	// Zero is left unused so that an Address{} (a missing field) is never
	// mistaken for the Node.
	AddrNode      AddrKind = 1
	AddrSession   AddrKind = 2
	AddrPartition AddrKind = 3
	// AddrAdmin names one operator request in flight (the admin API, the
	// simulator's operator): no machine lives there. The driver hands what
	// arrives for it, or bounces back from it, to whoever waits for that
	// request; nothing is ever stepped with it.
	AddrAdmin AddrKind = 4
)

// Address names one machine of a broker.
type Address struct {
	Kind    AddrKind
	Session SessionID    // AddrSession
	Queue   core.QueueID // AddrPartition
	Request uint64       // AddrAdmin: the driver's request number, never 0
}

// NodeAddr is the address of the broker's Node machine.
func NodeAddr() Address { return Address{Kind: AddrNode} }

// SessionAddr is the address of session id.
func SessionAddr(id SessionID) Address { return Address{Kind: AddrSession, Session: id} }

// PartitionAddr is the address of the Host of one queue partition.
func PartitionAddr(q core.QueueID) Address { return Address{Kind: AddrPartition, Queue: q} }

// AdminAddr is the address of operator request req (never 0).
func AdminAddr(req uint64) Address { return Address{Kind: AddrAdmin, Request: req} }

func (a Address) String() string {
	switch a.Kind {
	case AddrNode:
		return "node"
	case AddrSession:
		return fmt.Sprintf("session/%d", a.Session)
	case AddrPartition:
		return "partition/" + a.Queue.String()
	case AddrAdmin:
		return fmt.Sprintf("admin/%d", a.Request)
	}
	// An unknown kind still prints, with its number: String is used in panics
	// and traces, where hiding the value would hide the bug.
	return fmt.Sprintf("address(%d)", a.Kind)
}

// Envelope is one message from one machine to another. The driver delivers
// it as the receiver's Deliver input (FIFO per (From, To) pair), or hands it
// back to From as Bounced when To does not exist.
type Envelope struct {
	From Address
	To   Address
	Msg  Message
}
