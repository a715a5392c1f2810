package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/broker"
)

// GET /admin/api/diagnostics through httptest: a fake broker's recovery
// ring, histograms and idle counters mapped to JSON, the data dir walked
// (bytes per top-level part, bounded, cached), a part that fails named in
// problems while the rest is answered, 503 before the attach and 501 for a
// broker without the observations.

type fakeDiagnostics struct {
	fakeQuarantine
	diag     broker.Diagnostics
	hist     []broker.Histogram
	debugErr error
}

func (f *fakeDiagnostics) Diagnostics() broker.Diagnostics { return f.diag }
func (f *fakeDiagnostics) Histograms() []broker.Histogram  { return f.hist }
func (f *fakeDiagnostics) ReconcileOutcomes() [node.ReconcileOutcomeCount]uint64 {
	return [node.ReconcileOutcomeCount]uint64{}
}

func (f *fakeDiagnostics) QueuesDebug(context.Context) (*node.QueuesDebug, error) {
	if f.debugErr != nil {
		return nil, f.debugErr
	}
	return &node.QueuesDebug{Cleanup: node.IdleCleanupConfig{Enabled: true, EvictAfterMs: 1000, SweepIntervalMs: 100},
		Counters: node.IdleCounters{Evicted: 4, Skipped: 9, Reloaded: 2}, PartitionsDeclared: 7, PartitionsMax: 9000}, nil
}

func writeFile(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDiagnosticsAnswersRecoveryStorageAndRuntime(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "node", "00000000000000000001"), 100)
	writeFile(t, filepath.Join(dir, "queues", "jobs", "0", "00000000000000000001"), 300)
	writeFile(t, filepath.Join(dir, "queues", "mail", "0", "00000000000000000001"), 200)
	writeFile(t, filepath.Join(dir, "users.json"), 7)

	s := newServerWith(quietLogger(), &Options{Info: Info{DataDir: dir}})
	if rec := do(t, s.Handler(), http.MethodGet, "/admin/api/diagnostics"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("before the attach: %d %s", rec.Code, rec.Body.String())
	}
	jobs := core.QueueID{Topic: "jobs", Partition: 0}
	src := &fakeDiagnostics{
		diag: broker.Diagnostics{
			Startup: broker.StartupRecovery{AtMs: 1000, ReadNs: 2_500_000, ReplayNs: 1_200_000, TotalNs: 9_000_000,
				SnapshotIndex: 40, SnapshotBytes: 512, Records: 17},
			Loads: []broker.PartitionLoad{
				{Queue: jobs, Kind: "queue", AtMs: 3000, DurationNs: 800_000, ReadNs: 300_000, Entries: 5, Repair: true,
					Cut: &node.LoadCut{Index: 5, DroppedRecords: 1}},
				{Queue: jobs, Kind: "queue", AtMs: 2000, DurationNs: 500_000, DamageKind: "checksum", DamageReason: "crc at index 5"},
				{Queue: core.QueueID{Topic: "mail"}, Kind: "queue", AtMs: 1500, Err: "open log: permission denied"},
			},
			LoadsTotal: 70, LoadsKept: 64,
		},
		hist: []broker.Histogram{
			{Name: broker.HistogramRoundSeconds, Count: 4, Sum: 0.010},
			{Name: broker.HistogramRoundEntries, Count: 4, Sum: 10},
		},
	}
	src.report = node.QuarantineReport{Entries: []node.QuarantineEntry{parkedJobs}}
	s.Attach(src)
	rec := do(t, s.Handler(), http.MethodGet, "/admin/api/diagnostics")
	if rec.Code != http.StatusOK {
		t.Fatalf("diagnostics: %d %s", rec.Code, rec.Body.String())
	}
	var v DiagnosticsView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Startup.DurationUs != 9000 || v.Startup.NodeLog.ReadUs != 2500 || v.Startup.NodeLog.ReplayUs != 1200 ||
		v.Startup.NodeLog.Records != 17 || v.Startup.NodeLog.SnapshotIndex != 40 || v.Startup.NodeLog.SnapshotBytes != 512 {
		t.Fatalf("startup %+v", v.Startup)
	}
	if v.Loads.Total != 70 || v.Loads.Kept != 64 || len(v.Loads.Recent) != 3 {
		t.Fatalf("loads %+v", v.Loads)
	}
	repaired, damaged, failed := v.Loads.Recent[0], v.Loads.Recent[1], v.Loads.Recent[2]
	if repaired.Outcome != "loaded" || !repaired.Repair || repaired.Cut == nil || repaired.Cut.DroppedRecords != 1 ||
		repaired.DurationUs != 800 || repaired.ReadUs != 300 || repaired.Entries != 5 || repaired.Damage != nil {
		t.Fatalf("the repairing load %+v", repaired)
	}
	if damaged.Outcome != "quarantined" || damaged.Damage == nil || damaged.Damage.Kind != "checksum" || damaged.Cut != nil {
		t.Fatalf("the damaged load %+v", damaged)
	}
	if failed.Outcome != "failed" || failed.Error == "" || failed.Topic != "mail" {
		t.Fatalf("the failed load %+v", failed)
	}
	if g := v.GroupCommit; g.Rounds != 4 || g.Entries != 10 || g.MeanRoundUs != 2500 || g.MeanEntriesPerRound != 2.5 {
		t.Fatalf("group commit %+v", g)
	}
	if v.Idle == nil || !v.Idle.Enabled || v.Idle.Counters != (QueuesDebugCounts{Evicted: 4, Skipped: 9, Reloaded: 2}) {
		t.Fatalf("idle %+v", v.Idle)
	}
	if v.Partitions == nil || *v.Partitions != (PartitionsView{Declared: 7, Max: 9000}) {
		t.Fatalf("partitions %+v", v.Partitions)
	}
	if v.Quarantined != 1 {
		t.Fatalf("quarantined %d, want 1", v.Quarantined)
	}
	u := v.Storage.DataDirUse
	if v.Storage.DataDir != dir || v.Storage.Filesystem == nil || v.Storage.Filesystem.TotalBytes == 0 || u == nil {
		t.Fatalf("storage %+v", v.Storage)
	}
	if u.Method != "walk" || !u.Complete || u.Bytes != 607 || u.Files != 4 || len(u.Parts) != 3 ||
		u.Parts[0] != (DataDirPart{Name: "queues", Bytes: 500, Files: 2}) || u.Parts[1].Name != "node" || u.Parts[2].Name != "users.json" {
		t.Fatalf("data dir usage %+v", u)
	}
	if v.Runtime.Goroutines <= 0 || v.Runtime.HeapBytes == 0 || v.Runtime.GoVersion == "" {
		t.Fatalf("runtime %+v", v.Runtime)
	}

	// The walk is kept for dataDirWalkMaxAge: a new file is not seen at
	// once.
	writeFile(t, filepath.Join(dir, "queues", "jobs", "0", "00000000000000000002"), 1000)
	rec = do(t, s.Handler(), http.MethodGet, "/admin/api/diagnostics")
	var again DiagnosticsView
	if err := json.Unmarshal(rec.Body.Bytes(), &again); err != nil || again.Storage.DataDirUse.Bytes != 607 {
		t.Fatalf("a second answer within the cache age walked again: %+v %v", again.Storage.DataDirUse, err)
	}

	// The Node does not answer: the idle part is null and named, the rest
	// is answered.
	src.debugErr = errors.New("node busy")
	rec = do(t, s.Handler(), http.MethodGet, "/admin/api/diagnostics")
	var partial DiagnosticsView
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &partial) != nil || partial.Idle != nil ||
		len(partial.Problems) != 1 || !strings.Contains(partial.Problems[0], "node busy") || partial.Startup.DurationUs != 9000 {
		t.Fatalf("without the Node: %d %s", rec.Code, rec.Body.String())
	}

	// A broker without the observations.
	other := newServer(quietLogger())
	other.Attach(&fakeSource{})
	wantJSONError(t, do(t, other.Handler(), http.MethodGet, "/admin/api/diagnostics"), http.StatusNotImplemented, "not_implemented")
}

// TestDataDirWalkIsBounded: past its entry cap the walk stops and says it
// is incomplete (its bytes a lower bound); the parts are capped with the
// rest folded into "(other)".
func TestDataDirWalkIsBounded(t *testing.T) {
	dir := t.TempDir()
	for i := range dataDirPartsMax + 4 {
		writeFile(t, filepath.Join(dir, "q"+string(rune('a'+i)), "f"), 10+i)
	}
	full := walkDataDir(dir, 1000, time.Minute)
	if !full.Complete || full.Files != uint64(dataDirPartsMax+4) || len(full.Parts) != dataDirPartsMax ||
		full.Parts[len(full.Parts)-1].Name != "(other)" || full.Parts[len(full.Parts)-1].Files != 5 {
		t.Fatalf("full walk %+v", full)
	}
	var sum uint64
	for _, p := range full.Parts {
		sum += p.Bytes
	}
	if sum != full.Bytes {
		t.Fatalf("the parts sum to %d, the total is %d", sum, full.Bytes)
	}
	cut := walkDataDir(dir, 5, time.Minute)
	if cut.Complete || cut.Files >= full.Files {
		t.Fatalf("a walk capped at 5 entries: %+v", cut)
	}
}
