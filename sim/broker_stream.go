package sim

import (
	"errors"
	"fmt"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/mutant"
	"github.com/fibril-go/fibril/storage"
)

// The broker's stream partitions: the plumbing io/broker does for a
// StreamHost, as for a queue Host (core/node doc.go, docs/streams.md
// "Through the node"). Policy stays in the core; the driver loads the
// partition's storage.Log (stream.Load, or stream.NewPartition for a log
// with nothing in it), steps the StreamHost, persists its entries through
// the same Planner rounds as the queues, answers each Read with
// Log.ReadEntries as an event of its own, and carries out a truncation
// with the Planner's snapshot (SaveSnapshot). Invariants:
//   - ReadEntries runs on the event loop only while no round's worker is
//     inside the Log (the Log is used by one goroutine at a time, between
//     its other calls): a read due during a round waits for its end;
//   - a read's answer goes to the StreamHost that asked, in its own event,
//     and a read of an older incarnation or host is dropped (the host asks
//     again after a restart);
//   - a corrupt read is a storage fault: the process fails and recovers, as
//     for a payload read.

type brokerStreamHost struct {
	queue     core.QueueID
	m         *node.StreamHost
	wake      wakeTimer
	shadow    *streamShadow
	coreNowMs int64
	// subs are the subscriptions after the last step (sorted), so the
	// driver records the ones a step ended.
	subs []uint64
	// pendingSub is the Subscribe of the step being taken (recording).
	pendingSub *stream.Subscribe
	// reads in flight and the last time a record was handed out, for the
	// end of the run.
	readsInFlight    int
	lastDeliveryAtMs int64
}

// streamShadow is what the driver knows of one stream partition across
// restarts.
type streamShadow struct {
	queue            core.QueueID
	part             int
	appended, synced uint64
	// maxAtMs is the latest publish time a record of the partition was
	// stamped with (the clock floor at the next load, see loadStream).
	maxAtMs int64
	// durableRec is the durable index last recorded (KindStreamDurable).
	durableRec uint64
}

func (b *Broker) streamShadowOf(q core.QueueID) *streamShadow {
	ss := b.streamParts[q]
	if ss == nil {
		ss = &streamShadow{queue: q, part: b.w.streamPart(q)}
		b.streamParts[q] = ss
	}
	return ss
}

// loadStream opens a stream partition's storage, recovers it and starts
// its StreamHost, then answers LoadDone.
func (b *Broker) loadStream(req node.LoadRequest) {
	q := req.Queue
	if b.streams[q] != nil {
		b.stepNode(&node.LoadDone{NowMs: b.nowMs(), Queue: q}, "load_done")
		return
	}
	if b.w.phase == phaseSafety && b.rng.Chance(b.w.faults.LoadFailRatio) {
		b.stats.LoadFails++
		b.w.fault("load-failure", "load of stream %s fails on broker %d", q, b.id)
		b.stepNode(&node.LoadDone{NowMs: b.nowMs(), Queue: q, Err: errLoadFault}, "load_done")
		return
	}
	ss := b.streamShadowOf(q)
	p, cut, err := b.store.openStreamPartition(ss, req)
	if err != nil {
		b.stepNode(loadFailed(b.nowMs(), q, err), "load_done")
		return
	}
	m, err := node.NewStreamHost(b.cfg, p, req)
	if err != nil {
		b.w.abort(fmt.Sprintf("broker %d: NewStreamHost refuses stream %s: %v", b.id, q, err))
		return
	}
	sh := &brokerStreamHost{queue: q, m: m, shadow: ss, lastDeliveryAtMs: b.w.nowMs}
	b.store.bindStream(sh)
	b.streams[q] = sh
	b.streamOrder = append(b.streamOrder, sh)
	// The first step carries the clock as it is, even behind the publish
	// times recovered: core/stream stamps a new record no earlier than the
	// one it follows (it once did not: streams seed 265 --swarm).
	b.stepStream(sh, &node.Tick{NowMs: b.nowMs()}, "load")
	if b.up && b.streams[q] == sh {
		b.stepNode(&node.LoadDone{NowMs: b.nowMs(), Queue: q, Cut: cut}, "load_done")
	}
}

func (b *Broker) stepStream(sh *brokerStreamHost, in node.Input, trigger string) {
	if !b.up || b.maybeCrash() {
		return
	}
	b.stats.Steps++
	sh.coreNowMs = max(sh.coreNowMs, b.nowMs())
	oldestBefore := sh.m.Partition().Oldest()
	rd := sh.m.Step(in)
	if b.w.checkInvariants {
		if err := sh.m.CheckInvariants(); err != nil {
			b.w.abort(fmt.Sprintf("stream host %s invariant broken on broker %d after %s: %v", sh.queue, b.id, trigger, err))
			return
		}
	}
	b.recordStreamEffects(sh, rd, in, oldestBefore)
	b.apply(node.PartitionAddr(sh.queue), rd, nil, sh)
	b.scheduleWake(&sh.wake, rd.WakeMs, func() {
		if b.streams[sh.queue] == sh {
			b.stepStream(sh, &node.Tick{NowMs: b.nowMs()}, "tick")
		}
	})
}

// applyStream carries out a StreamHost's storage effects: its entries go
// to the Planner, its truncation to the Planner's snapshot, its Reads to
// the Log.
func (b *Broker) applyStream(sh *brokerStreamHost, rd *node.Ready) {
	if len(rd.PersistEntries) > 0 {
		b.store.appendStream(sh, rd.PersistEntries)
	}
	if rd.Snapshot != nil {
		b.store.truncateStream(sh, *rd.Snapshot)
	}
	for _, r := range rd.Reads {
		sh.readsInFlight++
		b.later(b.rng.RangeInt64(0, 3), func() { b.serveRead(sh, r) })
	}
}

// serveRead answers one Read from the Log, once no round is inside it.
func (b *Broker) serveRead(sh *brokerStreamHost, r node.StreamRead) {
	if b.streams[sh.queue] != sh {
		return
	}
	s := b.store
	if s.fs.gate.active {
		b.later(1, func() { b.serveRead(sh, r) })
		return
	}
	st := s.parts[sh.queue]
	sh.readsInFlight--
	// Production caps a read's payload bytes (io/broker streamReadBytesMax),
	// so answers come back short of MaxEntries; a quarter of the reads here
	// are capped small to give the core short answers too.
	readBytesMax := 1 << 20
	if b.rng.Chance(0.25) {
		readBytesMax = int(b.rng.RangeInt64(0, 2048))
	}
	entries, err := st.log.ReadEntries(r.FromIndex, r.MaxEntries, readBytesMax)
	done := &node.StreamReadDone{NowMs: b.nowMs(), Token: r.Token, Entries: entries}
	switch {
	case err == nil:
	case errors.Is(err, storage.ErrCompacted):
		// Retention dropped the entries after the host asked: the core
		// retries (and its clamp moves the subscription on).
		done.Entries, done.Err = nil, core.ErrStorageBehind
	default:
		b.stats.ReadFaults++
		b.crash(fmt.Sprintf("stream read of %s from index %d failed: %v", sh.queue, r.FromIndex, err), false)
		return
	}
	b.stepStream(sh, done, "read_done")
}

// routeStreamDeliveries checks a StreamDeliveries on its way to a session
// (stream records are never stored refs) and applies the driver-level
// mutants that break its routing.
func (b *Broker) routeStreamDeliveries(env node.Envelope) {
	ds, ok := env.Msg.(*node.StreamDeliveries)
	if !ok {
		return
	}
	for i := range ds.Items {
		assert(ds.Items[i].Body == nil || !ds.Items[i].Body.IsStored(), "stream records reach sessions with their payloads")
		if mutant.On(mutant.StreamSpeculativeFlagLost) {
			// Broken on purpose: the record reaches the session unflagged.
			ds.Items[i].Speculative = false
		}
	}
	if n := len(ds.Items); n >= 3 {
		switch {
		case mutant.On(mutant.StreamDropDelivery):
			// Broken on purpose: the driver loses a record of the batch.
			ds.Items = append(ds.Items[:1:1], ds.Items[2:]...)
		case mutant.On(mutant.StreamReorderDeliveries):
			// Broken on purpose: two records of the batch swap places.
			ds.Items[0], ds.Items[1] = ds.Items[1], ds.Items[0]
		}
	}
}

// openStreamPartition recovers one stream partition from its Log.
func (s *brokerStore) openStreamPartition(ss *streamShadow, req node.LoadRequest) (*stream.Partition, *node.LoadCut, error) {
	dir := partsDir + "/" + partDirName(ss.queue)
	s.recoveryFaults()
	l, rec, err := storage.Open(s.env, dir, openOptions(req.Truncate))
	s.setFaults()
	if err != nil {
		return nil, nil, err
	}
	var p *stream.Partition
	if rec.Snapshot == nil && len(rec.Entries) == 0 {
		p, err = stream.NewPartition(req.StreamConfig, req.Stream)
	} else {
		p, err = stream.Load(req.StreamConfig, rec.Snapshot, rec.Entries)
	}
	if err != nil {
		l.Close()
		s.b.w.abort(fmt.Sprintf("broker %d recovery of stream %s: %v", s.b.id, ss.queue, err))
		return nil, nil, err
	}
	st := &partStore{queue: ss.queue, log: l, planner: storage.NewPlanner(simStorageOptions(), l.LastIndex(), l.SnapshotIndex())}
	if old := s.parts[ss.queue]; old != nil {
		s.dropPart(old)
	}
	s.parts[ss.queue] = st
	s.partOrder = append(s.partOrder, st)
	s.b.recordStreamRecovery(ss, p)
	return p, cutOf(rec), nil
}

func (s *brokerStore) bindStream(sh *brokerStreamHost) {
	if st := s.parts[sh.queue]; st != nil {
		st.stream = sh
	}
}

func (s *brokerStore) appendStream(sh *brokerStreamHost, entries []core.Entry) {
	ss := sh.shadow
	for i := range entries {
		assert(entries[i].Index == ss.appended+1, "a StreamHost hands out contiguous indexes")
		ss.appended = entries[i].Index
	}
	st := s.parts[sh.queue]
	assert(st != nil, "a loaded StreamHost has its storage open")
	if !st.planner.HasRoom(len(entries)) {
		s.b.w.abort(fmt.Sprintf("broker %d %s: the storage planner has no room for %d entries (PendingEntriesMax)", s.b.id, sh.queue, len(entries)))
		return
	}
	st.planner.Submit(entries, s.nowNs())
	if mutant.On(mutant.StreamPersistedOnSubmit) {
		// Broken on purpose: the driver reports the entries durable as it
		// hands them to storage, before any fsync.
		b, upTo := s.b, ss.appended
		b.later(0, func() {
			if b.streams[sh.queue] == sh {
				b.stepStream(sh, &node.Persisted{NowMs: b.nowMs(), UpToIndex: upTo}, "persisted")
			}
		})
	}
	s.wantRound()
}

// truncateStream hands a StreamHost's truncation to its Planner: the
// snapshot is saved (and the entries up to it dropped) by the round that
// takes it, and SnapshotDone follows its report.
func (s *brokerStore) truncateStream(sh *brokerStreamHost, req node.SnapshotRequest) {
	st := s.parts[sh.queue]
	err := st.planner.RequestSnapshot(storage.SnapshotRequest{Index: req.Index, Data: append([]byte(nil), req.Data...)})
	if err != nil {
		b := s.b
		b.later(0, func() {
			if b.streams[sh.queue] == sh {
				b.stepStream(sh, &node.SnapshotDone{NowMs: b.nowMs(), Index: req.Index, Err: err}, "snapshot_done")
			}
		})
		return
	}
	s.b.stats.Snapshots++
	s.wantRound()
}

// carryOutStreamReport feeds one round report to its StreamHost.
func (s *brokerStore) carryOutStreamReport(r roundReport, sh *brokerStreamHost) {
	b := s.b
	if r.snapshot {
		b.later(0, func() {
			if b.streams[sh.queue] == sh {
				b.stepStream(sh, &node.SnapshotDone{NowMs: b.nowMs(), Index: r.snapIdx}, "snapshot_done")
			}
		})
		return
	}
	if r.upTo > sh.shadow.synced {
		sh.shadow.synced = r.upTo
	}
	b.later(0, func() {
		if b.streams[sh.queue] == sh {
			b.stepStream(sh, &node.Persisted{NowMs: b.nowMs(), UpToIndex: r.upTo}, "persisted")
		}
	})
}

// streamQuiet says a stream partition has nothing left to do for the end
// of the run: everything written is durable, no read is in flight, and
// nothing was handed out for a while (every subscriber caught up).
func (sh *brokerStreamHost) streamQuiet(nowMs int64) bool {
	return sh.shadow.appended == sh.shadow.synced && sh.readsInFlight == 0 && nowMs-sh.lastDeliveryAtMs >= streamQuietMs
}

// streamQuietMs is how long no stream record may be handed out before the
// run counts the subscribers as caught up.
const streamQuietMs = 1000

// recordStreamFinal records each stream partition's end (a drained run):
// the checker then holds every live subscription to every record.
func (b *Broker) recordStreamFinal() {
	for _, sh := range b.streamOrder {
		b.w.rec.add(checker.Event{Kind: checker.KindStreamFinal, Node: b.id, Part: sh.shadow.part,
			Offset: sh.m.Partition().NextOffset(), NowMs: sh.coreNowMs})
	}
}
