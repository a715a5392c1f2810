package sim

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/storage"
	"github.com/fibril-go/fibril/storage/fsys"
)

// Recovery quarantine in the simulator (SPEC 7; core/node
// node_quarantine.go decides). The simulated broker reports a log storage
// refuses as damaged in LoadDone.Damage and honours LoadRequest.Truncate,
// as io/broker does, so the Node's policy runs here as in production.
//
// What the simulator expects: its disk damages logs only as power losses
// do (torn tails, which are always trimmed) and never rots a bit while
// recovery reads, so a partition log that fails a recovery check is a
// storage defect, not a fault the run injected. Today's broker failed such
// a load with a 500 and tried again at every Open (the messages behind it
// never delivered: the checkers' loss reports); now the Node parks it, and
// the simulated operator repairs it at once (RepairQuarantine, as POST
// /admin/api/quarantine/repair): the partition serves again, and what the
// cut dropped shows in the checkers exactly as a lost write would. Each
// quarantine is counted (BrokerStats.Quarantines) and noted as a fault
// event, so a sweep reports how often it happened.

// repairDelayMs is how long the simulated operator takes to repair.
const repairDelayMs = 50

// openOptions are the partition Log options for a LoadRequest.
func openOptions(truncate bool) storage.Options {
	o := simStorageOptions()
	if truncate {
		o.OnCorruption = storage.CorruptionTruncate
	}
	return o
}

// damageOf describes a log storage refused as damaged (nil for any other
// failure, which fails the load as before).
func damageOf(err error) *node.LoadDamage {
	var ce *storage.CorruptionError
	if !errors.As(err, &ce) {
		return nil
	}
	return &node.LoadDamage{Kind: "checksum", Index: ce.Cut.Index,
		Reason: fmt.Sprintf("%s at index %d (segment %s, byte %d)", ce.Cut.Reason, ce.Cut.Index, ce.Cut.Segment, ce.Cut.OffsetBytes)}
}

// loadFailed is the LoadDone of a load that failed with err: damage (Err
// nil) when storage refused the log as damaged, else the error.
func loadFailed(nowMs int64, q core.QueueID, err error) *node.LoadDone {
	if d := damageOf(err); d != nil {
		return &node.LoadDone{NowMs: nowMs, Queue: q, Damage: d}
	}
	return &node.LoadDone{NowMs: nowMs, Queue: q, Err: err}
}

// cutOf is the cut a Truncate load made past a torn tail (nil: none).
func cutOf(rec storage.Recovered) *node.LoadCut {
	if !rec.TruncatedTail || rec.Cut.Torn {
		return nil
	}
	dropped := uint64(rec.Cut.DroppedRecords)
	if rec.Cut.Reason == storage.CutTornFrame || rec.Cut.Reason == storage.CutBadFrame {
		dropped++
	}
	return &node.LoadCut{Index: rec.Cut.Index, DroppedRecords: dropped}
}

// noteQuarantine takes the Node's quarantine report: counts what is new
// and has the operator repair every parked partition.
func (b *Broker) noteQuarantine(r *node.QuarantineReport) {
	if r.QuarantinesTotal > b.quarantinesSeen {
		b.stats.Quarantines += r.QuarantinesTotal - b.quarantinesSeen
		b.quarantinesSeen = r.QuarantinesTotal
	}
	for _, e := range r.Entries {
		b.w.fault("quarantine", "broker %d parked %s: %s", b.id, e.Queue, e.Reason)
		q := e.Queue
		b.later(repairDelayMs, func() { b.repairQuarantined(q) })
	}
}

// repairQuarantined sends the operator's repair of q to the Node.
func (b *Broker) repairQuarantined(q core.QueueID) {
	b.operatorSeq++
	env := node.Envelope{From: operatorAddr(operatorQuarantine, b.operatorSeq), To: node.NodeAddr(), Msg: &node.RepairQuarantine{Queue: q}}
	b.stepNode(&node.Deliver{NowMs: b.nowMs(), Envelope: env}, "quarantine_repair")
}

// corruptRecord crashes the broker and damages, on its disk, the middle
// record of the tail segment of catalogue partition target's log: a
// record with valid records after it, so recovery takes it for damage, not
// a torn tail. A log too short to hold one is left alone (noted).
func (b *Broker) corruptRecord(target int) {
	if b.up {
		b.crash("scheduled before media damage", false)
	}
	spec := b.w.catalogue[target%len(b.w.catalogue)]
	dir := partsDir + "/" + partDirName(spec.queueID)
	entries, err := b.store.fs.ReadDir(dir)
	if err != nil {
		b.w.note(fmt.Sprintf("corrupt-record: no log for %s: %v", spec.queueID, err))
		return
	}
	tail := ""
	for _, e := range entries {
		if len(e.Name) == 20 && !e.IsDir && e.SizeBytes > 0 {
			tail = e.Name // sorted by name: the last is the tail
		}
	}
	if tail == "" {
		b.w.note(fmt.Sprintf("corrupt-record: %s has no segment with records", spec.queueID))
		return
	}
	file := dir + "/" + tail
	starts, err := frameStarts(b.store.fs, file)
	if err != nil || len(starts) < 4 {
		b.w.note(fmt.Sprintf("corrupt-record: %s holds too few records (%d, %v)", spec.queueID, len(starts), err))
		return
	}
	k := len(starts) / 2
	offset := int64(starts[k]+starts[k+1]) / 2
	if err := b.store.fs.DamageByte(file, offset); err != nil {
		b.w.abort(fmt.Sprintf("corrupt-record: %v", err))
		return
	}
	b.w.fault("corrupt-record", "broker %d: a byte of record %d of %d in %s of %s damaged on disk", b.id, k+1, len(starts)-1, tail, spec.queueID)
}

// frameStarts reads a segment file and returns the offset of every frame
// (tidwall's: uvarint length, then data), then the file's end.
func frameStarts(fs interface {
	OpenRead(string) (fsys.File, error)
}, file string) ([]int, error) {
	f, err := fs.OpenRead(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.SizeBytes()
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	if n, err := f.ReadAt(data, 0); n != len(data) {
		return nil, fmt.Errorf("short read of %s: %d of %d: %v", file, n, len(data), err)
	}
	var starts []int
	for pos := 0; pos < len(data); {
		n, w := binary.Uvarint(data[pos:])
		if w <= 0 || pos+w+int(n) > len(data) {
			break
		}
		starts = append(starts, pos)
		pos += w + int(n)
	}
	if len(starts) > 0 {
		last := starts[len(starts)-1]
		n, w := binary.Uvarint(data[last:])
		starts = append(starts, last+w+int(n))
	}
	return starts, nil
}
