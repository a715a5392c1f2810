package sweep

// The two kinds that measure a broker at rest rather than a workload's
// throughput: backlog (memory per unread message, then a restart's recovery
// and first delivery) and idle (CPU and memory of idle queues).
//
// Invariants:
//   - Both publish through bench.Run, so their messages are confirmed (durable)
//     before anything is sampled.
//   - A sample that could not be taken is NaN (printed NaN, drawn nowhere),
//     never 0.
//   - No step waits past the point's deadline.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fibril-go/fibril/bench"
	"github.com/fibril-go/fibril/client"
)

// backlogSettle lets the last group commits and the runtime settle after the
// publish before RSS is read, so the sample is the backlog's resting cost
// rather than the publish burst's transient buffers.
const backlogSettle = time.Second

// recoveryPollInterval is the pause between connect+subscribe attempts while
// the restarted broker recovers.
const recoveryPollInterval = 10 * time.Millisecond

// orNaN turns the -1 of bench's samplers into NaN.
func orNaN(v float64) float64 {
	if v < 0 {
		return math.NaN()
	}
	return v
}

// runBacklog publishes w.Msgs messages nobody consumes, samples memory,
// restarts the broker on the same data dir and times its recovery.
func runBacklog(line *bench.Line, broker *Broker, target *bench.Fibril, w bench.Workload, o Options, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	broker.CollectGarbage(ctx)
	rssIdleMB := orNaN(bench.ProcessRSSMB(broker.PID()))
	heapIdleMB := orNaN(broker.HeapMB(ctx))
	result, _ := bench.Run(target, w, bench.RunOptions{System: bench.System(target.Transport), RunLabel: "1",
		Timeout: time.Until(deadline), ServerPID: broker.PID()})
	status, errText := copyFields(line, result)
	addDerived(line, w)
	if status != bench.StatusOK {
		setStatus(line, status, errText)
		return
	}
	sleepCtx(ctx, backlogSettle)
	gcOK := broker.CollectGarbage(ctx)
	rssMB := orNaN(bench.ProcessRSSMB(broker.PID()))
	heapMB := orNaN(broker.HeapMB(ctx))
	line.Set("gc_forced", gcOK)
	line.Set("rss_idle_mb", rssIdleMB)
	line.Set("rss_mb", rssMB)
	line.Set("heap_idle_mb", heapIdleMB)
	line.Set("heap_mb", heapMB)
	line.Set("rss_bytes_per_msg", RSSBytesPerMsg(rssMB, rssIdleMB, int64(w.Msgs)))
	// The same arithmetic over the live heap: RSS also holds memory the
	// runtime has freed but not yet returned, so the two bound the cost.
	line.Set("heap_bytes_per_msg", RSSBytesPerMsg(heapMB, heapIdleMB, int64(w.Msgs)))

	line.Set("restart", map[bool]string{true: "sigkill", false: "sigterm"}[o.RestartKill])
	if err := broker.Restart(o.RestartKill); err != nil {
		failLine(line, fmt.Errorf("restarting the broker: %w", err))
		return
	}
	c, sub, subscribeStartedAt, err := subscribeWhenUp(ctx, broker, target)
	if err != nil {
		failLine(line, fmt.Errorf("after the restart: %w", err))
		return
	}
	defer c.Close()
	recoveryS := time.Since(broker.StartedAt).Seconds()
	firstCtx, cancelFirst := context.WithTimeout(ctx, firstDeliveryTimeout)
	defer cancelFirst()
	select {
	case _, ok := <-sub.Deliveries():
		if !ok {
			failLine(line, fmt.Errorf("after the restart: subscription ended: %w", sub.CloseReason()))
			return
		}
	case <-firstCtx.Done():
		failLine(line, fmt.Errorf("no delivery after the restart: %w", firstCtx.Err()))
		return
	}
	// From the start of the SUBSCRIBE that worked: the first delivery may
	// arrive before SubscribeTopic returns (it waits for every partition's
	// SUBSCRIBE_OK), so timing from its return would read near zero.
	firstDelivery := time.Since(subscribeStartedAt)
	// recovery_s runs to the return of that SUBSCRIBE: process start to the
	// first successful connect+subscribe.
	line.Set("recovery_s", recoveryS)
	line.Set("first_delivery_ms", float64(firstDelivery.Microseconds())/1e3)
	line.Set("first_delivery_s", firstDelivery.Seconds())
	broker.CollectGarbage(ctx)
	line.Set("rss_recovered_mb", orNaN(bench.ProcessRSSMB(broker.PID())))
	line.Set("heap_recovered_mb", orNaN(broker.HeapMB(ctx)))
	setStatus(line, bench.StatusOK, "")
}

// subscribeWhenUp retries connect+subscribe on the backlog's queue until one
// works: the restarted broker accepts nothing until it has recovered. It
// returns when the successful SUBSCRIBE started.
func subscribeWhenUp(ctx context.Context, broker *Broker, target *bench.Fibril) (*client.Client, *client.Subscription, time.Time, error) {
	var last error
	for {
		if broker.exited() {
			return nil, nil, time.Time{}, fmt.Errorf("broker exited: %s", broker.Log())
		}
		// A QUIC dial to a port nobody listens on yet gets no refusal (UDP):
		// it would block for the whole attempt timeout and give recovery_s a
		// floor of one attempt. The admin listener is up before recovery
		// starts and answers /readyz 200 once both transports serve, so
		// dial only then.
		if !broker.ready(ctx) {
			last = errors.New("/readyz is not 200 yet")
			select {
			case <-ctx.Done():
				return nil, nil, time.Time{}, errors.Join(ctx.Err(), last)
			case <-time.After(recoveryPollInterval):
			}
			continue
		}
		attemptCtx, cancel := context.WithTimeout(ctx, dialAttemptTimeout)
		c, err := broker.Dial(attemptCtx, target.Transport)
		cancel()
		if err == nil {
			// The subscribe may wait for the queue's recovery: the point's
			// deadline bounds it, not a dial-sized timeout.
			startedAt := time.Now()
			sub, err := c.SubscribeTopic(ctx, target.Topic(), client.SubscribeOptions{Prefetch: 1})
			if err == nil {
				return c, sub, startedAt, nil
			}
			c.Close()
			last = err
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return nil, nil, time.Time{}, errors.Join(ctx.Err(), last)
		case <-time.After(recoveryPollInterval):
		}
	}
}

// runIdle declares x queues with one message each (none for x = 0), lets the
// broker settle with no client connected, then samples its CPU over
// o.IdleSample. /proc counts CPU in 10 ms ticks, so over 10 s the figure's
// resolution is 1,000 µs/s (0.1 %).
func runIdle(line *bench.Line, broker *Broker, target *bench.Fibril, w bench.Workload, x float64, o Options, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if x >= 1 {
		result, _ := bench.Run(target, w, bench.RunOptions{System: bench.System(target.Transport), RunLabel: "1",
			Timeout: time.Until(deadline), ServerPID: broker.PID()})
		status, errText := copyFields(line, result)
		if status != bench.StatusOK {
			setStatus(line, status, errText)
			return
		}
	} else {
		line.Set("system", bench.System(target.Transport))
	}
	line.Set("queues", int(x))
	if !sleepCtx(ctx, o.IdleSettle) {
		failLine(line, ctx.Err())
		return
	}
	// Collect before the CPU window (the GC's own CPU must not count as
	// idle cost); RSS and heap are read after it.
	line.Set("gc_forced", broker.CollectGarbage(ctx))
	cpuBefore, before := bench.ProcessCPUSeconds(broker.PID()), time.Now()
	if !sleepCtx(ctx, o.IdleSample) {
		failLine(line, ctx.Err())
		return
	}
	cpuAfter, elapsedS := bench.ProcessCPUSeconds(broker.PID()), time.Since(before).Seconds()
	cpuUsPerS := math.NaN()
	if cpuBefore >= 0 && cpuAfter >= 0 {
		cpuUsPerS = (cpuAfter - cpuBefore) * 1e6 / elapsedS
	}
	line.Set("idle_sample_s", elapsedS)
	line.Set("idle_cpu_us_per_s", cpuUsPerS)
	line.Set("idle_cpu_pct", cpuUsPerS/1e4)
	line.Set("rss_mb", orNaN(bench.ProcessRSSMB(broker.PID())))
	line.Set("heap_mb", orNaN(broker.HeapMB(ctx)))
	setStatus(line, bench.StatusOK, "")
}

// sleepCtx sleeps d unless ctx ends first; it reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
