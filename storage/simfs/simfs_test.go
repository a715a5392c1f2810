package simfs

import (
	"bytes"
	"errors"
	"testing"

	"github.com/fibril-go/fibril/storage/fsys"
)

// splitmix is a seeded Rand for the tests.
type splitmix struct{ state uint64 }

func (s *splitmix) Uint64() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, fs *FS, p string) ([]byte, bool) {
	t.Helper()
	f, err := fs.OpenRead(p)
	if errors.Is(err, fsys.ErrNotExist) {
		return nil, false
	}
	must(t, err)
	defer f.Close()
	size, err := f.SizeBytes()
	must(t, err)
	b := make([]byte, size)
	if size > 0 {
		if _, err := f.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	return b, true
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// durableFile makes /d/f holding data, fsynced with its name.
func durableFile(t *testing.T, fs *FS, data []byte) fsys.File {
	t.Helper()
	must(t, fs.MkdirAll("/d"))
	must(t, fs.SyncDir("/"))
	f, err := fs.Create("/d/f", true)
	must(t, err)
	_, err = f.Write(data)
	must(t, err)
	must(t, f.Sync())
	must(t, fs.SyncDir("/d"))
	return f
}

// TestCrashKeepsThePageCache: a process crash loses nothing, even unsynced
// bytes and names, but ends the dead process's handles.
func TestCrashKeepsThePageCache(t *testing.T) {
	fs := New(Options{})
	must(t, fs.MkdirAll("/d"))
	f, err := fs.Create("/d/f", true)
	must(t, err)
	_, err = f.Write([]byte("never synced"))
	must(t, err)
	fs.Crash()
	if got, ok := readAll(t, fs, "/d/f"); !ok || string(got) != "never synced" {
		t.Fatalf("after a crash: %q %v", got, ok)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("a dead process's handle wrote: %v", err)
	}
	if fs.Counters().Crashes != 1 {
		t.Fatalf("counters %+v", fs.Counters())
	}
}

// TestPowerLossTearsAtSectorBoundaries: over many seeds, an unsynced
// appended tail is dropped, or survives up to a 512 B or 4 KiB boundary
// (or whole), possibly followed by one sector of zeros or garbage; the
// durable bytes always survive; every kind of outcome happens.
func TestPowerLossTearsAtSectorBoundaries(t *testing.T) {
	synced := pattern(1000, 1)
	tail := pattern(9000, 2)
	whole := append(append([]byte(nil), synced...), tail...)
	outcomes := map[string]int{}
	for seed := uint64(1); seed <= 400; seed++ {
		fs := New(Options{})
		fs.SetFaults(Faults{}, &splitmix{state: seed})
		f := durableFile(t, fs, synced)
		_, err := f.Write(tail)
		must(t, err)
		fs.PowerLoss()
		got, ok := readAll(t, fs, "/d/f")
		if !ok || !bytes.Equal(got[:len(synced)], synced) {
			t.Fatalf("seed %d: durable bytes lost (%d bytes, %v)", seed, len(got), ok)
		}
		if len(got) == len(synced) {
			outcomes["dropped"]++
			continue
		}
		// The intact part ends at a boundary (or at the end).
		intact := len(synced)
		for intact < len(got) && got[intact] == whole[intact] {
			intact++
		}
		if intact == len(whole) {
			outcomes["whole"]++
			continue
		}
		if intact%sectorSmallBytes != 0 && intact != len(got) {
			// A garbage byte may equal the original by chance: find the
			// boundary the damage starts at instead.
			intact -= intact % sectorSmallBytes
		}
		if intact%sectorSmallBytes != 0 || intact < len(synced) {
			t.Fatalf("seed %d: the surviving tail ends at %d, not at a sector boundary", seed, intact)
		}
		junk := got[intact:]
		switch {
		case len(junk) == 0:
			outcomes["prefix"]++
		case len(junk) > sectorLargeBytes:
			t.Fatalf("seed %d: %d bytes of damage after %d", seed, len(junk), intact)
		case bytes.Equal(junk, make([]byte, len(junk))):
			outcomes["zeros"]++
		default:
			outcomes["garbage"]++
		}
	}
	for _, kind := range []string{"dropped", "whole", "prefix", "zeros", "garbage"} {
		if outcomes[kind] == 0 {
			t.Fatalf("no %s outcome in 400 seeds: %v", kind, outcomes)
		}
	}
	t.Logf("outcomes %v", outcomes)
}

// TestFsyncedFileWithoutDirSyncMayVanish: a file created and fsynced whose
// directory was never fsynced is gone after some power losses; when it
// survives its synced bytes are all there; after a dir fsync it always
// survives.
func TestFsyncedFileWithoutDirSyncMayVanish(t *testing.T) {
	vanished, kept := 0, 0
	for seed := uint64(1); seed <= 100; seed++ {
		fs := New(Options{})
		fs.SetFaults(Faults{}, &splitmix{state: seed})
		must(t, fs.MkdirAll("/d"))
		must(t, fs.SyncDir("/"))
		must(t, fs.SyncDir("/d"))
		f, err := fs.Create("/d/new", true)
		must(t, err)
		_, err = f.Write([]byte("synced data"))
		must(t, err)
		must(t, f.Sync())
		fs.PowerLoss()
		got, ok := readAll(t, fs, "/d/new")
		switch {
		case !ok:
			vanished++
		case string(got) == "synced data":
			kept++
		default:
			t.Fatalf("seed %d: survived as %q", seed, got)
		}
	}
	if vanished == 0 || kept == 0 {
		t.Fatalf("vanished %d, kept %d: want both", vanished, kept)
	}
	fs := New(Options{})
	fs.SetFaults(Faults{}, &splitmix{state: 7})
	durableFile(t, fs, []byte("named durably"))
	for range 20 {
		fs.PowerLoss()
		if got, ok := readAll(t, fs, "/d/f"); !ok || string(got) != "named durably" {
			t.Fatalf("a durable file changed: %q %v", got, ok)
		}
	}
}

// TestRenameWithoutDirSyncMayBeUndone: a rename not followed by a dir
// fsync survives or is undone as a whole: the file is under exactly one of
// its two names.
func TestRenameWithoutDirSyncMayBeUndone(t *testing.T) {
	undone, done := 0, 0
	for seed := uint64(1); seed <= 100; seed++ {
		fs := New(Options{DirOpsIndependent: seed%2 == 0})
		fs.SetFaults(Faults{}, &splitmix{state: seed})
		durableFile(t, fs, []byte("content"))
		must(t, fs.Rename("/d/f", "/d/g"))
		fs.PowerLoss()
		_, atOld := readAll(t, fs, "/d/f")
		got, atNew := readAll(t, fs, "/d/g")
		switch {
		case atOld && !atNew:
			undone++
		case atNew && !atOld && string(got) == "content":
			done++
		default:
			t.Fatalf("seed %d: at old name %v, at new %v", seed, atOld, atNew)
		}
	}
	if undone == 0 || done == 0 {
		t.Fatalf("undone %d, done %d: want both", undone, done)
	}
}

// TestDirOpsSurviveInOrder: by default a power loss keeps a prefix of a
// directory's unsynced operations: a later one never survives without an
// earlier one.
func TestDirOpsSurviveInOrder(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		fs := New(Options{})
		fs.SetFaults(Faults{}, &splitmix{state: seed})
		must(t, fs.MkdirAll("/d"))
		must(t, fs.SyncDir("/"))
		must(t, fs.SyncDir("/d"))
		names := []string{"/d/a", "/d/b", "/d/c", "/d/e"}
		for _, n := range names {
			f, err := fs.Create(n, true)
			must(t, err)
			must(t, f.Close())
		}
		fs.PowerLoss()
		gap := false
		for _, n := range names {
			_, ok := readAll(t, fs, n)
			if ok && gap {
				t.Fatalf("seed %d: %s survived after an earlier create was lost", seed, n)
			}
			gap = gap || !ok
		}
	}
}

// TestFsyncErrors: a failed fsync returns an error and loses the dirty
// data: dropped at once, or (pages kept) still readable, a later fsync
// succeeding without it, and zeros on the disk after a power loss.
func TestFsyncErrors(t *testing.T) {
	fs := New(Options{})
	rng := &splitmix{state: 3}
	fs.SetFaults(Faults{}, rng)
	f := durableFile(t, fs, []byte("durable|"))
	_, err := f.Write([]byte("dirty"))
	must(t, err)
	fs.SetFaults(Faults{FsyncErrorRatio: 1}, rng)
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("fsync: %v", err)
	}
	if got, _ := readAll(t, fs, "/d/f"); string(got) != "durable|" {
		t.Fatalf("dropped pages still read: %q", got)
	}

	fs.SetFaults(Faults{}, rng)
	_, err = f.Write([]byte("kept"))
	must(t, err)
	fs.SetFaults(Faults{FsyncErrorRatio: 1, FsyncErrorKeepsPagesRatio: 1}, rng)
	if err := f.Datasync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("fdatasync: %v", err)
	}
	if got, _ := readAll(t, fs, "/d/f"); string(got) != "durable|kept" {
		t.Fatalf("kept pages do not read: %q", got)
	}
	fs.SetFaults(Faults{}, rng)
	must(t, f.Sync()) // succeeds: nothing is dirty any more
	fs.PowerLoss()
	if got, _ := readAll(t, fs, "/d/f"); string(got) != "durable|\x00\x00\x00\x00" {
		t.Fatalf("after the power loss: %q", got)
	}
	if c := fs.Counters(); c.FsyncErrors != 2 || c.FsyncErrorsPagesKept != 1 {
		t.Fatalf("counters %+v", c)
	}
}

// TestBitRotFlipsOneBitOfARead: a read returns exactly one flipped bit;
// the stored bytes stay as they were.
func TestBitRotFlipsOneBitOfARead(t *testing.T) {
	fs := New(Options{})
	rng := &splitmix{state: 5}
	data := pattern(4096, 9)
	durableFile(t, fs, data)
	fs.SetFaults(Faults{BitRotRatio: 1}, rng)
	got, _ := readAll(t, fs, "/d/f")
	flipped := 0
	for i := range got {
		for x := got[i] ^ data[i]; x != 0; x &= x - 1 {
			flipped++
		}
	}
	if flipped != 1 {
		t.Fatalf("%d bits flipped", flipped)
	}
	fs.SetFaults(Faults{}, rng)
	if again, _ := readAll(t, fs, "/d/f"); !bytes.Equal(again, data) {
		t.Fatal("bit rot changed the stored bytes")
	}
	if fs.Counters().BitRots != 1 {
		t.Fatalf("counters %+v", fs.Counters())
	}
}

// TestPowerLossIsDeterministic: the same seed and operations give the same
// disk.
func TestPowerLossIsDeterministic(t *testing.T) {
	run := func() []byte {
		fs := New(Options{})
		fs.SetFaults(Faults{}, &splitmix{state: 11})
		must(t, fs.MkdirAll("/d"))
		var all []byte
		for i := range 20 {
			f, err := fs.Create("/d/"+string(rune('a'+i)), true)
			must(t, err)
			_, err = f.Write(pattern(700*i, byte(i)))
			must(t, err)
			if i%3 == 0 {
				must(t, f.Sync())
			}
		}
		fs.PowerLoss()
		entries, err := fs.ReadDir("/d")
		if errors.Is(err, fsys.ErrNotExist) {
			return nil
		}
		must(t, err)
		for _, e := range entries {
			b, _ := readAll(t, fs, "/d/"+e.Name)
			all = append(append(all, e.Name...), b...)
		}
		return all
	}
	if !bytes.Equal(run(), run()) {
		t.Fatal("two runs with one seed differ")
	}
}

// TestStopAtSync: the process stops at the chosen fsync, before it takes
// effect; with a power loss, what that fsync would have made durable is
// not.
func TestStopAtSync(t *testing.T) {
	fs := New(Options{})
	fs.SetFaults(Faults{}, &splitmix{state: 1})
	f := durableFile(t, fs, []byte("a"))
	fs.StopAtSync(2, true)
	_, err := f.Write([]byte("b"))
	must(t, err)
	must(t, f.Sync()) // the first: it happens
	_, err = f.Write([]byte("c"))
	must(t, err)
	if err := f.Sync(); !errors.Is(err, ErrCrashed) {
		t.Fatalf("the second fsync: %v", err)
	}
	if got, _ := readAll(t, fs, "/d/f"); string(got) != "ab" && string(got) != "abc" {
		t.Fatalf("after the power loss: %q", got)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("a dead handle wrote: %v", err)
	}
	fs.StopAtSync(1, false)
	if err := fs.SyncDir("/d"); !errors.Is(err, ErrCrashed) || fs.Counters().Crashes != 1 {
		t.Fatalf("stop at a dir fsync: %v, %+v", err, fs.Counters())
	}
}
