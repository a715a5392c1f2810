package sim

import (
	"bytes"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// What a crash leaves: every synced record intact, then at most a prefix of
// the unsynced ones, and recovery cuts exactly at the first damaged record.
func TestDiskCrashKeepsSyncedPrefix(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := &Disk{}
		var written [][]byte
		synced := 0
		for i, n := 0, rapid.IntRange(1, 40).Draw(t, "records"); i < n; i++ {
			payload := []byte(fmt.Sprintf("record-%d-%s", i, bytes.Repeat([]byte{'x'}, rapid.IntRange(0, 50).Draw(t, "len"))))
			d.Append(uint16(i%3), payload)
			written = append(written, payload)
			if rapid.Bool().Draw(t, "sync") {
				d.SyncDone(d.SyncStart())
				synced = len(written)
			}
		}
		rng := NewRand(rapid.Uint64().Draw(t, "seed"))
		d.Crash(rng, rapid.Float64Range(0, 1).Draw(t, "tornRatio"))
		got := d.Recover()
		if len(got) < synced {
			t.Fatalf("recovered %d records, %d were synced", len(got), synced)
		}
		if len(got) > len(written) {
			t.Fatalf("recovered %d records, only %d were written", len(got), len(written))
		}
		for i, rec := range got {
			if !bytes.Equal(rec.Payload, written[i]) || rec.Stream != uint16(i%3) {
				t.Fatalf("record %d came back as %q on stream %d", i, rec.Payload, rec.Stream)
			}
		}
		// The log is cut after the last good record: appends continue from it.
		d.Append(7, []byte("after"))
		again := d.Recover()
		if len(again) != len(got)+1 || string(again[len(got)].Payload) != "after" {
			t.Fatalf("after recovery the next append is not the next record")
		}
	})
}

func TestDiskRecoveryStopsAtCorruptRecord(t *testing.T) {
	d := &Disk{}
	d.Append(0, []byte("one"))
	d.Append(0, []byte("two"))
	d.Append(0, []byte("three"))
	d.SyncDone(d.SyncStart())
	// Flip one payload byte of the second record: its CRC must catch it.
	second := recordHeaderBytes + len("one") + recordHeaderBytes
	d.data[second] ^= 0xff
	got := d.Recover()
	if len(got) != 1 || string(got[0].Payload) != "one" {
		t.Fatalf("want only the first record, got %d", len(got))
	}
	if d.stats.TruncatedOff == 0 {
		t.Fatalf("recovery should count the bytes it cut")
	}
}
