package bench

import (
	"bytes"
	"math"
	"testing"
)

func TestHeaderLayoutIsLittleEndianIDThenSendTime(t *testing.T) {
	body := make([]byte, 20)
	PutHeader(body, 0x0102030405060708, 0x1112131415161718)
	want := []byte{8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, 0, 0, 0, 0}
	if !bytes.Equal(body, want) {
		t.Fatalf("header bytes %x, want %x", body, want)
	}
	id, sendNs, ok := ReadHeader(body)
	if !ok || id != 0x0102030405060708 || sendNs != 0x1112131415161718 {
		t.Fatalf("ReadHeader = %x %x %v", id, sendNs, ok)
	}
	if _, _, ok := ReadHeader(body[:HeaderBytes-1]); ok {
		t.Fatal("a body shorter than the header must not decode")
	}
}

func TestBodyFillerIsFixedPerSeedAndNotConstant(t *testing.T) {
	a, b, other := NewBody(1024, 1), NewBody(1024, 1), NewBody(1024, 2)
	if !bytes.Equal(a, b) {
		t.Fatal("the filler must be the same for the same seed")
	}
	if bytes.Equal(a, other) {
		t.Fatal("different producers should get different filler")
	}
	if !bytes.Equal(a[:HeaderBytes], make([]byte, HeaderBytes)) {
		t.Fatal("the header part is left for PutHeader")
	}
	distinct := map[byte]bool{}
	for _, x := range a[HeaderBytes:] {
		distinct[x] = true
	}
	if len(distinct) < 200 {
		t.Fatalf("filler uses only %d distinct byte values: too compressible", len(distinct))
	}
	if len(NewBody(HeaderBytes, 0)) != HeaderBytes {
		t.Fatal("a header-only body has no filler")
	}
}

func TestSplitBlocksIsDenseContiguousAndFrontLoaded(t *testing.T) {
	cases := []struct {
		msgs, producers int
		want            []Block
	}{
		{10, 3, []Block{{0, 4}, {4, 3}, {7, 3}}},
		{200000, 2, []Block{{0, 100000}, {100000, 100000}}},
		{5, 5, []Block{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}}},
		{7, 1, []Block{{0, 7}}},
		{2, 4, []Block{{0, 1}, {1, 1}, {2, 0}, {2, 0}}},
	}
	for _, c := range cases {
		got := SplitBlocks(c.msgs, c.producers)
		if len(got) != len(c.want) {
			t.Fatalf("SplitBlocks(%d, %d) = %v, want %v", c.msgs, c.producers, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("SplitBlocks(%d, %d) = %v, want %v", c.msgs, c.producers, got, c.want)
			}
		}
	}
	for msgs := 1; msgs < 50; msgs++ {
		for producers := 1; producers < 9; producers++ {
			next := uint64(0)
			for _, b := range SplitBlocks(msgs, producers) {
				if b.FirstID != next {
					t.Fatalf("msgs=%d producers=%d: gap or overlap at %d", msgs, producers, next)
				}
				next += uint64(b.Count)
			}
			if next != uint64(msgs) {
				t.Fatalf("msgs=%d producers=%d: covered %d ids", msgs, producers, next)
			}
		}
	}
}

func TestDueNsPacesEachProducerAtRateOverProducers(t *testing.T) {
	const startNs = 1_000_000
	// 5000 msg/s over 2 producers: each sends every 400 us.
	for k, want := range map[int]int64{0: startNs, 1: startNs + 400_000, 10: startNs + 4_000_000, 25000: startNs + 10_000_000_000} {
		if got := DueNs(startNs, k, 2, 5000); got != want {
			t.Errorf("DueNs(k=%d) = %d, want %d", k, got, want)
		}
	}
	if got := DueNs(startNs, 3, 1, 4); got != startNs+750_000_000 {
		t.Errorf("4 msg/s, k=3: %d", got)
	}
	if got := DueNs(startNs, 99, 2, 0); got != startNs {
		t.Errorf("unpaced messages are due at once, got %d", got)
	}
}

func TestPercentilesAreNearestRankAndSkipUnmeasured(t *testing.T) {
	var values []int64
	for ms := int64(100); ms >= 1; ms-- {
		values = append(values, ms*1e6)
	}
	values = append(values, -1, -1)
	got, n := Percentiles(values)
	if n != 100 || got.P50Ms != 50 || got.P99Ms != 99 || got.MaxMs != 100 {
		t.Fatalf("Percentiles(1..100 ms) = %+v over %d", got, n)
	}
	if values[0] != 100e6 {
		t.Fatal("Percentiles must not reorder its input")
	}
	got, n = Percentiles([]int64{2_500_000})
	if n != 1 || got.P50Ms != 2.5 || got.P99Ms != 2.5 || got.MaxMs != 2.5 {
		t.Fatalf("one value: %+v", got)
	}
	got, n = Percentiles([]int64{-1})
	if n != 0 || !math.IsNaN(got.P50Ms) || !math.IsNaN(got.P99Ms) || !math.IsNaN(got.MaxMs) {
		t.Fatalf("nothing measured: %+v over %d", got, n)
	}
}

func TestLineFormatMatchesTheHarness(t *testing.T) {
	l := NewLine()
	l.Set("system", "fibril-quic")
	l.Set("msgs", 200000)
	l.Set("secs", 1.23456)
	l.Set("msgs_per_s", 92557.6)
	l.Set("p99_ms", math.NaN())
	l.Set("left", int64(-1))
	l.Set("rate", 5000.0)
	l.Set("status", "error")
	l.Set("err", `dial "x": refused`)
	l.Set("secs", 2.0) // replaces, keeps its place
	want := `system=fibril-quic msgs=200000 secs=2.000 msgs_per_s=92558 p99_ms=NaN left=-1 rate=5000 status=error err="dial \"x\": refused"`
	if got := l.String(); got != want {
		t.Fatalf("line\n got %s\nwant %s", got, want)
	}
	fields, err := ParseLine(l.String())
	if err != nil {
		t.Fatal(err)
	}
	if fields["err"] != `dial "x": refused` || fields["msgs_per_s"] != "92558" || len(fields) != 9 {
		t.Fatalf("ParseLine = %v", fields)
	}
}
