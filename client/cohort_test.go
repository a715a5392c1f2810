package client_test

// Exclusive consumer groups against the scripted fake (PROTOCOL §5.6, §5.7,
// §5.16, §7.6, §7.8; SPEC §4): the member id absent on the first exclusive
// SUBSCRIBE and echoed on every later one, in reconcile entries and after a
// reconnect; ASSIGNMENT_CHANGED to the callback in generation order with stale
// notices dropped, without ever holding up the reader; SUBSCRIBE_ERR 409 and
// 400 as typed errors.

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/transport/wire"
)

// minted is the id the fake mints first ({0xC0, n}, n counting from 1).
var minted = wire.UUID{0xC0, 1}

// expectSubscribes reads the next n SUBSCRIBEs, in the order the client sent
// them.
func expectSubscribes(t *testing.T, fb *fakeBroker, n int) []wire.Subscribe {
	t.Helper()
	out := make([]wire.Subscribe, 0, n)
	for range n {
		out = append(out, fb.expect(t, wire.OpSubscribe).body.(wire.Subscribe))
	}
	return out
}

// checkExclusiveSubscribe checks the cohort fields of one SUBSCRIBE; member is
// the id it must carry, the nil UUID for none.
func checkExclusiveSubscribe(t *testing.T, s wire.Subscribe, cohort string, target uint32, member wire.UUID) {
	t.Helper()
	wantTarget := wire.Optional[uint32]{}
	if target != 0 {
		wantTarget = wire.Some(target)
	}
	wantMember := wire.Optional[wire.UUID]{}
	if !member.IsNil() {
		wantMember = wire.Some(member)
	}
	if s.ConsumerGroup != wire.Some(cohort) || s.ConsumerTarget != wantTarget || s.MemberID != wantMember {
		t.Fatalf("SUBSCRIBE %s/%d: consumer_group %+v target %+v member_id %+v, want %q, %+v, %+v",
			s.Topic, s.Partition, s.ConsumerGroup, s.ConsumerTarget, s.MemberID, cohort, wantTarget, wantMember)
	}
}

func TestExclusiveMemberIDMintedThenEchoed(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		fb := newFakeBroker(t, kind, fakeScript{topology: map[topicKey]uint32{
			{"orders", ""}: 3, {"audit", "g"}: 2, {"plain", ""}: 1, {"later", ""}: 1}})
		c := fb.dial(t, client.ClientOptions{})
		ctx := testContext(t)

		orders, err := c.SubscribeTopicExclusive(ctx, "orders", client.SubscribeOptions{Prefetch: 2, ConsumerTarget: 2})
		if err != nil {
			t.Fatalf("SubscribeTopicExclusive: %v", err)
		}
		subs := expectSubscribes(t, fb, 3)
		// The first goes alone and without a member id; the broker mints one.
		if subs[0].Partition != 0 {
			t.Fatalf("first exclusive SUBSCRIBE is for partition %d, want 0", subs[0].Partition)
		}
		checkExclusiveSubscribe(t, subs[0], client.DefaultConsumerGroup, 2, wire.UUID{})
		for _, s := range subs[1:] {
			checkExclusiveSubscribe(t, s, client.DefaultConsumerGroup, 2, minted)
		}
		if got := orders.MemberID(); got != minted {
			t.Fatalf("MemberID %v, want the minted %v", got, minted)
		}
		if orders.ConsumerGroup() != client.DefaultConsumerGroup {
			t.Fatalf("ConsumerGroup %q", orders.ConsumerGroup())
		}

		// Another queue, a named cohort: the first SUBSCRIBE already carries it.
		audit, err := c.SubscribeTopicExclusive(ctx, "audit", client.SubscribeOptions{Group: "g", ConsumerGroup: "auditors"})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range expectSubscribes(t, fb, 2) {
			checkExclusiveSubscribe(t, s, "auditors", 0, minted)
		}
		// A competing subscription carries no cohort field.
		if _, err := c.SubscribeTopic(ctx, "plain", client.SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
		if s := fb.expect(t, wire.OpSubscribe).body.(wire.Subscribe); s.ConsumerGroup.Present || s.ConsumerTarget.Present || s.MemberID.Present {
			t.Fatalf("competing SUBSCRIBE carries cohort fields: %+v", s)
		}

		// A reconnect: the reconcile entries carry the cohort fields and the id.
		fb.dropConnections()
		rec := fb.expectOp(t, wire.OpReconcileClient).body.(wire.ReconcileClient)
		exclusive := func(subID uint64, topic string, partition uint32, group wire.Optional[string], cohort string,
			target wire.Optional[uint32], prefetch uint32) wire.ReconcileSub {
			return wire.ReconcileSub{SubID: subID, Topic: topic, Partition: partition, Group: group, Prefetch: prefetch,
				ConsumerGroup: wire.Some(cohort), ConsumerTarget: target, MemberID: wire.Some(minted)}
		}
		var none wire.Optional[uint32]
		want := []wire.ReconcileSub{
			exclusive(1, "orders", 0, wire.Optional[string]{}, "default", wire.Some[uint32](2), 2),
			exclusive(2, "orders", 1, wire.Optional[string]{}, "default", wire.Some[uint32](2), 2),
			exclusive(3, "orders", 2, wire.Optional[string]{}, "default", wire.Some[uint32](2), 2),
			exclusive(4, "audit", 0, wire.Some("g"), "auditors", none, 1),
			exclusive(5, "audit", 1, wire.Some("g"), "auditors", none, 1),
			{SubID: 6, Topic: "plain", Partition: 0, Prefetch: 1},
		}
		if fmt.Sprint(rec.Subscriptions) != fmt.Sprint(want) {
			t.Fatalf("RECONCILE_CLIENT entries\n got %+v\nwant %+v", rec.Subscriptions, want)
		}
		waitGeneration(t, c, 2)
		if audit.CloseReason() != nil || orders.CloseReason() != nil {
			t.Fatalf("exclusive subscriptions closed by the resume: %v, %v", orders.CloseReason(), audit.CloseReason())
		}

		// The new connection has no member yet; the client sends the cached id
		// on its very first exclusive SUBSCRIBE.
		later, err := c.SubscribeTopicExclusive(ctx, "later", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkExclusiveSubscribe(t, fb.expect(t, wire.OpSubscribe).body.(wire.Subscribe), "default", 0, minted)
		if later.MemberID() != minted {
			t.Fatalf("MemberID after the reconnect %v, want %v", later.MemberID(), minted)
		}
	})
}

// After a reconnect the broker did not resume, a restore rejoins the cohort
// with the cached member id, and the id the server view names is adopted.
func TestExclusiveRestoredAfterUnresumedSession(t *testing.T) {
	notFound := wire.ResumeNotFound
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{resumeAs: &notFound, topology: map[topicKey]uint32{{"orders", ""}: 2}})
	c := fb.dial(t, client.ClientOptions{ReconcileRestore: true})
	ctx := testContext(t)
	sub, err := c.SubscribeTopicExclusive(ctx, "orders", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expectSubscribes(t, fb, 2)
	restored := wire.UUID{0xC0, 0x77}
	fb.update(func(s *fakeScript) {
		s.reconcile = func(m wire.ReconcileClient) wire.ReconcileResult {
			var result wire.ReconcileResult
			for i, entry := range m.Subscriptions {
				server := entry
				server.SubID = uint64(100 + i)
				server.MemberID = wire.Some(restored)
				result.Entries = append(result.Entries, wire.ReconcileEntry{Client: wire.Some(entry), Server: wire.Some(server),
					Action: wire.ReconcileKeep, Reason: "server_restored", Code: 3})
			}
			return result
		}
	})
	fb.dropConnections()
	rec := fb.expectOp(t, wire.OpReconcileClient).body.(wire.ReconcileClient)
	if rec.Policy != wire.ReconcileRestore || len(rec.Subscriptions) != 2 {
		t.Fatalf("RECONCILE_CLIENT %+v", rec)
	}
	for _, entry := range rec.Subscriptions {
		if entry.ConsumerGroup != wire.Some("default") || entry.MemberID != wire.Some(minted) {
			t.Fatalf("reconcile entry %+v, want cohort default and member %v", entry, minted)
		}
	}
	if info := waitGeneration(t, c, 2); info.ResumeOutcome != client.ResumeNotFound {
		t.Fatalf("outcome %v", info.ResumeOutcome)
	}
	if sub.MemberID() != restored {
		t.Fatalf("MemberID after the restore %v, want the server view's %v", sub.MemberID(), restored)
	}
	tag := fb.deliver(101, "orders", 0, "restored")
	if d := receiveOne(t, sub); d.Tag != tag {
		t.Fatalf("delivery on the restored partition: tag %d, want %d", d.Tag, tag)
	}
}

// Two exclusive subscribes racing before any member id is known: only the
// first SUBSCRIBE the broker sees goes without member_id.
func TestExclusiveConcurrentFirstSubscribesMintOnce(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{mintDelay: 100 * time.Millisecond,
		topology: map[topicKey]uint32{{"a", ""}: 2, {"b", ""}: 2}})
	c := fb.dial(t, client.ClientOptions{})
	ctx := testContext(t)
	errs := make(chan error, 2)
	for _, topic := range []string{"a", "b"} {
		go func() {
			_, err := c.SubscribeTopicExclusive(ctx, topic, client.SubscribeOptions{})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	subs := expectSubscribes(t, fb, 4)
	if subs[0].MemberID.Present {
		t.Fatalf("first SUBSCRIBE carries member id %v before any was minted", subs[0].MemberID)
	}
	for _, s := range subs[1:] {
		if s.MemberID != wire.Some(minted) {
			t.Fatalf("SUBSCRIBE %s/%d carries member_id %+v, want the minted %v (one mint per client)",
				s.Topic, s.Partition, s.MemberID, minted)
		}
	}
}

// assignment builds an ASSIGNMENT_CHANGED for the default cohort of "orders".
func assignment(generation uint64, assigned, added, revoked []uint32) wire.AssignmentChanged {
	return wire.AssignmentChanged{Topic: "orders", ConsumerGroup: "default", Generation: generation,
		Assigned: assigned, Added: added, Revoked: revoked}
}

func changeString(c client.AssignmentChange) string {
	return fmt.Sprintf("%s/%s/%s gen %d assigned %v added %v revoked %v",
		c.Topic, c.Group, c.ConsumerGroup, c.Generation, c.Assigned, c.Added, c.Revoked)
}

func nextChange(t *testing.T, changes <-chan client.AssignmentChange) client.AssignmentChange {
	t.Helper()
	select {
	case c := <-changes:
		return c
	case <-time.After(testTimeout):
		t.Fatal("no assignment change reached the callback")
	}
	return client.AssignmentChange{}
}

// assignmentOrderViolation pushes notices (some stale, some for other
// cohorts) and reports the first way the callback or Assignment broke the
// rules, or nil.
func assignmentOrderViolation(t *testing.T, kind string) error {
	changes := make(chan client.AssignmentChange, 16)
	fb := newFakeBroker(t, kind, fakeScript{topology: map[topicKey]uint32{{"orders", ""}: 4}})
	c := fb.dial(t, client.ClientOptions{OnAssignmentChanged: func(c client.AssignmentChange) { changes <- c }})
	ctx := testContext(t)
	sub, err := c.SubscribeTopicExclusive(ctx, "orders", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Assignment() != nil {
		return fmt.Errorf("Assignment before any notice: %v, want nil", sub.Assignment())
	}
	// Notices arrive unsorted; the client hands them over sorted.
	fb.pushAll(wire.OpAssignmentChanged, assignment(5, []uint32{3, 1, 0, 2}, []uint32{2, 0, 1, 3}, nil))
	if got, want := changeString(nextChange(t, changes)), "orders//default gen 5 assigned [0 1 2 3] added [0 1 2 3] revoked []"; got != want {
		return fmt.Errorf("first change %q, want %q", got, want)
	}
	fb.pushAll(wire.OpAssignmentChanged, assignment(7, []uint32{0, 1}, nil, []uint32{2, 3}))
	if got := nextChange(t, changes); got.Generation != 7 {
		return fmt.Errorf("second change %s, want generation 7", changeString(got))
	}
	// Stale (below and at the last generation) and foreign notices change
	// nothing; a PUBLISH round trip orders after them on the connection.
	fb.pushAll(wire.OpAssignmentChanged, assignment(6, []uint32{2}, []uint32{2}, []uint32{0, 1}))
	fb.pushAll(wire.OpAssignmentChanged, assignment(7, []uint32{3}, []uint32{3}, []uint32{0, 1}))
	other := assignment(100, []uint32{0}, []uint32{0}, nil)
	other.ConsumerGroup = "someone-else"
	fb.pushAll(wire.OpAssignmentChanged, other)
	other = assignment(100, []uint32{0}, []uint32{0}, nil)
	other.Group = wire.Some("g")
	fb.pushAll(wire.OpAssignmentChanged, other)
	if _, err := c.Publisher("orders").PublishConfirmed(ctx, client.Text("x")); err != nil {
		t.Fatal(err)
	}
	if got := sub.Assignment(); !slices.Equal(got, []uint32{0, 1}) {
		return fmt.Errorf("Assignment after stale and foreign notices %v, want [0 1] (generation 7)", got)
	}
	// The next fresh notice is the next change the callback gets.
	fb.pushAll(wire.OpAssignmentChanged, assignment(9, []uint32{0, 1, 3}, []uint32{3}, nil))
	if got, want := changeString(nextChange(t, changes)), "orders//default gen 9 assigned [0 1 3] added [3] revoked []"; got != want {
		return fmt.Errorf("change after stale and foreign notices %q, want %q", got, want)
	}
	if got := sub.Assignment(); !slices.Equal(got, []uint32{0, 1, 3}) {
		return fmt.Errorf("Assignment %v, want [0 1 3]", got)
	}
	select {
	case extra := <-changes:
		return fmt.Errorf("unexpected change %s", changeString(extra))
	case <-time.After(50 * time.Millisecond):
	}
	return nil
}

func TestAssignmentChangedInGenerationOrder(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		if err := assignmentOrderViolation(t, kind); err != nil {
			t.Fatal(err)
		}
	})
}

// A callback that blocks holds up neither deliveries nor Assignment; notices
// that arrive meanwhile reach it merged, as one change against what it saw.
func TestSlowAssignmentCallbackNeverBlocksTheReader(t *testing.T) {
	changes := make(chan client.AssignmentChange, 16)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{topology: map[topicKey]uint32{{"orders", ""}: 2}})
	c := fb.dial(t, client.ClientOptions{OnAssignmentChanged: func(c client.AssignmentChange) {
		changes <- c
		<-release
	}})
	ctx := testContext(t)
	sub, err := c.SubscribeTopicExclusive(ctx, "orders", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fb.pushAll(wire.OpAssignmentChanged, assignment(1, []uint32{0}, []uint32{0}, nil))
	if got := nextChange(t, changes); got.Generation != 1 {
		t.Fatalf("first change %s", changeString(got))
	}
	// The callback is now blocked inside generation 1.
	fb.pushAll(wire.OpAssignmentChanged, assignment(2, []uint32{0, 1}, []uint32{1}, nil))
	fb.pushAll(wire.OpAssignmentChanged, assignment(3, []uint32{1}, nil, []uint32{0}))
	tag := fb.deliver(2, "orders", 0, "while the callback is busy")
	if d := receiveOne(t, sub); d.Tag != tag {
		t.Fatalf("delivery tag %d, want %d", d.Tag, tag)
	}
	// The reader handled both notices before that DELIVER.
	if got := sub.Assignment(); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("Assignment while the callback is blocked: %v, want [1]", got)
	}
	releaseOnce.Do(func() { close(release) })
	// The callback saw [0]; generations 2 and 3 come as one change from [0] to [1].
	if got, want := changeString(nextChange(t, changes)), "orders//default gen 3 assigned [1] added [1] revoked [0]"; got != want {
		t.Fatalf("merged change %q, want %q", got, want)
	}
}

// A new connection's notice stream starts from nothing (PROTOCOL §5.16: the
// broker's added/revoked are against what it told that connection), so the
// first notice after a reconnect lists the whole assignment as added. The
// callback still gets the change against the previous notice it received:
// the partitions lost meanwhile are revoked. (The e2e cohort tests found
// the frame's lists passed through: a member that lost a partition while
// its connection was down was never told it was revoked.)
func TestAssignmentChangeAcrossAReconnectIsAgainstTheLastNotice(t *testing.T) {
	changes := make(chan client.AssignmentChange, 16)
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{topology: map[topicKey]uint32{{"orders", ""}: 4}})
	c := fb.dial(t, client.ClientOptions{OnAssignmentChanged: func(c client.AssignmentChange) { changes <- c }})
	sub, err := c.SubscribeTopicExclusive(testContext(t), "orders", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fb.pushAll(wire.OpAssignmentChanged, assignment(5, []uint32{0, 1}, []uint32{0, 1}, nil))
	if got, want := changeString(nextChange(t, changes)), "orders//default gen 5 assigned [0 1] added [0 1] revoked []"; got != want {
		t.Fatalf("first change %q, want %q", got, want)
	}
	fb.dropConnections()
	fb.expectOp(t, wire.OpReconcileClient)
	waitGeneration(t, c, 2)
	// The new connection's first notice: the whole assignment, as added.
	fb.pushAll(wire.OpAssignmentChanged, assignment(8, []uint32{1, 2}, []uint32{1, 2}, nil))
	if got, want := changeString(nextChange(t, changes)), "orders//default gen 8 assigned [1 2] added [2] revoked [0]"; got != want {
		t.Fatalf("change after the reconnect %q, want %q", got, want)
	}
	if got := sub.Assignment(); !slices.Equal(got, []uint32{1, 2}) {
		t.Fatalf("Assignment %v, want [1 2]", got)
	}
}

func TestExclusiveSubscribeErrors(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{
		topology: map[topicKey]uint32{{"taken", ""}: 1, {"old-broker", ""}: 1, {"busy", ""}: 1},
		cohortReject: func(m wire.Subscribe) *wire.ErrorBody {
			switch m.Topic {
			case "taken":
				return &wire.ErrorBody{Code: wire.CodeConflict, Message: "the queue already has cohort \"others\""}
			case "old-broker":
				return &wire.ErrorBody{Code: wire.CodeInvalid, Message: "consumer groups are not supported"}
			case "busy":
				return &wire.ErrorBody{Code: wire.CodeInternal, Message: "storage fault"}
			}
			return nil
		},
	})
	c := fb.dial(t, client.ClientOptions{})
	ctx := testContext(t)
	for _, tc := range []struct {
		topic             string
		code              uint16
		sentinel, notThis error
	}{
		{"taken", client.CodeConflict, client.ErrCohortConflict, client.ErrCohortInvalid},
		{"old-broker", client.CodeInvalid, client.ErrCohortInvalid, client.ErrCohortConflict},
	} {
		_, err := c.SubscribeTopicExclusive(ctx, tc.topic, client.SubscribeOptions{ConsumerGroup: "mine"})
		var cohortErr *client.CohortError
		var brokerErr *client.BrokerError
		switch {
		case !errors.As(err, &cohortErr):
			t.Fatalf("%s: %v, want a *CohortError", tc.topic, err)
		case !errors.Is(err, tc.sentinel) || errors.Is(err, tc.notThis):
			t.Fatalf("%s: %v: errors.Is %v false or %v true", tc.topic, err, tc.sentinel, tc.notThis)
		case !errors.As(err, &brokerErr) || brokerErr.Code != tc.code || brokerErr.Opcode != "SUBSCRIBE_ERR":
			t.Fatalf("%s: %v, want a SUBSCRIBE_ERR %d *BrokerError inside", tc.topic, err, tc.code)
		case cohortErr.Topic != tc.topic || cohortErr.ConsumerGroup != "mine" || cohortErr.Partition != 0 || !cohortErr.MemberID.IsNil():
			t.Fatalf("%s: CohortError %+v", tc.topic, cohortErr)
		case client.IsRetryable(err):
			t.Fatalf("%s: %v is retryable", tc.topic, err)
		}
	}
	// Other codes stay plain broker errors; a 500 is retryable.
	_, err := c.SubscribeTopicExclusive(ctx, "busy", client.SubscribeOptions{})
	var cohortErr *client.CohortError
	var brokerErr *client.BrokerError
	if errors.As(err, &cohortErr) || !errors.As(err, &brokerErr) || brokerErr.Code != client.CodeInternal || !client.IsRetryable(err) {
		t.Fatalf("exclusive subscribe answered 500: %v, want a retryable plain *BrokerError", err)
	}
	// A target without a cohort is refused before anything is sent.
	if _, err := c.SubscribeTopic(ctx, "taken", client.SubscribeOptions{ConsumerTarget: 2}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("ConsumerTarget without ConsumerGroup: %v, want ErrInvalidArgument", err)
	}
}

// A broker that answers an exclusive SUBSCRIBE without member_id does not
// speak cohorts: the subscribe fails rather than silently compete.
func TestExclusiveSubscribeOkWithoutMemberID(t *testing.T) {
	fb := newFakeBroker(t, client.TransportTCP, fakeScript{omitMemberID: true, topology: map[topicKey]uint32{{"orders", ""}: 2}})
	c := fb.dial(t, client.ClientOptions{})
	if _, err := c.SubscribeTopicExclusive(testContext(t), "orders", client.SubscribeOptions{}); !errors.Is(err, client.ErrProtocol) {
		t.Fatalf("SUBSCRIBE_OK without member_id: %v, want ErrProtocol", err)
	}
}
