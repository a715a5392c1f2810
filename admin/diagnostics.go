package admin

import (
	"context"
	"io/fs"
	"net/http"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sort"
	"sync"
	"time"

	"github.com/fibril-go/fibril/io/broker"
)

// GET /admin/api/diagnostics (the dashboard's Diagnostics page): recovery
// timings, storage figures, group commits, idle eviction counters and the
// Go runtime, in one answer. Invariants:
//   - an observation only: it changes nothing (not audited) and reads what
//     the broker already keeps (the recovery ring of io/broker
//     diagnostics.go, the group-commit histograms, the Node's idle
//     counters); nothing is added to the publish or deliver path;
//   - the data dir's size is a bounded walk (dataDirWalkEntriesMax entries,
//     dataDirWalkBudget of time), its answer kept for dataDirWalkMaxAge so
//     a page polling every tick walks at most twice a minute, and an
//     answer says whether the walk saw everything (complete);
//   - every part of the answer is bounded: the load ring (64), the data
//     dir's parts (dataDirPartsMax), clipped strings.

const (
	// dataDirWalkEntriesMax bounds the files and directories one walk
	// visits; dataDirWalkBudget its time. Past either, the walk stops and
	// says complete=false (its bytes are a lower bound).
	dataDirWalkEntriesMax = 200_000
	dataDirWalkBudget     = time.Second
	// dataDirWalkMaxAge is how long a walk's answer is served again.
	dataDirWalkMaxAge = 30 * time.Second
	// dataDirPartsMax bounds the top-level parts listed (the rest go into
	// one "(other)" part).
	dataDirPartsMax = 16
	// diagnosticsIdleTimeout bounds the wait for the Node's idle counters.
	diagnosticsIdleTimeout = 5 * time.Second
)

// diagnosticsBackend is what this family needs of the broker.
type diagnosticsBackend interface {
	Diagnostics() broker.Diagnostics
}

// DiagnosticsView is the answer's shape.
type DiagnosticsView struct {
	Startup     StartupView     `json:"startup"`
	Loads       LoadsView       `json:"loads"`
	Storage     StorageView     `json:"storage"`
	GroupCommit GroupCommitView `json:"group_commit"`
	Idle        *IdleView       `json:"idle"` // null when the Node did not answer
	// Partitions is the partition budget (null when the Node did not
	// answer): the same answer as Idle's.
	Partitions  *PartitionsView `json:"partitions"`
	Runtime     RuntimeView     `json:"runtime"`
	Quarantined int             `json:"quarantined"`
	// Problems says which part could not be read (the rest is answered).
	Problems []string `json:"problems,omitempty"`
}

// StartupView: the broker's start, the Node's log replay within it.
type StartupView struct {
	AtMs       int64 `json:"at_ms"`
	DurationUs int64 `json:"duration_us"`
	NodeLog    struct {
		ReadUs        int64  `json:"read_us"`
		ReplayUs      int64  `json:"replay_us"`
		Records       int    `json:"records"`
		SnapshotIndex uint64 `json:"snapshot_index"`
		SnapshotBytes int    `json:"snapshot_bytes"`
	} `json:"node_log"`
}

// LoadsView: the newest partition loads, newest first.
type LoadsView struct {
	Total  uint64           `json:"total"`
	Kept   int              `json:"kept"`
	Recent []PartitionLoadV `json:"recent"`
}

// PartitionLoadV is one load.
type PartitionLoadV struct {
	Topic         string   `json:"topic"`
	Group         string   `json:"group"`
	Partition     uint32   `json:"partition"`
	Kind          string   `json:"kind"`
	AtMs          int64    `json:"at_ms"`
	DurationUs    int64    `json:"duration_us"`
	ReadUs        int64    `json:"read_us"`
	SnapshotIndex uint64   `json:"snapshot_index"`
	SnapshotBytes int      `json:"snapshot_bytes"`
	Entries       int      `json:"entries_replayed"`
	TornTail      bool     `json:"torn_tail"`
	Cut           *CutView `json:"cut"`
	Damage        *struct {
		Kind   string `json:"kind"`
		Reason string `json:"reason"`
	} `json:"damage"`
	Error  string `json:"error,omitempty"`
	Reload bool   `json:"reload"`
	Repair bool   `json:"repair"`
	// Outcome sums it up: loaded, quarantined (damage found), failed.
	Outcome string `json:"outcome"`
}

// CutView is what a cutting load dropped.
type CutView struct {
	Index          uint64 `json:"index"`
	DroppedRecords uint64 `json:"dropped_records"`
}

// StorageView: the data dir's filesystem (statfs) and its own bytes (a
// bounded walk).
type StorageView struct {
	DataDir    string        `json:"data_dir"`
	Filesystem *Disk         `json:"filesystem"`
	DataDirUse *DataDirUsage `json:"data_dir_usage"`
}

// DataDirUsage is one walk of the data dir.
type DataDirUsage struct {
	Method     string        `json:"method"` // "walk"
	Bytes      uint64        `json:"bytes"`
	Files      uint64        `json:"files"`
	Dirs       uint64        `json:"dirs"`
	Complete   bool          `json:"complete"`
	WalkedAtMs int64         `json:"walked_at_ms"`
	WalkUs     int64         `json:"walk_us"`
	Parts      []DataDirPart `json:"parts"`
	dir        string        // the dir walked (the cache's key)
	walked     time.Time     // for dataDirWalkMaxAge
}

// DataDirPart is one top-level entry of the data dir (node, queues,
// streams, ...).
type DataDirPart struct {
	Name  string `json:"name"`
	Bytes uint64 `json:"bytes"`
	Files uint64 `json:"files"`
}

// GroupCommitView: the partition logs' group commits since start, from
// fibril_storage_group_commit_{seconds,entries}.
type GroupCommitView struct {
	Rounds              uint64  `json:"rounds"`
	Entries             uint64  `json:"entries"`
	MeanRoundUs         float64 `json:"mean_round_us"`
	MeanEntriesPerRound float64 `json:"mean_entries_per_round"`
}

// IdleView: the Node's idle eviction settings and counters
// (GET /admin/api/queues_debug's).
type IdleView struct {
	Enabled         bool              `json:"enabled"`
	EvictAfterMs    int64             `json:"evict_after_ms"`
	SweepIntervalMs int64             `json:"sweep_interval_ms"`
	Counters        QueuesDebugCounts `json:"counters"`
}

// PartitionsView is every queue's and stream's partitions together, loaded
// or not, against limits.partitions_max (derived from the open-files limit
// when unset): a declare that would pass it is refused with "too many
// partitions on this broker". Declared can exceed Max after a restart under
// a smaller budget (what exists keeps serving).
type PartitionsView struct {
	Declared int `json:"declared"`
	Max      int `json:"max"`
}

// RuntimeView is the Go runtime now.
type RuntimeView struct {
	GoVersion  string `json:"go_version"`
	Goroutines int    `json:"goroutines"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	HeapBytes  uint64 `json:"heap_bytes"`
	// HeapGoalBytes is where the next GC is aimed; GCCycles counts GCs.
	HeapGoalBytes uint64 `json:"heap_goal_bytes"`
	GCCycles      uint64 `json:"gc_cycles"`
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/diagnostics", s.api(func(w http.ResponseWriter, r *http.Request) error {
			v, err := s.diagnostics(r.Context(), true)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, v)
			return nil
		}))
	})
	// The Diagnostics page listens to both over the events stream.
	// The event tick never waits for a walk (every family of the tick
	// would be late): it shows the last one while the next runs.
	eventFamilies["diagnostics"] = func(s *Server, ctx context.Context) (any, error) { return s.diagnostics(ctx, false) }
	eventFamilies["quarantine"] = func(s *Server, _ context.Context) (any, error) {
		b, err := backend[quarantineBackend](s)
		if err != nil {
			return nil, err
		}
		return map[string]any{"quarantined": itemsOf(b.Quarantine())}, nil
	}
}

// diagnostics builds the answer. Parts the broker lacks are left at zero
// (a fake in tests, an older broker); a part that failed says so in
// problems rather than failing the whole answer.
// diagnostics builds the answer; waitWalk says whether it may wait for a
// walk of the data dir (a GET does; the event tick does not).
func (s *Server) diagnostics(ctx context.Context, waitWalk bool) (*DiagnosticsView, error) {
	b, err := backend[diagnosticsBackend](s)
	if err != nil {
		return nil, err
	}
	d := b.Diagnostics()
	v := &DiagnosticsView{Runtime: runtimeNow()}
	v.Startup.AtMs, v.Startup.DurationUs = d.Startup.AtMs, d.Startup.TotalNs/1000
	v.Startup.NodeLog.ReadUs, v.Startup.NodeLog.ReplayUs = d.Startup.ReadNs/1000, d.Startup.ReplayNs/1000
	v.Startup.NodeLog.Records, v.Startup.NodeLog.SnapshotIndex, v.Startup.NodeLog.SnapshotBytes =
		d.Startup.Records, d.Startup.SnapshotIndex, d.Startup.SnapshotBytes
	v.Loads = LoadsView{Total: d.LoadsTotal, Kept: d.LoadsKept, Recent: make([]PartitionLoadV, 0, len(d.Loads))}
	for _, l := range d.Loads {
		v.Loads.Recent = append(v.Loads.Recent, loadView(l))
	}

	dir := s.infoNow().DataDir
	v.Storage.DataDir = dir
	if dir != "" {
		if disk, err := diskOf(dir); err == nil {
			v.Storage.Filesystem = &disk
		} else {
			v.Problems = append(v.Problems, "statfs of the data dir: "+err.Error())
		}
		v.Storage.DataDirUse = dataDirUsage(dir, time.Now(), waitWalk)
	}

	src := s.attached()
	if hs, ok := src.(histogramSource); ok {
		v.GroupCommit = groupCommitOf(hs.Histograms())
	}
	if q, ok := src.(quarantineBackend); ok {
		v.Quarantined = len(q.Quarantine().Entries)
	}
	if qd, ok := src.(queuesDebugSource); ok {
		ictx, cancel := context.WithTimeout(ctx, diagnosticsIdleTimeout)
		dbg, err := qd.QueuesDebug(ictx)
		cancel()
		if err != nil {
			v.Problems = append(v.Problems, "the Node did not answer for the idle counters: "+err.Error())
		} else {
			v.Idle = &IdleView{Enabled: dbg.Cleanup.Enabled, EvictAfterMs: dbg.Cleanup.EvictAfterMs,
				SweepIntervalMs: dbg.Cleanup.SweepIntervalMs,
				Counters:        QueuesDebugCounts{Evicted: dbg.Counters.Evicted, Skipped: dbg.Counters.Skipped, Reloaded: dbg.Counters.Reloaded}}
			v.Partitions = &PartitionsView{Declared: dbg.PartitionsDeclared, Max: dbg.PartitionsMax}
		}
	}
	return v, nil
}

func loadView(l broker.PartitionLoad) PartitionLoadV {
	out := PartitionLoadV{Topic: l.Queue.Topic, Group: l.Queue.Group, Partition: l.Queue.Partition, Kind: l.Kind,
		AtMs: l.AtMs, DurationUs: l.DurationNs / 1000, ReadUs: l.ReadNs / 1000, SnapshotIndex: l.SnapshotIndex,
		SnapshotBytes: l.SnapshotBytes, Entries: l.Entries, TornTail: l.TornTail, Error: l.Err,
		Reload: l.Reload, Repair: l.Repair, Outcome: "loaded"}
	if l.Cut != nil {
		out.Cut = &CutView{Index: l.Cut.Index, DroppedRecords: l.Cut.DroppedRecords}
	}
	switch {
	case l.DamageKind != "":
		out.Outcome = "quarantined"
		out.Damage = &struct {
			Kind   string `json:"kind"`
			Reason string `json:"reason"`
		}{l.DamageKind, l.DamageReason}
	case l.Err != "":
		out.Outcome = "failed"
	}
	return out
}

// groupCommitOf reads the round histograms: rounds is the seconds
// histogram's count, entries the entries histogram's sum.
func groupCommitOf(hs []broker.Histogram) GroupCommitView {
	var v GroupCommitView
	var seconds float64
	for _, h := range hs {
		switch h.Name {
		case broker.HistogramRoundSeconds:
			v.Rounds, seconds = h.Count, h.Sum
		case broker.HistogramRoundEntries:
			v.Entries = uint64(h.Sum + 0.5)
		}
	}
	if v.Rounds > 0 {
		v.MeanRoundUs = round2(seconds * 1e6 / float64(v.Rounds))
		v.MeanEntriesPerRound = round2(float64(v.Entries) / float64(v.Rounds))
	}
	return v
}

// round2 keeps two decimals (the page shows them; the test compares).
func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

func runtimeNow() RuntimeView {
	v := RuntimeView{GoVersion: runtime.Version(), Goroutines: runtime.NumGoroutine(), GOMAXPROCS: runtime.GOMAXPROCS(0)}
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/goal:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(samples)
	out := []*uint64{&v.HeapBytes, &v.HeapGoalBytes, &v.GCCycles}
	for i, sample := range samples {
		if sample.Value.Kind() == metrics.KindUint64 {
			*out[i] = sample.Value.Uint64()
		}
	}
	return v
}

// dataDirCache keeps the last walk (one data dir per process in
// production; tests with several brokers only walk more often) and the walk
// in progress, if any: at most one runs at a time, on its own goroutine.
var dataDirCache struct {
	mu      sync.Mutex
	last    *DataDirUsage
	running chan struct{} // closed when the walk in progress ends
}

// dataDirUsage answers the last walk of dir if it is recent enough. Else it
// starts a walk (unless one runs) and, with wait, waits for it (at most
// dataDirWalkBudget); without wait it answers the last walk of dir, stale,
// or nil before the first one.
func dataDirUsage(dir string, now time.Time, wait bool) *DataDirUsage {
	c := &dataDirCache
	c.mu.Lock()
	last := c.last
	if last != nil && last.dir == dir && now.Sub(last.walked) < dataDirWalkMaxAge {
		c.mu.Unlock()
		return last
	}
	done := c.running
	if done == nil {
		done = make(chan struct{})
		c.running = done
		go func() {
			u := walkDataDir(dir, dataDirWalkEntriesMax, dataDirWalkBudget)
			c.mu.Lock()
			c.last, c.running = u, nil
			c.mu.Unlock()
			close(done)
		}()
	}
	c.mu.Unlock()
	if !wait {
		if last != nil && last.dir == dir {
			return last
		}
		return nil
	}
	<-done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && c.last.dir == dir {
		return c.last
	}
	return nil // the walk that ran was of another broker's dir (tests)
}

// walkDataDir sums the sizes of dir's files, per top-level entry, visiting
// at most entriesMax entries within budget. Entries that vanish or cannot
// be read meanwhile (a queue deleted during the walk) are skipped.
func walkDataDir(dir string, entriesMax int, budget time.Duration) *DataDirUsage {
	started := time.Now()
	u := &DataDirUsage{Method: "walk", Complete: true, dir: dir, walked: started, WalkedAtMs: started.UnixMilli()}
	parts := map[string]*DataDirPart{}
	visited := 0
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && path != dir {
				return fs.SkipDir
			}
			return nil
		}
		visited++
		if visited > entriesMax || (visited%1024 == 0 && time.Since(started) > budget) {
			u.Complete = false
			return fs.SkipAll
		}
		if path == dir {
			return nil
		}
		if d.IsDir() {
			u.Dirs++
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		top := rel
		if i := indexSep(rel); i >= 0 {
			top = rel[:i]
		}
		p := parts[top]
		if p == nil {
			p = &DataDirPart{Name: top}
			parts[top] = p
		}
		size := uint64(max(info.Size(), 0))
		p.Bytes += size
		p.Files++
		u.Bytes += size
		u.Files++
		return nil
	})
	u.WalkUs = time.Since(started).Microseconds()
	u.Parts = topParts(parts)
	return u
}

func indexSep(rel string) int {
	for i := 0; i < len(rel); i++ {
		if rel[i] == filepath.Separator {
			return i
		}
	}
	return -1
}

// topParts orders the parts by bytes (then name) and folds those past
// dataDirPartsMax into "(other)".
func topParts(parts map[string]*DataDirPart) []DataDirPart {
	out := make([]DataDirPart, 0, len(parts))
	for _, p := range parts {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Name < out[j].Name
	})
	if len(out) > dataDirPartsMax {
		other := DataDirPart{Name: "(other)"}
		for _, p := range out[dataDirPartsMax-1:] {
			other.Bytes += p.Bytes
			other.Files += p.Files
		}
		out = append(out[:dataDirPartsMax-1], other)
	}
	return out
}
