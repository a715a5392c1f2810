package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// admin delivers an operator envelope and returns the one answer sent to
// its address.
func (h *sessHarness) admin(req uint64, msg Message) (Message, *Ready) {
	h.t.Helper()
	rd := h.step(&Deliver{NowMs: h.now, Envelope: Envelope{From: AdminAddr(req), To: SessionAddr(sessTestID), Msg: msg}})
	var answer Message
	var rest []Envelope
	for _, env := range h.out {
		if env.To == AdminAddr(req) {
			if answer != nil {
				h.t.Fatalf("two answers to one operator request")
			}
			answer = env.Msg
			continue
		}
		rest = append(rest, env)
	}
	h.out = rest
	if answer == nil {
		h.t.Fatalf("no answer to the operator's %T", msg)
	}
	return answer, rd
}

func TestSessionInfoListsSubscriptionsAndChangesNothing(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q := core.QueueID{Topic: "t", Group: "g", Partition: 0}
	subID := h.subscribe(1, q, 3, false)
	h.takeOut()
	ans, rd := h.admin(1, &SessionInfoQuery{})
	info := ans.(*SessionInfo)
	if info.Conn != 1 || info.Dormant || !info.Authed || info.Ended || info.SubsTotal != 1 || len(info.Subs) != 1 {
		t.Fatalf("info %+v", info)
	}
	sub := info.Subs[0]
	if sub.SubID != subID || sub.Topic != "t" || sub.Group != "g" || sub.Prefetch != 3 || sub.AutoAck || sub.Kind != SubKindQueue {
		t.Fatalf("sub %+v", sub)
	}
	if len(rd.Sends) != 0 || len(rd.Close) != 0 || len(h.takeOut()) != 0 {
		t.Fatal("a query sent frames or envelopes")
	}
}

// A force-close tells the client (GOING_AWAY, grace 0), closes the
// connection, ends the session (no dormancy: its subscription is dropped
// at once, the partition told) and answers; an ended session answers
// without doing anything.
func TestForceCloseEndsTheSession(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	q := core.QueueID{Topic: "t", Partition: 0}
	subID := h.subscribe(1, q, 5, false)
	h.takeOut()
	ans, rd := h.admin(3, &CloseSession{Message: "closed by an operator"})
	closed := ans.(*SessionClosed)
	if closed.Conn != 1 || closed.WasDormant || closed.AlreadyEnded {
		t.Fatalf("answer %+v", closed)
	}
	ga := h.expect(1, wire.OpGoingAway).body.(wire.GoingAway)
	if ga.GraceMs != 0 || ga.Message != "closed by an operator" {
		t.Fatalf("GOING_AWAY %+v", ga)
	}
	if !h.closed[1] || !h.s.Ended() || rd.Counted.GraceEntered != 0 || rd.Counted.SubsClosed != 1 {
		t.Fatalf("closed %v ended %v counted %+v", h.closed[1], h.s.Ended(), rd.Counted)
	}
	unsubscribed := false
	for _, env := range h.takeOut() {
		if r, ok := env.Msg.(*Request); ok && env.To == PartitionAddr(q) {
			u, ok := r.Input.(*core.Unsubscribe)
			unsubscribed = ok && u.SubID == subID
		}
	}
	if !unsubscribed {
		t.Fatal("the partition was not told the subscription ended")
	}
	ans, _ = h.admin(4, &CloseSession{})
	if !ans.(*SessionClosed).AlreadyEnded {
		t.Fatalf("a second close: %+v", ans)
	}
	ans, _ = h.admin(5, &SessionInfoQuery{})
	if !ans.(*SessionInfo).Ended {
		t.Fatalf("info of an ended session: %+v", ans)
	}
}

func TestForceCloseOfDormantAndGatedSessions(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	h.connClosed(1)
	if !h.s.dormant {
		t.Fatal("not dormant")
	}
	ans, _ := h.admin(1, &SessionInfoQuery{})
	if info := ans.(*SessionInfo); !info.Dormant || info.Conn != 0 {
		t.Fatalf("dormant info %+v", info)
	}
	ans, _ = h.admin(2, &CloseSession{})
	if c := ans.(*SessionClosed); !c.WasDormant || c.Conn != 0 || !h.s.Ended() {
		t.Fatalf("dormant close %+v ended %v", c, h.s.Ended())
	}

	// Gate still closed (no TOPOLOGY or heartbeat yet): no push may reach
	// the connection, so it is closed without GOING_AWAY.
	g := newSessHarness(t, nil)
	g.attach(1, wire.ResumeNew)
	g.auth(1)
	g.admin(1, &CloseSession{Message: "x"})
	g.expectNothing(1)
	if !g.closed[1] || !g.s.Ended() {
		t.Fatal("a gated session was not closed")
	}
}

// A RECONCILE_RESULT is counted once, each entry by its outcome.
func TestReconcileOutcomesCounted(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	h.subscribe(1, core.QueueID{Topic: "kept"}, 1, true)
	h.takeOut()
	body := wire.ReconcileClient{Policy: wire.ReconcileConservative, Subscriptions: []wire.ReconcileSub{
		{SubID: 99, Topic: "gone", Prefetch: 1}}}
	payload := body.AppendTo(nil)
	rd := h.step(&Frame{NowMs: h.now, Conn: 1, Header: wire.Header{Opcode: wire.OpReconcileClient, RequestID: 50, Version: 1,
		PayloadSizeBytes: uint32(len(payload))}, Payload: payload})
	entries := h.expect(1, wire.OpReconcileResult).body.(wire.ReconcileResult).Entries
	if rd.Counted.Reconciles != 1 {
		t.Fatalf("reconciles counted %d", rd.Counted.Reconciles)
	}
	want := [ReconcileOutcomeCount]uint32{}
	for _, e := range entries {
		o, ok := reconcileOutcome(e.Code)
		if !ok {
			t.Fatalf("entry code %v has no outcome", e.Code)
		}
		want[o]++
	}
	if rd.Counted.ReconcileOutcomes != want || want[ReconcileRecreated] != 1 || want[ReconcileClientClosed] != 1 {
		t.Fatalf("outcomes %v, entries %+v", rd.Counted.ReconcileOutcomes, entries)
	}
}
