package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
)

// Group commit, crashes and recovery. Invariants:
//   - one fsync is in flight at a time; appends made meanwhile wait for the
//     next one (group commit), which starts GroupCommitWindowMs later;
//   - Persisted{UpToIndex} is fed only for indexes the completed fsync
//     captured when it started;
//   - a crash can strike between any two steps, including after an fsync
//     completed and before Persisted was fed (CrashAfterFsyncRatio);
//   - recovery replays exactly the records the disk gives back, and the
//     recovered state must equal the state derived from what was written up
//     to the same index (DESIGN.md item 10), with at least every fsynced
//     entry recovered.

type syncState struct {
	gen       uint64 // bumps on crash: completions of a dead process are ignored
	scheduled bool
	inFlight  bool
	pending   bool
}

func (n *Node) wantSync() {
	if n.sync.scheduled || n.sync.inFlight {
		n.sync.pending = true
		return
	}
	n.sync.scheduled = true
	gen := n.sync.gen
	n.w.after(n.rng.RangeInt64(0, n.w.faults.GroupCommitWindowMs), func() {
		if gen == n.sync.gen {
			n.syncStart()
		}
	})
}

func (n *Node) syncStart() {
	if n.maybeCrash() {
		return
	}
	n.sync.scheduled, n.sync.inFlight, n.sync.pending = false, true, false
	position := n.disk.SyncStart()
	for _, ps := range n.parts {
		ps.syncingIndex = ps.appendedIndex
	}
	gen := n.sync.gen
	n.w.after(n.rng.RangeInt64(n.w.faults.FsyncLatencyMinMs, n.w.faults.FsyncLatencyMaxMs), func() {
		if gen == n.sync.gen {
			n.syncDone(position)
		}
	})
}

func (n *Node) syncDone(position int64) {
	if n.maybeCrash() {
		return
	}
	n.disk.SyncDone(position)
	n.sync.inFlight = false
	for _, ps := range n.parts {
		ps.syncedIndex = ps.syncingIndex
	}
	if n.rng.Chance(n.w.faults.CrashAfterFsyncRatio) {
		n.crash("after an fsync, before Persisted")
		return
	}
	for _, ps := range n.parts {
		if ps.syncedIndex > ps.persistedIndex && n.up {
			from := ps.persistedIndex
			ps.persistedIndex = ps.syncedIndex
			n.step(ps, &core.Persisted{NowMs: n.nowMs(), UpToIndex: ps.syncedIndex}, "persisted")
			if n.up && ps.m != nil {
				n.spill(ps, from, ps.syncedIndex)
			}
		}
	}
	if !n.up {
		return
	}
	for _, ps := range n.parts {
		if ps.appendedIndex > ps.syncedIndex {
			n.sync.pending = true
		}
	}
	if n.sync.pending {
		n.sync.pending = false
		n.wantSync()
	}
}

// crash kills the process: volatile state is gone, the disk keeps what it
// keeps, and the node restarts after a delay.
func (n *Node) crash(why string) {
	assert(n.up, "only a running node crashes")
	n.stats.Crashes++
	n.w.fault("crash node %d (%s)", n.id, why)
	for _, ps := range n.parts {
		n.w.rec.add(checker.Event{Kind: checker.KindCrash, Node: n.id, Part: ps.idx + 1, Index: ps.appendedIndex,
			Index2: ps.syncedIndex, NowMs: ps.coreNowMs})
	}
	if torn := n.disk.Crash(n.rng, n.w.faults.TornWriteRatio); torn > 0 {
		n.stats.TornWrites++
		n.w.fault("torn write on node %d: %d unsynced bytes reached the disk", n.id, torn)
	}
	n.up = false
	n.sync = syncState{gen: n.sync.gen + 1}
	for _, c := range sortedConns(n.conns) {
		n.w.net.nodeCrashed(c)
	}
	n.conns, n.subs, n.refs = nil, nil, nil
	for _, ps := range n.parts {
		ps.m, ps.stored = nil, nil
		ps.wakeAtMs, ps.wakeEventAtMs = 0, 0
		ps.wakeGen++
	}
	n.w.after(n.rng.RangeInt64(n.w.faults.RestartDelayMinMs, n.w.faults.RestartDelayMaxMs), n.restart)
}

func sortedConns(conns map[uint64]*Conn) []*Conn {
	out := make([]*Conn, 0, len(conns))
	for _, c := range conns {
		out = append(out, c)
	}
	// Map order is random: sort so the crash's effects are deterministic.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].id < out[j-1].id; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// restart recovers every partition from the disk and starts the node.
func (n *Node) restart() {
	if n.w.stopped {
		return
	}
	n.incarnation++
	records := n.disk.Recover()
	entries := make([][]core.Entry, len(n.parts))
	for i, rec := range records {
		if int(rec.Stream) >= len(n.parts) {
			n.w.abort(fmt.Sprintf("node %d recovery: record %d names stream %d of %d", n.id, i, rec.Stream, len(n.parts)))
			return
		}
		e, err := core.DecodeEntry(rec.Payload)
		if err != nil {
			// The CRC held, so the bytes are what the node wrote: the entry
			// encoding itself is broken.
			n.w.abort(fmt.Sprintf("node %d recovery: record %d passed its CRC but does not decode: %v", n.id, i, err))
			return
		}
		entries[rec.Stream] = append(entries[rec.Stream], e)
	}
	for i, ps := range n.parts {
		// As the broker does with its boot counter: tags of this incarnation
		// start above any tag a lost log tail may have handed out.
		ps.cfg.TagFloor = n.incarnation << 40
		if !n.recoverPart(ps, entries[i]) {
			return
		}
	}
	n.w.note(fmt.Sprintf("node %d restarted (incarnation %d)", n.id, n.incarnation))
	n.start()
}

func (n *Node) recoverPart(ps *nodePart, entries []core.Entry) bool {
	recoveredIndex := uint64(len(entries))
	p, err := core.Recover(ps.cfg, nil, entries)
	if err != nil {
		n.w.abort(fmt.Sprintf("node %d recovery of %s: %v", n.id, ps.cfg.Queue, err))
		return false
	}
	ps.m = n.w.wrap(p, MachineInfo{Queue: ps.cfg.Queue, Recovered: true, Entries: entries})
	ps.stored = map[core.PayloadRef][]byte{}
	got := snapshotHash(ps.m.Snapshot())
	want := "beyond-written"
	if recoveredIndex <= uint64(len(ps.shadow)) {
		expected, err := core.Recover(ps.cfg, nil, ps.shadow[:recoveredIndex])
		if err != nil {
			want = "unrecoverable: " + err.Error()
		} else {
			want = snapshotHash(expected.Snapshot())
		}
		ps.shadow = ps.shadow[:recoveredIndex]
	}
	n.w.rec.add(checker.Event{Kind: checker.KindRecover, Node: n.id, Part: ps.idx + 1, Index: recoveredIndex,
		Index2: ps.syncedIndex, GotHash: got, WantHash: want})
	nextOffset := uint64(0)
	for i := range entries {
		if entries[i].Kind == core.EntryPublish {
			nextOffset = entries[i].Offset + 1
		}
	}
	if nextOffset < uint64(len(ps.msgIDs)) {
		ps.msgIDs = ps.msgIDs[:nextOffset]
	}
	ps.coreNowMs = 0
	ps.appendedIndex, ps.syncingIndex, ps.syncedIndex, ps.persistedIndex = recoveredIndex, recoveredIndex, recoveredIndex, recoveredIndex
	return true
}

func snapshotHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// scheduleWake keeps one pending wake event per partition at the earliest
// time the core asked for.
func (n *Node) scheduleWake(ps *nodePart, wakeMs int64) {
	ps.wakeAtMs = wakeMs
	if wakeMs == 0 {
		return
	}
	atMs := n.w.nowMs
	if wakeMs > ps.coreNowMs { // the core's clock may be ahead of the node's after a jump back
		atMs += n.clock.wakeAfterMs(n.w.nowMs, wakeMs)
	}
	if ps.wakeEventAtMs != 0 && ps.wakeEventAtMs <= atMs {
		return // an earlier wake is pending; it reschedules when it fires
	}
	ps.wakeEventAtMs = atMs
	ps.wakeGen++
	gen := ps.wakeGen
	n.w.at(atMs, func() {
		if gen == ps.wakeGen {
			n.onWake(ps)
		}
	})
}

func (n *Node) onWake(ps *nodePart) {
	ps.wakeEventAtMs = 0
	if !n.up || n.maybeCrash() {
		return
	}
	if ps.wakeAtMs == 0 {
		return
	}
	if max(n.nowMs(), ps.coreNowMs) < ps.wakeAtMs {
		n.scheduleWake(ps, ps.wakeAtMs) // the clock stepped back: wait for it
		return
	}
	n.step(ps, &core.Tick{NowMs: n.nowMs()}, "tick")
}

// spillRatio is the share of newly durable publishes whose payload the node
// drops from memory, as the broker does past its memory budget: deliveries
// and dead-letter copies of them must then come back with the stored ref
// the node gave, which it resolves (loadStored).
const spillRatio = 0.25

// spill drops the payloads of some publishes durable in (from, to].
func (n *Node) spill(ps *nodePart, from, to uint64) {
	for index := from + 1; index <= to && index <= uint64(len(ps.shadow)); index++ {
		e := &ps.shadow[index-1]
		if e.Kind != core.EntryPublish || len(e.Body.Payload) == 0 || !n.rng.Chance(spillRatio) {
			continue
		}
		ref := core.PayloadRef{File: uint64(ps.idx) + 1, OffsetBytes: index, LengthBytes: uint32(len(e.Body.Payload)), Checksum: uint32(e.Offset)}
		if ps.m.SpillBody(e.Offset, ref) > 0 {
			ps.stored[ref] = e.Body.Payload
			n.stats.Spills++
		}
	}
}

// loadStored gives a stored body its payload back; a ref the node never
// gave out (or gave for another message) stops the run.
func (n *Node) loadStored(ps *nodePart, offset uint64, b *core.Body) *core.Body {
	if !b.IsStored() {
		return b
	}
	payload, ok := ps.stored[b.Ref]
	if !ok || b.Ref.Checksum != uint32(offset) {
		n.w.abort(fmt.Sprintf("node %d %s offset %d: stored body with a ref the node never gave it: %+v", n.id, ps.cfg.Queue, offset, b.Ref))
		return nil
	}
	loaded := *b
	loaded.Payload, loaded.Ref = payload, core.PayloadRef{}
	return &loaded
}
