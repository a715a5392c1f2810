package node

// Messages of the admin surface (issue 12: connections, subscriptions,
// force-close). An operator request reaches a Session from an AdminAddr
// (the driver's Broker.Call); the session answers to that address. Both
// requests are answered in every state, an ended session included, so a
// caller never waits on a machine that has nothing more to say.

// SessionInfoQuery asks a session what an operator listing shows:
// attachment, dormancy and its subscriptions. Answered by SessionInfo.
// An observation: it changes nothing in the session.
type SessionInfoQuery struct{}

// SessionInfo answers SessionInfoQuery.
type SessionInfo struct {
	Conn    ConnID // the attached connection, 0 when none
	Dormant bool   // waiting out its reconnect grace
	Authed  bool
	Ended   bool
	// Subs are at most sessionInfoSubsMax subscriptions, sorted by queue;
	// SubsTotal counts them all.
	Subs      []SessionSubInfo
	SubsTotal int
}

// SessionSubInfo is one subscription of a session.
type SessionSubInfo struct {
	SubID     uint64
	Topic     string
	Group     string
	Partition uint32
	Prefetch  uint32
	AutoAck   bool
	// Kind is SubKindQueue, SubKindStream or SubKindCohort.
	Kind string
	// Held counts deliveries the session holds for the client and has not
	// sent yet (dormant, gate closed, not yet announced).
	Held int
}

// Subscription kinds as listed.
const (
	SubKindQueue  = "queue"
	SubKindStream = "stream"
	SubKindCohort = "cohort"
)

// CloseSession is an operator's force-close of a session (RabbitMQ's
// "close connection" in the management UI): the client is told (a
// GOING_AWAY with grace 0 when its gate is open), its connection is closed
// after what was queued, and the session ends at once, as a session whose
// grace ran out: no dormancy, its unsettled deliveries requeue now. A
// client that reconnects gets a new session. Answered by SessionClosed.
type CloseSession struct {
	Message string // told to the client
}

// SessionClosed answers CloseSession.
type SessionClosed struct {
	Conn       ConnID // the connection that was closed, 0 when none
	WasDormant bool
	// AlreadyEnded: the session had ended before the request arrived.
	AlreadyEnded bool
}

func (*SessionInfoQuery) message() {}
func (*SessionInfo) message()      {}
func (*CloseSession) message()     {}
func (*SessionClosed) message()    {}
