package node

import (
	"testing"

	"github.com/fibril-go/fibril/transport/wire"
)

// Regression tests for review findings on the Node machine (each failed
// before its fix).

// An identical re-declare must not be answered while the record of the
// declare it repeats is not durable: a crash would take the settings back
// after the client was told they hold.
func TestNodeRedeclareWaitsForTheRecordItRepeats(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	h.deliver(SessionAddr(1), &DeclareQueue{Token: 1, Topic: "q", PartitionCount: 1})
	h.autoPersist = false
	e := h.deliver(SessionAddr(1), &DeclareQueue{Token: 2, Topic: "q", PartitionCount: 1, MaxRetries: u32(3)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 0 {
		t.Fatalf("the changing declare was answered before durable: %+v", d)
	}
	e = h.deliver(SessionAddr(2), &DeclareQueue{Token: 3, Topic: "q", PartitionCount: 1, MaxRetries: u32(3)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 0 {
		t.Fatalf("the repeat (token %d) was answered while the record it repeats is not durable (durable %d, last %d)",
			d[0].Token, h.durable, h.log[len(h.log)-1].Index)
	}
	// Once durable both are answered, in arrival order.
	d, to := envelopesOf[*Declared](h.persist())
	if len(d) != 2 || d[0].Token != 2 || d[1].Token != 3 || to[1] != SessionAddr(2) {
		t.Fatalf("answers once durable: %+v to %v", d, to)
	}
	// And with everything durable, a repeat is answered at once.
	e = h.deliver(SessionAddr(2), &DeclareQueue{Token: 4, Topic: "q", MaxRetries: u32(3)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 1 || len(e.persist) != 0 {
		t.Fatalf("a repeat of a durable declare: %+v, %d records", d, len(e.persist))
	}
}

// A live session's skeleton never expires, however long ago its last
// SUBSCRIBE was: it is what a restart needs (review finding 6). After a
// crash the client still has at least (1 - 1/skeletonRefreshDivisor) of
// the TTL to resume, measured from the crash.
func TestNodeSkeletonOfALiveSessionOutlivesTheTTL(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, e := h.hello(nil)
	init := e.start[0]
	h.deliver(SessionAddr(sid), &SkeletonChanged{Subs: []SkeletonSub{{Queue: qid("q", 0), Prefetch: 1}}})
	for elapsedMs := int64(0); elapsedMs < 5*h.cfg.ResumeRestartTTLMs; elapsedMs += 1000 {
		h.tick(1000)
		if h.n.state.skeletons[init.ClientID] == nil {
			t.Fatalf("the skeleton of a live session was removed %d ms after its subscribe", elapsedMs+1000)
		}
	}
	h.restart(9)
	h.tick(0)
	h.tick(h.cfg.ResumeRestartTTLMs - h.cfg.ResumeRestartTTLMs/skeletonRefreshDivisor - 1)
	_, _, at, _ := h.hello(identityOf(h.n.OwnerID(), init))
	if at.Outcome != wire.ResumeResumedAfterRestart {
		t.Fatalf("resume within the TTL after a restart of a session live until the crash: outcome %d", at.Outcome)
	}
}

// A skeleton its session no longer holds (the process that had it live
// crashed) still expires at the TTL, and a session restored from one keeps
// it fresh again.
func TestNodeRestoredSkeletonIsRefreshedAndAnUnclaimedOneExpires(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, a, _, ea := h.hello(nil)
	_, b, _, eb := h.hello(nil)
	initA, initB := ea.start[0], eb.start[0]
	h.deliver(SessionAddr(a), &SkeletonChanged{})
	h.deliver(SessionAddr(b), &SkeletonChanged{})
	h.restart(9)
	h.tick(0)
	h.tick(1000)
	if _, _, at, _ := h.hello(identityOf(h.n.OwnerID(), initA)); at.Outcome != wire.ResumeResumedAfterRestart {
		t.Fatalf("outcome %d", at.Outcome)
	}
	for elapsedMs := int64(0); elapsedMs < 3*h.cfg.ResumeRestartTTLMs; elapsedMs += 5000 {
		h.tick(5000)
	}
	if h.n.state.skeletons[initB.ClientID] != nil {
		t.Fatal("an unclaimed skeleton outlived the TTL")
	}
	sk := h.n.state.skeletons[initA.ClientID]
	if sk == nil || h.now-sk.savedAtMs > h.cfg.ResumeRestartTTLMs/skeletonRefreshDivisor {
		t.Fatalf("the restored session's skeleton is not kept fresh: %+v (now %d)", sk, h.now)
	}
}

// A declare that changes a loaded partition's settings is answered only
// once that partition says they are in force; a partition loaded with
// older settings answers its Opens only once it has the new ones (review
// finding 7).
func TestNodeDeclaredAndOpenedWaitForTheSettingsToApply(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.deliver(SessionAddr(sid), &DeclareQueue{Token: 1, Topic: "jobs", PartitionCount: 2})
	h.openQueue(sid, "jobs", 1)
	e := h.deliver(SessionAddr(sid), &Open{Token: 5, Topic: "jobs", Partition: 0})
	if len(e.load) != 1 {
		t.Fatal("no load of partition 0")
	}
	e = h.deliver(SessionAddr(sid), &DeclareQueue{Token: 2, Topic: "jobs", MaxRetries: u32(7)})
	ds, to := envelopesOf[*DeclareSettings](e)
	if len(ds) != 1 || to[0] != PartitionAddr(qid("jobs", 1)) || ds[0].Seq == 0 {
		t.Fatalf("settings to the loaded partition: %+v to %v", ds, to)
	}
	if d, _ := envelopesOf[*Declared](e); len(d) != 0 {
		t.Fatalf("Declared left with the settings, before jobs/1 applied them: %+v", d)
	}
	e = h.step(&Deliver{NowMs: h.now, Envelope: Envelope{From: PartitionAddr(qid("jobs", 1)), To: NodeAddr(), Msg: &SettingsApplied{Seq: ds[0].Seq}}})
	if d, _ := envelopesOf[*Declared](e); len(d) != 1 || d[0].Token != 2 {
		t.Fatalf("Declared once jobs/1 applied the settings: %+v", e.out)
	}
	// jobs/0 loaded with the settings of its LoadRequest: its Open waits.
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("jobs", 0)})
	ds, _ = envelopesOf[*DeclareSettings](e)
	if len(ds) != 1 || ds[0].Seq == 0 {
		t.Fatalf("settings at LoadDone: %+v", ds)
	}
	if o, _ := envelopesOf[*Opened](e); len(o) != 0 {
		t.Fatalf("Opened left with the settings, before jobs/0 applied them: %+v", o)
	}
	// A bounced DeclareSettings (the Host is gone) releases what waits.
	e = h.step(&Bounced{NowMs: h.now, Envelope: Envelope{From: NodeAddr(), To: PartitionAddr(qid("jobs", 0)), Msg: ds[0]}})
	if o, _ := envelopesOf[*Opened](e); len(o) != 1 || o[0].Token != 5 {
		t.Fatalf("Opened once the settings' envelope bounced: %+v", e.out)
	}
}

// Session ids never repeat across restarts, a crash before the reservation
// of the next ids is durable included (review finding 12: the counter
// restarted at 0 every boot).
func TestNodeSessionIDsNeverRepeatAcrossRestarts(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	seen := map[SessionID]bool{}
	for boot := 0; boot < 4; boot++ {
		for i := 0; i < 3; i++ {
			_, sid, _, _ := h.hello(nil)
			if seen[sid] {
				t.Fatalf("boot %d: session id %d handed out again", boot, sid)
			}
			seen[sid] = true
		}
		h.restart(byte(20 + boot))
		h.tick(0)
	}
	// A restart whose own records are lost (crash before any fsync) still
	// starts above every id handed out.
	h.autoPersist = false
	h.restart(40)
	h.restart(41)
	h.autoPersist = true
	h.tick(0)
	if _, sid, _, _ := h.hello(nil); seen[sid] {
		t.Fatalf("after a lost boot: session id %d handed out again", sid)
	}
}

// Past the durable reservation a HELLO is refused (ERROR 500, retry)
// rather than handed an id a crash could hand out again; once the next
// reservation is durable sessions start again.
func TestNodeSessionIDsWaitForTheirReservation(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	h.autoPersist = false
	h.n.lastSessionID = h.n.sessionIDsDurable - 1 // white box: one id left
	_, sid, _, e := h.hello(nil)
	if sid != h.n.sessionIDsDurable || len(e.persist) != 1 {
		t.Fatalf("the last reserved id: session %d, %d records (a reservation ahead of need)", sid, len(e.persist))
	}
	id := h.open()
	e = h.step(helloFrame(h.now, id, 1, nil))
	if f := decodeSends(t, e.sends); len(e.start) != 0 || len(f) != 1 || f[0].body.Code != wire.CodeInternal || len(e.close) != 1 {
		t.Fatalf("a HELLO past the durable reservation: starts %+v, frames %+v", e.start, f)
	}
	h.persist()
	h.autoPersist = true
	if _, next, _, _ := h.hello(nil); next != sid+1 {
		t.Fatalf("after the reservation: session %d, want %d", next, sid+1)
	}
}
