package node

import "github.com/fibril-go/fibril/core"

// PLACEHOLDER: the machines' bodies are being written; these signatures are
// the contract. This file is removed when the machines land.

type Node struct{}

func NewNode(cfg Config, recovered []Record, entropy [32]byte) (*Node, error) {
	panic("node: not implemented yet")
}
func (n *Node) Step(in Input) *Ready   { panic("node: not implemented yet") }
func (n *Node) CheckInvariants() error { return nil }

type Session struct{}

func NewSession(cfg Config, init SessionInit) *Session { panic("node: not implemented yet") }
func (s *Session) Step(in Input) *Ready                { panic("node: not implemented yet") }
func (s *Session) CheckInvariants() error              { return nil }
func (s *Session) Ended() bool                         { return false }

type Host struct{}

func NewHost(cfg Config, p *core.Partition, req LoadRequest) *Host {
	panic("node: not implemented yet")
}
func (h *Host) Step(in Input) *Ready       { panic("node: not implemented yet") }
func (h *Host) CheckInvariants() error     { return nil }
func (h *Host) Partition() *core.Partition { return nil }
