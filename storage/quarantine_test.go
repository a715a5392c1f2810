package storage

import (
	"path/filepath"
	"testing"
)

// Recovery checks for SPEC 7 quarantine: the cut point of damage to the
// last round after a clean close (closedmark.go), and the cut an operator's
// repair asks for (Options.CutFromIndex).

// markedOptions are testOptions with the clean-close mark, as the broker
// opens partition logs.
func markedOptions(policy CorruptionPolicy) Options {
	opts := testOptions(4<<10, policy)
	opts.MarkCleanClose = true
	return opts
}

// TestCleanCloseFlippedLastRecordIsCorruption: the same flip as
// TestTornTailFlippedLastRecord, after a clean close that left its mark, is
// damage to a synced record: refused with every file as it was, the cut
// point at that record; a second Open refuses it again (the mark stays);
// under CorruptionTruncate it is cut there and not reported torn.
func TestCleanCloseFlippedLastRecordIsCorruption(t *testing.T) {
	dir := t.TempDir()
	all := writeLog(t, dir, markedOptions(CorruptionRefuse), 40, 4)
	tail := tailWithRecords(t, dir)
	starts := frameStarts(t, filepath.Join(dir, tail.name))
	flipByte(t, filepath.Join(dir, tail.name), starts[len(starts)-1]-3)
	before := dirDigest(t, dir)
	for range 2 {
		_, _, err := Open(testEnv, dir, markedOptions(CorruptionRefuse))
		ce := asCorruption(t, err)
		if ce.Cut.Index != 40 || ce.Cut.Torn || ce.Cut.Reason != CutChecksum {
			t.Fatalf("reported %+v", ce.Cut)
		}
		if dirDigest(t, dir) != before {
			t.Fatal("a refused open changed the files")
		}
	}
	l, rec := openLog(t, dir, markedOptions(CorruptionTruncate))
	sameEntries(t, rec.Entries, all[:39])
	if !rec.TruncatedTail || rec.Cut.Torn || rec.Cut.Index != 40 || rec.Cut.DroppedRecords != 1 {
		t.Fatalf("reported %+v", rec.Cut)
	}
	// The open that served removed the mark: a crash now (no Close) and a
	// torn tail past it is torn again.
	if _, err := readFile(testFS, filepath.Join(dir, closedMarkName)); err == nil {
		t.Fatal("the clean-close mark outlived an open that served")
	}
	_ = l
}

// TestCleanCloseTruncatedMidRecordIsCorruption: a tail segment cut short in
// the middle of its last record after a clean close is damage (without
// the mark it is a torn tail: TestTornTailEveryOffset).
func TestCleanCloseTruncatedMidRecordIsCorruption(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, markedOptions(CorruptionRefuse), 40, 4)
	tail := tailWithRecords(t, dir)
	starts := frameStarts(t, filepath.Join(dir, tail.name))
	lastStart, end := starts[len(starts)-2], starts[len(starts)-1]
	if err := tfs.Truncate(filepath.Join(dir, tail.name), int64((lastStart+end)/2)); err != nil {
		t.Fatal(err)
	}
	_, _, err := Open(testEnv, dir, markedOptions(CorruptionRefuse))
	ce := asCorruption(t, err)
	if ce.Cut.Index != 40 || ce.Cut.Torn || ce.Cut.Reason != CutTornFrame {
		t.Fatalf("reported %+v", ce.Cut)
	}
}

// TestCleanCloseMarkDoesNotOutliveAppends: after a clean close, an open,
// more appends and a crash (no Close), a torn last record is a torn tail:
// the mark went at the open.
func TestCleanCloseMarkDoesNotOutliveAppends(t *testing.T) {
	dir := t.TempDir()
	all := writeLog(t, dir, markedOptions(CorruptionRefuse), 30, 5)
	l, _ := openLog(t, dir, markedOptions(CorruptionRefuse))
	more := atEpoch(publishEntries(31, 3, 50), all[29].Epoch)
	appendSync(t, l, more)
	// No Close: the process dies. Tear the last record.
	tail := tailWithRecords(t, dir)
	starts := frameStarts(t, filepath.Join(dir, tail.name))
	flipByte(t, filepath.Join(dir, tail.name), starts[len(starts)-1]-3)
	l2, rec, err := Open(testEnv, dir, markedOptions(CorruptionRefuse))
	if err != nil {
		t.Fatalf("a torn tail after appends was refused: %v", err)
	}
	defer l2.Close()
	if !rec.Cut.Torn || rec.Cut.Index != 33 {
		t.Fatalf("reported %+v", rec.Cut)
	}
	_ = l
}

// TestCutFromIndex: a repair's cut at an entry core recovery refused keeps
// every record before it and drops it and all after it, and appending
// goes on from there.
func TestCutFromIndex(t *testing.T) {
	dir := t.TempDir()
	all := writeLog(t, dir, testOptions(4<<10, CorruptionRefuse), 120, 7)
	opts := testOptions(4<<10, CorruptionTruncate)
	opts.CutFromIndex = 77
	l, rec := openLog(t, dir, opts)
	sameEntries(t, rec.Entries, all[:76])
	if !rec.TruncatedTail || rec.Cut.Torn || rec.Cut.Index != 77 || rec.Cut.Reason != CutRequested || rec.Cut.DroppedRecords != 44 {
		t.Fatalf("reported %+v", rec.Cut)
	}
	next := atEpoch(publishEntries(77, 3, 40), all[75].Epoch)
	appendSync(t, l, next)
	l.Close()
	l, rec = openLog(t, dir, testOptions(4<<10, CorruptionRefuse))
	defer l.Close()
	sameEntries(t, rec.Entries, append(append(all[:0:0], all[:76]...), next...))
	refused := DefaultOptions()
	refused.CutFromIndex = 3
	if refused.Validate() == nil {
		t.Fatal("CutFromIndex without CorruptionTruncate was accepted")
	}
}
