package bench

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeLog is an in-memory FanoutTarget: the fake broker's queue is the log,
// read whole by every reader after the preload.
type fakeLog struct {
	*fakeBroker
	once    sync.Once
	records [][]byte
	// skipEvery: every reader misses the records whose position is a
	// multiple of it (0: none), so missing must count them.
	skipEvery int
}

func (f *fakeLog) PrepareLog(ctx context.Context, w Workload) error { return f.Prepare(ctx, w) }

type fakeReader struct{ done chan struct{} }

func (r *fakeReader) Close() error { <-r.done; return nil }

func (f *fakeLog) NewReader(ctx context.Context, idx int, deliver DeliverFunc) (Consumer, error) {
	f.once.Do(func() {
		for len(f.queue) > 0 {
			f.records = append(f.records, <-f.queue)
		}
	})
	r := &fakeReader{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for i, body := range f.records {
			if f.skipEvery > 0 && i%f.skipEvery == 0 {
				continue
			}
			deliver(body)
		}
	}()
	return r, nil
}

func runFakeLog(t *testing.T, f *fakeLog, w Workload, timeout time.Duration) (map[string]string, string, string) {
	t.Helper()
	line, status := Run(f, w, RunOptions{System: "fake", RunLabel: "1", Timeout: timeout})
	fields, err := ParseLine(line.String())
	if err != nil {
		t.Fatal(err)
	}
	return fields, status, line.String()
}

func TestFanoutEveryReaderReadsEveryRecord(t *testing.T) {
	w := Workload{Scenario: ScenarioFanout, Msgs: 2000, SizeBytes: 64, Producers: 2, Consumers: 4, Window: 16, Prefetch: 16}
	fields, status, line := runFakeLog(t, &fakeLog{fakeBroker: newFakeBroker(w.Producers)}, w, 30*time.Second)
	if status != StatusOK || fields["records"] != "8000" || fields["delivered"] != "8000" ||
		fields["missing"] != "0" || fields["dups"] != "0" || fields["preload_msgs_per_s"] == "" || fields["msgs_per_s"] == "" {
		t.Fatalf("unexpected line: %s", line)
	}
}

func TestFanoutCountsWhatReadersMiss(t *testing.T) {
	w := Workload{Scenario: ScenarioFanout, Msgs: 100, SizeBytes: 64, Producers: 1, Consumers: 2, Window: 8, Prefetch: 8}
	fields, status, line := runFakeLog(t, &fakeLog{fakeBroker: newFakeBroker(w.Producers), skipEvery: 10}, w, 500*time.Millisecond)
	// Each reader misses 10 records: the run times out waiting for them and
	// says so, with the count.
	if status != StatusTimeout || fields["missing"] != "20" || fields["records"] != "180" {
		t.Fatalf("unexpected line: %s", line)
	}
}
