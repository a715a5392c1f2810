package checker

import (
	"fmt"
	"sort"

	"github.com/fibril-go/fibril/core"
)

// DESIGN.md item 8, streams: what a stream subscriber and a durable cursor
// may observe. The checker keeps its own picture of each stream
// partition's log (the record at each offset, rebuilt from the append
// events and cut back at each recovery) and judges every delivery, commit
// and subscription start against it. Invariants it checks:
//   - offsets are dense: a record is appended at the partition's next offset;
//   - a subscription (node side) is handed, in offset order, exactly the
//     records at or after its start that match its filter, skipping only
//     non-matching ones and what a retention clamp notice covers; each
//     delivery carries the record the log holds at that offset;
//   - a client sees a prefix of its subscription's node-side sequence, with
//     tag = offset;
//   - a durable cursor never moves back: a commit is at least the name's
//     cursor while only one subscription of the name is live, never beyond
//     what a subscription of the name was handed, and a recovery finds at
//     least the last commit the recovered log holds; a durable
//     subscription starts at or after its cursor, and (manual ack) at or
//     before the record after the last one a client of that name received
//     (redelivery of at most the unacked window, never a skip), unless
//     retention moved the oldest record past it;
//   - nothing confirmed is missing after a crash in the durable and
//     speculative tiers (the ephemeral tier may lose unsynced records);
//   - at the end of a drained run every live subscription has seen every
//     matching record;
//   - retention drops only whole sealed segments while a bound is crossed,
//     eventually keeps within its bounds, and the speculative flag is set
//     exactly on speculative-tier records handed out before durable
//     (streams_retention.go).

type streamRecord struct {
	msgID   uint64
	headers []Header
	index   uint64 // log index
	bytes   uint64 // payload bytes
	atMs    int64  // publish time
}

type streamSubKey struct {
	node  uint32
	epoch int
	part  int
	sub   uint64
}

type nodeStreamSub struct {
	key       streamSubKey
	name      string
	autoAck   bool
	filter    []Header
	next      uint64   // the next offset it may be handed
	delivered []uint64 // offsets handed out, in order (the client's prefix is checked against it)
	spec      []bool   // the speculative flag of each
}

type clientStreamSub struct {
	node *nodeStreamSub
	pos  int // how much of node.delivered the client saw
	name string
	part int
}

type cursorKey struct {
	part int
	name string
}

type commitMark struct{ index, next uint64 }

type streamChecker struct {
	h       *History
	logs    map[int][]streamRecord
	confirm map[int]map[uint64]uint64 // part -> offset -> msg id, durable and speculative tiers
	epoch   map[uint32]int
	subs    map[streamSubKey]*nodeStreamSub
	byID    map[[2]uint64]*nodeStreamSub // (part, sub) -> the newest node subscription with that id
	clients map[[2]uint64]*clientStreamSub
	// cursor is the model cursor per name (last commit wins); commits the
	// commits a recovery may still find, by index.
	cursor   map[cursorKey]uint64
	commits  map[cursorKey][]commitMark
	received map[cursorKey]uint64 // one past the highest offset a client of the name received
	seenRec  map[cursorKey]bool   // names a recovery just reported
	// Retention (streams_retention.go): the oldest retained offset, the
	// truncation pending, the durable index, per partition.
	oldest  map[int]uint64
	pending map[int]*pendingTruncation
	durable map[int]uint64
	v       []Violation
}

func newStreamChecker(h *History) *streamChecker {
	return &streamChecker{h: h, logs: map[int][]streamRecord{}, confirm: map[int]map[uint64]uint64{},
		epoch: map[uint32]int{}, subs: map[streamSubKey]*nodeStreamSub{}, byID: map[[2]uint64]*nodeStreamSub{},
		clients: map[[2]uint64]*clientStreamSub{}, cursor: map[cursorKey]uint64{}, commits: map[cursorKey][]commitMark{},
		received: map[cursorKey]uint64{}, seenRec: map[cursorKey]bool{},
		oldest: map[int]uint64{}, pending: map[int]*pendingTruncation{}, durable: map[int]uint64{}}
}

func (c *streamChecker) fail(check string, e *Event, subject, format string, args ...any) {
	v := Violation{Item: 8, Check: check, Subject: subject, Detail: fmt.Sprintf(format, args...)}
	if e != nil {
		v.Seq = e.Seq
	}
	c.v = append(c.v, v)
}

func (c *streamChecker) run() []Violation {
	for i := range c.h.Events {
		e := &c.h.Events[i]
		switch e.Kind {
		case KindCrash:
			if e.Part == 0 {
				c.epoch[e.Node]++ // every subscription of the process is gone
			}
		case KindStreamRecord:
			c.onRecord(e)
		case KindStreamConfirm:
			c.onConfirm(e)
		case KindStreamRecover:
			c.onRecover(e)
		case KindStreamSubStart:
			c.onSubStart(e)
		case KindStreamSubEnd:
			delete(c.subs, c.subKey(e))
		case KindStreamDeliver:
			c.onDeliver(e)
		case KindStreamNotice:
			c.onNotice(e)
			if s := c.subs[c.subKey(e)]; s != nil && e.Index2 > s.next {
				s.next = e.Index2
			}
		case KindStreamCommit:
			c.onCommit(e)
		case KindStreamClientSub:
			c.onClientSub(e)
		case KindStreamClientDeliver:
			c.onClientDeliver(e)
		case KindStreamFinal:
			c.onFinal(e)
			c.onFinalRetention(e)
		case KindStreamTruncate:
			c.onTruncate(e)
		case KindStreamSnapshotDone:
			c.onSnapshotDone(e)
		case KindStreamDurable:
			c.durable[e.Part] = e.Index
		}
	}
	return c.v
}

func (c *streamChecker) subKey(e *Event) streamSubKey {
	return streamSubKey{node: e.Node, epoch: c.epoch[e.Node], part: e.Part, sub: e.Sub}
}

func (c *streamChecker) subject(s *nodeStreamSub) string {
	if s.name != "" {
		return fmt.Sprintf("%s sub %d (durable %s)", c.h.PartName(s.key.part), s.key.sub, s.name)
	}
	return fmt.Sprintf("%s sub %d", c.h.PartName(s.key.part), s.key.sub)
}

func (c *streamChecker) onRecord(e *Event) {
	log := c.logs[e.Part]
	if e.Offset != uint64(len(log)) {
		c.fail("dense", e, c.h.PartName(e.Part), "record msg %d appended at offset %d, the partition's next offset is %d", e.MsgID, e.Offset, len(log))
		for uint64(len(log)) < e.Offset {
			log = append(log, streamRecord{})
		}
		if e.Offset < uint64(len(log)) {
			log = log[:e.Offset]
		}
	}
	c.logs[e.Part] = append(log, streamRecord{msgID: e.MsgID, headers: e.Headers, index: e.Index, bytes: e.Bytes, atMs: e.AtMs2})
}

func (c *streamChecker) onConfirm(e *Event) {
	log := c.logs[e.Part]
	if e.Offset >= uint64(len(log)) {
		c.fail("confirm", e, c.h.PartName(e.Part), "confirm of offset %d, which was never appended", e.Offset)
		return
	}
	if c.h.QueueOf(e.Part).Tier == core.TierEphemeral {
		return // confirmed at once, never waited for: a crash may lose it
	}
	m := c.confirm[e.Part]
	if m == nil {
		m = map[uint64]uint64{}
		c.confirm[e.Part] = m
	}
	m[e.Offset] = log[e.Offset].msgID
}

// onRecover: the recovered log must hold every confirmed record; the
// picture of the log is cut back to what the recovery found.
func (c *streamChecker) onRecover(e *Event) {
	subject := c.h.PartName(e.Part)
	var lost []uint64
	for offset := range c.confirm[e.Part] {
		if offset >= e.Offset {
			lost = append(lost, offset)
		}
	}
	if len(lost) > 0 {
		sort.Slice(lost, func(i, j int) bool { return lost[i] < lost[j] })
		c.fail("lost", e, subject, "%d confirmed records missing after the recovery (next offset %d): offsets %v", len(lost), e.Offset, head(lost, 10))
		for _, o := range lost {
			delete(c.confirm[e.Part], o)
		}
	}
	c.onRecoverOldest(e)
	if log := c.logs[e.Part]; uint64(len(log)) > e.Offset {
		c.logs[e.Part] = log[:e.Offset]
	} else if uint64(len(log)) < e.Offset {
		c.fail("harness", e, subject, "recovered next offset %d beyond the %d records appended", e.Offset, len(log))
	}
	keys := make([]cursorKey, 0)
	for k := range c.commits {
		if k.part == e.Part {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].name < keys[j].name })
	for _, k := range keys {
		if ms := c.survivingCommits(k, e.Index); len(ms) > 0 && !c.seenRec[k] {
			c.fail("cursor", e, subject, "cursor %s committed to %d at index %d is missing after the recovery", k.name, ms[len(ms)-1].next, ms[len(ms)-1].index)
		}
		if !c.seenRec[k] {
			delete(c.cursor, k) // the recovered partition has no such cursor
		}
	}
	clear(c.seenRec)
}

// survivingCommits cuts the commits of k back to those a recovery of the
// log up to lastIndex holds.
func (c *streamChecker) survivingCommits(k cursorKey, lastIndex uint64) []commitMark {
	ms := c.commits[k]
	n := len(ms)
	for n > 0 && ms[n-1].index > lastIndex {
		n--
	}
	c.commits[k] = ms[:n]
	return ms[:n]
}

func (c *streamChecker) onCommit(e *Event) {
	k := cursorKey{e.Part, e.Text}
	subject := fmt.Sprintf("%s cursor %s", c.h.PartName(e.Part), e.Text)
	if e.Trigger == "recover" {
		if ms := c.survivingCommits(k, e.Index); len(ms) > 0 && e.Offset < ms[len(ms)-1].next {
			c.fail("cursor", e, subject, "recovered at %d, behind its commit to %d at index %d", e.Offset, ms[len(ms)-1].next, ms[len(ms)-1].index)
		}
		c.cursor[k] = e.Offset
		c.seenRec[k] = true
		return
	}
	var live []*nodeStreamSub
	for _, s := range c.subs {
		if s.key.part == e.Part && s.name == e.Text && s.key.node == e.Node && s.key.epoch == c.epoch[e.Node] {
			live = append(live, s)
		}
	}
	handed := uint64(0)
	for _, s := range live {
		handed = max(handed, s.next)
	}
	if len(live) > 0 && e.Offset > handed {
		c.fail("cursor", e, subject, "committed to %d, past every record its subscriptions were handed (next %d)", e.Offset, handed)
	}
	if prev, ok := c.cursor[k]; ok && len(live) == 1 && e.Offset < prev {
		c.fail("cursor", e, subject, "moved back from %d to %d", prev, e.Offset)
	}
	c.cursor[k] = e.Offset
	c.commits[k] = append(c.commits[k], commitMark{index: e.Index, next: e.Offset})
}

func (c *streamChecker) onSubStart(e *Event) {
	s := &nodeStreamSub{key: c.subKey(e), name: e.Text, autoAck: e.AutoAck, filter: e.Headers, next: e.Offset}
	c.subs[s.key] = s
	c.byID[[2]uint64{uint64(e.Part), e.Sub}] = s
	if s.name == "" {
		return
	}
	k := cursorKey{e.Part, s.name}
	subject := c.subject(s)
	if cur, ok := c.cursor[k]; ok && e.Offset < min(cur, e.Index) {
		c.fail("cursor", e, subject, "starts at %d, behind its cursor %d", e.Offset, cur)
	}
	if !s.autoAck {
		if limit := max(c.received[k], e.Index2); e.Offset > limit {
			c.fail("resubscribe", e, subject, "starts at %d, skipping past %d (one after the last record a client of the name received; oldest retained %d)",
				e.Offset, c.received[k], e.Index2)
		}
	}
}

func (c *streamChecker) onDeliver(e *Event) {
	s := c.subs[c.subKey(e)]
	if s == nil {
		c.fail("harness", e, c.h.PartName(e.Part), "delivery of offset %d to sub %d, which the partition never took", e.Offset, e.Sub)
		return
	}
	subject := c.subject(s)
	log := c.logs[e.Part]
	switch {
	case e.Offset < s.next:
		c.fail("order", e, subject, "offset %d handed out after %d (next expected %d): out of order or again", e.Offset, s.next-1, s.next)
		return
	case e.Offset >= uint64(len(log)):
		c.fail("order", e, subject, "offset %d handed out, but the log ends at %d", e.Offset, len(log))
		return
	}
	for o := s.next; o < e.Offset; o++ {
		if matches(s.filter, log[o].headers) {
			c.fail("gap", e, subject, "skipped offset %d (msg %d, matching) on the way from %d to %d", o, log[o].msgID, s.next, e.Offset)
			break
		}
	}
	if !matches(s.filter, log[e.Offset].headers) {
		c.fail("filter", e, subject, "offset %d does not match the subscription's filter", e.Offset)
	}
	if rec := log[e.Offset]; rec.msgID != e.MsgID {
		c.fail("order", e, subject, "offset %d handed out as msg %d, but the log holds msg %d there", e.Offset, e.MsgID, rec.msgID)
	}
	c.speculativeOK(e, subject)
	s.next = e.Offset + 1
	s.delivered = append(s.delivered, e.Offset)
	s.spec = append(s.spec, e.Speculative)
}

func (c *streamChecker) onClientSub(e *Event) {
	s := c.byID[[2]uint64{uint64(e.Part), e.Sub}]
	c.clients[[2]uint64{uint64(e.Client), e.Sub}] = &clientStreamSub{node: s, name: e.Text, part: e.Part}
}

func (c *streamChecker) onClientDeliver(e *Event) {
	cs := c.clients[[2]uint64{uint64(e.Client), e.Sub}]
	if cs == nil {
		return // a DELIVER of a subscription the client no longer holds
	}
	subject := fmt.Sprintf("client %d %s sub %d", e.Client, c.h.PartName(e.Part), e.Sub)
	if tier := c.h.QueueOf(e.Part).Tier; e.Speculative && tier != core.TierSpeculative {
		c.fail("speculative", e, subject, "DELIVER of offset %d carries fibril.speculative on a tier-%d stream", e.Offset, tier)
	}
	if e.Tag != e.Offset {
		c.fail("tag", e, subject, "tag %d for offset %d: a stream's tag is its offset", e.Tag, e.Offset)
	}
	if s := cs.node; s != nil {
		switch {
		case cs.pos >= len(s.delivered):
			c.fail("client_order", e, subject, "received offset %d, which the partition never handed to the subscription", e.Offset)
		case s.delivered[cs.pos] != e.Offset:
			c.fail("client_order", e, subject, "received offset %d where the subscription was handed %d next", e.Offset, s.delivered[cs.pos])
			// Resynchronise, so one fault is reported once.
			for i := cs.pos; i < len(s.delivered); i++ {
				if s.delivered[i] == e.Offset {
					cs.pos = i
					break
				}
			}
		}
		if cs.pos < len(s.spec) && s.delivered[cs.pos] == e.Offset && s.spec[cs.pos] != e.Speculative {
			c.fail("speculative", e, subject, "DELIVER of offset %d with fibril.speculative=%v, but the partition handed it out with speculative=%v",
				e.Offset, e.Speculative, s.spec[cs.pos])
		}
		cs.pos++
	}
	if cs.name != "" {
		k := cursorKey{cs.part, cs.name}
		c.received[k] = max(c.received[k], e.Offset+1)
	}
}

// onFinal: at the end of a drained run, every live subscription has seen
// every matching record.
func (c *streamChecker) onFinal(e *Event) {
	log := c.logs[e.Part]
	keys := make([]streamSubKey, 0)
	for k := range c.subs {
		if k.part == e.Part && k.epoch == c.epoch[k.node] {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].sub < keys[j].sub })
	for _, k := range keys {
		s := c.subs[k]
		for o := s.next; o < e.Offset && o < uint64(len(log)); o++ {
			if matches(s.filter, log[o].headers) {
				c.fail("liveness", e, c.subject(s), "never handed offset %d (msg %d, matching) by the end of the run", o, log[o].msgID)
				break
			}
		}
	}
}

// matches is the filter rule (docs/streams.md): every clause's key is a
// header of the record (the first one decides) whose value matches the
// clause's glob pattern, where '*' matches any run and nothing else is
// special.
func matches(filter, headers []Header) bool {
	for _, cl := range filter {
		found := false
		for _, h := range headers {
			if h.Key == cl.Key {
				found = glob(cl.Value, h.Value)
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func glob(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	if pattern[0] == '*' {
		for i := 0; i <= len(s); i++ {
			if glob(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	}
	return s != "" && s[0] == pattern[0] && glob(pattern[1:], s[1:])
}
