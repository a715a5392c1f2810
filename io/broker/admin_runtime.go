package broker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// Runtime settings and the global dead-letter target for the admin API.
// The Node decides and records every change (core/node/node_runtime.go);
// this file only carries the operator's request in and the answer out.
// Invariants:
//   - a change's answer is the Node's, which it sends once the change is
//     durable and in force in every loaded partition;
//   - an answer of another type than asked is a bug, reported as an error
//     rather than guessed at.

// logIgnoredSeeds says, at info, which startup seeds lost to the values a
// previous boot persisted (SPEC 14: runtime seeds apply on first boot only).
func logIgnoredSeeds(log *slog.Logger, n *node.Node) {
	if keys := n.RuntimeSeedsIgnored(); len(keys) > 0 {
		log.Warn("runtime settings: the persisted values win over this start's configured values (runtime settings seed the first boot only); change them with PUT /admin/api/runtime-settings or fibrilctl admin runtime-settings set",
			"keys", keys)
	}
}

// RuntimeSettings reads the runtime settings in force.
func (b *Broker) RuntimeSettings(ctx context.Context) (node.RuntimeSettingsState, error) {
	return callNode[*node.RuntimeSettingsState](ctx, b, &node.GetRuntimeSettings{})
}

// PutRuntimeSettings asks the Node to change the keys patch sets; a
// refusal comes back in the state's Err.
func (b *Broker) PutRuntimeSettings(ctx context.Context, expected uint64, patch node.RuntimePatch) (node.RuntimeSettingsState, error) {
	return callNode[*node.RuntimeSettingsState](ctx, b, &node.PutRuntimeSettings{ExpectedVersion: expected, Patch: patch})
}

// GlobalDLQ reads the global dead-letter target.
func (b *Broker) GlobalDLQ(ctx context.Context) (node.GlobalDLQState, error) {
	return callNode[*node.GlobalDLQState](ctx, b, &node.GetGlobalDLQ{})
}

// PutGlobalDLQ asks the Node to set (nil: clear) the global target.
func (b *Broker) PutGlobalDLQ(ctx context.Context, expected uint64, target *core.DLQTarget) (node.GlobalDLQState, error) {
	return callNode[*node.GlobalDLQState](ctx, b, &node.PutGlobalDLQ{ExpectedVersion: expected, Target: target})
}

// callNode sends msg to the Node and expects an answer of type *T.
func callNode[P interface{ *T }, T any](ctx context.Context, b *Broker, msg node.Message) (T, error) {
	var zero T
	answer, err := b.Call(ctx, node.NodeAddr(), msg)
	if err != nil {
		return zero, err
	}
	got, ok := answer.(P)
	if !ok {
		return zero, fmt.Errorf("broker: the node answered %T to %T", answer, msg)
	}
	return *got, nil
}
