package node

// PLACEHOLDER: removed when the Session machine lands; the signatures are the contract.

type Session struct{}

func NewSession(cfg Config, init SessionInit) *Session { panic("node: not implemented yet") }
func (s *Session) Step(in Input) *Ready                { panic("node: not implemented yet") }
func (s *Session) CheckInvariants() error              { return nil }
func (s *Session) Ended() bool                         { return false }
