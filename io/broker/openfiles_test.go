package broker

import "testing"

// The budget leaves at least fdsReservedMin (and a tenth) of the limit to
// everything else, never drops to zero, and is unbounded when the limit is
// unknown or unlimited.
func TestPartitionsForOpenFiles(t *testing.T) {
	for _, c := range []struct {
		limit int64
		want  int
	}{
		{0, partitionsUnbounded},
		{-1, partitionsUnbounded},
		{1 << 40, partitionsUnbounded},
		{1024, 1},
		{4096, (4096 - 1024) / 2},
		{20000, (20000 - 2000) / 2},
		{1 << 20, (1<<20 - (1<<20)/10) / 2},
	} {
		if got := PartitionsForOpenFiles(c.limit); got != c.want {
			t.Errorf("limit %d: budget %d, want %d", c.limit, got, c.want)
		}
	}
}
