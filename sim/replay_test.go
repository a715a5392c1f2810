package sim_test

// A replay helper: SC=scenario SEED=n [SWARM=1] [LIM=events] go test ./sim
// -run TestReplayPrintsEvents -v prints a run's history one line per event
// and fails when the checker does.

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/scenarios"
	"github.com/fibril-go/fibril/sim"
)

func compact(e *checker.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d @%d %s", e.Seq, e.AtMs, e.Kind)
	if e.Client != 0 {
		fmt.Fprintf(&b, " c%d", e.Client)
	}
	if e.Part != 0 {
		fmt.Fprintf(&b, " p%d", e.Part)
	}
	if e.MsgID != 0 {
		fmt.Fprintf(&b, " m%d", e.MsgID)
	}
	if e.Sub != 0 {
		fmt.Fprintf(&b, " sub%d", e.Sub)
	}
	if e.Tag != 0 {
		fmt.Fprintf(&b, " tag%d", e.Tag)
	}
	if e.Op != 0 {
		fmt.Fprintf(&b, " op%d", e.Op)
	}
	if e.Ok {
		b.WriteString(" ok")
	}
	if e.Err != "" {
		fmt.Fprintf(&b, " err=%q", e.Err)
	}
	if e.Outcome != "" {
		fmt.Fprintf(&b, " out=%s", e.Outcome)
	}
	if e.Text != "" {
		fmt.Fprintf(&b, " %q", e.Text)
	}
	return b.String()
}

func TestReplayPrintsEvents(t *testing.T) {
	if os.Getenv("SC") == "" {
		t.Skip("a replay helper: SC=scenario SEED=n [SWARM=1] [LIM=events]")
	}
	name := os.Getenv("SC")
	if name == "" {
		name = "steady"
	}
	sc, _ := scenarios.ByName(name)
	seed := uint64(1)
	fmt.Sscan(os.Getenv("SEED"), &seed)
	o := sim.RunChecked(sc, seed, sim.Options{CheckInvariants: true, Swarm: os.Getenv("SWARM") != ""})
	t.Logf("aborted=%q drained=%v stats=%+v", o.Result.Aborted, o.Result.Drained, o.Result.Stats)
	t.Logf("%s", o.Report.Summary(20))
	if !o.OK() {
		t.Errorf("seed %d of %s fails the checker (replay: %s)", seed, name, o.Result.ReplayCommand())
	}
	n := len(o.Result.History.Events)
	lim := 80
	fmt.Sscan(os.Getenv("LIM"), &lim)
	for i := 0; i < n && i < lim; i++ {
		t.Logf("%s", compact(&o.Result.History.Events[i]))
	}
}
