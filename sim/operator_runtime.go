package sim

import (
	"fmt"

	"github.com/fibril-go/fibril/core/node"
)

// The simulator's operator: it changes runtime settings while the run goes
// on, the way an operator uses PUT /admin/api/runtime-settings, through the
// Node's AdminAddr requests. Invariants it checks:
//   - a change the Node answered is never lost: every boot after it finds
//     that version (or a later one) in force, with the values answered,
//     whatever crashed or lost power in between;
//   - at the end of the run every loaded partition leases for the Node's
//     live lease (the live copy equals the latest durable version).
// The operator only raises the lease and the grace: the checker bounds
// lease expiries and resumes by the scenario's (lower) values, which stay
// sound when the broker waits longer.

// OperatorChange is one runtime change an operator makes at AtMs (a zero
// field keeps its value).
type OperatorChange struct {
	AtMs             int64
	LeaseMs          int64
	ReconnectGraceMs int64
}

const (
	// operatorRetryMs: how long the operator waits for an answer before it
	// asks again (a crash loses requests), and the pause after a bounce.
	operatorRetryMs = 300
	// operatorAttemptsMax bounds the operator's attempts per change.
	operatorAttemptsMax = 1000
)

type operator struct {
	w       *World
	b       *Broker
	queue   []OperatorChange // due, not yet answered (the first is in progress)
	req     uint64           // the request awaited (0: none)
	nextReq uint64
	putting bool // the awaited request is a PUT (else a GET)
	tries   int

	answeredVersion  uint64
	answeredSettings node.RuntimeSettings
	answered         int // changes answered
}

// scheduleOperator makes the scenario's operator changes happen.
func (w *World) scheduleOperator(b *Broker) {
	if len(w.scenario.Operator) == 0 {
		return
	}
	o := &operator{w: w, b: b}
	w.operator = o
	b.operators[operatorRuntime] = o.answer
	for _, c := range w.scenario.Operator {
		c := c
		w.at(c.AtMs, func() {
			o.queue = append(o.queue, c)
			if len(o.queue) == 1 {
				o.ask(false)
			}
		})
	}
}

// ask sends the first queued change's GET (or, with put, its PUT after a
// GET answered version expected).
func (o *operator) ask(put bool, expected ...uint64) {
	if len(o.queue) == 0 || o.w.stopped {
		return
	}
	o.tries++
	if o.tries > operatorAttemptsMax {
		o.w.abort(fmt.Sprintf("operator: change %+v not answered after %d attempts", o.queue[0], operatorAttemptsMax))
		return
	}
	o.nextReq++
	req := o.nextReq
	o.req, o.putting = req, put
	o.w.after(operatorRetryMs, func() {
		if o.req == req {
			o.ask(false) // no answer: start over with a GET
		}
	})
	if !o.b.up {
		return // the retry above asks again once it is back
	}
	var msg node.Message = &node.GetRuntimeSettings{}
	if put {
		c := o.queue[0]
		var patch node.RuntimePatch
		if c.LeaseMs != 0 {
			patch.LeaseMs = &c.LeaseMs
		}
		if c.ReconnectGraceMs != 0 {
			patch.ReconnectGraceMs = &c.ReconnectGraceMs
		}
		msg = &node.PutRuntimeSettings{ExpectedVersion: expected[0], Patch: patch}
	}
	o.b.send(node.Envelope{From: operatorAddr(operatorRuntime, req), To: node.NodeAddr(), Msg: msg})
}

// answer is the broker's operator hook.
func (o *operator) answer(env node.Envelope, bounced bool) {
	req := env.To.Request
	if bounced {
		req = env.From.Request
	}
	req &^= operatorRuntime << 56 // the owner tag (operatorAddr)
	if req != o.req || len(o.queue) == 0 {
		return // an answer to a request given up on
	}
	o.req = 0
	if bounced {
		o.w.after(operatorRetryMs, func() { o.ask(false) })
		return
	}
	st, ok := env.Msg.(*node.RuntimeSettingsState)
	if !ok {
		o.w.abort(fmt.Sprintf("operator: the node answered %T", env.Msg))
		return
	}
	switch {
	case !o.putting && st.Err == nil:
		o.ask(true, st.Version)
	case st.Err == nil:
		c := o.queue[0]
		if (c.LeaseMs != 0 && st.Settings.LeaseMs != c.LeaseMs) || (c.ReconnectGraceMs != 0 && st.Settings.ReconnectGraceMs != c.ReconnectGraceMs) {
			o.w.abort(fmt.Sprintf("operator: change %+v answered with %+v", c, st.Settings))
			return
		}
		// The Node answers only once every loaded partition acknowledged:
		// none may still lease for an older value.
		if !o.partitionsOnLease(st.Settings.LeaseMs, "the answer of version "+fmt.Sprint(st.Version)) {
			return
		}
		o.answeredVersion, o.answeredSettings = st.Version, st.Settings
		o.answered++
		o.w.note(fmt.Sprintf("operator: runtime settings version %d in force (lease %dms, grace %dms)", st.Version, st.Settings.LeaseMs, st.Settings.ReconnectGraceMs))
		o.queue, o.tries = o.queue[1:], 0
		o.ask(false)
	case st.Err.Code == node.RefusedStaleVersion || st.Err.Code == node.RefusedBehind:
		o.ask(false)
	default:
		o.w.abort(fmt.Sprintf("operator: change %+v refused: %+v", o.queue[0], st.Err))
	}
}

// booted checks a freshly booted Node against what was answered.
func (o *operator) booted(n *node.Node) {
	st := n.RuntimeSettingsInForce()
	switch {
	case st.Version < o.answeredVersion:
		o.w.abort(fmt.Sprintf("operator: a boot found runtime settings version %d, after version %d was answered", st.Version, o.answeredVersion))
	case st.Version == o.answeredVersion && o.answeredVersion != 0 && st.Settings != o.answeredSettings:
		o.w.abort(fmt.Sprintf("operator: version %d came back as %+v, answered as %+v", st.Version, st.Settings, o.answeredSettings))
	}
}

// finished checks the end state: every change answered, every loaded
// partition on the live lease.
func (o *operator) finished() {
	if o.answered != len(o.w.scenario.Operator) && o.w.quiescent {
		o.w.abort(fmt.Sprintf("operator: %d of %d changes answered by the end", o.answered, len(o.w.scenario.Operator)))
		return
	}
	b := o.b
	if !b.up {
		return
	}
	o.partitionsOnLease(b.node.RuntimeSettingsInForce().Settings.LeaseMs, "the end of the run")
}

// partitionsOnLease checks every loaded partition leases for leaseMs.
func (o *operator) partitionsOnLease(leaseMs int64, when string) bool {
	for _, h := range o.b.hostOrder {
		if got := h.m.Partition().Config().LeaseMs; got != leaseMs {
			o.w.abort(fmt.Sprintf("operator: at %s partition %s leases for %dms, not %dms", when, h.queue, got, leaseMs))
			return false
		}
	}
	return true
}
