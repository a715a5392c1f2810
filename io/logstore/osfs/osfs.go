// Package osfs holds the production adapters storage runs over: fsys.FS on
// the operating system's files (fdatasync via x/sys on Linux), the
// fsys.SegmentLog on tidwall/wal, and a fsys.Runner on goroutines. Each is
// a thin translation: no decision lives here, since the simulator runs
// storage over storage/simfs and storage/simwal instead and never runs
// this code (docs/storage.md lists it).
//
// Invariants:
//   - an os "not exist" or "exist" error also wraps fsys.ErrNotExist or
//     fsys.ErrExist, which is what storage checks;
//   - appending handles are O_APPEND, so Write appends after a Truncate;
//   - nothing here retries an fsync (see storage's doc).
package osfs

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"

	"github.com/fibril-go/fibril/storage/fsys"
)

const (
	dirPerm  = 0o750
	filePerm = 0o640
)

// FS is fsys.FS over the operating system's files.
type FS struct{}

var _ fsys.FS = FS{}

func wrap(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %w", fsys.ErrNotExist, err)
	case errors.Is(err, os.ErrExist):
		return fmt.Errorf("%w: %w", fsys.ErrExist, err)
	}
	return err
}

func (FS) OpenRead(path string) (fsys.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, wrap(err)
	}
	return file{f}, nil
}

func (FS) OpenAppend(path string) (fsys.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return nil, wrap(err)
	}
	return file{f}, nil
}

func (FS) Create(path string, exclusive bool) (fsys.File, error) {
	flags := os.O_CREATE | os.O_RDWR | os.O_APPEND
	if exclusive {
		flags |= os.O_EXCL
	} else {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, filePerm)
	if err != nil {
		return nil, wrap(err)
	}
	return file{f}, nil
}

// ReadDir lists dir with each file's size; a name removed while it lists
// (a background unlink) is left out.
func (FS) ReadDir(dir string) ([]fsys.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]fsys.DirEntry, 0, len(entries))
	for _, entry := range entries {
		info, err := entry.Info()
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, fsys.DirEntry{Name: entry.Name(), IsDir: entry.IsDir(), SizeBytes: info.Size()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (FS) Remove(path string) error { return wrap(os.Remove(path)) }

func (FS) Rename(oldPath, newPath string) error { return wrap(os.Rename(oldPath, newPath)) }

func (FS) MkdirAll(dir string) error { return wrap(os.MkdirAll(dir, dirPerm)) }

func (FS) SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return wrap(err)
	}
	syncErr := f.Sync()
	closeErr := f.Close()
	return errors.Join(syncErr, closeErr)
}

// file is fsys.File over an *os.File.
type file struct{ f *os.File }

func (f file) ReadAt(p []byte, offsetBytes int64) (int, error) { return f.f.ReadAt(p, offsetBytes) }
func (f file) Write(p []byte) (int, error)                     { return f.f.Write(p) }
func (f file) Truncate(sizeBytes int64) error                  { return f.f.Truncate(sizeBytes) }
func (f file) Sync() error                                     { return f.f.Sync() }
func (f file) Datasync() error                                 { return datasync(f.f) }
func (f file) Close() error                                    { return f.f.Close() }

func (f file) SizeBytes() (int64, error) {
	info, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

// Runner is fsys.Runner on goroutines: Both overlaps its two waits (one
// disk round trip instead of two) by handing the second to a helper
// goroutine, started on first use and kept until Wait, so that a round
// allocates nothing; Later unlinks in the background. Both and Wait are
// called from the one goroutine that uses the Log.
type Runner struct {
	work   chan func() error // to the helper; nil when it is not running
	result chan error

	later    sync.WaitGroup
	mu       sync.Mutex
	laterErr error
}

// NewRunner makes a Runner (storage.Env.NewRunner).
func NewRunner() fsys.Runner { return &Runner{} }

func (r *Runner) Both(first, second func() error) (error, error) {
	if r.work == nil {
		r.work, r.result = make(chan func() error), make(chan error)
		go helper(r.work, r.result)
	}
	r.work <- second
	firstErr := first()
	return firstErr, <-r.result
}

func helper(work <-chan func() error, result chan<- error) {
	for fn := range work {
		result <- fn()
	}
}

func (r *Runner) Later(work func() error) {
	r.later.Add(1)
	go func() {
		defer r.later.Done()
		if err := work(); err != nil {
			r.mu.Lock()
			if r.laterErr == nil {
				r.laterErr = err
			}
			r.mu.Unlock()
		}
	}()
}

// Wait waits for the background work and stops the helper (Both starts it
// again if needed).
func (r *Runner) Wait() error {
	r.later.Wait()
	if r.work != nil {
		close(r.work)
		r.work, r.result = nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.laterErr
	r.laterErr = nil
	return err
}
