package sim

import (
	"errors"
	"fmt"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// A broker's storage and its group commit: the Node's record log and one
// log per partition, written in rounds. Invariants:
//   - appends reach the logs in Ready order; a round takes everything
//     appended so far, and Persisted reaches a machine only for indexes a
//     completed sync covered, after that sync returned;
//   - one round is in flight at a time; appends made meanwhile wait for the
//     next one, which starts at most GroupCommitWindowMs later;
//   - a snapshot is written only once every entry up to its index is
//     durable, then answered with SnapshotDone;
//   - a failed sync fails the process (the kernel may have dropped the dirty
//     pages: fsyncgate), so the broker crashes and recovers from the disk.
type brokerStore struct {
	b     *Broker
	disk  *memDisk
	round roundState
	// snapshots wait for their index to be durable, in request order.
	snapshots []pendingSnapshot
}

type roundState struct {
	scheduled bool
	inFlight  bool
	dirty     bool // appends since the round in flight started
}

type pendingSnapshot struct {
	from node.Address
	host *brokerHost
	req  node.SnapshotRequest
}

func newBrokerStore(b *Broker) *brokerStore {
	return &brokerStore{b: b, disk: newMemDisk()}
}

// openNodeLog recovers the Node's log: its snapshot and the records after it.
func (s *brokerStore) openNodeLog() ([]byte, []node.Record, error) {
	s.round = roundState{}
	s.snapshots = nil
	return s.disk.recoverNode()
}

// openPartition recovers one partition and checks the recovered state
// against the state derived from the durable prefix of what was written
// (DESIGN.md item 10), recording both hashes for the checker.
func (s *brokerStore) openPartition(ps *partShadow, cfg core.Config) (*core.Partition, error) {
	snap, entries, err := s.disk.recoverPartition(ps.queue)
	if err != nil {
		return nil, err
	}
	p, err := core.Recover(cfg, snap, entries)
	if err != nil {
		s.b.w.abort(fmt.Sprintf("broker %d recovery of %s: %v", s.b.id, ps.queue, err))
		return nil, err
	}
	recoveredIndex := p.LastIndex()
	want := "beyond-written"
	if recoveredIndex <= uint64(len(ps.shadow)) {
		expected, err := core.Recover(cfg, nil, ps.shadow[:recoveredIndex])
		if err != nil {
			want = "unrecoverable: " + err.Error()
		} else {
			// Which payloads sit in storage rather than in memory is not
			// partition state (a snapshot keeps the refs it had): give the
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
	nextOffset := p.NextOffset()
	if nextOffset < uint64(len(ps.msgIDs)) {
		ps.msgIDs = ps.msgIDs[:nextOffset]
	}
	ps.appended, ps.synced = recoveredIndex, recoveredIndex
	return p, nil
}

func (s *brokerStore) appendNode(records []node.Record) {
	s.disk.appendNode(records)
	s.wantRound()
}

func (s *brokerStore) appendPartition(h *brokerHost, entries []core.Entry) {
	ps := h.shadow
	for i := range entries {
		assert(entries[i].Index == ps.appended+1, "a Host hands out contiguous indexes")
		ps.appended = entries[i].Index
		ps.shadow = append(ps.shadow, entries[i])
	}
	s.disk.appendPartition(h.queue, entries)
	s.wantRound()
}

func (s *brokerStore) wantRound() {
	if s.round.scheduled || s.round.inFlight {
		s.round.dirty = true
		return
	}
	s.round.scheduled = true
	s.b.later(s.b.rng.RangeInt64(0, s.b.w.faults.GroupCommitWindowMs), s.startRound)
}

// startRound captures what the round covers, then completes after the
// fsync latency.
func (s *brokerStore) startRound() {
	if s.b.maybeCrash() {
		return
	}
	s.round = roundState{inFlight: true}
	marks := s.disk.marks()
	s.b.later(s.b.rng.RangeInt64(s.b.w.faults.FsyncLatencyMinMs, s.b.w.faults.FsyncLatencyMaxMs), func() {
		s.finishRound(marks)
	})
}

func (s *brokerStore) finishRound(marks diskMarks) {
	b := s.b
	if b.maybeCrash() {
		return
	}
	if b.w.phase == phaseSafety && b.rng.Chance(b.w.faults.FsyncErrorRatio) {
		b.w.fault("fsync error on broker %d", b.id)
		s.disk.fsyncLost(b.rng)
		b.crash("fsync failed", false)
		return
	}
	s.disk.sync(marks)
	for _, ps := range b.sortedShadows() {
		if m, ok := marks.parts[ps.queue]; ok && m > ps.synced {
			ps.synced = m
		}
	}
	s.round.inFlight = false
	if b.rng.Chance(b.w.faults.CrashAfterFsyncRatio) {
		b.crash("after an fsync, before Persisted", b.rng.Chance(b.w.faults.PowerLossRatio))
		return
	}
	now := b.nowMs()
	if marks.node > 0 {
		upTo := marks.node
		b.later(0, func() { b.stepNode(&node.Persisted{NowMs: b.nowMs(), UpToIndex: upTo}, "persisted") })
	}
	for _, h := range b.hostOrder {
		upTo, ok := marks.parts[h.queue]
		if !ok || upTo == 0 {
			continue
		}
		stored := s.disk.storedSince(h.queue, upTo)
		h := h
		b.later(0, func() {
			if b.hosts[h.queue] == h {
				b.stepHost(h, &node.Persisted{NowMs: b.nowMs(), UpToIndex: upTo, Stored: stored,
					ResidentTotalBytes: b.residentTotal()}, "persisted")
			}
		})
	}
	_ = now
	s.writeSnapshots()
	if s.round.dirty || s.disk.dirty() {
		s.round.dirty = false
		s.wantRound()
	}
}

// snapshot queues a snapshot request until its index is durable.
func (s *brokerStore) snapshot(from node.Address, h *brokerHost, req node.SnapshotRequest) {
	req.Data = append([]byte(nil), req.Data...)
	s.snapshots = append(s.snapshots, pendingSnapshot{from: from, host: h, req: req})
	s.writeSnapshots()
}

func (s *brokerStore) writeSnapshots() {
	kept := s.snapshots[:0]
	for _, p := range s.snapshots {
		if !s.disk.durableUpTo(p.host, p.req.Index) {
			kept = append(kept, p)
			continue
		}
		err := s.disk.saveSnapshot(p.host, p.req)
		s.b.stats.Snapshots++
		p := p
		s.b.later(0, func() { s.snapshotDone(p, err) })
	}
	s.snapshots = kept
}

func (s *brokerStore) snapshotDone(p pendingSnapshot, err error) {
	b := s.b
	in := &node.SnapshotDone{NowMs: b.nowMs(), Index: p.req.Index, Err: err}
	if p.host == nil {
		b.stepNode(in, "snapshot_done")
	} else if b.hosts[p.host.queue] == p.host {
		b.stepHost(p.host, in, "snapshot_done")
	}
}

// readPayload reads a stored payload back, checking it (bit rot is caught
// by the checksum and is an error).
func (s *brokerStore) readPayload(q core.QueueID, ref core.PayloadRef) ([]byte, error) {
	if s.b.w.phase == phaseSafety && s.b.rng.Chance(s.b.w.faults.BitRotRatio) {
		s.b.w.fault("bit rot reading %s file %d on broker %d", q, ref.File, s.b.id)
		return nil, errBitRot
	}
	return s.disk.readPayload(q, ref)
}

var errBitRot = errors.New("sim: stored payload failed its checksum (bit rot)")

func (s *brokerStore) crash(powerLoss bool) {
	if powerLoss {
		s.disk.powerLoss(s.b.rng)
	}
	s.round = roundState{}
	s.snapshots = nil
}
