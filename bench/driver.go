package bench

// The drivers: windows, ids, timing and loss checks, independent of the broker
// behind a Target.
//
// Invariants:
//   - A producer never has more than Workload.Window messages between taking a
//     slot and the confirmation for that message (a slot is returned exactly
//     when a message's first confirmation, positive or negative, arrives).
//   - Every id is published at most once; a second confirmation of an id, or a
//     confirmation of an unknown id, counts as dup_confirms and changes nothing
//     else.
//   - The first delivery of an id sets its latency; later ones count as dups.
//   - Every blocking point selects on the run's context, so a timeout ends the
//     run with partial counts instead of hanging it.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ConfirmFunc reports the broker's answer for one published message: ok=true
// for a confirmation, false for a rejection or a publish that failed after it
// was sent. A Producer calls it exactly once per message, from any goroutine.
type ConfirmFunc func(id uint64, ok bool)

// DeliverFunc receives one delivery's body, before the consumer acknowledges
// it. The body is only valid during the call.
type DeliverFunc func(body []byte)

// Producer publishes over its own connection.
type Producer interface {
	// PublishAsync sends body as one persistent message and returns without
	// waiting for the confirmation. body may be reused once it returns.
	PublishAsync(ctx context.Context, id uint64, body []byte) error
	Close() error
}

// Consumer receives over its own connection until closed, settling every
// delivery individually right after its DeliverFunc returned.
type Consumer interface {
	Close() error
}

// Target is one broker (and transport) the workload runs against.
type Target interface {
	// Prepare creates a fresh, durable queue for w; producers and consumers
	// created afterwards use it.
	Prepare(ctx context.Context, w Workload) error
	NewProducer(ctx context.Context, idx int, confirm ConfirmFunc) (Producer, error)
	NewConsumer(ctx context.Context, idx int, deliver DeliverFunc) (Consumer, error)
	// Remaining counts the messages the queue still holds (ready or unsettled)
	// once every consumer was closed.
	Remaining(ctx context.Context) (int64, error)
	Close() error
}

// producersStopTimeout bounds how long closing waits for producer goroutines;
// they select on the cancelled context everywhere, so this is only a backstop.
const producersStopTimeout = 10 * time.Second

// ackSettleDelay lets the last acknowledgements reach the broker before the
// consumers close, as the harness does before it counts what is left.
const ackSettleDelay = 200 * time.Millisecond

// remainingTimeout bounds the left probe beyond the run's own time limit, like
// the harness's cleanup context.
const remainingTimeout = 20 * time.Second

// publishRun is the publishing side of one scenario.
type publishRun struct {
	w         Workload
	blocks    []Block
	producers []Producer
	slots     []chan struct{} // per producer: a buffered send takes a slot
	sendNs    []int64         // per id: send time (MonoNs)
	confirmNs []int64         // per id: confirm latency, -1 = none yet

	confirmed, nacked, dupConfirms, settled atomic.Int64
	lastConfirmNs                           atomic.Int64
	startNs                                 int64
	allSettled                              chan struct{}

	failOnce sync.Once
	failed   chan struct{} // closed with err set when a producer fails
	err      error
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func newPublishRun(ctx context.Context, t Target, w Workload) (*publishRun, error) {
	p := &publishRun{
		w:          w,
		blocks:     SplitBlocks(w.Msgs, w.Producers),
		sendNs:     make([]int64, w.Msgs),
		confirmNs:  make([]int64, w.Msgs),
		allSettled: make(chan struct{}),
		failed:     make(chan struct{}),
	}
	for i := range p.confirmNs {
		p.confirmNs[i] = -1
	}
	for i := range p.blocks {
		slots := make(chan struct{}, w.Window)
		p.slots = append(p.slots, slots)
		pr, err := t.NewProducer(ctx, i, func(id uint64, ok bool) { p.onConfirm(slots, id, ok) })
		if err != nil {
			p.close()
			return nil, fmt.Errorf("producer %d: %w", i, err)
		}
		p.producers = append(p.producers, pr)
	}
	return p, nil
}

func (p *publishRun) onConfirm(slots chan struct{}, id uint64, ok bool) {
	nowNs := MonoNs()
	if id >= uint64(len(p.confirmNs)) {
		p.dupConfirms.Add(1)
		return
	}
	latencyNs := nowNs - atomic.LoadInt64(&p.sendNs[id])
	if !atomic.CompareAndSwapInt64(&p.confirmNs[id], -1, max(latencyNs, 0)) {
		p.dupConfirms.Add(1)
		return
	}
	if ok {
		p.confirmed.Add(1)
	} else {
		p.nacked.Add(1)
	}
	select {
	case <-slots:
	default:
		panic("bench: a confirmation returned a slot that was never taken")
	}
	if p.settled.Add(1) == int64(p.w.Msgs) {
		p.lastConfirmNs.Store(nowNs)
		close(p.allSettled)
	}
}

func (p *publishRun) fail(err error) {
	p.failOnce.Do(func() {
		p.err = err
		close(p.failed)
		p.cancel()
	})
}

// start releases every producer at the same instant, the start of the clock.
func (p *publishRun) start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	gate := make(chan struct{})
	for i := range p.producers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			<-gate
			err := p.produce(ctx, i)
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				p.fail(fmt.Errorf("producer %d: %w", i, err))
			}
		}()
	}
	p.startNs = MonoNs()
	close(gate)
}

func (p *publishRun) produce(ctx context.Context, i int) error {
	pr, slots, block := p.producers[i], p.slots[i], p.blocks[i]
	body := NewBody(p.w.SizeBytes, i)
	// One timer per producer, reset per paced message: a timer per message
	// would be garbage at exactly the rates where latency is measured.
	pace := time.NewTimer(time.Hour)
	pace.Stop()
	defer pace.Stop()
	for k := range block.Count {
		if p.w.RateMsgsPerSec > 0 {
			if waitNs := DueNs(p.startNs, k, len(p.producers), p.w.RateMsgsPerSec) - MonoNs(); waitNs > 0 {
				pace.Reset(time.Duration(waitNs))
				select {
				case <-pace.C:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		id := block.FirstID + uint64(k)
		sendNs := MonoNs()
		PutHeader(body, id, sendNs)
		atomic.StoreInt64(&p.sendNs[id], sendNs)
		if err := pr.PublishAsync(ctx, id, body); err != nil {
			return err
		}
	}
	return nil
}

// wait reports whether every message settled before ctx ended or a producer
// failed.
func (p *publishRun) wait(ctx context.Context) bool {
	select {
	case <-p.allSettled:
		return true
	case <-p.failed:
		return false
	case <-ctx.Done():
		return false
	}
}

// endNs is the last confirmation's time, or now if not everything settled.
func (p *publishRun) endNs() int64 {
	if e := p.lastConfirmNs.Load(); e > 0 {
		return e
	}
	return MonoNs()
}

func (p *publishRun) close() {
	if p.cancel != nil {
		p.cancel()
	}
	waitTimeout(&p.wg, producersStopTimeout)
	for _, pr := range p.producers {
		_ = pr.Close()
	}
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// receiveTrack counts deliveries per id.
type receiveTrack struct {
	msgs      int
	counts    []uint32 // deliveries per id
	latencyNs []int64  // first delivery's publish->deliver latency, -1 = none

	deliveries, unique, dups, unknownIDs atomic.Int64
	lastNs                               atomic.Int64
	allReceived                          chan struct{}
}

func newReceiveTrack(msgs int) *receiveTrack {
	r := &receiveTrack{msgs: msgs, counts: make([]uint32, msgs), latencyNs: make([]int64, msgs),
		allReceived: make(chan struct{})}
	for i := range r.latencyNs {
		r.latencyNs[i] = -1
	}
	return r
}

func (r *receiveTrack) deliver(body []byte) {
	nowNs := MonoNs()
	r.deliveries.Add(1)
	id, sendNs, ok := ReadHeader(body)
	if !ok || id >= uint64(r.msgs) {
		r.unknownIDs.Add(1)
		return
	}
	if atomic.AddUint32(&r.counts[id], 1) != 1 {
		r.dups.Add(1)
		return
	}
	atomic.StoreInt64(&r.latencyNs[id], max(nowNs-sendNs, 0))
	if r.unique.Add(1) == int64(r.msgs) {
		r.lastNs.Store(nowNs)
		close(r.allReceived)
	}
}

func (r *receiveTrack) missing() int64 { return int64(r.msgs) - r.unique.Load() }

// runConfirmedPublish: P producers publish Msgs messages to a fresh queue;
// nobody consumes.
func runConfirmedPublish(ctx context.Context, t Target, w Workload, out *Line, serverPID int) error {
	if err := t.Prepare(ctx, w); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	p, err := newPublishRun(ctx, t, w)
	if err != nil {
		return err
	}
	cpu := startServerCPU(serverPID)
	p.start(ctx)
	ok := p.wait(ctx)
	endNs := p.endNs()
	measuredCPUSec := cpu.stop()
	p.close()
	secs := float64(endNs-p.startNs) / 1e9
	latency, _ := Percentiles(p.confirmNs)
	out.Set("secs", secs)
	out.Set("msgs_per_s", float64(p.confirmed.Load())/secs)
	out.Set("p50_ms", latency.P50Ms)
	out.Set("p99_ms", latency.P99Ms)
	out.Set("max_ms", latency.MaxMs)
	out.Set("confirmed", p.confirmed.Load())
	out.Set("nacked", p.nacked.Load())
	out.Set("dup_confirms", p.dupConfirms.Load())
	setMeasuredCPU(out, measuredCPUSec)
	if p.err != nil {
		return p.err
	}
	if !ok {
		return ctx.Err()
	}
	return nil
}

// runEndToEnd: C consumers attach to a fresh queue first, then P producers
// publish while the consumers receive and acknowledge; done when every id
// arrived.
func runEndToEnd(ctx context.Context, t Target, w Workload, out *Line, serverPID int) error {
	if err := t.Prepare(ctx, w); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	track := newReceiveTrack(w.Msgs)
	var consumers []Consumer
	closeConsumers := func() {
		for _, c := range consumers {
			_ = c.Close()
		}
		consumers = nil
	}
	defer closeConsumers()
	for i := range w.Consumers {
		c, err := t.NewConsumer(ctx, i, track.deliver)
		if err != nil {
			return fmt.Errorf("consumer %d: %w", i, err)
		}
		consumers = append(consumers, c)
	}
	p, err := newPublishRun(ctx, t, w)
	if err != nil {
		return err
	}
	cpu := startServerCPU(serverPID)
	p.start(ctx)
	publishedOK := p.wait(ctx)
	publishEndNs := p.endNs()
	receivedOK := false
	if publishedOK {
		select {
		case <-track.allReceived:
			receivedOK = true
		case <-ctx.Done():
		}
	}
	endNs := track.lastNs.Load()
	if endNs == 0 {
		endNs = MonoNs()
	}
	measuredCPUSec := cpu.stop()
	p.close()
	time.Sleep(ackSettleDelay)
	closeConsumers()
	left := int64(-1)
	probeCtx, cancel := context.WithTimeout(context.Background(), remainingTimeout)
	if n, err := t.Remaining(probeCtx); err == nil {
		left = n
	}
	cancel()

	secs := float64(endNs-p.startNs) / 1e9
	publishSecs := float64(publishEndNs-p.startNs) / 1e9
	latency, _ := Percentiles(track.latencyNs)
	confirmLatency, _ := Percentiles(p.confirmNs)
	out.Set("secs", secs)
	out.Set("msgs_per_s", float64(track.unique.Load())/secs)
	out.Set("p50_ms", latency.P50Ms)
	out.Set("p99_ms", latency.P99Ms)
	out.Set("max_ms", latency.MaxMs)
	out.Set("delivered", track.deliveries.Load())
	out.Set("unique", track.unique.Load())
	out.Set("missing", track.missing())
	out.Set("dups", track.dups.Load())
	out.Set("left", left)
	out.Set("pub_msgs_per_s", float64(p.confirmed.Load())/publishSecs)
	out.Set("confirm_p50_ms", confirmLatency.P50Ms)
	out.Set("confirm_p99_ms", confirmLatency.P99Ms)
	out.Set("nacked", p.nacked.Load())
	setMeasuredCPU(out, measuredCPUSec)
	switch {
	case p.err != nil:
		return p.err
	case !publishedOK || !receivedOK:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("incomplete")
	case track.unknownIDs.Load() > 0:
		return fmt.Errorf("%d deliveries carried no valid id", track.unknownIDs.Load())
	}
	return nil
}

// serverCPU samples the broker's CPU over the measured interval only (from
// the producers' release to the last confirmation or delivery), beside
// Run's server_cpu_s over the whole scenario: connecting, logging in,
// declaring and the left probe cost the broker CPU that a per-message
// figure must not be charged with (a thousand connections' logins would
// otherwise read as a cost of every message).
type serverCPU struct {
	pid       int
	beforeSec float64
}

func startServerCPU(pid int) serverCPU {
	if pid <= 0 {
		return serverCPU{}
	}
	return serverCPU{pid: pid, beforeSec: ProcessCPUSeconds(pid)}
}

// stop returns the CPU seconds since start, or -1 when unknown.
func (c serverCPU) stop() float64 {
	if c.pid <= 0 || c.beforeSec < 0 {
		return -1
	}
	afterSec := ProcessCPUSeconds(c.pid)
	if afterSec < 0 {
		return -1
	}
	return afterSec - c.beforeSec
}

// setMeasuredCPU adds server_cpu_measured_s after the scenario's own
// figures (the harness's keys keep their order), when it is known.
func setMeasuredCPU(out *Line, seconds float64) {
	if seconds >= 0 {
		out.Set("server_cpu_measured_s", seconds)
	}
}
