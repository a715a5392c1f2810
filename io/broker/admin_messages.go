package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// The admin API's messages family (browse, queue-dlq, dlq replay and
// redrive): each is one or more operator requests through Call; every
// decision is the Node's, a Host's, or the node.Replay plan's. Invariants:
//   - a stored payload is read back on its partition's runner before the
//     answer leaves it, like a delivery's; a browse keeps only the preview
//     bytes of it (PreviewBytes), so a page's memory is bounded by
//     node.BrowseAnswerBytesMax, not by the payloads' sizes;
//   - a replay or redrive runs its plan one request at a time, each
//     answered (or bounced) before the next, and stops at the caller's
//     context: what was made durable stays, nothing is rolled back.

// ErrOperator is an operator request the core refused; Err says why.
type ErrOperator struct{ Err *core.Error }

func (e *ErrOperator) Error() string { return e.Err.Error() }

// BrowseMessages answers one page of a partition's messages.
func (b *Broker) BrowseMessages(ctx context.Context, q node.BrowseMessages) (*node.MessagesPage, error) {
	ans, err := b.operatorCall(ctx, &q)
	if err != nil {
		return nil, err
	}
	page, ok := ans.(*node.MessagesPage)
	if !ok {
		return nil, fmt.Errorf("broker: a browse answered with %T", ans)
	}
	return page, nil
}

// SetQueueDLQ changes an existing queue's dead-letter policy (and
// maxRetries when not nil), durably and live in its loaded partitions, and
// answers the catalogue's settings after.
func (b *Broker) SetQueueDLQ(ctx context.Context, topic, group string, policy core.DLQPolicy, maxRetries *uint32) (*node.QueueSettings, error) {
	ans, err := b.operatorCall(ctx, &node.SetQueueDLQ{Topic: topic, Group: group, DLQ: policy, MaxRetries: maxRetries})
	if err != nil {
		return nil, err
	}
	declared, ok := ans.(*node.Declared)
	if !ok {
		return nil, fmt.Errorf("broker: a queue-dlq change answered with %T", ans)
	}
	if declared.Err != nil {
		return nil, &ErrOperator{Err: declared.Err}
	}
	return b.QueueSettings(ctx, topic, group)
}

// QueueSettings answers a queue's catalogue settings.
func (b *Broker) QueueSettings(ctx context.Context, topic, group string) (*node.QueueSettings, error) {
	ans, err := b.operatorCall(ctx, &node.QueueSettingsOf{Topic: topic, Group: group})
	if err != nil {
		return nil, err
	}
	s, ok := ans.(*node.QueueSettings)
	if !ok {
		return nil, fmt.Errorf("broker: a settings read answered with %T", ans)
	}
	return s, nil
}

// redriveHook, when set (tests), runs after each answer a replay plan
// takes; an error stops the plan there, as a crash would.
var redriveHook func(answer node.Message) error

// RunReplay carries out a replay or redrive plan.
func (b *Broker) RunReplay(ctx context.Context, plan node.ReplayPlan) (node.ReplayResult, error) {
	r := node.NewReplay(plan)
	// Each step is one request; the plan bounds how many (its pages and
	// limit), so this loop ends.
	for {
		msg, done := r.Next()
		if done {
			return r.Result(), nil
		}
		ans, err := b.Call(ctx, node.NodeAddr(), msg)
		switch {
		case errors.Is(err, ErrNoSuchMachine):
			ans = &node.OperatorRefused{Err: core.ErrPartitionLoadFailed}
		case err != nil && ctx.Err() != nil:
			// Out of time: report what was done and where to go on.
			r.Stop()
			return r.Result(), nil
		case err != nil:
			return node.ReplayResult{}, err
		}
		r.Answer(ans)
		if redriveHook != nil {
			if err := redriveHook(ans); err != nil {
				return node.ReplayResult{}, err
			}
		}
	}
}

// operatorCall sends msg to the Node and turns a refusal into ErrOperator.
func (b *Broker) operatorCall(ctx context.Context, msg node.Message) (node.Message, error) {
	ans, err := b.Call(ctx, node.NodeAddr(), msg)
	if err != nil {
		return nil, err
	}
	if ref, ok := ans.(*node.OperatorRefused); ok {
		return nil, &ErrOperator{Err: ref.Err}
	}
	return ans, nil
}

// resolveOperatorBodies reads back the stored payloads of an operator
// answer on the runner: a browse's previews (cut to PreviewBytes), a
// dead-letter read's whole bodies (they are published again).
func (r *hostRunner) resolveOperatorBodies(msg node.Message) bool {
	switch m := msg.(type) {
	case *node.MessagesPage:
		for i := range m.Items {
			it := &m.Items[i]
			if !it.Live || it.PreviewBytes == 0 || !it.Body.IsStored() {
				continue
			}
			payload, err := r.payloads.Read(it.Body.Ref)
			if err != nil {
				r.b.fatal(fmt.Errorf("partition %s: reading a stored payload: %w", r.id, err))
				return false
			}
			r.b.metrics.payloadsRead.Add(1)
			// A copy of the preview only: the reader's buffer is reused,
			// and the rest would only be dropped later.
			out := *it.Body
			out.Payload = append([]byte(nil), payload[:min(int(it.PreviewBytes), len(payload))]...)
			it.Body = &out
		}
	case *node.DeadLetterReads:
		for i := range m.Items {
			body, ok := r.loaded(m.Items[i].Body)
			if !ok {
				return false
			}
			m.Items[i].Body = body
		}
	}
	return true
}
