package node

import "github.com/fibril-go/fibril/core"

// Replay is the plan of one dead-letter replay or redrive: a driver-free
// machine that says which operator request to send next (Next) and takes
// each answer (Answer). Both drivers run it the same way (io/broker with
// Broker.Call, the simulator's operator), so the order that makes a redrive
// safe is decided here, once. Invariants:
//   - a DLQ copy is completed only after the Node answered that its replay
//     copy is durable in the source (OperatorPublished without an error):
//     a crash between the two leaves both copies, a duplicate, never a loss;
//   - a replay (by offsets) never completes anything: the DLQ copy stays,
//     and replaying an offset twice publishes it twice;
//   - every request is answered before the next is asked for (one request
//     in flight), and the plan is bounded: at most DeadLetterReadsMax
//     offsets, or RedriveLimitMax matches, in pages of DeadLetterReadsMax;
//   - a source queue that is gone skips its message (no_source) rather than
//     creating it: an operator publish never creates a queue.
type Replay struct {
	plan  ReplayPlan
	phase replayPhase
	// partitions of the DLQ queue (a redrive's, from QueueSettingsOf).
	partitions uint32
	partition  uint32
	from       uint64 // the current partition's next offset to scan
	page       []DeadLetterRead
	pageAt     int // the page item being replayed
	pagedOut   bool
	res        ReplayResult
}

// RedriveLimitMax caps a redrive's matches.
const RedriveLimitMax = 10_000

// ReplayPlan says what to replay: Offsets of one DLQ partition (a replay),
// or, with Redrive, the ready and delayed copies matching Filter, from
// Partition/From on, at most Limit of them (DryRun: only count them).
type ReplayPlan struct {
	Topic, Group string // the dead-letter queue
	Partition    uint32
	Offsets      []uint64 // replay only
	Redrive      bool
	Filter       DeadLetterFilter
	From         uint64
	Limit        uint32
	DryRun       bool
}

// ReplayResult is a plan's outcome. Err is set when the DLQ queue itself
// could not be read (unknown: core.ErrQueueUnknown).
type ReplayResult struct {
	Items    []ReplayOutcome // a replay's, one per offset asked, in order
	Matched  int
	Replayed int
	Skipped  int
	// NextPartition/NextOffset: where a redrive that stopped at its limit
	// would go on; Done says it reached the end of the last partition.
	NextPartition uint32
	NextOffset    uint64
	Done          bool
	Stopped       bool // Stop ended it early
	Err           *core.Error
}

// ReplayOutcome is what happened to one offset.
type ReplayOutcome struct {
	Offset   uint64
	Replayed bool
	Reason   string // why skipped
}

type replayPhase uint8

const (
	phaseStart      replayPhase = 0 // ask for the DLQ queue / read the offsets
	phaseReading    replayPhase = 1 // a ReadDeadLetters or QueueSettingsOf is out
	phaseScanning   replayPhase = 2 // a ScanDeadLetters is out
	phasePublish    replayPhase = 3 // an OperatorPublish of page[pageAt] is out
	phaseComplete   replayPhase = 4 // a CompleteMessage of page[pageAt] is out
	phaseNextItem   replayPhase = 5 // replay page[pageAt] (or page on)
	phaseNextPage   replayPhase = 6 // scan on
	phaseDone       replayPhase = 7
	phaseScanReady  replayPhase = 8 // the DLQ's partitions are known: scan
	phaseToComplete replayPhase = 9 // page[pageAt] is durable in its source: complete it
)

// NewReplay starts a plan. A replay's offsets must already be within
// DeadLetterReadsMax (the API refuses more with a 400).
func NewReplay(plan ReplayPlan) *Replay {
	assertHold(len(plan.Offsets) <= DeadLetterReadsMax, "a replay names a bounded number of offsets")
	assertHold(!plan.Redrive || len(plan.Offsets) == 0, "a redrive scans, it names no offsets")
	plan.Limit = min(plan.Limit, RedriveLimitMax)
	if plan.Redrive && plan.Limit == 0 {
		plan.Limit = RedriveLimitMax
	}
	return &Replay{plan: plan, partition: plan.Partition, from: plan.From}
}

// Next is the next request to send (to the Node), or done once the plan is
// over (Result then holds its outcome).
func (r *Replay) Next() (msg Message, done bool) {
	p := &r.plan
	switch r.phase {
	case phaseStart:
		r.phase = phaseReading
		if !p.Redrive {
			return &ReadDeadLetters{Topic: p.Topic, Group: p.Group, Partition: p.Partition, Offsets: append([]uint64(nil), p.Offsets...)}, false
		}
		return &QueueSettingsOf{Topic: p.Topic, Group: p.Group}, false
	case phaseScanReady, phaseNextPage:
		if r.res.Matched >= int(p.Limit) {
			r.finish(false)
			return nil, true
		}
		if r.pagedOut {
			// The partition's end: the next one, from its start.
			r.partition, r.from, r.pagedOut = r.partition+1, 0, false
		}
		if r.partition >= r.partitions {
			r.finish(true)
			return nil, true
		}
		r.phase = phaseScanning
		want := min(int(p.Limit)-r.res.Matched, DeadLetterReadsMax)
		return &ScanDeadLetters{Topic: p.Topic, Group: p.Group, Partition: r.partition, From: r.from, Limit: uint32(want), Filter: p.Filter}, false
	case phaseNextItem:
		for r.pageAt < len(r.page) {
			it := &r.page[r.pageAt]
			if it.Skip != "" {
				r.outcome(it.Offset, false, it.Skip)
				r.pageAt++
				continue
			}
			r.phase = phasePublish
			return &OperatorPublish{Topic: it.Info.Source.Topic, Group: it.Info.Source.Group, Key: it.Info.SourceOffset,
				Partition: it.Info.SourcePartition, ByPartition: it.Info.HasSourcePartition, Body: it.Body}, false
		}
		r.page, r.pageAt = nil, 0
		if !p.Redrive {
			r.finish(true)
			return nil, true
		}
		r.phase = phaseNextPage
		return r.Next()
	case phaseToComplete:
		it := &r.page[r.pageAt]
		r.phase = phaseComplete
		return &CompleteMessage{Topic: p.Topic, Group: p.Group, Partition: r.partition, Offset: it.Offset}, false
	case phaseDone:
		return nil, true
	}
	panic("fibril/core/node invariant violated: Next while a request is out")
}

// Answer takes the answer to the request Next returned last. A driver
// that could not deliver it (the addressee bounced it) answers an
// OperatorRefused with core.ErrPartitionLoadFailed.
func (r *Replay) Answer(msg Message) {
	refused, _ := msg.(*OperatorRefused)
	switch r.phase {
	case phaseReading:
		if refused != nil {
			r.res.Err = refused.Err
			r.finish(false)
			return
		}
		switch m := msg.(type) {
		case *DeadLetterReads:
			r.page, r.pageAt, r.phase = m.Items, 0, phaseNextItem
		case *QueueSettings:
			r.partitions, r.phase = m.Partitions, phaseScanReady
			if r.partition >= r.partitions {
				r.res.Err = core.ErrPartitionOutOfRange
				r.finish(false)
			}
		default:
			panic("fibril/core/node invariant violated: a replay's read answered with something else")
		}
	case phaseScanning:
		if refused != nil {
			r.res.Err = refused.Err
			r.finish(false)
			return
		}
		m := msg.(*DeadLetterReads)
		assertHold(m.Next >= r.from, "a scan never goes back")
		r.from, r.pagedOut = m.Next, m.Done
		r.res.Matched += len(m.Items)
		if r.plan.DryRun {
			r.phase = phaseNextPage
			return
		}
		r.page, r.pageAt, r.phase = m.Items, 0, phaseNextItem
	case phasePublish:
		it := &r.page[r.pageAt]
		if refused != nil {
			// The source queue is gone (or its partition cannot load now).
			reason := SkipNoSource
			if refused.Err != core.ErrQueueUnknown {
				reason = refused.Err.Error()
			}
			r.outcome(it.Offset, false, reason)
			r.pageAt, r.phase = r.pageAt+1, phaseNextItem
			return
		}
		pub := msg.(*OperatorPublished)
		if pub.Err != nil {
			r.outcome(it.Offset, false, pub.Err.Error())
			r.pageAt, r.phase = r.pageAt+1, phaseNextItem
			return
		}
		r.outcome(it.Offset, true, "")
		if !r.plan.Redrive {
			r.pageAt, r.phase = r.pageAt+1, phaseNextItem
			return
		}
		// Durable in the source: only now may the DLQ copy go.
		r.phase = phaseToComplete
	case phaseComplete:
		// A refused completion (a consumer took the copy meanwhile, or the
		// partition went away) leaves the DLQ copy: a duplicate, not a loss.
		r.pageAt, r.phase = r.pageAt+1, phaseNextItem
	default:
		panic("fibril/core/node invariant violated: an answer with no request out")
	}
}

// outcome counts one offset's fate (a replay lists it too).
func (r *Replay) outcome(offset uint64, replayed bool, reason string) {
	if replayed {
		r.res.Replayed++
	} else {
		r.res.Skipped++
	}
	if !r.plan.Redrive {
		r.res.Items = append(r.res.Items, ReplayOutcome{Offset: offset, Replayed: replayed, Reason: reason})
	}
}

func (r *Replay) finish(done bool) {
	r.phase = phaseDone
	r.res.Done = done
	r.res.NextPartition, r.res.NextOffset = r.partition, r.from
	if r.pagedOut && !done {
		// The limit was reached exactly at a partition's end: go on from
		// the next one, or nowhere when it was the last.
		r.res.NextPartition, r.res.NextOffset = r.partition+1, 0
		r.res.Done = r.partition+1 >= r.partitions
	}
}

// Stop ends the plan early (the driver's deadline passed, with a request
// perhaps still out): the result says where a redrive would go on, the
// copy whose request was out included (it may become a duplicate, as after
// a crash, never a loss).
func (r *Replay) Stop() {
	if r.phase == phaseDone {
		return
	}
	at := r.from
	if r.pageAt < len(r.page) {
		at = r.page[r.pageAt].Offset
	}
	r.finish(false)
	r.res.NextPartition, r.res.NextOffset = r.partition, at
	r.res.Stopped = true
}

// Result is the plan's outcome once Next said done.
func (r *Replay) Result() ReplayResult {
	assertHold(r.phase == phaseDone, "a replay's result is read once it is over")
	return r.res
}
