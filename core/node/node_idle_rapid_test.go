package node

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/fibril-go/fibril/core"
)

// A model of idle eviction (SPEC 9): sessions open, publish to and forget
// two queues, time moves, cleanup is turned on and off, unloads are held
// on their way at random. Checked:
//   - a partition is unloaded only when every condition held: cleanup on,
//     no session held it open, no subscription or other work in its Host,
//     and its last use at least the idle window ago;
//   - the Node's publisher count is the model's grants;
//   - what was published before any number of evictions is delivered after
//     the last reload, in publish order, exactly once: as without eviction.
func TestIdleAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		window := rapid.Int64Range(1, 3000).Draw(rt, "window")
		cfg := IdleCleanupConfig{Enabled: true, EvictAfterMs: window, SweepIntervalMs: rapid.Int64Range(1, 500).Draw(rt, "sweep")}
		d := newIdleDriver(rt, cfg)
		queues := []core.QueueID{qid("a", 0), qid("b", 0)}
		sessions := []SessionID{11, 12}
		grants := map[core.QueueID]map[SessionID]int{}
		lastUse := map[core.QueueID]int64{}
		published := map[core.QueueID][]string{}
		for _, q := range queues {
			grants[q] = map[SessionID]int{}
		}
		held := func(q core.QueueID) int {
			n := 0
			for _, c := range grants[q] {
				n += c
			}
			return n
		}
		d.onUnload = func(q core.QueueID, h *Host) {
			v := h.Partition().IdleView()
			switch {
			case !d.node.cfg.IdleCleanup.Enabled:
				rt.Fatalf("%v unloaded with cleanup off", q)
			case held(q) > 0:
				rt.Fatalf("%v unloaded while %d grants are held", q, held(q))
			case v.Subscriptions > 0 || v.Inflight > 0 || v.Gated > 0 || v.Unpersisted:
				rt.Fatalf("%v unloaded with work: %+v", q, v)
			case d.now-lastUse[q] < window:
				rt.Fatalf("%v unloaded %d ms after its last use (window %d)", q, d.now-lastUse[q], window)
			}
		}
		seq := 0
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			q := rapid.SampledFrom(queues).Draw(rt, "queue")
			s := rapid.SampledFrom(sessions).Draw(rt, "session")
			switch rapid.SampledFrom([]string{"publish", "publish", "forget", "advance", "advance", "toggle", "hold", "finish"}).Draw(rt, "op") {
			case "publish":
				if grants[q][s] == 0 {
					d.finishUnloads() // a real session's Open would wait; the model's is synchronous
					if !d.open(s, q) {
						rt.Fatalf("open of %v not answered", q)
					}
					grants[q][s]++
				}
				seq++
				payload := fmt.Sprintf("%s-%d", q.Topic, seq)
				d.publish(s, q, payload)
				published[q] = append(published[q], payload)
				lastUse[q] = d.now
			case "forget":
				if grants[q][s] > 0 {
					grants[q][s]--
					d.forget(s, q)
				}
			case "advance":
				d.advance(rapid.Int64Range(1, 2*window).Draw(rt, "ms"))
			case "toggle":
				c := d.node.cfg.IdleCleanup
				c.Enabled = !c.Enabled
				d.setCleanup(c)
			case "hold":
				d.holdUnloads = true
			case "finish":
				d.holdUnloads = false
				d.finishUnloads()
			}
			for _, r := range d.debug().Rows {
				if r.Publishers != held(r.Queue) {
					rt.Fatalf("%v: the Node counts %d publishers, the model %d", r.Queue, r.Publishers, held(r.Queue))
				}
			}
		}
		d.holdUnloads = false
		d.finishUnloads()
		off := d.node.cfg.IdleCleanup
		off.Enabled = false
		d.setCleanup(off)
		for i, q := range queues {
			if len(published[q]) == 0 {
				continue
			}
			if grants[q][99] == 0 {
				d.open(99, q)
			}
			if got := d.drain(99, q, uint64(i+1)); !slices.Equal(got, published[q]) {
				rt.Fatalf("%v delivered %q, published %q (%d evictions)", q, got, published[q], d.unloads[q])
			}
		}
	})
}
