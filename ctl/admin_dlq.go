package ctl

// Dead letters: admin global-dlq get|set|clear, admin dlq replay, admin dlq
// redrive.
//
// Invariants:
//   - A versioned write without --expected-version reads the current version
//     first, so it is still a compare-and-set: a concurrent change between
//     the read and the write is refused (exit 4), never overwritten.
//   - replay sends at most replayOffsetsMax offsets per request (the API's
//     cap) and makes as many requests as the offsets need.

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// replayOffsetsMax is the API's cap on offsets per replay request.
const replayOffsetsMax = 100

// replayOffsetsTotalMax bounds what one invocation replays.
const replayOffsetsTotalMax = 100_000

type queueRef struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
}

type globalDLQ struct {
	Version uint64    `json:"version"`
	Target  *queueRef `json:"target"`
}

func (r *run) printGlobalDLQ(raw []byte, g globalDLQ) {
	if r.g.json.value {
		r.printJSON(raw)
		return
	}
	if g.Target == nil {
		r.out("version %d: no global DLQ (queues with policy global discard their dead letters)\n", g.Version)
		return
	}
	r.out("version %d: global DLQ %s\n", g.Version, queueName(g.Target.Topic, g.Target.Group))
}

func adminGlobalDLQCmd() *command {
	return &command{
		name: "global-dlq", summary: "show or change the global dead-letter queue (versioned)",
		subs: []*command{
			{
				name: "get", summary: "show the global DLQ and its version",
				action: func(r *run) error {
					var g globalDLQ
					raw, err := r.getJSON("/admin/api/global-dlq", nil, &g)
					if err != nil {
						return err
					}
					r.printGlobalDLQ(raw, g)
					return nil
				},
			},
			globalDLQSetCmd(),
			globalDLQClearCmd(),
		},
	}
}

// putGlobalDLQ writes target (nil clears) under expected, reading the
// current version first when expected is nil.
func (r *run) putGlobalDLQ(target *queueRef, expected *uint64) error {
	if expected == nil {
		var cur globalDLQ
		if _, err := r.getJSON("/admin/api/global-dlq", nil, &cur); err != nil {
			return err
		}
		expected = &cur.Version
	}
	var g globalDLQ
	raw, err := r.doJSON(http.MethodPut, "/admin/api/global-dlq", nil,
		map[string]any{"expected_version": *expected, "target": target}, &g)
	if err != nil {
		return err
	}
	r.printGlobalDLQ(raw, g)
	return nil
}

func globalDLQSetCmd() *command {
	var group string
	var version uint64
	return &command{
		name: "set", summary: "make a queue the global DLQ",
		args: "<topic>", minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&group, "group", "", "the DLQ's group; empty is the default")
			fs.Uint64Var(&version, "expected-version", 0, "refuse (exit 4) unless the current version is this (default: the version read just before)")
		},
		action: func(r *run) error {
			var expected *uint64
			if r.isSet("expected-version") {
				expected = &version
			}
			return r.putGlobalDLQ(&queueRef{Topic: r.args[0], Group: group}, expected)
		},
	}
}

func globalDLQClearCmd() *command {
	var version uint64
	return &command{
		name: "clear", summary: "remove the global DLQ",
		flags: func(fs *flag.FlagSet) {
			fs.Uint64Var(&version, "expected-version", 0, "refuse (exit 4) unless the current version is this (default: the version read just before)")
		},
		action: func(r *run) error {
			var expected *uint64
			if r.isSet("expected-version") {
				expected = &version
			}
			return r.putGlobalDLQ(nil, expected)
		},
	}
}

// offsetList collects --offset values: N, N,M,... and N-M ranges.
type offsetList []uint64

func (o *offsetList) String() string { return fmt.Sprint([]uint64(*o)) }
func (o *offsetList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an offset (want N, N,M or N-M)", part)
		}
		last := first
		if isRange {
			if last, err = strconv.ParseUint(hi, 10, 64); err != nil || last < first {
				return fmt.Errorf("%q is not a range N-M with N <= M", part)
			}
		}
		if last-first >= replayOffsetsTotalMax || len(*o)+int(last-first+1) > replayOffsetsTotalMax {
			return fmt.Errorf("more than %d offsets; replay in several runs", replayOffsetsTotalMax)
		}
		for off := first; off <= last; off++ {
			*o = append(*o, off)
		}
	}
	return nil
}

type replayResult struct {
	Offset  uint64 `json:"offset"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

func adminDLQCmd() *command {
	return &command{
		name: "dlq", summary: "send dead letters back to the queue they came from",
		subs: []*command{dlqReplayCmd(), dlqRedriveCmd()},
	}
}

func dlqReplayCmd() *command {
	var group string
	var partition uint64
	var offsets offsetList
	return &command{
		name: "replay", summary: "replay dead letters by offset to their source queue",
		args: "<dlq-topic>", minArgs: 1, maxArgs: 1,
		long: "Offsets are DLQ offsets, from 'admin messages <dlq-topic>'. The API takes 100 per request;\nmore are sent in several requests.",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&group, "dlq-group", "", "the DLQ's group; empty is the default")
			fs.Uint64Var(&partition, "partition", 0, "the DLQ's partition the offsets are in")
			fs.Var(&offsets, "offset", "DLQ offset to replay: N, N,M,.. or N-M (repeatable; required)")
		},
		action: func(r *run) error {
			if len(offsets) == 0 {
				return &usageError{cmd: r.cmd, msg: "give at least one --offset"}
			}
			var all []replayResult
			for start := 0; start < len(offsets); start += replayOffsetsMax {
				batch := offsets[start:min(start+replayOffsetsMax, len(offsets))]
				var ans struct {
					Results []replayResult `json:"results"`
				}
				body := map[string]any{"dlq_topic": r.args[0], "dlq_group": group, "offsets": batch}
				if r.isSet("partition") {
					body["partition"] = partition
				}
				_, err := r.doJSON(http.MethodPost, "/admin/api/dlq/replay", nil, body, &ans)
				if err != nil {
					if len(all) > 0 {
						r.env.Stderr.Write([]byte(fmt.Sprintf("replayed the first %d offsets before this error\n", start)))
					}
					return err
				}
				all = append(all, ans.Results...)
			}
			if r.g.json.value {
				r.printValue(map[string]any{"results": all})
				return nil
			}
			t := newTable("OFFSET", "OUTCOME", "REASON")
			replayed := 0
			for _, res := range all {
				if res.Outcome == "replayed" {
					replayed++
				}
				t.add(res.Offset, res.Outcome, res.Reason)
			}
			t.print(r)
			r.out("replayed %d of %d\n", replayed, len(all))
			return nil
		},
	}
}

func dlqRedriveCmd() *command {
	var group, sourceTopic, sourceGroup, reason string
	var fromMs, toMs, limit, partition, fromOffset uint64
	var dryRun bool
	return &command{
		name: "redrive", summary: "replay the dead letters that match a filter (source, reason, time range)",
		args: "<dlq-topic>", minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&group, "dlq-group", "", "the DLQ's group; empty is the default")
			fs.StringVar(&sourceTopic, "source-topic", "", "only dead letters from this topic")
			fs.StringVar(&sourceGroup, "source-group", "", "only dead letters from this group")
			fs.StringVar(&reason, "reason", "", "only dead letters with this reason: retries_exhausted, terminal_nack, pending_recovery or expired")
			fs.Uint64Var(&fromMs, "from-ms", 0, "only dead letters dead-lettered at or after this Unix ms")
			fs.Uint64Var(&toMs, "to-ms", 0, "only dead letters dead-lettered at or before this Unix ms (0: no bound)")
			fs.Uint64Var(&partition, "partition", 0, "start the scan at this DLQ partition (to go on where a redrive stopped)")
			fs.Uint64Var(&fromOffset, "from-offset", 0, "start the scan at this offset of --partition (to go on where a redrive stopped)")
			fs.Uint64Var(&limit, "limit", 0, "replay at most this many (the server caps it)")
			fs.BoolVar(&dryRun, "dry-run", false, "count what matches, replay nothing")
		},
		action: func(r *run) error {
			body := map[string]any{"dlq_topic": r.args[0], "dlq_group": group}
			for name, v := range map[string]string{"source-topic": sourceTopic, "source-group": sourceGroup, "reason": reason} {
				if r.isSet(name) {
					body[strings.ReplaceAll(name, "-", "_")] = v
				}
			}
			for name, v := range map[string]uint64{"from-ms": fromMs, "to-ms": toMs, "limit": limit, "partition": partition, "from-offset": fromOffset} {
				if r.isSet(name) {
					body[strings.ReplaceAll(name, "-", "_")] = v
				}
			}
			if dryRun {
				body["dry_run"] = true
			}
			var ans struct {
				Matched        uint64           `json:"matched"`
				Replayed       uint64           `json:"replayed"`
				Skipped        uint64           `json:"skipped"`
				StoppedEarly   bool             `json:"stopped_early"`
				NextOffsetHint *json.RawMessage `json:"next_offset_hint"`
				NextPartition  uint32           `json:"next_partition"`
			}
			raw, err := r.doJSON(http.MethodPost, "/admin/api/dlq/redrive", nil, body, &ans)
			if err != nil {
				return err
			}
			if r.g.json.value {
				r.printJSON(raw)
				return nil
			}
			if dryRun {
				r.out("dry run: %d dead letters match; nothing was replayed\n", ans.Matched)
			} else {
				r.out("matched %d, replayed %d, skipped %d\n", ans.Matched, ans.Replayed, ans.Skipped)
			}
			if ans.StoppedEarly {
				r.out("the redrive ran out of time and stopped early\n")
			}
			// next_offset_hint is null once the scan reached the DLQ's end.
			if ans.NextOffsetHint != nil && string(*ans.NextOffsetHint) != "null" {
				r.out("more may match: run again with --partition %d --from-offset %s\n", ans.NextPartition, string(*ans.NextOffsetHint))
			}
			return nil
		},
	}
}
