package checker

import "fmt"

// The per-partition FIFO model: first deliveries happen in publish order
// among the messages the core promises to order. The core always hands out
// the lowest ready offset, and fresh publishes become ready in offset order
// when they become durable, so for messages that are
//   - confirmed (so durable: their offsets are never reused after a crash),
//   - not delayed (no not_before) and without any TTL (per message or queue
//     default), so nothing but delivery takes them out of ready,
//   - published by a client into a work queue (not a dead-letter sink),
// the first delivery of each happens in offset order. Redeliveries are not
// ordered (a retry goes back by offset among ready ones) and are not
// checked. Operations are node instants: the confirm release (push) and the
// first delivery (pop) of each eligible message, by rank in offset order.

type fifoOpKind uint8

const (
	fifoPush fifoOpKind = iota + 1
	fifoPop
)

type fifoInput struct {
	kind   fifoOpKind
	part   int
	rank   int // position among the partition's eligible offsets
	offset uint64
	msgID  uint64
	seq    uint64
}

// fifoState: ranks [popped, pushed) are confirmed and not yet delivered.
type fifoState struct {
	pushed int
	popped int
}

func (s fifoState) step(in *fifoInput) (fifoState, string) {
	switch in.kind {
	case fifoPush:
		if in.rank != s.pushed {
			return s, fmt.Sprintf("confirm of offset %d out of offset order (rank %d, expected %d)", in.offset, in.rank, s.pushed)
		}
		s.pushed++
	case fifoPop:
		switch {
		case in.rank >= s.pushed:
			return s, fmt.Sprintf("offset %d first delivered before its confirm was released", in.offset)
		case in.rank != s.popped:
			return s, fmt.Sprintf("offset %d (msg %d) first delivered while an older eligible message (rank %d) was still waiting", in.offset, in.msgID, s.popped)
		}
		s.popped++
	}
	return s, ""
}

func (in *fifoInput) describe() string {
	if in.kind == fifoPush {
		return fmt.Sprintf("confirm offset %d (msg %d)", in.offset, in.msgID)
	}
	return fmt.Sprintf("first delivery offset %d (msg %d)", in.offset, in.msgID)
}

func (s fifoState) describe() string {
	return fmt.Sprintf("waiting ranks [%d,%d)", s.popped, s.pushed)
}
