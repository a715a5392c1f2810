package node

// PLACEHOLDER: removed when the Node machine lands; the signatures are the contract.

type Node struct{}

func NewNode(cfg Config, snapshot []byte, recovered []Record, entropy [32]byte) (*Node, error) {
	panic("node: not implemented yet")
}
func (n *Node) Step(in Input) *Ready   { panic("node: not implemented yet") }
func (n *Node) CheckInvariants() error { return nil }
