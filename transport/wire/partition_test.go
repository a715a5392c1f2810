package wire

import "testing"

// TestPartitionKeyHashCanonical pins the canonical values of PROTOCOL.md §2.2.
func TestPartitionKeyHashCanonical(t *testing.T) {
	cases := []struct {
		key  string
		hash uint64
	}{
		{"", 14695981039346656037},
		{"a", 12638187200555641996},
		{"order-42", 9015620992513762004},
		{"partition-key", 11792757095719117019},
		{"hello world", 8618312879776256743},
	}
	for _, c := range cases {
		if got := PartitionKeyHash([]byte(c.key)); got != c.hash {
			t.Errorf("PartitionKeyHash(%q) = %d, want %d", c.key, got, c.hash)
		}
	}
}

func TestPartitionForKey(t *testing.T) {
	if got := PartitionForKey([]byte("order-42"), 4); got != 0 {
		t.Errorf(`PartitionForKey("order-42", 4) = %d, want 0 (§2.2)`, got)
	}
	if got := PartitionForKey([]byte("a"), 7); got != uint32(12638187200555641996%7) {
		t.Errorf(`PartitionForKey("a", 7) = %d`, got)
	}
	for _, count := range []uint32{0, 1} {
		if got := PartitionForKey([]byte("hello world"), count); got != 0 {
			t.Errorf("partition count %d: got %d, want 0", count, got)
		}
	}
	for count := uint32(2); count < 50; count++ {
		if got := PartitionForKey([]byte("partition-key"), count); got >= count {
			t.Errorf("partition %d out of range for count %d", got, count)
		}
	}
}
