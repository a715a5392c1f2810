package node

import (
	"errors"
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/transport/wire"
)

// Limits and timings of the three machines. Invariants:
//   - every queue, map and loop of this package is bounded by a field here
//     or by a named constant beside its use (STYLE 3): past the bound a
//     request is refused as retryable, never grown into;
//   - defaults live only in DefaultConfig; call sites pass a full Config;
//   - Validate checks relations and changes nothing: a config it accepts
//     cannot make a machine divide by zero, time out at once or refuse
//     every frame.

// Config holds every limit and timing of the node, its sessions and its
// partition hosts. Defaults live only in DefaultConfig; Validate checks
// relations and changes nothing.
type Config struct {
	ServerName string

	// ReconnectGraceMs keeps a dropped session dormant for a resuming client
	// (PROTOCOL 7.7); 0 ends it at disconnect.
	ReconnectGraceMs int64
	// HeartbeatIntervalMs: PING every interval; a connection silent for 3
	// intervals is cut (PROTOCOL 1.5). Also the longest a handshake gate
	// holds pushes (PROTOCOL 3.1).
	HeartbeatIntervalMs int64
	// HandshakeTimeoutMs: a connection whose HELLO has not arrived whole by
	// then is closed (a peer that sends part of a header and stalls).
	HandshakeTimeoutMs int64
	// AuthTimeoutMs: a session not authenticated this long after HELLO_OK is
	// closed (a peer that only PINGs).
	AuthTimeoutMs int64
	// ConnectionsMax bounds connections open at once (handshaking or bound);
	// one more is answered with ERROR 500 and closed.
	ConnectionsMax int
	// FramePayloadBytesMax caps one frame (PROTOCOL 1.3).
	FramePayloadBytesMax uint32
	// OutboxBytesMax bounds what a session has queued and its socket has not
	// accepted; past it the consumer is too slow and is disconnected.
	OutboxBytesMax int
	// StreamCreditOutboxBytesMax: a session gives stream credit back only
	// while its outbox holds at most this many bytes (and at most half of
	// OutboxBytesMax). A stream partition hands out records as fast as
	// credit returns, so this, not the outbox bound, is what a fast stream
	// parks in memory per session: enough to keep the socket busy between
	// writes, no more.
	StreamCreditOutboxBytesMax int
	// SubscriptionsPerSessionMax bounds one session's subscriptions.
	SubscriptionsPerSessionMax int
	// ResumeRestartTTLMs: a persisted session skeleton younger than this
	// answers resumed_after_restart after a restart; 0 disables skeletons.
	ResumeRestartTTLMs int64
	// AllowDefaultLoopback accepts the built-in fibril/fibril from loopback
	// peers while no user named fibril exists.
	AllowDefaultLoopback bool

	// QueuesMax bounds declared queues; PartitionsPerQueueMax one declare.
	QueuesMax             int
	PartitionsPerQueueMax uint32
	// PartitionsMax bounds the partitions of every queue and stream
	// together: each partition holds open files (its log's segment and
	// blob file), and a partition that cannot open one stops the broker, so
	// the driver derives it from the process's open-files limit.
	PartitionsMax int

	// ResidentPayloadBytesMax bounds the payload bytes of live messages held
	// in memory over all partitions; past it newly durable stored payloads
	// are spilled (read back from storage on delivery).
	ResidentPayloadBytesMax int64
	// SnapshotEntriesMin is the fewest entries between two snapshots of a
	// partition.
	SnapshotEntriesMin int
	// NodeSnapshotRecordsMin is the fewest records between two snapshots of
	// the Node's own log.
	NodeSnapshotRecordsMin int
	// DeadLetterRetryMinMs and DeadLetterRetryMaxMs bound the backoff of a
	// dead-letter copy whose target refused it or failed to load.
	DeadLetterRetryMinMs int64
	DeadLetterRetryMaxMs int64
	// DeadLettersInflightMax bounds one partition's copies on their way.
	DeadLettersInflightMax int

	// RecoveryOnMismatch is SPEC 7 recovery.on_mismatch: what a partition
	// log that fails a recovery check means (msg_quarantine.go).
	RecoveryOnMismatch MismatchPolicy

	// LegacyBootCount is the boot count an older broker kept in its own
	// file in the data directory (0: none): the Node's boot counter
	// continues above it, so delivery tags never repeat across an upgrade.
	LegacyBootCount uint64

	// DefaultPartitionCount is partitioning.default_partition_count: the
	// partitions of a queue created without a count (a runtime seed).
	DefaultPartitionCount uint32
	// RuntimeLockIdleQueueCleanup is runtime_locks.idle_queue_cleanup: the
	// group cannot be changed through the admin API. Read at every boot
	// (a lock is the operator's startup decision, not a persisted value).
	RuntimeLockIdleQueueCleanup bool

	// Partition is the template of every partition's core config (Queue,
	// Epoch and TagFloor are filled per partition by the Node).
	Partition core.Config
	// StreamPartition is the template of every stream partition's config
	// (Stream and Epoch are filled per partition by the Node).
	StreamPartition stream.Config

	// IdleCleanup is idle queue eviction (SPEC 9, node_idle.go). The Node
	// reads it at every sweep: a driver may update it live.
	IdleCleanup IdleCleanupConfig
}

// DefaultConfig returns the embedded defaults (SPEC 8, 14).
func DefaultConfig() Config {
	return Config{
		ServerName:                 "fibril-go",
		ReconnectGraceMs:           5000,
		HeartbeatIntervalMs:        5000,
		HandshakeTimeoutMs:         10_000,
		AuthTimeoutMs:              10_000,
		ConnectionsMax:             10_000,
		FramePayloadBytesMax:       wire.PayloadSizeBytesMaxDefault,
		OutboxBytesMax:             256 << 20,
		StreamCreditOutboxBytesMax: 4 << 20,
		SubscriptionsPerSessionMax: 4096,
		ResumeRestartTTLMs:         60_000,
		AllowDefaultLoopback:       true,
		QueuesMax:                  100_000,
		PartitionsMax:              1 << 20,
		PartitionsPerQueueMax:      1024,
		ResidentPayloadBytesMax:    4 << 20,
		SnapshotEntriesMin:         100_000,
		NodeSnapshotRecordsMin:     1024,
		DeadLetterRetryMinMs:       20,
		DeadLetterRetryMaxMs:       5000,
		DeadLettersInflightMax:     256,
		DefaultPartitionCount:      1,
		Partition:                  core.DefaultConfig(core.QueueID{Topic: "template"}),
		StreamPartition:            stream.DefaultConfig(core.QueueID{Topic: "template"}),
		IdleCleanup:                DefaultIdleCleanup(),
	}
}

// Validate checks relations; it changes nothing.
func (c Config) Validate() error {
	switch {
	case c.ReconnectGraceMs < 0:
		return errors.New("node config: reconnect grace must not be negative")
	case c.HeartbeatIntervalMs <= 0:
		return errors.New("node config: heartbeat interval must be positive")
	case c.HandshakeTimeoutMs <= 0 || c.AuthTimeoutMs <= 0:
		return errors.New("node config: handshake and auth timeouts must be positive")
	case c.ConnectionsMax < 1 || c.SubscriptionsPerSessionMax < 1:
		return errors.New("node config: connection and subscription limits must be at least 1")
	case c.FramePayloadBytesMax < 1024:
		return errors.New("node config: frame payload cap must be at least 1 KiB")
	case c.OutboxBytesMax < int(c.FramePayloadBytesMax):
		return errors.New("node config: the outbox must hold at least one largest frame")
	case c.StreamCreditOutboxBytesMax < 1:
		return errors.New("node config: StreamCreditOutboxBytesMax must be at least 1")
	case c.ResumeRestartTTLMs < 0:
		return errors.New("node config: resume restart TTL must not be negative")
	case c.QueuesMax < 1 || c.PartitionsPerQueueMax < 1 || c.PartitionsMax < 1:
		return errors.New("node config: queue limits must be at least 1")
	case c.ResidentPayloadBytesMax < 0:
		return errors.New("node config: resident payload bytes must not be negative")
	case c.SnapshotEntriesMin < 1 || c.NodeSnapshotRecordsMin < 1:
		return errors.New("node config: snapshot entries and records floors must be at least 1")
	case c.DeadLetterRetryMinMs <= 0 || c.DeadLetterRetryMaxMs < c.DeadLetterRetryMinMs:
		return errors.New("node config: dead-letter backoff needs 0 < min <= max")
	case c.DeadLettersInflightMax < 1:
		return errors.New("node config: dead letters in flight must be at least 1")
	case c.RecoveryOnMismatch > MismatchIgnore:
		return errors.New("node config: recovery on_mismatch must be quarantine, refuse or ignore")
	}
	if err := c.StreamPartition.Validate(); err != nil {
		return err
	}
	if err := c.IdleCleanup.Validate(); err != nil {
		return err
	}
	if err := c.Partition.Validate(); err != nil {
		return err
	}
	// The runtime seeds, with the ranges an operator's change is checked
	// against (runtime.go): a bad flag is refused at every start, even one
	// a persisted value would override.
	seeds := RuntimeSeeds(c)
	if bad := validateRuntime(&seeds, c.PartitionsPerQueueMax); bad != nil {
		return fmt.Errorf("node config: %w", bad)
	}
	return nil
}
