package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The FUSE face of the model. Invariants:
//   - every operation takes FS.mu for its whole length, so the model sees
//     one operation at a time, in the order the kernel handed them over;
//   - a node holds the model inode it stands for; a power loss never
//     changes a mounted tree: it unmounts, computes the survivors, rewrites
//     the underlying directory and mounts a new tree.

// FS is one mounted lazy filesystem.
type FS struct {
	mountpoint string
	backing    string
	seed       uint64
	rng        *rand.Rand

	mu     sync.Mutex
	tree   *tree
	server *fuse.Server
	losses int
	// frozen: the power is off. Writes and syncs that arrive late (from a
	// process the power loss killed mid-call) are refused, and nothing more
	// becomes durable.
	frozen bool
	// syncDelayNs is how long each fsync takes (0: no time at all), as on
	// a real disk: writes made meanwhile stay unsynced, so a power loss
	// finds the unsynced tails a real one would.
	syncDelayNs atomic.Int64
	// dropUnsyncedOps: every namespace operation no directory fsync made
	// durable is lost (the worst case a power loss may leave), instead of
	// a seeded half of them.
	dropUnsyncedOps atomic.Bool
}

// SetSyncDelay makes every fsync and fdatasync take d before it returns.
func (f *FS) SetSyncDelay(d time.Duration) { f.syncDelayNs.Store(int64(d)) }

// SetDropUnsyncedOps makes every later power loss drop every create,
// rename and unlink whose directory was not fsynced, rather than keep a
// seeded half: the adversary a test of a missing directory fsync needs, so
// that it fails on the first power loss that finds one, not on a lucky
// draw. The other choices stay seeded (the same draws are made).
func (f *FS) SetDropUnsyncedOps(drop bool) { f.dropUnsyncedOps.Store(drop) }

// Available says why FUSE cannot be used here (nil when it can): no
// /dev/fuse, or neither root (who mounts directly) nor fusermount.
func Available() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("lazyfs: /dev/fuse: %w", err)
	}
	f.Close()
	if os.Geteuid() == 0 {
		return nil
	}
	for _, bin := range []string{"fusermount3", "fusermount"} {
		if _, err := exec.LookPath(bin); err == nil {
			return nil
		}
	}
	return errors.New("lazyfs: not root and no fusermount3/fusermount in PATH (Debian: apt-get install fuse3)")
}

// Mount mounts a lazy filesystem at mountpoint whose disk is the directory
// backing (loaded as durable); seed drives every power-loss choice.
func Mount(mountpoint, backing string, seed uint64) (*FS, error) {
	f := &FS{mountpoint: mountpoint, backing: backing, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x6c617a79))}
	t, err := loadTree(backing)
	if err != nil {
		return nil, err
	}
	if err := f.mount(t); err != nil {
		return nil, err
	}
	return f, nil
}

// Seed is the seed that replays this filesystem's choices.
func (f *FS) Seed() uint64 { return f.seed }

// Mountpoint is where the filesystem is mounted.
func (f *FS) Mountpoint() string { return f.mountpoint }

// cacheTimeout: nothing but this server changes the tree while it is
// mounted, so the kernel may cache entries and attributes.
const cacheTimeout = time.Second

func (f *FS) mount(t *tree) error {
	f.mu.Lock()
	f.tree, f.frozen = t, false
	f.mu.Unlock()
	timeout := cacheTimeout
	root := &node{fs: f, in: t.root}
	server, err := fs.Mount(f.mountpoint, root, &fs.Options{
		EntryTimeout: &timeout, AttrTimeout: &timeout,
		UID: uint32(os.Getuid()), GID: uint32(os.Getgid()),
		MountOptions: fuse.MountOptions{FsName: "lazyfs", Name: "lazyfs", DisableXAttrs: true,
			DirectMount: os.Geteuid() == 0, MaxWrite: 1 << 20},
	})
	if err != nil {
		return fmt.Errorf("lazyfs: mounting at %s: %w", f.mountpoint, err)
	}
	f.server = server
	return nil
}

// Unmount unmounts without losing anything: everything is made durable and
// written to the underlying directory (a clean shutdown).
func (f *FS) Unmount() error {
	if err := f.unmount(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tree.syncAll()
	return writeTree(f.tree, f.backing)
}

func (f *FS) unmount() error {
	if f.server == nil {
		return errors.New("lazyfs: not mounted")
	}
	var err error
	for attempt := 0; attempt < unmountAttemptsMax; attempt++ {
		if err = f.server.Unmount(); err == nil {
			f.server.Wait()
			f.server = nil
			return nil
		}
		time.Sleep(unmountRetryDelay) // a dying process may still hold a file
	}
	// Something still holds a file open. Abort the connection, so no
	// process (least of all this one, at exit) waits forever on a server
	// that is going away, and detach the mount.
	abortErr := f.abort()
	_ = syscall.Unmount(f.mountpoint, syscall.MNT_DETACH)
	f.server = nil
	return errors.Join(fmt.Errorf("lazyfs: unmounting %s (aborted the connection): %w", f.mountpoint, err), abortErr)
}

// abort writes to the kernel's abort file for this mount's FUSE connection
// (named by the mount's device minor in /proc/self/mountinfo).
func (f *FS) abort() error {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(info), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 || fields[4] != f.mountpoint {
			continue
		}
		_, minor, ok := strings.Cut(fields[2], ":")
		if !ok {
			break
		}
		return os.WriteFile(filepath.Join("/sys/fs/fuse/connections", minor, "abort"), []byte("1"), 0)
	}
	return fmt.Errorf("lazyfs: %s is not in /proc/self/mountinfo", f.mountpoint)
}

// A killed process's files close within moments; past this, something
// holds the mount for good.
const (
	unmountAttemptsMax = 20
	unmountRetryDelay  = 100 * time.Millisecond
)

// SyncAll makes everything durable, as sync(2) would.
func (f *FS) SyncAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tree.syncAll()
}

// PowerLoss pulls the plug. First the disk stops: from this instant
// nothing more becomes durable and every write and sync fails. Then kill
// (nil if nothing runs) stops every process using the filesystem, as the
// power loss takes them all; a call they had under way does not finish
// after the lights went out. Then it unmounts, keeps only what survives
// (see the package comment), writes that to the underlying directory and
// mounts it again.
func (f *FS) PowerLoss(kill func()) (LossReport, error) {
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
	if kill != nil {
		kill()
	}
	if err := f.unmount(); err != nil {
		return LossReport{}, err
	}
	f.mu.Lock()
	f.losses++
	report := LossReport{Seed: f.seed, Loss: f.losses}
	after := f.tree.powerLoss(f.rng, &report, f.dropUnsyncedOps.Load())
	f.mu.Unlock()
	if err := writeTree(after, f.backing); err != nil {
		return report, err
	}
	t, err := loadTree(f.backing)
	if err != nil {
		return report, err
	}
	return report, f.mount(t)
}

// node is one inode as FUSE sees it.
type node struct {
	fs.Inode
	fs *FS
	in *inode
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeReader     = (*node)(nil)
	_ fs.NodeWriter     = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeFlusher    = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeAllocater  = (*node)(nil)
	_ fs.NodeOpendirer  = (*node)(nil)
	_ fs.NodeReleaser   = (*node)(nil)
	_ fs.NodeGetxattrer = (*node)(nil)
)

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

func (n *node) child(ctx context.Context, in *inode) *fs.Inode {
	mode := uint32(syscall.S_IFREG)
	if in.dir {
		mode = syscall.S_IFDIR
	}
	return n.NewInode(ctx, &node{fs: n.fs, in: in}, fs.StableAttr{Mode: mode, Ino: in.ino})
}

func fillAttr(in *inode, out *fuse.Attr) {
	out.Ino = in.ino
	out.Size = uint64(len(in.data))
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = sectorLargeBytes
	out.Mode = in.mode & 0o7777
	out.Nlink = 1
	if in.dir {
		out.Mode |= syscall.S_IFDIR
		out.Nlink = 2
		out.Size = sectorLargeBytes
	} else {
		out.Mode |= syscall.S_IFREG
	}
	out.Uid, out.Gid = uint32(os.Getuid()), uint32(os.Getgid())
	out.SetTimes(&in.mtime, &in.mtime, &in.mtime)
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if !n.in.dir {
		return nil, syscall.ENOTDIR
	}
	c, ok := n.in.children[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	fillAttr(c, &out.Attr)
	return n.child(ctx, c), 0
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	fillAttr(n.in, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if size, ok := in.GetSize(); ok {
		if n.in.dir {
			return syscall.EISDIR
		}
		n.fs.tree.truncate(n.in, int64(size))
	}
	if mode, ok := in.GetMode(); ok {
		n.in.mode = mode & 0o7777
	}
	if mtime, ok := in.GetMTime(); ok {
		n.in.mtime = mtime
	}
	fillAttr(n.in, &out.Attr)
	return 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	in, err := n.fs.tree.create(n.in, name, false, mode&0o7777)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	fillAttr(in, &out.Attr)
	return n.child(ctx, in), nil, 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	in, err := n.fs.tree.create(n.in, name, true, mode&0o7777)
	if err != nil {
		return nil, errno(err)
	}
	fillAttr(in, &out.Attr)
	return n.child(ctx, in), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	return errno(n.fs.tree.remove(n.in, name, false))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	return errno(n.fs.tree.remove(n.in, name, true))
}

// renameNoReplace and renameExchange are renameat2's flags.
const (
	renameNoReplace = 1
	renameExchange  = 2
)

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags&renameExchange != 0 {
		return syscall.ENOTSUP
	}
	target, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	return errno(n.fs.tree.rename(n.in, name, target.in, newName, flags&renameNoReplace != 0))
}

func (n *node) Opendir(ctx context.Context) syscall.Errno { return 0 }

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	names := sortedNames(n.in.children)
	entries := make([]fuse.DirEntry, 0, len(names))
	for _, name := range names {
		c := n.in.children[name]
		mode := uint32(syscall.S_IFREG)
		if c.dir {
			mode = syscall.S_IFDIR
		}
		entries = append(entries, fuse.DirEntry{Name: name, Ino: c.ino, Mode: mode})
	}
	return fs.NewListDirStream(entries), 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if n.in.dir {
		return nil, 0, syscall.EISDIR
	}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		n.fs.tree.truncate(n.in, 0)
	}
	return nil, 0, 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	return fuse.ReadResultData(dest[:n.fs.tree.read(n.in, dest, off)]), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if n.fs.frozen {
		return 0, syscall.EIO
	}
	if n.in.dir {
		return 0, syscall.EISDIR
	}
	n.fs.tree.write(n.in, data, off)
	return uint32(len(data)), 0
}

// Fsync covers fsync and fdatasync of a file and fsync of a directory
// (go-fuse hands FSYNCDIR to the node when the handle has no Fsyncdir).
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	// The disk's time: what the caller wrote before it asked is made
	// durable at the end (and so is what others wrote meanwhile).
	if d := n.fs.syncDelayNs.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if n.fs.frozen {
		return syscall.EIO
	}
	if n.in.dir {
		n.fs.tree.syncDir(n.in)
	} else {
		n.fs.tree.syncFile(n.in)
	}
	return 0
}

// Flush (close) makes nothing durable: close is not fsync.
func (n *node) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

func (n *node) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

// Allocate (fallocate) grows the file with zeros; other modes are refused.
func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	if mode != 0 {
		return syscall.EOPNOTSUPP
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if end := int64(off + size); end > int64(len(n.in.data)) {
		n.fs.tree.truncate(n.in, end)
	}
	return 0
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENODATA
}

// Statfs reports a roomy disk, so nothing under test thinks it is full.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	const blocks = 1 << 30
	out.Blocks, out.Bfree, out.Bavail = blocks, blocks, blocks
	out.Files, out.Ffree = 1<<20, 1<<20
	out.Bsize, out.Frsize, out.NameLen = sectorLargeBytes, sectorLargeBytes, 255
	return 0
}
