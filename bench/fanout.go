package bench

// The fanout scenario (../shared/bench-peers README "fanout"): P producers
// preload Msgs records into a fresh append-only log (confirmed), then C
// independent durable readers start at once, each reading the whole log from
// its first record over its own connection and acking every delivery.
//
// Invariants:
//   - secs runs from just before the first reader is created until the last
//     reader has received every id; the preload is reported apart
//     (preload_msgs_per_s), as the harness does;
//   - records counts distinct (reader, id) pairs: readers x msgs in a clean
//     run; delivered, missing and dups are summed over readers.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// FanoutTarget is a Target that also has append-only logs with independent
// readers.
type FanoutTarget interface {
	Target
	// PrepareLog creates a fresh, durable log for w; producers created
	// afterwards publish to it.
	PrepareLog(ctx context.Context, w Workload) error
	// NewReader opens reader idx over its own connection: a durable reader
	// from the log's first record, settling every delivery right after its
	// DeliverFunc returned.
	NewReader(ctx context.Context, idx int, deliver DeliverFunc) (Consumer, error)
}

func runFanout(ctx context.Context, t Target, w Workload, out *Line) error {
	ft, ok := t.(FanoutTarget)
	if !ok {
		return errors.New("this target has no append-only logs")
	}
	if err := ft.PrepareLog(ctx, w); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	p, err := newPublishRun(ctx, t, w)
	if err != nil {
		return err
	}
	p.start(ctx)
	publishedOK := p.wait(ctx)
	preloadSecs := float64(p.endNs()-p.startNs) / 1e9
	p.close()
	out.Set("preload_msgs_per_s", float64(p.confirmed.Load())/preloadSecs)
	out.Set("nacked", p.nacked.Load())
	if p.err != nil {
		return p.err
	}
	if !publishedOK {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("preload incomplete")
	}

	tracks := make([]*receiveTrack, w.Consumers)
	for i := range tracks {
		tracks[i] = newReceiveTrack(w.Msgs)
	}
	var readers []Consumer
	defer func() {
		for _, r := range readers {
			_ = r.Close()
		}
	}()
	startNs := MonoNs()
	for i := range w.Consumers {
		r, err := ft.NewReader(ctx, i, tracks[i].deliver)
		if err != nil {
			return fmt.Errorf("reader %d: %w", i, err)
		}
		readers = append(readers, r)
	}
	allOK := true
	var endNs int64
	for _, tr := range tracks {
		select {
		case <-tr.allReceived:
			endNs = max(endNs, tr.lastNs.Load())
		case <-ctx.Done():
			allOK = false
		}
		if !allOK {
			break
		}
	}
	if endNs == 0 {
		endNs = MonoNs()
	}
	time.Sleep(ackSettleDelay)

	var records, delivered, missing, dups, unknown int64
	for _, tr := range tracks {
		records += tr.unique.Load()
		delivered += tr.deliveries.Load()
		missing += tr.missing()
		dups += tr.dups.Load()
		unknown += tr.unknownIDs.Load()
	}
	secs := float64(endNs-startNs) / 1e9
	out.Set("secs", secs)
	out.Set("msgs_per_s", float64(records)/secs)
	out.Set("records", records)
	out.Set("delivered", delivered)
	out.Set("missing", missing)
	out.Set("dups", dups)
	switch {
	case !allOK:
		return ctx.Err()
	case unknown > 0:
		return fmt.Errorf("%d deliveries carried no valid id", unknown)
	}
	return nil
}
