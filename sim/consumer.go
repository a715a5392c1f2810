package sim

import (
	"github.com/fibril-go/fibril/checker"
)

// Consumers subscribe to every partition (dead-letter queues included) with
// a random prefetch, and per delivery complete, retry, retry after a delay,
// fail, go silent, disconnect or unsubscribe. Invariants:
//   - a consumer settles only tags of its current subscription on its
//     current connection;
//   - in the liveness phase every delivery is acked, so the run can drain;
//   - a vanished consumer keeps its connection but settles nothing, so
//     every lease it holds must expire.

// maintainIntervalMs is how often a consumer re-subscribes what it lost.
const maintainIntervalMs = 250

func (c *Client) maintain() {
	if c.w.stopped {
		return
	}
	if c.connected {
		c.subscribeAll()
	}
	c.w.after(maintainIntervalMs, c.maintain)
}

func (c *Client) subscribeAll() {
	for _, s := range c.subs {
		if s.id == 0 && !s.pending {
			c.subscribe(s)
		}
	}
}

func (c *Client) subscribe(s *clientSub) {
	w := &c.w.scenario.Workload
	c.w.nextSubID++
	s.id, s.active, s.pending = c.w.nextSubID, false, true
	s.prefetch = uint32(c.rng.RangeInt64(int64(w.PrefetchMin), int64(w.PrefetchMax)))
	s.autoAck = c.w.phase == phaseSafety && c.rng.Chance(w.AutoAckRatio)
	op := c.w.newOp()
	c.w.rec.add(checker.Event{Kind: checker.KindSubscribeCall, Client: c.id, Op: op, Part: s.part + 1, Sub: s.id,
		Prefetch: s.prefetch, AutoAck: s.autoAck})
	c.w.stats.ClientOps++
	c.send(&message{kind: msgSubscribe, op: op, part: s.part, sub: s.id, prefetch: s.prefetch, autoAck: s.autoAck},
		&clientOp{kind: msgSubscribe, part: s.part, sub: s, subID: s.id})
}

// action is what a consumer does with one delivery.
type action uint8

const (
	doAck action = iota
	doRetry
	doRetryAfter
	doFail
	doSilent
	doDisconnect
	doUnsubscribe
)

func (c *Client) chooseAction() action {
	if c.w.phase != phaseSafety {
		return doAck
	}
	w := &c.w.scenario.Workload
	r := c.rng.Float64()
	for _, choice := range []struct {
		ratio float64
		act   action
	}{
		{w.RetryRatio, doRetry}, {w.RetryAfterRatio, doRetryAfter}, {w.FailRatio, doFail},
		{w.SilentRatio, doSilent}, {w.DisconnectRatio, doDisconnect}, {w.UnsubscribeRatio, doUnsubscribe},
	} {
		if r < choice.ratio {
			return choice.act
		}
		r -= choice.ratio
	}
	return doAck
}

func (c *Client) onDelivery(conn *Conn, msg *message) {
	s := c.subs[msg.part]
	if s.id != msg.sub {
		return // for a subscription this client already ended
	}
	c.w.stats.ClientOps++
	if s.autoAck || c.vanished() {
		return
	}
	act := c.chooseAction()
	if act == doSilent {
		return
	}
	w := &c.w.scenario.Workload
	tag, subID := msg.delivery.Tag, msg.sub
	msgID := bodyMsgID(msg.delivery.Body)
	c.w.after(c.rng.RangeInt64(w.ProcessMinMs, w.ProcessMaxMs), func() {
		if c.conn != conn || s.id != subID || c.vanished() {
			return // the tag died with its connection or subscription
		}
		switch act {
		case doAck:
			c.batchAck(s, tag, msgID)
		case doRetry:
			c.settle(s, tag, msgID, checker.ActionRetry, 0)
		case doRetryAfter:
			c.settle(s, tag, msgID, checker.ActionRetry, c.nowMs()+c.rng.RangeInt64(1, max(w.RetryAfterMaxMs, 1)))
		case doFail:
			c.settle(s, tag, msgID, checker.ActionFail, 0)
		case doDisconnect:
			c.drop("consumer disconnects")
		case doUnsubscribe:
			c.unsubscribe(s)
		}
	})
}

func (c *Client) vanished() bool { return c.w.nowMs < c.vanishUntilMs }

// comeBack ends a vanish: the consumer reconnects, so its old tags die.
func (c *Client) comeBack() {
	if c.conn != nil && !c.w.stopped {
		c.drop("consumer comes back")
	}
}

func (c *Client) settle(s *clientSub, tag, msgID uint64, act checker.SettleAction, notBeforeMs int64) {
	c.settleBatch(s, []batchedAck{{tag: tag, msgID: msgID}}, act, notBeforeMs)
}

// batchAck gathers acks of one subscription for AckBatchWindowMs (or until
// AckBatchMax) and sends them as one request, as client libraries do.
func (c *Client) batchAck(s *clientSub, tag, msgID uint64) {
	w := &c.w.scenario.Workload
	s.batch = append(s.batch, batchedAck{tag: tag, msgID: msgID})
	if len(s.batch) >= w.AckBatchMax {
		c.flushAcks(s)
		return
	}
	if len(s.batch) == 1 {
		conn, subID := c.conn, s.id
		c.w.after(w.AckBatchWindowMs, func() {
			switch {
			case c.conn != conn || s.id != subID || len(s.batch) == 0:
			case c.vanished():
				s.batch = nil // a vanished consumer settles nothing
			default:
				c.flushAcks(s)
			}
		})
	}
}

func (c *Client) flushAcks(s *clientSub) {
	batch := s.batch
	s.batch = nil
	c.settleBatch(s, batch, checker.ActionAck, 0)
}

func (c *Client) settleBatch(s *clientSub, acks []batchedAck, act checker.SettleAction, notBeforeMs int64) {
	op := c.w.newOp()
	tags := make([]uint64, len(acks))
	for i, a := range acks {
		tags[i] = a.tag
		c.w.rec.add(checker.Event{Kind: checker.KindSettleCall, Client: c.id, Op: op, Part: s.part + 1, Sub: s.id,
			Tag: a.tag, MsgID: a.msgID, Action: act, NotBeforeMs: notBeforeMs})
		c.w.stats.ClientOps++
		c.w.stats.Settles++
	}
	c.send(&message{kind: msgSettle, op: op, part: s.part, sub: s.id, tags: tags, action: act, notBeforeMs: notBeforeMs},
		&clientOp{kind: msgSettle, part: s.part, sub: s, subID: s.id, tags: tags})
}

func (c *Client) unsubscribe(s *clientSub) {
	s.batch = nil // those tags die with the subscription
	op := c.w.newOp()
	c.w.rec.add(checker.Event{Kind: checker.KindUnsubscribeCall, Client: c.id, Op: op, Part: s.part + 1, Sub: s.id})
	c.w.stats.ClientOps++
	c.send(&message{kind: msgUnsubscribe, op: op, part: s.part, sub: s.id},
		&clientOp{kind: msgUnsubscribe, part: s.part, sub: s, subID: s.id})
	s.id, s.active, s.pending = 0, false, true
}
