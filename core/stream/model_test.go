package stream

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// model is the reference the rapid test holds the partition to: a plain
// slice of records, a map of cursors and, per subscription, the next offset
// it must be offered. It knows nothing of rings, reads or segments tables;
// it recomputes segments from the records when it needs them.
type model struct {
	cfg      Config
	settings core.StreamSettings
	records  []mRecord // every record still in the log, offset = position
	oldest   uint64
	cursors  map[string]uint64
	commits  []mCommit // every commit still in the log, for crashes
	subs     map[uint64]*mSub
	confirms map[uint64]uint64 // publish ref -> offset, not yet confirmed
}

type mRecord struct {
	index   uint64
	atMs    int64
	bytes   uint64
	headers []core.Header
	payload string
}

type mCommit struct {
	index uint64
	name  string
	next  uint64
}

type mSub struct {
	name      string
	filter    []Clause
	autoAck   bool
	minAtMs   int64
	next      uint64   // the next offset it must be offered
	committed uint64   // its commits never move back
	handed    []uint64 // offsets handed out and not yet credited, in order
	delivered []uint64 // every offset delivered, for acks
}

func newModel(cfg Config, settings core.StreamSettings) *model {
	return &model{cfg: cfg, settings: settings, cursors: map[string]uint64{}, subs: map[uint64]*mSub{}, confirms: map[uint64]uint64{}}
}

func (m *model) nextOffset() uint64 { return uint64(len(m.records)) }

// wants says whether sub must be delivered record offset.
func (m *model) wants(s *mSub, offset uint64) bool {
	r := &m.records[offset]
	return r.atMs >= s.minAtMs && matches(s.filter, r.headers)
}

// checkPassedOver: every record in [from, to) is one sub must not get.
func (m *model) checkPassedOver(s *mSub, from, to uint64) error {
	for o := from; o < to; o++ {
		if m.wants(s, o) {
			return fmt.Errorf("record %d matches, but was passed over (%d..%d)", o, from, to)
		}
	}
	return nil
}

// segments splits the retained records by the sealing rule, as [first,
// last] offsets, the last possibly open.
type mSegment struct {
	first, last uint64
	bytes       uint64
	sealed      bool
}

func (m *model) segments() []mSegment {
	var out []mSegment
	for o := m.oldest; o < m.nextOffset(); o++ {
		if len(out) == 0 || out[len(out)-1].sealed {
			out = append(out, mSegment{first: o})
		}
		g := &out[len(out)-1]
		g.last = o
		g.bytes += m.records[o].bytes
		g.sealed = g.last-g.first+1 >= m.cfg.SegmentRecordsMax || g.bytes >= m.cfg.SegmentBytesMax
	}
	return out
}

// overBound says whether dropping starts or goes on at segment g given the
// retained totals before it.
func (m *model) overBound(g mSegment, records, bytes uint64, nowMs int64) bool {
	s := m.settings
	age := s.MaxAgeMs > 0 && nowMs >= agedOutAtMs(m.records[g.last].atMs, s.MaxAgeMs)
	return (s.MaxRecords > 0 && records > s.MaxRecords) || (s.MaxBytes > 0 && bytes > s.MaxBytes) || age
}

// checkTruncate checks that a truncation to upTo drops only whole sealed
// segments, each while a bound was crossed, and returns the new oldest.
func (m *model) checkTruncate(upTo uint64, nowMs int64) (uint64, error) {
	var records, bytes uint64
	for _, g := range m.segments() {
		records += g.last - g.first + 1
		bytes += g.bytes
	}
	for _, g := range m.segments() {
		if !g.sealed {
			return 0, fmt.Errorf("truncation to %d drops the open segment [%d, %d]", upTo, g.first, g.last)
		}
		if !m.overBound(g, records, bytes, nowMs) {
			return 0, fmt.Errorf("truncation to %d drops segment [%d, %d] within every bound", upTo, g.first, g.last)
		}
		records -= g.last - g.first + 1
		bytes -= g.bytes
		if m.records[g.last].index == upTo {
			return g.last + 1, nil
		}
		if m.records[g.last].index > upTo {
			break
		}
	}
	return 0, fmt.Errorf("truncation to %d does not end a retained segment", upTo)
}

// dueTruncation says whether retention should have asked for a drop.
func (m *model) dueTruncation(nowMs int64) bool {
	segs := m.segments()
	if len(segs) == 0 || !segs[0].sealed {
		return false
	}
	var records, bytes uint64
	for _, g := range segs {
		records += g.last - g.first + 1
		bytes += g.bytes
	}
	return m.overBound(segs[0], records, bytes, nowMs)
}

// applyTruncation moves oldest and clamps cursors and subscriptions.
func (m *model) applyTruncation(oldest uint64) {
	m.oldest = oldest
	for name, next := range m.cursors {
		m.cursors[name] = max(next, oldest)
	}
	for _, s := range m.subs {
		s.next = max(s.next, oldest)
	}
}

// commit records a commit the partition must log this step.
func (m *model) commit(s *mSub, next uint64) {
	if s.name == "" || next <= s.committed {
		return
	}
	s.committed = next
	m.cursors[s.name] = max(next, m.oldest)
}

// crash keeps the log up to index cut: later records and commits go, the
// cursors are what the kept commits say, clamped to the oldest retained.
func (m *model) crash(cut uint64) {
	for len(m.records) > 0 && m.records[len(m.records)-1].index > cut {
		m.records = m.records[:len(m.records)-1]
	}
	for len(m.commits) > 0 && m.commits[len(m.commits)-1].index > cut {
		m.commits = m.commits[:len(m.commits)-1]
	}
	m.cursors = map[string]uint64{}
	for _, c := range m.commits {
		m.cursors[c.name] = c.next
	}
	for name, next := range m.cursors {
		m.cursors[name] = max(next, m.oldest)
	}
	m.subs = map[uint64]*mSub{}
	m.confirms = map[uint64]uint64{}
}
