package node

import "github.com/fibril-go/fibril/core"

// PLACEHOLDER: removed when the Host machine lands; the signatures are the contract.

type Host struct{}

func NewHost(cfg Config, p *core.Partition, req LoadRequest) *Host {
	panic("node: not implemented yet")
}
func (h *Host) Step(in Input) *Ready       { panic("node: not implemented yet") }
func (h *Host) CheckInvariants() error     { return nil }
func (h *Host) Partition() *core.Partition { return nil }
