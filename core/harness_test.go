package core

import (
	"bytes"
	"testing"
)

// harness drives one partition the way a driver would, collecting effects
// and keeping the persisted log, and checks invariants after every step.
type harness struct {
	t           testing.TB
	cfg         Config
	p           *Partition
	now         int64
	autoPersist bool
	log         []Entry // every entry handed to storage
	durable     int     // entries of log reported durable

	deliveries  []Delivery
	replies     []Reply
	settled     []Settlement
	deadLetters []DeadLetter
	lastWake    int64
}

func newHarness(t testing.TB) *harness {
	cfg := DefaultConfig(QueueID{Topic: "orders"})
	return newHarnessWith(t, cfg)
}

func newHarnessWith(t testing.TB, cfg Config) *harness {
	p, err := NewPartition(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, cfg: cfg, p: p, now: 1_000_000, autoPersist: true}
}

func (h *harness) collect(rd *Ready) {
	h.log = append(h.log, rd.Persist...)
	h.deliveries = append(h.deliveries, rd.Deliveries...)
	h.replies = append(h.replies, rd.Replies...)
	h.settled = append(h.settled, rd.Settled...)
	h.deadLetters = append(h.deadLetters, rd.DeadLetters...)
	h.lastWake = rd.NextWakeMs
}

func (h *harness) step(in Input) {
	h.t.Helper()
	h.collect(h.p.Step(in))
	h.check()
	if h.autoPersist {
		h.persist()
	}
}

// persist reports every appended entry durable, as storage would after fsync.
func (h *harness) persist() {
	h.t.Helper()
	for h.durable < len(h.log) {
		h.durable = len(h.log)
		h.collect(h.p.Step(&Persisted{NowMs: h.now, UpToIndex: h.p.LastIndex()}))
		h.check()
	}
}

func (h *harness) check() {
	h.t.Helper()
	if err := h.p.CheckInvariants(); err != nil {
		h.t.Fatalf("invariant: %v", err)
	}
}

func (h *harness) advance(ms int64) {
	h.t.Helper()
	h.now += ms
	h.step(&Tick{NowMs: h.now})
}

func (h *harness) publish(payload string) uint64 {
	h.t.Helper()
	return h.publishWith(&Publish{Confirm: true, Body: &Body{Payload: []byte(payload)}})
}

// publishWith publishes and returns the offset from the confirm (auto-persist)
// or the next offset.
func (h *harness) publishWith(in *Publish) uint64 {
	h.t.Helper()
	offset := h.p.NextOffset()
	in.NowMs = h.now
	h.step(in)
	return offset
}

func (h *harness) subscribe(id uint64, prefetch uint32, autoAck bool) {
	h.t.Helper()
	h.step(&Subscribe{NowMs: h.now, SubID: id, Prefetch: prefetch, AutoAck: autoAck})
}

func (h *harness) takeDeliveries() []Delivery {
	out := h.deliveries
	h.deliveries = nil
	return out
}

func (h *harness) takeReplies() []Reply {
	out := h.replies
	h.replies = nil
	return out
}

func (h *harness) ack(sub uint64, tags ...uint64) {
	h.t.Helper()
	h.step(&Ack{NowMs: h.now, SubID: sub, Tags: tags})
}

func (h *harness) nack(sub uint64, requeue bool, notBeforeMs int64, tags ...uint64) {
	h.t.Helper()
	h.step(&Nack{NowMs: h.now, SubID: sub, Tags: tags, Requeue: requeue, NotBeforeMs: notBeforeMs})
}

// restart replaces the partition by one recovered from the durable log, as
// after a crash: volatile state (subscriptions, pending replies) is gone.
func (h *harness) restart() {
	h.t.Helper()
	p, err := Recover(h.cfg, nil, h.log[:h.durable])
	if err != nil {
		h.t.Fatalf("recover: %v", err)
	}
	h.log = h.log[:h.durable]
	h.p = p
	h.check()
}

func (h *harness) errorsOf(replies []Reply) []*Error {
	var out []*Error
	for _, r := range replies {
		if r.Kind == ReplyError {
			out = append(out, r.Err)
		}
	}
	return out
}

func headerValue(b *Body, key string) (string, bool) {
	for _, h := range b.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return "", false
}

func encodeLog(entries []Entry) []byte {
	var buf bytes.Buffer
	for i := range entries {
		buf.Write(AppendEntry(nil, &entries[i]))
	}
	return buf.Bytes()
}
