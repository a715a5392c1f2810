package node

import "github.com/fibril-go/fibril/core"

// A session's side of idle queue eviction (node_idle.go): it is a queue
// partition's publisher while it holds the partition open. Invariants:
//   - every Opened without an error it receives for a queue partition is
//     matched by one Forget sent to that partition when the open is
//     forgotten (bound, idle release, end) or at once when nobody wanted
//     it; a bounced request's open is dropped without one (the Host is
//     gone, and its count with it);
//   - a Forget follows every request sent under the open (FIFO per pair),
//     so once the Node hears of it nothing of this session is on its way
//     to the Host.

// forgetOpen drops the open of q, handing its grant back if it had one.
func (s *Session) forgetOpen(q core.QueueID) {
	o := s.opens[q]
	sessionAssert(o != nil, "forgetting an open the session has")
	sessionAssert(len(o.waiting) == 0 || !o.opened, "an opened partition has no requests waiting")
	delete(s.opens, q)
	if o.opened && o.kind == KindQueue {
		s.out(PartitionAddr(q), &Forget{})
	}
}

// forgetGrant hands back the grant of an Opened nobody waits for.
func (s *Session) forgetGrant(m *Opened) {
	if m.Err == nil && m.Kind == KindQueue {
		s.out(PartitionAddr(m.Queue), &Forget{})
	}
}

// onReleaseIdle forgets the open of m.Queue if it has gone unused for
// m.IdleMs and nothing of the session still needs it.
func (s *Session) onReleaseIdle(m *ReleaseIdle) {
	sessionAssert(m.IdleMs > 0, "an idle release names its timeout")
	o := s.opens[m.Queue]
	if o == nil || !o.opened || o.kind != KindQueue {
		return
	}
	if s.subs[m.Queue] != nil || s.nowMs-o.usedMs < m.IdleMs {
		return // in use: the session keeps it
	}
	s.forgetOpen(m.Queue)
}
