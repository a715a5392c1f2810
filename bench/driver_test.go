package bench

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeBroker is an in-memory Target: a queue channel, confirmations released
// in batches by a goroutine per producer (so windows really fill up), and
// knobs for the unhappy paths.
type fakeBroker struct {
	w     Workload
	queue chan []byte

	neverConfirm bool
	nackOddIDs   bool
	confirmTwice bool

	inflightMax []atomic.Int64 // per producer: most unconfirmed at once
}

func newFakeBroker(producers int) *fakeBroker {
	return &fakeBroker{inflightMax: make([]atomic.Int64, producers)}
}

func (f *fakeBroker) Prepare(ctx context.Context, w Workload) error {
	f.w = w
	f.queue = make(chan []byte, w.Msgs)
	return nil
}

type fakeProducer struct {
	f        *fakeBroker
	idx      int
	inflight atomic.Int64
	mu       sync.Mutex
	pending  []uint64
	stop     chan struct{}
	done     chan struct{}
}

func (f *fakeBroker) NewProducer(ctx context.Context, idx int, confirm ConfirmFunc) (Producer, error) {
	p := &fakeProducer{f: f, idx: idx, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-p.stop:
				return
			}
			if f.neverConfirm {
				continue
			}
			p.mu.Lock()
			batch := p.pending
			p.pending = nil
			p.mu.Unlock()
			for _, id := range batch {
				p.inflight.Add(-1) // before confirm: confirm frees the slot
				ok := !(f.nackOddIDs && id%2 == 1)
				confirm(id, ok)
				if f.confirmTwice {
					confirm(id, ok)
				}
			}
		}
	}()
	return p, nil
}

func (p *fakeProducer) PublishAsync(ctx context.Context, id uint64, body []byte) error {
	n := p.inflight.Add(1)
	for m := p.f.inflightMax[p.idx].Load(); n > m && !p.f.inflightMax[p.idx].CompareAndSwap(m, n); m = p.f.inflightMax[p.idx].Load() {
	}
	p.f.queue <- append([]byte(nil), body...) // body is reused by the caller
	p.mu.Lock()
	p.pending = append(p.pending, id)
	p.mu.Unlock()
	return nil
}

func (p *fakeProducer) Close() error { close(p.stop); <-p.done; return nil }

type fakeConsumer struct{ stop, done chan struct{} }

func (f *fakeBroker) NewConsumer(ctx context.Context, idx int, deliver DeliverFunc) (Consumer, error) {
	c := &fakeConsumer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case body := <-f.queue:
				deliver(body)
			case <-c.stop:
				return
			}
		}
	}()
	return c, nil
}

func (c *fakeConsumer) Close() error { close(c.stop); <-c.done; return nil }

func (f *fakeBroker) Remaining(ctx context.Context) (int64, error) { return int64(len(f.queue)), nil }
func (f *fakeBroker) Close() error                                 { return nil }

func runFake(t *testing.T, f *fakeBroker, w Workload, timeout time.Duration) (map[string]string, string, string) {
	t.Helper()
	line, status := Run(f, w, RunOptions{System: "fake", RunLabel: "1", Timeout: timeout})
	fields, err := ParseLine(line.String())
	if err != nil {
		t.Fatal(err)
	}
	return fields, status, line.String()
}

func keysOf(line string) []string {
	var keys []string
	for _, kv := range strings.Fields(line) {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	return keys
}

func TestConfirmedPublishKeepsEveryWindowAndCountsEveryConfirm(t *testing.T) {
	w := Workload{Scenario: ScenarioConfirmedPublish, Msgs: 5000, SizeBytes: 64, Producers: 3, Window: 7}
	f := newFakeBroker(w.Producers)
	fields, status, line := runFake(t, f, w, 30*time.Second)
	if status != StatusOK || fields["confirmed"] != "5000" || fields["nacked"] != "0" || fields["dup_confirms"] != "0" {
		t.Fatalf("unexpected result: %s", line)
	}
	for i := range f.inflightMax {
		if got := f.inflightMax[i].Load(); got > int64(w.Window) || got < 1 {
			t.Fatalf("producer %d had %d unconfirmed at once; window is %d", i, got, w.Window)
		}
	}
	want := "system scenario run size msgs producers window secs msgs_per_s p50_ms p99_ms max_ms confirmed nacked dup_confirms client_cpu_s wall_s status"
	if got := strings.Join(keysOf(line), " "); got != want {
		t.Fatalf("fields\n got %s\nwant %s", got, want)
	}
	if len(f.queue) != w.Msgs {
		t.Fatalf("the fake holds %d messages, want %d", len(f.queue), w.Msgs)
	}
}

func TestEndToEndReceivesEveryIDOnce(t *testing.T) {
	w := Workload{Scenario: ScenarioEndToEnd, Msgs: 5000, SizeBytes: 100, Producers: 2, Consumers: 2, Window: 16,
		Prefetch: 16, RateMsgsPerSec: 1e6}
	fields, status, line := runFake(t, newFakeBroker(w.Producers), w, 30*time.Second)
	if status != StatusOK {
		t.Fatalf("status %s: %s", status, line)
	}
	for k, v := range map[string]string{"delivered": "5000", "unique": "5000", "missing": "0", "dups": "0", "left": "0", "nacked": "0", "rate": "1000000"} {
		if fields[k] != v {
			t.Fatalf("%s=%s, want %s: %s", k, fields[k], v, line)
		}
	}
	want := "system scenario run size msgs producers window consumers prefetch rate secs msgs_per_s p50_ms p99_ms max_ms " +
		"delivered unique missing dups left pub_msgs_per_s confirm_p50_ms confirm_p99_ms nacked client_cpu_s wall_s status"
	if got := strings.Join(keysOf(line), " "); got != want {
		t.Fatalf("fields\n got %s\nwant %s", got, want)
	}
}

func TestNacksAndDuplicateConfirmsAreCountedNotFatal(t *testing.T) {
	w := Workload{Scenario: ScenarioConfirmedPublish, Msgs: 1000, SizeBytes: 16, Producers: 2, Window: 8}
	f := newFakeBroker(w.Producers)
	f.nackOddIDs, f.confirmTwice = true, true
	fields, status, line := runFake(t, f, w, 30*time.Second)
	if status != StatusOK || fields["confirmed"] != "500" || fields["nacked"] != "500" || fields["dup_confirms"] != "1000" {
		t.Fatalf("unexpected result: %s", line)
	}
}

func TestTimeoutReportsPartialCounts(t *testing.T) {
	w := Workload{Scenario: ScenarioConfirmedPublish, Msgs: 100, SizeBytes: 16, Producers: 2, Window: 4}
	f := newFakeBroker(w.Producers)
	f.neverConfirm = true
	fields, status, line := runFake(t, f, w, 200*time.Millisecond)
	if status != StatusTimeout || fields["status"] != "timeout" || fields["confirmed"] != "0" {
		t.Fatalf("unexpected result: %s", line)
	}
	if _, hasErr := fields["err"]; hasErr {
		t.Fatalf("a timeout carries no err: %s", line)
	}
	if len(f.queue) != 2*w.Window {
		t.Fatalf("with no confirms each producer stops at its window: %d published", len(f.queue))
	}
}

func TestFanoutIsUnsupported(t *testing.T) {
	w := Workload{Scenario: ScenarioFanout, Msgs: 100, SizeBytes: 1024, Producers: 2, Consumers: 4, Window: 8, Prefetch: 8}
	fields, status, line := runFake(t, newFakeBroker(w.Producers), w, time.Second)
	if status != StatusUnsupported || fields["status"] != "unsupported" || fields["consumers"] != "4" {
		t.Fatalf("unexpected line: %s", line)
	}
}

func TestQueueNamesAreValidAndFresh(t *testing.T) {
	now := time.Unix(1700000000, 123)
	a, b := QueueName(ScenarioEndToEnd, "quic", now), QueueName(ScenarioEndToEnd, "quic", now.Add(1))
	if a == b {
		t.Fatal("two runs got the same queue")
	}
	for _, c := range a {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			t.Fatalf("queue name %q has %q, outside SPEC §1's [a-z0-9._-]", a, c)
		}
	}
}
