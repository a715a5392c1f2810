package storage

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/fibril-go/fibril/mutant"
)

// Each broken variant of this package (package mutant) must make some test
// here fail: a check that passes whatever the code does proves nothing.
// failsUnder runs a check once as it is (it must pass), then again with
// the mutant in force, with a recorder in place of the test: it must fail.

// failRecorder stands in for a testing.TB and notes failures instead of
// failing the test; Fatal ends the check's goroutine as testing does.
type failRecorder struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	first  string
}

func (r *failRecorder) note(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.failed {
		r.first = msg
	}
	r.failed = true
}
func (r *failRecorder) Helper()                           {}
func (r *failRecorder) Log(args ...any)                   {}
func (r *failRecorder) Logf(format string, args ...any)   {}
func (r *failRecorder) Error(args ...any)                 { r.note(fmt.Sprint(args...)) }
func (r *failRecorder) Errorf(format string, args ...any) { r.note(fmt.Sprintf(format, args...)) }
func (r *failRecorder) Fail()                             { r.note("Fail") }
func (r *failRecorder) FailNow()                          { r.note("FailNow"); runtime.Goexit() }
func (r *failRecorder) Fatal(args ...any)                 { r.note(fmt.Sprint(args...)); runtime.Goexit() }
func (r *failRecorder) Fatalf(format string, args ...any) {
	r.note(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (r *failRecorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// failsUnder passes check as is, then requires it to fail under name.
func failsUnder(t *testing.T, name string, check func(testing.TB)) {
	t.Helper()
	check(t)
	if t.Failed() {
		return
	}
	mutant.Active = name
	defer func() { mutant.Active = "" }()
	rec := &failRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			// An assertion of the package firing is a failure too.
			if p := recover(); p != nil {
				rec.note(fmt.Sprint("panic: ", p))
			}
		}()
		check(rec)
	}()
	<-done
	if !rec.Failed() {
		t.Fatalf("mutant %s: the check still passes", name)
	}
	t.Logf("mutant %s caught: %s", name, rec.first)
}

func TestMutantDurableOnSubmit(t *testing.T) {
	failsUnder(t, mutant.DurableOnSubmit, checkReportsFollowFsync)
}

func TestMutantNoBlobDatasync(t *testing.T) {
	failsUnder(t, mutant.NoBlobDatasync, checkBlobPayloadsSynced)
}

func TestMutantNoDirSync(t *testing.T) {
	failsUnder(t, mutant.NoDirSync, checkNewFilesDirSynced)
}

func TestMutantSkipCRC(t *testing.T) {
	failsUnder(t, mutant.SkipCRC, checkFlippedPayloadByteRefused)
}

func TestMutantAcceptTornTail(t *testing.T) {
	failsUnder(t, mutant.AcceptTornTail, checkTornTailFlippedLastRecord)
}

// checkReportsFollowFsync: the Committer reports an index durable only once
// the log's fsync covers it (onDurable runs on the writer, which owns the
// log, so reading SyncedIndex there is safe).
func checkReportsFollowFsync(t testing.TB) {
	l, _ := openLog(t, t.TempDir(), testOptions(64<<10, CorruptionRefuse))
	defer l.Close()
	var mu sync.Mutex
	var bad []string
	c := newPlanCommitter(l, func(upTo uint64, _ []StoredPayload, err error) {
		if err == nil && l.SyncedIndex() < upTo {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("reported %d with only %d fsynced", upTo, l.SyncedIndex()))
			mu.Unlock()
		}
	})
	for i := uint64(1); i <= 50; i += 5 {
		if err := c.Submit(publishEntries(i, 5, 300)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("%d early reports, first: %s", len(bad), bad[0])
	}
}

// checkBlobPayloadsSynced: every Sync after payloads were written
// fdatasyncs the blob file.
func checkBlobPayloadsSynced(t testing.TB) {
	l, _ := openLog(t, t.TempDir(), testOptions(64<<10, CorruptionRefuse))
	defer l.Close()
	for i := uint64(1); i <= 20; i += 4 {
		before := l.Stats().BlobSyncs
		appendSync(t, l, publishEntries(i, 4, 1000))
		if l.Stats().BlobSyncs != before+1 {
			t.Fatalf("round at %d: %d blob fdatasyncs, want 1", i, l.Stats().BlobSyncs-before)
		}
	}
}

// checkNewFilesDirSynced: a Sync after a new segment or blob file appeared
// fsyncs the directory.
func checkNewFilesDirSynced(t testing.TB) {
	l, _ := openLog(t, t.TempDir(), testOptions(2<<10, CorruptionRefuse))
	defer l.Close()
	for i := uint64(1); i <= 100; i += 10 {
		before := l.Stats()
		appendSync(t, l, publishEntries(i, 10, 100))
		after := l.Stats()
		created := after.SegmentRolls + after.BlobFilesCreated - before.SegmentRolls - before.BlobFilesCreated
		if created > 0 && after.DirSyncs != before.DirSyncs+1 {
			t.Fatalf("round at %d started %d files and fsynced the directory %d times", i, created, after.DirSyncs-before.DirSyncs)
		}
	}
	if l.Stats().SegmentRolls == 0 {
		t.Fatal("no segment rolled: the check checked nothing")
	}
}

// checkFlippedPayloadByteRefused: one flipped byte inside an inline payload
// in the middle of the log (it still decodes) is corruption, refused.
func checkFlippedPayloadByteRefused(t testing.TB) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	l, _ := openLog(t, dir, opts)
	// 200 bytes: inline (below BlobPayloadBytesMin), most of each record.
	appendSync(t, l, publishEntries(1, 10, 200))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg := segmentsOf(t, dir)[0]
	starts := frameStarts(t, filepath.Join(dir, seg.name))
	flipByte(t, filepath.Join(dir, seg.name), (starts[4]+starts[5])/2)
	l2, rec, err := Open(testEnv, dir, opts)
	if err == nil {
		l2.Close()
		t.Fatalf("opened with %d entries; want the flipped record refused", len(rec.Entries))
	}
	if ce := asCorruption(t, err); ce.Cut.Index != 5 || ce.Cut.Reason != CutChecksum {
		t.Fatalf("reported %+v", ce.Cut)
	}
}
