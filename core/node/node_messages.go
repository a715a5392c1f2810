package node

import "github.com/fibril-go/fibril/core"

// The Node's side of the operator message requests (msg_messages.go):
// check the queue, load the partition, relay to its Host. Invariants:
//   - an operator request never creates a queue: an unknown one (or a
//     stream's topic) is refused with core.ErrQueueUnknown;
//   - a relayed request waits on a load like an Open (the same bounded
//     waiter lists) and is answered exactly once: by the Host, or by the Node
//     with OperatorRefused when the load fails or the Host is gone;
//   - SetQueueDLQ is a DeclareQueue of the dead-letter fields alone, so it
//     takes the very path (record, gate, DeclareSettings, held answer) a
//     client's re-declare takes.

// onOperatorRequest handles a request from an operator (an AdminAddr).
func (n *Node) onOperatorRequest(from Address, msg Message) {
	assertHold(from.Kind == AddrAdmin, "operator requests come from admin addresses")
	switch m := msg.(type) {
	case *SetQueueDLQ:
		key := queueKey{Topic: m.Topic, Group: core.NormalizeGroup(m.Group)}
		if n.state.queues[key] == nil {
			n.send(from, &OperatorRefused{Err: core.ErrQueueUnknown})
			return
		}
		dlq := m.DLQ
		n.onDeclareQueue(from, &DeclareQueue{Topic: key.Topic, Group: key.Group, DLQ: &dlq, MaxRetries: m.MaxRetries})
		return
	case *QueueSettingsOf:
		entry := n.state.queues[queueKey{Topic: m.Topic, Group: core.NormalizeGroup(m.Group)}]
		if entry == nil {
			n.send(from, &OperatorRefused{Err: core.ErrQueueUnknown})
			return
		}
		// declareSettingsOf copies: the answer owns its pointers.
		s := declareSettingsOf(entry.settings)
		n.send(from, &QueueSettings{Partitions: entry.partitions, DLQ: s.DLQ, MaxRetries: s.MaxRetries, DefaultTTLMs: s.DefaultTTLMs})
		return
	}
	topic, group, partition := operatorTarget(msg)
	setReplyTo(msg, from)
	key := queueKey{Topic: topic, Group: core.NormalizeGroup(group)}
	entry := n.state.queues[key]
	if entry == nil || validQueueKey(key) != nil {
		n.send(from, &OperatorRefused{Err: core.ErrQueueUnknown})
		return
	}
	if pub, ok := msg.(*OperatorPublish); ok {
		// Back to the partition the copy left when it says and the queue
		// still has it; otherwise as a dead-letter copy: spread by key over
		// the partitions, deterministically.
		partition = uint32(pub.Key % uint64(entry.partitions))
		if pub.ByPartition && pub.Partition < entry.partitions {
			partition = pub.Partition
		}
	}
	if partition >= entry.partitions {
		n.send(from, &OperatorRefused{Err: core.ErrPartitionOutOfRange})
		return
	}
	n.openQueue(key, opener{partition: partition, admin: msg})
}

// operatorTarget is the queue and partition a relayed request names.
func operatorTarget(msg Message) (topic, group string, partition uint32) {
	switch m := msg.(type) {
	case *BrowseMessages:
		return m.Topic, m.Group, m.Partition
	case *ReadDeadLetters:
		return m.Topic, m.Group, m.Partition
	case *ScanDeadLetters:
		return m.Topic, m.Group, m.Partition
	case *OperatorPublish:
		return m.Topic, m.Group, 0
	case *CompleteMessage:
		return m.Topic, m.Group, m.Partition
	case *PurgeQueue:
		return m.Topic, m.Group, m.Partition
	case *AdminPublish:
		return m.Topic, m.Group, m.Partition
	}
	panic("fibril/core/node invariant violated: not a relayed operator request")
}

// setReplyTo stamps who the Host answers.
func setReplyTo(msg Message, to Address) {
	switch m := msg.(type) {
	case *BrowseMessages:
		m.ReplyTo = to
	case *ReadDeadLetters:
		m.ReplyTo = to
	case *ScanDeadLetters:
		m.ReplyTo = to
	case *OperatorPublish:
		m.ReplyTo = to
	case *CompleteMessage:
		m.ReplyTo = to
	case *PurgeQueue:
		m.ReplyTo = to
	case *AdminPublish:
		m.ReplyTo = to
	}
}

// replyToOf is who waits for a relayed request.
func replyToOf(msg Message) Address {
	switch m := msg.(type) {
	case *BrowseMessages:
		return m.ReplyTo
	case *ReadDeadLetters:
		return m.ReplyTo
	case *ScanDeadLetters:
		return m.ReplyTo
	case *OperatorPublish:
		return m.ReplyTo
	case *CompleteMessage:
		return m.ReplyTo
	case *PurgeQueue:
		return m.ReplyTo
	case *AdminPublish:
		return m.ReplyTo
	}
	panic("fibril/core/node invariant violated: not a relayed operator request")
}

// relayOperator sends a request whose partition is loaded on to its Host.
func (n *Node) relayOperator(id core.QueueID, partitions uint32, msg Message) {
	assertHold(replyToOf(msg).Kind == AddrAdmin, "a relayed request names its operator")
	if b, ok := msg.(*BrowseMessages); ok {
		b.Partitions = partitions
	}
	n.send(PartitionAddr(id), msg)
}

// refuseOperator answers a relayed request the Node could not deliver.
func (n *Node) refuseOperator(msg Message, err *core.Error) {
	assertHold(err != nil, "a refusal says why")
	n.send(replyToOf(msg), &OperatorRefused{Err: err})
}
