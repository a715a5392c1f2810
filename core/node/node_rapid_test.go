package node

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
	"pgregory.net/rapid"
)

// TestMain raises rapid's defaults as core's does (1000 sequences of up to
// 100 steps per property); the command line still wins.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if !explicit["rapid.checks"] {
		_ = flag.Set("rapid.checks", "1000")
	}
	if !explicit["rapid.steps"] {
		_ = flag.Set("rapid.steps", "100")
	}
	os.Exit(m.Run())
}

// nodeModel is the reference the Node is held to: the catalogue and
// skeleton rules written plainly, the session directory, and, per record
// index, the durable state a crash there must recover.
type nodeModel struct {
	queues    map[queueKey]mQueue
	streams   map[string]core.StreamSettings
	skeletons map[[16]byte]mSkeleton
	sessions  map[SessionID]mSession
	// history: the durable part after each step, by the Node's last index.
	history map[uint64]mDurable
	// queueDurableAt: the record index that created each queue.
	queueDurableAt map[queueKey]uint64
	// tombstones: deleted queues whose data is not yet reported gone;
	// removedAt: the index of each one's removal record (queueops).
	tombstones map[queueKey]bool
	removedAt  map[queueKey]uint64
}

type mQueue struct {
	partitions uint32
	settings   catalogSettings
}

// partitionRoom says whether count more partitions fit PartitionsMax next
// to every queue's and stream's in the model.
func (mc *nodeMachine) partitionRoom(count uint32) bool {
	return mc.partitionTotal()+int(count) <= mc.cfg.PartitionsMax
}

// partitionTotal is every model queue's and stream's partitions together.
func (mc *nodeMachine) partitionTotal() int {
	total := 0
	for _, q := range mc.m.queues {
		total += int(q.partitions)
	}
	for _, s := range mc.m.streams {
		total += int(s.PartitionCount)
	}
	return total
}

type mSkeleton struct {
	token     [16]byte
	savedAtMs int64
	subs      []SkeletonSub
}

type mSession struct{ clientID, token [16]byte }

type mDurable struct {
	queues     map[queueKey]mQueue
	streams    map[string]core.StreamSettings
	skeletons  map[[16]byte]mSkeleton
	tombstones map[queueKey]bool
}

// nodeMachine drives a Node and the model side by side.
type nodeMachine struct {
	cfg     Config
	n       *Node
	m       *nodeModel
	nowMs   int64
	log     []Record
	durable uint64
	// bounds: lastIndex after each step (where a crash may cut).
	bounds []uint64
	// snapshot storage holds, and the one asked for and not yet written.
	snapshot, askedData []byte
	snapshotAt, askedAt uint64
	conns               map[ConnID]*mConn
	nextConn            ConnID
	identities          []wire.ResumeIdentity // every identity handed out
	loads               []core.QueueID        // asked for, not answered
	owner               [16]byte
	entropySeq          byte
	// settings: DeclareSettings sent to each partition and not yet
	// acknowledged, in order (a Host applies them in order).
	settings map[core.QueueID][]*DeclareSettings
	// sessionIDs: every session id ever started, across crashes.
	sessionIDs map[SessionID]bool
	// Operator deletes (node_queueops.go): queries asked and not answered,
	// the latest query token of each queue and whether any of its answers
	// reported inflight messages, removals asked and not reported.
	queries     []Envelope
	lastToken   map[queueKey]uint64
	tokenInUse  map[uint64]bool
	removes     []RemoveRequest
	nextRequest uint64
	deleteKeys  map[uint64]queueKey // request -> queue, until answered
	// gauge is the partition figures a driver would show: the last
	// Ready.Partitions of this process (nil before its first step).
	gauge *PartitionFigures
}

type mConn struct {
	phase  connPhase
	resume *wire.ResumeIdentity // the HELLO's
}

func newNodeMachine(t *rapid.T) *nodeMachine {
	cfg := testNodeConfig()
	cfg.ConnectionsMax = 6
	cfg.QueuesMax = 3
	cfg.PartitionsPerQueueMax = 3
	// Below QueuesMax x PartitionsPerQueueMax, so the partition budget
	// refuses some declares the queue count alone would allow.
	cfg.PartitionsMax = 5
	cfg.NodeSnapshotRecordsMin = 8
	mc := &nodeMachine{cfg: cfg, nowMs: 100_000, conns: map[ConnID]*mConn{}, settings: map[core.QueueID][]*DeclareSettings{}, sessionIDs: map[SessionID]bool{},
		m: &nodeModel{queues: map[queueKey]mQueue{}, streams: map[string]core.StreamSettings{}, skeletons: map[[16]byte]mSkeleton{}, sessions: map[SessionID]mSession{},
			history: map[uint64]mDurable{}, queueDurableAt: map[queueKey]uint64{}, tombstones: map[queueKey]bool{}, removedAt: map[queueKey]uint64{}},
		lastToken: map[queueKey]uint64{}, tokenInUse: map[uint64]bool{}, deleteKeys: map[uint64]queueKey{}}
	n, err := NewNode(cfg, nil, nil, entropyOf(77))
	if err != nil {
		t.Fatal(err)
	}
	mc.n, mc.owner = n, n.OwnerID()
	mc.m.history[0] = mc.m.durablePart()
	mc.step(t, &Tick{NowMs: mc.nowMs})
	return mc
}

func (m *nodeModel) durablePart() mDurable {
	return mDurable{queues: maps.Clone(m.queues), streams: maps.Clone(m.streams), skeletons: maps.Clone(m.skeletons), tombstones: maps.Clone(m.tombstones)}
}

// step feeds in and checks every effect against the model.
func (mc *nodeMachine) step(t *rapid.T, in Input) {
	rd := mc.n.Step(in)
	for _, r := range rd.Persist {
		mc.log = append(mc.log, Record{Index: r.Index, Data: append([]byte(nil), r.Data...)})
		mc.noteRemovalRecord(t, r)
	}
	for _, req := range rd.Remove {
		key := queueKey{Topic: req.Topic, Group: req.Group}
		if !mc.m.tombstones[key] || mc.m.removedAt[key] > mc.durable {
			t.Fatalf("Remove of %v: tombstone %v, removal record at %d, durable %d", key, mc.m.tombstones[key], mc.m.removedAt[key], mc.durable)
		}
		mc.removes = append(mc.removes, req)
	}
	startByID := map[SessionID]SessionInit{}
	for _, s := range rd.Start {
		startByID[s.ID] = s
		if mc.sessionIDs[s.ID] {
			t.Fatalf("session id %d started again", s.ID)
		}
		mc.sessionIDs[s.ID] = true
	}
	for _, l := range rd.Load {
		key := queueKey{Topic: l.Queue.Topic, Group: l.Queue.Group}
		if at := mc.m.queueDurableAt[key]; at == 0 || at > mc.durable || !mc.n.bootDurable() {
			t.Fatalf("load of %v before its queue record (%d) is durable (%d)", l.Queue, at, mc.durable)
		}
		if mc.m.tombstones[key] && l.Kind == KindQueue { // a stream's data lives apart
			t.Fatalf("load of %v while its old data may be on disk", l.Queue)
		}
		mc.loads = append(mc.loads, l.Queue)
	}
	for _, env := range rd.Out {
		mc.checkEnvelope(t, env, startByID)
	}
	for _, id := range rd.Close {
		if c := mc.conns[id]; c != nil {
			c.phase = connClosing
		}
	}
	if rd.Snapshot != nil && mc.askedData == nil {
		mc.askedData, mc.askedAt = append([]byte(nil), rd.Snapshot.Data...), rd.Snapshot.Index
	}
	mc.expireModelSkeletons()
	if err := mc.n.CheckInvariants(); err != nil {
		t.Fatalf("after %T: %v", in, err)
	}
	mc.compareLive(t)
	if rd.Partitions != nil {
		figures := *rd.Partitions
		mc.gauge = &figures
	}
	if mc.gauge == nil || mc.gauge.Declared != mc.partitionTotal() || mc.gauge.Max != mc.cfg.PartitionsMax {
		t.Fatalf("after %T the reported partition figures are %+v, the model's total %d of %d", in, mc.gauge, mc.partitionTotal(), mc.cfg.PartitionsMax)
	}
	last := mc.n.state.lastIndex
	if len(mc.bounds) == 0 || mc.bounds[len(mc.bounds)-1] != last {
		mc.bounds = append(mc.bounds, last)
	}
	mc.m.history[last] = mc.m.durablePart()
}

func (mc *nodeMachine) checkEnvelope(t *rapid.T, env Envelope, starts map[SessionID]SessionInit) {
	switch msg := env.Msg.(type) {
	case *Attach:
		c := mc.conns[msg.Conn]
		if c == nil || c.phase != connHelloHeld {
			t.Fatalf("attach of connection %d, which sent no HELLO waiting for an answer", msg.Conn)
		}
		want, same := mc.expectedOutcome(c.resume)
		if msg.Outcome != want {
			t.Fatalf("connection %d resume %+v: outcome %d, model %d", msg.Conn, c.resume, msg.Outcome, want)
		}
		c.phase = connBound
		if msg.Outcome == wire.ResumeResumed {
			if env.To.Session != same {
				t.Fatalf("resumed into session %d, model %d", env.To.Session, same)
			}
			return
		}
		s, ok := starts[env.To.Session]
		if !ok {
			t.Fatalf("attach to session %d, which was not started", env.To.Session)
		}
		if msg.Outcome == wire.ResumeResumedAfterRestart && (s.ClientID != c.resume.ClientID || s.Token != c.resume.ResumeToken) {
			t.Fatal("resumed_after_restart with another identity")
		}
		if _, taken := mc.liveClient(s.ClientID); taken {
			t.Fatalf("session %d reuses a live client id", s.ID)
		}
		mc.m.sessions[s.ID] = mSession{clientID: s.ClientID, token: s.Token}
		mc.identities = append(mc.identities, wire.ResumeIdentity{OwnerID: mc.owner, ClientID: s.ClientID, ResumeToken: s.Token})
	case *Declared:
		if msg.Err == nil {
			key := queueKey{Topic: declareTopics[msg.Token%streamDeclareToken]}
			// A queue declare recorded before an operator's delete of its
			// queue is answered once durable, after the removal record was
			// appended (the model forgot the queue then; the topic may even
			// be a stream by now, which queueDurableAt then describes): it
			// did happen. A stream's declare is checked against the
			// stream's own record.
			_, streamNow := mc.m.streams[key.Topic]
			deletedSince := msg.Token < streamDeclareToken && mc.m.removedAt[key] != 0 &&
				(mc.m.queueDurableAt[key] == 0 || streamNow)
			if at := mc.m.queueDurableAt[key]; !deletedSince && (at == 0 || at > mc.durable) {
				t.Fatalf("declared %v (token %d) before its record is durable (at %d, durable %d)", key, msg.Token, at, mc.durable)
			}
		}
	case *Opened:
		if msg.Err == nil && msg.Kind == KindStream {
			s, ok := mc.m.streams[msg.Queue.Topic]
			key := queueKey{Topic: msg.Queue.Topic}
			if !ok || msg.Queue.Group != "" || msg.Partitions != s.PartitionCount || msg.Queue.Partition >= s.PartitionCount ||
				mc.m.queueDurableAt[key] > mc.durable {
				t.Fatalf("opened stream %+v, model %+v", msg, s)
			}
			return
		}
		if msg.Err == nil {
			key := queueKey{Topic: msg.Queue.Topic, Group: msg.Queue.Group}
			q, ok := mc.m.queues[key]
			if !ok || msg.Partitions != q.partitions || msg.Queue.Partition >= q.partitions || mc.m.queueDurableAt[key] > mc.durable {
				t.Fatalf("opened %+v, model queue %+v (durable at %d, durable %d)", msg, q, mc.m.queueDurableAt[key], mc.durable)
			}
			// A session may publish at once: the partition must hold
			// every setting sent to it.
			if n := len(mc.settings[msg.Queue]); n > 0 {
				t.Fatalf("opened %v with %d DeclareSettings not applied", msg.Queue, n)
			}
		}
	case *InflightQuery:
		mc.queries = append(mc.queries, env)
		mc.lastToken[queueKey{Topic: env.To.Queue.Topic, Group: env.To.Queue.Group}] = msg.Token
	case *QueueDeleteResult:
		key, ok := mc.deleteKeys[env.To.Request]
		if !ok {
			t.Fatalf("a delete answer to %v, which asked none", env.To)
		}
		delete(mc.deleteKeys, env.To.Request)
		switch msg.Outcome {
		case DeleteDone:
			if at := mc.m.removedAt[key]; at == 0 || at > mc.durable {
				t.Fatalf("delete of %v answered before its removal record (%d) is durable (%d)", key, at, mc.durable)
			}
		case DeleteNotFound:
			if _, ok := mc.m.queues[key]; ok {
				t.Fatalf("delete of %v answered not found, model has it", key)
			}
		case DeleteInUse:
			if msg.Inflight <= 0 {
				t.Fatalf("in use with %d inflight", msg.Inflight)
			}
		}
	case *QueuesDebug:
		// The budget view counts what the model's catalogue holds, the
		// recovered and the refused-nothing-past-it alike.
		if want := mc.partitionTotal(); msg.PartitionsDeclared != want || msg.PartitionsMax != mc.cfg.PartitionsMax {
			t.Fatalf("queues debug says %d of %d partitions declared, model %d of %d",
				msg.PartitionsDeclared, msg.PartitionsMax, want, mc.cfg.PartitionsMax)
		}
	case *DeclareSettings:
		if msg.Seq == 0 {
			t.Fatalf("DeclareSettings to %v without a Seq", env.To)
		}
		mc.settings[env.To.Queue] = append(mc.settings[env.To.Queue], msg)
	}
}

// expectedOutcome is PROTOCOL 7.7's table, plainly (a skeleton is only
// resumed when no live session holds its client id, so its age is the
// time since its process last had it live, within one refresh).
func (mc *nodeMachine) expectedOutcome(resume *wire.ResumeIdentity) (wire.ResumeOutcome, SessionID) {
	if resume == nil {
		return wire.ResumeNew, 0
	}
	if resume.OwnerID != mc.owner {
		return wire.ResumeRejected, 0
	}
	if id, ok := mc.liveClient(resume.ClientID); ok {
		if mc.m.sessions[id].token == resume.ResumeToken {
			return wire.ResumeResumed, id
		}
		return wire.ResumeRejected, 0
	}
	if sk, ok := mc.m.skeletons[resume.ClientID]; ok && sk.token == resume.ResumeToken && mc.nowMs-sk.savedAtMs < mc.cfg.ResumeRestartTTLMs {
		return wire.ResumeResumedAfterRestart, 0
	}
	return wire.ResumeNotFound, 0
}

func (mc *nodeMachine) liveClient(clientID [16]byte) (SessionID, bool) {
	for id, s := range mc.m.sessions {
		if s.clientID == clientID {
			return id, true
		}
	}
	return 0, false
}

// expireModelSkeletons is the skeleton rule: a skeleton a live session
// holds never expires and is recorded again (savedAtMs = now) once it is
// TTL/skeletonRefreshDivisor old; one no live session holds (its process
// crashed) expires at the TTL from when it was last saved.
func (mc *nodeMachine) expireModelSkeletons() {
	refreshMs := max(mc.cfg.ResumeRestartTTLMs/skeletonRefreshDivisor, 1)
	for id, sk := range mc.m.skeletons {
		_, live := mc.liveClient(id)
		switch {
		case live && mc.nowMs-sk.savedAtMs >= refreshMs:
			sk.savedAtMs = mc.nowMs
			mc.m.skeletons[id] = sk
		case !live && mc.nowMs-sk.savedAtMs >= mc.cfg.ResumeRestartTTLMs:
			delete(mc.m.skeletons, id)
		}
	}
}

// compareLive: the Node's catalogue and skeletons are the model's.
func (mc *nodeMachine) compareLive(t *rapid.T) {
	if err := sameDurable(mc.n.state, mDurable{queues: mc.m.queues, streams: mc.m.streams, skeletons: mc.m.skeletons, tombstones: mc.m.tombstones}); err != nil {
		t.Fatalf("live state: %v", err)
	}
}

func sameDurable(s durableState, want mDurable) error {
	if len(s.queues) != len(want.queues) {
		return fmt.Errorf("%d queues, model %d", len(s.queues), len(want.queues))
	}
	for k, q := range want.queues {
		e := s.queues[k]
		if e == nil || e.partitions != q.partitions || !catalogSettingsEqual(e.settings, q.settings) {
			return fmt.Errorf("queue %v: %+v, model %+v", k, e, q)
		}
	}
	if len(s.streams) != len(want.streams) {
		return fmt.Errorf("%d streams, model %d", len(s.streams), len(want.streams))
	}
	for topic, settings := range want.streams {
		if e := s.streams[topic]; e == nil || e.settings != settings {
			return fmt.Errorf("stream %q: %+v, model %+v", topic, e, settings)
		}
	}
	if !maps.Equal(s.tombstones, want.tombstones) {
		return fmt.Errorf("tombstones %v, model %v", s.tombstones, want.tombstones)
	}
	if len(s.skeletons) != len(want.skeletons) {
		return fmt.Errorf("%d skeletons, model %d", len(s.skeletons), len(want.skeletons))
	}
	for id, sk := range want.skeletons {
		got := s.skeletons[id]
		if got == nil || got.token != sk.token || got.savedAtMs != sk.savedAtMs || !slices.Equal(got.subs, sk.subs) {
			return fmt.Errorf("skeleton %x: %+v, model %+v", id[:4], got, sk)
		}
	}
	return nil
}

var declareTopics = []string{"a", "b", "c", "d"}

// streamDeclareToken offsets a stream declare's token from a queue
// declare's (the topic's index in declareTopics): a queue and a stream may
// share a topic one after the other, and their answers are checked against
// different records. A multiple of len(declareTopics), so token modulo it
// still names the topic.
const streamDeclareToken uint64 = 400

func init() {
	if streamDeclareToken%uint64(len(declareTopics)) != 0 {
		panic("streamDeclareToken must be a multiple of len(declareTopics)")
	}
}

// modelOpen: an Open of an unknown queue creates it (one partition) when
// there is room.
func (mc *nodeMachine) modelOpen(key queueKey) {
	if mc.m.tombstones[key] {
		return // deleted, its data not yet gone: refused
	}
	if _, stream := mc.m.streams[key.Topic]; stream {
		return // opens the stream partition, creates nothing
	}
	if _, ok := mc.m.queues[key]; !ok && len(mc.m.queues)+len(mc.m.streams) < mc.cfg.QueuesMax && mc.partitionRoom(1) {
		mc.m.queues[key] = mQueue{partitions: 1}
		mc.m.queueDurableAt[key] = mc.n.state.lastIndex + 1
	}
}

func (mc *nodeMachine) modelDeclare(key queueKey, d *DeclareQueue) {
	count := max(d.PartitionCount, 1)
	q, exists := mc.m.queues[key]
	if _, stream := mc.m.streams[key.Topic]; stream {
		return // a topic is a queue or a stream
	}
	if mc.m.tombstones[key] {
		return // deleted, its data not yet gone: refused
	}
	if count > mc.cfg.PartitionsPerQueueMax || (!exists && len(mc.m.queues)+len(mc.m.streams) >= mc.cfg.QueuesMax) {
		return
	}
	if !exists && !mc.partitionRoom(count) {
		return // past the partition budget
	}
	if d.DLQ != nil && d.DLQ.Kind == core.DLQCustom && d.DLQ.Target.Topic == key.Topic {
		return // a loop
	}
	if !exists {
		q = mQueue{partitions: count}
	}
	next := q
	if d.DLQ != nil {
		v := *d.DLQ
		next.settings.DLQ = &v
	}
	if d.MaxRetries != nil {
		next.settings.MaxRetries = u32(*d.MaxRetries)
	}
	if d.DefaultTTLMs != nil {
		next.settings.DefaultTTLMs = i64(*d.DefaultTTLMs)
	}
	if exists && catalogSettingsEqual(q.settings, next.settings) {
		return
	}
	mc.m.queues[key] = next
	if !exists {
		mc.m.queueDurableAt[key] = mc.n.state.lastIndex + 1
	}
}

// crash recovers a Node from what storage holds: the durable prefix of the
// records, through the snapshot when one was written.
func (mc *nodeMachine) crash(t *rapid.T) {
	if mc.askedData != nil && mc.askedAt <= mc.durable && mc.snapshotAt == 0 {
		mc.snapshot, mc.snapshotAt = mc.askedData, mc.askedAt // written, never answered
	}
	mc.log = mc.log[:mc.durable]
	var suffix []Record
	for _, r := range mc.log {
		if r.Index > mc.snapshotAt {
			suffix = append(suffix, r)
		}
	}
	mc.entropySeq++
	n, err := NewNode(mc.cfg, mc.snapshot, suffix, entropyOf(mc.entropySeq))
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	back, ok := mc.m.history[mc.durable]
	if !ok {
		t.Fatalf("no model state at durable index %d", mc.durable)
	}
	if err := sameDurable(n.state, back); err != nil {
		t.Fatalf("recovered state at %d: %v", mc.durable, err)
	}
	// A snapshot of the recovered state recovers the same again.
	again, err := NewNode(mc.cfg, appendSnapshot(nil, &n.state), nil, entropyOf(1))
	if err != nil {
		t.Fatalf("recover from a snapshot of the recovered state: %v", err)
	}
	// Tombstones are not in the snapshot format: the Node takes no snapshot
	// while one exists (maybeSnapshot), so this one loses them by design.
	withoutTombstones := back
	withoutTombstones.tombstones = map[queueKey]bool{}
	if err := sameDurable(again.state, withoutTombstones); err != nil || again.OwnerID() != n.OwnerID() || again.Boot() != n.Boot()+1 {
		t.Fatalf("snapshot of the recovered state: %v", err)
	}
	if mc.durable == 0 {
		mc.owner = n.OwnerID() // the first boot record was lost: a first boot again
	} else if n.OwnerID() != mc.owner {
		t.Fatal("the owner id changed across a restart")
	}
	mc.n = n
	mc.gauge = nil // a new process: its first step reports
	mc.m.queues, mc.m.streams, mc.m.skeletons = maps.Clone(back.queues), maps.Clone(back.streams), maps.Clone(back.skeletons)
	mc.m.tombstones = maps.Clone(back.tombstones)
	for k := range mc.m.queues {
		// A queue a lost removal record (or a lost re-creation after a
		// removal) brought back is durable: everything recovered is.
		if at := mc.m.queueDurableAt[k]; at == 0 || at > mc.durable {
			mc.m.queueDurableAt[k] = mc.durable
		}
	}
	mc.queries, mc.removes = nil, nil
	clear(mc.lastToken)
	for k, at := range mc.m.removedAt {
		if at > mc.durable {
			delete(mc.m.removedAt, k)
		}
	}
	mc.m.sessions = map[SessionID]mSession{}
	for k, at := range mc.m.queueDurableAt {
		if at > mc.durable {
			delete(mc.m.queueDurableAt, k)
		}
	}
	mc.conns, mc.loads, mc.askedData, mc.askedAt = map[ConnID]*mConn{}, nil, nil, 0
	mc.settings = map[core.QueueID][]*DeclareSettings{}
	var kept []uint64
	for _, b := range mc.bounds {
		if b <= mc.durable {
			kept = append(kept, b)
		}
	}
	mc.bounds = kept
	mc.step(t, &Tick{NowMs: mc.nowMs})
}

func TestNodeAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mc := newNodeMachine(t)
		t.Repeat(map[string]func(*rapid.T){
			"connect": func(t *rapid.T) {
				mc.nextConn++
				id := mc.nextConn
				open := len(mc.conns)
				mc.step(t, &ConnOpened{NowMs: mc.nowMs, Conn: id, Entropy: entropyOf(byte(id) ^ mc.entropySeq<<4)})
				if open < mc.cfg.ConnectionsMax {
					mc.conns[id] = &mConn{phase: connHandshaking}
				}
			},
			"close": func(t *rapid.T) {
				ids := slices.Sorted(maps.Keys(mc.conns))
				if len(ids) == 0 {
					t.Skip("no connection")
				}
				id := rapid.SampledFrom(ids).Draw(t, "conn")
				delete(mc.conns, id)
				mc.step(t, &ConnClosed{NowMs: mc.nowMs, Conn: id})
			},
			"hello": func(t *rapid.T) {
				var ids []ConnID
				for _, id := range slices.Sorted(maps.Keys(mc.conns)) {
					if mc.conns[id].phase == connHandshaking {
						ids = append(ids, id)
					}
				}
				if len(ids) == 0 {
					t.Skip("no connection in its handshake")
				}
				id := rapid.SampledFrom(ids).Draw(t, "conn")
				c := mc.conns[id]
				if len(mc.identities) > 0 && rapid.Bool().Draw(t, "resume?") {
					r := rapid.SampledFrom(mc.identities).Draw(t, "identity")
					// Often a persisted skeleton's: resumes after restart,
					// near and past the TTL.
					if ids := slices.SortedFunc(maps.Keys(mc.m.skeletons), func(a, b [16]byte) int { return compareBytes(a[:], b[:]) }); len(ids) > 0 && rapid.Bool().Draw(t, "skeleton?") {
						id := rapid.SampledFrom(ids).Draw(t, "skeletonID")
						r = wire.ResumeIdentity{OwnerID: mc.owner, ClientID: id, ResumeToken: mc.m.skeletons[id].token}
					}
					switch rapid.IntRange(0, 5).Draw(t, "spoil") {
					case 0:
						r.OwnerID[3] ^= 1
					case 1:
						r.ResumeToken[5] ^= 1
					}
					c.resume = &r
				}
				c.phase = connHelloHeld // answered in this step, or once the boot record is durable
				// Time may pass with the frame itself: a skeleton can reach
				// its TTL in the very step that resumes it.
				mc.nowMs += rapid.SampledFrom([]int64{0, 0, 1000, 60_000}).Draw(t, "dt")
				mc.step(t, helloFrame(mc.nowMs, id, 1, c.resume))
			},
			"end": func(t *rapid.T) {
				ids := slices.Sorted(maps.Keys(mc.m.sessions))
				if len(ids) == 0 {
					t.Skip("no session")
				}
				id := rapid.SampledFrom(ids).Draw(t, "session")
				delete(mc.m.skeletons, mc.m.sessions[id].clientID)
				delete(mc.m.sessions, id)
				mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: SessionAddr(id), To: NodeAddr(), Msg: &SessionEnded{}}})
			},
			"skeleton": func(t *rapid.T) {
				ids := slices.Sorted(maps.Keys(mc.m.sessions))
				if len(ids) == 0 {
					t.Skip("no session")
				}
				id := rapid.SampledFrom(ids).Draw(t, "session")
				var subs []SkeletonSub
				for i := rapid.IntRange(0, 2).Draw(t, "subs"); i > 0; i-- {
					subs = append(subs, SkeletonSub{Queue: qid(rapid.SampledFrom(declareTopics).Draw(t, "topic"), 0),
						Prefetch: uint32(rapid.IntRange(1, 9).Draw(t, "prefetch")), AutoAck: rapid.Bool().Draw(t, "autoAck")})
				}
				s := mc.m.sessions[id]
				mc.m.skeletons[s.clientID] = mSkeleton{token: s.token, savedAtMs: mc.nowMs, subs: subs}
				mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: SessionAddr(id), To: NodeAddr(), Msg: &SkeletonChanged{Subs: subs}}})
			},
			"open": func(t *rapid.T) {
				key := queueKey{Topic: rapid.SampledFrom(declareTopics).Draw(t, "topic")}
				mc.modelOpen(key)
				msg := &Open{Token: 1, Topic: key.Topic, Partition: uint32(rapid.IntRange(0, 2).Draw(t, "partition"))}
				mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: SessionAddr(999), To: NodeAddr(), Msg: msg}})
			},
			"declare": func(t *rapid.T) {
				i := rapid.IntRange(0, len(declareTopics)-1).Draw(t, "topic")
				key := queueKey{Topic: declareTopics[i]}
				d := &DeclareQueue{Token: uint64(i), Topic: key.Topic, PartitionCount: uint32(rapid.IntRange(0, 4).Draw(t, "count"))}
				if rapid.Bool().Draw(t, "retries?") {
					d.MaxRetries = u32(uint32(rapid.IntRange(0, 2).Draw(t, "retries")))
				}
				if rapid.Bool().Draw(t, "ttl?") {
					d.DefaultTTLMs = i64(int64(rapid.IntRange(0, 2).Draw(t, "ttl")))
				}
				if rapid.Bool().Draw(t, "dlq?") {
					d.DLQ = &core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: rapid.SampledFrom(declareTopics).Draw(t, "target")}}
				}
				mc.modelDeclare(key, d)
				mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: SessionAddr(999), To: NodeAddr(), Msg: d}})
			},
			"declareStream": func(t *rapid.T) {
				i := rapid.IntRange(0, len(declareTopics)-1).Draw(t, "topic")
				topic := declareTopics[i]
				settings := core.StreamSettings{Tier: uint8(rapid.IntRange(1, 2).Draw(t, "tier")),
					MaxRecords: uint64(rapid.IntRange(0, 1).Draw(t, "maxRecords")), PartitionCount: uint32(rapid.IntRange(1, 4).Draw(t, "count"))}
				mc.modelDeclareStream(topic, settings)
				d := &DeclareStream{Token: streamDeclareToken + uint64(i), Topic: topic, Settings: settings}
				mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: SessionAddr(999), To: NodeAddr(), Msg: d}})
			},
			"openStream": func(t *rapid.T) {
				// SUBSCRIBE_STREAM's open: never creates anything.
				msg := &Open{Token: 1, Topic: rapid.SampledFrom(declareTopics).Draw(t, "topic"), Partition: uint32(rapid.IntRange(0, 2).Draw(t, "partition")), Stream: true}
				mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: SessionAddr(999), To: NodeAddr(), Msg: msg}})
			},
			"loadDone": func(t *rapid.T) {
				if len(mc.loads) == 0 {
					t.Skip("no load asked for")
				}
				i := rapid.IntRange(0, len(mc.loads)-1).Draw(t, "load")
				q := mc.loads[i]
				mc.loads = slices.Delete(mc.loads, i, i+1)
				var err error
				if rapid.IntRange(0, 3).Draw(t, "fail?") == 0 {
					err = fmt.Errorf("load failed")
				}
				mc.step(t, &LoadDone{NowMs: mc.nowMs, Queue: q, Err: err})
			},
			"settingsApplied": func(t *rapid.T) {
				ids := slices.SortedFunc(maps.Keys(mc.settings), func(a, b core.QueueID) int { return compareBytes([]byte(a.String()), []byte(b.String())) })
				if len(ids) == 0 {
					t.Skip("no settings on their way")
				}
				q := rapid.SampledFrom(ids).Draw(t, "partition")
				// The Host answers some prefix of what it was sent; or its
				// envelope bounces (the Host is gone).
				pending := mc.settings[q]
				upTo := rapid.IntRange(1, len(pending)).Draw(t, "upTo")
				msg := pending[upTo-1]
				if upTo == len(pending) {
					delete(mc.settings, q)
				} else {
					mc.settings[q] = pending[upTo:]
				}
				if rapid.IntRange(0, 4).Draw(t, "bounce?") == 0 {
					mc.step(t, &Bounced{NowMs: mc.nowMs, Envelope: Envelope{From: NodeAddr(), To: PartitionAddr(q), Msg: msg}})
					return
				}
				mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: PartitionAddr(q), To: NodeAddr(), Msg: &SettingsApplied{Seq: msg.Seq}}})
			},
			"persist": func(t *rapid.T) {
				var candidates []uint64
				for _, b := range mc.bounds {
					if b > mc.durable {
						candidates = append(candidates, b)
					}
				}
				if len(candidates) == 0 {
					t.Skip("all durable")
				}
				mc.durable = rapid.SampledFrom(candidates).Draw(t, "upTo")
				mc.step(t, &Persisted{NowMs: mc.nowMs, UpToIndex: mc.durable})
			},
			"snapshotDone": func(t *rapid.T) {
				if mc.askedData == nil || mc.askedAt > mc.durable {
					t.Skip("no snapshot storage could have written")
				}
				mc.snapshot, mc.snapshotAt = mc.askedData, mc.askedAt
				at := mc.askedAt
				mc.askedData, mc.askedAt = nil, 0
				mc.step(t, &SnapshotDone{NowMs: mc.nowMs, Index: at})
			},
			"tick": func(t *rapid.T) {
				mc.nowMs += rapid.SampledFrom([]int64{0, 10, 999, 1000, 30_000, 59_999, 60_000}).Draw(t, "dt")
				mc.step(t, &Tick{NowMs: mc.nowMs})
			},
			"crash": func(t *rapid.T) { mc.crash(t) },
			"delete": func(t *rapid.T) {
				key := queueKey{Topic: rapid.SampledFrom(declareTopics).Draw(t, "topic")}
				mc.nextRequest++
				mc.deleteKeys[mc.nextRequest] = key
				mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: AdminAddr(mc.nextRequest), To: NodeAddr(), Msg: &DeleteQueue{Topic: key.Topic}}})
			},
			"queuesDebug": func(t *rapid.T) {
				mc.nextRequest++
				mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: AdminAddr(mc.nextRequest), To: NodeAddr(), Msg: &QueuesDebugRequest{}}})
			},
			"inflightCount": func(t *rapid.T) {
				if len(mc.queries) == 0 {
					t.Skip("no query asked")
				}
				i := rapid.IntRange(0, len(mc.queries)-1).Draw(t, "query")
				env := mc.queries[i]
				mc.queries = slices.Delete(mc.queries, i, i+1)
				q := env.Msg.(*InflightQuery)
				if rapid.IntRange(0, 4).Draw(t, "bounce?") == 0 {
					mc.step(t, &Bounced{NowMs: mc.nowMs, Envelope: env})
					return
				}
				n := rapid.SampledFrom([]int{0, 0, 0, 2}).Draw(t, "inflight")
				if n > 0 {
					mc.tokenInUse[q.Token] = true
				}
				mc.step(t, &Deliver{NowMs: mc.nowMs, Envelope: Envelope{From: env.To, To: NodeAddr(), Msg: &InflightCount{Token: q.Token, Inflight: n}}})
			},
			"removeDone": func(t *rapid.T) {
				if len(mc.removes) == 0 {
					t.Skip("no removal asked")
				}
				i := rapid.IntRange(0, len(mc.removes)-1).Draw(t, "remove")
				req := mc.removes[i]
				mc.removes = slices.Delete(mc.removes, i, i+1)
				var err error
				if rapid.IntRange(0, 4).Draw(t, "fail?") == 0 {
					err = fmt.Errorf("disk said no")
				} else {
					delete(mc.m.tombstones, queueKey{Topic: req.Topic, Group: req.Group})
				}
				mc.step(t, &RemoveDone{NowMs: mc.nowMs, Topic: req.Topic, Group: req.Group, Err: err})
			},
		})
	})
}

// modelDeclareStream: a new stream on a free topic within the bounds; the
// same settings again change nothing, others are refused.
func (mc *nodeMachine) modelDeclareStream(topic string, settings core.StreamSettings) {
	if _, exists := mc.m.streams[topic]; exists || settings.PartitionCount > mc.cfg.PartitionsPerQueueMax ||
		len(mc.m.queues)+len(mc.m.streams) >= mc.cfg.QueuesMax {
		return
	}
	for k := range mc.m.queues {
		if k.Topic == topic {
			return // a topic is a queue or a stream
		}
	}
	if !mc.partitionRoom(settings.PartitionCount) {
		return // past the partition budget
	}
	for k := range mc.m.queues {
		if k.Topic == topic {
			return // a topic is a queue or a stream
		}
	}
	mc.m.streams[topic] = settings
	mc.m.queueDurableAt[queueKey{Topic: topic}] = mc.n.state.lastIndex + 1
}

// noteRemovalRecord applies a removal record to the model once its
// preconditions hold: the queue exists, and no partition asked for the
// delete reported an inflight message.
func (mc *nodeMachine) noteRemovalRecord(t *rapid.T, r Record) {
	rec, err := decodeRecord(r.Data)
	if err != nil || rec.kind != recordQueueRemoved {
		return
	}
	key := *rec.queueKey
	if _, ok := mc.m.queues[key]; !ok {
		t.Fatalf("removal of %v, which the model does not have", key)
	}
	if tok := mc.lastToken[key]; tok != 0 && mc.tokenInUse[tok] {
		t.Fatalf("removal of %v although a partition reported inflight messages", key)
	}
	found := false
	for _, k := range mc.deleteKeys {
		found = found || k == key
	}
	if !found {
		t.Fatalf("removal of %v that no operator asked for", key)
	}
	delete(mc.m.queues, key)
	delete(mc.m.queueDurableAt, key)
	mc.m.tombstones[key] = true
	mc.m.removedAt[key] = r.Index
}
