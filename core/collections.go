package core

import "slices"

// Small ordered collections. Each is deterministic (no map iteration) and
// allocation-free in steady state: buffers grow and are reused.

func sortUint64s(xs []uint64) { slices.Sort(xs) }

// offsetQueue is a FIFO of offsets in increasing order: fresh publishes, which
// are first delivered in log order.
type offsetQueue struct {
	buf  []uint64
	head int
	n    int
}

func (q *offsetQueue) len() int { return q.n }

func (q *offsetQueue) push(x uint64) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)%len(q.buf)] = x
	q.n++
}

func (q *offsetQueue) front() uint64 {
	assertTrue(q.n > 0, "front of an empty offset queue")
	return q.buf[q.head]
}

func (q *offsetQueue) pop() uint64 {
	x := q.front()
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return x
}

func (q *offsetQueue) grow() {
	size := len(q.buf) * 2
	if size == 0 {
		size = 64
	}
	next := make([]uint64, size)
	for i := 0; i < q.n; i++ {
		next[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = next, 0
}

// offsetHeap is a min-heap of offsets: messages that became ready again, so
// older messages go first.
type offsetHeap []uint64

func (h *offsetHeap) push(x uint64) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if s[parent] <= s[i] {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

func (h offsetHeap) top() uint64 { return h[0] }

func (h *offsetHeap) pop() uint64 {
	s := *h
	x := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l] < s[m] {
			m = l
		}
		if r < len(s) && s[r] < s[m] {
			m = r
		}
		if m == i {
			break
		}
		s[m], s[i] = s[i], s[m]
		i = m
	}
	*h = s
	return x
}

// timer is a deadline for one message. Heaps of timers are lazily cleaned: an
// entry whose message no longer has that deadline is skipped when it surfaces.
type timer struct {
	atMs   int64
	offset uint64
}

func (a timer) before(b timer) bool {
	if a.atMs != b.atMs {
		return a.atMs < b.atMs
	}
	return a.offset < b.offset
}

// timerHeap is a min-heap of timers ordered by (atMs, offset).
type timerHeap []timer

func (h *timerHeap) push(t timer) {
	*h = append(*h, t)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s[i].before(s[parent]) {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

func (h timerHeap) top() timer { return h[0] }

func (h *timerHeap) pop() timer {
	s := *h
	x := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	s.siftDown(0)
	*h = s
	return x
}

func (h timerHeap) siftDown(i int) {
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].before(h[m]) {
			m = l
		}
		if r < len(h) && h[r].before(h[m]) {
			m = r
		}
		if m == i {
			return
		}
		h[m], h[i] = h[i], h[m]
		i = m
	}
}

// heapify restores heap order over arbitrary contents in O(n).
func (h timerHeap) heapify() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.siftDown(i)
	}
}
