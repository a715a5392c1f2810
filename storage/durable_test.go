package storage

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/storage/simfs"
	"github.com/fibril-go/fibril/storage/simwal"
	"github.com/fibril-go/fibril/storage/storagetest"
	"pgregory.net/rapid"
)

// Durability across process crashes and power losses, over simfs: what
// recovery returns, and what a Sync reported, survives any later power
// loss. These run in the "sim" pass only (they need a crashable disk).

// splitmix is a seeded simfs.Rand.
type splitmix struct{ state uint64 }

func (s *splitmix) Uint64() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func simOnly(t testing.TB) {
	if testBackend != "sim" {
		t.Skip("needs simfs: runs in the sim pass")
	}
}

func newCrashableEnv(seed uint64, opts simfs.Options) (*simfs.FS, Env) {
	fs := simfs.New(opts)
	fs.SetFaults(simfs.Faults{}, &splitmix{state: seed})
	return fs, Env{FS: fs, OpenSegmentLog: simwal.Opener(fs)}
}

// TestRecoveryMakesWhatItReturnsDurable: a process crashes after writing a
// round (records and blob payloads) but before its fsync; the next Open
// reads it back from the page cache and returns it; then the power fails
// before anything else is synced. The next Open must return at least what
// the first returned, byte for byte: recovery has to fsync what it keeps.
// Before the fix (mutant.RecoveryNoSync) it lost payloads and records.
func TestRecoveryMakesWhatItReturnsDurable(t *testing.T) {
	simOnly(t)
	failsUnder(t, mutant.RecoveryNoSync, checkRecoveryDurable)
}

func checkRecoveryDurable(t testing.TB) {
	opts := testOptions(2<<10, CorruptionRefuse)
	for seed := uint64(1); seed <= 40; seed++ {
		fs, env := newCrashableEnv(seed, simfs.Options{})
		dir := fmt.Sprintf("/p%d", seed)
		l, _, err := Open(env, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		gen := newEntryGen(seed, 900)
		all := gen.Entries(1, 20)
		must(t, l.Append(all[:10]))
		must(t, l.Sync())
		must(t, l.Append(all[10:])) // never synced: the process dies first
		fs.Crash()
		_, first, err := Open(env, dir, opts)
		if err != nil {
			t.Fatalf("seed %d: first recovery: %v", seed, err)
		}
		fs.PowerLoss()
		l, second, err := Open(env, dir, opts)
		if err != nil {
			t.Fatalf("seed %d: recovery after the power loss: %v", seed, err)
		}
		if len(second.Entries) < len(first.Entries) {
			t.Fatalf("seed %d: recovery returned %d entries, a power loss later %d", seed, len(first.Entries), len(second.Entries))
		}
		loadStoredIn(t, env.FS, dir, second.Entries)
		sameEntries(t, second.Entries[:len(first.Entries)], all[:len(first.Entries)])
		l.Close()
	}
}

// loadStoredIn is loadStored over a given filesystem.
func loadStoredIn(t storagetest.TB, fs interface{}, dir string, entries []core.Entry) {
	t.Helper()
	saved := testFS
	testFS = fs.(*simfs.FS)
	defer func() { testFS = saved }()
	loadStored(t, dir, entries)
}

// TestDurableAcrossCrashesAndPowerLosses is the property: random appends,
// syncs, snapshots, process crashes and power losses (with fsync errors
// that drop their pages) over a Log; every recovery gives back a prefix of
// what was appended that holds every entry a Sync reported durable (or an
// earlier recovery returned), each byte for byte, payloads included.
func TestDurableAcrossCrashesAndPowerLosses(t *testing.T) {
	simOnly(t)
	rapid.Check(t, checkDurableProperty)
}

func checkDurableProperty(t *rapid.T) {
	seed := rapid.Uint64().Draw(t, "seed")
	independent := rapid.Bool().Draw(t, "independent dir ops")
	fs, env := newCrashableEnv(seed, simfs.Options{DirOpsIndependent: independent})
	rng := &splitmix{state: seed ^ 0xabcdef}
	opts := testOptions(rapid.SampledFrom([]int{512, 2 << 10, 16 << 10}).Draw(t, "segment bytes"), CorruptionRefuse)
	const dir = "/p"
	l, rec, err := Open(env, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	gen := newEntryGen(seed, 700)
	var appended []core.Entry // the log as this process wrote it
	durable := 0              // appended[:durable] must survive anything
	snapshotIndex := uint64(0)
	live := true
	reopen := func(afterPowerLoss bool) {
		var err error
		l, rec, err = Open(env, dir, opts)
		var ce *CorruptionError
		if errors.As(err, &ce) && independent && ce.Cut.Index > uint64(durable) {
			// With directory operations lost out of order, a later
			// segment's name can outlive an earlier one's (tidwall never
			// fsyncs the directory at a roll): a gap, refused. Nothing
			// durable is behind it, so the operator's truncation is safe.
			truncate := opts
			truncate.OnCorruption = CorruptionTruncate
			l, rec, err = Open(env, dir, truncate)
		}
		if err != nil {
			t.Fatalf("recovery (power loss %v): %v", afterPowerLoss, err)
		}
		if rec.SnapshotIndex < snapshotIndex {
			t.Fatalf("snapshot went back from %d to %d", snapshotIndex, rec.SnapshotIndex)
		}
		got := rec.Entries
		base := int(rec.SnapshotIndex)
		if base+len(got) < durable {
			t.Fatalf("recovered up to %d, but %d were durable", base+len(got), durable)
		}
		loadStoredIn(t, fs, dir, got)
		sameEntries(t, got, appended[base:base+len(got)])
		appended = appended[:base+len(got)]
		durable, snapshotIndex, live = len(appended), rec.SnapshotIndex, true
	}
	steps := rapid.IntRange(1, 40).Draw(t, "steps")
	for range steps {
		// Now and then the process stops inside the next call, at one of
		// its fsyncs (a crash, or a power loss).
		stopped := fs.Counters().Crashes + fs.Counters().PowerLosses
		if live && rapid.IntRange(0, 4).Draw(t, "stop inside") == 0 {
			fs.StopAtSync(rapid.Uint64Range(1, 4).Draw(t, "at fsync"), rapid.Bool().Draw(t, "power loss"))
		}
		stoppedInside := func() bool {
			fs.StopAtSync(0, false)
			return fs.Counters().Crashes+fs.Counters().PowerLosses != stopped
		}
		switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
		case op < 4 && live:
			batch := gen.Entries(uint64(len(appended))+1, rapid.IntRange(1, 12).Draw(t, "count"))
			if gen.Epoch < lastEpoch(appended) {
				gen.Epoch = lastEpoch(appended)
				batch = atEpoch(batch, gen.Epoch)
			}
			err := l.Append(batch)
			if stoppedInside() {
				// Some of the batch may be on disk: the log holds it all.
				appended = append(appended, batch...)
				reopen(true)
				continue
			}
			if err != nil {
				live = false
				continue
			}
			appended = append(appended, batch...)
		case op < 6 && live:
			faults := simfs.Faults{}
			if rapid.IntRange(0, 9).Draw(t, "fsync fails") == 0 {
				faults.FsyncErrorRatio = 0.5
			}
			fs.SetFaults(faults, rng)
			err := l.Sync()
			fs.SetFaults(simfs.Faults{}, rng)
			if stoppedInside() {
				reopen(true)
				continue
			}
			if err != nil {
				live = false
				continue
			}
			durable = len(appended)
		case op < 7 && live && durable > int(snapshotIndex):
			index := uint64(durable)
			if independent {
				// tidwall's TruncateFront (write .START, remove the old
				// segments, rename) is safe only if its directory
				// operations survive in order, as journaling filesystems
				// keep them: with independent losses, a power loss inside
				// it can keep the removals and lose the rename.
				fs.StopAtSync(0, false)
			}
			err := l.SaveSnapshot(index, []byte(fmt.Sprint("state at ", index)), 0)
			if stoppedInside() {
				reopen(true)
				continue
			}
			if err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			snapshotIndex = index
		case op < 9:
			stoppedInside()
			fs.Crash()
			reopen(false)
		default:
			stoppedInside()
			fs.PowerLoss()
			reopen(true)
		}
	}
}

func lastEpoch(entries []core.Entry) uint64 {
	if len(entries) == 0 {
		return 0
	}
	return entries[len(entries)-1].Epoch
}

// checkReportedSurvivesPowerLoss: rounds of publishes with large payloads
// (blob files rotating, segments rolling) go through the planner; at a
// seeded report the power fails on the spot. Recovery must hold every
// entry reported durable, payloads included. It catches a report made
// before the fsync, payloads never fdatasynced, and new files' names never
// fsynced.
func checkReportedSurvivesPowerLoss(t testing.TB) {
	opts := testOptions(1<<10, CorruptionRefuse)
	for seed := uint64(1); seed <= 30; seed++ {
		fs, env := newCrashableEnv(seed, simfs.Options{})
		dir := fmt.Sprintf("/r%d", seed)
		l, _, err := Open(env, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		gen := newEntryGen(seed, 2000)
		var all []core.Entry
		reported := uint64(0)
		failAt := 1 + seed%7 // the report at which the power fails
		reports := uint64(0)
		c := newPlanCommitter(l, func(upTo uint64, _ []StoredPayload, err error) {
			if err != nil {
				return
			}
			reported = upTo
			if reports++; reports == failAt {
				fs.PowerLoss()
			}
		})
		for round := 0; round < 12 && reports < failAt; round++ {
			batch := atEpoch(gen.Entries(uint64(len(all))+1, 1+int(seed%5)), 1)
			all = append(all, batch...)
			if c.Submit(batch) != nil {
				break
			}
		}
		if reports < failAt {
			fs.PowerLoss()
		}
		_, rec, err := Open(env, dir, opts)
		if err != nil {
			t.Fatalf("seed %d: recovery after %d reported durable: %v", seed, reported, err)
		}
		if uint64(len(rec.Entries)) < reported {
			t.Fatalf("seed %d: %d reported durable, %d recovered", seed, reported, len(rec.Entries))
		}
		loadStoredIn(t, fs, dir, rec.Entries)
		sameEntries(t, rec.Entries[:reported], all[:reported])
	}
}

func TestMutantDurableOnSubmitPowerLoss(t *testing.T) {
	simOnly(t)
	failsUnder(t, mutant.DurableOnSubmit, checkReportedSurvivesPowerLoss)
}

func TestMutantNoBlobDatasyncPowerLoss(t *testing.T) {
	simOnly(t)
	failsUnder(t, mutant.NoBlobDatasync, checkReportedSurvivesPowerLoss)
}

func TestMutantNoDirSyncPowerLoss(t *testing.T) {
	simOnly(t)
	failsUnder(t, mutant.NoDirSync, checkReportedSurvivesPowerLoss)
}

// checkBitRotCaught: with every read of recovery rotting one bit, Open
// either refuses (the CRC caught it) or returns exactly what was written;
// a payload read through a PayloadReader is an error, never other bytes.
func checkBitRotCaught(t testing.TB) {
	opts := testOptions(4<<10, CorruptionRefuse)
	refused := 0
	for seed := uint64(1); seed <= 30; seed++ {
		fs, env := newCrashableEnv(seed, simfs.Options{})
		dir := fmt.Sprintf("/b%d", seed)
		l, _, err := Open(env, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		all := atEpoch(newEntryGen(seed, 200).Entries(1, 30), 1)
		must(t, l.Append(all))
		must(t, l.Close())
		fs.SetFaults(simfs.Faults{BitRotRatio: 1}, &splitmix{state: seed})
		l, rec, err := Open(env, dir, opts)
		fs.SetFaults(simfs.Faults{}, nil)
		if err != nil {
			refused++
			continue
		}
		l.Close()
		loadStoredIn(t, fs, dir, rec.Entries)
		sameEntries(t, rec.Entries, all[:len(rec.Entries)])
	}
	if refused == 0 {
		t.Fatal("bit rot in every read never made recovery refuse")
	}
}

func TestBitRotCaughtByCRC(t *testing.T) {
	simOnly(t)
	failsUnder(t, mutant.SkipCRC, checkBitRotCaught)
}
