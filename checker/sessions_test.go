package checker

import (
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// The session checks, each quiet on a good history and firing on a
// minimal bad one (see check_test.go for the builder).

func sessionViolations(h *History, check string) []Violation {
	var out []Violation
	for _, v := range newSessionChecker(h).run() {
		if v.Check == check {
			out = append(out, v)
		}
	}
	return out
}

func TestAckedDeliveryNeverComesBackToTheClient(t *testing.T) {
	good := newBuilder().published(Event{}).subscribed(1, 1).delivered(5, 0, 2, clock0)
	good.add(Event{Kind: KindClientDeliver, Client: 2, MsgID: 1, Sub: 1, Tag: 5})
	good.add(Event{Kind: KindSettleCall, Client: 2, Op: 9, MsgID: 1, Sub: 1, Tag: 5, Action: ActionAck})
	if v := sessionViolations(&good.h, "acked_redelivered"); len(v) != 0 {
		t.Fatalf("good history flagged: %v", v)
	}
	good.add(Event{Kind: KindClientDeliver, Client: 2, MsgID: 1, Sub: 1, Tag: 5})
	if v := sessionViolations(&good.h, "acked_redelivered"); len(v) != 1 {
		t.Fatalf("a replayed acked delivery was not flagged: %v", v)
	}
}

func TestResumeWithinGraceFindsTheSession(t *testing.T) {
	b := newBuilder()
	b.h.Meta.ReconnectGraceMs = 1000
	b.add(Event{Kind: KindAttach, Client: 3, Outcome: "new"})
	b.add(Event{Kind: KindAttach, Client: 3, Outcome: "resumed", AtMs: 300, AtMs2: 200, Index2: 900})
	b.add(Event{Kind: KindAttach, Client: 3, Outcome: "resume_not_found", AtMs: 2500, AtMs2: 1500, Index2: 900})
	if v := sessionViolations(&b.h, "resume_within_grace"); len(v) != 0 {
		t.Fatalf("good history flagged: %v", v)
	}
	b.add(Event{Kind: KindAttach, Client: 3, Outcome: "resume_not_found", AtMs: 3000, AtMs2: 150, Index2: 900})
	if v := sessionViolations(&b.h, "resume_within_grace"); len(v) != 1 {
		t.Fatalf("a session lost within the grace was not flagged: %v", v)
	}
	// A crash since the last attach excuses it.
	b.add(Event{Kind: KindCrash, Text: "crash"})
	b.add(Event{Kind: KindAttach, Client: 3, Outcome: "resumed_after_restart", AtMs: 3200, AtMs2: 100, Index2: 900})
	if v := sessionViolations(&b.h, "resume_within_grace"); len(v) != 1 {
		t.Fatalf("a resume across a crash was flagged: %v", v)
	}
}

func TestLateAckSettles(t *testing.T) {
	mk := func(end core.EntryKind, cause uint8, nowMs int64) *History {
		b := newBuilder().published(Event{}).subscribed(1, 1).delivered(5, 0, 2, clock0)
		b.add(Event{Kind: KindSettleCall, Client: 2, Op: 9, MsgID: 1, Sub: 1, Tag: 5, Action: ActionAck, Trigger: "late"})
		b.entry(end, 3, nowMs, func(e *Event) { e.Cause = cause })
		return &b.h
	}
	if v := sessionViolations(mk(core.EntryAck, 0, clock0+10), "late_ack"); len(v) != 0 {
		t.Fatalf("a settled late ack was flagged: %v", v)
	}
	if v := sessionViolations(mk(core.EntryRequeue, core.CauseLeaseExpired, clock0+lease), "late_ack"); len(v) != 0 {
		t.Fatalf("a lease that expired before the late ack was flagged: %v", v)
	}
	v := sessionViolations(mk(core.EntryRequeue, core.CauseSubscriptionEnd, clock0+10), "late_ack")
	if len(v) != 1 || !strings.Contains(v[0].Detail, "late ack") {
		t.Fatalf("a lost late ack was not flagged: %v", v)
	}
}

func TestEndedSubscriptionRequeuesAtOnce(t *testing.T) {
	mk := func(cause uint8) *History {
		b := newBuilder().published(Event{}).subscribed(1, 1).delivered(5, 0, 2, clock0)
		b.add(Event{Kind: KindSubEnd, Sub: 1, Text: "unsubscribe"})
		b.entry(core.EntryRequeue, 3, clock0+lease, func(e *Event) { e.Cause = cause; e.Retries = 1 })
		return &b.h
	}
	if v := sessionViolations(mk(core.CauseSubscriptionEnd), "ended_sub_requeue"); len(v) != 0 {
		t.Fatalf("a requeue at the end was flagged: %v", v)
	}
	if v := sessionViolations(mk(core.CauseLeaseExpired), "ended_sub_requeue"); len(v) != 1 {
		t.Fatalf("an ended subscription's delivery left to expire was not flagged: %v", v)
	}
}

func TestDormantDeliveryReachesTheResumedClient(t *testing.T) {
	mk := func(received bool) *History {
		b := newBuilder().published(Event{})
		b.add(Event{Kind: KindAttach, Client: 2, Outcome: "new"})
		b.add(Event{Kind: KindSubscribeReturn, Client: 2, Op: 7, Sub: 1, Ok: true})
		b.add(Event{Kind: KindDisconnect, Client: 2})
		b.add(Event{Kind: KindConnClosed, Client: 2})
		b.add(Event{Kind: deliver, MsgID: 1, Tag: 5, Sub: 1, Index: 2, NowMs: clock0, AutoAck: true})
		b.add(Event{Kind: KindAttach, Client: 2, Outcome: "resumed"})
		if received {
			b.add(Event{Kind: KindClientDeliver, Client: 2, MsgID: 1, Sub: 1, Tag: 5})
		}
		return &b.h
	}
	if v := sessionViolations(mk(true), "dormant_delivery"); len(v) != 0 {
		t.Fatalf("a held delivery sent on resume was flagged: %v", v)
	}
	if v := sessionViolations(mk(false), "dormant_delivery"); len(v) != 1 {
		t.Fatalf("an auto-ack delivery lost in a dormant session was not flagged: %v", v)
	}
}

// The close of an old connection reported after the client resumed on a
// new one leaves the link up: deliveries on the new one are not dormant.
// Found by a sweep (steady, seed 1300 --swarm) once the order of envelopes
// changed.
func TestStaleConnClosedAfterResumeKeepsTheLinkUp(t *testing.T) {
	mk := func(closedConn uint64) *History {
		b := newBuilder().published(Event{})
		b.add(Event{Kind: KindAttach, Client: 2, Conn: 1, Outcome: "new"})
		b.add(Event{Kind: KindSubscribeReturn, Client: 2, Op: 7, Sub: 1, Ok: true})
		b.add(Event{Kind: KindDisconnect, Client: 2})
		b.add(Event{Kind: KindAttach, Client: 2, Conn: 2, Outcome: "resumed"})
		b.add(Event{Kind: KindConnClosed, Client: 2, Conn: closedConn})
		b.add(Event{Kind: deliver, MsgID: 1, Tag: 5, Sub: 1, Index: 2, NowMs: clock0, AutoAck: true})
		b.add(Event{Kind: KindAttach, Client: 2, Conn: 3, Outcome: "resumed"}) // and never gets it
		return &b.h
	}
	if v := sessionViolations(mk(1), "dormant_delivery"); len(v) != 0 {
		t.Fatalf("a delivery on the resumed connection was flagged after the old one's late close: %v", v)
	}
	if v := sessionViolations(mk(2), "dormant_delivery"); len(v) != 1 {
		t.Fatalf("a delivery after the current connection closed was not flagged: %v", v)
	}
}

// A late ack sent on a connection the broker then closed may be lost with
// it, before the client notices (seed 1909 --swarm, stalled-clients: a slow
// consumer cut at its outbox bound).
func TestLateAckOnAConnectionTheBrokerClosedMayBeLost(t *testing.T) {
	mk := func(closedConn uint64) *History {
		b := newBuilder().published(Event{})
		b.add(Event{Kind: KindAttach, Client: 2, Conn: 1, Outcome: "new"})
		b.subscribed(1, 1).delivered(5, 0, 2, clock0)
		b.add(Event{Kind: KindAttach, Client: 2, Conn: 2, Outcome: "resumed"})
		b.add(Event{Kind: KindSettleCall, Client: 2, Op: 9, MsgID: 1, Sub: 1, Tag: 5, Action: ActionAck, Trigger: "late"})
		b.add(Event{Kind: KindConnClosed, Client: 2, Conn: closedConn})
		b.entry(core.EntryRequeue, 3, clock0+10, func(e *Event) { e.Cause = core.CauseSubscriptionEnd })
		return &b.h
	}
	if v := sessionViolations(mk(2), "late_ack"); len(v) != 0 {
		t.Fatalf("a late ack lost with its connection was flagged: %v", v)
	}
	if v := sessionViolations(mk(1), "late_ack"); len(v) != 1 {
		t.Fatalf("a lost late ack on a live connection was not flagged: %v", v)
	}
}
