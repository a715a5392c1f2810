package sim

// The event queue orders everything that happens in a run. Invariants:
//   - events run in (atMs, seq) order, where seq is the order of scheduling,
//     so two events at the same millisecond run in the order they were
//     scheduled: no tie is ever broken by anything but the run itself;
//   - simulated time never goes back: an event scheduled in the past runs
//     now, after the events already due.
//
// How, for speed (the queue is the one thing every event goes through):
//   - the heap holds no pointers (time, seq and a slot in fns), so moving
//     its items costs no write barriers while the collector runs, and the
//     collector has nothing to scan in it;
//   - events scheduled for the millisecond the last pop ran at (most of
//     them: every input a Ready causes is scheduled for "now") skip the
//     heap and wait in a FIFO, which is already in seq order. pop takes the
//     smaller of the heap's top and the FIFO's head, so the order is exactly
//     the one a single heap gives.

type event struct {
	atMs int64
	seq  uint64
	run  func()
}

// queued is one heap item: fns[slot] runs at (atMs, seq).
type queued struct {
	atMs int64
	seq  uint64
	slot uint32
}

func (a *queued) before(b *queued) bool {
	if a.atMs != b.atMs {
		return a.atMs < b.atMs
	}
	return a.seq < b.seq
}

// eventQueue is a binary min-heap of events, plus the FIFO of events for
// the current millisecond.
type eventQueue struct {
	items   []queued
	fns     []func() // by slot; nil when free
	free    []uint32 // free slots of fns
	nextSeq uint64

	lastPopMs int64   // the time of the last event popped
	now       []event // FIFO: events at nowAtMs, in seq order
	nowHead   int     // the FIFO's first unpopped event
	nowAtMs   int64
}

func (q *eventQueue) len() int { return len(q.items) + len(q.now) - q.nowHead }

func (q *eventQueue) push(atMs int64, run func()) {
	q.nextSeq++
	if atMs == q.lastPopMs && (q.nowHead == len(q.now) || atMs == q.nowAtMs) {
		if q.nowHead == len(q.now) {
			q.now, q.nowHead, q.nowAtMs = q.now[:0], 0, atMs
		}
		q.now = append(q.now, event{atMs: atMs, seq: q.nextSeq, run: run})
		return
	}
	var slot uint32
	if n := len(q.free); n > 0 {
		slot = q.free[n-1]
		q.free = q.free[:n-1]
		q.fns[slot] = run
	} else {
		slot = uint32(len(q.fns))
		q.fns = append(q.fns, run)
	}
	q.items = append(q.items, queued{atMs: atMs, seq: q.nextSeq, slot: slot})
	s := q.items
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s[i].before(&s[parent]) {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

func (q *eventQueue) pop() event {
	if q.nowHead < len(q.now) {
		head := &q.now[q.nowHead]
		if len(q.items) == 0 || (&queued{atMs: head.atMs, seq: head.seq}).before(&q.items[0]) {
			ev := *head
			*head = event{} // drop the closure for the collector
			q.nowHead++
			q.lastPopMs = ev.atMs
			return ev
		}
	}
	s := q.items
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].before(&s[m]) {
			m = l
		}
		if r < len(s) && s[r].before(&s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[m], s[i] = s[i], s[m]
		i = m
	}
	q.items = s
	run := q.fns[top.slot]
	q.fns[top.slot] = nil // drop the closure for the collector
	q.free = append(q.free, top.slot)
	q.lastPopMs = top.atMs
	return event{atMs: top.atMs, seq: top.seq, run: run}
}
