package node

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// One test per rule of the Node (brief and PROTOCOL 3.2, 7.7).

func TestNodeFirstStepPersistsTheBootRecord(t *testing.T) {
	n, err := NewNode(testNodeConfig(), nil, nil, entropyOf(1))
	if err != nil {
		t.Fatal(err)
	}
	rd := n.Step(&Tick{NowMs: 5})
	if len(rd.Persist) != 3 || rd.Persist[0].Index != 1 {
		t.Fatalf("want the boot record at index 1, the first session ids and the runtime seeds, got %+v", rd.Persist)
	}
	r, err := decodeRecord(rd.Persist[0].Data)
	if err != nil || r.kind != recordBoot || r.boot != 1 || r.ownerID != n.OwnerID() {
		t.Fatalf("boot record %+v (%v), owner %x", r, err, n.OwnerID())
	}
	r, err = decodeRecord(rd.Persist[1].Data)
	if err != nil || r.kind != recordSessionIDs || r.sessionIDCeiling != sessionIDsBlock {
		t.Fatalf("session id reservation %+v (%v)", r, err)
	}
	if n.OwnerID() == ([16]byte{}) {
		t.Fatal("no owner id minted on first boot")
	}
}

func TestNodeOwnerIDSurvivesRestartsAndBootCounts(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	owner := h.n.OwnerID()
	for boot := uint64(2); boot <= 4; boot++ {
		h.restart(byte(boot))
		h.tick(0)
		if h.n.OwnerID() != owner {
			t.Fatalf("boot %d: owner id changed", boot)
		}
		if h.n.Boot() != boot {
			t.Fatalf("boot counter %d, want %d", h.n.Boot(), boot)
		}
	}
}

func TestNodeNoLoadBeforeTheBootRecordIsDurable(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.restart(2) // the sessions are gone; a new process
	h.autoPersist = false
	h.tick(0)
	// A HELLO before the boot record is durable is held, not answered.
	id := h.open()
	e := h.step(helloFrame(h.now, id, 1, nil))
	if len(e.out) != 0 || len(e.start) != 0 || len(e.sends) != 0 {
		t.Fatalf("answered a HELLO before the boot record was durable: %+v", e)
	}
	e = h.persist()
	newSID, at := attachIn(t, e)
	if at.Outcome != wire.ResumeNew || newSID == 0 {
		t.Fatalf("held HELLO answered with %+v", at)
	}
	_ = sid
	// Every partition of this boot gets TagFloor = boot << 40.
	h.autoPersist = true
	e = h.deliver(SessionAddr(newSID), &Open{Token: 1, Topic: "jobs"})
	if len(e.load) != 1 || e.load[0].Config.TagFloor != 2<<40 || e.load[0].Config.Epoch != 1 || e.load[0].Config.Queue != qid("jobs", 0) {
		t.Fatalf("load request %+v", e.load)
	}
}

func TestNodeAdmissionRefusesPastConnectionsMax(t *testing.T) {
	cfg := testNodeConfig()
	cfg.ConnectionsMax = 2
	h := newNodeHarness(t, cfg)
	a, b := h.open(), h.open()
	e := h.step(&ConnOpened{NowMs: h.now, Conn: 3})
	f := decodeSends(t, e.sends)
	if len(f) != 1 || f[0].op != wire.OpError || f[0].body.Code != wire.CodeInternal || !strings.Contains(f[0].body.Message, "at most 2") {
		t.Fatalf("third connection answered %+v", f)
	}
	if len(e.close) != 1 || e.close[0] != 3 {
		t.Fatalf("third connection not closed: %+v", e.close)
	}
	h.step(&ConnClosed{NowMs: h.now, Conn: 3}) // the refused one, reported
	h.step(&ConnClosed{NowMs: h.now, Conn: a})
	if e := h.step(&ConnOpened{NowMs: h.now, Conn: 4}); len(e.close) != 0 {
		t.Fatal("a closed connection still counted")
	}
	_ = b
}

func TestNodeHandshakeTimeoutClosesAStalledConnection(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	stalled := h.open()
	e := h.tick(h.cfg.HandshakeTimeoutMs - 1)
	if len(e.close) != 0 {
		t.Fatal("closed before the handshake deadline")
	}
	if e.wakeMs != h.now+1 {
		t.Fatalf("wake %d, want the handshake deadline %d", e.wakeMs, h.now+1)
	}
	done, _, _, _ := h.hello(nil) // opened later, and completes its HELLO
	e = h.tick(1)
	if len(e.close) != 1 || e.close[0] != stalled {
		t.Fatalf("want the stalled connection closed, got %v", e.close)
	}
	if e := h.tick(10 * h.cfg.HandshakeTimeoutMs); len(e.close) != 0 {
		t.Fatalf("closed a connection that completed its HELLO (%d): %v", done, e.close)
	}
}

func TestNodeFirstFrameChecksInOrder(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	cases := []struct {
		name  string
		frame func(ConnID) *Frame
		op    wire.Opcode
		code  wire.ErrorCode
		text  string
	}{
		{"not HELLO", func(id ConnID) *Frame {
			return &Frame{NowMs: h.now, Conn: id, Header: wire.Header{Opcode: wire.OpPublish, RequestID: 7}}
		}, wire.OpError, wire.CodeInvalid, "expected HELLO as the first frame"},
		{"bad body", func(id ConnID) *Frame {
			return &Frame{NowMs: h.now, Conn: id, Header: wire.Header{Opcode: wire.OpHello, RequestID: 7}, Payload: []byte("FHL1x")}
		}, wire.OpError, wire.CodeInvalid, "malformed HELLO: "},
		{"version 2", func(id ConnID) *Frame {
			payload := wire.Hello{ProtocolVersion: 2}.AppendTo(nil)
			return &Frame{NowMs: h.now, Conn: id, Header: wire.Header{Opcode: wire.OpHello, RequestID: 7}, Payload: payload}
		}, wire.OpHelloErr, wire.CodeUnsupportedVersion, "unsupported protocol version 2"},
		{"broken stream", func(id ConnID) *Frame {
			return &Frame{NowMs: h.now, Conn: id, Header: wire.Header{Opcode: wire.OpHello, RequestID: 7}, Err: errors.New("frame too large")}
		}, wire.OpError, wire.CodeInvalid, "malformed frame: frame too large"},
	}
	for _, c := range cases {
		id := h.open()
		e := h.step(c.frame(id))
		f := decodeSends(t, e.sends)
		if len(f) != 1 || f[0].op != c.op || f[0].body.Code != c.code || f[0].requestID != 7 || !strings.HasPrefix(f[0].body.Message, c.text) {
			t.Fatalf("%s: answered %+v", c.name, f)
		}
		if len(e.close) != 1 || e.close[0] != id || len(e.start) != 0 {
			t.Fatalf("%s: not closed (%v) or a session started (%v)", c.name, e.close, e.start)
		}
		// What a closing connection still sends is dropped.
		if e := h.step(helloFrame(h.now, id, 8, nil)); len(e.sends) != 0 || len(e.start) != 0 {
			t.Fatalf("%s: a closing connection was answered again", c.name)
		}
	}
}

func TestNodeNewSessionIsStartedBoundAndAttached(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	id, sid, at, e := h.hello(nil)
	if len(e.start) != 1 || e.start[0].ID != sid || e.start[0].OwnerID != h.n.OwnerID() || sid != 1 {
		t.Fatalf("start %+v for session %d", e.start, sid)
	}
	if at.Conn != id || at.HelloRequestID != 1 || at.Outcome != wire.ResumeNew {
		t.Fatalf("attach %+v", at)
	}
	_, sid2, _, e2 := h.hello(nil)
	if sid2 != 2 || e2.start[0].ClientID == e.start[0].ClientID || e2.start[0].Token == e.start[0].Token {
		t.Fatalf("second session %d reuses an identity: %+v / %+v", sid2, e2.start, e.start)
	}
}

// identityOf returns the resume identity a HELLO_OK of session init gives.
func identityOf(owner [16]byte, init SessionInit) *wire.ResumeIdentity {
	return &wire.ResumeIdentity{OwnerID: owner, ClientID: init.ClientID, ResumeToken: init.Token}
}

func TestNodeResumeOutcomes(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, e := h.hello(nil)
	init := e.start[0]
	owner := h.n.OwnerID()

	// Live (or dormant) session, matching token: resumed, same session.
	_, got, at, e := h.hello(identityOf(owner, init))
	if at.Outcome != wire.ResumeResumed || got != sid || len(e.start) != 0 {
		t.Fatalf("matching resume: outcome %d, session %d (want %d), started %v", at.Outcome, got, sid, e.start)
	}
	// Token mismatch: rejected, fresh identity.
	bad := identityOf(owner, init)
	bad.ResumeToken[0] ^= 1
	_, got, at, e = h.hello(bad)
	if at.Outcome != wire.ResumeRejected || got == sid || e.start[0].ClientID == init.ClientID {
		t.Fatalf("token mismatch: outcome %d, session %d", at.Outcome, got)
	}
	// Owner mismatch: rejected.
	other := identityOf(owner, init)
	other.OwnerID[0] ^= 1
	if _, _, at, _ = h.hello(other); at.Outcome != wire.ResumeRejected {
		t.Fatalf("owner mismatch: outcome %d", at.Outcome)
	}
	// Unknown client id: not found.
	unknown := identityOf(owner, init)
	unknown.ClientID[0] ^= 1
	if _, _, at, _ = h.hello(unknown); at.Outcome != wire.ResumeNotFound {
		t.Fatalf("unknown client: outcome %d", at.Outcome)
	}
}

func TestNodeResumeAfterRestartFromASkeleton(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, e := h.hello(nil)
	init := e.start[0]
	subs := []SkeletonSub{{Queue: qid("jobs", 0), Prefetch: 4}}
	h.deliver(SessionAddr(sid), &SkeletonChanged{Subs: subs})
	h.restart(9)
	h.now += 1000
	h.tick(0)
	owner := h.n.OwnerID()
	_, got, at, e := h.hello(identityOf(owner, init))
	if at.Outcome != wire.ResumeResumedAfterRestart {
		t.Fatalf("outcome %d, want resumed_after_restart", at.Outcome)
	}
	if len(e.start) != 1 || e.start[0].ClientID != init.ClientID || e.start[0].Token != init.Token || e.start[0].ID != got {
		t.Fatalf("a resume after restart keeps client id and token in a fresh session: %+v", e.start)
	}
	// The identity is live now: a second resume attaches to that session.
	if _, again, at, _ := h.hello(identityOf(owner, init)); at.Outcome != wire.ResumeResumed || again != got {
		t.Fatalf("second resume: outcome %d, session %d", at.Outcome, again)
	}
}

func TestNodeSkeletonOlderThanTheTTLIsNotResumedAndIsDropped(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, e := h.hello(nil)
	init := e.start[0]
	h.deliver(SessionAddr(sid), &SkeletonChanged{})
	h.restart(9)
	h.tick(0)
	h.now += h.cfg.ResumeRestartTTLMs // exactly the TTL: no longer younger
	_, _, at, e := h.hello(identityOf(h.n.OwnerID(), init))
	if at.Outcome != wire.ResumeNotFound {
		t.Fatalf("outcome %d for an expired skeleton", at.Outcome)
	}
	if len(h.n.state.skeletons) != 0 {
		t.Fatal("an expired skeleton was kept")
	}
	// Its removal is durable: a restart does not bring it back.
	h.restart(10)
	if len(h.n.state.skeletons) != 0 {
		t.Fatal("an expired skeleton came back after a restart")
	}
}

func TestNodeSkeletonNamesAreNormalised(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	subs := []SkeletonSub{{Queue: core.QueueID{Topic: "jobs", Group: "default"}, Prefetch: 1}, {Queue: core.QueueID{Topic: "Bad"}}}
	h.deliver(SessionAddr(sid), &SkeletonChanged{Subs: subs})
	for _, sk := range h.n.state.skeletons {
		if len(sk.subs) != 1 || sk.subs[0].Queue.Group != "" {
			t.Fatalf("skeleton subs %+v", sk.subs)
		}
	}
	if subs[0].Queue.Group != "default" {
		t.Fatal("the session's slice was changed")
	}
}

func TestNodeSkeletonsAreOffWithZeroTTL(t *testing.T) {
	cfg := testNodeConfig()
	cfg.ResumeRestartTTLMs = 0
	h := newNodeHarness(t, cfg)
	_, sid, _, _ := h.hello(nil)
	if e := h.deliver(SessionAddr(sid), &SkeletonChanged{}); len(e.persist) != 0 {
		t.Fatal("a skeleton was persisted with the restart TTL at 0")
	}
}

func TestNodeAttachRefusedGivesAFreshSession(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, e := h.hello(nil)
	init := e.start[0]
	id, got, _, _ := h.hello(identityOf(h.n.OwnerID(), init))
	if got != sid {
		t.Fatal("no resume")
	}
	e = h.deliver(SessionAddr(sid), &AttachRefused{Conn: id, HelloRequestID: 1})
	fresh, at := attachIn(t, e)
	if fresh == sid || at.Outcome != wire.ResumeNotFound || at.Conn != id || e.start[0].ClientID == init.ClientID {
		t.Fatalf("after AttachRefused: session %d, attach %+v", fresh, at)
	}
	// A bounced Attach (the session was dropped) does the same.
	id2, got2, _, _ := h.hello(identityOf(h.n.OwnerID(), e.start[0]))
	e = h.step(&Bounced{NowMs: h.now, Envelope: Envelope{From: NodeAddr(), To: SessionAddr(got2), Msg: &Attach{Conn: id2, HelloRequestID: 1}}})
	if s, at := attachIn(t, e); s == got2 || at.Outcome != wire.ResumeNotFound {
		t.Fatalf("after a bounced Attach: session %d, attach %+v", s, at)
	}
}

func TestNodeSessionEndedForgetsTheSessionAndItsSkeleton(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, e := h.hello(nil)
	init := e.start[0]
	h.deliver(SessionAddr(sid), &SkeletonChanged{Subs: []SkeletonSub{{Queue: qid("jobs", 0), Prefetch: 1}}})
	e = h.deliver(SessionAddr(sid), &SessionEnded{})
	if len(e.persist) != 1 || len(h.n.state.skeletons) != 0 || len(h.n.sessions) != 0 {
		t.Fatalf("after SessionEnded: %d records, %d skeletons, %d sessions", len(e.persist), len(h.n.state.skeletons), len(h.n.sessions))
	}
	if _, _, at, _ := h.hello(identityOf(h.n.OwnerID(), init)); at.Outcome != wire.ResumeNotFound {
		t.Fatalf("an ended session was resumed (outcome %d)", at.Outcome)
	}
	h.restart(3)
	if len(h.n.state.skeletons) != 0 {
		t.Fatal("an ended session's skeleton came back after a restart")
	}
}

func TestNodeOpenCreatesAnImplicitQueueOnlyOnceDurable(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.autoPersist = false
	e := h.deliver(SessionAddr(sid), &Open{Token: 3, Topic: "jobs", Group: "default"})
	if len(e.persist) != 1 || len(e.load) != 0 || len(e.out) != 0 {
		t.Fatalf("an implicit queue must be recorded, then loaded once durable: %+v", e)
	}
	// A second Open of it waits too.
	if e := h.deliver(SessionAddr(sid), &Open{Token: 4, Topic: "jobs"}); len(e.load) != 0 || len(e.persist) != 0 {
		t.Fatalf("second open of a creating queue: %+v", e)
	}
	e = h.persist()
	if len(e.load) != 1 || e.load[0].Queue != qid("jobs", 0) {
		t.Fatalf("want one load of jobs/0 once durable, got %+v", e.load)
	}
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("jobs", 0)})
	opened, to := envelopesOf[*Opened](e)
	if len(opened) != 2 || opened[0].Token != 3 || opened[1].Token != 4 || to[0] != SessionAddr(sid) || opened[0].Partitions != 1 || opened[0].Err != nil {
		t.Fatalf("opened %+v to %v", opened, to)
	}
	// Loaded: answered at once.
	h.autoPersist = true
	if o := h.openQueue(sid, "jobs", 0); o.Err != nil || o.Partitions != 1 {
		t.Fatalf("open of a loaded partition: %+v", o)
	}
	// The queue survives a crash: it was durable before it was loaded.
	h.restart(5)
	if h.n.state.queues[queueKey{Topic: "jobs"}] == nil {
		t.Fatal("a loaded queue is missing from the catalogue after a restart")
	}
}

func TestNodeOpenOutOfRangeAndInvalidNames(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	if o := h.openQueue(sid, "jobs", 1); o.Err != core.ErrPartitionOutOfRange {
		t.Fatalf("partition 1 of a one-partition queue: %+v", o)
	}
	if o := h.openQueue(sid, "Bad Name", 0); o.Err != core.ErrInvalidName {
		t.Fatalf("invalid name: %+v", o)
	}
}

func TestNodeLoadFailureAnswers500AndTheNextOpenRetries(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	e := h.deliver(SessionAddr(sid), &Open{Token: 1, Topic: "jobs"})
	e2 := h.deliver(SessionAddr(sid), &Open{Token: 2, Topic: "jobs"})
	if len(e.load) != 1 || len(e2.load) != 0 {
		t.Fatalf("want one load for two opens: %d, %d", len(e.load), len(e2.load))
	}
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("jobs", 0), Err: errors.New("disk full")})
	opened, _ := envelopesOf[*Opened](e)
	if len(opened) != 2 || opened[0].Err != core.ErrPartitionLoadFailed || opened[1].Err.Code() != 500 {
		t.Fatalf("after a failed load: %+v", opened)
	}
	if e := h.deliver(SessionAddr(sid), &Open{Token: 3, Topic: "jobs"}); len(e.load) != 1 {
		t.Fatal("the next open did not retry the load")
	}
}

func TestNodeQueuesMaxRefusesNewQueues(t *testing.T) {
	cfg := testNodeConfig()
	cfg.QueuesMax = 2
	h := newNodeHarness(t, cfg)
	_, sid, _, _ := h.hello(nil)
	h.openQueue(sid, "a", 0)
	h.openQueue(sid, "b", 0)
	if o := h.openQueue(sid, "c", 0); o.Err != core.ErrTooManyQueues || o.Err.Code() != 500 {
		t.Fatalf("third queue: %+v", o)
	}
	e := h.deliver(SessionAddr(sid), &DeclareQueue{Token: 1, Topic: "c"})
	if d, _ := envelopesOf[*Declared](e); len(d) != 1 || d[0].Err != core.ErrTooManyQueues {
		t.Fatalf("declare of a third queue: %+v", d)
	}
}

func TestNodeDeclareAnswersOnceDurableAndKeepsThePartitionCount(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.autoPersist = false
	e := h.deliver(SessionAddr(sid), &DeclareQueue{Token: 1, Topic: "jobs", PartitionCount: 4, MaxRetries: u32(2)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 0 || len(e.persist) != 1 {
		t.Fatalf("declared before durable: %+v", e)
	}
	e = h.persist()
	d, _ := envelopesOf[*Declared](e)
	if len(d) != 1 || d[0].Token != 1 || d[0].Partitions != 4 || d[0].Err != nil {
		t.Fatalf("declared %+v", d)
	}
	h.autoPersist = true
	// A redeclare keeps the count (the existing one wins) and merges only
	// the present fields.
	e = h.deliver(SessionAddr(sid), &DeclareQueue{Token: 2, Topic: "jobs", PartitionCount: 8, DefaultTTLMs: i64(500)})
	d, _ = envelopesOf[*Declared](e)
	entry := h.n.state.queues[queueKey{Topic: "jobs"}]
	if len(d) != 1 || d[0].Partitions != 4 || *entry.settings.MaxRetries != 2 || *entry.settings.DefaultTTLMs != 500 || entry.settings.DLQ != nil {
		t.Fatalf("redeclare: %+v, entry %+v", d, entry.settings)
	}
	// Nothing changes: answered at once, nothing recorded.
	e = h.deliver(SessionAddr(sid), &DeclareQueue{Token: 3, Topic: "jobs", MaxRetries: u32(2)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 1 || len(e.persist) != 0 {
		t.Fatalf("an idempotent declare: %+v", e)
	}
	if o := h.openQueue(sid, "jobs", 3); o.Err != nil || o.Partitions != 4 {
		t.Fatalf("partition 3 of 4: %+v", o)
	}
}

func TestNodeDeclaresPushBackWhenStorageIsBehind(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.autoPersist = false
	for i := 0; i < recordsUnpersistedMax; i++ {
		h.deliver(SessionAddr(sid), &DeclareQueue{Token: 1, Topic: "jobs", MaxRetries: u32(uint32(i % 2))})
	}
	e := h.deliver(SessionAddr(sid), &DeclareQueue{Token: 2, Topic: "jobs", MaxRetries: u32(7)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 1 || d[0].Err != core.ErrCatalogBehind || len(e.persist) != 0 {
		t.Fatalf("a declare past the unpersisted limit: %+v", e)
	}
	if o := h.openQueue(sid, "new", 0); o.Err != core.ErrCatalogBehind {
		t.Fatalf("a new queue past the unpersisted limit: %+v", o)
	}
	if e := h.deliver(SessionAddr(sid), &SkeletonChanged{}); len(e.persist) != 0 {
		t.Fatal("a skeleton was saved past the unpersisted limit")
	}
	h.persist()
	e = h.deliver(SessionAddr(sid), &DeclareQueue{Token: 3, Topic: "jobs", MaxRetries: u32(7)})
	if len(e.persist) != 1 {
		t.Fatal("declares did not resume once storage caught up")
	}
}

func TestNodeDeclareValidates(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	cases := []struct {
		d    DeclareQueue
		want *core.Error
	}{
		{DeclareQueue{Topic: "Bad"}, core.ErrInvalidName},
		{DeclareQueue{Topic: "q", PartitionCount: 9}, core.ErrTooManyPartitions},
		{DeclareQueue{Topic: "q", DLQ: &core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "q", Group: "default"}}}, core.ErrDeadLetterLoop},
		{DeclareQueue{Topic: "q", DLQ: &core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "No"}}}, core.ErrInvalidName},
		{DeclareQueue{Topic: "q", DLQ: &core.DLQPolicy{Kind: 7}}, core.ErrInvalidSettings},
		{DeclareQueue{Topic: "q", DefaultTTLMs: i64(-1)}, core.ErrInvalidSettings},
	}
	for _, c := range cases {
		e := h.deliver(SessionAddr(sid), &c.d)
		d, _ := envelopesOf[*Declared](e)
		if len(d) != 1 || d[0].Err != c.want || len(e.persist) != 0 {
			t.Fatalf("declare %+v: %+v, want %v", c.d, d, c.want)
		}
	}
}

func TestNodeDeclareUpdatesLoadedPartitions(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.deliver(SessionAddr(sid), &DeclareQueue{Token: 1, Topic: "jobs", PartitionCount: 2})
	h.openQueue(sid, "jobs", 1)
	// Partition 0 is loading while the declare lands.
	e := h.deliver(SessionAddr(sid), &Open{Token: 5, Topic: "jobs", Partition: 0})
	if len(e.load) != 1 {
		t.Fatal("no load of partition 0")
	}
	e = h.deliver(SessionAddr(sid), &DeclareQueue{Token: 2, Topic: "jobs", MaxRetries: u32(7)})
	ds, to := envelopesOf[*DeclareSettings](e)
	if len(ds) != 1 || to[0] != PartitionAddr(qid("jobs", 1)) || *ds[0].MaxRetries != 7 {
		t.Fatalf("settings to the loaded partition: %+v to %v", ds, to)
	}
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("jobs", 0)})
	ds, to = envelopesOf[*DeclareSettings](e)
	if len(ds) != 1 || to[0] != PartitionAddr(qid("jobs", 0)) || *ds[0].MaxRetries != 7 {
		t.Fatalf("a declare during the load must reach the partition at LoadDone: %+v to %v", ds, to)
	}
	// A load after the declare carries the settings itself.
	h.restart(4)
	h.tick(0)
	_, sid, _, _ = h.hello(nil)
	e = h.deliver(SessionAddr(sid), &Open{Token: 1, Topic: "jobs", Partition: 1})
	if len(e.load) != 1 || e.load[0].Settings.MaxRetries == nil || *e.load[0].Settings.MaxRetries != 7 {
		t.Fatalf("load request settings %+v", e.load)
	}
}

func TestNodeRoutesDeadLettersToTheirTarget(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.deliver(SessionAddr(sid), &DeclareQueue{Token: 1, Topic: "dlq", PartitionCount: 3})
	src := PartitionAddr(qid("jobs", 0))
	body := &core.Body{Payload: []byte("x")}
	e := h.deliver(src, &DeadLetterOut{Offset: 7, Target: core.DLQTarget{Topic: "dlq"}, Body: body})
	if len(e.load) != 1 || e.load[0].Queue != qid("dlq", 1) {
		t.Fatalf("offset 7 of 3 partitions goes to partition 1: %+v", e.load)
	}
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("dlq", 1)})
	st, to := envelopesOf[*StoreDeadLetter](e)
	if len(st) != 1 || to[0] != PartitionAddr(qid("dlq", 1)) || st[0].Source != qid("jobs", 0) || st[0].Offset != 7 || st[0].Body != body {
		t.Fatalf("store %+v to %v", st, to)
	}
	// An undeclared target is created implicitly.
	e = h.deliver(src, &DeadLetterOut{Offset: 8, Target: core.DLQTarget{Topic: "other"}, Body: body})
	if len(e.load) != 1 || e.load[0].Queue != qid("other", 0) || h.n.state.queues[queueKey{Topic: "other"}] == nil {
		t.Fatalf("implicit target: %+v", e.load)
	}
	// A failed load answers DeadLetterFailed to the source.
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("other", 0), Err: errors.New("io")})
	f, to := envelopesOf[*DeadLetterFailed](e)
	if len(f) != 1 || to[0] != src || f[0].Offset != 8 {
		t.Fatalf("failed load: %+v to %v", f, to)
	}
	// A bounced StoreDeadLetter (the target is gone) too.
	e = h.step(&Bounced{NowMs: h.now, Envelope: Envelope{From: NodeAddr(), To: PartitionAddr(qid("dlq", 1)), Msg: st[0]}})
	if f, to := envelopesOf[*DeadLetterFailed](e); len(f) != 1 || to[0] != src || f[0].Offset != 7 {
		t.Fatalf("bounced store: %+v to %v", f, to)
	}
}

func TestNodeDeadLetterForwardsAreBounded(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	src := PartitionAddr(qid("jobs", 0))
	target := core.DLQTarget{Topic: "dlq"}
	var loads int
	for i := 0; i < deadLetterForwardsMax; i++ {
		loads += len(h.deliver(src, &DeadLetterOut{Offset: uint64(i), Target: target, Body: &core.Body{}}).load)
	}
	if loads != 1 {
		t.Fatalf("%d loads for one target", loads)
	}
	e := h.deliver(src, &DeadLetterOut{Offset: 1 << 20, Target: target, Body: &core.Body{}})
	if f, _ := envelopesOf[*DeadLetterFailed](e); len(f) != 1 || f[0].Err != core.ErrDeadLetterBacklog {
		t.Fatalf("one forward past the limit: %+v", e.out)
	}
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("dlq", 0)})
	if st, _ := envelopesOf[*StoreDeadLetter](e); len(st) != deadLetterForwardsMax {
		t.Fatalf("%d copies forwarded after the load", len(st))
	}
	if e := h.deliver(src, &DeadLetterOut{Offset: 1 << 21, Target: target, Body: &core.Body{}}); len(e.out) != 1 {
		t.Fatal("the limit did not free up")
	}
}

func TestNodeDrainTellsEverySession(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, a, _, _ := h.hello(nil)
	_, b, _, _ := h.hello(nil)
	e := h.step(&Drain{NowMs: h.now, GraceMs: 100, Message: "bye"})
	sd, to := envelopesOf[*ShuttingDown](e)
	if len(sd) != 2 || to[0] != SessionAddr(a) || to[1] != SessionAddr(b) || sd[0].GraceMs != 100 || sd[0].Message != "bye" {
		t.Fatalf("shutting down %+v to %v", sd, to)
	}
	// PROTOCOL 5.23: reconnects are accepted for grace_ms (before the fix
	// every connection was refused at once), and a session attached then
	// is told the grace that is left.
	h.tick(40)
	_, c, at, e := h.hello(&wire.ResumeIdentity{OwnerID: h.n.state.ownerID, ClientID: [16]byte{9}, ResumeToken: [16]byte{9}})
	if sd, to := envelopesOf[*ShuttingDown](e); at == nil || len(sd) != 1 || to[0] != SessionAddr(c) || sd[0].GraceMs != 60 {
		t.Fatalf("a session attached 40 ms into a 100 ms drain was told %+v", sd)
	}
	h.tick(60)
	if e := h.step(&ConnOpened{NowMs: h.now, Conn: 99}); len(e.close) != 1 {
		t.Fatal("a connection was admitted after the drain's grace")
	}
}

func TestNodeSnapshotPlusSuffixRecoversTheSameState(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	var snap *SnapshotRequest
	for i := 0; snap == nil && i < 4*h.cfg.NodeSnapshotRecordsMin; i++ {
		e := h.deliver(SessionAddr(sid), &SkeletonChanged{Subs: []SkeletonSub{{Queue: qid("jobs", uint32(i%3)), Prefetch: uint32(i)}}})
		snap = e.snapshot
	}
	if snap == nil {
		t.Fatal("no snapshot asked for after many records")
	}
	live := h.n.LogState()
	if got := appendSnapshot(nil, mustDecodeSnapshot(t, snap.Data)); !bytes.Equal(got, snap.Data) {
		t.Fatal("the snapshot does not re-encode to itself")
	}
	h.snapshot, h.snapshotIndex = snap.Data, snap.Index
	h.step(&SnapshotDone{NowMs: h.now, Index: snap.Index})
	h.deliver(SessionAddr(sid), &DeclareQueue{Token: 1, Topic: "after", PartitionCount: 2})
	live = h.n.LogState()
	h.restart(7)
	recovered := h.n.state
	recovered.lastIndex -= 2 // the restart appended a boot record and a reservation
	recovered.boot--
	recovered.sessionIDCeiling -= sessionIDsBlock
	if !bytes.Equal(appendSnapshot(nil, &recovered), live) {
		t.Fatal("snapshot + suffix recovery differs from the live state")
	}
}

func mustDecodeSnapshot(t *testing.T, b []byte) *durableState {
	t.Helper()
	s, err := decodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	return &s
}

func TestNodeRefusesToStartFromACorruptRecord(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.deliver(SessionAddr(sid), &DeclareQueue{Token: 1, Topic: "a"})
	h.deliver(SessionAddr(sid), &DeclareQueue{Token: 2, Topic: "b"})
	// A bad record in the middle: the old catalogue silently forgot every
	// queue after it; the Node refuses to start.
	bad := append([]Record(nil), h.log...)
	bad[1].Data = append([]byte(nil), bad[1].Data...)
	bad[1].Data[len(bad[1].Data)-1] ^= 0xFF
	bad[1].Data = bad[1].Data[:len(bad[1].Data)-1]
	if _, err := NewNode(h.cfg, nil, bad, entropyOf(1)); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("a corrupt record: %v", err)
	}
	gap := append(append([]Record(nil), h.log[:1]...), h.log[2:]...)
	if _, err := NewNode(h.cfg, nil, gap, entropyOf(1)); !errors.Is(err, core.ErrNonContiguousLog) {
		t.Fatalf("a gap: %v", err)
	}
	if _, err := NewNode(h.cfg, []byte("FNS1junk"), nil, entropyOf(1)); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("a corrupt snapshot: %v", err)
	}
}

func TestNodeAFrameBeforeHelloOkIsRefused(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	// Bound: the driver read it before it applied the Bind.
	id, _, _, _ := h.hello(nil)
	e := h.step(&Frame{NowMs: h.now, Conn: id, Header: wire.Header{Opcode: wire.OpAuth, RequestID: 2}})
	if f := decodeSends(t, e.sends); len(f) != 1 || f[0].body.Code != wire.CodeInvalid || len(e.close) != 1 {
		t.Fatalf("a frame before HELLO_OK on a bound connection: %+v, close %v", f, e.close)
	}
	// Held: the HELLO waits for the boot record.
	h.restart(2)
	h.autoPersist = false
	h.tick(0)
	id = h.open()
	h.step(helloFrame(h.now, id, 1, nil))
	e = h.step(&Frame{NowMs: h.now, Conn: id, Header: wire.Header{Opcode: wire.OpAuth, RequestID: 2}})
	if len(e.close) != 1 || h.n.heldHellos != 0 {
		t.Fatalf("a frame before HELLO_OK on a held connection: close %v, %d held", e.close, h.n.heldHellos)
	}
	if e := h.persist(); len(e.start) != 0 {
		t.Fatal("a refused connection's HELLO was answered")
	}
}
