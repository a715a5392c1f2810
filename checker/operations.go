package checker

import (
	"sort"

	"github.com/anishathalye/porcupine"
	"github.com/fibril-go/fibril/core"
)

// Building porcupine operations from a history. Times are history sequence
// numbers: the simulator records in causal order, so a node event is an
// instant [seq, seq] and a client call is the interval [call seq, return seq]
// (or up to the end of the history when it never returned).

// msgKey names one message: a partition, its x-msg-id and, in a dead-letter
// sink where copies of one message may be stored twice, its offset.
type msgKey struct {
	part   int
	msgID  uint64
	offset uint64
}

// lifeGroup is one message's operations, in history order.
type lifeGroup struct {
	key msgKey
	ops []porcupine.Operation
}

type recoverMark struct {
	seq   uint64
	index uint64
}

// lifeBuilder turns a history into one operation list per message.
type lifeBuilder struct {
	h           *History
	groups      []*lifeGroup
	byKey       map[msgKey]*lifeGroup
	nextRecover map[msgKey]int
	recovers    [][]recoverMark // by partition
	publishes   map[uint64]publishRef
	endSeq      int64 // the return time of calls that never returned
}

// publishRef finds a publish call's operation when its return arrives.
type publishRef struct {
	key msgKey
	idx int
}

// lifecycleOps groups the history into one operation list per message.
func lifecycleOps(h *History) []*lifeGroup {
	b := &lifeBuilder{h: h, byKey: map[msgKey]*lifeGroup{}, nextRecover: map[msgKey]int{},
		recovers: make([][]recoverMark, len(h.Meta.Partitions)+1), publishes: map[uint64]publishRef{},
		endSeq: int64(len(h.Events) + 1)}
	for i := range h.Events {
		if e := &h.Events[i]; e.Kind == KindRecover {
			b.recovers[e.Part] = append(b.recovers[e.Part], recoverMark{seq: e.Seq, index: e.Index})
		}
	}
	for i := range h.Events {
		b.event(&h.Events[i])
	}
	// The first crash after a message's last operation decides whether its
	// last entries survived (a later one cannot take more of it).
	for _, g := range b.groups {
		marks := b.recovers[g.key.part]
		if i := b.nextRecover[g.key]; i < len(marks) {
			g.ops = append(g.ops, recoverOp(marks[i]))
		}
	}
	return b.groups
}

func recoverOp(m recoverMark) porcupine.Operation {
	return porcupine.Operation{Input: &lifeInput{kind: lifeRecover, seq: m.seq, index: m.index},
		Call: int64(m.seq), Return: int64(m.seq)}
}

// add appends an operation to k's list, first inserting the recoveries of
// its partition that happened since the message's previous operation.
func (b *lifeBuilder) add(k msgKey, seq uint64, client int, in *lifeInput) *porcupine.Operation {
	g := b.byKey[k]
	if g == nil {
		g = &lifeGroup{key: k}
		b.byKey[k] = g
		b.groups = append(b.groups, g)
	}
	marks := b.recovers[k.part]
	for b.nextRecover[k] < len(marks) && marks[b.nextRecover[k]].seq < seq {
		m := marks[b.nextRecover[k]]
		b.nextRecover[k]++
		if len(g.ops) > 0 { // before the message's first operation a crash cannot touch it
			g.ops = append(g.ops, recoverOp(m))
		}
	}
	in.seq = seq
	g.ops = append(g.ops, porcupine.Operation{ClientId: client, Input: in, Call: int64(seq), Return: int64(seq)})
	return &g.ops[len(g.ops)-1]
}

func (b *lifeBuilder) event(e *Event) {
	if e.Part == 0 || e.MsgID == 0 {
		return
	}
	q := b.h.QueueOf(e.Part)
	key := msgKey{part: e.Part, msgID: e.MsgID}
	if q.DeadLetterSink {
		key.offset = e.Offset
	}
	in := lifeInput{copy: q.DeadLetterSink, maxRetries: q.MaxRetries}
	switch e.Kind {
	case KindPublishCall:
		in.kind, in.outcome = lifePublish, publishUnknown
		op := b.add(key, e.Seq, int(e.Client), &in)
		op.Return = b.endSeq
		b.publishes[e.Op] = publishRef{key: key, idx: len(b.byKey[key].ops) - 1}
	case KindPublishReturn:
		if p, ok := b.publishes[e.Op]; ok {
			op := &b.byKey[p.key].ops[p.idx]
			op.Return = int64(e.Seq)
			op.Input.(*lifeInput).outcome = publishRefused
			if e.Ok {
				op.Input.(*lifeInput).outcome = publishOk
			}
		}
	case KindAccept:
		in.kind, in.index = lifeAccept, e.Index
		b.add(key, e.Seq, 0, &in)
	case KindConfirm:
		in.kind = lifeConfirm
		b.add(key, e.Seq, 0, &in)
	case KindDeliver:
		in.kind, in.index, in.tag, in.retries, in.nowMs = lifeDeliver, e.Index, e.Tag, e.Retries, e.NowMs
		in.deadlineMs, in.autoAck = e.NowMs+b.h.Meta.LeaseMs, e.AutoAck
		b.add(key, e.Seq, 0, &in)
	case KindEntry:
		in.kind, in.index, in.entryKind, in.cause = lifeEntry, e.Index, core.EntryKind(e.EntryKind), e.Cause
		in.retries, in.nowMs, in.trigger = e.Retries, e.NowMs, e.Trigger
		b.add(key, e.Seq, 0, &in)
	case KindSettled:
		in.kind, in.settled, in.nowMs = lifeSettled, e.Outcome, e.NowMs
		b.add(key, e.Seq, 0, &in)
	}
}

// fifoOps builds one push/pop operation list per ordered partition.
func fifoOps(h *History) [][]porcupine.Operation {
	type candidate struct {
		offset  uint64
		msgID   uint64
		pushSeq uint64
		popSeq  uint64
	}
	calls := map[msgKey]*Event{}
	cands := make([]map[uint64]*candidate, len(h.Meta.Partitions)+1) // by msgID
	for i := range h.Events {
		e := &h.Events[i]
		if e.Part == 0 || h.QueueOf(e.Part).DeadLetterSink || h.QueueOf(e.Part).DefaultTTLMs > 0 {
			continue
		}
		key := msgKey{part: e.Part, msgID: e.MsgID}
		switch e.Kind {
		case KindPublishCall:
			calls[key] = e
		case KindConfirm:
			call := calls[key]
			if call == nil || call.NotBeforeMs != 0 || call.HasTTL {
				continue
			}
			if cands[e.Part] == nil {
				cands[e.Part] = map[uint64]*candidate{}
			}
			if cands[e.Part][e.MsgID] == nil {
				cands[e.Part][e.MsgID] = &candidate{offset: e.Offset, msgID: e.MsgID, pushSeq: e.Seq}
			}
		case KindDeliver:
			if c := cands[e.Part][e.MsgID]; c != nil && c.popSeq == 0 {
				c.popSeq = e.Seq
			}
		}
	}
	var out [][]porcupine.Operation
	for part, byID := range cands {
		if len(byID) == 0 {
			continue
		}
		list := make([]*candidate, 0, len(byID))
		for _, c := range byID {
			list = append(list, c)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].offset < list[j].offset })
		var ops []porcupine.Operation
		for rank, c := range list {
			ops = append(ops, porcupine.Operation{Input: &fifoInput{kind: fifoPush, part: part, rank: rank, offset: c.offset, msgID: c.msgID, seq: c.pushSeq},
				Call: int64(c.pushSeq), Return: int64(c.pushSeq)})
			if c.popSeq != 0 {
				ops = append(ops, porcupine.Operation{Input: &fifoInput{kind: fifoPop, part: part, rank: rank, offset: c.offset, msgID: c.msgID, seq: c.popSeq},
					Call: int64(c.popSeq), Return: int64(c.popSeq)})
			}
		}
		sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
		out = append(out, ops)
	}
	return out
}
