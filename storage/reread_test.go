package storage

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fibril-go/fibril/storage/fsys"
	"github.com/fibril-go/fibril/storage/simfs"
)

// Recovery reads twice before it cuts: a read fault (bit rot on the read
// path) in the last record must not pass for a torn tail and cost a
// confirmed record (verifyCutReads).

// readRotFS flips one bit of the first ReadAt of file whose range covers
// byte flipAt (once), and counts the ReadAt calls on file. Under the sim
// backend the flip is simfs's own bit rot (Faults.BitRotRatio 1 for that
// one read, its Rand steered to a bit of byte flipAt); under the OS
// backend the wrapper flips the bit itself.
type readRotFS struct {
	fsys.FS
	file   string
	flipAt int64
	done   bool
	reads  int
}

func (fs *readRotFS) wrap(p string, f fsys.File, err error) (fsys.File, error) {
	if err != nil || filepath.Clean(p) != fs.file {
		return f, err
	}
	return &readRotFile{File: f, fs: fs}, nil
}

func (fs *readRotFS) OpenRead(p string) (fsys.File, error) {
	f, err := fs.FS.OpenRead(p)
	return fs.wrap(p, f, err)
}

func (fs *readRotFS) OpenAppend(p string) (fsys.File, error) {
	f, err := fs.FS.OpenAppend(p)
	return fs.wrap(p, f, err)
}

type readRotFile struct {
	fsys.File
	fs *readRotFS
}

// steeredRand returns its values in order: simfs draws one for the chance
// of bit rot, then one to pick the bit.
type steeredRand struct{ values []uint64 }

func (r *steeredRand) Uint64() uint64 {
	v := r.values[0]
	r.values = r.values[1:]
	return v
}

func (f *readRotFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.reads++
	rot := !f.fs.done && off <= f.fs.flipAt && f.fs.flipAt < off+int64(len(p))
	if !rot {
		return f.File.ReadAt(p, off)
	}
	f.fs.done = true
	bit := uint64(f.fs.flipAt-off)*8 + 5
	if testSimFS != nil {
		before := testSimFS.Counters().BitRots
		testSimFS.SetFaults(simfs.Faults{BitRotRatio: 1}, &steeredRand{values: []uint64{0, bit}})
		n, err := f.File.ReadAt(p, off)
		testSimFS.SetFaults(simfs.Faults{}, nil)
		if testSimFS.Counters().BitRots != before+1 {
			panic("simfs did not rot the read")
		}
		return n, err
	}
	n, err := f.File.ReadAt(p, off)
	if int64(n) > f.fs.flipAt-off {
		p[bit/8] ^= 1 << (bit % 8)
	}
	return n, err
}

// rotEnv is testEnv with reads of file going through a readRotFS.
func rotEnv(file string, flipAt int64) (Env, *readRotFS) {
	fs := &readRotFS{FS: testFS, file: filepath.Clean(file), flipAt: flipAt}
	env := testEnv
	env.FS = fs
	return env, fs
}

// dirBytes maps every file of dir to its bytes.
func dirBytes(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	entries, err := testFS.ReadDir(dir)
	must(t, err)
	out := make(map[string][]byte, len(entries))
	for _, e := range entries {
		b, err := tfs.ReadFile(filepath.Join(dir, e.Name))
		must(t, err)
		out[e.Name] = b
	}
	return out
}

func sameDir(t testing.TB, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d files, want %d", len(got), len(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Fatalf("file %s changed (%d bytes, was %d)", name, len(got[name]), len(b))
		}
	}
}

// TestReadRotInLastRecordIsNotCut: one read of the tail segment returns a
// flipped bit in the last record. Open fails with ErrUnstableRead (not
// ErrCorrupt) and changes no file; the next Open, with no fault, gives
// back every record. Under both corruption policies.
func TestReadRotInLastRecordIsNotCut(t *testing.T) {
	for _, policy := range []CorruptionPolicy{CorruptionRefuse, CorruptionTruncate} {
		dir := t.TempDir()
		opts := testOptions(4<<10, policy)
		all := writeLog(t, dir, opts, 40, 4)
		tail := tailWithRecords(t, dir)
		file := filepath.Join(dir, tail.name)
		starts := frameStarts(t, file)
		before := dirBytes(t, dir)
		env, rot := rotEnv(file, int64(starts[len(starts)-1]-3))
		_, _, err := Open(env, dir, opts)
		if !errors.Is(err, ErrUnstableRead) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("policy %v: open with a rotten read: %v, want ErrUnstableRead", policy, err)
		}
		if !rot.done {
			t.Fatal("the fault never fired")
		}
		t.Logf("policy %v: %v", policy, err)
		sameDir(t, dirBytes(t, dir), before)
		l, rec := openLog(t, dir, opts)
		sameEntries(t, rec.Entries, all)
		if rec.TruncatedTail {
			t.Fatalf("policy %v: second open cut %+v", policy, rec.Cut)
		}
		must(t, l.Close())
	}
}

// TestReadRotInLastPayloadIsNotCut: the read fault is in the blob payload
// of the last record (whose round is the last: a lost payload there would
// be torn). Open refuses to cut on it, and a second Open keeps every entry.
func TestReadRotInLastPayloadIsNotCut(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64<<10, CorruptionRefuse)
	l, _ := openLog(t, dir, opts)
	all := publishEntries(1, 4, 1000)
	appendSync(t, l, all)
	must(t, l.Close())
	listing, err := listDir(testFS, dir)
	must(t, err)
	if len(listing.blobs) != 1 {
		t.Fatalf("want one blob file, have %d", len(listing.blobs))
	}
	blob := listing.blobs[0]
	file := filepath.Join(dir, blobName(blob.id))
	before := dirBytes(t, dir)
	env, rot := rotEnv(file, blob.sizeBytes-10)
	_, _, err = Open(env, dir, opts)
	if !errors.Is(err, ErrUnstableRead) || !rot.done {
		t.Fatalf("open with a rotten payload read: %v (fault fired %v), want ErrUnstableRead", err, rot.done)
	}
	sameDir(t, dirBytes(t, dir), before)
	l, rec := openLog(t, dir, opts)
	sameEntries(t, rec.Entries, all)
	if rec.TruncatedTail {
		t.Fatalf("second open cut %+v", rec.Cut)
	}
	must(t, l.Close())
}

// TestStableTornTailStillCut: a last record damaged on disk reads the same
// twice: it is still a torn tail, cut, and the re-read happened.
func TestStableTornTailStillCut(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(4<<10, CorruptionRefuse)
	all := writeLog(t, dir, opts, 40, 4)
	tail := tailWithRecords(t, dir)
	file := filepath.Join(dir, tail.name)
	starts := frameStarts(t, file)
	flipByte(t, file, starts[len(starts)-1]-3)
	env, rot := rotEnv(file, -1) // counts reads, flips nothing
	l, rec, err := Open(env, dir, opts)
	must(t, err)
	defer l.Close()
	loadStored(t, dir, rec.Entries)
	sameEntries(t, rec.Entries, all[:39])
	if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Index != 40 || rec.Cut.Reason != CutChecksum {
		t.Fatalf("reported %+v", rec.Cut)
	}
	if rot.reads < 2 {
		t.Fatalf("%d reads of the tail segment, want a second one before the cut", rot.reads)
	}
}

// TestRecordLogReadRotInLastRecordIsNotCut: the same for the record log.
func TestRecordLogReadRotInLastRecordIsNotCut(t *testing.T) {
	dir := t.TempDir()
	rl, _ := openRecordLog(t, dir, smallRecordOptions())
	all := makeRecords(1, 30)
	must(t, rl.Append(all))
	must(t, rl.Close())
	tail := tailWithRecords(t, dir)
	file := filepath.Join(dir, tail.name)
	starts := frameStarts(t, file)
	before := dirBytes(t, dir)
	env, rot := rotEnv(file, int64(starts[len(starts)-1]-2))
	_, _, err := OpenRecordLog(env, dir, smallRecordOptions())
	if !errors.Is(err, ErrUnstableRead) || !rot.done {
		t.Fatalf("open with a rotten read: %v (fault fired %v), want ErrUnstableRead", err, rot.done)
	}
	sameDir(t, dirBytes(t, dir), before)
	rl, rec := openRecordLog(t, dir, smallRecordOptions())
	sameRecords(t, rec.Records, all)
	if rec.TruncatedTail {
		t.Fatalf("second open cut %+v", rec.Cut)
	}
	must(t, rl.Close())

	// A genuinely torn last record (stable) is still cut.
	flipByte(t, file, starts[len(starts)-1]-2)
	env, rot = rotEnv(file, -1)
	rl, rec, err = OpenRecordLog(env, dir, smallRecordOptions())
	must(t, err)
	defer rl.Close()
	if !rec.TruncatedTail || !rec.Cut.Torn || rec.Cut.Reason != CutChecksum || rot.reads < 2 {
		t.Fatalf("stable torn tail: %+v, %d reads", rec.Cut, rot.reads)
	}
	sameRecords(t, rec.Records, all[:29])
}
