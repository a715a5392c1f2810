package e2e

import (
	"bytes"
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/transport/wire"
)

// The power-loss loop's consumers and its judgement. Invariants:
//   - one goroutine consumes at a time and records each delivery before
//     settling it and each settle after sending it, before it reads the next
//     delivery (so the history's credit accounting holds);
//   - every judgement names the cycle whose power loss did the damage, so a
//     broken build's cycles-to-catch is the earliest such cycle.

// The two queues whose settings are checked after every power loss.
const (
	settingsTTLQueue   = "pl-ttl"
	settingsTTL        = 300 * time.Millisecond
	settingsRetryQueue = "pl-retry"
)

// delivery is one delivery as the loop saw it.
type delivery struct {
	id    uint64
	where partOffset
	atMs  int64
}

// consumer is one consumer's subscriptions, with the recorder's ids for
// each partition, and the messages it acked on each partition (the acks a
// fence on that partition makes durable).
type consumer struct {
	subs    []*client.Subscription
	recSubs map[*client.Subscription]map[uint32]uint64
	acked   map[topicPartition][]uint64
}

type topicPartition struct {
	topic     string
	partition uint32
}

// recordUnread records the deliveries a consumer received but never read:
// the broker leased them all the same (and their leases may survive), so
// the history shows them, unsettled, before the crash.
func (l *powerLoop) recordUnread(c *consumer) {
	for _, sub := range c.subs {
		for unread := true; unread; {
			select {
			case d, ok := <-sub.Deliveries():
				if unread = ok; ok {
					part := l.rec.part(d.Topic, d.Partition)
					if id, ok := payloadID(d.Payload); ok {
						l.rec.deliver(c.recSubs[sub][d.Partition], part, id, d.Offset, d.Tag, d.Retries)
					}
				}
			default:
				unread = false
			}
		}
	}
}

// consume subscribes to the loop's queues and settles deliveries until
// until (or, draining, until nothing arrives for powerDrainQuietTime).
func (l *powerLoop) consume(ctx context.Context, c *client.Client, clientID uint32, until time.Time, drain bool) *consumer {
	var subs []*client.Subscription
	recSubs := map[*client.Subscription]map[uint32]uint64{}
	for _, q := range powerQueues {
		sub, err := c.SubscribeTopic(ctx, q.topic, client.SubscribeOptions{Prefetch: powerPrefetch})
		if err != nil {
			l.stop("subscribe %s: %v", q.topic, err)
		}
		subs = append(subs, sub)
		recSubs[sub] = map[uint32]uint64{}
		for p := uint32(0); p < q.partitions; p++ {
			recSubs[sub][p] = l.rec.subscribe(clientID, l.rec.part(q.topic, p), powerPrefetch)
		}
	}
	cons := &consumer{subs: subs, recSubs: recSubs, acked: map[topicPartition][]uint64{}}
	// FIBRIL_E2E_LOAD_SYNC_MS plays a loaded disk from the consumer's
	// subscriptions to the power loss (not before: recovery, also of a
	// partition loaded on its first use, fsyncs every file): fsyncs of
	// hundreds of ms, as measured under a CPU and fsync burner.
	if ms := envInt("FIBRIL_E2E_LOAD_SYNC_MS", 0); ms > 0 && !drain {
		l.fs.SetSyncDelay(time.Duration(ms) * time.Millisecond)
	}
	var stop <-chan time.Time
	if !drain {
		stop = time.After(time.Until(until))
	}
	for {
		var d *client.Delivery
		var ok bool
		var from *client.Subscription
		quiet := time.After(powerDrainQuietTime)
		select {
		case d, ok = <-subs[0].Deliveries():
			from = subs[0]
		case d, ok = <-subs[1].Deliveries():
			from = subs[1]
		case <-stop:
			return cons
		case <-quiet:
			if drain {
				return cons
			}
			continue
		}
		if !ok {
			if drain {
				l.stop("drain: subscription closed: %v", from.CloseReason())
			}
			return cons // the broker went away
		}
		l.handle(ctx, cons, clientID, recSubs[from][d.Partition], d, drain)
	}
}

// handle checks one delivery and settles it.
func (l *powerLoop) handle(ctx context.Context, cons *consumer, clientID uint32, sub uint64, d *client.Delivery, drain bool) {
	part := l.rec.part(d.Topic, d.Partition)
	id, ok := payloadID(d.Payload)
	l.mu.Lock()
	want, known := l.payloads[id]
	l.mu.Unlock()
	if !ok || !known || !bytes.Equal(d.Payload, want) {
		l.mu.Lock()
		l.res.lost++
		l.res.example("a delivery at %s offset %d carries %d bytes that are no published payload (id %d)", d.Topic, d.Offset, len(d.Payload), id)
		l.markBad(len(l.crashMs) + 1)
		l.mu.Unlock()
		_ = d.Complete(ctx)
		return
	}
	now := time.Now().UnixMilli()
	l.mu.Lock()
	tagKey := strconv.Itoa(part) + "/" + strconv.FormatUint(d.Tag, 10)
	if l.tags[tagKey] {
		l.res.tagRepeats++
		l.res.example("tag %d of %s/%d delivered twice (the second time after power loss %d)", d.Tag, d.Topic, d.Partition, len(l.crashMs))
		l.markBad(len(l.crashMs))
	}
	l.tags[tagKey] = true
	if len(l.deliveries[id]) > 0 {
		l.res.redelivered++
	}
	l.deliveries[id] = append(l.deliveries[id], delivery{id: id, where: partOffset{part, d.Offset}, atMs: now})
	l.mu.Unlock()
	l.rec.deliver(sub, part, id, d.Offset, d.Tag, d.Retries)

	action := checker.ActionAck
	var notBefore time.Time
	if !drain && d.Retries == 0 {
		switch v := l.rng.IntN(20); {
		case v < 3:
			action, notBefore = checker.ActionRetry, time.Now().Add(time.Duration(200+l.rng.IntN(400))*time.Millisecond)
		case v < 4:
			action = checker.ActionRetry
		}
	}
	var err error
	switch {
	case action == checker.ActionAck:
		err = d.Complete(ctx)
	case notBefore.IsZero():
		err = d.Retry(ctx)
	default:
		err = d.RetryAfter(ctx, time.Until(notBefore))
	}
	if err != nil {
		return // not sent: the broker went away
	}
	var notBeforeMs int64
	if !notBefore.IsZero() {
		notBeforeMs = notBefore.UnixMilli()
	}
	l.rec.settle(clientID, sub, part, id, d.Offset, d.Tag, d.Retries, action, notBeforeMs)
	if action == checker.ActionAck {
		l.mu.Lock()
		l.res.acked++
		l.mu.Unlock()
		tp := topicPartition{d.Topic, d.Partition}
		cons.acked[tp] = append(cons.acked[tp], id)
	}
}

// fence publishes, on the consumer's connection, one confirmed message to
// each partition the consumer acked on, and returns a channel that yields,
// once every fence has its answer (or the connection died), the acks each
// confirmed fence made durable. An ACK has no reply; a publish the client
// sends after it on the same connection to the same partition is handled
// after it and goes to the partition's one log after it, and PUBLISH_OK
// comes after the fsync (PROTOCOL 5.9, 7.2): once that confirm is back,
// every ack sent before it on that partition is durable. Each fence is
// keyed to land on exactly its partition (checked against the partition
// the client chose). Call it after the consumer sent its last settle.
func (l *powerLoop) fence(ctx context.Context, c *client.Client, clientID uint32, cons *consumer) <-chan fenceResult {
	tps := make([]topicPartition, 0, len(cons.acked))
	for tp := range cons.acked {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].topic != tps[j].topic {
			return tps[i].topic < tps[j].topic
		}
		return tps[i].partition < tps[j].partition
	})
	done := make(chan fenceResult, 1)
	// Sent from a goroutine: a send can wait (for the partition count, or
	// behind a full outbox) until the power loss cancels ctx.
	go func() {
		var wg sync.WaitGroup
		var mu sync.Mutex
		res := fenceResult{partitions: len(tps)}
		for _, tp := range tps {
			count := uint32(0)
			for _, q := range powerQueues {
				if q.topic == tp.topic {
					count = q.partitions
				}
			}
			l.mu.Lock()
			l.nextID++
			id := l.nextID
			l.mu.Unlock()
			key := ""
			for k := 0; ; k++ {
				key = strconv.FormatUint(id, 10) + "/fence" + strconv.Itoa(k)
				if wire.PartitionForKey([]byte(key), count) == tp.partition {
					break
				}
			}
			payload := powerPayload(id, 16+int(id%64))
			l.mu.Lock()
			l.payloads[id] = payload
			l.mu.Unlock()
			part := l.rec.part(tp.topic, tp.partition)
			op := l.rec.publishCall(clientID, part, id, 0, 0)
			conf, err := c.Publisher(tp.topic).PublishWithConfirmation(ctx, client.Raw(payload).PartitionKey(key))
			if err != nil {
				continue // not sent: the broker went away; these acks stay unfenced
			}
			if conf.Partition() != tp.partition {
				l.t.Errorf("a fence for %s/%d keyed %q went to partition %d", tp.topic, tp.partition, key, conf.Partition())
				continue
			}
			acked := cons.acked[tp]
			wg.Add(1)
			go func() {
				defer wg.Done()
				offset, err := conf.Wait(ctx)
				l.published(clientID, op, part, id, offset, err)
				if err == nil {
					mu.Lock()
					res.confirmed++
					res.settled = append(res.settled, acked...)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		done <- res
	}()
	return done
}

// fenceResult is what a consumer's fences made durable.
type fenceResult struct {
	partitions, confirmed int      // fences sent, and confirmed
	settled               []uint64 // the acks the confirmed fences made durable
}

// markBad notes that the power loss ending cycle (1-based) did damage.
func (l *powerLoop) markBad(cycle int) {
	cycle = max(cycle, 1)
	if l.res.caughtAtCycle == 0 || cycle < l.res.caughtAtCycle {
		l.res.caughtAtCycle = cycle
	}
}

// cycleOf is the cycle a moment belongs to (1-based: before the first
// power loss is cycle 1).
func (l *powerLoop) cycleOf(atMs int64) int {
	return sort.Search(len(l.crashMs), func(i int) bool { return l.crashMs[i] >= atMs }) + 1
}

// drain consumes everything left after the last power loss.
func (l *powerLoop) drain() {
	c, err := l.broker.dial(context.Background(), client.TransportTCP)
	if err != nil {
		l.res.userLost++
		l.stop("drain: cannot log in as %s: %v", powerUser, err)
	}
	defer c.Close()
	l.checkCatalogue(c, l.res.cycles+1)
	l.consume(context.Background(), c, 1, time.Time{}, true)
	l.mu.Lock()
	defer l.mu.Unlock()
	drained := 0
	last := int64(0)
	if n := len(l.crashMs); n > 0 {
		last = l.crashMs[n-1]
	}
	for _, ds := range l.deliveries {
		for _, d := range ds {
			if d.atMs > last {
				drained++
			}
		}
	}
	l.res.drained = drained
}

// checkSettings: the two settings queues still behave as declared.
func (l *powerLoop) checkSettings() {
	ctx := l.ctx()
	c, err := l.broker.dial(ctx, client.TransportQUIC)
	if err != nil {
		l.stop("settings: %v", err)
	}
	defer c.Close()
	if _, err := c.Publisher(settingsTTLQueue).PublishConfirmed(ctx, client.Text("expires")); err != nil {
		l.stop("%v", err)
	}
	time.Sleep(2 * settingsTTL)
	sub, err := c.SubscribeTopic(ctx, settingsTTLQueue, client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		l.stop("%v", err)
	}
	select {
	case d := <-sub.Deliveries():
		l.res.settingsLost++
		l.res.example("%s's default TTL of %v was lost: a message came %v after its publish", settingsTTLQueue, settingsTTL, time.Since(d.ReceivedAt))
		l.markBad(l.res.cycles)
	case <-time.After(2 * settingsTTL):
	}
	if _, err := c.Publisher(settingsRetryQueue).PublishConfirmed(ctx, client.Text("retried")); err != nil {
		l.stop("%v", err)
	}
	rsub, err := c.SubscribeTopic(ctx, settingsRetryQueue, client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		l.stop("%v", err)
	}
	for attempt := 0; attempt < 3; attempt++ {
		select {
		case d := <-rsub.Deliveries():
			if attempt == 2 {
				l.res.settingsLost++
				l.res.example("%s's max_retries 1 was lost: delivered again with retries %d", settingsRetryQueue, d.Retries)
				l.markBad(l.res.cycles)
			}
			_ = d.Retry(ctx)
		case <-time.After(powerDrainQuietTime):
			if attempt < 2 {
				l.stop("%s: delivery %d never came", settingsRetryQueue, attempt+1)
			}
		}
	}
}

// judge compares what was confirmed and acked with what arrived.
func (l *powerLoop) judge() {
	l.mu.Lock()
	ids := make([]uint64, 0, len(l.confirm))
	for id := range l.confirm {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	holders := map[partOffset]uint64{}
	for id, ds := range l.deliveries {
		for _, d := range ds {
			if other, ok := holders[d.where]; ok && other != id {
				l.res.doubled++
				l.res.example("offset %d of partition %d delivered as message %d and as message %d", d.where.offset, d.where.part, other, id)
				l.markBad(l.cycleOf(d.atMs) - 1)
			}
			holders[d.where] = id
		}
	}
	for _, id := range ids {
		l.judgeOne(id)
	}
	l.mu.Unlock()
	report := checkHistory(l.t, l.rec)
	l.res.checkerViolations = len(report.Violations)
	if len(report.Violations) > 0 {
		l.res.example("checker: %s", report.Violations[0])
		l.markBad(l.res.cycles)
	}
}

// judgeOne checks one confirmed message (l.mu held).
func (l *powerLoop) judgeOne(id uint64) {
	where := l.confirm[id]
	ds := l.deliveries[id]
	if len(ds) == 0 {
		if l.mayHaveExpired(id) {
			return
		}
		l.res.lost++
		l.res.example("message %d confirmed at partition %d offset %d never arrived", id, where.part, where.offset)
		l.markBad(l.cycleOf(l.confirmedAt[id]))
		return
	}
	for _, d := range ds {
		if d.where != where {
			l.res.moved++
			l.res.example("message %d confirmed at partition %d offset %d arrived at partition %d offset %d", id, where.part, where.offset, d.where.part, d.where.offset)
			l.markBad(l.cycleOf(d.atMs) - 1)
			break
		}
	}
	// An ack that a confirmed fence followed before a power loss is
	// durable: nothing after that power loss may deliver the message again.
	// How long before the power loss an ack was sent proves nothing (it
	// may wait behind a round whose fsync takes hundreds of ms).
	for _, cycle := range l.fencedAcks[id] {
		crashMs := l.crashMs[cycle-1]
		for _, d := range ds {
			if d.atMs > crashMs {
				l.res.ackedBack++
				l.res.example("message %d, acked and fenced by a confirm before power loss %d, came back after it", id, cycle)
				l.markBad(cycle)
				return
			}
		}
	}
}

// mayHaveExpired: a short-TTL message may be gone by the drain.
func (l *powerLoop) mayHaveExpired(id uint64) bool {
	return l.ttlMs[id] > 0 && l.ttlMs[id] <= shortTTL.Milliseconds()
}
