package broker

import (
	"os"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// A runner's observation of its Host (once per batch, on the publish path
// whether anyone lists or not) allocates nothing and takes no lock.
func TestQueueObservationDoesNotAllocate(t *testing.T) {
	pcfg := core.DefaultConfig(core.QueueID{Topic: "obs"})
	pcfg.Epoch = 1
	p, err := core.NewPartition(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	h := node.NewHost(node.DefaultConfig(), p, node.LoadRequest{Queue: pcfg.Queue, Config: pcfg})
	h.Step(&node.Deliver{Envelope: node.Envelope{From: node.SessionAddr(1), To: node.PartitionAddr(pcfg.Queue),
		Msg: &node.Request{Input: &core.Publish{Body: &core.Body{Payload: []byte("x")}}}}})
	r := &hostRunner{h: h, b: &Broker{}}
	r.observe()
	if r.obs.set.Load() {
		t.Fatal("observed while nobody listed")
	}
	r.b.rates.wanted.Store(true)
	allocs := testing.AllocsPerRun(1000, r.observe)
	if allocs != 0 {
		t.Fatalf("observing allocated %v times per run", allocs)
	}
	if !r.obs.set.Load() || r.obs.ready.Load() != 1 || r.obs.published.Load() != 1 {
		t.Fatalf("observed ready %d published %d", r.obs.ready.Load(), r.obs.published.Load())
	}
}

// BenchmarkQueueObservation is the cost a runner pays per batch for the
// listings and gauges (compare BenchmarkHostPublishConfirm in core/node).
func BenchmarkQueueObservation(b *testing.B) {
	pcfg := core.DefaultConfig(core.QueueID{Topic: "obs"})
	pcfg.Epoch = 1
	p, err := core.NewPartition(pcfg)
	if err != nil {
		b.Fatal(err)
	}
	r := &hostRunner{b: &Broker{}, h: node.NewHost(node.DefaultConfig(), p, node.LoadRequest{Queue: pcfg.Queue, Config: pcfg})}
	if os.Getenv("FIBRIL_BENCH_OBSERVED") != "" {
		r.b.rates.wanted.Store(true) // someone lists: the stored path
	}
	b.ReportAllocs()
	for b.Loop() {
		r.observe()
	}
}

// BenchmarkQueueObservationChanging: two counters move per batch (a publish
// and its delivery), the common case under load.
func BenchmarkQueueObservationChanging(b *testing.B) {
	pcfg := core.DefaultConfig(core.QueueID{Topic: "obs"})
	pcfg.Epoch = 1
	p, err := core.NewPartition(pcfg)
	if err != nil {
		b.Fatal(err)
	}
	h := node.NewHost(node.DefaultConfig(), p, node.LoadRequest{Queue: pcfg.Queue, Config: pcfg})
	r := &hostRunner{h: h, b: &Broker{}}
	r.b.rates.wanted.Store(true)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.obs.last.Counts.Ready = i // as if ready and published moved
		r.obs.last.Published = uint64(i)
		r.observe()
	}
}

// Switching observations on pokes every loaded runner once with a Tick, so
// a partition that steps nothing afterwards (idle) is observed all the same.
func TestWantObservationsPokesEveryRunnerOnce(t *testing.T) {
	id := core.QueueID{Topic: "idle"}
	r := &hostRunner{notify: make(chan struct{}, 1)}
	b := &Broker{hosts: map[core.QueueID]*hostRunner{id: r}}
	b.wantObservations()
	b.wantObservations()
	if len(r.queue) != 1 {
		t.Fatalf("%d inputs pushed, want one Tick", len(r.queue))
	}
	if _, ok := r.queue[0].in.(*node.Tick); !ok {
		t.Fatalf("pushed %T, want a Tick", r.queue[0].in)
	}
	if !b.rates.wanted.Load() {
		t.Fatal("observations not switched on")
	}
}

// Rates are measured over windows of at least rateWindowMinMs: listings
// closer together (several dashboard tabs, the event tick, fibrilctl)
// answer the last window's rates and leave its baseline alone, so a
// listing between two ticks cannot turn a steady 100/s into slivers.
func TestListingRatesKeepTheirWindow(t *testing.T) {
	var s rateSamples
	id := core.QueueID{Topic: "rates"}
	list := func(nowMs int64, published, delivered uint64) (float64, float64) {
		r := s.round(nowMs)
		pub, del := r.rate(id, published, delivered)
		r.done()
		return pub, del
	}
	if pub, del := list(0, 0, 0); pub != 0 || del != 0 {
		t.Fatalf("first listing %v %v", pub, del)
	}
	if pub, del := list(2_000, 200, 100); pub != 100 || del != 50 {
		t.Fatalf("a 2 s window: %v %v", pub, del)
	}
	// 300 ms later, another caller: the same rates, whatever moved.
	if pub, del := list(2_300, 260, 100); pub != 100 || del != 50 {
		t.Fatalf("a listing inside the window: %v %v", pub, del)
	}
	// The next window runs from the last sample (2 s), not from 2.3 s.
	if pub, del := list(4_000, 400, 300); pub != 100 || del != 100 {
		t.Fatalf("the next window: %v %v", pub, del)
	}
	// A counter that went back (a reload) gives 0, not a huge rate.
	if pub, _ := list(6_000, 10, 300); pub != 0 {
		t.Fatalf("a counter reset: %v", pub)
	}
}
