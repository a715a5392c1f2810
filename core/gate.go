package core

// The durability gate. Invariants:
//   - every gated item waits for the entry appended just before it was gated,
//     so items leave in index order, which is also arrival order;
//   - nothing leaves before Persisted reports its index durable;
//   - the queue is bounded by the entries awaiting fsync, themselves bounded
//     by Config.UnpersistedEntriesMax for publishes.

type gatedKind uint8

const (
	gatedPublish    gatedKind = 1 // makes the offset deliverable; replies if confirm
	gatedReply      gatedKind = 2
	gatedSettlement gatedKind = 3
	gatedDeadLetter gatedKind = 4 // releases the dead-letter copy of offset
)

type gated struct {
	index   uint64
	kind    gatedKind
	confirm bool
	offset  uint64
	reply   Reply
	settle  Settlement
}

// gateQueue is a FIFO ring of gated items.
type gateQueue struct {
	buf  []gated
	head int
	n    int
}

func (q *gateQueue) push(g gated) {
	if q.n == len(q.buf) {
		size := max(2*len(q.buf), 64)
		next := make([]gated, size)
		for i := 0; i < q.n; i++ {
			next[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = next, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = g
	q.n++
}

func (q *gateQueue) front() *gated { return &q.buf[q.head] }

func (q *gateQueue) pop() {
	q.buf[q.head] = gated{}
	q.head = (q.head + 1) % len(q.buf)
	q.n--
}

// gate holds g until the last appended entry is durable.
func (p *Partition) gate(g gated) {
	g.index = p.lastIndex
	assertTrue(g.index > p.durableIndex || g.index == 0, "gated item waits for a non-durable entry")
	p.gated.push(g)
}

// releaseGated lets out every item whose entry is now durable.
func (p *Partition) releaseGated() {
	for p.gated.n > 0 {
		g := p.gated.front()
		if g.index > p.durableIndex {
			return
		}
		switch g.kind {
		case gatedPublish:
			assertTrue(g.offset == p.durableOffsetEnd, "publishes become durable in offset order")
			p.durableOffsetEnd = g.offset + 1
			if g.confirm {
				p.rd.Replies = append(p.rd.Replies, g.reply)
			}
		case gatedReply:
			p.rd.Replies = append(p.rd.Replies, g.reply)
		case gatedSettlement:
			p.rd.Settled = append(p.rd.Settled, g.settle)
		case gatedDeadLetter:
			// The message stays pending until DeadLetterDone, so it is live.
			if m := p.store.get(g.offset); m != nil && m.state == statePendingDLQ {
				p.emitDeadLetter(g.offset, m)
			}
		}
		p.gated.pop()
	}
}
