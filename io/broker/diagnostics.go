package broker

import (
	"sync"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/logstore"
)

// Recovery observations for GET /admin/api/diagnostics (the dashboard's
// Diagnostics page): how long the broker's start took to replay the Node's
// log, and the last loadRingMax partition loads with what each replayed.
// Invariants:
//   - observations only: nothing here is read by a machine or decides
//     anything, and nothing runs on the publish or deliver path (a load is
//     observed once, on its load goroutine, after the log is open);
//   - memory is fixed: the startup figures are one struct written in New
//     before the broker is shared, the loads a ring of loadRingMax entries
//     with their strings clipped to diagReasonBytesMax.

// loadRingMax is how many partition loads are kept, newest replacing
// oldest.
const loadRingMax = 64

// diagReasonBytesMax clips a damage reason or load error kept in the ring.
const diagReasonBytesMax = 512

// StartupRecovery is what New spent rebuilding the Node.
type StartupRecovery struct {
	AtMs int64 // when New began, Unix ms
	// ReadNs opened the Node's log (storage recovery: frames checked, a
	// torn tail cut); ReplayNs rebuilt the Node from its snapshot and
	// records (node.NewNode); TotalNs is all of New, the legacy catalogue
	// import and the first step included.
	ReadNs, ReplayNs, TotalNs int64
	SnapshotIndex             uint64
	SnapshotBytes             int
	Records                   int // records after the snapshot, replayed
}

// PartitionLoad is one partition load as its load goroutine saw it.
type PartitionLoad struct {
	Queue core.QueueID
	Kind  string // queue or stream
	AtMs  int64  // when the load began, Unix ms
	// DurationNs is the whole load (open, checks, replay, runner start);
	// ReadNs the log's open (storage recovery) within it.
	DurationNs, ReadNs int64
	// What the log gave back: the snapshot and the entries after it that
	// the machine replayed.
	SnapshotIndex uint64
	SnapshotBytes int
	Entries       int
	// TornTail: an unsynced tail was cut (no damage). Cut: what a repair
	// or recovery.on_mismatch=ignore dropped (nil: nothing).
	TornTail bool
	Cut      *node.LoadCut
	// Damage is what the recovery checks found (the partition was not
	// loaded; the Node parks it); Err a load that failed otherwise.
	DamageKind, DamageReason, Err string
	// Reload: loaded again after an idle eviction; Repair: a load that
	// cuts at the first bad record (a repair, or the ignore policy).
	Reload, Repair bool
}

// loadReplay is what openRecovered saw of the log (quarantine_load.go).
type loadReplay struct {
	readNs        int64
	snapshotIndex uint64
	snapshotBytes int
	entries       int
	tornTail      bool
}

func replayOf(rec logstore.Recovered, readNs int64) loadReplay {
	return loadReplay{readNs: readNs, snapshotIndex: rec.SnapshotIndex, snapshotBytes: len(rec.Snapshot),
		entries: len(rec.Entries), tornTail: rec.TruncatedTail && rec.Cut.Torn}
}

// diagState is the broker's recovery observations.
type diagState struct {
	startup StartupRecovery // written in New only

	mu    sync.Mutex
	loads [loadRingMax]PartitionLoad
	next  int    // where the next load goes
	total uint64 // loads observed since start
}

// observeLoad records one finished load (its goroutine, after LoadDone's
// inputs are known).
func (b *Broker) observeLoad(req node.LoadRequest, started time.Time, out recoveryOutcome, err error) {
	l := PartitionLoad{Queue: req.Queue, Kind: kindName(req.Kind), AtMs: started.UnixMilli(),
		DurationNs: time.Since(started).Nanoseconds(), ReadNs: out.replay.readNs,
		SnapshotIndex: out.replay.snapshotIndex, SnapshotBytes: out.replay.snapshotBytes, Entries: out.replay.entries,
		TornTail: out.replay.tornTail, Reload: req.Reload, Repair: req.Truncate}
	if out.cut != nil {
		cut := *out.cut
		l.Cut = &cut
	}
	if out.damage != nil {
		l.DamageKind, l.DamageReason = out.damage.Kind, clipReason(out.damage.Reason)
	}
	if err != nil {
		l.Err = clipReason(err.Error())
	}
	d := &b.diag
	d.mu.Lock()
	d.loads[d.next] = l
	d.next = (d.next + 1) % loadRingMax
	d.total++
	d.mu.Unlock()
}

func clipReason(s string) string {
	if len(s) > diagReasonBytesMax {
		return s[:diagReasonBytesMax] + "…"
	}
	return s
}

// Diagnostics is the broker's recovery observations.
type Diagnostics struct {
	Startup StartupRecovery
	// Loads are the newest partition loads, newest first (at most
	// LoadsKept); LoadsTotal counts every load since start.
	Loads      []PartitionLoad
	LoadsTotal uint64
	LoadsKept  int
}

// Diagnostics copies the recovery observations.
func (b *Broker) Diagnostics() Diagnostics {
	d := &b.diag
	d.mu.Lock()
	defer d.mu.Unlock()
	n := int(min(d.total, loadRingMax))
	out := Diagnostics{Startup: d.startup, LoadsTotal: d.total, LoadsKept: loadRingMax, Loads: make([]PartitionLoad, 0, n)}
	for i := 1; i <= n; i++ {
		out.Loads = append(out.Loads, d.loads[(d.next-i+loadRingMax)%loadRingMax])
	}
	assertTrue(len(out.Loads) <= loadRingMax, "the load ring is bounded")
	return out
}
