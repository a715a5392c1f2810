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

// ordered is what a minHeap holds: a type that knows its own order.
type ordered[T any] interface {
	before(T) bool
}

// minHeap is a binary min-heap: requeued offsets (older first) and timers
// (earliest first).
type minHeap[T ordered[T]] []T

func (h *minHeap[T]) push(x T) {
	*h = append(*h, x)
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

func (h minHeap[T]) top() T { return h[0] }

func (h *minHeap[T]) pop() T {
	s := *h
	x := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	s.siftDown(0)
	*h = s
	return x
}

func (h minHeap[T]) siftDown(i int) {
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
func (h minHeap[T]) heapify() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.siftDown(i)
	}
}

// readyOffset orders requeued offsets: the oldest message goes first.
type readyOffset uint64

func (a readyOffset) before(b readyOffset) bool { return a < b }

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

type (
	offsetHeap = minHeap[readyOffset]
	timerHeap  = minHeap[timer]
)
