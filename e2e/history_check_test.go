package e2e

import (
	"strings"
	"testing"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
)

// TestRecordedHistoryJudgement: the stand-ins toHistory puts in for the
// node let a correct run pass and make the checker fire on each promise a
// real broker could break, from what clients alone saw. Observations are
// fed by hand with fixed clocks.
func TestRecordedHistoryJudgement(t *testing.T) {
	const leaseMs = 2000
	type step func(r *recorder, at *int64)
	base := func(extra ...step) *recorder {
		r := newRecorder("unit", 1, leaseMs)
		r.addQueue(checker.QueueSpec{Topic: "q", Partitions: 1, MaxRetries: 5, DLQKind: uint8(core.DLQDiscard)})
		at := int64(1_000_000)
		add := func(o observation) {
			at += 10
			o.atMs = at
			if o.kind == obsPublishCall {
				r.nextOp++
				o.op = r.nextOp
			}
			r.obs = append(r.obs, o)
		}
		// Message 1 and 2 are published and confirmed at offsets 0 and 1;
		// a consumer gets message 1 and acks it.
		add(observation{kind: obsPublishCall, client: 1, part: 1, msgID: 1})
		add(observation{kind: obsPublishReturn, client: 1, op: 1, part: 1, msgID: 1, ok: true, offset: 0})
		add(observation{kind: obsPublishCall, client: 1, part: 1, msgID: 2})
		add(observation{kind: obsPublishReturn, client: 1, op: 2, part: 1, msgID: 2, ok: true, offset: 1})
		add(observation{kind: obsSubscribe, client: 2, part: 1, sub: 1, prefetch: 8})
		add(observation{kind: obsDeliver, sub: 1, part: 1, msgID: 1, offset: 0, tag: 1})
		add(observation{kind: obsSettle, client: 2, sub: 1, part: 1, msgID: 1, offset: 0, tag: 1, action: checker.ActionAck})
		at += 1000 // a second of quiet, then the crash
		for _, s := range extra {
			s(r, &at)
		}
		return r
	}
	crash := func(r *recorder, at *int64) { *at += 10; r.obs = append(r.obs, observation{kind: obsCrash, atMs: *at}) }
	deliver := func(msgID, offset, tag uint64) step {
		return func(r *recorder, at *int64) {
			*at += 10
			r.obs = append(r.obs, observation{kind: obsSubscribe, client: 3, part: 1, sub: 9, prefetch: 8, atMs: *at})
			r.obs = append(r.obs, observation{kind: obsDeliver, sub: 9, part: 1, msgID: msgID, offset: offset, tag: tag, atMs: *at})
			r.obs = append(r.obs, observation{kind: obsSettle, client: 3, sub: 9, part: 1, msgID: msgID, offset: offset, tag: tag, action: checker.ActionAck, atMs: *at})
		}
	}
	// fence: the consumer (client 2) publishes message 3 to the same
	// partition after its ack, and the broker confirms it (offset 2): the
	// ack is durable from then on (PROTOCOL 5.9). The message is delivered
	// after the crash, as a confirmed one must be.
	fence := func(r *recorder, at *int64) {
		*at += 10
		r.nextOp++
		r.obs = append(r.obs, observation{kind: obsPublishCall, client: 2, op: r.nextOp, part: 1, msgID: 3, atMs: *at})
		*at += 10
		r.obs = append(r.obs, observation{kind: obsPublishReturn, client: 2, op: r.nextOp, part: 1, msgID: 3, ok: true, offset: 2, atMs: *at})
	}
	// otherFence: the same publish, from another connection (client 1):
	// it says nothing about client 2's ack.
	otherFence := func(r *recorder, at *int64) {
		*at += 10
		r.nextOp++
		r.obs = append(r.obs, observation{kind: obsPublishCall, client: 1, op: r.nextOp, part: 1, msgID: 3, atMs: *at})
		*at += 10
		r.obs = append(r.obs, observation{kind: obsPublishReturn, client: 1, op: r.nextOp, part: 1, msgID: 3, ok: true, offset: 2, atMs: *at})
	}
	cases := []struct {
		name  string
		steps []step
		want  string // "" passes; else a check that must fire
	}{
		{"correct run", []step{crash, deliver(2, 1, 1<<40)}, ""},
		{"confirmed message lost", []step{crash}, "lost"},
		{"acked message back after a crash", []step{fence, crash, deliver(2, 1, 1<<40), deliver(3, 2, 1<<40+2), deliver(1, 0, 1<<40+1)}, "settled durably"},
		// An ACK has no reply: however long before the crash it was sent
		// (here a second), nothing the broker said made it durable, and a
		// SIGKILL during a slow fsync loses it (TestCrashLoop under load).
		{"unfenced ack back after a crash", []step{crash, deliver(2, 1, 1<<40), deliver(1, 0, 1<<40+1)}, ""},
		{"ack fenced only on another connection back after a crash", []step{otherFence, crash, deliver(2, 1, 1<<40), deliver(3, 2, 1<<40+2), deliver(1, 0, 1<<40+1)}, ""},
		{"confirmed at another offset", []step{crash, deliver(2, 5, 1<<40)}, "lost"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			report := checker.Check(base(c.steps...).toHistory(), checker.Options{})
			switch {
			case c.want == "" && !report.OK():
				t.Fatalf("a correct history is rejected:\n%s", report.Summary(10))
			case c.want != "" && report.OK():
				t.Fatalf("the checker passed a history where %s", c.name)
			case c.want != "" && !strings.Contains(report.Summary(10), c.want):
				t.Fatalf("want a %q violation, got:\n%s", c.want, report.Summary(10))
			}
		})
	}
}
