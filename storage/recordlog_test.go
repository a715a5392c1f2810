package storage

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/fibril-go/fibril/storage/simfs"
	"pgregory.net/rapid"
)

func openRecordLog(t testing.TB, dir string, opts RecordLogOptions) (*RecordLog, RecordLogRecovered) {
	t.Helper()
	rl, rec, err := OpenRecordLog(testEnv, dir, opts)
	if err != nil {
		t.Fatalf("open record log %s: %v", dir, err)
	}
	return rl, rec
}

func makeRecords(first uint64, count int) []Record {
	out := make([]Record, count)
	for i := range out {
		index := first + uint64(i)
		out[i] = Record{Index: index, Data: []byte(fmt.Sprintf("record %d %s", index, bytes.Repeat([]byte{'x'}, int(index%37))))}
	}
	return out
}

func sameRecords(t interface {
	Helper()
	Fatalf(string, ...any)
}, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Index != want[i].Index || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Fatalf("record %d: got %d %q, want %d %q", i, got[i].Index, got[i].Data, want[i].Index, want[i].Data)
		}
	}
}

func smallRecordOptions() RecordLogOptions {
	opts := DefaultRecordLogOptions()
	opts.SegmentSizeBytes = 1 << 10
	return opts
}

// TestRecordLogRoundTrip: records across several segments, a snapshot in
// the middle, more records: reopening gives the snapshot and exactly the
// records after it; appending goes on at the next index.
func TestRecordLogRoundTrip(t *testing.T) {
	dir := t.TempDir()
	rl, rec := openRecordLog(t, dir, smallRecordOptions())
	if rec.Snapshot != nil || len(rec.Records) != 0 || rl.LastIndex() != 0 {
		t.Fatalf("fresh log: %+v, last %d", rec, rl.LastIndex())
	}
	all := makeRecords(1, 200)
	for i := 0; i < 150; i += 10 {
		must(t, rl.Append(all[i:i+10]))
		must(t, rl.Sync())
	}
	if err := rl.SaveSnapshot(151, []byte("too far")); err == nil {
		t.Fatal("a snapshot beyond the synced index was accepted")
	}
	must(t, rl.SaveSnapshot(120, []byte("state at 120")))
	must(t, rl.Append(all[150:]))
	must(t, rl.Close())
	if len(segmentsOf(t, dir)) < 2 {
		t.Fatal("want several segments")
	}
	rl, rec = openRecordLog(t, dir, smallRecordOptions())
	if string(rec.Snapshot) != "state at 120" || rec.SnapshotIndex != 120 || rec.TruncatedTail {
		t.Fatalf("snapshot %q at %d, cut %v", rec.Snapshot, rec.SnapshotIndex, rec.TruncatedTail)
	}
	sameRecords(t, rec.Records, all[120:])
	if err := rl.Append(makeRecords(202, 1)); err == nil {
		t.Fatal("a gap was accepted")
	}
	must(t, rl.Append(makeRecords(201, 1)))
	must(t, rl.Close())
}

// TestRecordLogTornTail: the last record cut at every byte, or flipped, is
// a torn tail: trimmed, every earlier record kept.
func TestRecordLogTornTail(t *testing.T) {
	master := t.TempDir()
	rl, _ := openRecordLog(t, master, smallRecordOptions())
	all := makeRecords(1, 30)
	must(t, rl.Append(all))
	must(t, rl.Close())
	tail := tailWithRecords(t, master)
	starts := frameStarts(t, filepath.Join(master, tail.name))
	lastStart, end := starts[len(starts)-2], starts[len(starts)-1]
	for cut := lastStart + 1; cut < end; cut++ {
		dir := copyDir(t, master)
		must(t, tfs.Truncate(filepath.Join(dir, tail.name), int64(cut)))
		rl, rec := openRecordLog(t, dir, smallRecordOptions())
		if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != 30 {
			t.Fatalf("cut at %d: %+v", cut, rec.Cut)
		}
		sameRecords(t, rec.Records, all[:29])
		must(t, rl.Close())
		must(t, tfs.RemoveAll(dir))
	}
	dir := copyDir(t, master)
	flipByte(t, filepath.Join(dir, tail.name), end-2)
	rl, rec := openRecordLog(t, dir, smallRecordOptions())
	defer rl.Close()
	if !rec.Cut.Torn || rec.Cut.Reason != CutChecksum {
		t.Fatalf("flipped last record: %+v", rec.Cut)
	}
	sameRecords(t, rec.Records, all[:29])
}

// TestRecordLogCorruptionRefused: a flipped byte in an earlier record is
// corruption: refused with nothing changed, or cut under CorruptionTruncate.
func TestRecordLogCorruptionRefused(t *testing.T) {
	dir := t.TempDir()
	rl, _ := openRecordLog(t, dir, smallRecordOptions())
	all := makeRecords(1, 30)
	must(t, rl.Append(all))
	must(t, rl.Close())
	seg := segmentsOf(t, dir)[0]
	starts := frameStarts(t, filepath.Join(dir, seg.name))
	flipByte(t, filepath.Join(dir, seg.name), starts[3]+14) // record 4's data
	before := dirDigest(t, dir)
	if _, _, err := OpenRecordLog(testEnv, dir, smallRecordOptions()); asCorruption(t, err).Cut.Index != 4 {
		t.Fatalf("reported %v", err)
	}
	if dirDigest(t, dir) != before {
		t.Fatal("a refused open changed the files")
	}
	opts := smallRecordOptions()
	opts.OnCorruption = CorruptionTruncate
	rl, rec := openRecordLog(t, dir, opts)
	defer rl.Close()
	sameRecords(t, rec.Records, all[:3])
}

// TestRecordLogDurableAcrossPowerLosses (rapid, sim pass): appends, syncs,
// snapshots, crashes and power losses; every recovery holds every record
// a Sync reported durable, byte for byte, and a snapshot never goes back.
func TestRecordLogDurableAcrossPowerLosses(t *testing.T) {
	simOnly(t)
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.Uint64().Draw(t, "seed")
		fs, env := newCrashableEnv(seed, simfs.Options{})
		opts := smallRecordOptions()
		const dir = "/node"
		rl, _, err := OpenRecordLog(env, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		var appended []Record
		durable, snapshotIndex := 0, uint64(0)
		live := true
		for range rapid.IntRange(1, 30).Draw(t, "steps") {
			// Now and then the process stops inside the next call.
			stops := fs.Counters().Crashes + fs.Counters().PowerLosses
			if live && rapid.IntRange(0, 4).Draw(t, "stop inside") == 0 {
				fs.StopAtSync(rapid.Uint64Range(1, 4).Draw(t, "at fsync"), rapid.Bool().Draw(t, "power loss"))
			}
			op := rapid.IntRange(0, 9).Draw(t, "op")
			var err error
			switch {
			case op < 4 && live:
				batch := makeRecords(uint64(len(appended))+1, rapid.IntRange(1, 20).Draw(t, "count"))
				err = rl.Append(batch)
				appended = append(appended, batch...)
			case op < 6 && live:
				if err = rl.Sync(); err == nil {
					durable = len(appended)
				}
			case op < 7 && live && durable > int(snapshotIndex):
				index := uint64(durable)
				if err = rl.SaveSnapshot(index, []byte(fmt.Sprint("node state at ", index))); err == nil {
					snapshotIndex = index
				}
			default:
				op = 9 + int(op%2) // a crash or a power loss between calls
			}
			fs.StopAtSync(0, false)
			stoppedInside := fs.Counters().Crashes+fs.Counters().PowerLosses != stops
			if err != nil && !stoppedInside {
				t.Fatalf("op %d: %v", op, err)
			}
			if op >= 9 || stoppedInside {
				if !stoppedInside {
					if op == 9 {
						fs.Crash()
					} else {
						fs.PowerLoss()
					}
				}
				var rec RecordLogRecovered
				rl, rec, err = OpenRecordLog(env, dir, opts)
				if err != nil {
					t.Fatalf("recovery: %v", err)
				}
				if rec.SnapshotIndex < snapshotIndex || string(rec.Snapshot) != fmt.Sprint("node state at ", rec.SnapshotIndex) && rec.SnapshotIndex != 0 {
					t.Fatalf("snapshot %q at %d after one at %d", rec.Snapshot, rec.SnapshotIndex, snapshotIndex)
				}
				base := int(rec.SnapshotIndex)
				if base+len(rec.Records) < durable {
					t.Fatalf("recovered up to %d, %d were durable", base+len(rec.Records), durable)
				}
				sameRecords(t, rec.Records, appended[base:base+len(rec.Records)])
				appended = appended[:base+len(rec.Records)]
				durable, snapshotIndex, live = len(appended), rec.SnapshotIndex, true
			}
		}
	})
}
