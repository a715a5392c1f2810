package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/broker"
)

// The key table. Invariants:
//   - one row per setting; keys are SPEC 14's names where SPEC names the
//     setting, else named in the same style under the section it belongs to;
//   - every flag `fibril serve` had before this table exists is a row's
//     Flag, with its old name, so scripts keep working;
//   - a row with Get/Set reads its default from broker.DefaultConfig; a row
//     without them has its Default here and is read by cmd/fibril;
//   - rows are in the order --print-config and the docs list them.
//
// Adding a setting: append a row (docs/configuration.md, "Adding a key").

// Bounds shared by many rows.
const (
	// msMax is about 34 years in milliseconds: far beyond any sensible
	// timeout, far below an overflow once multiplied into a time.Duration.
	msMax = int64(1) << 40
	// countMax bounds counts and byte sizes (an int on every platform we
	// build for holds it).
	countMax = int64(1)<<31 - 1
)

// Table returns the key table (a fresh copy: callers may not share rows).
func Table() []Key {
	return []Key{
		// server.
		{Name: "server.data_dir", Kind: KindString, Flag: "data-dir",
			Doc: "directory for logs, users and TLS material (created if absent)",
			Get: func(c broker.Config) Value { return Str(c.DataDir) },
			Set: func(c *broker.Config, v Value) { c.DataDir = v.Str },
			Check: func(v Value) error {
				if strings.TrimSpace(v.Str) == "" {
					return fmt.Errorf("the data directory must not be empty; name a directory, e.g. /var/lib/fibril")
				}
				return nil
			}},
		{Name: "server.name", Kind: KindString,
			Doc: "the server name told to clients in HELLO_OK",
			Get: func(c broker.Config) Value { return Str(c.ServerName) },
			Set: func(c *broker.Config, v Value) { c.ServerName = v.Str },
			Check: func(v Value) error {
				if v.Str == "" || len(v.Str) > 255 {
					return fmt.Errorf("the server name must be 1 to 255 bytes")
				}
				return nil
			}},

		// broker.listener.
		{Name: "broker.listener.bind", Kind: KindString, Flag: "listen", Default: Str("127.0.0.1:9876"),
			Doc:   "HOST:PORT for the wire protocol: TCP and QUIC (UDP) on the same port",
			Check: hostPort(1)},
		{Name: "broker.listener.advertise", Kind: KindString, Flag: "advertise",
			Doc:   "host clients should dial, as listed in topology (default: the listen host)",
			Check: advertiseHost},
		{Name: "broker.listener.quic", Kind: KindBool, Flag: "no-quic", FlagNegates: true, Default: Bool(true),
			Doc: "serve QUIC beside TCP (the flag --no-quic turns it off)"},

		// tls.
		{Name: "tls.enabled", Kind: KindBool, Flag: "tcp-tls",
			Doc: "serve TCP with TLS (plaintext clients get error 426); QUIC is always TLS 1.3 with the same material"},
		{Name: "tls.admin_enabled", Kind: KindBool, Flag: "admin-tls", Default: Bool(true),
			Doc: "serve the admin listener over HTTPS with the broker's certificate when tls.enabled is on (false keeps HTTP)"},

		// admin.
		{Name: "admin.listener.bind", Kind: KindString, Flag: "admin-listen", Default: Str("127.0.0.1:8081"),
			Doc:   "HOST:PORT of the admin HTTP listener (\"\" disables it; port 0 picks a free one; off loopback it needs admin.auth.enabled)",
			Check: optional(hostPort(0))},
		{Name: "admin.auth.enabled", Kind: KindBool, Flag: "admin-auth",
			Doc: "require credentials on /metrics and /admin/api/* (basic auth, or a POST /login session); needs admin.auth.username and admin.auth.password"},
		{Name: "admin.auth.username", Kind: KindString, Flag: "admin-username",
			Doc: "the admin user name (with admin.auth.enabled)"},
		{Name: "admin.auth.password", Kind: KindString, Flag: "admin-password", Secret: true,
			Doc: "the admin password (with admin.auth.enabled; prefer the file or FIBRIL_ADMIN_AUTH_PASSWORD to a flag, which ps shows)"},
		{Name: "admin.allow_unauthenticated", Kind: KindBool, Flag: "admin-allow-unauthenticated",
			Doc: "accept a non-loopback admin.listener.bind with admin.auth.enabled off (otherwise the broker refuses to start)"},

		// log.
		{Name: "log.level", Kind: KindString, Flag: "log-level", Default: Str("info"),
			Enum: []string{"debug", "info", "warn", "error"},
			Doc:  "least severe level logged; changed live with PUT /admin/api/log-level"},
		{Name: "log.format", Kind: KindString, Flag: "log-format", Default: Str("text"),
			Enum: []string{"text", "json"},
			Doc:  "text (logfmt-like key=value) or json (one object per line)"},

		// debug.
		{Name: "debug.pprof_addr", Kind: KindString, Flag: "pprof-addr",
			Doc:   "serve Go's pprof profiles on this loopback HOST:PORT (off when empty)",
			Check: optional(hostPort(0))},

		// delivery.
		{Name: "delivery.inflight_ttl_ms", Kind: KindInt, Flag: "lease-ms", Min: 1, Max: 7 * 24 * 3600 * 1000, Unit: "ms",
			Doc: "how long a delivery stays leased without a settle before it returns to ready",
			Get: func(c broker.Config) Value { return Int(c.Partition.LeaseMs) },
			Set: func(c *broker.Config, v Value) { c.Partition.LeaseMs = v.Int }},
		{Name: "delivery.default_max_retries", Kind: KindInt, Flag: "max-retries", Min: 0, Max: 1<<32 - 1,
			Doc: "dlq_max_retries of a queue that declares none",
			Get: func(c broker.Config) Value { return Int(int64(c.Partition.MaxRetriesDefault)) },
			Set: func(c *broker.Config, v Value) { c.Partition.MaxRetriesDefault = uint32(v.Int) }},
		{Name: "delivery.expiry_batch_max", Kind: KindInt, Min: 1, Max: 1 << 20,
			Doc: "lease, delay and TTL expiries one partition handles per step",
			Get: func(c broker.Config) Value { return Int(int64(c.Partition.ExpiryBatchMax)) },
			Set: func(c *broker.Config, v Value) { c.Partition.ExpiryBatchMax = int(v.Int) }},

		// connection.
		{Name: "connection.reconnect_grace_ms", Kind: KindInt, Flag: "reconnect-grace-ms", Min: 0, Max: 3600 * 1000, Unit: "ms",
			Doc: "how long a dropped client's session waits for it to resume (0 disables)",
			Get: func(c broker.Config) Value { return Int(c.ReconnectGraceMs) },
			Set: func(c *broker.Config, v Value) { c.ReconnectGraceMs = v.Int }},
		{Name: "connection.resume_session_restart_ttl_ms", Kind: KindInt, Min: 0, Max: 24 * 3600 * 1000, Unit: "ms",
			Doc: "a session persisted this recently resumes after a broker restart (0 disables)",
			Get: func(c broker.Config) Value { return Int(c.ResumeRestartTTLMs) },
			Set: func(c *broker.Config, v Value) { c.ResumeRestartTTLMs = v.Int }},
		{Name: "connection.heartbeat_interval_ms", Kind: KindInt, Min: 1, Max: msMax, Unit: "ms",
			Doc: "PING interval; a connection silent for 3 intervals is cut",
			Get: func(c broker.Config) Value { return Int(c.HeartbeatInterval.Milliseconds()) },
			Set: func(c *broker.Config, v Value) { c.HeartbeatInterval = time.Duration(v.Int) * time.Millisecond }},
		{Name: "connection.handshake_timeout_ms", Kind: KindInt, Flag: "handshake-timeout", FlagDuration: true,
			Min: 1, Max: msMax, Unit: "ms",
			Doc: "close a connection whose HELLO has not arrived whole by then",
			Get: func(c broker.Config) Value { return Int(c.HandshakeTimeout.Milliseconds()) },
			Set: func(c *broker.Config, v Value) { c.HandshakeTimeout = time.Duration(v.Int) * time.Millisecond }},
		{Name: "connection.auth_timeout_ms", Kind: KindInt, Flag: "auth-timeout", FlagDuration: true,
			Min: 1, Max: msMax, Unit: "ms",
			Doc: "close a session not authenticated this long after HELLO_OK",
			Get: func(c broker.Config) Value { return Int(c.AuthTimeout.Milliseconds()) },
			Set: func(c *broker.Config, v Value) { c.AuthTimeout = time.Duration(v.Int) * time.Millisecond }},
		{Name: "connection.max_connections", Kind: KindInt, Flag: "max-connections", Min: 1, Max: countMax,
			Doc: "connections open at once; one more is answered with error 500 and closed",
			Get: func(c broker.Config) Value { return Int(int64(c.ConnectionsMax)) },
			Set: func(c *broker.Config, v Value) { c.ConnectionsMax = int(v.Int) }},
		{Name: "connection.frame_payload_max_bytes", Kind: KindInt, Min: 1024, Max: 1<<32 - 1, Unit: "bytes",
			Doc: "largest frame payload accepted (PROTOCOL 1.3)",
			Get: func(c broker.Config) Value { return Int(int64(c.FramePayloadBytesMax)) },
			Set: func(c *broker.Config, v Value) { c.FramePayloadBytesMax = uint32(v.Int) }},
		{Name: "connection.outbox_max_bytes", Kind: KindInt, Min: 1024, Max: 1 << 40, Unit: "bytes",
			Doc: "bytes one session may have queued for its socket; a slower consumer is disconnected",
			Get: func(c broker.Config) Value { return Int(int64(c.OutboxBytesMax)) },
			Set: func(c *broker.Config, v Value) { c.OutboxBytesMax = int(v.Int) }},

		// auth.
		{Name: "auth.allow_default_loopback", Kind: KindBool,
			Doc: "accept the built-in fibril/fibril login from loopback while no user named fibril exists",
			Get: func(c broker.Config) Value { return Bool(c.AllowDefaultLoopback) },
			Set: func(c *broker.Config, v Value) { c.AllowDefaultLoopback = v.Bool }},
		{Name: "auth.seed_users", Kind: KindUsers, Flag: "user", Secret: true,
			// SPEC 10: the pair seeds one user; with FIBRIL_AUTH_SEED_USERS
			// too, both lists are kept (load.go).
			Doc: "users created while the user store is empty: NAME:PASSWORD (the flag repeats; env and TOML: a list)",
			Get: func(c broker.Config) Value { return Users(c.Users...) },
			Set: func(c *broker.Config, v Value) { c.Users = append([]broker.UserSeed(nil), v.Users...) }},

		// idle_queue_cleanup (SPEC 9, docs/idle.md).
		{Name: "idle_queue_cleanup.enabled", Kind: KindBool, Flag: "idle-cleanup",
			Doc: "unload queue partitions nobody uses (they load again on use, messages intact)",
			Get: func(c broker.Config) Value { return Bool(c.IdleCleanup.Enabled) },
			Set: func(c *broker.Config, v Value) { c.IdleCleanup.Enabled = v.Bool }},
		{Name: "idle_queue_cleanup.evict_after_ms", Kind: KindInt, Min: 1, Max: 30 * 24 * 3600 * 1000, Unit: "ms",
			Flag: "idle-evict-after-ms",
			// SPEC 9: this variable also turns cleanup on.
			EnvAliases: []string{"FIBRIL_QUEUE_IDLE_EVICT_AFTER_MS"},
			Implies:    map[string]string{"idle_queue_cleanup.enabled": "true"},
			Doc:        "how long a queue partition stays unused before it is unloaded (setting it turns cleanup on)",
			Get:        func(c broker.Config) Value { return Int(c.IdleCleanup.EvictAfterMs) },
			Set:        func(c *broker.Config, v Value) { c.IdleCleanup.EvictAfterMs = v.Int }},
		{Name: "idle_queue_cleanup.sweep_interval_ms", Kind: KindInt, Min: 1, Max: 24 * 3600 * 1000, Unit: "ms",
			Flag: "idle-sweep-interval-ms",
			Doc:  "how often idle partitions are looked for",
			Get:  func(c broker.Config) Value { return Int(c.IdleCleanup.SweepIntervalMs) },
			Set:  func(c *broker.Config, v Value) { c.IdleCleanup.SweepIntervalMs = v.Int }},
		{Name: "idle_queue_cleanup.publisher_idle_timeout_ms", Kind: KindInt, Min: 0, Max: msMax, Unit: "ms",
			Flag: "idle-publisher-timeout-ms",
			Doc:  "a session holding a partition open without using it this long lets it go, so it can be unloaded (0: unset, held until the session ends)",
			Get:  func(c broker.Config) Value { return Int(c.IdleCleanup.PublisherIdleTimeoutMs) },
			Set:  func(c *broker.Config, v Value) { c.IdleCleanup.PublisherIdleTimeoutMs = v.Int }},

		// partitioning, runtime_locks (runtime settings: docs/runtime-settings.md).
		{Name: "partitioning.default_partition_count", Kind: KindInt, Min: 1, Max: 1024,
			Doc: "partitions of a queue created without a count (a runtime setting: seeds the first boot only)",
			Get: func(c broker.Config) Value { return Int(int64(c.DefaultPartitionCount)) },
			Set: func(c *broker.Config, v Value) { c.DefaultPartitionCount = uint32(v.Int) }},
		{Name: "runtime_locks.idle_queue_cleanup", Kind: KindBool,
			Doc: "refuse changes to idle_queue_cleanup.* through the admin API (read at every start)",
			Get: func(c broker.Config) Value { return Bool(c.RuntimeLockIdleQueueCleanup) },
			Set: func(c *broker.Config, v Value) { c.RuntimeLockIdleQueueCleanup = v.Bool }},

		// recovery.
		{Name: "recovery.on_mismatch", Kind: KindString, Flag: "recovery-on-mismatch",
			Enum: []string{"quarantine", "refuse", "ignore"},
			Doc:  "a partition log that fails a recovery check: quarantine (park it, serve the rest), refuse (park it, /readyz 503) or ignore (cut at the last valid record and serve)",
			Get:  func(c broker.Config) Value { return Str(c.RecoveryOnMismatch.String()) },
			Set: func(c *broker.Config, v Value) {
				// Enum checked the value before Set runs.
				c.RecoveryOnMismatch, _ = node.ParseMismatchPolicy(v.Str)
			}},

		// storage.
		{Name: "storage.resident_payload_mb", Kind: KindInt, Flag: "resident-payload-mb", Min: 0, Max: 1 << 23, Unit: "MiB",
			Doc: "MiB of message payloads kept in memory over all queues; past it, payloads are read back from disk when delivered",
			Get: func(c broker.Config) Value { return Int(c.ResidentPayloadBytesMax >> 20) },
			Set: func(c *broker.Config, v Value) { c.ResidentPayloadBytesMax = v.Int << 20 }},
		{Name: "storage.snapshot_entries_min", Kind: KindInt, Flag: "snapshot-entries-min", Min: 1, Max: countMax,
			Doc: "fewest log entries between two snapshots of a queue partition",
			Get: func(c broker.Config) Value { return Int(int64(c.SnapshotEntriesMin)) },
			Set: func(c *broker.Config, v Value) { c.SnapshotEntriesMin = int(v.Int) }},

		// limits.
		{Name: "limits.queues_max", Kind: KindInt, Min: 1, Max: countMax,
			Doc: "queues the broker will create; one more declare or implicit create is refused",
			Get: func(c broker.Config) Value { return Int(int64(c.QueuesMax)) },
			Set: func(c *broker.Config, v Value) { c.QueuesMax = int(v.Int) }},
		{Name: "limits.partitions_max", Kind: KindInt, Min: 0, Max: countMax,
			Doc: "partitions of all queues and streams together (each holds two open files); one more declare or implicit create is refused; 0: from the open-files limit, (limit - max(1024, limit/10)) / 2",
			Get: func(c broker.Config) Value { return Int(int64(c.PartitionsMax)) },
			Set: func(c *broker.Config, v Value) { c.PartitionsMax = int(v.Int) }},
		{Name: "limits.queue_depth_max", Kind: KindInt, Min: 1, Max: countMax,
			Doc: "live messages one queue partition holds; one more publish is refused as queue full",
			Get: func(c broker.Config) Value { return Int(int64(c.Partition.QueueDepthMax)) },
			Set: func(c *broker.Config, v Value) { c.Partition.QueueDepthMax = int(v.Int) }},
	}
}

// hostPort checks a HOST:PORT listener address whose port is at least
// minPort (0 lets the system pick a free port).
func hostPort(minPort int) func(Value) error {
	return func(v Value) error {
		_, portText, err := net.SplitHostPort(v.Str)
		if err != nil {
			return fmt.Errorf("want HOST:PORT, e.g. 127.0.0.1:9876 or 0.0.0.0:9876 ([::1]:9876 for IPv6)")
		}
		port, err := strconv.Atoi(portText)
		if err != nil || port < minPort || port > 65535 {
			return fmt.Errorf("the port must be a number from %d to 65535", minPort)
		}
		return nil
	}
}

// optional lets "" through (the feature is off) and checks anything else.
func optional(check func(Value) error) func(Value) error {
	return func(v Value) error {
		if v.Str == "" {
			return nil
		}
		return check(v)
	}
}

// advertiseHost checks a host name or address without a port.
func advertiseHost(v Value) error {
	if strings.ContainsAny(v.Str, " \t/") {
		return fmt.Errorf("want a host name or IP address without spaces or slashes, e.g. broker.example.com")
	}
	if _, _, err := net.SplitHostPort(v.Str); err == nil {
		return fmt.Errorf("want the host only: the port is the listen port (broker.listener.bind)")
	}
	return nil
}
