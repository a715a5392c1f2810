package cohort

import (
	"fmt"
	"math"
	"slices"
)

// Cohort is the state the Node keeps for one queue's cohort: its members,
// the current owner of each partition and the generation. Invariants
// (CheckInvariants verifies them):
//   - members are sorted by id, unique, at most MembersMax, each with its
//     partitions sorted, unique and below the partition count;
//   - owners is exactly Assign(partitionCount, members, owners before the
//     last change): every change re-runs the assignment with the current
//     owners as the previous ones, so stickiness is against what the
//     members were last told;
//   - the generation starts at the floor and grows by one per change that
//     moves any partition's owner (assigned, revoked or handed over), and
//     never otherwise, so a notice's generation names one assignment;
//   - a change that fails leaves the cohort as it was.
type Cohort struct {
	id             string
	partitionCount uint32
	members        []Member
	owners         []Owner
	generation     uint64
	// variant is a broken variant for mutant_test.go; variantNone otherwise.
	variant variant
}

// Change is what one Join, Update or Leave did. When nothing moved,
// Members and Partitions are empty and Generation is the one before.
type Change struct {
	// Generation is the cohort's generation after the change.
	Generation uint64
	// Members lists, by member id, every member whose assigned set changed
	// (for AssignmentNotice). A leaving member that owned partitions is
	// listed with an empty Assigned: its session may be gone already.
	Members []MemberChange
	// Partitions lists, by partition, every partition whose owner changed
	// (for SetOwner). An Owner with Assigned false is nobody: the last
	// member subscribed to that partition left or unsubscribed it.
	Partitions []OwnerChange
}

// Moved reports whether the change moved anything (and so bumped the
// generation).
func (c Change) Moved() bool { return len(c.Partitions) > 0 }

// MemberChange is one member's new set and how it differs from the old.
// All three lists are sorted ascending.
type MemberChange struct {
	Member   MemberID
	Assigned []uint32
	Added    []uint32
	Revoked  []uint32
}

// OwnerChange is one partition's owner before and after the change.
type OwnerChange struct {
	Partition uint32
	Old, New  Owner
}

// NewCohort is an empty cohort over partitionCount partitions. Its first
// change that moves anything has generation generationFloor+1 (the Node
// passes boot<<32, so that a restarted broker never reuses a generation).
func NewCohort(id string, partitionCount uint32, generationFloor uint64) (*Cohort, error) {
	if len(id) == 0 || len(id) > IDBytesMax {
		return nil, fmt.Errorf("%w: %d bytes", ErrCohortID, len(id))
	}
	if partitionCount == 0 || partitionCount > PartitionsMax {
		return nil, fmt.Errorf("%w: %d", ErrPartitionCount, partitionCount)
	}
	return &Cohort{id: id, partitionCount: partitionCount, owners: make([]Owner, partitionCount),
		generation: generationFloor}, nil
}

// ID is the cohort id (the queue's consumer_group).
func (c *Cohort) ID() string { return c.id }

// PartitionCount is the number of partitions the cohort assigns.
func (c *Cohort) PartitionCount() uint32 { return c.partitionCount }

// Generation is the generation of the current assignment.
func (c *Cohort) Generation() uint64 { return c.generation }

// Len is the number of members.
func (c *Cohort) Len() int { return len(c.members) }

// Members returns copies of the members, sorted by id.
func (c *Cohort) Members() []Member {
	out := make([]Member, len(c.members))
	for i, m := range c.members {
		out[i] = m.clone()
	}
	return out
}

// Owners returns a copy of the owner of each partition.
func (c *Cohort) Owners() []Owner { return slices.Clone(c.owners) }

// Assignment is the sorted list of partitions member owns (nil when it owns
// none or is not a member).
func (c *Cohort) Assignment(member MemberID) []uint32 {
	var out []uint32
	for p, o := range c.owners {
		if o.Assigned && o.Member == member {
			out = append(out, uint32(p))
		}
	}
	return out
}

// find is the position of id in the sorted members and whether it is there.
func (c *Cohort) find(id MemberID) (int, bool) {
	return slices.BinarySearchFunc(c.members, id, func(m Member, id MemberID) int { return compareIDs(m.ID, id) })
}

// Join adds member m and reassigns. It fails if m's id is nil or already a
// member, if the cohort is full, or if m's partitions are invalid.
func (c *Cohort) Join(m Member) (Change, error) {
	if err := c.validateMember(&m); err != nil {
		return Change{}, err
	}
	i, found := c.find(m.ID)
	if found {
		return Change{}, fmt.Errorf("%w: %v", ErrDuplicateMember, m.ID)
	}
	if len(c.members) >= MembersMax {
		return Change{}, fmt.Errorf("%w: %d", ErrTooManyMembers, len(c.members)+1)
	}
	return c.apply(slices.Insert(slices.Clone(c.members), i, m.clone()), MemberID{})
}

// Update replaces a member's subscribed partitions and target (found by
// m.ID) and reassigns. It fails if m is not a member or its partitions are
// invalid.
func (c *Cohort) Update(m Member) (Change, error) {
	if err := c.validateMember(&m); err != nil {
		return Change{}, err
	}
	i, found := c.find(m.ID)
	if !found {
		return Change{}, fmt.Errorf("%w: %v", ErrUnknownMember, m.ID)
	}
	members := slices.Clone(c.members)
	members[i] = m.clone()
	return c.apply(members, MemberID{})
}

// Leave removes member id and reassigns: the survivors take what it owned
// (those subscribed to it; a partition no one else subscribes to is left
// with no owner). It fails if id is not a member.
func (c *Cohort) Leave(id MemberID) (Change, error) {
	i, found := c.find(id)
	if !found {
		return Change{}, fmt.Errorf("%w: %v", ErrUnknownMember, id)
	}
	return c.apply(slices.Delete(slices.Clone(c.members), i, i+1), id)
}

// Set replaces the whole member list (any order) and reassigns once: the
// Node gathers the joins, updates and leaves of a moment into one call, so
// a member subscribing to a thousand partitions costs one assignment, not a
// thousand. It fails, changing nothing, if a member is invalid, an id
// repeats, or there are more than MembersMax.
func (c *Cohort) Set(members []Member) (Change, error) {
	if len(members) > MembersMax {
		return Change{}, fmt.Errorf("%w: %d", ErrTooManyMembers, len(members))
	}
	next := make([]Member, 0, len(members))
	for i := range members {
		m := members[i]
		if err := c.validateMember(&m); err != nil {
			return Change{}, err
		}
		next = append(next, m.clone())
	}
	slices.SortFunc(next, func(a, b Member) int { return compareIDs(a.ID, b.ID) })
	for i := 1; i < len(next); i++ {
		if next[i].ID == next[i-1].ID {
			return Change{}, fmt.Errorf("%w: %v", ErrDuplicateMember, next[i].ID)
		}
	}
	assertTrue(len(next) == len(members), "every member is kept")
	return c.apply(next, MemberID{})
}

// validateMember checks one member's id and partitions.
func (c *Cohort) validateMember(m *Member) error {
	return validatePartitions(m, c.partitionCount, make([]uint64, (c.partitionCount+63)/64))
}

// apply runs the assignment for the new member list and, if it succeeds
// and the generation has room, makes it the cohort's state. leaver is the
// member that left (nil UUID for a join or an update).
func (c *Cohort) apply(members []Member, leaver MemberID) (Change, error) {
	owners, err := assign(c.partitionCount, members, c.owners, c.assignVariant())
	if err != nil {
		return Change{}, err
	}
	if c.variant == variantOverCover && !leaver.IsNil() {
		for p, o := range c.owners {
			if o.Assigned && o.Member == leaver {
				owners[p] = o
			}
		}
	}
	change := diff(c.owners, owners)
	// Members and partitions change together: a member's set changes only
	// if some partition's owner did.
	assertTrue(change.Moved() == (len(change.Members) > 0), "owner changes without member changes, or the reverse")
	if change.Moved() || c.variant == variantBumpOnNoop {
		if c.generation == math.MaxUint64 {
			return Change{}, ErrGenerationMax
		}
		c.generation++
	}
	assertTrue(len(owners) == len(c.owners), "the assignment changed the partition count")
	c.members, c.owners = members, owners
	change.Generation = c.generation
	return change, nil
}

// assignVariant passes solver variants through; Cohort-only ones are not
// the solver's.
func (c *Cohort) assignVariant() variant {
	if c.variant == variantBumpOnNoop || c.variant == variantOverCover {
		return variantNone
	}
	return c.variant
}

// diff lists the partitions whose owner changed and, per member, its new
// set with what it gained and lost. Partitions are walked in order, so every
// list comes out sorted without sorting.
func diff(before, after []Owner) Change {
	var ch Change
	byMember := map[MemberID]*MemberChange{}
	touch := func(id MemberID) *MemberChange {
		mc := byMember[id]
		if mc == nil {
			mc = &MemberChange{Member: id}
			byMember[id] = mc
		}
		return mc
	}
	for p := range before {
		o, n := before[p], after[p]
		if o == n {
			continue
		}
		ch.Partitions = append(ch.Partitions, OwnerChange{Partition: uint32(p), Old: o, New: n})
		if o.Assigned {
			mc := touch(o.Member)
			mc.Revoked = append(mc.Revoked, uint32(p))
		}
		if n.Assigned {
			mc := touch(n.Member)
			mc.Added = append(mc.Added, uint32(p))
		}
	}
	// Only members touched above changed; their full sets come from after.
	for p, n := range after {
		if mc := byMember[n.Member]; n.Assigned && mc != nil {
			mc.Assigned = append(mc.Assigned, uint32(p))
		}
	}
	for _, mc := range byMember {
		assertTrue(len(mc.Added)+len(mc.Revoked) > 0, "a member listed as changed with nothing added or revoked")
		ch.Members = append(ch.Members, *mc)
	}
	slices.SortFunc(ch.Members, func(a, b MemberChange) int { return compareIDs(a.Member, b.Member) })
	return ch
}
