package sim

import (
	"github.com/fibril-go/fibril/storage/fsys"
	"github.com/fibril-go/fibril/storage/simfs"
)

// gatedFS is the broker's filesystem: storage/simfs with fsyncs that take
// simulated time. An fsync issued by a storage round blocks the round
// (which runs on a worker goroutine, strictly alternating with the event
// loop) until the event loop resumes it FsyncLatency later; everything the
// round reported before it blocked is carried out meanwhile, exactly as a
// production committer's report is while its next fsync is on its way.
// Invariants:
//   - the worker and the event loop never run at the same time: one of them
//     always waits on a channel for the other, so a run stays a pure
//     function of its seed;
//   - a blocked fsync resumed with crashed=true returns simfs.ErrCrashed
//     without syncing anything (the process died during the fsync);
//   - outside a round (recovery at Open) fsyncs run at once.
type gatedFS struct {
	*simfs.FS
	gate *syncGate
}

// syncGate is the handoff between the event loop and a round's worker.
type syncGate struct {
	active bool // a round's worker exists (running or blocked)
	// running says the worker, not the event loop, is the one running now:
	// only its fsyncs block; the event loop's (recovery) run at once.
	running  bool
	toMain   chan gateMsg
	toWorker chan bool // true: the fsync completed; false: the process died
}

type gateMsg uint8

const (
	gateBlocked gateMsg = iota + 1 // the worker waits in an fsync
	gateDone                       // the worker's round returned
)

func newGatedFS() *gatedFS {
	return &gatedFS{FS: simfs.New(simfs.Options{}), gate: &syncGate{toMain: make(chan gateMsg), toWorker: make(chan bool)}}
}

// wait blocks the worker in an fsync until the event loop resumes it.
func (g *syncGate) wait() error {
	if !g.running {
		return nil
	}
	g.running = false
	g.toMain <- gateBlocked
	if ok := <-g.toWorker; !ok {
		return simfs.ErrCrashed
	}
	return nil
}

// resume lets the blocked worker go on (ok: its fsync completed).
func (g *syncGate) resume(ok bool) {
	g.running = true
	g.toWorker <- ok
}

func (fs *gatedFS) OpenRead(p string) (fsys.File, error)   { return fs.wrap(fs.FS.OpenRead(p)) }
func (fs *gatedFS) OpenAppend(p string) (fsys.File, error) { return fs.wrap(fs.FS.OpenAppend(p)) }
func (fs *gatedFS) Create(p string, exclusive bool) (fsys.File, error) {
	return fs.wrap(fs.FS.Create(p, exclusive))
}

func (fs *gatedFS) SyncDir(dir string) error {
	if err := fs.gate.wait(); err != nil {
		return err
	}
	return fs.FS.SyncDir(dir)
}

func (fs *gatedFS) wrap(f fsys.File, err error) (fsys.File, error) {
	if err != nil {
		return nil, err
	}
	return &gatedFile{File: f, gate: fs.gate}, nil
}

type gatedFile struct {
	fsys.File
	gate *syncGate
}

func (f *gatedFile) Sync() error {
	if err := f.gate.wait(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *gatedFile) Datasync() error {
	if err := f.gate.wait(); err != nil {
		return err
	}
	return f.File.Datasync()
}
