package broker

import (
	"context"
	"fmt"

	"github.com/fibril-go/fibril/core/node"
)

// QueuesDebug asks the Node for its idle eviction view (GET
// /admin/api/queues_debug): an operator request like any other, answered
// by the machine.
func (b *Broker) QueuesDebug(ctx context.Context) (*node.QueuesDebug, error) {
	msg, err := b.Call(ctx, node.NodeAddr(), &node.QueuesDebugRequest{})
	if err != nil {
		return nil, err
	}
	d, ok := msg.(*node.QueuesDebug)
	if !ok {
		return nil, fmt.Errorf("broker: the Node answered a queues debug request with %T", msg)
	}
	return d, nil
}
