// Package simfs is a deterministic in-memory filesystem (fsys.FS) with a
// page-cache model, for running storage in the simulator: no os, no
// goroutines, no clock; every choice comes from a seeded Rand.
//
// The model. Every file has volatile bytes (the page cache: what reads
// see) and durable bytes (what the disk holds); every directory has
// volatile entries and durable entries, plus the ordered list of its
// directory operations (create, unlink, rename, mkdir) since its last
// fsync. Invariants:
//   - what any call sees is the volatile view; only PowerLoss ever shows
//     the durable one;
//   - File.Sync and File.Datasync make that file's bytes durable, never its
//     name; FS.SyncDir makes the directory's entries durable, never the
//     bytes of the files they name;
//   - Crash (the process dies) loses nothing: the page cache survives. It
//     only ends every open handle, which fails from then on;
//   - PowerLoss drops everything not durable, with seeded damage: each
//     file's unsynced appended tail may survive in part, cut at a 512 B or
//     4 KiB boundary, its last sector possibly zeros or garbage; each
//     directory keeps a seeded prefix of its unsynced operations (as a
//     journaling filesystem commits them in order), or with
//     Options.DirOpsIndependent an independent seeded choice per operation;
//   - a failed fsync (Faults.FsyncErrorRatio) returns an error and, as on
//     Linux, the dirty data is gone: either dropped from the page cache at
//     once, or (Faults.FsyncErrorKeepsPagesRatio) still readable but marked
//     clean, so a later fsync succeeds without it and a power loss leaves
//     zeros in its place ("fsyncgate");
//   - bit rot (Faults.BitRotRatio) flips one bit of what a ReadAt returns,
//     not of the stored bytes;
//   - iteration over files and directories is in sorted order, so a seed
//     gives the same outcome every run.
package simfs

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/fibril-go/fibril/storage/fsys"
)

// Rand is the randomness simfs needs; the simulator's PRNG satisfies it.
type Rand interface{ Uint64() uint64 }

// Faults are the injected faults, each a probability per operation.
type Faults struct {
	// FsyncErrorRatio: each File.Sync, File.Datasync and FS.SyncDir fails.
	FsyncErrorRatio float64
	// FsyncErrorKeepsPagesRatio: the share of failed file fsyncs after
	// which the data stays readable but never reaches the disk (the rest
	// drop it from the page cache at once).
	FsyncErrorKeepsPagesRatio float64
	// BitRotRatio: each ReadAt returns one flipped bit.
	BitRotRatio float64
}

// Options are fixed for the life of an FS.
type Options struct {
	// DirOpsIndependent: at a power loss each unsynced directory operation
	// survives or not on its own seeded choice, instead of a seeded prefix
	// of them surviving in order. Harsher than ext4 or XFS, and allowed by
	// POSIX.
	DirOpsIndependent bool
}

// Counters count what happened, per kind (sweep figures, tests).
type Counters struct {
	Crashes, PowerLosses uint64
	// FsyncErrors counts failed fsyncs of files and directories; of them,
	// FsyncErrorsPagesKept left the data readable but not durable.
	FsyncErrors, FsyncErrorsPagesKept uint64
	BitRots                           uint64
	// At power losses: files whose unsynced tail survived in part (torn),
	// of them with a zeroed or garbage last sector; files that lost
	// unsynced bytes; directory operations kept and dropped.
	TornTails, TornZeros, TornGarbage uint64
	FilesLostBytes                    uint64
	DirOpsKept, DirOpsDropped         uint64
}

// Sector sizes a torn write is cut at.
const (
	sectorSmallBytes = 512
	sectorLargeBytes = 4096
)

// ErrCrashed is returned by a handle opened before a Crash or PowerLoss.
var ErrCrashed = errors.New("simfs: handle of a crashed process")

// ErrInjected is wrapped by every injected fsync error.
var ErrInjected = errors.New("simfs: injected I/O error")

// inode is one file.
type inode struct {
	data    []byte // volatile: the page cache
	durable []byte // on the disk; never shares memory with data
	// dirty says data differs from durable; dirtyFrom is the lowest
	// offset written or truncated since durable was last taken.
	dirty     bool
	dirtyFrom int
}

type dirOpKind uint8

const (
	opCreate dirOpKind = iota + 1
	opUnlink
	opRename
	opMkdir
)

// dirOp is one unsynced directory operation.
type dirOp struct {
	kind    dirOpKind
	name    string // created, unlinked, renamed from, or made (mkdir)
	newName string // renamed to
	ino     *inode // of create and rename
}

// directory is one directory.
type directory struct {
	path    string
	entries map[string]*inode // volatile
	durable map[string]*inode
	// subdirs and durableSubdirs: names of child directories.
	subdirs        map[string]bool
	durableSubdirs map[string]bool
	pending        []dirOp
}

func newDirectory(p string) *directory {
	return &directory{path: p, entries: map[string]*inode{}, durable: map[string]*inode{},
		subdirs: map[string]bool{}, durableSubdirs: map[string]bool{}}
}

// FS is the simulated filesystem. It is not safe for concurrent use (the
// simulator is single-threaded).
type FS struct {
	opts     Options
	dirs     map[string]*directory
	gen      uint64 // process generation: handles of older ones fail
	faults   Faults
	rand     Rand
	counters Counters
	// syncCalls counts fsyncs of files and directories; at the one
	// numbered stopAtSync (0: none) the process crashes, or the power
	// fails (stopIsPowerLoss), before that fsync takes effect.
	syncCalls       uint64
	stopAtSync      uint64
	stopIsPowerLoss bool
}

var _ fsys.FS = (*FS)(nil)

// New makes an empty filesystem holding only the durable root "/".
func New(opts Options) *FS {
	fs := &FS{opts: opts, dirs: map[string]*directory{"/": newDirectory("/")}, gen: 1}
	return fs
}

// SetFaults sets the faults in force and the randomness for them and for
// power losses. With a nil Rand no fault fires.
func (fs *FS) SetFaults(f Faults, r Rand) { fs.faults, fs.rand = f, r }

// Counters returns what happened so far.
func (fs *FS) Counters() Counters { return fs.counters }

func clean(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return path.Clean(p)
}

// chance says whether an event of probability ratio happens now.
func (fs *FS) chance(ratio float64) bool {
	if ratio <= 0 || fs.rand == nil {
		return false
	}
	return float64(fs.rand.Uint64()>>11)/float64(1<<53) < ratio
}

// pick returns a seeded number in [0, n); 0 without a Rand.
func (fs *FS) pick(n int) int {
	if n <= 1 || fs.rand == nil {
		return 0
	}
	return int(fs.rand.Uint64() % uint64(n))
}

func (fs *FS) lookup(p string) (*directory, string, error) {
	p = clean(p)
	d, ok := fs.dirs[path.Dir(p)]
	if !ok {
		return nil, "", fmt.Errorf("simfs: %s: directory %w", p, fsys.ErrNotExist)
	}
	return d, path.Base(p), nil
}

func (fs *FS) open(p string, readOnly bool) (fsys.File, error) {
	d, name, err := fs.lookup(p)
	if err != nil {
		return nil, err
	}
	ino, ok := d.entries[name]
	if !ok {
		return nil, fmt.Errorf("simfs: open %s: %w", p, fsys.ErrNotExist)
	}
	return &file{fs: fs, ino: ino, gen: fs.gen, readOnly: readOnly, path: clean(p)}, nil
}

func (fs *FS) OpenRead(p string) (fsys.File, error)   { return fs.open(p, true) }
func (fs *FS) OpenAppend(p string) (fsys.File, error) { return fs.open(p, false) }

func (fs *FS) Create(p string, exclusive bool) (fsys.File, error) {
	d, name, err := fs.lookup(p)
	if err != nil {
		return nil, err
	}
	if d.subdirs[name] {
		return nil, fmt.Errorf("simfs: create %s: a directory: %w", p, fsys.ErrExist)
	}
	if ino, ok := d.entries[name]; ok {
		if exclusive {
			return nil, fmt.Errorf("simfs: create %s: %w", p, fsys.ErrExist)
		}
		ino.truncate(0)
		return &file{fs: fs, ino: ino, gen: fs.gen, path: clean(p)}, nil
	}
	ino := &inode{}
	d.entries[name] = ino
	d.pending = append(d.pending, dirOp{kind: opCreate, name: name, ino: ino})
	return &file{fs: fs, ino: ino, gen: fs.gen, path: clean(p)}, nil
}

func (fs *FS) ReadDir(dir string) ([]fsys.DirEntry, error) {
	d, ok := fs.dirs[clean(dir)]
	if !ok {
		return nil, fmt.Errorf("simfs: read dir %s: %w", dir, fsys.ErrNotExist)
	}
	out := make([]fsys.DirEntry, 0, len(d.entries)+len(d.subdirs))
	for name, ino := range d.entries {
		out = append(out, fsys.DirEntry{Name: name, SizeBytes: int64(len(ino.data))})
	}
	for name := range d.subdirs {
		out = append(out, fsys.DirEntry{Name: name, IsDir: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (fs *FS) Remove(p string) error {
	d, name, err := fs.lookup(p)
	if err != nil {
		return err
	}
	if _, ok := d.entries[name]; !ok {
		return fmt.Errorf("simfs: remove %s: %w", p, fsys.ErrNotExist)
	}
	delete(d.entries, name)
	d.pending = append(d.pending, dirOp{kind: opUnlink, name: name})
	return nil
}

func (fs *FS) Rename(oldPath, newPath string) error {
	d, oldName, err := fs.lookup(oldPath)
	if err != nil {
		return err
	}
	newDir, newName, err := fs.lookup(newPath)
	if err != nil {
		return err
	}
	if newDir != d {
		return fmt.Errorf("simfs: rename %s to %s: across directories is not modelled", oldPath, newPath)
	}
	ino, ok := d.entries[oldName]
	if !ok {
		return fmt.Errorf("simfs: rename %s: %w", oldPath, fsys.ErrNotExist)
	}
	if oldName == newName {
		return nil
	}
	delete(d.entries, oldName)
	d.entries[newName] = ino
	d.pending = append(d.pending, dirOp{kind: opRename, name: oldName, newName: newName, ino: ino})
	return nil
}

func (fs *FS) MkdirAll(dir string) error {
	dir = clean(dir)
	if _, ok := fs.dirs[dir]; ok {
		return nil
	}
	parent := path.Dir(dir)
	if err := fs.MkdirAll(parent); err != nil {
		return err
	}
	p := fs.dirs[parent]
	name := path.Base(dir)
	if _, ok := p.entries[name]; ok {
		return fmt.Errorf("simfs: mkdir %s: a file: %w", dir, fsys.ErrExist)
	}
	fs.dirs[dir] = newDirectory(dir)
	p.subdirs[name] = true
	p.pending = append(p.pending, dirOp{kind: opMkdir, name: name})
	return nil
}

func (fs *FS) SyncDir(dir string) error {
	if fs.stopsHere() {
		return fmt.Errorf("simfs: sync dir %s: %w", dir, ErrCrashed)
	}
	d, ok := fs.dirs[clean(dir)]
	if !ok {
		return fmt.Errorf("simfs: sync dir %s: %w", dir, fsys.ErrNotExist)
	}
	if fs.chance(fs.faults.FsyncErrorRatio) {
		fs.counters.FsyncErrors++
		// The operations stay visible but will never be made durable by
		// this directory's fsyncs: a power loss drops them.
		d.pending = nil
		return fmt.Errorf("simfs: fsync %s: %w", dir, ErrInjected)
	}
	d.durable = cloneEntries(d.entries)
	d.durableSubdirs = cloneSet(d.subdirs)
	d.pending = nil
	return nil
}

// StopAtSync arranges for the process to crash (or the power to fail, with
// powerLoss) at the countdown-th fsync from now (of a file or a directory),
// before it takes effect: that fsync returns ErrCrashed, as does every
// later use of a handle of the dead process. A simulator uses it to stop a
// run inside a storage call, between its fsyncs. countdown 0 cancels.
func (fs *FS) StopAtSync(countdown uint64, powerLoss bool) {
	fs.stopAtSync, fs.stopIsPowerLoss = 0, powerLoss
	if countdown > 0 {
		fs.stopAtSync = fs.syncCalls + countdown
	}
}

// stopsHere counts an fsync and says whether the process stops at it.
func (fs *FS) stopsHere() bool {
	fs.syncCalls++
	if fs.stopAtSync == 0 || fs.syncCalls != fs.stopAtSync {
		return false
	}
	fs.stopAtSync = 0
	if fs.stopIsPowerLoss {
		fs.PowerLoss()
	} else {
		fs.Crash()
	}
	return true
}

// Crash is the death of the process: every open handle ends; the page
// cache, and so every byte and name, survives.
func (fs *FS) Crash() {
	fs.counters.Crashes++
	fs.gen++
}

func cloneEntries(m map[string]*inode) map[string]*inode {
	out := make(map[string]*inode, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneSet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// file is one open handle.
type file struct {
	fs       *FS
	ino      *inode
	gen      uint64
	readOnly bool
	closed   bool
	path     string
}

func (f *file) usable(write bool) error {
	switch {
	case f.gen != f.fs.gen:
		return fmt.Errorf("simfs: %s: %w", f.path, ErrCrashed)
	case f.closed:
		return fmt.Errorf("simfs: %s: closed", f.path)
	case write && f.readOnly:
		return fmt.Errorf("simfs: %s: opened for reading", f.path)
	}
	return nil
}

func (f *file) ReadAt(p []byte, offsetBytes int64) (int, error) {
	if err := f.usable(false); err != nil {
		return 0, err
	}
	if offsetBytes < 0 {
		return 0, fmt.Errorf("simfs: %s: negative offset", f.path)
	}
	if offsetBytes >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.ino.data[offsetBytes:])
	if n > 0 && f.fs.chance(f.fs.faults.BitRotRatio) {
		f.fs.counters.BitRots++
		bit := f.fs.pick(n * 8)
		p[bit/8] ^= 1 << (bit % 8)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *file) Write(p []byte) (int, error) {
	if err := f.usable(true); err != nil {
		return 0, err
	}
	ino := f.ino
	ino.markDirty(len(ino.data))
	ino.data = append(ino.data, p...)
	return len(p), nil
}

func (f *file) Truncate(sizeBytes int64) error {
	if err := f.usable(true); err != nil {
		return err
	}
	if sizeBytes < 0 {
		return fmt.Errorf("simfs: %s: negative size", f.path)
	}
	f.ino.truncate(int(sizeBytes))
	return nil
}

func (f *file) Sync() error     { return f.sync() }
func (f *file) Datasync() error { return f.sync() }

func (f *file) sync() error {
	if err := f.usable(false); err != nil {
		return err
	}
	if f.fs.stopsHere() {
		return fmt.Errorf("simfs: fsync %s: %w", f.path, ErrCrashed)
	}
	ino := f.ino
	if f.fs.chance(f.fs.faults.FsyncErrorRatio) {
		f.fs.counters.FsyncErrors++
		if f.fs.chance(f.fs.faults.FsyncErrorKeepsPagesRatio) {
			f.fs.counters.FsyncErrorsPagesKept++
			ino.loseDirtyKeepPages()
		} else {
			ino.loseDirty()
		}
		return fmt.Errorf("simfs: fsync %s: %w", f.path, ErrInjected)
	}
	ino.makeDurable()
	return nil
}

func (f *file) SizeBytes() (int64, error) {
	if err := f.usable(false); err != nil {
		return 0, err
	}
	return int64(len(f.ino.data)), nil
}

func (f *file) Close() error {
	if err := f.usable(false); err != nil {
		return err
	}
	f.closed = true
	return nil
}

func (ino *inode) markDirty(from int) {
	if !ino.dirty || from < ino.dirtyFrom {
		ino.dirtyFrom = from
	}
	ino.dirty = true
}

func (ino *inode) truncate(sizeBytes int) {
	ino.markDirty(min(sizeBytes, len(ino.data)))
	if sizeBytes <= len(ino.data) {
		ino.data = ino.data[:sizeBytes]
		return
	}
	ino.data = append(ino.data, make([]byte, sizeBytes-len(ino.data))...)
}

// makeDurable copies what changed since the last fsync to the disk: only
// the bytes from dirtyFrom on, so an fsync of an appended file costs what
// was appended.
func (ino *inode) makeDurable() {
	if !ino.dirty {
		return
	}
	from := min(ino.dirtyFrom, len(ino.durable))
	ino.durable = append(ino.durable[:from], ino.data[from:]...)
	ino.dirty = false
	assertTrue(len(ino.durable) == len(ino.data), "a synced file's disk holds its page cache")
}

// assertTrue panics with why when cond is false: only a bug breaks it.
func assertTrue(cond bool, why string) {
	if !cond {
		panic("fibril/simfs invariant violated: " + why)
	}
}

// loseDirty drops the dirty pages: the file reads as its durable bytes.
func (ino *inode) loseDirty() {
	ino.data = append([]byte(nil), ino.durable...)
	ino.dirty = false
	assertTrue(len(ino.data) == len(ino.durable), "dropped pages leave the disk's bytes")
}

// loseDirtyKeepPages marks the dirty pages clean without writing them:
// reads still see them, the disk holds zeros there (its size did move).
func (ino *inode) loseDirtyKeepPages() {
	from := min(ino.dirtyFrom, len(ino.durable), len(ino.data))
	ino.durable = append(ino.durable[:from], make([]byte, len(ino.data)-from)...)
	ino.dirty = false
	assertTrue(len(ino.durable) == len(ino.data), "kept pages keep the file's size on the disk")
}
