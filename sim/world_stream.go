package sim

import (
	"fmt"
	"strings"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
)

// The world's side of streams: the scenario's stream partitions (named in
// the history after the queue partitions), the durable names its
// subscribers may use, and what the end of a run waits for. Invariants:
//   - a stream partition's history number is fixed by the scenario
//     (queue partitions first, then stream partitions in declaration order);
//   - each (subscriber, stream partition) has one durable name, so a
//     cursor's readers are one client at a time, across its resubscribes.

// streamSpec is one partition of the scenario's streams.
type streamSpec struct {
	cfg     StreamConfig
	idx     int // index into Scenario.Streams
	queueID core.QueueID
	part    int // history partition number
}

func (w *World) buildStreamCatalogue() {
	for si, st := range w.scenario.Streams {
		for p := 0; p < st.Partitions; p++ {
			w.streamCat = append(w.streamCat, &streamSpec{cfg: st, idx: si,
				queueID: core.QueueID{Topic: st.Topic, Partition: uint32(p)}, part: len(w.catalogue) + len(w.streamCat) + 1})
		}
	}
	for i := 0; i < w.scenario.Workload.Stream.Subscribers; i++ {
		for j := range w.streamCat {
			w.streamNames = append(w.streamNames, durableName(i, j))
		}
	}
}

// durableName is subscriber i's cursor name on stream partition j.
func durableName(i, j int) string { return fmt.Sprintf("c%d-%d", i, j) }

func (w *World) streamMeta(m *checker.Meta) {
	sc := w.scenario
	for _, st := range sc.Streams {
		m.Queues = append(m.Queues, checker.QueueSpec{Topic: st.Topic, Partitions: st.Partitions, Stream: true, Tier: st.Tier,
			MaxRecords: st.MaxRecords, MaxBytes: st.MaxBytes, MaxAgeMs: st.MaxAgeMs})
	}
	if len(sc.Streams) > 0 {
		cfg := w.nodeConfig().StreamPartition
		m.StreamSegmentRecordsMax, m.StreamSegmentBytesMax = cfg.SegmentRecordsMax, cfg.SegmentBytesMax
	}
	for _, spec := range w.streamCat {
		m.Partitions = append(m.Partitions, checker.PartitionSpec{Queue: len(sc.Queues) + spec.idx,
			Topic: spec.queueID.Topic, Partition: spec.queueID.Partition})
	}
}

// streamPart is the history number of stream partition q (0: not one of
// the scenario's).
func (w *World) streamPart(q core.QueueID) int {
	for _, spec := range w.streamCat {
		if spec.queueID == q {
			return spec.part
		}
	}
	return 0
}

// streamsQuiescent: every stream partition written to is loaded, durable,
// without reads in flight and quiet, and every stream subscriber is
// attached and subscribed everywhere.
func (w *World) streamsQuiescent() bool {
	for _, b := range w.brokers {
		for _, spec := range w.streamCat {
			if b.streamParts[spec.queueID] == nil {
				continue
			}
			sh := b.streams[spec.queueID]
			if sh == nil || !sh.streamQuiet(w.nowMs) {
				return false
			}
		}
	}
	for _, p := range w.peers {
		if p.role != roleStreamSubscriber {
			continue
		}
		if p.state != stateReady {
			return false
		}
		for _, s := range p.ssubs {
			if !s.active {
				return false
			}
		}
	}
	return true
}

func (w *World) streamStuckReport(sb *strings.Builder) {
	for _, b := range w.brokers {
		if !b.up {
			continue
		}
		for _, spec := range w.streamCat {
			if b.streamParts[spec.queueID] == nil {
				continue
			}
			sh := b.streams[spec.queueID]
			if sh == nil {
				fmt.Fprintf(sb, " stream %s not loaded;", spec.queueID)
				continue
			}
			if !sh.streamQuiet(w.nowMs) {
				fmt.Fprintf(sb, " stream %s appended %d synced %d reads %d last delivery %dms ago;", spec.queueID,
					sh.shadow.appended, sh.shadow.synced, sh.readsInFlight, w.nowMs-sh.lastDeliveryAtMs)
			}
		}
	}
	for _, p := range w.peers {
		if p.role != roleStreamSubscriber {
			continue
		}
		if p.state != stateReady {
			fmt.Fprintf(sb, " stream client %d not attached (state %d);", p.id, p.state)
		}
		for _, s := range p.ssubs {
			if !s.active {
				fmt.Fprintf(sb, " stream client %d not subscribed to %s;", p.id, s.spec.queueID)
			}
		}
	}
}
