package broker

import (
	"sync/atomic"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// Idle queue eviction, the driver's part (SPEC 9, docs/idle.md): the Node
// decides and the Host agrees; this file only drops the Host and closes
// its storage when told (Ready.Unload), then answers UnloadDone.
// Invariants:
//   - the runner leaves the hosts table before it closes, so every
//     envelope routed to the partition afterwards bounces to its sender
//     (the Node holds its own Opens until UnloadDone, so none is a client's
//     request);
//   - UnloadDone is delivered only after the log is flushed and closed:
//     the reload that may follow opens files nobody holds;
//   - the counters only count; they decide nothing.

// idleCounters are the eviction counters /metrics reads.
type idleCounters struct {
	evictions atomic.Uint64
	reloads   atomic.Uint64
}

// startUnload carries out one Ready.Unload off the Node's goroutine (a
// close waits for the partition's last fsync).
func (b *Broker) startUnload(id core.QueueID) {
	b.loads.Add(1)
	go func() {
		defer b.loads.Done()
		b.hostMu.Lock()
		r := b.hosts[id]
		if r != nil {
			delete(b.hosts, id)
		}
		b.hostMu.Unlock()
		if r != nil {
			r.close()
			b.idle.evictions.Add(1)
		}
		b.deliverTo(b.nodeActor, &node.UnloadDone{Queue: id})
	}()
}

// IdleEvictions and IdleReloads are the eviction counters since start.
func (b *Broker) IdleEvictions() uint64 { return b.idle.evictions.Load() }
func (b *Broker) IdleReloads() uint64   { return b.idle.reloads.Load() }
