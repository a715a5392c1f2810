package stream

import (
	"github.com/fibril-go/fibril/mutant"
	"math"

	"github.com/fibril-go/fibril/core"
)

// Subscriptions (docs/streams.md "Subscriptions", "Memory"). Invariants:
//   - a subscription considers offsets one by one from next, never skipping
//     one: each is delivered (it matches) or passed over (it does not, or it
//     is before a by-time start), in offset order, backfill then live;
//   - at most SubWindowMax records are handed out and not yet credited;
//   - a durable subscription's commits never move back (committed only
//     grows), and an ephemeral subscription never commits;
//   - next stays within [oldest, visibleEnd]: retention clamps it forward.

// durableNameBytesMax bounds a durable name (it is stored in every commit).
const durableNameBytesMax = 255

// subscription is one subscriber's position and flow control.
type subscription struct {
	id      uint64
	name    string // durable name, "" = ephemeral
	filter  []Clause
	autoAck bool
	next    uint64 // the next offset to consider
	// committed: the cursor this subscription last committed (or started
	// at); an ack commits only past it.
	committed uint64
	minAtMs   int64 // by-time start: records published before it are passed over
	window    int   // handed out, not yet credited

	// Log reads, for a next older than the ring: reading says the
	// subscription waits on the read in flight with token.
	reading       bool
	token         uint64
	readIndex     uint64 // the log index holding next, when known (0 = unknown)
	readRetryAtMs int64
}

func (p *Partition) onSubscribe(in *Subscribe) {
	if _, exists := p.subs[in.SubID]; exists || in.SubID == 0 {
		p.replyError(in.Ref, core.ErrAlreadySubscribed)
		return
	}
	if len(p.subs) >= p.cfg.SubscriptionsMax {
		p.replyError(in.Ref, core.ErrTooManySubscriptions)
		return
	}
	if len(in.Filter) > p.cfg.FilterClausesMax || len(in.DurableName) > durableNameBytesMax {
		p.replyError(in.Ref, core.ErrInvalidStreamStart)
		return
	}
	// A new name will take a cursor slot at its first commit: count it
	// now, so commits never have to be refused.
	if in.DurableName != "" && p.isNewName(in.DurableName) && len(p.cursors)+p.newActiveNames() >= p.cfg.CursorsMax {
		p.replyError(in.Ref, core.ErrTooManyCursors)
		return
	}
	start, minAtMs, ok := p.resolveStart(in)
	if !ok {
		p.replyError(in.Ref, core.ErrInvalidStreamStart)
		return
	}
	assertTrue(start >= p.oldest && start <= p.nextOffset, "a start lies in the retained window")
	// The filter is copied: the input is the driver's, reused after Step.
	// committed starts at the start, so an ack of an older offset (a
	// reconnect acking what it got before) never moves the cursor back.
	sub := &subscription{id: in.SubID, name: in.DurableName, filter: append([]Clause(nil), in.Filter...),
		autoAck: in.AutoAck, next: start, committed: start, minAtMs: minAtMs}
	p.subs[in.SubID] = sub
	p.subOrder = insertSorted(p.subOrder, in.SubID)
	if sub.name != "" {
		p.activeNames[sub.name]++
	}
	p.rd.Replies = append(p.rd.Replies, core.Reply{Ref: in.Ref, Kind: core.ReplySubscribed, Offset: start})
}

func (p *Partition) isNewName(name string) bool {
	_, stored := p.cursors[name]
	return !stored && p.activeNames[name] == 0
}

// newActiveNames counts names held by subscriptions but not yet committed:
// they will take a cursor slot at their first commit.
func (p *Partition) newActiveNames() int {
	n := 0
	for name := range p.activeNames {
		if _, stored := p.cursors[name]; !stored {
			n++
		}
	}
	return n
}

// resolveStart picks the first offset (PROTOCOL 5.11) and, for by-time, the
// publish time before which records are passed over.
func (p *Partition) resolveStart(in *Subscribe) (start uint64, minAtMs int64, ok bool) {
	if in.DurableName != "" {
		// An existing cursor resumes clamped; a new name starts at the
		// oldest retained record, so it cannot miss data.
		if next, stored := p.cursors[in.DurableName]; stored {
			return clamp(next, p.oldest, p.nextOffset), 0, true
		}
		return p.oldest, 0, true
	}
	v := in.Start.Value
	switch in.Start.Kind {
	// Latest is the next offset, durable or not: in the durable tier the
	// subscription then waits for it like every live subscriber.
	case StartLatest:
		return p.nextOffset, 0, true
	case StartEarliest:
		return p.oldest, 0, true
	// An offset outside the window is clamped, not refused (PROTOCOL 5.11).
	case StartOffset:
		return clamp(v, p.oldest, p.nextOffset), 0, true
	case StartNBack:
		// Compare before subtracting: next - n would wrap for a large n.
		if v >= p.nextOffset-p.oldest {
			return p.oldest, 0, true
		}
		return p.nextOffset - v, 0, true
	case StartByTime:
		atMs := int64(min(v, math.MaxInt64))
		// The first segment whose newest record is at or after t holds the
		// first such record; earlier ones in it are passed over as read.
		if seg := p.segments.firstAtOrAfter(atMs); seg != nil {
			return seg.firstOffset, atMs, true
		}
		return p.nextOffset, atMs, true
	}
	return 0, 0, false
}

func clamp(v, lo, hi uint64) uint64 { return min(max(v, lo), hi) }

func (p *Partition) onUnsubscribe(in *Unsubscribe) {
	sub := p.subs[in.SubID]
	if sub == nil {
		p.replyError(in.Ref, core.ErrUnknownSubscription)
		return
	}
	// Nothing is logged: the cursor already holds what was committed, and a
	// read in flight is dropped when its answer finds no subscription.
	delete(p.subs, in.SubID)
	p.subOrder = removeSorted(p.subOrder, in.SubID)
	if sub.name != "" {
		p.activeNames[sub.name]--
		assertTrue(p.activeNames[sub.name] >= 0, "active name counts never go negative")
		if p.activeNames[sub.name] == 0 {
			delete(p.activeNames, sub.name)
		}
	}
	p.rd.Replies = append(p.rd.Replies, core.Reply{Ref: in.Ref, Kind: core.ReplyUnsubscribed})
}

// onAck commits max(acked)+1 for a durable subscription. Success has no
// reply (an ACK frame gets none). An offset never handed out is ignored on
// its own, as PROTOCOL 5.9 ignores unknown tags: a client's writer merges
// consecutive ACKs into one frame, and a stale tag in it (an ack of a
// delivery from before a reconnect) must not void the valid ones beside it.
func (p *Partition) onAck(in *Ack) {
	sub := p.subs[in.SubID]
	if sub == nil {
		p.replyError(in.Ref, core.ErrUnknownSubscription)
		return
	}
	if len(in.Offsets) > p.cfg.AckBatchMax {
		p.replyError(in.Ref, core.ErrBatchTooLarge)
		return
	}
	var top uint64
	valid := false
	for _, offset := range in.Offsets {
		// Committing past a record never considered would skip it.
		if offset >= sub.next {
			continue
		}
		if !valid || offset > top {
			top, valid = offset, true
		}
	}
	if sub.name == "" || !valid {
		return // ephemeral (accepted and ignored), or nothing it could commit
	}
	assertTrue(top < sub.next, "a commit names only records already considered")
	if mutant.On(mutant.StreamCursorSkip) {
		top++ // broken on purpose: the cursor passes a record never acked
	}
	p.commit(sub, top+1)
}

// commit moves sub's cursor to next if that is forward, batched to the end
// of the step; of several commits to one name the last wins.
func (p *Partition) commit(sub *subscription, next uint64) {
	assertTrue(sub.name != "", "only durable subscriptions commit")
	assertTrue(next <= sub.next, "a commit never passes what the subscription considered")
	if next <= sub.committed {
		return // never back for this subscription
	}
	sub.committed = next
	// One slot per name per step: a later commit of the name (another
	// subscription of it, or a later ack) overwrites, so the last wins.
	if i, ok := p.commitAt[sub.name]; ok {
		p.commits[i].Next = next
		return
	}
	p.commitAt[sub.name] = len(p.commits)
	p.commits = append(p.commits, core.CursorPos{Name: sub.name, Next: next})
}

// flushCommits logs this step's commits, CommitBatchMax cursors per entry.
func (p *Partition) flushCommits() {
	for start := 0; start < len(p.commits); start += p.cfg.CommitBatchMax {
		end := min(start+p.cfg.CommitBatchMax, len(p.commits))
		// Each entry owns its cursors: commits is reused next step.
		batch := append([]core.CursorPos(nil), p.commits[start:end]...)
		p.appendEntry(core.Entry{Kind: core.EntryCursorCommit, Cursors: batch})
		p.pendingCommits = append(p.pendingCommits, pendingCommit{index: p.lastIndex, cursors: batch})
	}
	p.commits = p.commits[:0]
	clear(p.commitAt)
}

func (p *Partition) onCredit(in *Credit) {
	sub := p.subs[in.SubID]
	if sub == nil || in.Records <= 0 {
		return // a credit racing an unsubscribe is harmless
	}
	assertTrue(in.Records <= sub.window, "a session credits only records it was handed")
	// A credit is the session saying the frames are queued: the window
	// reopens and the end-of-step serve hands out more.
	sub.window -= in.Records
	assertTrue(sub.window >= 0, "the window never goes negative")
}

// insertSorted and removeSorted keep subOrder sorted: serving in id order
// makes a step's deliveries and commits independent of map order.
func insertSorted(xs []uint64, x uint64) []uint64 {
	i := 0
	for i < len(xs) && xs[i] < x {
		i++
	}
	xs = append(xs, 0)
	copy(xs[i+1:], xs[i:])
	xs[i] = x
	return xs
}

func removeSorted(xs []uint64, x uint64) []uint64 {
	for i := range xs {
		if xs[i] == x {
			return append(xs[:i], xs[i+1:]...)
		}
	}
	return xs
}
