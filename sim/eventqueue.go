package sim

// The event queue orders everything that happens in a run. Invariants:
//   - events run in (atMs, seq) order, where seq is the order of scheduling,
//     so two events at the same millisecond run in the order they were
//     scheduled: no tie is ever broken by anything but the run itself;
//   - simulated time never goes back: an event scheduled in the past runs
//     now, after the events already due.

type event struct {
	atMs int64
	seq  uint64
	run  func()
}

func (a *event) before(b *event) bool {
	if a.atMs != b.atMs {
		return a.atMs < b.atMs
	}
	return a.seq < b.seq
}

// eventQueue is a binary min-heap of events.
type eventQueue struct {
	items   []event
	nextSeq uint64
}

func (q *eventQueue) len() int { return len(q.items) }

func (q *eventQueue) push(atMs int64, run func()) {
	q.nextSeq++
	q.items = append(q.items, event{atMs: atMs, seq: q.nextSeq, run: run})
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

func (q *eventQueue) peekAtMs() int64 { return q.items[0].atMs }

func (q *eventQueue) pop() event {
	s := q.items
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = event{} // drop the closure for the collector
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
	return top
}
