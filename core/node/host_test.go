package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
)

// One test per rule of the Host (brief: routing, dead letters, spill,
// snapshots).

func TestHostAnswersTheSenderByTokenOnceDurable(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.autoPersist = false
	hh.publish(1, 42, "a")
	if r, _ := take[*Response](hh); len(r) != 0 {
		t.Fatalf("confirmed before durable: %+v", r)
	}
	hh.persist()
	r, to := take[*Response](hh)
	if len(r) != 1 || r[0].Token != 42 || r[0].Reply.Kind != core.ReplyPublished || to[0] != SessionAddr(1) {
		t.Fatalf("confirm %+v to %v", r, to)
	}
	if len(hh.h.refs) != 0 {
		t.Fatalf("%d references left after the confirm", len(hh.h.refs))
	}
	// Token 0 expects nothing, even an error.
	hh.request(1, 0, &core.Ack{SubID: 99, Tags: []uint64{1}})
	hh.request(1, 0, &core.Publish{Confirm: false, Body: &core.Body{Payload: []byte("b")}})
	if r, _ := take[*Response](hh); len(r) != 0 {
		t.Fatalf("token 0 answered: %+v", r)
	}
	// An error answers at once, and only the first reply per request.
	hh.request(1, 7, &core.Ack{SubID: 99, Tags: []uint64{1, 2}})
	if r, _ := take[*Response](hh); len(r) != 1 || r[0].Token != 7 || r[0].Reply.Err != core.ErrUnknownSubscription {
		t.Fatalf("error response %+v", r)
	}
	if len(hh.h.refs) != 0 {
		t.Fatalf("%d references left", len(hh.h.refs))
	}
}

func TestHostGroupsDeliveriesPerSubscriptionPerStep(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.subscribe(1, 11, 10)
	hh.subscribe(2, 22, 10)
	take[*Response](hh)
	hh.autoPersist = false
	for i := 0; i < 6; i++ {
		hh.publish(1, 0, "m")
	}
	hh.persist() // one step makes all six deliverable
	batches, to := take[*Deliveries](hh)
	if len(batches) != 2 {
		t.Fatalf("want one envelope per subscription, got %d", len(batches))
	}
	for i, b := range batches {
		want := SessionAddr(SessionID(i + 1))
		if to[i] != want || b.SubID != uint64(11*(i+1)) || len(b.Items) != 3 || b.Queue != qid("jobs", 0) {
			t.Fatalf("batch %d: %+v to %v", i, b, to[i])
		}
		for _, d := range b.Items {
			if d.SubID != b.SubID {
				t.Fatalf("delivery of sub %d in the batch of %d", d.SubID, b.SubID)
			}
		}
	}
	if &batches[0].Items[0] == &batches[1].Items[0] {
		t.Fatal("batches share their items")
	}
}

func TestHostSubscribeRegistersItsOwnerAndARefusalForgetsIt(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.publish(1, 0, "a")
	hh.subscribe(1, 5, 1)
	// The delivery of the subscribing step itself is routed, after its OK.
	if len(hh.out) != 2 {
		t.Fatalf("want SUBSCRIBE_OK then the delivery, got %+v", hh.out)
	}
	if r, ok := hh.out[0].Msg.(*Response); !ok || r.Reply.Kind != core.ReplySubscribed {
		t.Fatalf("first envelope %+v", hh.out[0])
	}
	if _, ok := hh.out[1].Msg.(*Deliveries); !ok || hh.out[1].To != SessionAddr(1) {
		t.Fatalf("second envelope %+v", hh.out[1])
	}
	hh.out = nil
	// Session 2 taking the same SubID is refused and does not steal it.
	hh.request(2, 3, &core.Subscribe{SubID: 5, Prefetch: 1})
	if r, _ := take[*Response](hh); len(r) != 1 || r[0].Reply.Err != core.ErrAlreadySubscribed {
		t.Fatalf("duplicate subscribe: %+v", r)
	}
	if hh.h.subs[5] != SessionAddr(1) {
		t.Fatalf("subscription 5 now owned by %v", hh.h.subs[5])
	}
	hh.request(1, 4, &core.Unsubscribe{SubID: 5})
	if len(hh.h.subs) != 0 {
		t.Fatal("an unsubscribed subscription is still routed")
	}
}

func TestHostBouncedDeliveriesEndTheGhostSubscription(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.subscribe(1, 5, 1)
	hh.subscribe(1, 6, 1)
	hh.publish(2, 0, "a")
	batches, to := take[*Deliveries](hh)
	if len(batches) != 1 {
		t.Fatalf("want one delivery, got %d", len(batches))
	}
	hh.step(&Bounced{NowMs: hh.now, Envelope: Envelope{From: PartitionAddr(hh.pcfg.Queue), To: to[0], Msg: batches[0]}})
	if ids := hh.h.Partition().SubscriptionIDs(); len(ids) != 0 {
		t.Fatalf("the gone session's subscriptions %v are still registered", ids)
	}
	// The bounced delivery is ready again at once, not after a lease.
	if c := hh.h.Partition().Counts(); c.Ready != 1 || c.Inflight != 0 {
		t.Fatalf("after the bounce: %+v", c)
	}
}

// deadLetterOne publishes and fails n messages, so the core dead-letters
// them to dlq.
func deadLetterMessages(hh *hostHarness, n int) {
	hh.t.Helper()
	hh.subscribe(1, 5, uint32(n))
	for i := 0; i < n; i++ {
		hh.publish(1, 0, "x")
	}
	batches, _ := take[*Deliveries](hh)
	tags := deliveredTags(batches)
	if len(tags) != n {
		hh.t.Fatalf("want %d deliveries, got %d", n, len(tags))
	}
	hh.request(1, 0, &core.Nack{SubID: 5, Tags: tags, Requeue: false})
}

func TestHostSettlesASourceOnlyOnceItsCopyIsStored(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), deadLetterSettings())
	deadLetterMessages(hh, 1)
	outs, to := take[*DeadLetterOut](hh)
	if len(outs) != 1 || to[0] != NodeAddr() || outs[0].Target.Topic != "dlq" || outs[0].Offset != 0 {
		t.Fatalf("dead letter %+v to %v", outs, to)
	}
	if len(hh.settled) != 0 {
		t.Fatal("settled before the copy was stored")
	}
	if v, _ := hh.h.Partition().Message(0); v.State != core.MessagePendingDLQ {
		t.Fatalf("source is %v", v.State)
	}
	hh.deliver(NodeAddr(), &DeadLetterStored{Offset: 0})
	if len(hh.settled) != 1 || hh.settled[0].Kind != core.SettledDeadLettered {
		t.Fatalf("settled %+v", hh.settled)
	}
	// A second answer for the same copy is harmless.
	hh.deliver(PartitionAddr(qid("dlq", 0)), &DeadLetterStored{Offset: 0})
}

func TestHostRetriesARefusedCopyWithDoublingBackoffForever(t *testing.T) {
	cfg := testHostConfig()
	hh := newHostHarness(t, cfg, testPartitionConfig("jobs"), deadLetterSettings())
	deadLetterMessages(hh, 1)
	take[*DeadLetterOut](hh)
	backoff := cfg.DeadLetterRetryMinMs
	for attempt := 0; attempt < 8; attempt++ {
		hh.deliver(NodeAddr(), &DeadLetterFailed{Offset: 0, Err: core.ErrPartitionLoadFailed})
		if hh.wakeMs != hh.now+backoff {
			t.Fatalf("attempt %d: wake %d, want now+%d", attempt, hh.wakeMs-hh.now, backoff)
		}
		hh.tick(backoff - 1)
		if outs, _ := take[*DeadLetterOut](hh); len(outs) != 0 {
			t.Fatalf("attempt %d: resent before the backoff", attempt)
		}
		hh.tick(1)
		if outs, _ := take[*DeadLetterOut](hh); len(outs) != 1 || outs[0].Offset != 0 {
			t.Fatalf("attempt %d: not resent after the backoff", attempt)
		}
		backoff = min(2*backoff, cfg.DeadLetterRetryMaxMs)
	}
	if backoff != cfg.DeadLetterRetryMaxMs {
		t.Fatalf("backoff %d never reached the cap", backoff)
	}
	// A copy whose envelope bounced (no Node) is retried the same way.
	hh.step(&Bounced{NowMs: hh.now, Envelope: Envelope{From: PartitionAddr(hh.pcfg.Queue), To: NodeAddr(), Msg: &DeadLetterOut{Offset: 0}}})
	if hh.h.dlq[0].state != copyRetrying {
		t.Fatal("a bounced copy is not retried")
	}
	hh.tick(cfg.DeadLetterRetryMaxMs)
	hh.deliver(NodeAddr(), &DeadLetterStored{Offset: 0})
	if len(hh.settled) != 1 {
		t.Fatal("the copy stored after many retries did not settle its source")
	}
}

func TestHostBoundsCopiesInFlightAndSendsTheRestInOrder(t *testing.T) {
	cfg := testHostConfig()
	cfg.DeadLettersInflightMax = 2
	hh := newHostHarness(t, cfg, testPartitionConfig("jobs"), deadLetterSettings())
	deadLetterMessages(hh, 5)
	outs, _ := take[*DeadLetterOut](hh)
	if len(outs) != 2 || outs[0].Offset != 0 || outs[1].Offset != 1 {
		t.Fatalf("want copies 0 and 1 on their way, got %+v", outs)
	}
	hh.deliver(NodeAddr(), &DeadLetterFailed{Offset: 0}) // retrying still holds its slot
	if outs, _ := take[*DeadLetterOut](hh); len(outs) != 0 {
		t.Fatal("a retrying copy gave up its slot")
	}
	hh.deliver(NodeAddr(), &DeadLetterStored{Offset: 1})
	if outs, _ := take[*DeadLetterOut](hh); len(outs) != 1 || outs[0].Offset != 2 {
		t.Fatalf("want copy 2 next, got %+v", outs)
	}
}

func TestHostStoresACopyAndAnswersItsSource(t *testing.T) {
	pcfg := testPartitionConfig("dlq")
	pcfg.QueueDepthMax = 1
	hh := newHostHarness(t, testHostConfig(), pcfg, DeclareSettings{})
	src := qid("jobs", 0)
	body := &core.Body{Payload: []byte("x"), Headers: []core.Header{{Key: core.HeaderDLQReason, Value: "expired"}}}
	hh.autoPersist = false
	hh.deliver(NodeAddr(), &StoreDeadLetter{Source: src, Offset: 3, Body: body})
	if st, _ := take[*DeadLetterStored](hh); len(st) != 0 {
		t.Fatal("stored before durable")
	}
	hh.persist()
	st, to := take[*DeadLetterStored](hh)
	if len(st) != 1 || st[0].Offset != 3 || to[0] != PartitionAddr(src) {
		t.Fatalf("stored %+v to %v", st, to)
	}
	if body.ReceivedMs != 0 {
		t.Fatal("the target stamped the source's body")
	}
	// Full: refused at once.
	hh.deliver(NodeAddr(), &StoreDeadLetter{Source: src, Offset: 4, Body: body})
	f, to := take[*DeadLetterFailed](hh)
	if len(f) != 1 || f[0].Offset != 4 || f[0].Err != core.ErrQueueFull || to[0] != PartitionAddr(src) {
		t.Fatalf("refused %+v to %v", f, to)
	}
	// A body still in storage cannot go into this log.
	hh.deliver(NodeAddr(), &StoreDeadLetter{Source: src, Offset: 5, Body: &core.Body{Ref: core.PayloadRef{File: 1, LengthBytes: 1}}})
	if f, _ := take[*DeadLetterFailed](hh); len(f) != 1 || f[0].Err != core.ErrDeadLetterUnresolved {
		t.Fatalf("stored body: %+v", f)
	}
}

func TestHostSpillsNewlyStoredPayloadsPastTheBudget(t *testing.T) {
	cfg := testHostConfig()
	cfg.ResidentPayloadBytesMax = 10
	hh := newHostHarness(t, cfg, testPartitionConfig("jobs"), DeclareSettings{})
	hh.stored = true
	for i := 0; i < 5; i++ {
		hh.publish(1, 0, "abcd") // 4 bytes each
	}
	p := hh.h.Partition()
	if got := p.ResidentPayloadBytes(); got > cfg.ResidentPayloadBytesMax {
		t.Fatalf("resident %d over the budget %d", got, cfg.ResidentPayloadBytesMax)
	}
	// The head of the backlog keeps its payload.
	if v, _ := p.Message(0); v.Body.IsStored() {
		t.Fatal("the oldest message was spilled")
	}
	if v, _ := p.Message(4); !v.Body.IsStored() {
		t.Fatal("the newest message over the budget kept its payload")
	}
	// Other partitions' bytes count too.
	hh2 := newHostHarness(t, cfg, testPartitionConfig("other"), DeclareSettings{})
	hh2.stored, hh2.residentOthers = true, 100
	hh2.publish(1, 0, "ab")
	if v, _ := hh2.h.Partition().Message(0); !v.Body.IsStored() {
		t.Fatal("the broker-wide total over the budget did not spill")
	}
}

func TestHostSnapshotsUnderSustainedLoad(t *testing.T) {
	cfg := testHostConfig()
	cfg.SnapshotEntriesMin = 20
	hh := newHostHarness(t, cfg, testPartitionConfig("jobs"), DeclareSettings{})
	hh.request(1, 0, &core.Subscribe{SubID: 5, Prefetch: 1, AutoAck: true})
	hh.autoPersist = false
	// Never quiescent: storage always lags one publish behind; an auto-ack
	// consumer keeps the live set small.
	for i := 0; i < 30; i++ {
		hh.publish(1, 0, "m")
		upTo := hh.h.Partition().LastIndex() - 1
		hh.step(&Persisted{NowMs: hh.now, UpToIndex: upTo})
		if hh.h.Partition().DurableIndex() == hh.h.Partition().LastIndex() {
			t.Fatal("the harness let the partition go quiescent")
		}
	}
	if len(hh.snapshots) != 1 {
		t.Fatalf("want one snapshot in flight under load, got %d", len(hh.snapshots))
	}
	s := hh.snapshots[0]
	if s.Index <= uint64(cfg.SnapshotEntriesMin) || s.Index > hh.h.Partition().DurableIndex() {
		t.Fatalf("snapshot at %d (durable %d)", s.Index, hh.h.Partition().DurableIndex())
	}
	// The snapshot is the partition's state at its index.
	recovered, err := core.Recover(hh.pcfg, s.Data, nil)
	if err != nil || recovered.LastIndex() != s.Index {
		t.Fatalf("snapshot does not recover at its index: %v", err)
	}
	hh.step(&SnapshotDone{NowMs: hh.now, Index: s.Index})
	hh.autoPersist = true
	for i := 0; i < 30; i++ {
		hh.publish(1, 0, "m")
	}
	if len(hh.snapshots) != 2 || hh.snapshots[1].Index <= s.Index {
		t.Fatalf("no second snapshot after as many entries again: %d", len(hh.snapshots))
	}
}

func TestHostSnapshotWaitsForManyEntriesPerLiveMessage(t *testing.T) {
	cfg := testHostConfig()
	cfg.SnapshotEntriesMin = 5
	hh := newHostHarness(t, cfg, testPartitionConfig("jobs"), DeclareSettings{})
	for i := 0; i < 20; i++ { // 20 live messages: wait for 4 x 20 entries
		hh.publish(1, 0, "m")
	}
	if len(hh.snapshots) != 0 {
		t.Fatalf("snapshot after %d entries with 20 live", hh.h.Partition().LastIndex())
	}
}

func TestHostAppliesCatalogueSettingsFirstAndResendsPendingCopies(t *testing.T) {
	pcfg := testPartitionConfig("jobs")
	hh := newHostHarness(t, testHostConfig(), pcfg, deadLetterSettings())
	if s := hh.h.Partition().Settings(); s.DLQ.Kind != core.DLQCustom || s.MaxRetries != 0 {
		t.Fatalf("catalogue settings not applied: %+v", s)
	}
	if len(hh.log) != 1 || hh.log[0].Kind != core.EntryDeclare {
		t.Fatalf("want the catalogue's Declare first, got %+v", hh.log)
	}
	deadLetterMessages(hh, 2)
	take[*DeadLetterOut](hh)
	// Recover the partition from its log: the pending copies come out of
	// the first step, and settings equal to the catalogue's add no entry.
	p, err := core.Recover(pcfg, nil, hh.log)
	if err != nil {
		t.Fatal(err)
	}
	last := p.LastIndex()
	hh2 := newHostHarnessFrom(t, testHostConfig(), pcfg, p, deadLetterSettings())
	outs, _ := take[*DeadLetterOut](hh2)
	if len(outs) != 2 || p.LastIndex() != last {
		t.Fatalf("after recovery: %d copies resent, %d new entries", len(outs), p.LastIndex()-last)
	}
}

func TestHostDeclareSettingsFromTheNode(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.deliver(NodeAddr(), &DeclareSettings{MaxRetries: u32(9)})
	if hh.h.Partition().Settings().MaxRetries != 9 {
		t.Fatal("DeclareSettings not applied")
	}
	last := hh.h.Partition().LastIndex()
	hh.deliver(NodeAddr(), &DeclareSettings{MaxRetries: u32(9)})
	if hh.h.Partition().LastIndex() != last {
		t.Fatal("unchanged settings appended an entry")
	}
}

func TestHostPauseRequest(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.subscribe(1, 5, 4)
	hh.request(1, 0, &core.PauseSubscription{SubID: 5, Paused: true})
	hh.publish(2, 0, "a")
	if b, _ := take[*Deliveries](hh); len(b) != 0 {
		t.Fatal("a paused subscription got a delivery")
	}
	hh.request(1, 0, &core.PauseSubscription{SubID: 5, Paused: false})
	if b, _ := take[*Deliveries](hh); len(b) != 1 {
		t.Fatal("unpausing did not deliver")
	}
}

// DeclareSettings with a Seq is answered SettingsApplied once in force, even
// when nothing changes; without one it is not answered.
func TestHostAcknowledgesDeclareSettings(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.deliver(NodeAddr(), &DeclareSettings{MaxRetries: u32(4), Seq: 9})
	acks, to := take[*SettingsApplied](hh)
	if len(acks) != 1 || acks[0].Seq != 9 || to[0] != NodeAddr() || hh.h.Partition().Settings().MaxRetries != 4 {
		t.Fatalf("acks %+v to %v, max retries %d", acks, to, hh.h.Partition().Settings().MaxRetries)
	}
	hh.deliver(NodeAddr(), &DeclareSettings{MaxRetries: u32(4), Seq: 10})
	if acks, _ := take[*SettingsApplied](hh); len(acks) != 1 || acks[0].Seq != 10 {
		t.Fatalf("an unchanged setting is acknowledged too: %+v", acks)
	}
	hh.deliver(NodeAddr(), &DeclareSettings{MaxRetries: u32(5)})
	if acks, _ := take[*SettingsApplied](hh); len(acks) != 0 {
		t.Fatalf("no Seq, no answer: %+v", acks)
	}
}

func TestHostBatchesOneStepsAnswersPerSession(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.autoPersist = false
	// Two sessions' publishes interleaved, made durable by one Persisted.
	for i := uint64(1); i <= 3; i++ {
		hh.publish(1, 10+i, "a")
		hh.publish(2, 20+i, "b")
	}
	hh.publish(3, 31, "c")
	hh.out = nil
	hh.persist()
	var batches []*Responses
	var singles []*Response
	var to []Address
	for _, env := range hh.out {
		switch m := env.Msg.(type) {
		case *Responses:
			batches = append(batches, m)
			to = append(to, env.To)
		case *Response:
			singles = append(singles, m)
		}
	}
	hh.out = nil
	if len(batches) != 2 || to[0] != SessionAddr(1) || to[1] != SessionAddr(2) {
		t.Fatalf("want one batch for each of sessions 1 and 2, got %d to %v", len(batches), to)
	}
	for b, batch := range batches {
		if len(batch.Items) != 3 {
			t.Fatalf("batch %d holds %d answers, want 3", b, len(batch.Items))
		}
		for i, r := range batch.Items {
			// In the order the session asked, each with its own offset.
			want := uint64(10*(b+1) + i + 1)
			if r.Token != want || r.Reply.Kind != core.ReplyPublished || r.Reply.Offset != uint64(2*i+b) {
				t.Fatalf("batch %d answer %d: %+v, want token %d", b, i, r, want)
			}
		}
	}
	// A session with one answer gets a plain Response.
	if len(singles) != 1 || singles[0].Token != 31 {
		t.Fatalf("single answers %+v", singles)
	}
}

// A lease that runs out is reported once in Ready.LeaseExpiries (the
// fibril_broker_expired_total metric), not as a settlement.
func TestHostReportsLeaseExpiries(t *testing.T) {
	pcfg := testPartitionConfig("jobs")
	pcfg.LeaseMs = 1000
	hh := newHostHarness(t, testHostConfig(), pcfg, DeclareSettings{})
	hh.autoPersist = true
	hh.subscribe(1, 5, 1)
	hh.publish(2, 0, "a")
	hh.tick(500)
	if hh.leaseExpiries != 0 {
		t.Fatalf("%d expiries before the lease ran out", hh.leaseExpiries)
	}
	hh.tick(600)
	if hh.leaseExpiries != 1 || len(hh.settled) != 0 {
		t.Fatalf("after the lease: %d expiries, settled %+v", hh.leaseExpiries, hh.settled)
	}
	hh.tick(10)
	if hh.leaseExpiries != 1 {
		t.Fatalf("an expiry reported twice: %d", hh.leaseExpiries)
	}
}
