package sim

import (
	"strconv"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
)

// Producers publish messages with a client-visible identity (the x-msg-id
// header, unique across the run), with or without a confirm, sometimes
// delayed (not_before) or with a TTL. Invariants:
//   - a message id is published once and never retried: a publish whose
//     reply was lost stays unknown in the history;
//   - a producer holds at most OutstandingConfirmsMax unanswered confirms;
//   - producers publish only in the safety phase.

// payload is shared by every message: the core never mutates a payload.
var payload = []byte("fibril-sim-payload")

func (c *Client) produce() {
	w := &c.w.scenario.Workload
	if c.w.stopped || c.w.phase != phaseSafety || c.published >= w.MessagesPerProducer {
		return
	}
	if c.connected && c.outstandingConfirms < w.OutstandingConfirmsMax {
		c.publishOne()
	}
	c.w.after(c.rng.RangeInt64(w.PublishIntervalMinMs, w.PublishIntervalMaxMs), c.produce)
}

func (c *Client) publishOne() {
	w := &c.w.scenario.Workload
	part := c.choosePartition()
	c.w.nextMsgID++
	msgID := c.w.nextMsgID
	now := c.nowMs()
	msg := &message{kind: msgPublish, op: c.w.newOp(), part: part, msgID: msgID,
		confirm: c.rng.Chance(w.ConfirmRatio)}
	msg.body = &core.Body{Payload: payload, PublishedMs: now,
		Headers: []core.Header{{Key: headerMsgID, Value: strconv.FormatUint(msgID, 10)}}}
	if c.rng.Chance(w.DelayedRatio) {
		msg.notBeforeMs = now + c.rng.RangeInt64(1, max(w.DelayMaxMs, 1))
	}
	if c.rng.Chance(w.TTLRatio) {
		msg.hasTTL, msg.ttlMs = true, c.rng.RangeInt64(w.TTLMinMs, w.TTLMaxMs)
	}
	c.w.rec.add(checker.Event{Kind: checker.KindPublishCall, Client: c.id, Op: msg.op, Part: part + 1, MsgID: msgID,
		Confirm: msg.confirm, HasTTL: msg.hasTTL, TTLMs: msg.ttlMs, NotBeforeMs: msg.notBeforeMs})
	c.w.stats.Publishes++
	c.w.stats.ClientOps++
	c.published++
	if msg.confirm {
		c.outstandingConfirms++
	}
	c.send(msg, &clientOp{kind: msgPublish, part: part, msgID: msgID, confirm: msg.confirm})
}

// choosePartition picks a queue clients publish to, then a partition: by
// key (FNV-1a 64 mod N, as every client library routes) or round robin.
func (c *Client) choosePartition() int {
	var queues []int
	for i, q := range c.w.scenario.Queues {
		if !q.DeadLetterSink {
			queues = append(queues, i)
		}
	}
	assert(len(queues) > 0, "a scenario with producers has a queue to publish to")
	q := queues[c.rng.Intn(len(queues))]
	cfg := c.w.scenario.Queues[q]
	partition := 0
	if cfg.Partitions > 1 {
		if c.roundRobin == nil {
			c.roundRobin = make([]int, len(c.w.scenario.Queues))
		}
		if c.rng.Chance(c.w.scenario.Workload.KeyedRatio) {
			key := "key-" + strconv.Itoa(c.rng.Intn(32))
			partition = int(fnv1a64(key) % uint64(cfg.Partitions))
		} else {
			partition = c.roundRobin[q] % cfg.Partitions
			c.roundRobin[q]++
		}
	}
	for i, spec := range c.w.catalogue {
		if spec.queueIdx == q && int(spec.queueID.Partition) == partition {
			return i
		}
	}
	panic("fibril/sim invariant violated: every queue partition is in the catalogue")
}

func fnv1a64(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}
