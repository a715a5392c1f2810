package node

import (
	"slices"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/mutant"
)

// The Host's policies: dead-letter forwarding with retry, the spill of
// payloads past the resident budget, and when to snapshot. Invariants:
//   - every copy in dlq is in exactly one state; dlqActive counts those
//     sent or retrying and never exceeds DeadLettersInflightMax;
//   - a copy's backoff doubles from DeadLetterRetryMinMs to
//     DeadLetterRetryMaxMs and it is never given up (the old runner left
//     a refused copy pending until restart, one goroutine and one payload
//     copy per dead letter); copies share their body with the message;
//   - the spill only swaps newly durable payloads for their stored refs,
//     newest last, while the broker-wide total is over its budget, so the
//     head of a backlog, which consumers get first, keeps its payloads;
//   - snapshots are asked for under load too (not only when quiescent,
//     which under sustained traffic never happens): storage writes one once
//     every entry up to its index is durable.

// enqueueDeadLetter takes a copy the core released and sends it when a
// slot is free.
func (h *Host) enqueueDeadLetter(dl core.DeadLetter) {
	// Recovery re-emits pending copies (NewHost's Tick), so the core may hand
	// over one already tracked; a second entry would count one copy twice.
	if _, dup := h.dlq[dl.Offset]; dup {
		return // already on its way
	}
	assertHold(dl.Body != nil, "a dead-letter copy carries its body")
	assertHold(dl.Target != core.DLQTarget{Topic: h.queue.Topic, Group: h.queue.Group}, "a queue never dead-letters into itself")
	c := &deadLetterCopy{letter: dl, state: copyWaiting}
	h.dlq[dl.Offset] = c
	h.dlqWaiting = append(h.dlqWaiting, dl.Offset)
	h.pumpDeadLetters()
}

// pumpDeadLetters sends waiting copies, in order, while slots are free.
func (h *Host) pumpDeadLetters() {
	for h.dlqActive < h.cfg.DeadLettersInflightMax && h.dlqHead < len(h.dlqWaiting) {
		offset := h.dlqWaiting[h.dlqHead]
		h.dlqWaiting[h.dlqHead] = 0
		h.dlqHead++
		c := h.dlq[offset]
		if c == nil {
			h.dlqStoredWaiting--
			continue // stored before its turn (an answer to an earlier attempt)
		}
		assertHold(c.state == copyWaiting, "a listed copy waits until sent")
		h.dlqActive++
		h.sendDeadLetter(c)
	}
	if h.dlqHead == len(h.dlqWaiting) {
		h.dlqWaiting, h.dlqHead = h.dlqWaiting[:0], 0
		// Compact once half the list is consumed: the backing array stays bounded
		// by the waiting copies, at amortised O(1) per copy.
	} else if h.dlqHead > len(h.dlqWaiting)/2 {
		n := copy(h.dlqWaiting, h.dlqWaiting[h.dlqHead:])
		h.dlqWaiting, h.dlqHead = h.dlqWaiting[:n], 0
	}
}

// sendDeadLetter hands a copy to the Node for routing. The body is the
// core's copy (headers added, payload shared): no payload is duplicated.
func (h *Host) sendDeadLetter(c *deadLetterCopy) {
	assertHold(c.state != copySent, "a copy has one attempt on its way at a time")
	assertHold(h.dlqActive <= h.cfg.DeadLettersInflightMax, "copies on their way stay within their limit")
	c.state = copySent
	c.attempts++
	h.send(NodeAddr(), &DeadLetterOut{Offset: c.letter.Offset, Target: c.letter.Target, Body: c.letter.Body})
}

// onDeadLetterStored: the copy is durable in its target; the source
// message can be settled.
func (h *Host) onDeadLetterStored(offset uint64) {
	c := h.dlq[offset]
	if c == nil {
		return // a second answer for a copy sent twice
	}
	v, live := h.p.Message(offset)
	assertHold(live && v.State == core.MessagePendingDLQ, "a tracked copy's message is pending dead-lettering")
	switch c.state {
	case copyRetrying:
		h.dlqRetrying--
		h.dlqActive--
	case copySent:
		h.dlqActive--
	case copyWaiting:
		// Stored by an attempt of before (a copy is stored at least once):
		// it leaves the waiting list when its turn comes.
		h.dlqStoredWaiting++
	}
	delete(h.dlq, offset)
	// Settled only now that the copy is durable in its target: settling first
	// would lose the message if the target's append then failed.
	h.stepCore(&core.DeadLetterDone{NowMs: h.nowMs, Offset: offset})
	h.pumpDeadLetters()
}

// onDeadLetterFailed: the copy could not be stored now; it is sent again
// after its backoff.
func (h *Host) onDeadLetterFailed(offset uint64) {
	c := h.dlq[offset]
	if c == nil || c.state != copySent {
		return // already stored, or already waiting for its retry
	}
	if mutant.On(mutant.DeadLetterGiveUp) {
		delete(h.dlq, offset) // broken on purpose: the source stays pending
		h.dlqActive--
		h.pumpDeadLetters()
		return
	}
	// Exponential backoff: a target refusing under load (a full backlog, a
	// partition that cannot load) is not hammered by every source at once.
	if c.backoffMs == 0 {
		c.backoffMs = h.cfg.DeadLetterRetryMinMs
	} else {
		c.backoffMs = min(2*c.backoffMs, h.cfg.DeadLetterRetryMaxMs)
	}
	c.state, c.retryAtMs = copyRetrying, h.nowMs+c.backoffMs
	h.dlqRetrying++
}

// fireRetries sends again every copy whose backoff is over, in offset order.
func (h *Host) fireRetries() {
	if h.dlqRetrying == 0 {
		return
	}
	var due []uint64
	for offset, c := range h.dlq {
		if c.state == copyRetrying && c.retryAtMs <= h.nowMs {
			due = append(due, offset)
		}
	}
	slices.Sort(due)
	for _, offset := range due {
		c := h.dlq[offset]
		assertHold(c.state == copyRetrying, "only a retrying copy is due")
		h.dlqRetrying--
		h.sendDeadLetter(c)
	}
}

// nextRetryMs is the earliest retry deadline (0 = none). It scans at most
// DeadLettersInflightMax copies, and only while some are retrying.
func (h *Host) nextRetryMs() int64 {
	if h.dlqRetrying == 0 {
		return 0
	}
	var at int64
	for _, c := range h.dlq {
		if c.state == copyRetrying && (at == 0 || c.retryAtMs < at) {
			at = c.retryAtMs
		}
	}
	return at
}

// onStoreDeadLetter publishes a copy from another partition here (system,
// confirmed) and answers its source once durable or refused.
func (h *Host) onStoreDeadLetter(msg *StoreDeadLetter) {
	if msg.Body.IsStored() {
		// The driver reads a stored body back before delivering the copy;
		// a ref cannot go into this partition's log.
		h.send(PartitionAddr(msg.Source), &DeadLetterFailed{Offset: msg.Offset, Err: core.ErrDeadLetterUnresolved})
		return
	}
	// The core stamps ReceivedMs on the body it takes: give it its own, so
	// a copy sent twice never changes the first one's stamp.
	assertHold(msg.Source != h.queue, "a queue never stores its own dead letters")
	body := *msg.Body
	ref := h.newRef(hostRef{kind: refDeadLetter, deadLetter: &deadLetterRef{source: msg.Source, offset: msg.Offset}})
	h.stepCore(&core.Publish{NowMs: h.nowMs, Ref: ref, Confirm: true, Body: &body, System: true})
}

// spill swaps newly durable payloads for their stored refs while the
// broker holds more than ResidentPayloadBytesMax (io/broker's runner.spill).
// totalBytes is the broker-wide sum as last reported; this partition's
// share is brought up to date first.
func (h *Host) spill(stored []StoredPayload, totalBytes int64) {
	total := totalBytes - h.residentReported + h.p.ResidentPayloadBytes()
	for _, sp := range stored {
		// Stop as soon as the broker is under budget: spilling more would only
		// make consumers read back from storage what memory could have held.
		if total <= h.cfg.ResidentPayloadBytesMax {
			return
		}
		freed := h.p.SpillBody(sp.Offset, sp.Ref)
		assertHold(freed >= 0 && freed <= int64(sp.Ref.LengthBytes), "a spill gives back at most the payload's bytes")
		total -= freed
	}
}

// maybeSnapshot asks for a snapshot at LastIndex once more than
// max(SnapshotEntriesMin, factor x live) entries were appended since the
// last one (logstore.ShouldSnapshotAfter). A freshly loaded partition counts
// its whole log, as it does not know where its snapshot was, but asks only
// after its first new entry, so it never asks twice for one index.
func (h *Host) maybeSnapshot() {
	last := h.p.LastIndex()
	// One snapshot at a time: a second request before the first is answered
	// would race it in storage for nothing.
	if h.snapshotInflight != 0 || last <= h.loadIndex {
		return
	}
	if mutant.On(mutant.SnapshotOnlyWhenQuiescent) && h.p.DurableIndex() != last {
		return // broken on purpose: under sustained load it never snapshots
	}
	// Proportional to live messages: a snapshot's size grows with them, so
	// snapshotting less often as they grow keeps write amplification bounded.
	threshold := max(h.cfg.SnapshotEntriesMin, hostSnapshotLiveFactor*h.p.Live())
	if last-h.snapshotBase <= uint64(threshold) {
		return
	}
	assertHold(last > h.snapshotBase, "a snapshot covers entries the last one did not")
	// Blob files below the lowest still referenced may go once the snapshot is
	// written; telling storage keeps it from deleting a file a body still needs.
	keepBlobsFrom, _ := h.p.LowestStoredFile() // 0 when no body is stored
	h.snapshotInflight = last
	h.rd.Snapshot = &SnapshotRequest{Index: last, Data: h.p.Snapshot(), KeepBlobsFrom: keepBlobsFrom}
}

// onSnapshotDone: storage wrote (or failed to write) the snapshot.
func (h *Host) onSnapshotDone(in *SnapshotDone) {
	if in.Index != h.snapshotInflight || h.snapshotInflight == 0 {
		return // not ours, or answered already
	}
	h.snapshotInflight = 0
	// On failure too the count starts again from this index: the next try
	// comes after as many entries again, not at every step.
	assertHold(in.Index > h.snapshotBase, "snapshots only move forward")
	h.snapshotBase = in.Index
}
