package checker

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine models, and the search for which partition failed. Each
// model's Step is the pure step function of its state; the same function
// replayed in return order explains a failure in words.

func lifecycleModel() porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return initialLifeState() },
		Step: func(state, input, _ interface{}) (bool, interface{}) {
			next, reason := state.(lifeState).step(input.(*lifeInput))
			return reason == "", next
		},
		Equal:             func(a, b interface{}) bool { return a.(lifeState) == b.(lifeState) },
		DescribeOperation: func(input, _ interface{}) string { return input.(*lifeInput).describe() },
		DescribeState:     func(state interface{}) string { return state.(lifeState).describe() },
	}
}

func fifoModel() porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return fifoState{} },
		Step: func(state, input, _ interface{}) (bool, interface{}) {
			next, reason := state.(fifoState).step(input.(*fifoInput))
			return reason == "", next
		},
		Equal:             func(a, b interface{}) bool { return a.(fifoState) == b.(fifoState) },
		DescribeOperation: func(input, _ interface{}) string { return input.(*fifoInput).describe() },
		DescribeState:     func(state interface{}) string { return state.(fifoState).describe() },
	}
}

// partitionedBy returns a Partition function that keeps precomputed groups:
// each operation's group is looked up by its Input pointer.
func partitionedBy(groups [][]porcupine.Operation) func([]porcupine.Operation) [][]porcupine.Operation {
	return func([]porcupine.Operation) [][]porcupine.Operation { return groups }
}

// modelFailure is one partition porcupine could not linearize (or gave up on).
type modelFailure struct {
	group   int
	unknown bool
	reason  string // from replaying in return order; "" when only other orders fail
	seq     uint64 // the event where that replay failed
}

// checkModel runs porcupine over every group, then isolates the failing
// groups and explains each.
func checkModel(model porcupine.Model, groups [][]porcupine.Operation, timeout time.Duration,
	explain func(ops []porcupine.Operation) (string, uint64)) []modelFailure {
	if len(groups) == 0 {
		return nil
	}
	model.Partition = partitionedBy(groups)
	var all []porcupine.Operation
	for _, g := range groups {
		all = append(all, g...)
	}
	if porcupine.CheckOperationsTimeout(model, all, timeout) == porcupine.Ok {
		return nil
	}
	// Find the culprits one group at a time (rare: only failing runs pay).
	var failures []modelFailure
	for i, g := range groups {
		single := model
		single.Partition = nil
		switch porcupine.CheckOperationsTimeout(single, g, timeout) {
		case porcupine.Illegal:
			reason, seq := explain(g)
			failures = append(failures, modelFailure{group: i, reason: reason, seq: seq})
		case porcupine.Unknown:
			failures = append(failures, modelFailure{group: i, unknown: true})
		}
	}
	if len(failures) == 0 { // the whole check timed out although each part passes
		failures = append(failures, modelFailure{group: -1, unknown: true})
	}
	return failures
}

// returnOrder sorts operations by return time: node instants in the order
// they happened, each client call at the moment its answer arrived (a
// natural linearization to explain a failure with, not the only one).
func returnOrder(ops []porcupine.Operation) []porcupine.Operation {
	sorted := append([]porcupine.Operation(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Return != sorted[j].Return {
			return sorted[i].Return < sorted[j].Return
		}
		return sorted[i].Call < sorted[j].Call
	})
	return sorted
}

func explainLifecycle(ops []porcupine.Operation) (string, uint64) {
	s := initialLifeState()
	for _, op := range returnOrder(ops) {
		in := op.Input.(*lifeInput)
		next, reason := s.step(in)
		if reason != "" {
			return reason, in.seq
		}
		s = next
	}
	return "", 0
}

func explainFIFO(ops []porcupine.Operation) (string, uint64) {
	var s fifoState
	for _, op := range returnOrder(ops) {
		in := op.Input.(*fifoInput)
		next, reason := s.step(in)
		if reason != "" {
			return "(FIFO) " + reason, in.seq
		}
		s = next
	}
	return "", 0
}

// itemOf reads the DESIGN.md item from a reason's "(n)" prefix (0 = none).
func itemOf(reason string) int {
	var item int
	if _, err := fmt.Sscanf(reason, "(%d)", &item); err == nil {
		return item
	}
	return 0
}
