package bench

// One (scenario, system) run: the workload fields, the measured figures, the
// CPU and memory samples around it, and the status, on one line.
//
// Invariants:
//   - The line always starts with system, scenario, run and the workload
//     fields and always ends with status (then err when not ok), whatever
//     happened in between, so a table never misses a row.
//   - CPU, RSS and wall time cover the whole scenario (queue creation,
//     connections, the measured part, the left probe, the Cleanup of a
//     Cleaner), as in the harness.

import (
	"context"
	"errors"
	"time"
)

// Statuses printed as status=...
const (
	StatusOK          = "ok"
	StatusTimeout     = "timeout"
	StatusError       = "error"
	StatusUnsupported = "unsupported"
)

// RunOptions describe one run besides its workload.
type RunOptions struct {
	System    string        // printed as system=
	RunLabel  string        // printed as run=
	Timeout   time.Duration // hard limit for the scenario
	ServerPID int           // broker process to sample; 0 = none
}

// Cleaner is a Target that deletes what Prepare or PrepareLog created. Run
// calls Cleanup after the scenario, whatever its outcome, and before the CPU,
// RSS and wall-time samples, as the harness's drivers do (their deferred
// Cleanup runs inside the measured interval). Fibril's Cleanup deletes the
// run's queue through the admin API when it knows the admin address (the
// client protocol has no delete). A failed Cleanup changes no figure of its
// own run, but the line says so (cleanup_err=), since what it left behind
// weighs on the runs after it.
type Cleaner interface {
	Cleanup(ctx context.Context) error
}

// fanoutUnsupported explains the fanout row of a target without logs.
const fanoutUnsupported = "this target has no append-only logs with independent readers"

// Run runs w against t and returns the result line and its status.
func Run(t Target, w Workload, o RunOptions) (*Line, string) {
	out := headerLine(w, o)
	if _, ok := t.(FanoutTarget); w.Scenario == ScenarioFanout && !ok {
		out.Set("status", StatusUnsupported)
		out.Set("err", fanoutUnsupported)
		return out, StatusUnsupported
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	serverBefore, selfBefore, before := ProcessCPUSeconds(o.ServerPID), SelfCPUSeconds(), time.Now()
	var err error
	switch w.Scenario {
	case ScenarioConfirmedPublish:
		err = runConfirmedPublish(ctx, t, w, out, o.ServerPID)
	case ScenarioEndToEnd:
		err = runEndToEnd(ctx, t, w, out, o.ServerPID)
	case ScenarioFanout:
		err = runFanout(ctx, t, w, out)
	default:
		err = errors.New("unknown scenario " + w.Scenario)
	}
	if c, ok := t.(Cleaner); ok {
		cleanupCtx, cancelCleanup := context.WithTimeout(context.Background(), remainingTimeout)
		if err := c.Cleanup(cleanupCtx); err != nil {
			out.Set("cleanup_err", err.Error())
		}
		cancelCleanup()
	}
	serverAfter, selfAfter, after := ProcessCPUSeconds(o.ServerPID), SelfCPUSeconds(), time.Now()
	if o.ServerPID > 0 && serverBefore >= 0 && serverAfter >= 0 {
		out.Set("server_cpu_s", serverAfter-serverBefore)
		out.Set("server_rss_mb", ProcessRSSMB(o.ServerPID))
	}
	out.Set("client_cpu_s", selfAfter-selfBefore)
	out.Set("wall_s", after.Sub(before).Seconds())
	// The harness's keys first, in its order; ours after them.
	out.moveToEnd("server_cpu_measured_s")
	out.moveToEnd("cleanup_err")
	status := StatusOK
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded):
		status = StatusTimeout
	default:
		status = StatusError
	}
	out.Set("status", status)
	if status == StatusError {
		out.Set("err", err.Error())
	}
	return out, status
}

func headerLine(w Workload, o RunOptions) *Line {
	out := NewLine()
	out.Set("system", o.System)
	out.Set("scenario", w.Scenario)
	out.Set("run", o.RunLabel)
	out.Set("size", w.SizeBytes)
	out.Set("msgs", w.Msgs)
	out.Set("producers", w.Producers)
	out.Set("window", w.Window)
	if w.Scenario != ScenarioConfirmedPublish {
		out.Set("consumers", w.Consumers)
		out.Set("prefetch", w.Prefetch)
	}
	if w.RateMsgsPerSec > 0 {
		out.Set("rate", w.RateMsgsPerSec)
	}
	return out
}
