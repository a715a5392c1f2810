package sim

import (
	"iter"

	"github.com/fibril-go/fibril/storage/fsys"
	"github.com/fibril-go/fibril/storage/simfs"
)

// gatedFS is the broker's filesystem: storage/simfs with fsyncs that take
// simulated time. An fsync issued by a storage round blocks the round
// (which runs on a coroutine of its own, strictly alternating with the
// event loop) until the event loop resumes it FsyncLatency later;
// everything the round reported before it blocked is carried out
// meanwhile, exactly as a production committer's report is while its next
// fsync is on its way. Invariants:
//   - the worker and the event loop never run at the same time: control
//     passes between them only by a coroutine switch, so a run stays a pure
//     function of its seed;
//   - a blocked fsync resumed with crashed=true returns simfs.ErrCrashed
//     without syncing anything (the process died during the fsync);
//   - outside a round (recovery at Open) fsyncs run at once.
type gatedFS struct {
	*simfs.FS
	gate *syncGate
}

// syncGate is the handoff between the event loop and the rounds' worker.
// The worker is one coroutine (iter.Pull) per broker, made at its first
// round and kept for the rest of the run: a goroutine per round with
// channel hand-offs cost a stack grown anew for every round and a trip
// through the scheduler (with a futex wake-up when another P took the
// goroutine) at every fsync: about a twentieth of the simulator's time in a
// profile. A coroutine switch stays on the thread and keeps the grown stack.
type syncGate struct {
	active bool // a round's worker exists (running or blocked)
	// running says the worker, not the event loop, is the one running now:
	// only its fsyncs block; the event loop's (recovery) run at once.
	running bool
	job     func()                 // the round the worker runs next
	yield   func(gateMsg) bool     // the worker's way back to the event loop
	next    func() (gateMsg, bool) // the event loop's way into the worker
	stop    func()
	// resumedOK is what the event loop resumed a blocked fsync with: true
	// the fsync completed, false the process died.
	resumedOK bool
}

type gateMsg uint8

const (
	gateBlocked gateMsg = iota + 1 // the worker waits in an fsync
	gateDone                       // the worker's round returned
)

func newGatedFS() *gatedFS {
	return &gatedFS{FS: simfs.New(simfs.Options{}), gate: &syncGate{}}
}

// work is the worker coroutine's body: one round per resumption from the
// event loop, until close.
func (g *syncGate) work(yield func(gateMsg) bool) {
	g.yield = yield
	for {
		job := g.job
		g.job = nil
		job()
		g.running = false
		if !yield(gateDone) {
			return
		}
	}
}

// run starts job on the worker and returns when it blocks in an fsync or
// finishes.
func (g *syncGate) run(job func()) gateMsg {
	if g.next == nil {
		g.next, g.stop = iter.Pull(g.work)
	}
	g.job = job
	g.active, g.running = true, true
	return g.switchToWorker()
}

// wait blocks the worker in an fsync until the event loop resumes it.
func (g *syncGate) wait() error {
	if !g.running {
		return nil
	}
	g.running = false
	if !g.yield(gateBlocked) || !g.resumedOK {
		return simfs.ErrCrashed
	}
	return nil
}

// resume lets the blocked worker go on (ok: its fsync completed) and
// returns when it blocks again or finishes.
func (g *syncGate) resume(ok bool) gateMsg {
	g.running, g.resumedOK = true, ok
	return g.switchToWorker()
}

func (g *syncGate) switchToWorker() gateMsg {
	msg, ok := g.next()
	if !ok {
		return gateDone // the worker is gone (closed, or a round panicked)
	}
	return msg
}

// close ends the worker at the end of a run; a round blocked in an fsync
// sees the process die.
func (g *syncGate) close() {
	if g.stop != nil {
		g.stop()
	}
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
