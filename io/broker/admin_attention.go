package broker

import "sort"

// QueueReady is one queue's backlog for the admin listener's attention
// items (backlog_rising, no_consumer): the sums over its loaded partitions.
type QueueReady struct {
	Topic, Group string
	Ready        uint64
	Consumers    int
}

// QueueReadyCounts sums the ready count and consumers of every loaded
// queue partition, by queue, sorted by (topic, group). It reads only the
// runners' observations (atomics under the host table's read lock); the
// first call switches observations on, so the next one sees every loaded
// partition. Unloaded queues are absent: an idle queue has no backlog
// worth an alert, and loading 10,000 queues to check would be the alert.
func (b *Broker) QueueReadyCounts() []QueueReady {
	b.wantObservations()
	type key struct{ topic, group string }
	sums := map[key]*QueueReady{}
	b.hostMu.RLock()
	for id, r := range b.hosts {
		if !r.obs.set.Load() {
			continue
		}
		k := key{id.Topic, id.Group}
		q := sums[k]
		if q == nil {
			q = &QueueReady{Topic: id.Topic, Group: id.Group}
			sums[k] = q
		}
		q.Ready += uint64(max(r.obs.ready.Load(), 0))
		q.Consumers += int(r.obs.consumers.Load())
	}
	b.hostMu.RUnlock()
	out := make([]QueueReady, 0, len(sums))
	for _, q := range sums {
		out = append(out, *q)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Group < out[j].Group
	})
	return out
}
