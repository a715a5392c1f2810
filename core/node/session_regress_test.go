package node

// Regression tests for defects a review found in the Session machine; each
// was seen failing before its fix.

import (
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// A confirm answered out of turn (done, waiting for an earlier one) must
// leave pending when its attachment goes: before the fix it stayed for
// ever, and after enough resumes every confirmed publish got 500.
func TestSessionDoneConfirmLeavesPendingWithItsAttachment(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q1, q2 := qid("a", 0), qid("b", 0)
	h.frame(1, wire.OpPublish, wire.Publish{Topic: "a", RequireConfirm: true, Payload: []byte("x")})
	h.takeOpen(q1, 1, nil)
	r1 := h.takeRequest(q1)
	h.frame(1, wire.OpPublish, wire.Publish{Topic: "b", RequireConfirm: true, Payload: []byte("y")})
	h.takeOpen(q2, 1, nil)
	r2 := h.takeRequest(q2)
	// b answers first: its confirm waits behind a's.
	h.fromPartition(q2, &Response{Token: r2.Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 1}})
	h.connClosed(1) // dormant
	h.fromPartition(q1, &Response{Token: r1.Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: 1}})
	h.attach(2, wire.ResumeResumed)
	if n := len(h.s.pending); n != 0 {
		t.Fatalf("pending holds %d entries after both publishes were answered and their attachment is gone: %+v", n, h.s.pending)
	}
}
