package storage

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/fibril-go/fibril/io/logstore/osfs"
	"github.com/fibril-go/fibril/storage/fsys"
)

// The suite runs over every backend: the production one (OS files and
// tidwall/wal, package osfs) and the simulated one (storage/simfs and
// storage/simwal). FIBRIL_STORAGE_BACKEND picks one; unset, TestMain runs
// the suite over the OS, then runs this test binary again, with the same
// flags, over the simulation.

const backendEnv = "FIBRIL_STORAGE_BACKEND"

var (
	testEnv Env
	testFS  fsys.FS
	// testBackend names the backend in force ("os" or "sim").
	testBackend string
)

func useBackend(name string) {
	testBackend = name
	switch name {
	case "os":
		testEnv = Env{FS: osfs.FS{}, OpenSegmentLog: osfs.OpenTidwall, NewRunner: osfs.NewRunner}
	case "sim":
		testEnv = newSimEnv()
	default:
		panic("unknown storage test backend " + name)
	}
	testFS = testEnv.FS
}

func TestMain(m *testing.M) {
	name := os.Getenv(backendEnv)
	if name != "" {
		useBackend(name)
		os.Exit(m.Run())
	}
	useBackend("os")
	if code := m.Run(); code != 0 || !simBackendReady {
		os.Exit(code)
	}
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), backendEnv+"=sim")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	fmt.Println("storage: the same suite over simfs and simwal")
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		fmt.Println(err)
		os.Exit(1)
	}
	os.Exit(0)
}

// tfs is the test's shim for the os calls the suite used to make: each goes
// through testFS, so that one test body runs over both backends.
var tfs testFiles

type testFiles struct{}

func (testFiles) ReadFile(path string) ([]byte, error) { return readFile(testFS, path) }

func (testFiles) WriteFile(path string, data []byte, _ os.FileMode) error {
	f, err := testFS.Create(path, false)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (testFiles) Truncate(path string, sizeBytes int64) error {
	f, err := testFS.OpenAppend(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(sizeBytes); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (testFiles) Remove(path string) error { return testFS.Remove(path) }

func (testFiles) Rename(oldPath, newPath string) error { return testFS.Rename(oldPath, newPath) }

func (testFiles) ReadDir(dir string) ([]fsys.DirEntry, error) { return testFS.ReadDir(dir) }

// RemoveAll removes every file of a flat directory.
func (testFiles) RemoveAll(dir string) error {
	entries, err := testFS.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := testFS.Remove(dir + "/" + e.Name); err != nil {
			return err
		}
	}
	return nil
}

// Stat reports whether path exists (an error wrapping fsys.ErrNotExist
// when not).
func (testFiles) Stat(path string) (bool, error) {
	f, err := testFS.OpenRead(path)
	if err != nil {
		return false, err
	}
	return true, f.Close()
}

// TestBackendInUse: under "sim" nothing reaches the OS's files; under "os"
// the log is on disk.
func TestBackendInUse(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, DefaultOptions())
	appendSync(t, l, publishEntries(1, 3, 10))
	must(t, l.Close())
	onDisk, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if (testBackend == "sim") != (len(onDisk) == 0) {
		t.Fatalf("backend %s: %d files on the OS", testBackend, len(onDisk))
	}
	t.Logf("backend %s", testBackend)
}
