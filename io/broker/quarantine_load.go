package broker

import (
	"errors"
	"fmt"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/logstore"
	"github.com/fibril-go/fibril/storage"
)

// Recovery checks at a partition's load (SPEC 7). The driver finds and
// describes the damage; the Node decides what it means (core/node
// node_quarantine.go). Invariants:
//   - a load without LoadRequest.Truncate changes no file of a damaged log
//     (storage's CorruptionRefuse; core recovery only reads), so the next
//     load after a restart finds the same damage;
//   - a load with Truncate cuts at the first bad record storage finds, and
//     at the first entry core recovery refuses (storage's CutFromIndex),
//     then loads what is left; what it cut is reported in LoadDone.Cut;
//   - a read that was not stable (storage.ErrUnstableRead) is no damage:
//     the load fails as before and the next Open tries again.

// recoveryOutcome is what a load found beside an ordinary error.
type recoveryOutcome struct {
	damage *node.LoadDamage
	cut    *node.LoadCut
	replay loadReplay // what the log gave back (diagnostics.go)
}

// openRecovered opens a partition's log and rebuilds its machine, with the
// recovery checks of req (Truncate or not). On damage it returns the
// outcome with a nil log, every file as it was (or cut, under Truncate).
func (b *Broker) openRecovered(req node.LoadRequest, dir string) (*logstore.Log, partitionMachine, uint64, recoveryOutcome, error) {
	var out recoveryOutcome
	opts := logstore.DefaultOptions()
	// A clean shutdown leaves a mark: damage to the last round is then
	// damage, not a torn tail (storage closedmark.go).
	opts.MarkCleanClose = true
	if req.Truncate {
		opts.OnCorruption = logstore.CorruptionTruncate
	}
	opened := time.Now()
	log, rec, err := logstore.Open(dir, opts)
	out.replay = replayOf(rec, time.Since(opened).Nanoseconds())
	if err != nil {
		if d := storageDamage(err); d != nil {
			out.damage = d
			return nil, nil, 0, out, nil
		}
		return nil, nil, 0, out, fmt.Errorf("%s %s: open log: %w", kindName(req.Kind), req.Queue, err)
	}
	out.cut = truncationCut(rec)
	h, lastIndex, err := b.recoverMachine(req, rec)
	var recErr *core.RecoveryError
	if err != nil && req.Truncate && errors.As(err, &recErr) && recErr.Index > rec.SnapshotIndex {
		// Cut at the entry recovery refused and try once more.
		log.Close()
		opts.CutFromIndex = recErr.Index
		if log, rec, err = logstore.Open(dir, opts); err != nil {
			return nil, nil, 0, out, fmt.Errorf("%s %s: open log for a cut at %d: %w", kindName(req.Kind), req.Queue, recErr.Index, err)
		}
		out.cut = mergeCuts(out.cut, truncationCut(rec))
		out.replay = replayOf(rec, out.replay.readNs)
		h, lastIndex, err = b.recoverMachine(req, rec)
	}
	if err != nil {
		log.Close()
		if d := recoveryDamage(err); d != nil {
			out.damage = d
			return nil, nil, 0, out, nil
		}
		return nil, nil, 0, out, fmt.Errorf("%s %s: recover: %w", kindName(req.Kind), req.Queue, err)
	}
	if rec.TruncatedTail && rec.Cut.Torn {
		b.log.Warn("partition log had a torn tail; cut at the last valid record", "partition", req.Queue.String(), "kind", kindName(req.Kind))
	} else if out.cut != nil {
		b.log.Warn("partition log was damaged; cut at the last valid record (recovery.on_mismatch=ignore, or a repair): what followed is lost",
			"partition", req.Queue.String(), "kind", kindName(req.Kind), "cut_index", out.cut.Index, "dropped_records", out.cut.DroppedRecords, "reason", rec.Cut.Reason.String())
	}
	return log, h, lastIndex, out, nil
}

// storageDamage describes a log storage refused to open as damaged; nil
// for any other failure (an unstable read, I/O).
func storageDamage(err error) *node.LoadDamage {
	var ce *logstore.CorruptionError
	switch {
	case errors.As(err, &ce):
		return &node.LoadDamage{Kind: "checksum", Index: ce.Cut.Index,
			Reason: fmt.Sprintf("%s at index %d (segment %s, byte %d; %d records from there on)", ce.Cut.Reason, ce.Cut.Index, ce.Cut.Segment, ce.Cut.OffsetBytes, ce.Cut.DroppedRecords)}
	case errors.Is(err, storage.ErrUnstableRead):
		return nil
	case errors.Is(err, logstore.ErrCorrupt):
		return &node.LoadDamage{Kind: "corrupt", Reason: err.Error()}
	}
	return nil
}

// recoveryDamage describes a log core recovery refused; nil for a failure
// that is no damage (a config error).
func recoveryDamage(err error) *node.LoadDamage {
	var re *core.RecoveryError
	switch {
	case errors.As(err, &re):
		return &node.LoadDamage{Kind: "inconsistent", Index: re.Index, Reason: fmt.Sprintf("entry %d contradicts the log before it: %v", re.Index, re.Err)}
	case errors.Is(err, core.ErrCorruptSnapshot):
		return &node.LoadDamage{Kind: "snapshot", Reason: "the snapshot does not decode"}
	case errors.Is(err, core.ErrInconsistentLog):
		return &node.LoadDamage{Kind: "inconsistent", Reason: err.Error()}
	}
	return nil
}

// truncationCut is the cut a Truncate load made past a torn tail (nil for
// none: a torn tail holds only unsynced writes and is no damage).
func truncationCut(rec logstore.Recovered) *node.LoadCut {
	if !rec.TruncatedTail || rec.Cut.Torn {
		return nil
	}
	// Cut.DroppedRecords counts the complete frames from the cut on; a
	// frame cut short, or behind a broken length, is a record lost too.
	dropped := uint64(rec.Cut.DroppedRecords)
	if rec.Cut.Reason == logstore.CutTornFrame || rec.Cut.Reason == logstore.CutBadFrame {
		dropped++
	}
	return &node.LoadCut{Index: rec.Cut.Index, DroppedRecords: dropped}
}

// mergeCuts adds a second cut (lower in the log) to a first.
func mergeCuts(first, second *node.LoadCut) *node.LoadCut {
	switch {
	case first == nil:
		return second
	case second == nil:
		return first
	}
	return &node.LoadCut{Index: second.Index, DroppedRecords: first.DroppedRecords + second.DroppedRecords}
}
