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
	const leaseMs, quietMs = 2000, 200
	type step func(r *recorder, at *int64)
	base := func(extra ...step) *recorder {
		r := newRecorder("unit", 1, leaseMs, quietMs)
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
		at += 1000 // quiet, then the crash
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
	cases := []struct {
		name  string
		steps []step
		want  string // "" passes; else a check that must fire
	}{
		{"correct run", []step{crash, deliver(2, 1, 1<<40)}, ""},
		{"confirmed message lost", []step{crash}, "lost"},
		{"acked message back after a crash", []step{crash, deliver(2, 1, 1<<40), deliver(1, 0, 1<<40+1)}, "settled durably"},
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
