package sim_test

// Regression tests for core bugs the simulator found. The first: the core
// could not store its own dead-letter copies (they carry stroma.dlq.* headers,
// which a client publish may not set); fixed by core.Publish.System.

import (
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/scenarios"
	"github.com/fibril-go/fibril/sim"
)

// The DeadLetter contract: publish Body to Target (confirmed, as a system
// publish), then feed DeadLetterDone.
func TestCoreBugDeadLetterCopyIsStored(t *testing.T) {
	source, _ := core.NewPartition(core.DefaultConfig(core.QueueID{Topic: "jobs"}))
	target, _ := core.NewPartition(core.DefaultConfig(core.QueueID{Topic: "jobs-dlq"}))
	now := int64(1_704_067_200_000)
	source.Step(&core.Declare{NowMs: now, DLQ: &core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "jobs-dlq"}}})
	source.Step(&core.Publish{NowMs: now, Body: &core.Body{Payload: []byte("x")}})
	source.Step(&core.Persisted{NowMs: now, UpToIndex: source.LastIndex()})
	source.Step(&core.Subscribe{NowMs: now, SubID: 1, Prefetch: 1})
	source.Step(&core.Nack{NowMs: now, SubID: 1, Tags: []uint64{1}}) // fail: terminal nack
	rd := source.Step(&core.Persisted{NowMs: now, UpToIndex: source.LastIndex()})
	if len(rd.DeadLetters) != 1 {
		t.Fatalf("want one dead-letter copy, got %d", len(rd.DeadLetters))
	}
	copyBody := rd.DeadLetters[0].Body
	rd = target.Step(&core.Publish{NowMs: now, Ref: 7, Confirm: true, Body: copyBody, System: true})
	for _, r := range rd.Replies {
		if r.Kind == core.ReplyError {
			t.Fatalf("the target refuses the core's own dead-letter copy: %v (headers %v)", r.Err, copyBody.Headers)
		}
	}
}

// The same end to end: seed 1 of scenario dead-letter used to abort.
func TestCoreBugDeadLetterCopyIsStoredInSimulation(t *testing.T) {
	sc, _ := scenarios.ByName("dead-letter")
	o := sim.RunChecked(sc, 1, sim.Options{CheckInvariants: true})
	if !o.OK() {
		var lines []string
		for _, v := range o.Report.Violations {
			lines = append(lines, v.String())
		}
		t.Fatalf("seed 1 of dead-letter:\n%s", strings.Join(lines, "\n"))
	}
}
