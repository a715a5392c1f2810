package broker

import (
	"context"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// The admin API's quarantine family (admin/quarantine.go): the listing is
// the Node's last report (an observation the driver keeps); a repair is a
// request to the Node, which decides and answers.

// Quarantine is the partitions parked by recovery checks now (SPEC 7).
func (b *Broker) Quarantine() node.QuarantineReport {
	if q := b.metrics.quarantine.Load(); q != nil {
		return *q
	}
	return node.QuarantineReport{}
}

// RepairQuarantine asks the Node to repair parked partition q and waits
// for its answer.
func (b *Broker) RepairQuarantine(ctx context.Context, q core.QueueID) (*node.QuarantineRepaired, error) {
	q.Group = core.NormalizeGroup(q.Group)
	answer, err := b.Call(ctx, node.NodeAddr(), &node.RepairQuarantine{Queue: q})
	if err != nil {
		return nil, err
	}
	repaired, ok := answer.(*node.QuarantineRepaired)
	assertTrue(ok, "the Node answers a repair with QuarantineRepaired")
	return repaired, nil
}
