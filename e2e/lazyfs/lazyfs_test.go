package lazyfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Each rule of the package comment, through a real mount and real system
// calls. The power-loss rules hold for every seed, and the choices they
// leave open must each be seen: every test runs its scenario through
// lossRounds power losses and counts the outcomes.

const lossRounds = 24

// requireFUSE skips when FUSE cannot work here, except in CI (CI=true),
// where it fails loudly: the power-loss tests must not vanish silently.
func requireFUSE(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("FUSE is required in CI: %v", err)
		}
		t.Skipf("FUSE unavailable (set CI=true to make this a failure): %v", err)
	}
}

func seedOf(t testing.TB) uint64 {
	if v, err := strconv.ParseUint(os.Getenv("LAZYFS_SEED"), 10, 64); err == nil {
		return v
	}
	return uint64(time.Now().UnixNano())
}

// mountT mounts a fresh lazy filesystem; a failing test prints its seed.
func mountT(t *testing.T) *FS {
	t.Helper()
	requireFUSE(t)
	base := t.TempDir()
	mnt, backing := filepath.Join(base, "mnt"), filepath.Join(base, "disk")
	for _, d := range []string{mnt, backing} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	seed := seedOf(t)
	f, err := Mount(mnt, backing, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("lazyfs seed %d (replay: LAZYFS_SEED=%d go test ./e2e/lazyfs -run '%s')", seed, seed, t.Name())
		}
		if f.server != nil {
			if err := f.unmount(); err != nil {
				t.Error(err)
			}
		}
	})
	return f
}

func (f *FS) path(name string) string { return filepath.Join(f.mountpoint, name) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, path string, data []byte, sync bool) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	_, err = fh.Write(data)
	must(t, err)
	if sync {
		must(t, fh.Sync())
	}
	must(t, fh.Close())
}

func syncDir(t testing.TB, path string) {
	t.Helper()
	d, err := os.Open(path)
	must(t, err)
	must(t, d.Sync())
	must(t, d.Close())
}

// lose pulls the plug and returns what it chose.
func lose(t *testing.T, f *FS) LossReport {
	t.Helper()
	r, err := f.PowerLoss(nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// reset empties the filesystem durably between rounds.
func reset(t *testing.T, f *FS) {
	t.Helper()
	entries, err := os.ReadDir(f.mountpoint)
	must(t, err)
	for _, e := range entries {
		must(t, os.RemoveAll(f.path(e.Name())))
	}
	f.SyncAll()
}

func readOrNil(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	must(t, err)
	return data
}

func pattern(n int, salt byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + salt | 1 // never zero, so a torn zero sector shows
	}
	return b
}

func TestChangesAreVisibleAtOnce(t *testing.T) {
	f := mountT(t)
	must(t, os.Mkdir(f.path("d"), 0o755))
	writeFile(t, f.path("d/a"), []byte("hello"), false)
	if got := readOrNil(t, f.path("d/a")); string(got) != "hello" {
		t.Fatalf("read %q after an unsynced write", got)
	}
	must(t, os.Truncate(f.path("d/a"), 2))
	if got := readOrNil(t, f.path("d/a")); string(got) != "he" {
		t.Fatalf("read %q after an unsynced truncate", got)
	}
	must(t, os.Rename(f.path("d/a"), f.path("b")))
	if readOrNil(t, f.path("d/a")) != nil || string(readOrNil(t, f.path("b"))) != "he" {
		t.Fatal("an unsynced rename is not visible")
	}
	must(t, os.Remove(f.path("b")))
	if readOrNil(t, f.path("b")) != nil {
		t.Fatal("an unsynced unlink is not visible")
	}
	entries, err := os.ReadDir(f.path("d"))
	must(t, err)
	if len(entries) != 0 {
		t.Fatalf("d lists %v after its only file moved out", entries)
	}
}

func TestFsyncedFileInSyncedDirectorySurvives(t *testing.T) {
	f := mountT(t)
	for round := 0; round < lossRounds; round++ {
		data := pattern(10_000+round*333, byte(round))
		writeFile(t, f.path("f"), data, true)
		syncDir(t, f.mountpoint)
		lose(t, f)
		if got := readOrNil(t, f.path("f")); !bytes.Equal(got, data) {
			t.Fatalf("round %d: fsynced file in an fsynced directory came back with %d bytes, want %d", round, len(got), len(data))
		}
		reset(t, f)
	}
}

func TestUnsyncedWritesAreDroppedOrTornAtSectors(t *testing.T) {
	f := mountT(t)
	fates := map[string]int{}
	for round := 0; round < lossRounds*2; round++ {
		durable := pattern(1000, 3)
		writeFile(t, f.path("log"), durable, true)
		syncDir(t, f.mountpoint)
		tail := pattern(20_000, 5)
		writeFile(t, f.path("log"), tail, false)
		lose(t, f)
		got := readOrNil(t, f.path("log"))
		fates[classifyTail(t, got, durable, tail)]++
		reset(t, f)
	}
	for _, fate := range []string{"dropped", "clean", "zeros", "garbage"} {
		if fates[fate] == 0 {
			t.Errorf("no power loss left a %s tail in %d rounds: %v", fate, lossRounds*2, fates)
		}
	}
	t.Logf("tail fates: %v", fates)
}

// classifyTail checks a file after a power loss against the rule: its
// durable bytes, then a prefix of the unsynced tail ending at the durable
// end or a sector boundary, then at most one torn sector (zeros or garbage)
// ending at the next boundary of that sector size or at the written end.
func classifyTail(t *testing.T, got, durable, tail []byte) string {
	t.Helper()
	written := append(append([]byte(nil), durable...), tail...)
	if len(got) < len(durable) || !bytes.Equal(got[:len(durable)], durable) {
		t.Fatalf("durable bytes damaged: %d bytes back", len(got))
	}
	if len(got) > len(written) {
		t.Fatalf("%d bytes back, more than the %d written", len(got), len(written))
	}
	if len(got) == len(durable) {
		return "dropped"
	}
	same := len(durable)
	for same < len(got) && got[same] == written[same] {
		same++
	}
	if same == len(got) {
		if same%sectorSmallBytes != 0 && same != len(written) {
			t.Fatalf("clean tail cut at %d, not a sector boundary", same)
		}
		return "clean"
	}
	// A torn sector starts at the cut: the cut is the durable end or a
	// sector boundary; matching bytes inside garbage only move same.
	cut := same
	for cut > len(durable) && cut%sectorSmallBytes != 0 {
		cut--
	}
	torn := got[cut:]
	if len(torn) > sectorLargeBytes {
		t.Fatalf("torn part of %d bytes from %d: more than one sector", len(torn), cut)
	}
	if bytes.Count(torn, []byte{0}) == len(torn) {
		return "zeros"
	}
	return "garbage"
}

func TestFsyncedFileWithoutDirectoryFsyncMayVanish(t *testing.T) {
	f := mountT(t)
	kept, vanished := 0, 0
	for round := 0; round < lossRounds; round++ {
		data := pattern(5000, byte(round))
		writeFile(t, f.path("new"), data, true) // the file, not its name
		lose(t, f)
		switch got := readOrNil(t, f.path("new")); {
		case got == nil:
			vanished++
		case bytes.Equal(got, data):
			kept++
		default:
			t.Fatalf("round %d: an fsynced file came back with %d bytes of %d", round, len(got), len(data))
		}
		reset(t, f)
	}
	if kept == 0 || vanished == 0 {
		t.Fatalf("over %d power losses: kept %d, vanished %d; both must happen", lossRounds, kept, vanished)
	}
}

func TestRenameWithoutDirectoryFsyncMayBeUndone(t *testing.T) {
	f := mountT(t)
	undone, done := 0, 0
	for round := 0; round < lossRounds; round++ {
		old, fresh := []byte("old contents"), []byte("new contents")
		writeFile(t, f.path("config"), old, true)
		syncDir(t, f.mountpoint)
		writeFile(t, f.path("config.tmp"), fresh, true)
		must(t, os.Rename(f.path("config.tmp"), f.path("config")))
		lose(t, f)
		switch got := readOrNil(t, f.path("config")); {
		case bytes.Equal(got, old):
			undone++
		case bytes.Equal(got, fresh):
			done++
			if readOrNil(t, f.path("config.tmp")) != nil {
				t.Fatalf("round %d: the rename happened but its source name is still there", round)
			}
		default:
			t.Fatalf("round %d: the rename target holds %q: neither the old nor the new file", round, got)
		}
		reset(t, f)
	}
	if undone == 0 || done == 0 {
		t.Fatalf("over %d power losses: rename undone %d, kept %d; both must happen", lossRounds, undone, done)
	}
	// After a directory fsync the rename is durable.
	for round := 0; round < lossRounds/4; round++ {
		writeFile(t, f.path("config"), []byte("old"), true)
		syncDir(t, f.mountpoint)
		writeFile(t, f.path("config.tmp"), []byte("new"), true)
		must(t, os.Rename(f.path("config.tmp"), f.path("config")))
		syncDir(t, f.mountpoint)
		lose(t, f)
		if got := readOrNil(t, f.path("config")); string(got) != "new" || readOrNil(t, f.path("config.tmp")) != nil {
			t.Fatalf("round %d: a rename followed by a directory fsync was undone (config %q)", round, got)
		}
		reset(t, f)
	}
}

func TestUnlinkWithoutDirectoryFsyncMayBeUndone(t *testing.T) {
	f := mountT(t)
	back, gone := 0, 0
	for round := 0; round < lossRounds; round++ {
		writeFile(t, f.path("victim"), []byte("data"), true)
		syncDir(t, f.mountpoint)
		must(t, os.Remove(f.path("victim")))
		lose(t, f)
		if got := readOrNil(t, f.path("victim")); got == nil {
			gone++
		} else if string(got) == "data" {
			back++
		} else {
			t.Fatalf("round %d: an unlinked file came back as %q", round, got)
		}
		reset(t, f)
	}
	if back == 0 || gone == 0 {
		t.Fatalf("over %d power losses: unlink undone %d, kept %d; both must happen", lossRounds, back, gone)
	}
	for round := 0; round < lossRounds/4; round++ {
		writeFile(t, f.path("victim"), []byte("data"), true)
		syncDir(t, f.mountpoint)
		must(t, os.Remove(f.path("victim")))
		syncDir(t, f.mountpoint)
		lose(t, f)
		if readOrNil(t, f.path("victim")) != nil {
			t.Fatalf("round %d: an unlink followed by a directory fsync was undone", round)
		}
		reset(t, f)
	}
}

func TestNewDirectoryNeedsItsParentFsynced(t *testing.T) {
	f := mountT(t)
	kept, vanished := 0, 0
	for round := 0; round < lossRounds; round++ {
		must(t, os.Mkdir(f.path("queue"), 0o755))
		writeFile(t, f.path("queue/seg"), []byte("entries"), true)
		syncDir(t, f.path("queue")) // the file's entry, not the directory's
		lose(t, f)
		switch got := readOrNil(t, f.path("queue/seg")); {
		case got == nil:
			vanished++
		case string(got) == "entries":
			kept++
		default:
			t.Fatalf("round %d: queue/seg holds %q", round, got)
		}
		reset(t, f)
	}
	if kept == 0 || vanished == 0 {
		t.Fatalf("over %d power losses: kept %d, vanished %d; both must happen", lossRounds, kept, vanished)
	}
	must(t, os.Mkdir(f.path("queue"), 0o755))
	writeFile(t, f.path("queue/seg"), []byte("entries"), true)
	syncDir(t, f.path("queue"))
	syncDir(t, f.mountpoint)
	lose(t, f)
	if got := readOrNil(t, f.path("queue/seg")); string(got) != "entries" {
		t.Fatalf("with every directory fsynced, queue/seg came back as %q", got)
	}
}

func TestUnsyncedTruncateIsUndone(t *testing.T) {
	f := mountT(t)
	data := pattern(4096, 9)
	writeFile(t, f.path("f"), data, true)
	syncDir(t, f.mountpoint)
	must(t, os.Truncate(f.path("f"), 100))
	lose(t, f)
	if got := readOrNil(t, f.path("f")); !bytes.Equal(got, data) {
		t.Fatalf("an unsynced truncate survived: %d bytes back, want %d", len(got), len(data))
	}
	fh, err := os.OpenFile(f.path("f"), os.O_RDWR, 0)
	must(t, err)
	must(t, fh.Truncate(100))
	must(t, fh.Sync())
	must(t, fh.Close())
	lose(t, f)
	if got := readOrNil(t, f.path("f")); !bytes.Equal(got, data[:100]) {
		t.Fatalf("an fsynced truncate was lost: %d bytes back, want 100", len(got))
	}
}

func TestOverwriteWithoutFsyncIsUndone(t *testing.T) {
	f := mountT(t)
	data := pattern(8192, 1)
	writeFile(t, f.path("f"), data, true)
	syncDir(t, f.mountpoint)
	fh, err := os.OpenFile(f.path("f"), os.O_RDWR, 0)
	must(t, err)
	_, err = fh.WriteAt([]byte("XXXX"), 10)
	must(t, err)
	must(t, fh.Close())
	lose(t, f)
	if got := readOrNil(t, f.path("f")); !bytes.Equal(got, data) {
		t.Fatal("an unsynced overwrite inside durable data survived")
	}
}

func TestSyncAllMakesEverythingDurable(t *testing.T) {
	f := mountT(t)
	for round := 0; round < lossRounds/4; round++ {
		must(t, os.MkdirAll(f.path("a/b"), 0o755))
		writeFile(t, f.path("a/b/c"), pattern(7000, 2), false)
		writeFile(t, f.path("top"), []byte("x"), false)
		must(t, os.Rename(f.path("top"), f.path("a/top")))
		f.SyncAll()
		lose(t, f)
		if got := readOrNil(t, f.path("a/b/c")); !bytes.Equal(got, pattern(7000, 2)) {
			t.Fatalf("round %d: after SyncAll a/b/c came back with %d bytes", round, len(got))
		}
		if string(readOrNil(t, f.path("a/top"))) != "x" || readOrNil(t, f.path("top")) != nil {
			t.Fatalf("round %d: after SyncAll the rename was undone", round)
		}
		reset(t, f)
	}
}

// TestSameSeedSameChoices: two filesystems with one seed, given the same
// operations, leave byte-identical disks.
func TestSameSeedSameChoices(t *testing.T) {
	requireFUSE(t)
	seed := seedOf(t)
	var disks [2]map[string]string
	for i := range disks {
		base := t.TempDir()
		mnt, backing := filepath.Join(base, "mnt"), filepath.Join(base, "disk")
		must(t, os.Mkdir(mnt, 0o755))
		must(t, os.Mkdir(backing, 0o755))
		f, err := Mount(mnt, backing, seed)
		must(t, err)
		for j := 0; j < 8; j++ {
			writeFile(t, f.path("f"+strconv.Itoa(j)), pattern(3000*j+17, byte(j)), j%2 == 0)
		}
		syncDir(t, mnt)
		for j := 0; j < 8; j++ {
			writeFile(t, f.path("f"+strconv.Itoa(j)), pattern(9000, byte(j)), false)
			writeFile(t, f.path("g"+strconv.Itoa(j)), pattern(100, byte(j)), true)
		}
		must(t, os.Rename(f.path("f1"), f.path("h")))
		lose(t, f)
		must(t, f.unmount())
		disks[i] = snapshotDir(t, backing)
	}
	if len(disks[0]) != len(disks[1]) {
		t.Fatalf("seed %d: %d files on one disk, %d on the other", seed, len(disks[0]), len(disks[1]))
	}
	for name, data := range disks[0] {
		if disks[1][name] != data {
			t.Fatalf("seed %d: %s differs between two runs of the same seed", seed, name)
		}
	}
}

func snapshotDir(t *testing.T, dir string) map[string]string {
	out := map[string]string{}
	must(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		out[path[len(dir):]] = string(data)
		return err
	}))
	return out
}

func TestDropUnsyncedOpsLosesEveryUnsyncedName(t *testing.T) {
	f := mountT(t)
	f.SetDropUnsyncedOps(true)
	must(t, os.Mkdir(f.path("synced"), 0o755))
	syncDir(t, f.mountpoint)
	for round := 0; round < lossRounds; round++ {
		data := pattern(3000, byte(round))
		writeFile(t, f.path("synced/kept"), data, true)
		syncDir(t, f.path("synced"))
		writeFile(t, f.path("synced/lost"), data, true) // the file, not its name
		lose(t, f)
		if got := readOrNil(t, f.path("synced/lost")); got != nil {
			t.Fatalf("round %d: a name whose directory was never fsynced survived a worst-case power loss", round)
		}
		if got := readOrNil(t, f.path("synced/kept")); !bytes.Equal(got, data) {
			t.Fatalf("round %d: a durable name came back with %d bytes of %d", round, len(got), len(data))
		}
		must(t, os.Remove(f.path("synced/kept")))
		syncDir(t, f.path("synced"))
	}
}
