//go:build !fibril_next

package broker

import (
	"errors"
	"log/slog"
	"time"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/io/logstore"
	"github.com/fibril-go/fibril/transport/wire"
)

// Config is everything a broker needs. Defaults live only in DefaultConfig.
type Config struct {
	DataDir    string
	ServerName string
	// AdvertiseHost and AdvertisePort are what topology tells clients.
	AdvertiseHost string
	AdvertisePort uint16

	// ReconnectGraceMs keeps a dropped session's subscriptions and deliveries
	// for a resuming client (SPEC connection.reconnect_grace_ms); 0 disables.
	ReconnectGraceMs int64
	// HeartbeatInterval: a silent connection is cut after 3 intervals.
	HeartbeatInterval time.Duration
	// FramePayloadBytesMax caps one frame (PROTOCOL.md §1.3).
	FramePayloadBytesMax uint32
	// OutboxBytesMax bounds what one session may have queued for its socket;
	// a consumer that cannot keep up beyond it is disconnected.
	OutboxBytesMax int
	// RunnerInboxMax bounds the requests queued for one partition.
	RunnerInboxMax int
	// QueuesMax bounds the queue partitions the broker will create.
	QueuesMax int
	// ResidentPayloadBytesMax bounds the payload bytes of live messages the
	// broker holds in memory, over all partitions. Past it, a newly durable
	// payload that is in a blob file is dropped from memory and read back
	// from the file when it is delivered, so a backlog costs disk, not RAM.
	ResidentPayloadBytesMax int64
	// SnapshotEntriesMin is the fewest log entries between two snapshots of
	// a partition (logstore.ShouldSnapshotAfter).
	SnapshotEntriesMin int

	// Users are seeded into the user store while it is empty.
	Users []UserSeed
	// AllowDefaultLoopback accepts the built-in fibril/fibril pair from
	// loopback peers while no user named fibril exists.
	AllowDefaultLoopback bool

	// Partition is the template for every queue partition's core config
	// (Queue and Epoch are filled per partition).
	Partition core.Config

	Logger *slog.Logger
}

// UserSeed is a user to create on first start.
type UserSeed struct {
	Name     string
	Password string
}

// DefaultConfig returns the embedded defaults: a local data directory and
// loopback-friendly settings.
func DefaultConfig() Config {
	return Config{
		DataDir:              "fibril-data",
		ServerName:           "fibril-go",
		AdvertiseHost:        "127.0.0.1",
		AdvertisePort:        9876,
		ReconnectGraceMs:     5000,
		HeartbeatInterval:    5 * time.Second,
		FramePayloadBytesMax: wire.PayloadSizeBytesMaxDefault,
		OutboxBytesMax:       256 << 20,
		RunnerInboxMax:       4096,
		QueuesMax:            100_000,
		// The head of a backlog stays in memory; past it a delivery reads a
		// 256 KiB window of the blob file (from the page cache, mostly).
		// 16 MiB rather than 64: every resident byte sits on a freshly
		// faulted page, and confirmed-publish did 127-132k msgs/s at
		// 1.61-1.62 s of server CPU against 113-116k at 1.99-2.10 s,
		// end to end unchanged (docs/PERF-LOG.md).
		ResidentPayloadBytesMax: 16 << 20,
		SnapshotEntriesMin:      logstore.SnapshotEntriesMin,
		AllowDefaultLoopback:    true,
		Partition:               core.DefaultConfig(core.QueueID{Topic: "template"}),
		Logger:                  slog.Default(),
	}
}

// Validate checks relations; it changes nothing.
func (c Config) Validate() error {
	switch {
	case c.DataDir == "":
		return errors.New("config: data dir must not be empty")
	case c.ReconnectGraceMs < 0:
		return errors.New("config: reconnect grace must not be negative")
	case c.HeartbeatInterval <= 0:
		return errors.New("config: heartbeat interval must be positive")
	case c.FramePayloadBytesMax < 1024:
		return errors.New("config: frame payload cap must be at least 1 KiB")
	case c.OutboxBytesMax < int(c.FramePayloadBytesMax):
		return errors.New("config: the outbox must hold at least one largest frame")
	case c.SnapshotEntriesMin < 1:
		return errors.New("config: snapshot entries floor must be at least 1")
	case c.ResidentPayloadBytesMax < 0:
		return errors.New("config: resident payload bytes must not be negative")
	case c.RunnerInboxMax < 1 || c.QueuesMax < 1:
		return errors.New("config: runner inbox and queue limits must be at least 1")
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
	return c.Partition.Validate()
}
