package node

// Publish confirms in arrival order (PROTOCOL 7.2): PUBLISH_OK, or the
// confirm failure ERROR, for queue publishes leaves in the order the
// publishes arrived on the connection, across all queues, although each
// partition answers on its own. Invariants:
//   - confirms lists, in arrival order, the tokens of the current
//     attachment's confirmed publishes that reached the partition path;
//     a token answered out of turn waits in pending, marked done;
//   - rejections decided before the partition (decode errors, names,
//     reserved headers, a partition that cannot be opened) skip the order
//     and are sent at once, as Fibril does;
//   - the list belongs to one attachment: it is dropped with it (its
//     answers are dropped anyway), and bounded by pendingOpsMax;
//   - a done confirm is in pending only while it is in the live order:
//     dropping the order drops it too (else pending leaks toward its bound).

import "github.com/fibril-go/fibril/transport/wire"

// confirmsCompactMin: the consumed front of the confirm list is reclaimed
// once it is at least this long and half the list (amortised O(1)).
// 1024 keeps small lists from being copied at every release; below that
// the consumed front costs a few KiB at most.
const confirmsCompactMin = 1024

// confirmResult is a publish's answer waiting for its turn.
type confirmResult struct {
	done    bool
	failed  bool
	offset  uint64
	errCode wire.ErrorCode
	errMsg  string
}

// confirmQueued records a confirmed publish's place in the order.
func (s *Session) confirmQueued(token uint64) {
	sessionAssert(s.conn != 0, "a confirm queued with no connection")
	sessionAssert(len(s.confirms)-s.confirmsHead < pendingOpsMax, "the confirm order outgrew the pending bound")
	s.confirms = append(s.confirms, token)
}

// confirmDone records a publish's answer and sends every answer whose
// turn has come.
func (s *Session) confirmDone(token uint64, op pendingOp, result confirmResult) {
	sessionAssert(op.kind == opPublish, "a confirm for a request that is not a publish")
	sessionAssert(result.done, "a confirm recorded before its answer")
	// Its order went with its attachment (dropConfirms); a confirm now would
	// carry a request id the current connection never sent, and replies
	// are matched by id (PROTOCOL 7.1).
	if op.gen != s.gen || s.conn == 0 {
		delete(s.pending, token) // the asking connection is gone
		return
	}
	if s.confirmsHead < len(s.confirms) && s.confirms[s.confirmsHead] == token {
		// Its turn has come (the common case: one partition answers in
		// order): answer it now rather than store the answer in pending
		// and read it back (two map writes of a wide entry per publish).
		s.confirmsHead++
		delete(s.pending, token)
		s.sendConfirm(op.gen, op.requestID, result)
		s.releaseConfirms()
		return
	}
	op.confirm = result
	s.pending[token] = op
	s.releaseConfirms()
}

// sendConfirm sends one publish's answer in its turn.
func (s *Session) sendConfirm(gen, requestID uint64, result confirmResult) {
	sessionAssert(result.done, "a confirm sent before its answer")
	if result.failed {
		// A failed confirm takes its turn like a success: clients match confirms
		// in order, and an error out of turn would misattribute the failure.
		s.replyError(gen, wire.OpError, requestID, result.errCode, result.errMsg)
		return
	}
	s.publishOk = wire.PublishOk{Offset: result.offset} // session-owned: no allocation
	s.replyOn(gen, wire.OpPublishOk, requestID, &s.publishOk)
}

// releaseConfirms sends answers from the front of the order while they
// are done; a token no longer pending was answered out of order on
// purpose (an up-front rejection) and is skipped.
func (s *Session) releaseConfirms() {
	for s.confirmsHead < len(s.confirms) && s.conn != 0 {
		token := s.confirms[s.confirmsHead]
		op, ok := s.pending[token]
		if ok && !op.confirm.done {
			break // its partition has not answered yet
		}
		s.confirmsHead++
		if !ok {
			continue
		}
		delete(s.pending, token)
		s.sendConfirm(op.gen, op.requestID, op.confirm)
	}
	s.compactConfirms()
}

// compactConfirms reclaims the consumed front of the list.
func (s *Session) compactConfirms() {
	switch {
	case s.confirmsHead == len(s.confirms):
		s.confirms, s.confirmsHead = s.confirms[:0], 0
	case s.confirmsHead >= confirmsCompactMin && 2*s.confirmsHead >= len(s.confirms):
		n := copy(s.confirms, s.confirms[s.confirmsHead:])
		s.confirms, s.confirmsHead = s.confirms[:n], 0
	}
}

// dropConfirms forgets the order with its attachment. Answers that came
// out of turn (done) wait only here, so they go too: nothing else would
// ever take them out of pending. Those not answered yet stay: their
// partition's answer finds the attachment gone and forgets them.
func (s *Session) dropConfirms() {
	for _, token := range s.confirms[s.confirmsHead:] {
		if op, ok := s.pending[token]; ok && op.confirm.done {
			sessionAssert(op.gen == s.gen, "a done confirm of another attachment in the order")
			delete(s.pending, token)
		}
	}
	s.confirms, s.confirmsHead = s.confirms[:0], 0
}

// checkConfirms checks the order's invariants (CheckInvariants).
func (s *Session) checkConfirms() error {
	if s.conn == 0 && len(s.confirms) != 0 {
		return errorf("session %d: a confirm order with no connection", s.init.ID)
	}
	if s.confirmsHead > len(s.confirms) || len(s.confirms)-s.confirmsHead > pendingOpsMax {
		return errorf("session %d: confirm order head %d of %d", s.init.ID, s.confirmsHead, len(s.confirms))
	}
	queued := 0
	for _, token := range s.confirms[s.confirmsHead:] {
		op, ok := s.pending[token]
		if ok && (op.kind != opPublish || op.gen != s.gen) {
			return errorf("session %d: confirm order holds token %d of kind %d, attachment %d", s.init.ID, token, op.kind, op.gen)
		}
		if ok && op.confirm.done {
			queued++
		}
	}
	// A done confirm waits only in the live order: one outside it would
	// never be released nor forgotten (a leak that ends in 500s).
	done := 0
	for _, op := range s.pending {
		if op.confirm.done {
			done++
		}
	}
	if done != queued {
		return errorf("session %d: %d answered confirms wait in pending, %d of them in the confirm order", s.init.ID, done, queued)
	}
	return nil
}
