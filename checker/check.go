package checker

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Violation is one thing the history shows went wrong.
type Violation struct {
	Item    int    `json:"item"`    // DESIGN.md "What the checker must be able to say" item; 0 = order or harness
	Check   string `json:"check"`   // which check: lifecycle, fifo, lost, liveness, prefetch, ttl, ...
	Subject string `json:"subject"` // what it is about: "jobs/0 msg 17", "sub 4", "run"
	Detail  string `json:"detail"`
	Seq     uint64 `json:"seq,omitempty"` // the event where it shows

	group int // lifecycle group, for the visualisation (-1 = none)
}

func (v Violation) String() string {
	item := "harness"
	switch {
	case v.Item > 0:
		item = fmt.Sprintf("item %d", v.Item)
	case v.Check == "fifo":
		item = "order" // a work queue's promise, not a numbered DESIGN.md item
	}
	at := ""
	if v.Seq != 0 {
		at = fmt.Sprintf(" at #%d", v.Seq)
	}
	return fmt.Sprintf("[%s %s] %s%s: %s", item, v.Check, v.Subject, at, v.Detail)
}

// Options tune a check.
type Options struct {
	// Timeout bounds each porcupine search; a search that runs out counts as
	// a failure (Unknown is not a pass). 0 means DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout bounds porcupine per history.
const DefaultTimeout = 30 * time.Second

// Report is the checker's verdict on one history.
type Report struct {
	Violations     []Violation
	Messages       int // lifecycle partitions checked
	Operations     int // lifecycle operations checked
	FIFOPartitions int

	lifeGroups []*lifeGroup
	fifoGroups [][]porcupine.Operation
	fifoFailed []int
}

// OK reports whether the history passed every check.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Check runs every model and invariant check over h.
func Check(h *History, opts Options) *Report {
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	r := &Report{}
	r.lifeGroups = lifecycleOps(h)
	groups := make([][]porcupine.Operation, len(r.lifeGroups))
	for i, g := range r.lifeGroups {
		groups[i] = g.ops
		r.Operations += len(g.ops)
	}
	r.Messages = len(groups)
	for _, f := range checkModel(lifecycleModel(), groups, opts.Timeout, explainLifecycle) {
		r.Violations = append(r.Violations, r.modelViolation(h, "lifecycle", f))
	}
	r.fifoGroups = fifoOps(h)
	r.FIFOPartitions = len(r.fifoGroups)
	for _, f := range checkModel(fifoModel(), r.fifoGroups, opts.Timeout, explainFIFO) {
		v := Violation{Item: 0, Check: "fifo", Subject: "run", Detail: f.reason, Seq: f.seq, group: -1}
		if f.group >= 0 {
			r.fifoFailed = append(r.fifoFailed, f.group)
			v.Subject = h.PartName(r.fifoGroups[f.group][0].Input.(*fifoInput).part)
		}
		if f.unknown {
			v.Detail = "porcupine gave up (timeout): an unknown result counts as a failure"
		}
		r.Violations = append(r.Violations, v)
	}
	for _, v := range newInvariantChecker(h).run() {
		v.group = -1
		r.Violations = append(r.Violations, v)
	}
	for _, v := range newStreamChecker(h).run() {
		v.group = -1
		r.Violations = append(r.Violations, v)
	}
	for _, v := range newSessionChecker(h).run() {
		v.group = -1
		r.Violations = append(r.Violations, v)
	}
	for _, v := range newCohortChecker(h).run() {
		v.group = -1
		r.Violations = append(r.Violations, v)
	}
	sort.SliceStable(r.Violations, func(i, j int) bool {
		a, b := &r.Violations[i], &r.Violations[j]
		if a.Seq != b.Seq {
			return a.Seq-1 < b.Seq-1 // seq 0 (end-of-run checks) sorts last
		}
		if a.Item != b.Item {
			return a.Item < b.Item
		}
		return a.Subject < b.Subject
	})
	r.linkGroups(h)
	return r
}

func (r *Report) modelViolation(h *History, check string, f modelFailure) Violation {
	v := Violation{Check: check, Subject: "run", group: f.group, Seq: f.seq}
	if f.group >= 0 {
		k := r.lifeGroups[f.group].key
		v.Subject = fmt.Sprintf("%s msg %d", h.PartName(k.part), k.msgID)
		if k.offset != 0 {
			v.Subject += fmt.Sprintf(" (copy at offset %d)", k.offset)
		}
	}
	switch {
	case f.unknown:
		v.Detail = "porcupine gave up (timeout): an unknown result counts as a failure"
	case f.reason == "":
		v.Detail = "not linearizable (no single order of the operations fits the model; see the visualisation)"
	default:
		v.Item = itemOf(f.reason)
		v.Detail = strings.TrimSpace(strings.TrimPrefix(f.reason, fmt.Sprintf("(%d)", v.Item)))
	}
	return v
}

// linkGroups attaches invariant violations to the message they are about,
// so the visualisation can show that message's lifecycle.
func (r *Report) linkGroups(h *History) {
	bySubject := map[string]int{}
	for i, g := range r.lifeGroups {
		if g.key.offset == 0 {
			bySubject[fmt.Sprintf("%s msg %d", h.PartName(g.key.part), g.key.msgID)] = i
		}
	}
	for i := range r.Violations {
		if v := &r.Violations[i]; v.group < 0 {
			if g, ok := bySubject[v.Subject]; ok {
				v.group = g
			}
		}
	}
}

// Summary renders the report for a terminal.
func (r *Report) Summary(limit int) string {
	if r.OK() {
		return fmt.Sprintf("ok: %d messages (%d operations), %d ordered partitions", r.Messages, r.Operations, r.FIFOPartitions)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d violations (%d messages, %d operations checked):\n", len(r.Violations), r.Messages, r.Operations)
	for i, v := range r.Violations {
		if i == limit {
			fmt.Fprintf(&b, "  ... and %d more\n", len(r.Violations)-limit)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return strings.TrimRight(b.String(), "\n")
}

// visualisationGroupsMax bounds the messages drawn in one HTML file.
const visualisationGroupsMax = 20

// WriteArtifacts writes a failing history as JSON lines and porcupine's HTML
// visualisation of the messages involved, and returns both paths.
func WriteArtifacts(dir, base string, h *History, r *Report) (historyPath, htmlPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	historyPath = filepath.Join(dir, base+".history.jsonl")
	if err := h.WriteFile(historyPath); err != nil {
		return "", "", err
	}
	htmlPath = filepath.Join(dir, base+".html")
	model, info := r.visualisation()
	if err := porcupine.VisualizePath(model, info, htmlPath); err != nil {
		return historyPath, "", err
	}
	return historyPath, htmlPath, nil
}

// WriteVisualisation writes only porcupine's HTML visualisation.
func WriteVisualisation(path string, r *Report) error {
	model, info := r.visualisation()
	return porcupine.VisualizePath(model, info, path)
}

// visualisation re-checks the messages (or FIFO partitions) named by the
// violations with porcupine's verbose mode.
func (r *Report) visualisation() (porcupine.Model, porcupine.LinearizationInfo) {
	if len(r.fifoFailed) > 0 {
		var groups [][]porcupine.Operation
		for _, i := range r.fifoFailed {
			groups = append(groups, r.fifoGroups[i])
		}
		model := fifoModel()
		model.Partition = partitionedBy(groups)
		_, info := porcupine.CheckOperationsVerbose(model, flatten(groups), DefaultTimeout)
		return model, info
	}
	seen := map[int]bool{}
	var groups [][]porcupine.Operation
	for _, v := range r.Violations {
		if v.group >= 0 && !seen[v.group] && len(groups) < visualisationGroupsMax {
			seen[v.group] = true
			groups = append(groups, r.lifeGroups[v.group].ops)
		}
	}
	model := lifecycleModel()
	model.Partition = partitionedBy(groups)
	_, info := porcupine.CheckOperationsVerbose(model, flatten(groups), DefaultTimeout)
	return model, info
}

func flatten(groups [][]porcupine.Operation) []porcupine.Operation {
	var all []porcupine.Operation
	for _, g := range groups {
		all = append(all, g...)
	}
	return all
}
