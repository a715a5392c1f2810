package client

// Exclusive consumer groups, the client side (PROTOCOL §5.6, §5.7, §5.16,
// §7.6, §7.8; SPEC §4; docs/cohorts.md): the cached member id, the last
// assignment of each cohort this client joined, and the hand-off of
// ASSIGNMENT_CHANGED notices to ClientOptions.OnAssignmentChanged.
//
// Invariants:
//   - The client has at most one member id, for its whole life: none until the
//     first exclusive SUBSCRIBE_OK, then the id the broker resolved. Every later
//     exclusive SUBSCRIBE and every reconcile entry of an exclusive subscription
//     carries it, over the same connection and over every later one (§5.6 "the
//     member id is resolved as follows", §7.6).
//   - While no member id is known, at most one exclusive SUBSCRIBE is in flight
//     (mintSlot): it is the only one sent without member_id, and the others wait
//     for its reply so they can carry the id it returns.
//   - Per cohort key (topic, group, consumer group) the accepted generations
//     strictly grow: a notice at or below the last accepted one is dropped
//     (§5.16), so the callback and Assignment never go back in time.
//   - The Added and Revoked handed to the callback are always the change from
//     the previous notice accepted for the key (from nothing for the first),
//     computed here: the frame's are per connection (§5.16) and restart from
//     nothing on every new connection.
//   - Notices are accepted only for keys this client subscribed to exclusively
//     (a state exists from the moment SubscribeTopic starts, before the first
//     SUBSCRIBE is sent, so no notice can overtake its registration). The table
//     therefore holds one state per cohort the application joined: bounded by
//     what the application did, not by what a broker sends.
//   - The reader never waits for the callback: accept only updates the table
//     under mu and, when needed, starts the one dispatch goroutine. A key has at
//     most one pending notice (a newer one is merged into it), so the queue
//     holds at most one entry per state.

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/fibril-go/fibril/transport/wire"
)

// DefaultConsumerGroup is the cohort id SubscribeTopicExclusive joins when
// SubscribeOptions.ConsumerGroup is empty; Fibril's clients all use it.
const DefaultConsumerGroup = "default"

// UUID is a 16-byte identifier in RFC 4122 byte order, as the wire carries it
// (cohort member ids). Its String method gives the canonical form.
type UUID = wire.UUID

// AssignmentChange is one ASSIGNMENT_CHANGED notice (PROTOCOL §5.16): the
// partitions of the queue (Topic, Group) that cohort ConsumerGroup now
// delivers to this client. It is informational: the broker's per-partition
// gate enforces exclusivity whatever the client does.
type AssignmentChange struct {
	Topic string
	// Group is the queue namespace; "" is the default namespace.
	Group string
	// ConsumerGroup is the cohort id.
	ConsumerGroup string
	// Generation grows with every rebalance of the cohort.
	Generation uint64
	// Assigned is this member's full partition set, sorted.
	Assigned []uint32
	// Added and Revoked are the changes since the previous notice the callback
	// received for this cohort (sorted). When notices were merged because the
	// callback was slow, they span all the merged ones.
	Added   []uint32
	Revoked []uint32
}

// cohortKey names one cohort: the queue (topic, normalised group) and the
// cohort id.
type cohortKey struct {
	topic, group, consumerGroup string
}

// cohortState is what the client knows of one cohort it joined.
type cohortState struct {
	seen       bool     // a notice was accepted
	generation uint64   // the last accepted generation (valid when seen)
	assigned   []uint32 // the last accepted assignment, sorted
	// pending is the notice not yet handed to the callback (merged when several
	// arrive meanwhile); nil when none.
	pending *AssignmentChange
}

// cohortTable is the client's cohort bookkeeping, shared by its engines.
type cohortTable struct {
	callback func(AssignmentChange)
	log      *slog.Logger
	// mintSlot (capacity 1) is held by the one exclusive SUBSCRIBE sent without
	// member_id until it is answered.
	mintSlot chan struct{}

	mu          sync.Mutex
	memberID    UUID // the nil UUID until the broker resolved one
	states      map[cohortKey]*cohortState
	queue       []cohortKey // keys whose pending notice awaits the callback, oldest first
	dispatching bool        // the dispatch goroutine runs
	closed      bool        // the client closed: nothing more is dispatched
}

func newCohortTable(opts ClientOptions) *cohortTable {
	return &cohortTable{
		callback: opts.OnAssignmentChanged,
		log:      opts.Logger,
		mintSlot: make(chan struct{}, 1),
		states:   make(map[cohortKey]*cohortState),
	}
}

// member returns the cached member id, if any.
func (t *cohortTable) member() (UUID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.memberID, !t.memberID.IsNil()
}

// adopt caches the member id a broker resolved (SUBSCRIBE_OK, or the server
// view of a reconcile entry). The broker is the authority on the id of its
// session: should it resolve another id than the cached one, later requests
// carry the new one.
func (t *cohortTable) adopt(id UUID) {
	if id.IsNil() {
		panic("client: adopting the nil member id")
	}
	t.mu.Lock()
	previous := t.memberID
	t.memberID = id
	t.mu.Unlock()
	if !previous.IsNil() && previous != id {
		t.log.Warn("client: the broker resolved another cohort member id than the one sent",
			"previous", previous.String(), "member_id", id.String())
	}
}

// beginMint reports whether the caller must send its first SUBSCRIBE without
// member_id, alone. When it returns true the caller holds mintSlot and calls
// endMint once that SUBSCRIBE is answered (or failed); when false a member id
// is cached and every SUBSCRIBE may carry it.
func (t *cohortTable) beginMint(ctx context.Context) (bool, error) {
	if _, ok := t.member(); ok {
		return false, nil
	}
	select {
	case t.mintSlot <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if _, ok := t.member(); ok {
		// Another subscribe minted the id while we waited.
		<-t.mintSlot
		return false, nil
	}
	return true, nil
}

func (t *cohortTable) endMint() { <-t.mintSlot }

// join registers key before its first SUBSCRIBE is sent, so that notices for
// it are accepted from then on.
func (t *cohortTable) join(key cohortKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.states[key] == nil {
		t.states[key] = &cohortState{}
	}
}

// assignment returns a copy of the last accepted assignment of key, nil when
// no notice was accepted yet.
func (t *cohortTable) assignment(key cohortKey) []uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.states[key]
	if st == nil || !st.seen {
		return nil
	}
	return slices.Clone(st.assigned)
}

// accept applies one ASSIGNMENT_CHANGED on the reader goroutine: drops it when
// it is stale or for a cohort this client never joined, else records it and
// queues it for the callback. It never blocks on the callback.
func (t *cohortTable) accept(ac wire.AssignmentChanged) {
	key := cohortKey{topic: ac.Topic, group: normalizeGroup(ac.Group.Or("")), consumerGroup: ac.ConsumerGroup}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.states[key]
	if st == nil {
		t.log.Debug("client: dropping ASSIGNMENT_CHANGED for a cohort this client did not join",
			"topic", ac.Topic, "consumer_group", ac.ConsumerGroup, "generation", ac.Generation)
		return
	}
	if st.seen && ac.Generation <= st.generation {
		t.log.Debug("client: dropping a stale ASSIGNMENT_CHANGED", "topic", ac.Topic,
			"consumer_group", ac.ConsumerGroup, "generation", ac.Generation, "last", st.generation)
		return
	}
	// Added and Revoked are taken against the last accepted assignment, not
	// copied from the frame: the broker's are against what it last told
	// this connection (PROTOCOL §5.16), and a new connection or session
	// starts its notices from nothing, so after a reconnect the frame's
	// would leave out every partition lost meanwhile.
	var previous []uint32
	if st.seen {
		previous = st.assigned
	}
	assigned := sortedCopy(ac.Assigned)
	change := AssignmentChange{
		Topic: key.topic, Group: key.group, ConsumerGroup: key.consumerGroup, Generation: ac.Generation,
		Assigned: assigned, Added: sortedMinus(assigned, previous), Revoked: sortedMinus(previous, assigned),
	}
	st.seen = true
	st.generation = ac.Generation
	st.assigned = change.Assigned
	if t.callback == nil || t.closed {
		return
	}
	if st.pending != nil {
		if st.pending.Generation >= change.Generation {
			panic("client: a pending assignment notice is not older than the one accepted")
		}
		merged := mergeChanges(*st.pending, change)
		st.pending = &merged
	} else {
		st.pending = &change
		t.queue = append(t.queue, key)
	}
	if !t.dispatching {
		t.dispatching = true
		go t.dispatch()
	}
}

// dispatch hands pending notices to the callback, oldest key first, one at a
// time, and exits when none is left. At most one runs (dispatching).
func (t *cohortTable) dispatch() {
	for {
		t.mu.Lock()
		if len(t.queue) == 0 || t.closed {
			t.queue = nil
			t.dispatching = false
			t.mu.Unlock()
			return
		}
		key := t.queue[0]
		t.queue = t.queue[1:]
		st := t.states[key]
		if st.pending == nil {
			panic("client: a queued cohort has no pending notice")
		}
		change := *st.pending
		st.pending = nil
		t.mu.Unlock()
		t.callback(change)
	}
}

// close stops dispatching: notices still pending are dropped.
func (t *cohortTable) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, key := range t.queue {
		t.states[key].pending = nil
	}
	t.queue = nil
}

// mergeChanges folds newer into older, which the callback has not seen yet:
// the result is newer's assignment with Added and Revoked taken against the
// set the callback saw before older (older's Assigned minus its Added plus its
// Revoked).
func mergeChanges(older, newer AssignmentChange) AssignmentChange {
	base := make(map[uint32]bool, len(older.Assigned)+len(older.Revoked))
	for _, p := range older.Assigned {
		base[p] = true
	}
	for _, p := range older.Added {
		delete(base, p)
	}
	for _, p := range older.Revoked {
		base[p] = true
	}
	now := make(map[uint32]bool, len(newer.Assigned))
	for _, p := range newer.Assigned {
		now[p] = true
	}
	merged := newer
	merged.Added, merged.Revoked = nil, nil
	for _, p := range newer.Assigned {
		if !base[p] {
			merged.Added = append(merged.Added, p)
		}
	}
	for p := range base {
		if !now[p] {
			merged.Revoked = append(merged.Revoked, p)
		}
	}
	slices.Sort(merged.Revoked)
	return merged
}

// sortedMinus is a minus b, both sorted; nil when empty.
func sortedMinus(a, b []uint32) []uint32 {
	var out []uint32
	for _, p := range a {
		if _, found := slices.BinarySearch(b, p); !found {
			out = append(out, p)
		}
	}
	return out
}

func sortedCopy(partitions []uint32) []uint32 {
	out := slices.Clone(partitions)
	slices.Sort(out)
	return out
}

// onAssignmentChanged hands an ASSIGNMENT_CHANGED push to the cohort table.
func (e *engine) onAssignmentChanged(ac wire.AssignmentChanged) {
	e.cohorts.accept(ac)
}
