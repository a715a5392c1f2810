package checker

import (
	"testing"

	"github.com/fibril-go/fibril/core"
)

// Hand-built cohort histories (item 7): partitions 1 and 2 are orders/0 and
// orders/1 of a queue whose exclusive members form cohort "g"; partition 3
// is jobs/0, an ordinary queue. Each check stays quiet on a good history
// and fires on a minimal bad one.

const (
	orders0 = 1
	orders1 = 2
	jobs0   = 3
)

type cohortBuilder struct{ h History }

func newCohortBuilder() *cohortBuilder {
	return &cohortBuilder{h: History{Meta: Meta{Format: FormatVersion, Scenario: "unit", LeaseMs: 1000, PrefetchMax: 100,
		Queues:     []QueueSpec{{Topic: "orders", Partitions: 2, Cohort: "g"}, {Topic: "jobs", Partitions: 1}},
		Partitions: []PartitionSpec{{Queue: 0, Topic: "orders", Partition: 0}, {Queue: 0, Topic: "orders", Partition: 1}, {Queue: 1, Topic: "jobs"}}}}}
}

func (b *cohortBuilder) add(e Event) *cohortBuilder {
	e.Seq = uint64(len(b.h.Events) + 1)
	b.h.Events = append(b.h.Events, e)
	return b
}

// deliver: msg offset+1 at offset to sub, leased by entry index.
func (b *cohortBuilder) deliver(part int, sub, offset, index uint64) *cohortBuilder {
	return b.add(Event{Kind: KindDeliver, Node: 1, Part: part, Sub: sub, Offset: offset, MsgID: offset + 1, Tag: offset + 100, Index: index})
}

func (b *cohortBuilder) autoDeliver(part int, sub, offset, index uint64) *cohortBuilder {
	return b.add(Event{Kind: KindDeliver, Node: 1, Part: part, Sub: sub, Offset: offset, MsgID: offset + 1, Tag: offset + 100, Index: index, AutoAck: true})
}

func (b *cohortBuilder) entry(part int, kind core.EntryKind, offset, index uint64, cause uint8) *cohortBuilder {
	return b.add(Event{Kind: KindEntry, Node: 1, Part: part, Offset: offset, MsgID: offset + 1, Index: index, EntryKind: uint8(kind), Cause: cause})
}

func (b *cohortBuilder) crash(part int, recovered uint64) *cohortBuilder {
	b.add(Event{Kind: KindCrash, Node: 1})
	b.add(Event{Kind: KindCrash, Node: 1, Part: part, Index: recovered})
	return b.add(Event{Kind: KindRecover, Node: 1, Part: part, Index: recovered})
}

func (b *cohortBuilder) notice(client uint32, conn, generation uint64, assigned, added, revoked []uint32) *cohortBuilder {
	return b.add(Event{Kind: KindAssignment, Client: client, Conn: conn, Part: orders0, Index: generation, Text: memberOf(client),
		Assigned: assigned, Added: added, Revoked: revoked})
}

func (b *cohortBuilder) final(client uint32, conn uint64, ok bool, subscribed ...uint32) *cohortBuilder {
	return b.add(Event{Kind: KindCohortFinal, Client: client, Conn: conn, Part: orders0, Text: memberOf(client), Assigned: subscribed, Ok: ok})
}

func (b *cohortBuilder) end() *cohortBuilder {
	b.add(Event{Kind: KindPhase, Text: "final"})
	return b.add(Event{Kind: KindFinal, Node: 1, Part: orders0, Offset: 0, MsgID: 1, Outcome: OutcomeAcked})
}

func memberOf(client uint32) string { return string(rune('a'+client)) + "-member" }

func wantCohort(t *testing.T, name string, b *cohortBuilder, check string) {
	t.Helper()
	vs := newCohortChecker(&b.h).run()
	if check == "" {
		if len(vs) != 0 {
			t.Errorf("%s: want no violation, got %v", name, vs)
		}
		return
	}
	for _, v := range vs {
		if v.Check == check && v.Item == 7 {
			return
		}
	}
	t.Errorf("%s: want an item 7 %s violation, got %v", name, check, vs)
}

func TestCohortExclusive(t *testing.T) {
	ack, requeue := core.EntryAck, core.EntryRequeue
	wantCohort(t, "hand-over after the ack", newCohortBuilder().deliver(orders0, 1, 0, 2).entry(orders0, ack, 0, 3, 0).deliver(orders0, 2, 1, 4), "")
	wantCohort(t, "two holders", newCohortBuilder().deliver(orders0, 1, 0, 2).deliver(orders0, 2, 1, 3), "exclusive")
	wantCohort(t, "other partitions do not count", newCohortBuilder().deliver(orders0, 1, 0, 2).deliver(orders1, 2, 0, 2), "")
	wantCohort(t, "ordinary queues are not judged", newCohortBuilder().deliver(jobs0, 1, 0, 2).deliver(jobs0, 2, 1, 3), "")
	wantCohort(t, "one holder, many deliveries", newCohortBuilder().deliver(orders0, 1, 0, 2).deliver(orders0, 1, 1, 3), "")
	// A session's end (or an unsubscribe) requeues at once; a lease expiry
	// ends the holding when its requeue is written, not before.
	wantCohort(t, "after the unsubscribe's requeue", newCohortBuilder().deliver(orders0, 1, 0, 2).
		entry(orders0, requeue, 0, 3, core.CauseSubscriptionEnd).deliver(orders0, 2, 0, 4), "")
	wantCohort(t, "after the lease expired", newCohortBuilder().deliver(orders0, 1, 0, 2).
		entry(orders0, requeue, 0, 3, core.CauseLeaseExpired).deliver(orders0, 2, 0, 4), "")
	wantCohort(t, "after a dead-letter", newCohortBuilder().deliver(orders0, 1, 0, 2).
		entry(orders0, core.EntryDiscard, 0, 3, 0).deliver(orders0, 2, 1, 4), "")
	// Auto-ack deliveries hold nothing, but find nobody else holding.
	wantCohort(t, "auto-ack hand-over", newCohortBuilder().autoDeliver(orders0, 1, 0, 2).autoDeliver(orders0, 2, 1, 3), "")
	wantCohort(t, "auto-ack while another holds", newCohortBuilder().deliver(orders0, 1, 0, 2).autoDeliver(orders0, 2, 1, 3), "exclusive")
}

func TestCohortExclusiveAcrossCrashes(t *testing.T) {
	ack, requeue := core.EntryAck, core.EntryRequeue
	// The lease entry survived: the restarted partition holds it for nobody.
	wantCohort(t, "recovered lease", newCohortBuilder().deliver(orders0, 1, 0, 2).crash(orders0, 2).deliver(orders0, 7, 1, 3), "exclusive")
	wantCohort(t, "recovered lease, then its expiry", newCohortBuilder().deliver(orders0, 1, 0, 2).crash(orders0, 2).
		entry(orders0, requeue, 0, 3, core.CauseLeaseExpired).deliver(orders0, 7, 0, 4), "")
	// The lease entry was lost: it never happened.
	wantCohort(t, "lost lease", newCohortBuilder().deliver(orders0, 1, 0, 2).crash(orders0, 1).deliver(orders0, 7, 0, 2), "")
	// The ack was lost: the lease is back.
	wantCohort(t, "lost ack", newCohortBuilder().deliver(orders0, 1, 0, 2).entry(orders0, ack, 0, 3, 0).crash(orders0, 2).
		deliver(orders0, 7, 1, 3), "exclusive")
	wantCohort(t, "kept ack", newCohortBuilder().deliver(orders0, 1, 0, 2).entry(orders0, ack, 0, 3, 0).crash(orders0, 3).
		deliver(orders0, 7, 1, 4), "")
	// A second crash: what the first recovery made durable stays.
	wantCohort(t, "two crashes", newCohortBuilder().deliver(orders0, 1, 0, 2).entry(orders0, ack, 0, 3, 0).crash(orders0, 3).
		crash(orders0, 3).deliver(orders0, 7, 1, 4), "")
}

func TestCohortFirstDeliveryOrder(t *testing.T) {
	ack := core.EntryAck
	wantCohort(t, "in order", newCohortBuilder().deliver(orders0, 1, 0, 2).deliver(orders0, 1, 1, 3).deliver(orders0, 1, 2, 4), "")
	wantCohort(t, "out of order", newCohortBuilder().deliver(orders0, 1, 0, 2).deliver(orders0, 1, 2, 3).deliver(orders0, 1, 1, 4), "order")
	redelivery := newCohortBuilder().deliver(orders0, 1, 0, 2).deliver(orders0, 1, 1, 3).entry(orders0, core.EntryRequeue, 0, 4, core.CauseNack)
	redelivery.add(Event{Kind: KindDeliver, Node: 1, Part: orders0, Sub: 1, Offset: 0, MsgID: 1, Tag: 9, Index: 5, Retries: 1})
	wantCohort(t, "a redelivery is not a first delivery", redelivery, "")
	delayed := newCohortBuilder().add(Event{Kind: KindPublishCall, Client: 3, Part: orders0, MsgID: 2, NotBeforeMs: 500}).
		deliver(orders0, 1, 0, 2).entry(orders0, ack, 0, 3, 0).deliver(orders0, 1, 2, 4).deliver(orders0, 1, 1, 5)
	wantCohort(t, "a delayed message may come later", delayed, "")
}

func TestCohortNotices(t *testing.T) {
	good := newCohortBuilder().notice(1, 10, 5, []uint32{0, 1}, []uint32{0, 1}, nil).
		notice(1, 10, 6, []uint32{1}, nil, []uint32{0}).
		add(Event{Kind: KindAttach, Client: 1, Conn: 11, Outcome: "resumed"}).
		notice(1, 11, 6, []uint32{1}, []uint32{1}, nil).
		notice(2, 20, 6, []uint32{0}, []uint32{0}, nil)
	wantCohort(t, "good", good, "")
	wantCohort(t, "generation repeats on a connection", newCohortBuilder().notice(1, 10, 5, []uint32{0}, []uint32{0}, nil).
		notice(1, 10, 5, []uint32{0, 1}, []uint32{1}, nil), "notice")
	wantCohort(t, "added twice", newCohortBuilder().notice(1, 10, 5, []uint32{0}, []uint32{0}, nil).
		notice(1, 10, 6, []uint32{0}, []uint32{0}, nil), "notice")
	wantCohort(t, "revoked, never told", newCohortBuilder().notice(1, 10, 5, []uint32{0}, []uint32{0}, nil).
		notice(1, 10, 6, []uint32{0}, nil, []uint32{1}), "notice")
	wantCohort(t, "assigned does not follow", newCohortBuilder().notice(1, 10, 5, []uint32{0}, []uint32{0}, nil).
		notice(1, 10, 6, []uint32{0, 1}, nil, nil), "notice")
	wantCohort(t, "a first notice is the whole assignment", newCohortBuilder().notice(1, 10, 5, []uint32{0, 1}, []uint32{1}, nil), "notice")
	wantCohort(t, "out of range", newCohortBuilder().notice(1, 10, 5, []uint32{2}, []uint32{2}, nil), "notice")
	back := newCohortBuilder().notice(1, 10, 6, []uint32{0}, []uint32{0}, nil).
		add(Event{Kind: KindAttach, Client: 1, Conn: 11, Outcome: "resumed"}).notice(1, 11, 5, []uint32{0}, []uint32{0}, nil)
	wantCohort(t, "a resumed session goes back", back, "notice")
	fresh := newCohortBuilder().notice(1, 10, 6, []uint32{0}, []uint32{0}, nil).
		add(Event{Kind: KindAttach, Client: 1, Conn: 11, Outcome: "new"}).notice(1, 11, 5, []uint32{0}, []uint32{0}, nil)
	wantCohort(t, "a new session starts over", fresh, "")
}

func TestCohortCoverageAtTheEnd(t *testing.T) {
	split := func() *cohortBuilder {
		return newCohortBuilder().notice(1, 10, 5, []uint32{0}, []uint32{0}, nil).notice(2, 20, 5, []uint32{1}, []uint32{1}, nil)
	}
	wantCohort(t, "covered once", split().final(1, 10, true, 0, 1).final(2, 20, true, 0, 1).end(), "")
	wantCohort(t, "uncovered", newCohortBuilder().notice(1, 10, 5, []uint32{0}, []uint32{0}, nil).
		notice(2, 20, 5, nil, nil, nil).final(1, 10, true, 0, 1).final(2, 20, true, 0, 1).end(), "coverage")
	wantCohort(t, "twice", split().notice(2, 20, 6, []uint32{0, 1}, []uint32{0}, nil).final(1, 10, true, 0, 1).final(2, 20, true, 0, 1).end(), "coverage")
	wantCohort(t, "not subscribed", split().final(1, 10, true, 1).final(2, 20, true, 1).end(), "coverage")
	wantCohort(t, "never told on this connection", split().final(1, 11, true, 0, 1).final(2, 20, true, 0, 1).end(), "coverage")
	wantCohort(t, "a detached member is not judged", split().final(1, 11, false, 0, 1).final(2, 20, true, 1).end(), "")
	stuck := split().final(1, 10, true, 0, 1).final(2, 20, true, 0, 1).add(Event{Kind: KindDeadLock, Text: "stuck"}).end()
	stuck.add(Event{Kind: KindFinal, Node: 1, Part: orders1, Offset: 0, MsgID: 9, Outcome: OutcomeLive})
	wantCohort(t, "liveness", stuck, "liveness")
}

func TestRebalanceTimes(t *testing.T) {
	b := newCohortBuilder().
		add(Event{Kind: KindCohortJoin, Part: orders0, Sub: 1, Text: memberOf(1)}).
		add(Event{Kind: KindCohortJoin, Part: orders0, Sub: 2, Text: memberOf(2)}).
		add(Event{Kind: KindSetOwner, Part: orders0, Sub: 1, Index: 5}).
		add(Event{Kind: KindAccept, Part: orders0, MsgID: 1, Offset: 0, AtMs: 90}).
		add(Event{Kind: KindCohortLeave, Part: orders0, Sub: 2, Text: memberOf(2), AtMs: 95}). // not the owner
		add(Event{Kind: KindCohortLeave, Part: orders0, Sub: 1, Text: memberOf(1), AtMs: 100}).
		add(Event{Kind: KindSetOwner, Part: orders0, Sub: 2, Index: 6, AtMs: 101}).
		add(Event{Kind: KindAssignment, Client: 2, Conn: 20, Part: orders0, Index: 6, Text: memberOf(2), Assigned: []uint32{0}, Added: []uint32{0}, AtMs: 150}).
		add(Event{Kind: KindDeliver, Part: orders0, Sub: 2, MsgID: 1, Offset: 0, AtMs: 180})
	got := RebalanceTimes(&b.h)
	if len(got) != 1 || got[0].Part != orders0 || got[0].NoticeMs != 50 || got[0].DeliveryMs != 80 {
		t.Fatalf("rebalance times %+v, want one of 50 ms to the notice and 80 ms to the delivery", got)
	}
}
