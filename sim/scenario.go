package sim

import (
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// A Scenario is a workload plus a fault schedule, run for one seed at a
// time. Scenarios live in package scenarios; this file is their shape.
type Scenario struct {
	Name        string
	Description string // one line: what the scenario exercises
	Queues      []QueueConfig
	// Streams are the plexus streams the declarer declares (DECLARE_PLEXUS)
	// for the stream producers and subscribers (Workload.Stream).
	Streams   []StreamConfig
	GlobalDLQ string // global dead-letter target topic ("" = none)
	LeaseMs   int64  // core.Config.LeaseMs
	NodeCount int    // nodes on the network (standalone: 1; more need the cluster core)
	Workload  Workload
	Faults    Faults           // used as is unless the run is in swarm mode
	Schedule  []ScheduledFault // applied in both modes
	// Operator are runtime changes an operator makes during the run
	// (operator.go).
	Operator []OperatorChange
	// Broker overrides the simulator's node-core config (zero fields keep
	// the simulator's defaults, see World.nodeConfig).
	Broker BrokerKnobs
}

// BrokerKnobs are the node-core limits and timings a scenario may change.
// Zero keeps the simulator's default.
type BrokerKnobs struct {
	ReconnectGraceMs        int64
	NoReconnectGrace        bool // grace 0: a dropped session ends at once
	ResumeRestartTTLMs      int64
	HeartbeatIntervalMs     int64
	HandshakeTimeoutMs      int64
	AuthTimeoutMs           int64
	OutboxBytesMax          int
	ResidentPayloadBytesMax int64
	SnapshotEntriesMin      int
	DeadLetterRetryMaxMs    int64
	ConnectionsMax          int // admission: one more is refused (ERROR 500)
	// IdleCleanup, when Enabled, replaces the Node's idle_queue_cleanup
	// settings (SPEC 9): the idle-eviction scenario.
	IdleCleanup node.IdleCleanupConfig
}

// QueueConfig declares one queue on every node that hosts it.
type QueueConfig struct {
	Topic        string
	Partitions   int
	MaxRetries   uint32
	DLQ          core.DLQPolicy
	DefaultTTLMs int64
	// DeadLetterSink: the queue receives dead-letter copies; producers do not
	// publish to it, consumers drain it.
	DeadLetterSink bool
	// QueueDepthMax bounds live messages per partition (core.Config; 0 =
	// the core's default): a small bound makes publishes fail with
	// ErrQueueFull.
	QueueDepthMax int
	// Cohort makes the queue an exclusive consumer group's (its
	// consumer_group id): only cohort members (Workload.Cohort) subscribe
	// to it, each exclusively; ordinary consumers leave it alone, and
	// producers route every publish to it by key.
	Cohort string
}

// StreamConfig declares one stream: its tier and retention bounds (0 =
// unbounded).
type StreamConfig struct {
	Topic      string
	Partitions int
	Tier       uint8 // core.TierEphemeral, TierSpeculative, TierDurable
	MaxAgeMs   uint64
	MaxBytes   uint64
	MaxRecords uint64
}

// StreamWorkload is what the stream clients do.
type StreamWorkload struct {
	Producers            int
	Subscribers          int
	RecordsPerProducer   int
	PublishIntervalMaxMs int64
	ConfirmRatio         float64
	DurableRatio         float64 // share of subscriptions with a durable name
	FilterRatio          float64 // share of subscriptions with a filter
	AutoAckRatio         float64
	SlowRatio            float64 // share of subscribers that stop reading now and then
	ReconnectRatio       float64 // chance per delivery that a subscriber drops its link
	AckDelayMaxMs        int64
}

// CohortWorkload is what the cohort members do (peer_cohort.go). Ratios
// are per delivery in the safety phase, unless they say otherwise; at
// most one of them applies to a delivery, the rest are acked.
type CohortWorkload struct {
	Members      int
	SubsetRatio  float64 // per member past the first two: it subscribes to a random subset of each cohort queue's partitions
	TargetRatio  float64 // per member: it sends a consumer_target
	AutoAckRatio float64 // per subscribe

	RetryRatio      float64 // nack with requeue
	SlowRatio       float64 // ack only after the lease expired (a stale ack)
	SilentRatio     float64 // never settle
	LeaveRatio      float64 // unsubscribe every cohort subscription, rejoin later
	PartialRatio    float64 // unsubscribe this partition only, resubscribe later
	VanishRatio     float64 // drop the link and resume within the grace
	VanishLongRatio float64 // drop the link and come back after the grace ended the session
	CloseRatio      float64 // drop the link and open a new session at once (the old one dormant), same member id
	// FreshMemberRatio: per new session (not resumed), the member forgets
	// its member id and joins as a new member.
	FreshMemberRatio float64
	RejoinDelayMinMs int64
	RejoinDelayMaxMs int64
}

// Workload is what the clients do. Ratios are per message or per delivery.
type Workload struct {
	Producers int
	Consumers int
	// Rogues open only misbehaving links (partial HELLO headers, no AUTH,
	// oversized frames) during the safety phase, holding connection slots.
	Rogues int

	MessagesPerProducer    int   // publish budget per producer
	PublishIntervalMinMs   int64 // gap between two publishes of one producer
	PublishIntervalMaxMs   int64
	OutstandingConfirmsMax int     // a producer waits when this many confirms are pending
	ConfirmRatio           float64 // share of publishes that ask for a confirm
	DelayedRatio           float64 // share with not_before in the future
	DelayMaxMs             int64
	TTLRatio               float64 // share with a per-message TTL
	TTLMinMs               int64
	TTLMaxMs               int64
	KeyedRatio             float64 // share of partitioned-queue publishes routed by key
	LargePayloadRatio      float64 // share of publishes with a 512-byte payload (spilled past the budget)

	PrefetchMin  uint32
	PrefetchMax  uint32
	AutoAckRatio float64 // share of subscriptions in auto-ack mode

	ProcessMinMs     int64 // time a consumer holds a delivery before settling it
	ProcessMaxMs     int64
	RetryRatio       float64 // nack with requeue
	RetryAfterRatio  float64 // nack with requeue and not_before
	RetryAfterMaxMs  int64
	FailRatio        float64 // nack without requeue: the dead-letter policy
	SilentRatio      float64 // never settle (the lease expires)
	DisconnectRatio  float64 // drop the connection instead of settling
	UnsubscribeRatio float64 // end the subscription instead of settling
	NotReadingRatio  float64 // stop reading the link for a while instead of settling (a slow consumer)
	NotReadingMaxMs  int64
	AckBatchMax      int   // acks of one subscription sent together (1 = one per request)
	AckBatchWindowMs int64 // how long a consumer gathers an ack batch

	ReconnectDelayMinMs int64
	ReconnectDelayMaxMs int64
	ConnectTimeoutMs    int64

	// Stream is the stream clients' share of the work (Scenario.Streams).
	Stream StreamWorkload
	// Cohort is what the members of the cohort queues do (peer_cohort.go).
	Cohort CohortWorkload

	SafetyPhaseMs      int64 // faults on, producers publish
	LivenessPhaseMaxMs int64 // faults off, consumers drain; must converge within this
}

// FaultKind names a scheduled fault.
type FaultKind uint8

const (
	FaultCrash            FaultKind = 1 // crash node Target now
	FaultPartition        FaultKind = 2 // cut Ratio of the clients off for DurationMs
	FaultClockJump        FaultKind = 3 // move node Target's clock by AmountMs
	FaultVanish           FaultKind = 4 // Ratio of consumers stop settling for DurationMs
	FaultResetConnections FaultKind = 5 // reset Ratio of the client connections
	FaultPowerLoss        FaultKind = 6 // power loss of node Target now
	FaultDropSessions     FaultKind = 7 // Ratio of the clients drop their links (sessions go dormant)
	FaultSlowConsumers    FaultKind = 8 // Ratio of the consumers stop reading for DurationMs
	// FaultCorruptRecord crashes node Target and damages a synced record of
	// the log of partition Target of the catalogue on its disk
	// (broker_quarantine.go): recovery quarantines it (SPEC 7).
	FaultCorruptRecord FaultKind = 9
)

func (k FaultKind) String() string {
	switch k {
	case FaultCrash:
		return "crash"
	case FaultPartition:
		return "partition"
	case FaultClockJump:
		return "clock-jump"
	case FaultVanish:
		return "vanish"
	case FaultResetConnections:
		return "reset-connections"
	case FaultPowerLoss:
		return "power-loss"
	case FaultDropSessions:
		return "drop-sessions"
	case FaultSlowConsumers:
		return "slow-consumers"
	case FaultCorruptRecord:
		return "corrupt-record"
	}
	return fmt.Sprintf("fault(%d)", uint8(k))
}

// ScheduledFault is one fault at a fixed simulated time of the safety phase.
type ScheduledFault struct {
	AtMs       int64
	Kind       FaultKind
	Target     int // node index (0-based) for node faults
	DurationMs int64
	AmountMs   int64
	Ratio      float64
}

// DefaultQueues is the standard topology: a work queue `jobs` dead-lettering
// into `jobs-dlq`, and a partitioned queue `events` with the discard policy.
func DefaultQueues() []QueueConfig {
	return []QueueConfig{
		{Topic: "jobs", Partitions: 1, MaxRetries: 3, DLQ: core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "jobs-dlq"}}},
		{Topic: "jobs-dlq", Partitions: 1, MaxRetries: 5, DeadLetterSink: true},
		{Topic: "events", Partitions: 3, MaxRetries: 2},
	}
}

// DefaultWorkload is a moderate steady load that finishes in a few seconds
// of simulated time.
func DefaultWorkload() Workload {
	return Workload{
		Producers:              3,
		Consumers:              3,
		MessagesPerProducer:    150,
		PublishIntervalMinMs:   1,
		PublishIntervalMaxMs:   20,
		OutstandingConfirmsMax: 16,
		ConfirmRatio:           0.8,
		KeyedRatio:             0.5,
		LargePayloadRatio:      0.2,
		PrefetchMin:            1,
		PrefetchMax:            8,
		ProcessMinMs:           0,
		ProcessMaxMs:           20,
		AckBatchMax:            4,
		AckBatchWindowMs:       5,
		RetryAfterMaxMs:        1000,
		ReconnectDelayMinMs:    10,
		ReconnectDelayMaxMs:    300,
		ConnectTimeoutMs:       500,
		SafetyPhaseMs:          5_000,
		LivenessPhaseMaxMs:     120_000,
	}
}

func (s *Scenario) validate() error {
	w := &s.Workload
	switch {
	case s.Name == "":
		return fmt.Errorf("sim: scenario without a name")
	case len(s.Queues) == 0:
		return fmt.Errorf("sim: scenario %s declares no queues", s.Name)
	case s.LeaseMs < 1:
		return fmt.Errorf("sim: scenario %s: LeaseMs must be at least 1", s.Name)
	case s.NodeCount > 1:
		// The network, addresses and node loop already carry a node id, but
		// several nodes need the cluster core (ownership, replication) to
		// serve one queue together; until then they would be independent
		// brokers with clashing partition names.
		return fmt.Errorf("sim: scenario %s: NodeCount > 1 needs the cluster core", s.Name)
	case w.Producers < 0 || w.Consumers < 1:
		return fmt.Errorf("sim: scenario %s needs at least one consumer", s.Name)
	case w.PrefetchMin < 1 || w.PrefetchMax < w.PrefetchMin:
		return fmt.Errorf("sim: scenario %s: PrefetchMin..PrefetchMax is not a range from 1", s.Name)
	case w.PublishIntervalMinMs < 0 || w.PublishIntervalMaxMs < w.PublishIntervalMinMs:
		return fmt.Errorf("sim: scenario %s: publish interval is not a range", s.Name)
	case w.ProcessMinMs < 0 || w.ProcessMaxMs < w.ProcessMinMs:
		return fmt.Errorf("sim: scenario %s: process time is not a range", s.Name)
	case w.ReconnectDelayMinMs < 1 || w.ReconnectDelayMaxMs < w.ReconnectDelayMinMs:
		return fmt.Errorf("sim: scenario %s: reconnect delay is not a range from 1", s.Name)
	case w.ConnectTimeoutMs < 1 || w.SafetyPhaseMs < 1 || w.LivenessPhaseMaxMs < 1:
		return fmt.Errorf("sim: scenario %s: timeouts and phases must be positive", s.Name)
	case w.AckBatchMax < 1 || w.AckBatchWindowMs < 0:
		return fmt.Errorf("sim: scenario %s: AckBatchMax must be at least 1", s.Name)
	case w.OutstandingConfirmsMax < 1:
		return fmt.Errorf("sim: scenario %s: OutstandingConfirmsMax must be at least 1", s.Name)
	case w.TTLRatio > 0 && (w.TTLMinMs < 0 || w.TTLMaxMs < w.TTLMinMs):
		return fmt.Errorf("sim: scenario %s: TTL is not a range", s.Name)
	}
	if sum := w.RetryRatio + w.RetryAfterRatio + w.FailRatio + w.SilentRatio + w.DisconnectRatio + w.UnsubscribeRatio + w.NotReadingRatio; sum > 1 {
		return fmt.Errorf("sim: scenario %s: consumer behaviour ratios add up to %.2f > 1", s.Name, sum)
	}
	topics := map[string]bool{}
	for _, q := range s.Queues {
		if err := core.ValidateName(q.Topic); err != nil || q.Partitions < 1 {
			return fmt.Errorf("sim: scenario %s: queue %q needs a valid name and a partition", s.Name, q.Topic)
		}
		topics[q.Topic] = true
	}
	for _, q := range s.Queues {
		if q.DLQ.Kind == core.DLQCustom && !topics[q.DLQ.Target.Topic] {
			return fmt.Errorf("sim: scenario %s: queue %s dead-letters to undeclared %s", s.Name, q.Topic, q.DLQ.Target.Topic)
		}
	}
	if s.GlobalDLQ != "" && !topics[s.GlobalDLQ] {
		return fmt.Errorf("sim: scenario %s: global dead-letter target %s is not declared", s.Name, s.GlobalDLQ)
	}
	for _, st := range s.Streams {
		if err := core.ValidateName(st.Topic); err != nil || st.Partitions < 1 || topics[st.Topic] || st.Tier > core.TierDurable {
			return fmt.Errorf("sim: scenario %s: stream %q needs a valid name of its own, a partition and a tier", s.Name, st.Topic)
		}
		topics[st.Topic] = true
	}
	if sw := &w.Stream; (sw.Producers > 0 || sw.Subscribers > 0) && len(s.Streams) == 0 {
		return fmt.Errorf("sim: scenario %s has stream clients but no stream", s.Name)
	}
	if err := s.validateCohorts(); err != nil {
		return err
	}
	return s.Faults.validate()
}
