package core

import "fmt"

// CheckInvariants walks the whole partition and reports the first broken
// invariant. It is O(state): the simulator and the tests call it after every
// step; production does not.
func (p *Partition) CheckInvariants() error {
	if p.durableIndex > p.lastIndex {
		return fmt.Errorf("durable index %d beyond last index %d", p.durableIndex, p.lastIndex)
	}
	if p.durableOffsetEnd > p.nextOffset {
		return fmt.Errorf("durable offset end %d beyond next offset %d", p.durableOffsetEnd, p.nextOffset)
	}
	counts := map[msgState]int{}
	var err error
	residentBytes := int64(0)
	p.store.forEach(func(offset uint64, m *message) {
		counts[m.state]++
		residentBytes += int64(len(m.body.Payload))
		switch {
		case err != nil:
		case offset >= p.nextOffset:
			err = fmt.Errorf("live offset %d at or beyond next offset %d", offset, p.nextOffset)
		case m.state == stateInflight && (m.tag == 0 || m.tag >= p.nextTag || m.dueMs == 0):
			err = fmt.Errorf("inflight offset %d without a valid lease (tag %d, due %d)", offset, m.tag, m.dueMs)
		case m.state != stateInflight && (m.tag != 0 || m.subID != 0):
			err = fmt.Errorf("offset %d in state %d keeps a lease", offset, m.state)
		case m.state == stateDelayed && m.dueMs == 0:
			err = fmt.Errorf("delayed offset %d without a due time", offset)
		case m.state == statePendingDLQ && !hasTarget(p.dlqTargets, offset):
			err = fmt.Errorf("pending dead-letter offset %d without a target", offset)
		}
	})
	if err != nil {
		return err
	}
	if residentBytes != p.store.residentBytes {
		return fmt.Errorf("resident payload bytes %d, but live messages hold %d", p.store.residentBytes, residentBytes)
	}
	if counts[stateReady] != p.readyCount {
		return fmt.Errorf("ready count %d, but %d messages are ready", p.readyCount, counts[stateReady])
	}
	if p.inflightCount != counts[stateInflight] {
		return fmt.Errorf("inflight count %d, but %d messages are inflight", p.inflightCount, counts[stateInflight])
	}
	if p.timed != counts[stateInflight]+counts[stateDelayed] {
		return fmt.Errorf("timed count %d, but %d messages are inflight or delayed", p.timed, counts[stateInflight]+counts[stateDelayed])
	}
	withTTL := 0
	p.store.forEach(func(_ uint64, m *message) {
		if m.expiresAtMs != 0 {
			withTTL++
		}
	})
	if withTTL != p.withTTL {
		return fmt.Errorf("TTL count %d, but %d live messages have a TTL", p.withTTL, withTTL)
	}
	if len(p.dlqTargets) != counts[statePendingDLQ] {
		return fmt.Errorf("%d dead-letter targets for %d pending messages", len(p.dlqTargets), counts[statePendingDLQ])
	}
	// Every ready message is indexed exactly once in fresh or requeued.
	seen := map[uint64]int{}
	for i := 0; i < p.fresh.n; i++ {
		seen[p.fresh.buf[(p.fresh.head+i)%len(p.fresh.buf)]]++
	}
	for _, offset := range p.requeued {
		seen[uint64(offset)]++
	}
	indexed := 0
	for offset, n := range seen {
		if m := p.store.get(offset); m != nil && m.state == stateReady {
			if n != 1 {
				return fmt.Errorf("ready offset %d indexed %d times", offset, n)
			}
			indexed++
		}
	}
	if indexed != p.readyCount {
		return fmt.Errorf("%d ready messages indexed, %d ready", indexed, p.readyCount)
	}
	return p.checkSubscriptions()
}

func hasTarget(targets map[uint64]DLQTarget, offset uint64) bool {
	_, ok := targets[offset]
	return ok
}

func (p *Partition) checkSubscriptions() error {
	if len(p.subOrder) != len(p.subs) {
		return fmt.Errorf("%d subscriptions in order, %d in map", len(p.subOrder), len(p.subs))
	}
	held := 0
	for _, id := range p.subOrder {
		sub := p.subs[id]
		if sub == nil {
			return fmt.Errorf("subscription %d ordered but missing", id)
		}
		if uint32(len(sub.inflight)) > sub.prefetch {
			return fmt.Errorf("subscription %d holds %d deliveries, prefetch %d", id, len(sub.inflight), sub.prefetch)
		}
		for tag, offset := range sub.inflight {
			m := p.store.get(offset)
			if m == nil || m.state != stateInflight || m.tag != tag || m.subID != id {
				return fmt.Errorf("subscription %d holds tag %d for offset %d, which is not its lease", id, tag, offset)
			}
			held++
		}
	}
	// Every inflight message with a known holder is held by exactly that one.
	owned := 0
	p.store.forEach(func(offset uint64, m *message) {
		if m.state == stateInflight && m.subID != 0 {
			owned++
		}
	})
	if owned != held {
		return fmt.Errorf("%d inflight messages have a holder, subscriptions hold %d", owned, held)
	}
	return nil
}
