package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/storage"
	"github.com/fibril-go/fibril/storage/simfs"
	"github.com/fibril-go/fibril/storage/simwal"
)

// A broker's storage: the production storage package (its record log for
// the Node, its partition Log, its group-commit Planner, its blob files and
// PayloadReader) over storage/simwal on a simulated crashable filesystem.
// The simulator adds only timing: when a round starts, how long each fsync
// takes, and when the process dies. Invariants:
//   - appends reach storage in Ready order (Planner.Submit, and the record
//     log's pending records); Persisted reaches a machine only for what a
//     round reported durable, once the report was made;
//   - one round is in flight at a time, on a worker goroutine that strictly
//     alternates with the event loop (gatedFS); a crash during a round ends
//     the worker before the filesystem crashes;
//   - a process crash keeps the page cache (simfs.Crash); a power loss keeps
//     only what an fsync made durable, perhaps torn (simfs.PowerLoss);
//   - a storage error (a failed fsync, a refused recovery) fails the
//     process, which restarts and recovers from the disk.
type brokerStore struct {
	b   *Broker
	fs  *gatedFS
	env storage.Env

	nodeLog     *storage.RecordLog
	nodePending []storage.Record // appended by the Node, not yet in a round
	nodeSnaps   []pendingSnapshot
	parts       map[core.QueueID]*partStore
	partOrder   []*partStore
	// recovered is what each partition's last recovery gave (for Wrap).
	recovered map[core.QueueID]storage.Recovered

	round roundState
	// reports are what the round's worker reported, to be carried out by
	// the event loop when the worker next blocks or finishes.
	reports  []roundReport
	roundErr error
}

type partStore struct {
	queue   core.QueueID
	host    *brokerHost
	stream  *brokerStreamHost // a stream partition's host (host is nil)
	log     *storage.Log
	planner *storage.Planner
	reader  *storage.PayloadReader // nil for a stream partition (no blob payloads)
	buf     []core.Entry
}

type roundState struct {
	scheduled bool
	inFlight  bool
	dirty     bool // appends since the round in flight started
	// noBitRot: the round in flight truncates a stream (see startRound);
	// setFaults keeps bit rot off until it ends, whatever opens meanwhile.
	noBitRot bool
}

type pendingSnapshot struct {
	from node.Address
	host *brokerHost
	req  node.SnapshotRequest
}

// roundReport is one durability report of a round.
type roundReport struct {
	part     *partStore // nil: the Node's log
	upTo     uint64
	stored   []storage.StoredPayload
	snapshot bool // the partition's snapshot request was written
	snapIdx  uint64
}

// simStorageOptions are the partition Log options in the simulator: small
// segments and blob files, so rolls, blob rotation and truncation happen
// in short runs.
func simStorageOptions() storage.Options {
	o := storage.DefaultOptions()
	o.SegmentSizeBytes = 16 << 10
	o.BlobFileSizeBytes = 32 << 10
	o.BlobPayloadBytesMin = 256
	o.PendingEntriesMax = 1 << 20
	return o
}

// simRecordLogOptions: the Node's log with small segments. Both logs keep
// production's CorruptionRefuse: a refused recovery fails the load (the
// Node retries it) or the boot (the process retries it).
func simRecordLogOptions() storage.RecordLogOptions {
	o := storage.DefaultRecordLogOptions()
	o.SegmentSizeBytes = 16 << 10
	return o
}

// partsDir holds one directory per partition; storage.Open makes it (and
// must make it durable: a power loss once took whole logs with an unsynced
// grandparent entry).
const partsDir = "/data/partitions"

func newBrokerStore(b *Broker) *brokerStore {
	fs := newGatedFS()
	return &brokerStore{b: b, fs: fs, env: storage.Env{FS: fs, OpenSegmentLog: simwal.Opener(fs)},
		parts: map[core.QueueID]*partStore{}}
}

// setFaults arms the filesystem's faults for the current phase. A failed
// fsync drops the dirty pages at once (FsyncErrorKeepsPagesRatio 0): pages
// kept readable but never written would let a later power loss punch a
// hole under records already read back and synced by recovery, which no
// storage survives.
func (s *brokerStore) setFaults() {
	if s.round.inFlight && s.round.noBitRot {
		// A partition opening while a stream truncation runs must not
		// switch bit rot back on under it (streams seed 920, swarm: four
		// queue partitions loaded mid-round did, and the truncation wrote
		// a flipped bit to disk).
		s.recoveryFaults()
		return
	}
	f := &s.b.w.faults
	s.fs.SetFaults(simfs.Faults{FsyncErrorRatio: f.FsyncErrorRatio, BitRotRatio: f.BitRotRatio}, s.b.rng)
}

// recoveryFaults arms the faults while storage recovers: no bit rot. A
// flipped bit read back in the last record of a log looks exactly like a
// torn tail, and recovery trims it, durable or not (found by this
// simulator: power-loss seed 111 in swarm mode lost a confirmed publish;
// reported to storage). Bit rot is injected on payload reads and while
// rounds run.
func (s *brokerStore) recoveryFaults() {
	s.fs.SetFaults(simfs.Faults{FsyncErrorRatio: s.b.w.faults.FsyncErrorRatio}, s.b.rng)
}

// openNodeLog recovers the Node's log: its snapshot and the records after it.
func (s *brokerStore) openNodeLog() ([]byte, []node.Record, error) {
	s.round, s.reports, s.roundErr = roundState{}, nil, nil
	s.nodePending, s.nodeSnaps = nil, nil
	s.parts, s.partOrder = map[core.QueueID]*partStore{}, nil
	s.recoveryFaults()
	rl, rec, err := storage.OpenRecordLog(s.env, "/data/node", simRecordLogOptions())
	s.setFaults()
	if err != nil {
		return nil, nil, err
	}
	s.nodeLog = rl
	records := make([]node.Record, len(rec.Records))
	for i, r := range rec.Records {
		records[i] = node.Record{Index: r.Index, Data: r.Data}
	}
	return rec.Snapshot, records, nil
}

// openPartition recovers one partition and checks the recovered state
// against the state derived from the durable prefix of what was written
// (DESIGN.md item 10), recording both hashes for the checker.
// truncate is LoadRequest.Truncate (broker_quarantine.go); the cut it
// made, if any, comes back for LoadDone.Cut.
func (s *brokerStore) openPartition(ps *partShadow, cfg core.Config, truncate bool) (*core.Partition, *node.LoadCut, error) {
	dir := partsDir + "/" + partDirName(ps.queue)
	s.recoveryFaults()
	l, rec, err := storage.Open(s.env, dir, openOptions(truncate))
	s.setFaults()
	if err != nil {
		return nil, nil, err
	}
	p, err := core.Recover(cfg, rec.Snapshot, rec.Entries)
	if err != nil {
		// The shadow checks say the log is what was written: a log core
		// recovery refuses here is a defect, not damage.
		s.b.w.abort(fmt.Sprintf("broker %d recovery of %s: %v", s.b.id, ps.queue, err))
		return nil, nil, err
	}
	st := &partStore{queue: ps.queue, log: l, planner: storage.NewPlanner(simStorageOptions(), l.LastIndex(), l.SnapshotIndex()),
		reader: storage.NewPayloadReader(s.env.FS, dir)}
	if old := s.parts[ps.queue]; old != nil {
		s.dropPart(old)
	}
	s.parts[ps.queue] = st
	s.partOrder = append(s.partOrder, st)
	ps.loads++
	if s.b.w.wrapFn != nil {
		if s.recovered == nil {
			s.recovered = map[core.QueueID]storage.Recovered{}
		}
		s.recovered[ps.queue] = rec
	}
	s.recordRecovery(ps, cfg, p)
	return p, cutOf(rec), nil
}

func snapshotHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func partDirName(q core.QueueID) string {
	return fmt.Sprintf("%s~%s~%d", q.Topic, q.Group, q.Partition)
}

func (s *brokerStore) recordRecovery(ps *partShadow, cfg core.Config, p *core.Partition) {
	recoveredIndex := p.LastIndex()
	want := "beyond-written"
	if recoveredIndex <= uint64(len(ps.shadow)) {
		expected, err := core.Recover(cfg, nil, ps.shadow[:recoveredIndex])
		if err != nil {
			want = "unrecoverable: " + err.Error()
		} else {
			// Which payloads sit in storage rather than in memory is not
			// partition state (recovery and snapshots keep refs): give the
			// derived state the same refs before comparing.
			for offset := uint64(0); offset < p.NextOffset(); offset++ {
				if v, ok := p.Message(offset); ok && v.Body != nil && v.Body.IsStored() {
					expected.SpillBody(offset, v.Body.Ref)
				}
			}
			want = snapshotHash(expected.Snapshot())
		}
		ps.shadow = ps.shadow[:recoveredIndex]
	}
	s.b.w.rec.add(checker.Event{Kind: checker.KindRecover, Node: s.b.id, Part: ps.part, Index: recoveredIndex,
		Index2: ps.synced, GotHash: snapshotHash(p.Snapshot()), WantHash: want})
	if nextOffset := p.NextOffset(); nextOffset < uint64(len(ps.msgIDs)) {
		ps.msgIDs = ps.msgIDs[:nextOffset]
	}
	ps.appended, ps.synced = recoveredIndex, recoveredIndex
}

// bind ties a loaded Host to its partition's storage.
func (s *brokerStore) bind(h *brokerHost) {
	if st := s.parts[h.queue]; st != nil {
		st.host = h
	}
}

func (s *brokerStore) dropPart(st *partStore) {
	if st.reader != nil {
		st.reader.Close()
	}
	st.log.Close()
	delete(s.parts, st.queue)
	for i, x := range s.partOrder {
		if x == st {
			s.partOrder = append(s.partOrder[:i], s.partOrder[i+1:]...)
			break
		}
	}
}

func (s *brokerStore) appendNode(records []node.Record) {
	for _, r := range records {
		s.nodePending = append(s.nodePending, storage.Record{Index: r.Index, Data: append([]byte(nil), r.Data...)})
	}
	s.wantRound()
}

func (s *brokerStore) appendPartition(h *brokerHost, entries []core.Entry) {
	ps := h.shadow
	for i := range entries {
		assert(entries[i].Index == ps.appended+1, "a Host hands out contiguous indexes")
		ps.appended = entries[i].Index
		ps.shadow = append(ps.shadow, entries[i])
	}
	st := s.parts[h.queue]
	assert(st != nil, "a loaded Host has its storage open")
	if !st.planner.HasRoom(len(entries)) {
		s.b.w.abort(fmt.Sprintf("broker %d %s: the storage planner has no room for %d entries (PendingEntriesMax)", s.b.id, h.queue, len(entries)))
		return
	}
	st.planner.Submit(entries, s.nowNs())
	s.wantRound()
}

func (s *brokerStore) nowNs() int64 { return s.b.w.nowMs * 1_000_000 }

// wantRound starts a round within the group-commit window, or marks that
// one is wanted after the round in flight.
func (s *brokerStore) wantRound() {
	if s.round.scheduled || s.round.inFlight {
		s.round.dirty = true
		return
	}
	s.round.scheduled = true
	s.b.later(s.b.rng.RangeInt64(0, s.b.w.faults.GroupCommitWindowMs), s.startRound)
}

// startRound hands every pending append to a worker that writes and syncs
// them through storage; its fsyncs block on the gate.
func (s *brokerStore) startRound() {
	if s.b.maybeCrash() {
		return
	}
	var jobs []roundJob
	nowNs := s.nowNs()
	waitNs := int64(-1)
	for _, st := range s.partOrder {
		// The planner decides: a queue of only deferrable entries (settles,
		// leases) waits a little for a publish to share its fsync.
		due, wait := st.planner.RoundDue(nowNs, false)
		if !due {
			if !st.planner.Idle() && (waitNs < 0 || wait < waitNs) {
				waitNs = wait
			}
			continue
		}
		round, snap := st.planner.TakeRound(st.buf[:0], nowNs, st.log.LastIndex())
		st.buf = round
		jobs = append(jobs, roundJob{st: st, round: round, snap: snap})
	}
	if len(jobs) == 0 && len(s.nodePending) == 0 {
		s.round.scheduled = false
		if waitNs >= 0 {
			s.round.scheduled = true
			s.b.later(max(1, (waitNs+999_999)/1_000_000), s.startRound)
		}
		return
	}
	s.round = roundState{inFlight: true}
	nodeRecords := s.nodePending
	s.nodePending = nil
	for _, j := range jobs {
		if j.snap != nil && j.st.stream != nil {
			// No bit rot while a stream truncation runs: SaveSnapshot's
			// TruncateFront (storage/simwal) copies the rest of a segment
			// it read back without checking its records, so a flipped bit
			// in that read is written to disk and the log never recovers
			// (streams seed 765, swarm; reported to storage). Queue
			// snapshots keep it, as before.
			s.round.noBitRot = true
		}
	}
	s.setFaults()
	s.awaitWorker(s.fs.gate.run(func() { s.runRound(nodeRecords, jobs) }))
}

// roundJob is one partition's share of a round.
type roundJob struct {
	st    *partStore
	round []core.Entry
	snap  *storage.SnapshotRequest
}

// runRound is the round's worker: the Node's records, then each
// partition's round through the Planner; its fsyncs block on the gate.
func (s *brokerStore) runRound(nodeRecords []storage.Record, jobs []roundJob) {
	if len(nodeRecords) > 0 {
		if err := s.nodeLog.Append(nodeRecords); err != nil {
			s.roundErr = err
			return
		}
		if err := s.nodeLog.Sync(); err != nil {
			s.roundErr = err
			return
		}
		s.reports = append(s.reports, roundReport{upTo: nodeRecords[len(nodeRecords)-1].Index})
	}
	for _, j := range jobs {
		st := j.st
		_, err := st.planner.WriteRound(st.log, j.round, j.snap, func(upTo uint64, stored []storage.StoredPayload, _ storage.RoundStats) {
			s.reports = append(s.reports, roundReport{part: st, upTo: upTo, stored: stored})
		})
		if err != nil {
			s.roundErr = err
			return
		}
		if j.snap != nil {
			s.reports = append(s.reports, roundReport{part: st, snapshot: true, snapIdx: j.snap.Index})
		}
	}
}

// awaitWorker carries out what the round's worker reported before it
// blocked in an fsync or finished (msg), and resumes a blocked worker after
// the fsync latency.
func (s *brokerStore) awaitWorker(msg gateMsg) {
	g := s.fs.gate
	s.carryOutReports()
	if msg == gateBlocked {
		ok := s.b.alive()
		s.b.w.after(s.b.rng.RangeInt64(s.b.w.faults.FsyncLatencyMinMs, s.b.w.faults.FsyncLatencyMaxMs), func() {
			if !ok() || !g.active {
				return // the process died; crash() ended the worker
			}
			if s.b.maybeCrash() {
				return
			}
			s.awaitWorker(g.resume(true))
		})
		return
	}
	g.active = false
	s.round.inFlight = false
	if err := s.roundErr; err != nil {
		s.roundErr = nil
		s.b.w.fault("storage-error", "storage round failed on broker %d: %v", s.b.id, err)
		s.b.crash("storage error", false)
		return
	}
	if s.b.rng.Chance(s.b.w.faults.CrashAfterFsyncRatio) {
		s.b.crash("after an fsync, before Persisted", s.b.rng.Chance(s.b.w.faults.PowerLossRatio))
		return
	}
	s.writeNodeSnapshots()
	if s.round.dirty || len(s.nodePending) > 0 || !s.allIdle() {
		s.round.dirty = false
		s.wantRound()
	}
}

func (s *brokerStore) allIdle() bool {
	for _, st := range s.partOrder {
		if !st.planner.Idle() {
			return false
		}
	}
	return true
}

// carryOutReports feeds each report to its machine, in an event of its
// own (the machines are stepped from the event loop only).
func (s *brokerStore) carryOutReports() {
	b := s.b
	reports := s.reports
	s.reports = nil
	for _, r := range reports {
		r := r
		if r.part == nil {
			b.later(0, func() { b.stepNode(&node.Persisted{NowMs: b.nowMs(), UpToIndex: r.upTo}, "persisted") })
			continue
		}
		h := r.part.host
		if h == nil {
			if sh := r.part.stream; sh != nil {
				s.carryOutStreamReport(r, sh)
			}
			continue
		}
		if r.snapshot {
			b.later(0, func() {
				if b.hosts[h.queue] == h {
					b.stepHost(h, &node.SnapshotDone{NowMs: b.nowMs(), Index: r.snapIdx}, "snapshot_done")
				}
			})
			continue
		}
		if r.upTo > h.shadow.synced {
			h.shadow.synced = r.upTo
		}
		stored := make([]node.StoredPayload, len(r.stored))
		for i, sp := range r.stored {
			stored[i] = node.StoredPayload{Offset: sp.Offset, Ref: sp.Ref}
		}
		b.later(0, func() {
			if b.hosts[h.queue] == h {
				b.stepHost(h, &node.Persisted{NowMs: b.nowMs(), UpToIndex: r.upTo, Stored: stored,
					ResidentTotalBytes: b.residentTotal()}, "persisted")
			}
		})
	}
}

// snapshot hands a Host's snapshot to its planner (written with the round
// that makes its index durable), or queues the Node's until its index is.
func (s *brokerStore) snapshot(from node.Address, h *brokerHost, req node.SnapshotRequest) {
	req.Data = append([]byte(nil), req.Data...)
	if h == nil {
		s.nodeSnaps = append(s.nodeSnaps, pendingSnapshot{from: from, req: req})
		s.writeNodeSnapshots()
		return
	}
	st := s.parts[h.queue]
	err := st.planner.RequestSnapshot(storage.SnapshotRequest{Index: req.Index, Data: req.Data, KeepBlobsFrom: req.KeepBlobsFrom})
	if err != nil {
		b := s.b
		b.later(0, func() {
			if b.hosts[h.queue] == h {
				b.stepHost(h, &node.SnapshotDone{NowMs: b.nowMs(), Index: req.Index, Err: err}, "snapshot_done")
			}
		})
		return
	}
	s.b.stats.Snapshots++
	s.wantRound()
}

func (s *brokerStore) writeNodeSnapshots() {
	kept := s.nodeSnaps[:0]
	for _, p := range s.nodeSnaps {
		if s.nodeLog.SyncedIndex() < p.req.Index {
			kept = append(kept, p)
			continue
		}
		err := s.nodeLog.SaveSnapshot(p.req.Index, p.req.Data)
		s.b.stats.Snapshots++
		idx := p.req.Index
		s.b.later(0, func() { s.b.stepNode(&node.SnapshotDone{NowMs: s.b.nowMs(), Index: idx, Err: err}, "snapshot_done") })
	}
	s.nodeSnaps = kept
}

// readPayload reads a stored payload back through the partition's
// PayloadReader (which checks it: bit rot is an error).
func (s *brokerStore) readPayload(q core.QueueID, ref core.PayloadRef) ([]byte, error) {
	st := s.parts[q]
	if st == nil {
		return nil, fmt.Errorf("sim: no storage open for %s", q)
	}
	payload, err := st.reader.Read(ref)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), payload...), nil
}

// busy says a round is scheduled, in flight or owed.
func (s *brokerStore) busy() bool {
	return s.round.scheduled || s.round.inFlight || len(s.nodePending) > 0 || len(s.nodeSnaps) > 0 || !s.allIdle()
}

// crash ends the process's storage: a round's worker blocked in an fsync
// is told the process died (and finishes), then the filesystem crashes or
// loses power.
func (s *brokerStore) crash(powerLoss bool) {
	g := s.fs.gate
	if g.active {
		for g.resume(false) != gateDone {
		}
		g.active = false
	}
	s.reports, s.roundErr = nil, nil
	if powerLoss {
		s.fs.PowerLoss()
	} else {
		s.fs.Crash()
	}
	s.round = roundState{}
	s.nodeLog, s.parts, s.partOrder, s.nodePending, s.nodeSnaps = nil, map[core.QueueID]*partStore{}, nil, nil, nil
}
