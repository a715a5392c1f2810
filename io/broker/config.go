package broker

import (
	"errors"
	"log/slog"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/io/logstore"
	"github.com/fibril-go/fibril/transport/wire"
)

// Config is everything a broker needs. Defaults live only in DefaultConfig.
// Invariants:
//   - every limit and timing the machines apply reaches them through
//     nodeConfig, so the broker and the simulator run the same numbers;
//   - the driver's own limits (RunnerInboxMax) bound only plumbing: none of
//     them changes what a client observes beyond backpressure.
type Config struct {
	DataDir    string
	ServerName string
	// AdvertiseHost and AdvertisePort are what the broker would advertise to
	// clients in a cluster. A standalone broker answers TOPOLOGY with empty
	// lists (PROTOCOL 5.20), so they are informational only.
	AdvertiseHost string
	AdvertisePort uint16

	// ReconnectGraceMs keeps a dropped session's subscriptions and deliveries
	// for a resuming client (SPEC connection.reconnect_grace_ms); 0 disables.
	ReconnectGraceMs int64
	// HeartbeatInterval: a silent connection is cut after 3 intervals.
	HeartbeatInterval time.Duration
	// HandshakeTimeout: a connection whose HELLO has not arrived whole by
	// then is closed (a peer that sends part of a header and stalls).
	HandshakeTimeout time.Duration
	// AuthTimeout: a session not authenticated this long after HELLO_OK is
	// closed (a peer that only PINGs).
	AuthTimeout time.Duration
	// ConnectionsMax bounds connections open at once; one more is answered
	// with ERROR 500 and closed.
	ConnectionsMax int
	// ResumeRestartTTLMs: a session skeleton younger than this answers
	// resumed_after_restart after a restart (SPEC 8); 0 disables skeletons.
	ResumeRestartTTLMs int64
	// FramePayloadBytesMax caps one frame (PROTOCOL.md §1.3).
	FramePayloadBytesMax uint32
	// OutboxBytesMax bounds what one session may have queued for its socket;
	// a consumer that cannot keep up beyond it is disconnected.
	OutboxBytesMax int
	// RunnerInboxMax is the inbox depth of one partition past which the
	// readers of connections that feed it stop reading until it drains to
	// half (client backpressure; envelopes between machines never wait).
	RunnerInboxMax int
	// QueuesMax bounds the queues the broker will create.
	QueuesMax int
	// PartitionsMax bounds the partitions of every queue and stream
	// together (node.Config.PartitionsMax); zero derives it from the
	// process's open-files limit (PartitionsForOpenFiles).
	PartitionsMax int
	// ResidentPayloadBytesMax bounds the payload bytes of live messages the
	// broker holds in memory, over all partitions. Past it, a newly durable
	// payload that is in a blob file is dropped from memory and read back
	// from the file when it is delivered, so a backlog costs disk, not RAM.
	ResidentPayloadBytesMax int64
	// RecoveryOnMismatch is SPEC 7 recovery.on_mismatch: what a partition
	// log that fails a recovery check means (quarantine by default, the
	// zero value; core/node msg_quarantine.go).
	RecoveryOnMismatch node.MismatchPolicy
	// SnapshotEntriesMin is the fewest log entries between two snapshots of
	// a partition.
	SnapshotEntriesMin int

	// Users are seeded into the user store while it is empty.
	Users []UserSeed
	// AllowDefaultLoopback accepts the built-in fibril/fibril pair from
	// loopback peers while no user named fibril exists.
	AllowDefaultLoopback bool

	// Partition is the template for every queue partition's core config
	// (Queue, Epoch and TagFloor are filled per partition by the Node).
	Partition core.Config
	// StreamPartition is the template for every stream partition's config
	// (Stream and Epoch are filled per partition by the Node).
	StreamPartition stream.Config

	// IdleCleanup is idle queue eviction (SPEC 9, docs/idle.md).
	IdleCleanup node.IdleCleanupConfig
	// DefaultPartitionCount seeds partitioning.default_partition_count
	// (0: the node default, 1) and RuntimeLockIdleQueueCleanup is
	// runtime_locks.idle_queue_cleanup (admin_runtime.go).
	DefaultPartitionCount       uint32
	RuntimeLockIdleQueueCleanup bool

	Logger *slog.Logger

	// AdminMetricsPerChannel (admin.metrics_per_channel) exposes the
	// per-partition gauges fibril_queue_{ready,inflight} for loaded
	// partitions on /metrics (admin_queueops.go).
	AdminMetricsPerChannel bool

	// wallClock, when set (tests), replaces time.Now as the wall clock read
	// once at boot to anchor the monotonic clock (clock.go).
	wallClock func() time.Time
	// wrapNodeLog, when set (tests), wraps the Node's record log (to stall
	// or fail its syncs).
	wrapNodeLog func(recordLog) recordLog
}

// UserSeed is a user to create on first start.
type UserSeed struct {
	Name     string
	Password string
}

// DefaultConfig returns the embedded defaults: a local data directory and
// loopback-friendly settings. The machines' defaults come from
// node.DefaultConfig, so the two never drift apart.
func DefaultConfig() Config {
	nd := node.DefaultConfig()
	return Config{
		DataDir:              "fibril-data",
		ServerName:           nd.ServerName,
		AdvertiseHost:        "127.0.0.1",
		AdvertisePort:        9876,
		ReconnectGraceMs:     nd.ReconnectGraceMs,
		HeartbeatInterval:    time.Duration(nd.HeartbeatIntervalMs) * time.Millisecond,
		HandshakeTimeout:     time.Duration(nd.HandshakeTimeoutMs) * time.Millisecond,
		AuthTimeout:          time.Duration(nd.AuthTimeoutMs) * time.Millisecond,
		ConnectionsMax:       nd.ConnectionsMax,
		ResumeRestartTTLMs:   nd.ResumeRestartTTLMs,
		FramePayloadBytesMax: wire.PayloadSizeBytesMaxDefault,
		OutboxBytesMax:       nd.OutboxBytesMax,
		RunnerInboxMax:       4096,
		QueuesMax:            nd.QueuesMax,
		// The head of a backlog stays in memory; past it a delivery reads a
		// 256 KiB window of the blob file (from the page cache, mostly).
		// 4 MiB (the core's default) rather than 64 or 16: every resident
		// byte sits on a freshly faulted page, and the heap goal doubles it
		// in RSS; throughput was the same at 4 and 16 (docs/PERF-LOG.md).
		ResidentPayloadBytesMax: nd.ResidentPayloadBytesMax,
		SnapshotEntriesMin:      logstore.SnapshotEntriesMin,
		AllowDefaultLoopback:    nd.AllowDefaultLoopback,
		Partition:               nd.Partition,
		StreamPartition:         nd.StreamPartition,
		IdleCleanup:             nd.IdleCleanup,
		DefaultPartitionCount:   1,
		Logger:                  slog.Default(),
		AdminMetricsPerChannel:  true,
	}
}

// Validate checks relations; it changes nothing.
func (c Config) Validate() error {
	switch {
	case c.DataDir == "":
		return errors.New("config: data dir must not be empty")
	case c.HeartbeatInterval < time.Millisecond:
		return errors.New("config: heartbeat interval must be at least 1 ms")
	case c.HandshakeTimeout < time.Millisecond || c.AuthTimeout < time.Millisecond:
		return errors.New("config: handshake and auth timeouts must be at least 1 ms")
	case c.RunnerInboxMax < 2:
		return errors.New("config: runner inbox must be at least 2")
	case c.Logger == nil:
		return errors.New("config: a logger is required")
	}
	for _, u := range c.Users {
		if err := validUserName(u.Name); err != nil {
			return err
		}
		if u.Password == "" {
			return errors.New("config: user " + u.Name + " needs a password")
		}
	}
	return c.nodeConfig().Validate()
}

// nodeConfig is the machines' view of the config.
func (c Config) nodeConfig() node.Config {
	nc := node.DefaultConfig()
	nc.ServerName = c.ServerName
	nc.ReconnectGraceMs = c.ReconnectGraceMs
	nc.HeartbeatIntervalMs = c.HeartbeatInterval.Milliseconds()
	nc.HandshakeTimeoutMs = c.HandshakeTimeout.Milliseconds()
	nc.AuthTimeoutMs = c.AuthTimeout.Milliseconds()
	nc.ConnectionsMax = c.ConnectionsMax
	nc.FramePayloadBytesMax = c.FramePayloadBytesMax
	nc.OutboxBytesMax = c.OutboxBytesMax
	nc.ResumeRestartTTLMs = c.ResumeRestartTTLMs
	nc.AllowDefaultLoopback = c.AllowDefaultLoopback
	nc.QueuesMax = c.QueuesMax
	nc.PartitionsMax = c.PartitionsMax
	if nc.PartitionsMax == 0 {
		nc.PartitionsMax = PartitionsForOpenFiles(openFilesLimit())
	}
	nc.ResidentPayloadBytesMax = c.ResidentPayloadBytesMax
	nc.SnapshotEntriesMin = c.SnapshotEntriesMin
	nc.RecoveryOnMismatch = c.RecoveryOnMismatch
	nc.Partition = c.Partition
	nc.StreamPartition = c.StreamPartition
	nc.IdleCleanup = c.IdleCleanup
	if c.DefaultPartitionCount != 0 {
		nc.DefaultPartitionCount = c.DefaultPartitionCount
	}
	nc.RuntimeLockIdleQueueCleanup = c.RuntimeLockIdleQueueCleanup
	return nc
}
