package e2e

// Exclusive consumer groups (cohorts: SPEC 4, PROTOCOL 5.6, 5.7, 5.16, 7.6,
// docs/cohorts.md) against a real `fibril serve`, over TCP and QUIC, with
// our client (helpers in cohorts_helpers_test.go):
//   - two members split a 4-partition queue: assignments disjoint and
//     covering, each partition delivered to its owner only, per-key order;
//   - a member process SIGKILLed while it holds deliveries: after the
//     broker's short grace the survivor owns every partition, and gets the
//     dead member's unacked messages again before the later ones of each key;
//   - PROTOCOL 5.6 checks 3-5 on the wire: another cohort id 409, the nil
//     member id 400, a second member id on one connection 409; a cohort with
//     no members is forgotten;
//   - the member id survives a cut connection, resumed within the grace and
//     not resumed after it (SUBSCRIBE_OK echoes the same id);
//   - a broker SIGKILL and restart: the members come back, the assignment is
//     coherent again, every confirmed message arrives, per-key order holds
//     and no two members hold deliveries of one partition at once.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/transport/wire"
)

// waitFor polls fn every 20 ms until it holds, failing with what and the
// diagnosis diag gives once timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, fn func() bool, diag func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !fn() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v\n%s", what, timeout, diag())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSplit waits until the members' assignments (as Assignment and the
// callback both say) split the queue, and returns them.
func waitSplit(t *testing.T, members ...*cohortMember) [][]uint32 {
	t.Helper()
	var got [][]uint32
	waitFor(t, 10*time.Second, "a balanced split of the partitions", func() bool {
		got = got[:0]
		for _, m := range members {
			a, agreed := m.assignedNow()
			if !agreed {
				return false
			}
			got = append(got, a)
		}
		return splitOf(got...)
	}, func() string { return sprintAssignments(members) })
	return got
}

func sprintAssignments(members []*cohortMember) string {
	out := ""
	for _, m := range members {
		out += m.name + ": " + sprint(m.sub.Assignment()) + ", notices " + sprint(m.noticesSeen()) + "\n"
	}
	return out
}

// ownerOf maps each partition to the member assigned it.
func ownerOf(members []*cohortMember, assignments [][]uint32) map[uint32]string {
	owner := make(map[uint32]string)
	for i, a := range assignments {
		for _, p := range a {
			owner[p] = members[i].name
		}
	}
	return owner
}

// byKey groups deliveries by key, each group in the order received
// (deliveries of one member keep their order; across members, by recvAt).
func byKey(deliveries []received) map[string][]received {
	sorted := slices.Clone(deliveries)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].recvAt.Before(sorted[j].recvAt) })
	out := make(map[string][]received)
	for _, d := range sorted {
		out[d.key] = append(out[d.key], d)
	}
	return out
}

func seqsOf(deliveries []received) []int {
	out := make([]int, len(deliveries))
	for i, d := range deliveries {
		out[i] = d.seq
	}
	return out
}

func seqRange(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// TestCohortTwoMembersSplitAQueue: two clients join one cohort of a
// 4-partition queue; each owns two partitions, and gets exactly the
// messages of its own, each key in order.
func TestCohortTwoMembersSplitAQueue(t *testing.T) {
	const perKey = 25
	s := startServer(t, t.TempDir(), "--lease-ms", "60000")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			topic := "split-" + tr
			producer := dial(t, s, tr)
			declareCohortQueue(t, producer, topic)
			a := dialMember(t, "a", s.addr(), tr, memberOptions{})
			b := dialMember(t, "b", s.addr(), tr, memberOptions{})
			members := []*cohortMember{a, b}
			a.join(t, topic, client.SubscribeOptions{Prefetch: 8})
			b.join(t, topic, client.SubscribeOptions{Prefetch: 8})
			assignments := waitSplit(t, members...)
			if a.sub.MemberID().IsNil() || b.sub.MemberID().IsNil() || a.sub.MemberID() == b.sub.MemberID() {
				t.Fatalf("member ids %v and %v: want two distinct, non-nil", a.sub.MemberID(), b.sub.MemberID())
			}
			owner := ownerOf(members, assignments)

			keys := cohortKeys(2)
			publishKeyed(t, producer, topic, keys, 0, perKey)
			total := func() int { return len(a.received()) + len(b.received()) }
			waitFor(t, 20*time.Second, "every message delivered", func() bool { return total() >= perKey*len(keys) },
				func() string { return sprint(total()) + " delivered" })
			all := append(a.received(), b.received()...)
			if len(all) != perKey*len(keys) {
				t.Fatalf("%d deliveries of %d messages", len(all), perKey*len(keys))
			}
			for _, d := range all {
				if owner[d.partition] != d.member || keyPartition(d.key) != d.partition {
					t.Fatalf("%s got %s/%d of partition %d, owned by %s", d.member, d.key, d.seq, d.partition, owner[d.partition])
				}
				if d.retries != 0 || d.ackErr != nil {
					t.Fatalf("%s/%d: retries %d, complete %v", d.key, d.seq, d.retries, d.ackErr)
				}
			}
			for key, got := range byKey(all) {
				if seqs := seqsOf(got); !slices.Equal(seqs, seqRange(0, perKey)) {
					t.Fatalf("key %s arrived as %v", key, seqs)
				}
			}
			// Nothing moved meanwhile, and the callbacks saw a coherent story.
			if !slices.Equal(a.sub.Assignment(), assignments[0]) || !slices.Equal(b.sub.Assignment(), assignments[1]) {
				t.Fatalf("assignments moved from %v to %v, %v", assignments, a.sub.Assignment(), b.sub.Assignment())
			}
			checkNotices(t, a)
			checkNotices(t, b)
		})
	}
}

// TestCohortSurvivorTakesOverFromAKilledMember: a member in a process of
// its own completes the first messages of its partitions and holds the next
// ones when it is SIGKILLed. Once the broker ends its session (the short
// grace after the connection dropped; over QUIC only after the heartbeat
// misses, ~15 s), the survivor owns every partition and gets the held
// messages again, each key from the first message the dead member did not
// settle, in order. The lease (60 s) plays no part.
func TestCohortSurvivorTakesOverFromAKilledMember(t *testing.T) {
	const prefetch, ackFirst, perKey = 3, 4, 10
	s := startServer(t, t.TempDir(), "--reconnect-grace-ms", "500", "--lease-ms", "60000")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			topic := "takeover-" + tr
			producer := dial(t, s, tr)
			declareCohortQueue(t, producer, topic)
			victim := startMemberProcess(t, s.addr(), tr, topic, prefetch, ackFirst)
			diag := func() string {
				member, assigned, got := victim.state()
				return "member process " + member + " assigned " + sprint(assigned) + " got " + sprint(len(got)) +
					"\nits stderr:\n" + victim.log()
			}
			waitFor(t, 20*time.Second, "the member process subscribed", func() bool {
				member, _, _ := victim.state()
				return member != ""
			}, diag)
			survivor := dialMember(t, "survivor", s.addr(), tr, memberOptions{})
			survivor.join(t, topic, client.SubscribeOptions{Prefetch: 8})
			var victimParts, survivorParts []uint32
			waitFor(t, 10*time.Second, "a split between the process and the survivor", func() bool {
				_, victimParts, _ = victim.state()
				var agreed bool
				survivorParts, agreed = survivor.assignedNow()
				return agreed && len(victimParts) == 2 && splitOf(victimParts, survivorParts)
			}, func() string { return diag() + "\n" + sprintAssignments([]*cohortMember{survivor}) })

			keys := cohortKeys(2)
			publishKeyed(t, producer, topic, keys, 0, perKey)
			perPartition := 2 * perKey
			// The process holds prefetch deliveries of each of its partitions
			// once it got ackFirst+prefetch of each: the broker sent the
			// ones after the first ackFirst, so it took those completions.
			waitFor(t, 20*time.Second, "the process holding its prefetch, the survivor done with its own", func() bool {
				_, _, got := victim.state()
				count := map[uint32]int{}
				for _, d := range got {
					count[d.partition]++
				}
				return count[victimParts[0]] == ackFirst+prefetch && count[victimParts[1]] == ackFirst+prefetch &&
					len(survivor.received()) == 2*perPartition
			}, diag)
			_, _, victimGot := victim.state()
			killedAt := time.Now()
			victim.kill()

			want := 2*perPartition + 2*(perPartition-ackFirst)
			waitFor(t, 60*time.Second, "the survivor owning every partition and getting the rest", func() bool {
				a, agreed := survivor.assignedNow()
				return agreed && slices.Equal(a, []uint32{0, 1, 2, 3}) && len(survivor.received()) >= want
			}, func() string {
				return sprintAssignments([]*cohortMember{survivor}) + sprint(len(survivor.received())) + " delivered to the survivor"
			})
			t.Logf("the survivor took over %v in %v", victimParts, time.Since(killedAt).Round(time.Millisecond))
			survivorGot := survivor.received()
			if len(survivorGot) != want {
				t.Fatalf("the survivor got %d deliveries, want %d", len(survivorGot), want)
			}

			// The process: its partitions only, in offset order, the first
			// ackFirst of each completed.
			acked, held := map[string][]int{}, map[string]map[int]bool{}
			lastOffset := map[uint32]int64{victimParts[0]: -1, victimParts[1]: -1}
			count := map[uint32]int{}
			for _, d := range victimGot {
				if !slices.Contains(victimParts, d.partition) || keyPartition(d.key) != d.partition {
					t.Fatalf("the process got %s/%d of partition %d, owning %v", d.key, d.seq, d.partition, victimParts)
				}
				if int64(d.offset) <= lastOffset[d.partition] {
					t.Fatalf("the process got partition %d offset %d after %d", d.partition, d.offset, lastOffset[d.partition])
				}
				lastOffset[d.partition] = int64(d.offset)
				count[d.partition]++
				if (d.ackErr == nil) != (count[d.partition] <= ackFirst) {
					t.Fatalf("the process settled the wrong deliveries: %+v", d)
				}
				if d.ackErr == nil {
					acked[d.key] = append(acked[d.key], d.seq)
				} else {
					if held[d.key] == nil {
						held[d.key] = map[int]bool{}
					}
					held[d.key][d.seq] = true
				}
			}
			// The survivor: nothing of the dead member's partitions before
			// the kill; each key exactly once from where it was left, in
			// order, the held messages flagged as retried.
			for key, got := range byKey(survivorGot) {
				p := keyPartition(key)
				from := 0
				if slices.Contains(victimParts, p) {
					if !slices.Equal(acked[key], seqRange(0, len(acked[key]))) {
						t.Fatalf("the process completed %v of key %s, not a prefix", acked[key], key)
					}
					from = len(acked[key])
				}
				if seqs := seqsOf(got); !slices.Equal(seqs, seqRange(from, perKey)) {
					t.Fatalf("key %s (partition %d) reached the survivor as %v, want %v", key, p, seqs, seqRange(from, perKey))
				}
				for _, d := range got {
					if slices.Contains(victimParts, p) && d.recvAt.Before(killedAt) {
						t.Fatalf("the survivor got %s/%d of the live member's partition %d", key, d.seq, p)
					}
					if wantRetried := held[key][d.seq]; wantRetried != (d.retries > 0) {
						t.Fatalf("%s/%d reached the survivor with retries %d (held by the dead member: %v)", key, d.seq, d.retries, wantRetried)
					}
				}
			}
			checkNotices(t, survivor)
		})
	}
}

// TestCohortHandOverWaitsForTheOldOwner: the exclusive gate on the real
// broker (docs/cohorts.md "The gate"). A member owning every partition holds
// a delivery of each when a second member joins and is assigned half: the
// messages published then to that half reach nobody while the first member
// holds, and reach the newcomer, in order, once it settles.
func TestCohortHandOverWaitsForTheOldOwner(t *testing.T) {
	s := startServer(t, t.TempDir(), "--lease-ms", "60000")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			if err := handOverViolation(t, s, tr); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCohortHandOverCatchesGateOpenEarly: the same scenario fails on a
// broker whose gate opens before the old owner settled (mutant
// GateOpenEarly), so the check above can fail.
func TestCohortHandOverCatchesGateOpenEarly(t *testing.T) {
	s := startMutantServer(t, mutant.GateOpenEarly, "--lease-ms", "60000")
	err := handOverViolation(t, s, client.TransportTCP)
	if err == nil {
		t.Fatalf("the hand-over check passed on a broker running mutant %s", mutant.GateOpenEarly)
	}
	t.Logf("mutant %s caught: %v", mutant.GateOpenEarly, err)
}

// handOverViolation runs the hand-over scenario and returns how the broker
// broke the gate, or nil.
func handOverViolation(t *testing.T, s *server, tr string) error {
	t.Helper()
	const quiet = 500 * time.Millisecond // a negative check: only a broken gate fails it early
	topic := "handover-" + tr
	producer := dial(t, s, tr)
	declareCohortQueue(t, producer, topic)
	a := dialMember(t, "a", s.addr(), tr, memberOptions{})
	a.manual = true
	a.join(t, topic, client.SubscribeOptions{Prefetch: 2})
	waitAssigned(t, a, []uint32{0, 1, 2, 3})
	keys := cohortKeys(1)
	publishKeyed(t, producer, topic, keys, 0, 2)
	waitFor(t, 10*time.Second, "a holding its prefetch of every partition", func() bool { return len(a.received()) == 2*len(keys) },
		func() string { return sprint(a.received()) })

	b := dialMember(t, "b", s.addr(), tr, memberOptions{})
	members := []*cohortMember{a, b}
	b.join(t, topic, client.SubscribeOptions{Prefetch: 8})
	assignments := waitSplit(t, members...)
	owner := ownerOf(members, assignments)
	publishKeyed(t, producer, topic, keys, 2, 4)
	time.Sleep(quiet)
	if got := b.received(); len(got) != 0 {
		return fmt.Errorf("b got %d deliveries (first %s/%d of partition %d) while a still held deliveries of its partitions",
			len(got), got[0].key, got[0].seq, got[0].partition)
	}
	if got := a.received(); len(got) != 2*len(keys) {
		return fmt.Errorf("a got %d deliveries, holding its prefetch of %d", len(got), 2*len(keys))
	}
	a.settleHeld(t)
	waitDelivered(t, members, 4*len(keys))
	all := append(a.received(), b.received()...)
	if len(all) != 4*len(keys) {
		return fmt.Errorf("%d deliveries of %d messages", len(all), 4*len(keys))
	}
	for _, d := range all {
		if d.seq >= 2 && owner[d.partition] != d.member {
			return fmt.Errorf("%s got %s/%d of partition %d, owned by %s", d.member, d.key, d.seq, d.partition, owner[d.partition])
		}
	}
	checkKeyOrder(t, all, seqSets(keys, 4))
	checkExclusive(t, all)
	checkNotices(t, a)
	checkNotices(t, b)
	return nil
}

// TestCohortRules409And400: PROTOCOL 5.6 checks 3-5 against the broker,
// through the client (409 for another cohort id) and raw frames (the nil
// member id, which the client never sends; a second member id on one
// connection); a refused subscribe leaves the cohort as it was, and the
// queue's cohort id is free again once its last member has gone.
func TestCohortRules409And400(t *testing.T) {
	s := startServer(t, t.TempDir(), "--reconnect-grace-ms", "500")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			topic := "rules-" + tr
			producer := dial(t, s, tr)
			declareCohortQueue(t, producer, topic)
			a := dialMember(t, "a", s.addr(), tr, memberOptions{})
			a.join(t, topic, client.SubscribeOptions{Prefetch: 4})
			waitAssigned(t, a, []uint32{0, 1, 2, 3})

			other := dialMember(t, "other", s.addr(), tr, memberOptions{})
			_, err := other.tryJoin(ctxT(t), topic, client.SubscribeOptions{ConsumerGroup: "other"})
			var cohortErr *client.CohortError
			if !errors.Is(err, client.ErrCohortConflict) || !errors.As(err, &cohortErr) ||
				cohortErr.Broker.Code != client.CodeConflict || cohortErr.ConsumerGroup != "other" || cohortErr.Partition != 0 {
				t.Fatalf("another cohort id on the queue: %v, want a 409 *CohortError for partition 0", err)
			}
			// The refusal touched nothing: a still owns and gets everything.
			publishKeyed(t, producer, topic, cohortKeys(1), 0, 1)
			waitFor(t, 10*time.Second, "a getting every partition's message", func() bool { return len(a.received()) == cohortPartitions },
				func() string { return sprint(a.received()) })
			if got := a.sub.Assignment(); !slices.Equal(got, []uint32{0, 1, 2, 3}) {
				t.Fatalf("a's assignment after the refusal: %v", got)
			}

			rw := rawWireDial(t, s, tr)
			exclusive := func(partition uint32, group string, member *wire.UUID) wire.Subscribe {
				sub := wire.Subscribe{Topic: topic, Partition: partition, Prefetch: 1, ConsumerGroup: wire.Some(group)}
				if member != nil {
					sub.MemberID = wire.Some(*member)
				}
				return sub
			}
			if e := rw.subscribeError(exclusive(0, client.DefaultConsumerGroup, &wire.UUID{})); e.Code != wire.CodeInvalid {
				t.Fatalf("the nil member id: code %d (%s), want 400", e.Code, e.Message)
			}
			if e := rw.subscribeError(exclusive(0, "other", nil)); e.Code != wire.CodeConflict {
				t.Fatalf("another cohort id over the wire: code %d (%s), want 409", e.Code, e.Message)
			}
			ok := rw.subscribeOk(exclusive(0, client.DefaultConsumerGroup, nil))
			minted, present := ok.MemberID.Get()
			if !present || minted.IsNil() || minted == a.sub.MemberID() || ok.ConsumerGroup != wire.Some(client.DefaultConsumerGroup) {
				t.Fatalf("SUBSCRIBE_OK %+v: want the cohort echoed and a fresh member id", ok)
			}
			stranger := wire.UUID{0xAB, 0xCD}
			if e := rw.subscribeError(exclusive(1, client.DefaultConsumerGroup, &stranger)); e.Code != wire.CodeConflict {
				t.Fatalf("a second member id on one connection: code %d (%s), want 409", e.Code, e.Message)
			}
			if ok := rw.subscribeOk(exclusive(1, client.DefaultConsumerGroup, &minted)); ok.MemberID != wire.Some(minted) {
				t.Fatalf("SUBSCRIBE_OK with the connection's own id: %+v", ok)
			}
			// The raw member takes what it subscribed to, half the queue.
			waitAssigned(t, a, []uint32{2, 3})
			// Its connection drops: after the grace a has everything again.
			rw.conn.Close()
			waitAssigned(t, a, []uint32{0, 1, 2, 3})
			checkNotices(t, a)

			// Once the cohort's last member is gone, another id may take the queue.
			a.c.Close()
			waitFor(t, 10*time.Second, "the cohort id freed after its last member left", func() bool {
				_, err := other.tryJoin(ctxT(t), topic, client.SubscribeOptions{ConsumerGroup: "other"})
				if err != nil && !errors.Is(err, client.ErrCohortConflict) {
					t.Fatalf("subscribe as cohort \"other\": %v", err)
				}
				return err == nil
			}, func() string { return "still 409" })
			waitAssigned(t, other, []uint32{0, 1, 2, 3})
		})
	}
}

func waitAssigned(t *testing.T, m *cohortMember, want []uint32) {
	t.Helper()
	waitFor(t, 10*time.Second, m.name+" assigned "+sprint(want), func() bool {
		a, agreed := m.assignedNow()
		return agreed && slices.Equal(a, want)
	}, func() string { return sprintAssignments([]*cohortMember{m}) })
}

// cuttable is a member's path to the broker that the test can cut: the TCP
// proxy of client_resume_test.go, or a UDP proxy that blackholes QUIC.
type cuttable struct {
	addr string
	tls  *client.TLSOptions
	cut  func()
}

func newCuttable(t *testing.T, s *server, tr string) cuttable {
	if tr == client.TransportQUIC {
		p := newUDPProxy(t, s.addr())
		return cuttable{addr: p.addr(), tls: brokerCA(s), cut: p.cut}
	}
	p := newCutProxy(t, s.addr())
	return cuttable{addr: p.addr(), cut: p.cut}
}

// TestCohortMemberIDKeptAcrossReconnect: a member's connection is cut
// under it (TCP closed by a proxy; QUIC blackholed, found dead by the
// client's heartbeat). Within the grace it resumes: the same member, the
// same partitions, nobody else got them, and a new exclusive subscribe gets
// the same member id in SUBSCRIBE_OK. After the grace the broker dropped
// it and the other member took everything; reconnected, the client
// subscribes again and SUBSCRIBE_OK carries its old member id, and the
// queue splits again.
func TestCohortMemberIDKeptAcrossReconnect(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr+"/within the grace", func(t *testing.T) {
			s := startServer(t, t.TempDir(), "--reconnect-grace-ms", "10000", "--lease-ms", "60000")
			topic := "resume-" + tr
			producer := dial(t, s, tr)
			declareCohortQueue(t, producer, topic)
			declareCohortQueue(t, producer, topic+"-second")
			path := newCuttable(t, s, tr)
			a := dialMember(t, "a", path.addr, tr, memberOptions{tls: path.tls, heartbeat: 250 * time.Millisecond})
			b := dialMember(t, "b", s.addr(), tr, memberOptions{})
			members := []*cohortMember{a, b}
			a.join(t, topic, client.SubscribeOptions{Prefetch: 4})
			b.join(t, topic, client.SubscribeOptions{Prefetch: 4})
			assignments := waitSplit(t, members...)
			owner := ownerOf(members, assignments)
			memberA, noticesB := a.sub.MemberID(), len(b.noticesSeen())
			keys := cohortKeys(1)
			publishKeyed(t, producer, topic, keys, 0, 5)
			waitDelivered(t, members, 5*len(keys))

			path.cut()
			waitFor(t, 20*time.Second, "a reconnected", func() bool {
				info := a.c.Connection()
				return info.Generation == 2 && !info.Closed
			}, func() string { return sprint(a.c.Connection()) })
			if info := a.c.Connection(); info.ResumeOutcome != client.ResumeResumed {
				t.Fatalf("reconnect within the grace: outcome %v, want resumed", info.ResumeOutcome)
			}
			if a.sub.CloseReason() != nil || a.sub.MemberID() != memberA {
				t.Fatalf("after the resume: subscription %v, member id %v (was %v)", a.sub.CloseReason(), a.sub.MemberID(), memberA)
			}
			second, err := a.c.SubscribeTopicExclusive(ctxT(t), topic+"-second", client.SubscribeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if second.MemberID() != memberA {
				t.Fatalf("SUBSCRIBE_OK after the resume names member %v, want %v", second.MemberID(), memberA)
			}
			publishKeyed(t, producer, topic, keys, 5, 10)
			waitDelivered(t, members, 10*len(keys))
			if len(b.noticesSeen()) != noticesB || !slices.Equal(a.sub.Assignment(), assignments[0]) || !slices.Equal(b.sub.Assignment(), assignments[1]) {
				t.Fatalf("the cohort rebalanced over a resumed member:\n%s", sprintAssignments(members))
			}
			all := append(a.received(), b.received()...)
			for _, d := range all {
				if owner[d.partition] != d.member {
					t.Fatalf("%s got %s/%d of partition %d, owned by %s", d.member, d.key, d.seq, d.partition, owner[d.partition])
				}
			}
			checkKeyOrder(t, all, seqSets(keys, 10))
			checkNotices(t, a)
			checkNotices(t, b)
		})

		t.Run(tr+"/after the grace", func(t *testing.T) {
			s := startServer(t, t.TempDir(), "--reconnect-grace-ms", "500", "--lease-ms", "60000")
			topic := "rejoin-" + tr
			producer := dial(t, s, tr)
			declareCohortQueue(t, producer, topic)
			path := newCuttable(t, s, tr)
			a := dialMember(t, "a", path.addr, tr, memberOptions{tls: path.tls, heartbeat: 250 * time.Millisecond, noReconnect: true})
			b := dialMember(t, "b", s.addr(), tr, memberOptions{})
			members := []*cohortMember{a, b}
			a.join(t, topic, client.SubscribeOptions{Prefetch: 4})
			b.join(t, topic, client.SubscribeOptions{Prefetch: 4})
			waitSplit(t, members...)
			memberA := a.sub.MemberID()

			path.cut()
			cutAt := time.Now()
			waitFor(t, 60*time.Second, "b owning everything once a's session ended", func() bool {
				got, agreed := b.assignedNow()
				return agreed && slices.Equal(got, []uint32{0, 1, 2, 3})
			}, func() string { return sprintAssignments(members) })
			t.Logf("the broker dropped the cut member after %v", time.Since(cutAt).Round(time.Millisecond))
			waitFor(t, 10*time.Second, "a's subscription ended with its connection", func() bool { return a.sub.CloseReason() != nil },
				func() string { return sprint(a.c.Connection()) })
			outcome, err := a.c.Reconnect(ctxT(t))
			if err != nil || outcome == client.ResumeResumed {
				t.Fatalf("reconnect after the grace: %v %v, want a new session", outcome, err)
			}
			if sub := a.join(t, topic, client.SubscribeOptions{Prefetch: 4}); sub.MemberID() != memberA {
				t.Fatalf("SUBSCRIBE_OK on the new session names member %v, want the old %v", sub.MemberID(), memberA)
			}
			assignments := waitSplit(t, members...)
			owner := ownerOf(members, assignments)
			keys := cohortKeys(1)
			publishKeyed(t, producer, topic, keys, 0, 5)
			waitDelivered(t, members, 5*len(keys))
			for _, d := range append(a.received(), b.received()...) {
				if owner[d.partition] != d.member {
					t.Fatalf("%s got %s/%d of partition %d, owned by %s", d.member, d.key, d.seq, d.partition, owner[d.partition])
				}
			}
			checkNotices(t, a)
			checkNotices(t, b)
		})
	}
}

// waitDelivered waits until the members got n deliveries between them.
func waitDelivered(t *testing.T, members []*cohortMember, n int) {
	t.Helper()
	count := func() int {
		total := 0
		for _, m := range members {
			total += len(m.received())
		}
		return total
	}
	waitFor(t, 30*time.Second, sprint(n)+" deliveries", func() bool { return count() >= n },
		func() string { return sprint(count()) + " so far\n" + sprintAssignments(members) })
}

// checkKeyOrder checks per-key order under at-least-once delivery: when a
// key's seq s arrives (anywhere: the order is the receive order across
// members, which the gate makes meaningful), every confirmed seq below s
// has arrived before; and every confirmed seq arrives.
func checkKeyOrder(t *testing.T, deliveries []received, confirmed map[string]map[int]bool) {
	t.Helper()
	groups := byKey(deliveries)
	for key, want := range confirmed {
		seen := map[int]bool{}
		for _, d := range groups[key] {
			for s := range want {
				if s < d.seq && !seen[s] {
					t.Fatalf("key %s: seq %d arrived (at %s, partition %d offset %d) before seq %d; arrivals %v",
						key, d.seq, d.member, d.partition, d.offset, s, seqsOf(groups[key]))
				}
			}
			seen[d.seq] = true
		}
		for s := range want {
			if !seen[s] {
				t.Fatalf("key %s: confirmed seq %d never arrived; arrivals %v", key, s, seqsOf(groups[key]))
			}
		}
		delete(groups, key)
	}
	for key := range groups {
		t.Fatalf("deliveries of an unknown key %q", key)
	}
}

// seqSets is seqs [0, n) of every key.
func seqSets(keys []string, n int) map[string]map[int]bool {
	out := map[string]map[int]bool{}
	for _, k := range keys {
		out[k] = map[int]bool{}
		for s := 0; s < n; s++ {
			out[k][s] = true
		}
	}
	return out
}

// checkExclusive checks that no two members held deliveries of one
// partition at once: a member receives a partition's message only after
// every other member completed what it had received of it. Sound on
// client clocks: a completion is sent after ackAt, the broker takes it
// before it opens the gate, and the next owner receives after that.
// Deliveries whose completion failed (stale after a restart) are left out:
// the broker ended them itself.
func checkExclusive(t *testing.T, deliveries []received) {
	t.Helper()
	byPartition := map[uint32][]received{}
	for _, d := range deliveries {
		if d.ackErr == nil {
			byPartition[d.partition] = append(byPartition[d.partition], d)
		}
	}
	for p, ds := range byPartition {
		sort.SliceStable(ds, func(i, j int) bool { return ds[i].recvAt.Before(ds[j].recvAt) })
		lastAck := map[string]received{}
		for _, d := range ds {
			for member, prev := range lastAck {
				if member != d.member && !prev.ackAt.Before(d.recvAt) {
					t.Fatalf("partition %d: %s received %s/%d while %s still held %s/%d", p, d.member, d.key, d.seq, member, prev.key, prev.seq)
				}
			}
			if prev, ok := lastAck[d.member]; !ok || prev.ackAt.Before(d.ackAt) {
				lastAck[d.member] = d
			}
		}
	}
}

// TestCohortBrokerRestart: two members consume while a producer publishes;
// the broker is SIGKILLed and restarted. The members come back (the client
// reconnects; a subscription the reconcile ended is subscribed again) with
// their member ids, the cohort splits the queue again under a newer
// generation, every confirmed message arrives, each key in order, and at
// no time did two members hold deliveries of one partition.
func TestCohortBrokerRestart(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			s := startServer(t, t.TempDir(), "--reconnect-grace-ms", "500") // leases of 2 s
			topic := "restart-" + tr
			producer := dial(t, s, tr)
			declareCohortQueue(t, producer, topic)
			// Over TCP the members go through a proxy that holds new
			// connections while the broker is down, so the client's one
			// reconnect attempt waits for the restarted broker instead of
			// failing at once, or reaching the dying one's listen queue (a
			// QUIC dial waits by itself).
			var proxy *cutProxy
			memberAddr := func() string {
				if tr == client.TransportQUIC {
					return s.addr()
				}
				if proxy == nil {
					proxy = newCutProxy(t, s.addr())
				}
				return proxy.addr()
			}
			a := dialMember(t, "a", memberAddr(), tr, memberOptions{restore: true, heartbeat: 500 * time.Millisecond})
			b := dialMember(t, "b", memberAddr(), tr, memberOptions{heartbeat: 500 * time.Millisecond})
			members := []*cohortMember{a, b}
			opts := client.SubscribeOptions{Prefetch: 16}
			a.join(t, topic, opts)
			b.join(t, topic, opts)
			waitSplit(t, members...)
			memberIDs := []client.UUID{a.sub.MemberID(), b.sub.MemberID()}
			bootBefore := lastGeneration(a) >> 32

			// A producer publishes keyed messages, confirmed, until the
			// kill stops it; an unconfirmed one may or may not be kept.
			keys := cohortKeys(2)
			nextSeq := map[string]int{}
			confirmed := seqSets(keys, 0) // per key, the seqs confirmed
			var mu sync.Mutex
			done := make(chan struct{})
			publishing, stopPublishing := context.WithCancel(context.Background())
			defer stopPublishing()
			go func() {
				defer close(done)
				pub := producer.Publisher(topic)
				for {
					for _, k := range keys {
						mu.Lock()
						seq := nextSeq[k]
						nextSeq[k]++
						mu.Unlock()
						if _, err := pub.PublishConfirmed(publishing, client.Text(keyedPayload(k, seq)).PartitionKey(k)); err != nil {
							return
						}
						mu.Lock()
						confirmed[k][seq] = true
						mu.Unlock()
					}
				}
			}()
			waitDelivered(t, members, 200)
			if proxy != nil {
				proxy.hold()
			}
			s.kill()
			stopPublishing() // its confirm may wait for its connection to be found dead
			s.start()
			if proxy != nil {
				proxy.release()
			}
			<-done

			// The members come back: reconciled, or subscribed again.
			paths := map[string]string{}
			closedBy := map[string]error{}
			waitFor(t, 45*time.Second, "both members back in a split cohort", func() bool {
				var assignments [][]uint32
				for _, m := range members {
					if reason := m.sub.CloseReason(); reason != nil {
						if paths[m.name] == "" {
							closedBy[m.name] = reason
						}
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						_, err := m.tryJoin(ctx, topic, opts)
						cancel()
						if err != nil {
							return false
						}
						paths[m.name] = "subscribed again"
					}
					got, agreed := m.assignedNow()
					if !agreed || lastGeneration(m)>>32 <= bootBefore {
						return false
					}
					assignments = append(assignments, got)
				}
				return splitOf(assignments...)
			}, func() string { return sprintAssignments(members) })
			for i, m := range members {
				if paths[m.name] == "" {
					paths[m.name] = "kept by the reconcile"
				}
				if m.sub.MemberID() != memberIDs[i] {
					t.Fatalf("%s came back as member %v, was %v", m.name, m.sub.MemberID(), memberIDs[i])
				}
			}
			// The client's one reconnect attempt meets the restarted broker
			// (resumed_after_restart: a fresh session): the restore policy
			// rejoins a's exclusive subscriptions with its member id; the
			// conservative one tells b to subscribe again.
			if paths["a"] != "kept by the reconcile" || paths["b"] != "subscribed again" {
				t.Fatalf("after the restart: a (restore) %s, b (conservative) %s; want kept and subscribed again (closed by: %v)",
					paths["a"], paths["b"], closedBy)
			}

			// More messages after the restart; then every confirmed one arrives.
			producer = dial(t, s, tr)
			mu.Lock()
			for _, k := range keys {
				from := nextSeq[k]
				publishKeyed(t, producer, topic, []string{k}, from, from+10)
				for seq := from; seq < from+10; seq++ {
					confirmed[k][seq] = true
				}
				nextSeq[k] = from + 10
			}
			mu.Unlock()
			waitFor(t, 30*time.Second, "every confirmed message delivered", func() bool {
				all := append(a.received(), b.received()...)
				seen := map[string]map[int]bool{}
				for _, d := range all {
					if seen[d.key] == nil {
						seen[d.key] = map[int]bool{}
					}
					seen[d.key][d.seq] = true
				}
				for k, seqs := range confirmed {
					for seq := range seqs {
						if !seen[k][seq] {
							return false
						}
					}
				}
				return true
			}, func() string {
				return sprint(len(a.received())+len(b.received())) + " delivered\n" + sprintAssignments(members)
			})
			all := append(a.received(), b.received()...)
			checkKeyOrder(t, all, confirmed)
			checkExclusive(t, all)
			checkNotices(t, a)
			checkNotices(t, b)
			t.Logf("%d deliveries of %d confirmed messages", len(all), countSeqs(confirmed))
		})
	}
}

func lastGeneration(m *cohortMember) uint64 {
	last, _ := m.lastNotice()
	return last.Generation
}

func countSeqs(m map[string]map[int]bool) int {
	total := 0
	for _, seqs := range m {
		total += len(seqs)
	}
	return total
}
