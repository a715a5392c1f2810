package core

// Inputs: the closed set of things that can happen to a partition. Each
// carries NowMs, the driver's clock in Unix milliseconds; the core never reads
// a clock. Ref is the driver's opaque correlation for the reply (for example a
// connection and request id); the core only echoes it.

// Input is one of the types below.
type Input interface {
	nowMs() int64
}

// Tick says time passed; the driver sends it at Ready.NextWakeMs.
type Tick struct{ NowMs int64 }

// Persisted says storage made every entry up to UpToIndex durable.
type Persisted struct {
	NowMs     int64
	UpToIndex uint64
}

// Declare declares or redeclares the queue. A nil field keeps the current value.
type Declare struct {
	NowMs        int64
	Ref          uint64
	DLQ          *DLQPolicy
	MaxRetries   *uint32
	DefaultTTLMs *int64
}

// SetGlobalDLQ sets (or with a nil Target clears) the global dead-letter target.
type SetGlobalDLQ struct {
	NowMs  int64
	Ref    uint64
	Target *DLQTarget
}

// Publish appends a message. NotBeforeMs > NowMs makes it a delayed publish.
// HasTTL with TTLMs sets a per-message TTL from broker receipt; without it the
// queue default applies.
type Publish struct {
	NowMs       int64
	Ref         uint64
	Confirm     bool
	Body        *Body
	HasTTL      bool
	TTLMs       int64
	NotBeforeMs int64
	// System marks the broker's own publishes (dead-letter copies, which carry
	// stroma.dlq.* headers); only they may set reserved headers. Never set it
	// from a client request.
	System bool
}

// Subscribe opens subscription SubID (allocated by the driver, unique per
// partition while it lives) with a prefetch bound. Exclusive makes it a
// cohort member's subscription (docs/cohorts.md): it is delivered to only
// while it is the partition's owner (SetOwner) and the gate is open.
type Subscribe struct {
	NowMs     int64
	Ref       uint64
	SubID     uint64
	Prefetch  uint32
	AutoAck   bool
	Exclusive bool
}

// Unsubscribe ends a subscription; its unsettled deliveries requeue at once.
type Unsubscribe struct {
	NowMs int64
	Ref   uint64
	SubID uint64
}

// Ack completes a batch of deliveries of one subscription.
type Ack struct {
	NowMs int64
	Ref   uint64
	SubID uint64
	Tags  []uint64
}

// Nack retries (Requeue, optionally after NotBeforeMs) or fails a batch.
type Nack struct {
	NowMs       int64
	Ref         uint64
	SubID       uint64
	Tags        []uint64
	Requeue     bool
	NotBeforeMs int64 // 0 = none
}

// DeadLetterDone says the dead-letter copy of Offset is durably stored in its
// target, so the source message can be settled.
type DeadLetterDone struct {
	NowMs  int64
	Offset uint64
}

func (in *Tick) nowMs() int64           { return in.NowMs }
func (in *Persisted) nowMs() int64      { return in.NowMs }
func (in *Declare) nowMs() int64        { return in.NowMs }
func (in *SetGlobalDLQ) nowMs() int64   { return in.NowMs }
func (in *Publish) nowMs() int64        { return in.NowMs }
func (in *Subscribe) nowMs() int64      { return in.NowMs }
func (in *Unsubscribe) nowMs() int64    { return in.NowMs }
func (in *Ack) nowMs() int64            { return in.NowMs }
func (in *Nack) nowMs() int64           { return in.NowMs }
func (in *DeadLetterDone) nowMs() int64 { return in.NowMs }

// PauseSubscription stops (Paused) or restarts new deliveries to a
// subscription while its session has no transport (PROTOCOL 7.7: "new
// deliveries wait for a transport"). Its unsettled deliveries stay leased.
type PauseSubscription struct {
	NowMs  int64
	Ref    uint64
	SubID  uint64
	Paused bool
}

func (in *PauseSubscription) nowMs() int64 { return in.NowMs }

// SetOwner names the partition's exclusive owner: the one exclusive
// subscription that may receive deliveries (docs/cohorts.md, "The gate").
// SubID 0 means nobody; SubID need not be subscribed yet. A Generation below
// the last one applied is a late envelope and is ignored. SetOwner is never
// answered (the Node does not wait for a hand-over), so Ref is only carried
// for the driver's bookkeeping; nothing of it is logged.
type SetOwner struct {
	NowMs      int64
	Ref        uint64
	SubID      uint64
	Generation uint64
}

func (in *SetOwner) nowMs() int64 { return in.NowMs }
