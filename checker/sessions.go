package checker

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// Checks of what clients observe across dropped links, resumes and
// restarts (PROTOCOL 7.7), over the client-side events of the node-core
// driver (KindClientDeliver, KindAttach, settle calls marked late):
//   2  no acked delivery comes back: a client never receives again a
//      delivery (sub, tag) it already acked (a resumed session must not
//      replay what was settled);
//   7.7 a resume within the grace finds its session: a client that lost
//      an authenticated session's link and presents it again sooner than
//      the grace surely covers gets `resumed`, unless the broker crashed in
//      between;
//   7.7 after a session ends (grace expired), its deliveries come back at
//      once: the lease of every delivery its subscriptions held ends by
//      the requeue of the unsubscribe, not by lease expiry later;
//   7.7 new deliveries wait for a transport: an auto-ack delivery made
//      after the broker learned its session's connection was gone must
//      reach the client once it resumes (the defect: a dormant session was handed deliveries
//      that auto-ack settled and nobody saw), unless that link drops too;
//   7.7 a late ack settles: an ack sent on a resumed attachment for a tag
//      of an earlier one is what ends that lease, unless the lease expired
//      first or the link that carried it dropped before the lease ended.
// Old histories have none of these events, and the checks stay quiet.

type clientTag struct {
	client uint32
	part   int
	sub    uint64
	tag    uint64
}

type lateAck struct {
	key      msgKey
	client   uint32
	seq      uint64
	deadline int64 // node time the delivery's lease ran out
	dropped  bool  // the link that carried it dropped before the lease ended
}

type sessionChecker struct {
	h          *History
	violations []Violation
	acked      map[clientTag]uint64 // -> seq of the ack call
	delivered  map[tagKey]*Event    // node-side deliveries by (sub, tag)
	waiting    map[msgKey]lateAck   // late acks waiting for the lease-ending entry
	lastCrash  uint64               // seq of the last crash
	attachedAt map[uint32]uint64    // client -> seq of its last attach
	// held: node-side deliveries whose lease has not ended, by sub; ended:
	// those of a subscription that ended, waiting for their requeue.
	held  map[uint64]map[msgKey]bool
	ended map[msgKey]uint64 // -> seq of the sub end
	// Auto-ack deliveries made while the owner had no link: owner maps a
	// sub to its client, linkUp says whether a client is attached now,
	// dormant holds the deliveries (by sub and tag) until the client gets
	// them; expected marks those due on the client's current attachment.
	owner    map[uint64]uint32
	linkUp   map[uint32]bool
	linkConn map[uint32]uint64 // client -> connection of its last attach
	dormant  map[tagKey]*Event
	expected map[tagKey]bool
}

func newSessionChecker(h *History) *sessionChecker {
	return &sessionChecker{h: h, acked: map[clientTag]uint64{}, delivered: map[tagKey]*Event{}, waiting: map[msgKey]lateAck{}, attachedAt: map[uint32]uint64{},
		held: map[uint64]map[msgKey]bool{}, ended: map[msgKey]uint64{},
		owner: map[uint64]uint32{}, linkUp: map[uint32]bool{}, linkConn: map[uint32]uint64{}, dormant: map[tagKey]*Event{}, expected: map[tagKey]bool{}}
}

func (c *sessionChecker) fail(item int, check string, e *Event, subject, format string, args ...any) {
	c.violations = append(c.violations, Violation{Item: item, Check: check, Subject: subject, Seq: e.Seq,
		Detail: fmt.Sprintf(format, args...)})
}

func (c *sessionChecker) key(e *Event) msgKey {
	k := msgKey{part: e.Part, msgID: e.MsgID}
	if e.Part > 0 && c.h.QueueOf(e.Part).DeadLetterSink {
		k.offset = e.Offset
	}
	return k
}

func (c *sessionChecker) run() []Violation {
	for i := range c.h.Events {
		c.event(&c.h.Events[i])
	}
	for k, e := range c.dormant {
		if c.expected[k] {
			c.fail(1, "dormant_delivery", e, fmt.Sprintf("%s msg %d", c.h.PartName(e.Part), e.MsgID),
				"auto-ack delivery tag %d of sub %d was made while its client had no link, and the client never got it after resuming", e.Tag, e.Sub)
		}
	}
	return c.violations
}

// dormantEvent follows auto-ack deliveries made while the owner was away.
func (c *sessionChecker) dormantEvent(e *Event) {
	switch e.Kind {
	case KindSubscribeReturn:
		if e.Ok && e.Sub != 0 {
			c.owner[e.Sub] = e.Client
		}
	case KindDeliver:
		if client, ok := c.owner[e.Sub]; ok && e.AutoAck && !c.linkUp[client] {
			c.dormant[tagKey{e.Sub, e.Tag}] = e
		}
	case KindClientDeliver:
		k := tagKey{e.Sub, e.Tag}
		delete(c.dormant, k)
		delete(c.expected, k)
	case KindAttach:
		c.linkUp[e.Client] = true
		c.linkConn[e.Client] = e.Conn
		for k, d := range c.dormant {
			if c.owner[d.Sub] != e.Client {
				continue
			}
			if e.Outcome == "resumed" {
				c.expected[k] = true
			} else {
				delete(c.dormant, k) // a new session: the old one's deliveries are gone with it
				delete(c.expected, k)
			}
		}
	case KindConnClosed:
		// The broker knows: the session is dormant or ended, unless this is
		// the close of a connection the client had already replaced by a
		// resume (reported late, and stale for the session too).
		if e.Conn == 0 || e.Conn == c.linkConn[e.Client] {
			c.linkUp[e.Client] = false
		}
	case KindDisconnect:
		for k := range c.expected {
			if c.owner[k.sub] == e.Client {
				delete(c.expected, k) // still due on the next resumed attachment
			}
		}
	case KindCrash:
		// Sub ids start over in a new process: owners too.
		c.dormant, c.expected, c.owner = map[tagKey]*Event{}, map[tagKey]bool{}, map[uint64]uint32{}
	}
}

func (c *sessionChecker) event(e *Event) {
	c.dormantEvent(e)
	switch e.Kind {
	case KindCrash:
		if e.Seq > c.lastCrash {
			c.lastCrash = e.Seq
			c.acked = map[clientTag]uint64{} // sub ids and tags start over in a new process
			c.waiting = map[msgKey]lateAck{}
			c.held, c.ended = map[uint64]map[msgKey]bool{}, map[msgKey]uint64{}
		}
	case KindDeliver:
		c.delivered[tagKey{e.Sub, e.Tag}] = e
		if !e.AutoAck {
			if c.held[e.Sub] == nil {
				c.held[e.Sub] = map[msgKey]bool{}
			}
			c.held[e.Sub][c.key(e)] = true
		}
	case KindSubEnd:
		for k := range c.held[e.Sub] {
			c.ended[k] = e.Seq
		}
		delete(c.held, e.Sub)
	case KindSettleCall:
		c.settleCall(e)
	case KindClientDeliver:
		ct := clientTag{e.Client, e.Part, e.Sub, e.Tag}
		if seq, ok := c.acked[ct]; ok {
			c.fail(2, "acked_redelivered", e, fmt.Sprintf("%s msg %d", c.h.PartName(e.Part), e.MsgID),
				"client %d received delivery tag %d of sub %d again after acking it at #%d", e.Client, e.Tag, e.Sub, seq)
		}
	case KindAttach:
		c.attach(e)
	case KindDisconnect:
		// An ACK has no reply: one still on its way when its link drops may
		// be lost with it, and the client cannot tell.
		c.dropWaiting(e.Client)
	case KindConnClosed:
		// The same when the broker closes the client's current connection
		// (a slow consumer cut at its outbox bound): the client may learn it
		// only much later, after the frames it sent meanwhile were dropped.
		if e.Conn == 0 || e.Conn == c.linkConn[e.Client] {
			c.dropWaiting(e.Client)
		}
	case KindEntry:
		c.entry(e)
	}
}

// dropWaiting marks the late acks client still waits on as possibly lost.
func (c *sessionChecker) dropWaiting(client uint32) {
	for k, w := range c.waiting {
		if w.client == client {
			w.dropped = true
			c.waiting[k] = w
		}
	}
}

func (c *sessionChecker) settleCall(e *Event) {
	if e.Action != ActionAck || e.Client == 0 {
		return
	}
	c.acked[clientTag{e.Client, e.Part, e.Sub, e.Tag}] = e.Seq
	if e.Trigger != "late" {
		return
	}
	d := c.delivered[tagKey{e.Sub, e.Tag}]
	if d == nil || d.AutoAck {
		return
	}
	c.waiting[c.key(e)] = lateAck{key: c.key(e), client: e.Client, seq: e.Seq, deadline: d.NowMs + c.h.Meta.LeaseMs}
}

// entry: the first lease-ending entry after a late ack must be its ack,
// unless the lease had run out by then.
func (c *sessionChecker) entry(e *Event) {
	k := c.key(e)
	c.leaseEnded(e, k)
	w, ok := c.waiting[k]
	if !ok {
		return
	}
	delete(c.waiting, k)
	if w.dropped {
		return
	}
	switch core.EntryKind(e.EntryKind) {
	case core.EntryAck:
		return
	case core.EntryRequeue, core.EntryRelease, core.EntryDeadLetter, core.EntryDiscard:
		if e.NowMs >= w.deadline {
			return // the lease expired before the late ack arrived
		}
	default:
		return
	}
	c.fail(0, "late_ack", e, fmt.Sprintf("%s msg %d", c.h.PartName(e.Part), e.MsgID),
		"a late ack (#%d, on a resumed session) did not settle: the lease ended by entry kind %d at node time %d, before its deadline %d",
		w.seq, e.EntryKind, e.NowMs, w.deadline)
}

// leaseEnded: a lease-ending entry; one of an ended subscription's
// deliveries must end by its requeue, never by lease expiry.
func (c *sessionChecker) leaseEnded(e *Event, k msgKey) {
	kind := core.EntryKind(e.EntryKind)
	if kind != core.EntryAck && kind != core.EntryRequeue && kind != core.EntryDeadLetter && kind != core.EntryDiscard {
		return
	}
	for _, subs := range c.held {
		delete(subs, k)
	}
	seq, ok := c.ended[k]
	if !ok {
		return
	}
	delete(c.ended, k)
	if kind == core.EntryRequeue && e.Cause == core.CauseLeaseExpired {
		c.fail(3, "ended_sub_requeue", e, fmt.Sprintf("%s msg %d", c.h.PartName(e.Part), e.MsgID),
			"its subscription ended at #%d, but its lease ended only by expiring (the end did not requeue it)", seq)
	}
}

func (c *sessionChecker) attach(e *Event) {
	previous := c.attachedAt[e.Client]
	c.attachedAt[e.Client] = e.Seq
	if e.Index2 == 0 || e.Outcome == "resumed" {
		return
	}
	if e.AtMs2 >= int64(e.Index2) {
		return // past what the grace surely covers
	}
	// A crash since the session's last attach excuses it: the session
	// lived in the dead process (the skeleton is best-effort).
	if c.lastCrash > previous {
		return
	}
	c.fail(0, "resume_within_grace", e, fmt.Sprintf("client %d", e.Client),
		"resumed %dms after losing its link (grace %dms surely covers %dms) and got %s, not resumed",
		e.AtMs2, c.h.Meta.ReconnectGraceMs, e.Index2, e.Outcome)
}
