package sim

import (
	"errors"
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/storage"
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
	env := node.Envelope{From: node.AdminAddr(b.operatorSeq), To: node.NodeAddr(), Msg: &node.RepairQuarantine{Queue: q}}
	b.stepNode(&node.Deliver{NowMs: b.nowMs(), Envelope: env}, "quarantine_repair")
}
