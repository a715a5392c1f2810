package cohort

import (
	"errors"
	"flag"
	"os"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestMain raises rapid's defaults as core's does (1000 sequences of up to
// 100 steps); the command line still wins.
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

// machine drives a Cohort (and a twin fed the same changes with every
// partition list in another order) against the model: the member set and
// the owners last accepted. The model does not compute an assignment (the
// rules allow several); it judges each one with the oracles.
type machine struct {
	v              variant
	partitionCount uint32
	c, twin        *Cohort
	members        map[MemberID]Member
	owners         []Owner
	generation     uint64
	ids            []MemberID
}

func newMachine(t *rapid.T, v variant) *machine {
	pc := uint32(rapid.IntRange(1, 9).Draw(t, "partitionCount"))
	floor := rapid.SampledFrom([]uint64{0, 1 << 32, 7 << 32}).Draw(t, "floor")
	mc := &machine{v: v, partitionCount: pc, members: map[MemberID]Member{}, owners: make([]Owner, pc), generation: floor}
	var err error
	if mc.c, err = NewCohort("cg", pc, floor); err != nil {
		t.Fatal(err)
	}
	mc.twin, _ = NewCohort("cg", pc, floor)
	mc.c.variant, mc.twin.variant = v, v
	// A pool of 6 ids, so that joins of present members and leaves of
	// absent ones happen too.
	for i := range 6 {
		mc.ids = append(mc.ids, MemberID{0: byte(0x10 * (i + 1)), 15: byte(i)})
	}
	return mc
}

// drawMember draws a member (usually valid: a subset and maybe a target).
func (mc *machine) drawMember(t *rapid.T) (Member, error) {
	m := Member{ID: rapid.SampledFrom(mc.ids).Draw(t, "id"), Partitions: drawSubset(t, mc.partitionCount, "sub"),
		Target: drawTarget(t, "target")}
	switch rapid.IntRange(0, 19).Draw(t, "broken") {
	case 0:
		m.Partitions = append(m.Partitions, mc.partitionCount)
		return m, ErrPartitionRange
	case 1:
		if len(m.Partitions) > 0 {
			m.Partitions = append(m.Partitions, m.Partitions[0])
			return m, ErrDuplicatePartition
		}
	}
	return m, nil
}

// shuffled is m with its partitions in another drawn order, for the twin.
func shuffled(t *rapid.T, m Member) Member {
	m.Partitions = rapid.Permutation(m.Partitions).Draw(t, "twinOrder")
	return m
}

func (mc *machine) join(t *rapid.T) {
	m, wantErr := mc.drawMember(t)
	if _, present := mc.members[m.ID]; present && wantErr == nil {
		wantErr = ErrDuplicateMember
	}
	ch, err := mc.c.Join(m)
	twinCh, _ := mc.twin.Join(shuffled(t, m))
	if mc.settle(t, ch, twinCh, err, wantErr) {
		mc.members[m.ID] = m.clone()
		mc.judge(t, ch)
	}
}

func (mc *machine) update(t *rapid.T) {
	m, wantErr := mc.drawMember(t)
	if _, present := mc.members[m.ID]; !present && wantErr == nil {
		wantErr = ErrUnknownMember
	}
	ch, err := mc.c.Update(m)
	twinCh, _ := mc.twin.Update(shuffled(t, m))
	if mc.settle(t, ch, twinCh, err, wantErr) {
		mc.members[m.ID] = m.clone()
		mc.judge(t, ch)
	}
}

func (mc *machine) leave(t *rapid.T) {
	id := rapid.SampledFrom(mc.ids).Draw(t, "id")
	var wantErr error
	if _, present := mc.members[id]; !present {
		wantErr = ErrUnknownMember
	}
	ch, err := mc.c.Leave(id)
	twinCh, _ := mc.twin.Leave(id)
	if mc.settle(t, ch, twinCh, err, wantErr) {
		delete(mc.members, id)
		mc.judge(t, ch)
	}
}

// settle checks the error against the model's and the twin's change
// against the cohort's (rule 4: the order of partition lists is
// irrelevant). It reports whether the change was accepted.
func (mc *machine) settle(t *rapid.T, ch, twinCh Change, err, wantErr error) bool {
	if !errors.Is(err, wantErr) {
		t.Fatalf("got error %v, want %v", err, wantErr)
	}
	if !equalChanges(ch, twinCh) || !slices.Equal(mc.c.Owners(), mc.twin.Owners()) {
		t.Fatalf("the twin (same members, partitions in another order) differs:\n%+v\n%+v", ch, twinCh)
	}
	if err != nil && (mc.c.Generation() != mc.generation || !slices.Equal(mc.c.Owners(), mc.owners)) {
		t.Fatalf("a refused change changed the cohort")
	}
	return err == nil
}

// judge holds an accepted change to the rules: coverage and balance, the
// fewest moves, targets whenever coverage allows, the Change's contents
// and the generation. Then the new owners become the model's previous.
func (mc *machine) judge(t *rapid.T, ch Change) {
	inst := instance{partitionCount: mc.partitionCount, previous: mc.owners}
	for _, m := range mc.members {
		inst.members = append(inst.members, m)
	}
	out := mc.c.Owners()
	owners := inst.positions(out)
	if msg := inst.coverage(out); msg != "" {
		t.Fatal(msg)
	}
	if msg := inst.improvingChain(owners); msg != "" {
		t.Fatalf("balance: %s", msg)
	}
	if msg := inst.negativeCycle(owners); msg != "" {
		t.Fatalf("not optimal (balance, then moves): %s", msg)
	}
	if len(inst.members) <= 4 && inst.partitionCount <= 6 {
		if got, want := inst.scoreOf(owners), inst.bruteBest(); got != want {
			t.Fatalf("scored %v, the best is %v", got, want)
		}
	}
	if inst.targetsFeasible() && inst.scoreOf(owners).excess > 0 {
		t.Fatalf("a member is over its target though an assignment within every target exists")
	}
	if want := expectedChange(mc.owners, out); !equalChanges(ch, want) {
		t.Fatalf("change %+v, want %+v", ch, want)
	}
	wantGen := mc.generation
	if len(ch.Partitions) > 0 {
		wantGen++
	}
	if ch.Generation != wantGen || mc.c.Generation() != wantGen {
		t.Fatalf("generation %d (cohort %d), want %d", ch.Generation, mc.c.Generation(), wantGen)
	}
	mc.owners, mc.generation = out, wantGen
}

// coverage checks rule 1 on Assign's output directly.
func (inst *instance) coverage(out []Owner) string {
	subs := inst.subscribersOf()
	owners := inst.positions(out)
	for p := range out {
		switch {
		case len(subs[p]) == 0 && out[p].Assigned:
			return "an uncovered partition has an owner"
		case len(subs[p]) > 0 && !slices.Contains(subs[p], owners[p]):
			return "a covered partition has no owner, or one not subscribed to it"
		}
	}
	return ""
}

// expectedChange is the diff between two owner lists, built the plain way.
func expectedChange(before, after []Owner) Change {
	var ch Change
	sets := func(owners []Owner) map[MemberID][]uint32 {
		m := map[MemberID][]uint32{}
		for p, o := range owners {
			if o.Assigned {
				m[o.Member] = append(m[o.Member], uint32(p))
			}
		}
		return m
	}
	old, cur := sets(before), sets(after)
	var ids []MemberID
	for id := range old {
		ids = append(ids, id)
	}
	for id := range cur {
		if _, ok := old[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, compareIDs)
	for _, id := range ids {
		if slices.Equal(old[id], cur[id]) {
			continue
		}
		mc := MemberChange{Member: id, Assigned: cur[id]}
		for _, p := range cur[id] {
			if !slices.Contains(old[id], p) {
				mc.Added = append(mc.Added, p)
			}
		}
		for _, p := range old[id] {
			if !slices.Contains(cur[id], p) {
				mc.Revoked = append(mc.Revoked, p)
			}
		}
		ch.Members = append(ch.Members, mc)
	}
	for p := range before {
		if before[p] != after[p] {
			ch.Partitions = append(ch.Partitions, OwnerChange{Partition: uint32(p), Old: before[p], New: after[p]})
		}
	}
	return ch
}

// equalChanges compares changes but not their generations.
func equalChanges(a, b Change) bool {
	return equalMemberChanges(a.Members, b.Members) && slices.Equal(a.Partitions, b.Partitions)
}

// propCohort is the state machine as a property, so that mutant_test.go
// can run it on a broken variant.
func propCohort(v variant) func(*rapid.T) {
	return func(t *rapid.T) {
		mc := newMachine(t, v)
		t.Repeat(map[string]func(*rapid.T){
			"join":   mc.join,
			"update": mc.update,
			"leave":  mc.leave,
			"": func(t *rapid.T) {
				if err := mc.c.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
			},
		})
	}
}

// TestCohortAgainstModel: random joins, updates and leaves (including
// refused ones) against the model. After every accepted change: coverage;
// the balance invariant; optimality of balance and then of moves (a
// negative-cycle certificate on every input, brute force on those of up to
// 4 members x 6 partitions); targets met whenever some assignment meets
// them all; the Change exactly the diff of the owners; the generation up by
// one exactly when something moved; and a twin cohort fed the same
// changes with partitions in other orders in lockstep.
func TestCohortAgainstModel(t *testing.T) {
	rapid.Check(t, propCohort(variantNone))
}
