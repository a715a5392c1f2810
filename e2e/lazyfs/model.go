// Package lazyfs is a FUSE filesystem for tests that keeps its own page
// cache, so that a test can pull the power on a real process: whatever the
// process wrote but never made durable is dropped, as on a machine that lost
// power, and not kept as a SIGKILL keeps it in the kernel's page cache.
//
// The rules (each has a test in lazyfs_test.go):
//   - writes, truncates, creates, mkdirs, renames and unlinks are visible to
//     every reader at once;
//   - fsync or fdatasync of a file makes that file's data and size durable,
//     and nothing else (not its name);
//   - fsync of a directory makes that directory's entries durable: the names
//     created, renamed in or out, and unlinked in it since its last fsync;
//   - SyncAll (what sync(2) would do) makes everything durable;
//   - PowerLoss drops everything not durable, except that a seeded choice
//     may keep a prefix of a file's unsynced appended tail, cut at a 512 B
//     or 4 KiB boundary and optionally followed by one torn sector of zeros
//     or garbage, and may keep or drop each namespace operation (create,
//     rename, unlink, mkdir) that no directory fsync made durable. A rename
//     is kept or dropped as one operation, so its target never ends up with
//     neither the old nor the new file.
//
// The underlying directory is the disk: Mount loads it, PowerLoss rewrites
// it with exactly what survived and mounts that again. Between the two, the
// durable state lives beside the current one in memory (tests write a few
// megabytes).
//
// This file is the model: pure bookkeeping under one mutex, no FUSE.
package lazyfs

import (
	"sort"
	"syscall"
	"time"
)

// inode is one file or directory. Invariants:
//   - a file's data[:cleanLen] equals durable[:cleanLen], and cleanLen <=
//     len(durable) unless only appends happened since the last fsync, in
//     which case cleanLen == len(durable) and data[len(durable):] is the
//     unsynced tail a power loss may tear;
//   - a directory's children is what readers see; durable is what survives
//     a power loss for certain; pending lists the entry changes between the
//     two, in the order they happened, each tagged with its operation.
type inode struct {
	ino   uint64
	dir   bool
	mode  uint32 // permission bits
	mtime time.Time

	// Files.
	data     []byte
	durable  []byte
	cleanLen int

	// Directories.
	children    map[string]*inode
	durableDirs map[string]*inode
	pending     []entryChange
}

// entryChange is one half of a namespace operation in one directory: name
// now points at target (nil: name removed). A rename has two halves (one in
// each directory; both in one when it stays inside it) that share op.
type entryChange struct {
	op     uint64
	name   string
	target *inode
}

// Errors the model returns map to errnos for FUSE.
var (
	errNotFound = syscall.ENOENT
	errExists   = syscall.EEXIST
	errNotEmpty = syscall.ENOTEMPTY
	errIsDir    = syscall.EISDIR
	errNotDir   = syscall.ENOTDIR
	errInvalid  = syscall.EINVAL
)

// tree is the whole filesystem's state.
type tree struct {
	root    *inode
	nextIno uint64
	nextOp  uint64
	now     func() time.Time
}

func newTree() *tree {
	t := &tree{nextIno: 1, now: time.Now}
	t.root = t.newDir(0o755)
	return t
}

func (t *tree) newDir(mode uint32) *inode {
	in := &inode{ino: t.nextIno, dir: true, mode: mode, mtime: t.now(),
		children: map[string]*inode{}, durableDirs: map[string]*inode{}}
	t.nextIno++
	return in
}

func (t *tree) newFile(mode uint32) *inode {
	in := &inode{ino: t.nextIno, mode: mode, mtime: t.now()}
	t.nextIno++
	return in
}

// change records one namespace operation's halves in their directories and
// applies them to what readers see.
func (t *tree) change(halves ...half) {
	t.nextOp++
	for _, h := range halves {
		if h.target == nil {
			delete(h.dir.children, h.name)
		} else {
			h.dir.children[h.name] = h.target
		}
		h.dir.pending = append(h.dir.pending, entryChange{op: t.nextOp, name: h.name, target: h.target})
		h.dir.mtime = t.now()
	}
}

// half is one directory's part of a namespace operation, as change takes it.
type half struct {
	dir    *inode
	name   string
	target *inode
}

// create adds a new file or directory under name in dir.
func (t *tree) create(dir *inode, name string, isDir bool, mode uint32) (*inode, error) {
	if !dir.dir {
		return nil, errNotDir
	}
	if _, ok := dir.children[name]; ok {
		return nil, errExists
	}
	var in *inode
	if isDir {
		in = t.newDir(mode)
	} else {
		in = t.newFile(mode)
	}
	t.change(half{dir, name, in})
	return in, nil
}

// remove unlinks a file (wantDir false) or an empty directory (wantDir true).
func (t *tree) remove(dir *inode, name string, wantDir bool) error {
	in, ok := dir.children[name]
	switch {
	case !ok:
		return errNotFound
	case wantDir && !in.dir:
		return errNotDir
	case !wantDir && in.dir:
		return errIsDir
	case in.dir && len(in.children) > 0:
		return errNotEmpty
	}
	t.change(half{dir, name, nil})
	return nil
}

// rename moves source/name to target/newName, replacing a file or an empty
// directory there; noReplace refuses an existing target.
func (t *tree) rename(source *inode, name string, target *inode, newName string, noReplace bool) error {
	in, ok := source.children[name]
	if !ok {
		return errNotFound
	}
	if old, ok := target.children[newName]; ok {
		switch {
		case old == in:
			return nil // POSIX: renaming a name onto itself does nothing
		case noReplace:
			return errExists
		case old.dir != in.dir && old.dir:
			return errIsDir
		case old.dir != in.dir:
			return errNotDir
		case old.dir && len(old.children) > 0:
			return errNotEmpty
		}
	}
	if in.dir && t.contains(in, target) {
		return errInvalid // a directory cannot move into itself
	}
	t.change(half{source, name, nil}, half{target, newName, in})
	return nil
}

// contains reports whether dir is d or lies under it.
func (t *tree) contains(d, dir *inode) bool {
	if d == dir {
		return true
	}
	for _, c := range d.children {
		if c.dir && t.contains(c, dir) {
			return true
		}
	}
	return false
}

// write stores data at off, zero-filling any gap past the end.
func (t *tree) write(in *inode, data []byte, off int64) {
	end := int(off) + len(data)
	if end > len(in.data) {
		if end > cap(in.data) {
			grown := make([]byte, len(in.data), max(end, 2*cap(in.data)))
			copy(grown, in.data)
			in.data = grown
		}
		in.data = in.data[:end]
	}
	copy(in.data[off:], data)
	in.cleanLen = min(in.cleanLen, int(off))
	in.mtime = t.now()
}

// truncate sets the size, zero-filling when it grows.
func (t *tree) truncate(in *inode, size int64) {
	if int(size) <= len(in.data) {
		in.data = in.data[:size]
		in.cleanLen = min(in.cleanLen, int(size))
	} else {
		t.write(in, make([]byte, int(size)-len(in.data)), int64(len(in.data)))
	}
	in.mtime = t.now()
}

// read copies what lies at off into dest.
func (t *tree) read(in *inode, dest []byte, off int64) int {
	if off >= int64(len(in.data)) {
		return 0
	}
	return copy(dest, in.data[off:])
}

// syncFile makes a file's data and size durable (fsync, fdatasync).
func (t *tree) syncFile(in *inode) {
	if in.dir {
		t.syncDir(in)
		return
	}
	clean := min(in.cleanLen, len(in.durable))
	in.durable = append(in.durable[:clean], in.data[clean:]...)
	in.cleanLen = len(in.data)
}

// syncDir makes a directory's entries durable (fsync of the directory).
func (t *tree) syncDir(in *inode) {
	for _, c := range in.pending {
		if c.target == nil {
			delete(in.durableDirs, c.name)
		} else {
			in.durableDirs[c.name] = c.target
		}
	}
	in.pending = nil
}

// syncAll makes everything durable (sync(2)).
func (t *tree) syncAll() {
	seen := map[*inode]bool{}
	var walk func(in *inode)
	walk = func(in *inode) {
		if seen[in] {
			return
		}
		seen[in] = true
		if !in.dir {
			t.syncFile(in)
			return
		}
		// Sync the entries first: children removed since are durable gone.
		t.syncDir(in)
		for _, c := range in.children {
			walk(c)
		}
	}
	walk(t.root)
}

// sortedNames lists a map's names in order, so every walk (and so every
// seeded choice) happens in the same order.
func sortedNames(m map[string]*inode) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
