package cohort

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
)

// Invariants of the input types:
//   - a MemberID is never the nil UUID (PROTOCOL 5.6 check 4 refuses it on
//     the wire; here it would be indistinguishable from "no owner");
//   - a Member's Partitions are each below the partition count and appear
//     once (any order: Assign sorts nothing in place, it reads them);
//   - an Owner with Assigned false has a zero Member.

// Limits. Every loop of Assign is bounded by them (STYLE.md §3); inputs over
// them are refused with an error, never truncated. The figures keep the
// worst case of one Assign call (PartitionsMax augmentations, each a scan of
// at most MembersMax² arcs, usually far fewer) near a tenth of a second;
// see doc.go and bench_test.go.
const (
	// PartitionsMax bounds a queue's partition count as the cohort sees it.
	PartitionsMax = 4096
	// MembersMax bounds the members of one cohort. A cohort with more
	// members than partitions leaves the extra ones standing by, so far
	// more than the partition count buys nothing.
	MembersMax = 256
	// IDBytesMax bounds the cohort id (the wire's consumer_group string).
	IDBytesMax = 255
)

// Errors for bad input. They are plain sentinels: the Node validates what
// the wire sends before it reaches here and maps its own codes (400/409);
// one of these coming back means the Node passed something it should not.
var (
	ErrPartitionCount     = errors.New("cohort: partition count must be 1..PartitionsMax")
	ErrTooManyMembers     = errors.New("cohort: more than MembersMax members")
	ErrNilMember          = errors.New("cohort: the nil UUID is not a member id")
	ErrDuplicateMember    = errors.New("cohort: member id given twice")
	ErrUnknownMember      = errors.New("cohort: no such member")
	ErrPartitionRange     = errors.New("cohort: subscribed partition not below the partition count")
	ErrDuplicatePartition = errors.New("cohort: partition subscribed twice by one member")
	ErrPreviousLength     = errors.New("cohort: previous owners must be nil or one per partition")
	ErrCohortID           = errors.New("cohort: id must be 1..IDBytesMax bytes")
	ErrGenerationMax      = errors.New("cohort: generation would pass the uint64 range")
)

// MemberID is a member's identity: a UUID, minted by the session on the
// first exclusive SUBSCRIBE or sent back by the client (docs/cohorts.md).
// Its byte order is the member order of rule 4.
type MemberID [16]byte

// IsNil reports whether id is the nil UUID, which names no member.
func (id MemberID) IsNil() bool { return id == MemberID{} }

// String is the usual 8-4-4-4-12 hex form, for errors and tests.
func (id MemberID) String() string {
	h := hex.EncodeToString(id[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// compareIDs orders member ids bytewise: the only order ties are broken by.
func compareIDs(a, b MemberID) int { return bytes.Compare(a[:], b[:]) }

// Member is one member as the assignment sees it.
type Member struct {
	ID MemberID
	// Partitions lists the partitions the member is subscribed to (any
	// order, no duplicates). Only these may be assigned to it.
	Partitions []uint32
	// Target is consumer_target, a soft maximum of partitions; 0 is none.
	Target uint32
}

// clone copies m with its partitions sorted, so that a caller's slice is
// never aliased by a Cohort and two equal members compare equal.
func (m Member) clone() Member {
	c := m
	c.Partitions = slices.Clone(m.Partitions)
	slices.Sort(c.Partitions)
	return c
}

// Owner is the owner of one partition: Member when Assigned, nobody else.
type Owner struct {
	Member   MemberID
	Assigned bool
}

// validatePartitions checks one member's subscribed list against the
// partition count, marking each partition in seen (a scratch bitset of at
// least partitionCount bits, all clear on entry and on return).
func validatePartitions(m *Member, partitionCount uint32, seen []uint64) error {
	if m.ID.IsNil() {
		return ErrNilMember
	}
	var err error
	marked := 0
	for _, p := range m.Partitions {
		if p >= partitionCount {
			err = fmt.Errorf("%w: member %v, partition %d of %d", ErrPartitionRange, m.ID, p, partitionCount)
			break
		}
		if seen[p/64]&(1<<(p%64)) != 0 {
			err = fmt.Errorf("%w: member %v, partition %d", ErrDuplicatePartition, m.ID, p)
			break
		}
		seen[p/64] |= 1 << (p % 64)
		marked++
	}
	// Clear only what was marked, so the scratch costs O(subscribed) per
	// member rather than O(partitions).
	for _, p := range m.Partitions[:marked] {
		seen[p/64] &^= 1 << (p % 64)
	}
	return err
}

// validateMembers checks a member list for Assign: the limits, nil and
// duplicate ids, and each member's partitions.
func validateMembers(partitionCount uint32, members []Member) error {
	if partitionCount == 0 || partitionCount > PartitionsMax {
		return fmt.Errorf("%w: %d", ErrPartitionCount, partitionCount)
	}
	if len(members) > MembersMax {
		return fmt.Errorf("%w: %d", ErrTooManyMembers, len(members))
	}
	seen := make([]uint64, (partitionCount+63)/64)
	ids := make(map[MemberID]struct{}, len(members))
	for i := range members {
		if err := validatePartitions(&members[i], partitionCount, seen); err != nil {
			return err
		}
		if _, dup := ids[members[i].ID]; dup {
			return fmt.Errorf("%w: %v", ErrDuplicateMember, members[i].ID)
		}
		ids[members[i].ID] = struct{}{}
	}
	return nil
}
