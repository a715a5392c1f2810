package core

// Read-only views for inspection (admin API, simulator, tests). They copy, so
// callers cannot reach into the state.

// MessageState names a live message's state in views. Append-only.
type MessageState uint8

const (
	MessageReady      MessageState = MessageState(stateReady)
	MessageDelayed    MessageState = MessageState(stateDelayed)
	MessageInflight   MessageState = MessageState(stateInflight)
	MessagePendingDLQ MessageState = MessageState(statePendingDLQ)
)

func (s MessageState) String() string {
	switch s {
	case MessageReady:
		return "ready"
	case MessageDelayed:
		return "delayed"
	case MessageInflight:
		return "inflight"
	case MessagePendingDLQ:
		return "pending_dlq"
	}
	return "unknown"
}

// MessageView is one live message as seen from outside.
type MessageView struct {
	Offset      uint64
	State       MessageState
	Retries     uint32
	ExpiresAtMs int64
	DueMs       int64 // not_before when delayed, lease deadline when inflight
	Tag         uint64
	Body        *Body
}

// Message returns the live message at offset, or ok=false when it is settled
// or was never published.
func (p *Partition) Message(offset uint64) (MessageView, bool) {
	m := p.store.get(offset)
	if m == nil {
		return MessageView{}, false
	}
	return MessageView{Offset: offset, State: MessageState(m.state), Retries: m.retries,
		ExpiresAtMs: m.expiresAtMs, DueMs: m.dueMs, Tag: m.tag, Body: m.body}, true
}

// Counts is the number of live messages per state.
type Counts struct {
	Ready, Delayed, Inflight, PendingDLQ int
}

// Counts counts live messages by state (O(live messages)).
func (p *Partition) Counts() Counts {
	var c Counts
	p.store.forEach(func(_ uint64, m *message) {
		switch m.state {
		case stateReady:
			c.Ready++
		case stateDelayed:
			c.Delayed++
		case stateInflight:
			c.Inflight++
		case statePendingDLQ:
			c.PendingDLQ++
		}
	})
	return c
}

// Live is the number of live (unsettled) messages.
func (p *Partition) Live() int { return p.store.live }

// NextOffset is the offset the next publish gets.
func (p *Partition) NextOffset() uint64 { return p.nextOffset }

// SettledUntil is the frontier below which every offset is settled. It only
// grows: a settled offset never becomes live again.
func (p *Partition) SettledUntil() uint64 {
	if low, ok := p.store.lowestLive(); ok {
		return low
	}
	return p.nextOffset
}

// OffsetRange is the half-open range [From, To).
type OffsetRange struct{ From, To uint64 }

// SettledRanges lists the settled offsets at or above SettledUntil, coalesced
// into ranges, in order.
func (p *Partition) SettledRanges() []OffsetRange {
	var out []OffsetRange
	next := p.SettledUntil()
	p.store.forEach(func(offset uint64, _ *message) {
		if offset > next {
			out = append(out, OffsetRange{From: next, To: offset})
		}
		next = offset + 1
	})
	if p.store.live > 0 && next < p.nextOffset {
		out = append(out, OffsetRange{From: next, To: p.nextOffset})
	}
	return out
}

// Subscription returns a subscription's prefetch and unsettled count.
func (p *Partition) Subscription(subID uint64) (prefetch uint32, unsettled int, ok bool) {
	sub := p.subs[subID]
	if sub == nil {
		return 0, 0, false
	}
	return sub.prefetch, len(sub.inflight), true
}

// SubscriptionPaused says whether a subscription is paused
// (PauseSubscription); ok is false when it does not exist.
func (p *Partition) SubscriptionPaused(subID uint64) (paused, ok bool) {
	sub := p.subs[subID]
	if sub == nil {
		return false, false
	}
	return sub.paused, true
}

// SubscriptionIDs lists the subscriptions, in increasing order (a copy).
func (p *Partition) SubscriptionIDs() []uint64 { return append([]uint64(nil), p.subOrder...) }
