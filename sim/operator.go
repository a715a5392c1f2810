package sim

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// The inspector: a read-only simulated operator (Options.Inspect). During
// the safety phase it browses random partitions (GET /admin/api/messages)
// and runs dry-run redrives of the dead-letter queues (node.Replay), through
// the same AdminAddr envelopes the admin API sends, with every fault of the
// run going on. Read-only, so the checker's model of every message holds
// unchanged; what it checks is the operator path itself. Invariants:
//   - one request in flight at a time, answered at most once; a request
//     whose broker restarted is given up (lost with the process);
//   - a page is in offset order from its From, within its limit and its
//     state filter, previews within their bound and resolved (a stored
//     payload read back, never a ref), Next never behind From;
//   - an unknown queue is refused and never created; a dry run replays and
//     completes nothing;
//   - the inspector stops with the safety phase, so the liveness phase can
//     drain.

// inspectGapMaxMs bounds the pause between two requests.
const inspectGapMaxMs = 400

// unknownTopic is a queue no scenario declares.
const unknownTopic = "inspector-unknown"

type inspector struct {
	w   *World
	b   *Broker
	rng *Rand
	req uint64
	// The request in flight (req), sent to incarnation inc, and what it
	// asked; plan is the dry run it belongs to (nil: a browse).
	inc     uint64
	browse  *node.BrowseMessages
	plan    *node.Replay
	unknown bool
	waiting bool
	// Counters (tests).
	sent, answered, lost int
}

// startInspector starts the operator on broker b. Its rng is its own (from
// the seed), so the workload's draws are the same with or without it.
func (w *World) startInspector(b *Broker) *inspector {
	in := &inspector{w: w, b: b, rng: NewRand(w.seed ^ 0x1a5bec7)}
	b.operators[operatorInspector] = in.onEnvelope
	w.after(1+in.rng.RangeInt64(0, inspectGapMaxMs), in.tick)
	return in
}

// tick sends the next request, or gives up on one lost with its broker.
func (in *inspector) tick() {
	if in.w.stopped || in.w.phase != phaseSafety {
		return // the liveness phase drains without an operator
	}
	if in.waiting && in.inc != in.b.incarnation {
		in.waiting, in.plan = false, nil // lost with the process
		in.lost++
	}
	if !in.waiting && in.b.up {
		in.next()
	}
	in.w.after(1+in.rng.RangeInt64(0, inspectGapMaxMs), in.tick)
}

// next starts a browse or a dry-run redrive, or goes on with the plan.
func (in *inspector) next() {
	if in.plan != nil {
		msg, done := in.plan.Next()
		if done {
			in.checkDryRun(in.plan.Result())
			in.plan = nil
			return
		}
		in.send(msg)
		return
	}
	sc := in.w.scenario
	var q QueueConfig
	in.unknown = len(sc.Queues) == 0 || in.rng.Intn(10) == 0
	if !in.unknown {
		q = sc.Queues[in.rng.Intn(len(sc.Queues))]
	} else {
		q = QueueConfig{Topic: unknownTopic, Partitions: 1}
	}
	if q.DeadLetterSink && in.rng.Intn(2) == 0 {
		in.plan = node.NewReplay(node.ReplayPlan{Topic: q.Topic, Redrive: true, DryRun: true,
			Limit: uint32(in.rng.Intn(50)), Filter: node.DeadLetterFilter{FromMs: 0}})
		in.next()
		return
	}
	br := &node.BrowseMessages{Topic: q.Topic, Partition: uint32(in.rng.Intn(q.Partitions + 1)),
		Limit: uint32(1 + in.rng.Intn(20)), States: node.BrowseStates(in.rng.Intn(32)),
		Settled: in.rng.Intn(4) == 0, Payload: in.rng.Intn(2) == 0, PreviewBytes: uint32(in.rng.Intn(600))}
	if br.States == 0 {
		br.States = node.BrowseActive
	}
	br.From = uint64(in.rng.Intn(8))
	in.browse = br
	cp := *br // the request goes out; in.browse keeps what was asked
	in.send(&cp)
}

func (in *inspector) send(msg node.Message) {
	in.req++
	in.inc, in.waiting = in.b.incarnation, true
	in.sent++
	in.b.send(node.Envelope{From: operatorAddr(operatorInspector, in.req), To: node.NodeAddr(), Msg: msg})
}

// onEnvelope takes what arrives for (or bounces from) an operator address.
func (in *inspector) onEnvelope(env node.Envelope, bounced bool) {
	if !in.waiting || env.To.Request != operatorAddr(operatorInspector, in.req).Request &&
		env.From.Request != operatorAddr(operatorInspector, in.req).Request {
		in.w.abort(fmt.Sprintf("inspector: an answer to request %v nobody waits for: %T", env.To, env.Msg))
		return
	}
	in.waiting = false
	in.answered++
	msg := env.Msg
	if bounced {
		msg = &node.OperatorRefused{Err: core.ErrPartitionLoadFailed}
	}
	if in.plan != nil {
		in.plan.Answer(msg)
		return
	}
	in.checkBrowse(msg)
	in.browse = nil
}

func (in *inspector) fail(format string, args ...any) {
	in.w.abort("inspector: " + fmt.Sprintf(format, args...))
}

// checkBrowse holds one browse answer to what was asked.
func (in *inspector) checkBrowse(msg node.Message) {
	br := in.browse
	if ref, ok := msg.(*node.OperatorRefused); ok {
		switch {
		case in.unknown && ref.Err != core.ErrQueueUnknown:
			in.fail("a browse of an unknown queue was refused with %v", ref.Err)
		case in.unknown:
			if in.b.hosts[core.QueueID{Topic: unknownTopic}] != nil {
				in.fail("a browse created the unknown queue")
			}
		}
		return // not yet declared, out of range, or a failed load
	}
	if in.unknown {
		in.fail("a browse of an unknown queue answered %T", msg)
		return
	}
	page, ok := msg.(*node.MessagesPage)
	if !ok {
		in.fail("a browse answered %T", msg)
		return
	}
	if len(page.Items) > int(br.Limit) || page.Next > page.NextOffset || (len(page.Items) > 0 && page.Next < br.From) {
		in.fail("page of %d items (limit %d), next %d, from %d, next offset %d", len(page.Items), br.Limit, page.Next, br.From, page.NextOffset)
		return
	}
	last := int64(br.From) - 1
	for _, it := range page.Items {
		switch {
		case int64(it.Offset) <= last:
			in.fail("page offsets out of order: %d after %d", it.Offset, last)
		case !it.Live && !br.Settled:
			in.fail("a settled offset %d without include_settled", it.Offset)
		case it.Live && !br.States.Has(it.State):
			in.fail("offset %d is %v, not in the filter %b", it.Offset, it.State, br.States)
		case it.Live && it.PreviewBytes > br.PreviewBytes:
			in.fail("offset %d previews %d bytes, over %d", it.Offset, it.PreviewBytes, br.PreviewBytes)
		case it.Live && it.PreviewBytes > 0 && len(it.Body.Payload) < int(it.PreviewBytes):
			in.fail("offset %d: preview of %d bytes not resolved (%d in memory, stored %v)", it.Offset, it.PreviewBytes, len(it.Body.Payload), it.Body.IsStored())
		}
		last = int64(it.Offset)
	}
}

// checkDryRun: a dry run replays nothing and stays within its limit.
func (in *inspector) checkDryRun(res node.ReplayResult) {
	if res.Replayed != 0 || res.Skipped != 0 || res.Matched > node.RedriveLimitMax {
		in.fail("a dry run answered %+v", res)
	}
}

// resolveOperator reads back the stored payloads of an operator answer
// from its partition's storage before the operator sees it, as the
// production runner does (io/broker/admin_messages.go): a browse keeps its
// previews, a dead-letter read its whole bodies.
func (b *Broker) resolveOperator(env node.Envelope) bool {
	read := func(body *core.Body, keep int) (*core.Body, bool) {
		if body == nil || !body.IsStored() {
			return body, true
		}
		payload, err := b.store.readPayload(env.From.Queue, body.Ref)
		if err != nil {
			b.stats.ReadFaults++
			b.crash(fmt.Sprintf("payload read of %s for an operator failed: %v", env.From.Queue, err), false)
			return nil, false
		}
		b.stats.Spills++
		out := *body
		out.Payload = append([]byte(nil), payload[:min(keep, len(payload))]...)
		return &out, true
	}
	switch m := env.Msg.(type) {
	case *node.MessagesPage:
		for i := range m.Items {
			if it := &m.Items[i]; it.Live && it.PreviewBytes > 0 {
				body, ok := read(it.Body, int(it.PreviewBytes))
				if !ok {
					return false
				}
				it.Body = body
			}
		}
	case *node.DeadLetterReads:
		for i := range m.Items {
			body, ok := read(m.Items[i].Body, 1<<31)
			if !ok {
				return false
			}
			if body != nil && body.IsStored() {
				body.Ref = core.PayloadRef{}
			}
			m.Items[i].Body = body
		}
	}
	return true
}
