package node

import (
	"encoding/binary"
	"fmt"

	"github.com/fibril-go/fibril/core"
)

// Runtime settings (SPEC 14 "Runtime (persisted, versioned, live)"): the
// values an operator may change while the broker runs, kept in the Node's
// own log. Invariants:
//   - the settings in force are a function of the Node's records: one
//     recordRuntime carries the whole set and its version, the last one
//     wins, and versions only grow by one per record (apply asserts it);
//   - version 1 is written on the first boot from the startup seeds (the
//     driver's broker and node config); a later boot finds a version and
//     ignores the seeds (SPEC 14: "runtime seeds apply on first boot
//     only"), reporting which seeds differ so the driver can say so;
//   - every value is checked by validateRuntime, the same check for the
//     seeds at startup, for an operator's change and for a decoded record:
//     a record that fails it is corrupt, never applied;
//   - only keys Fibril Go has a mechanism for are here. Left out, with no
//     mechanism today: delivery.expiry_poll_min_ms and
//     delivery.delivery_poll_max_ms (the core wakes at the exact deadline,
//     it does not poll), connection.drain_handoff_timeout_ms (the drain
//     grace comes with the Drain input), replication.* (no cluster yet),
//     consumer_groups.default_target_per_consumer (no under-provisioned
//     signal yet), stream.* (stream partitions take their config at load
//     and have no live path) and idle_queue_cleanup.publisher_idle_timeout_ms.

// RuntimeSettings is the whole set of runtime settings in force.
type RuntimeSettings struct {
	// delivery.inflight_ttl_ms: the lease of deliveries leased from now on.
	LeaseMs int64
	// delivery.expiry_batch_max: expiries one partition step handles.
	ExpiryBatchMax int
	// connection.reconnect_grace_ms: grace of disconnects from now on.
	ReconnectGraceMs int64
	// connection.resume_session_restart_ttl_ms: how long a skeleton can be
	// resumed after a restart.
	ResumeRestartTTLMs int64
	// partitioning.default_partition_count: partitions of a queue created
	// without a count (implicitly, or declared with none).
	DefaultPartitionCount uint32
	// idle_queue_cleanup.{enabled, evict_after_ms, sweep_interval_ms}.
	IdleCleanupEnabled  bool
	IdleEvictAfterMs    int64
	IdleSweepIntervalMs int64
}

// Limits of the runtime settings: the valid ranges an operator is told.
const (
	runtimeLeaseMsMax          = 7 * 24 * 3600 * 1000 // a week: past it a lost consumer's work waits too long to matter
	runtimeExpiryBatchMax      = 1 << 20
	runtimeGraceMsMax          = 3600 * 1000      // an hour of dormant sessions holding leases
	runtimeResumeTTLMsMax      = 24 * 3600 * 1000 // a day of skeletons kept after a restart
	runtimeIdleEvictAfterMsMin = 1
	runtimeIdleEvictAfterMsMax = 30 * 24 * 3600 * 1000
	runtimeIdleSweepMsMin      = 1
	runtimeIdleSweepMsMax      = 24 * 3600 * 1000
)

// RuntimeGroupIdleQueueCleanup is the group runtime_locks can lock.
const RuntimeGroupIdleQueueCleanup = "idle_queue_cleanup"

// RuntimeSeeds are the startup values the first boot records as version 1.
func RuntimeSeeds(cfg Config) RuntimeSettings {
	return RuntimeSettings{
		LeaseMs: cfg.Partition.LeaseMs, ExpiryBatchMax: cfg.Partition.ExpiryBatchMax,
		ReconnectGraceMs: cfg.ReconnectGraceMs, ResumeRestartTTLMs: cfg.ResumeRestartTTLMs,
		DefaultPartitionCount: max(cfg.DefaultPartitionCount, 1),
		IdleCleanupEnabled:    cfg.IdleCleanup.Enabled,
		IdleEvictAfterMs:      cfg.IdleCleanup.EvictAfterMs, IdleSweepIntervalMs: cfg.IdleCleanup.SweepIntervalMs,
	}
}

// RuntimeInvalid says which key has a value out of range, and the range.
type RuntimeInvalid struct {
	Key   string
	Range string
}

func (e *RuntimeInvalid) Error() string {
	return fmt.Sprintf("runtime setting %s must be %s", e.Key, e.Range)
}

// validateRuntime checks every value against its range (partitionsMax is
// the node's PartitionsPerQueueMax). It changes nothing.
func validateRuntime(s *RuntimeSettings, partitionsMax uint32) *RuntimeInvalid {
	within := func(v, lo, hi int64) bool { return v >= lo && v <= hi }
	switch {
	case !within(s.LeaseMs, 1, runtimeLeaseMsMax):
		return &RuntimeInvalid{"delivery.inflight_ttl_ms", fmt.Sprintf("between 1 and %d", runtimeLeaseMsMax)}
	case !within(int64(s.ExpiryBatchMax), 1, runtimeExpiryBatchMax):
		return &RuntimeInvalid{"delivery.expiry_batch_max", fmt.Sprintf("between 1 and %d", runtimeExpiryBatchMax)}
	case !within(s.ReconnectGraceMs, 0, runtimeGraceMsMax):
		return &RuntimeInvalid{"connection.reconnect_grace_ms", fmt.Sprintf("between 0 and %d", runtimeGraceMsMax)}
	case !within(s.ResumeRestartTTLMs, 0, runtimeResumeTTLMsMax):
		return &RuntimeInvalid{"connection.resume_session_restart_ttl_ms", fmt.Sprintf("between 0 and %d", runtimeResumeTTLMsMax)}
	case s.DefaultPartitionCount < 1 || s.DefaultPartitionCount > partitionsMax:
		return &RuntimeInvalid{"partitioning.default_partition_count", fmt.Sprintf("between 1 and %d", partitionsMax)}
	case !within(s.IdleEvictAfterMs, runtimeIdleEvictAfterMsMin, runtimeIdleEvictAfterMsMax):
		return &RuntimeInvalid{"idle_queue_cleanup.evict_after_ms", fmt.Sprintf("between %d and %d", runtimeIdleEvictAfterMsMin, runtimeIdleEvictAfterMsMax)}
	case !within(s.IdleSweepIntervalMs, runtimeIdleSweepMsMin, runtimeIdleSweepMsMax):
		return &RuntimeInvalid{"idle_queue_cleanup.sweep_interval_ms", fmt.Sprintf("between %d and %d", runtimeIdleSweepMsMin, runtimeIdleSweepMsMax)}
	}
	return nil
}

// RuntimePatch is an operator's partial change: a nil field keeps its value.
type RuntimePatch struct {
	LeaseMs               *int64
	ExpiryBatchMax        *int
	ReconnectGraceMs      *int64
	ResumeRestartTTLMs    *int64
	DefaultPartitionCount *uint32
	IdleCleanupEnabled    *bool
	IdleEvictAfterMs      *int64
	IdleSweepIntervalMs   *int64
}

// empty says the patch changes no key.
func (p *RuntimePatch) empty() bool { return *p == RuntimePatch{} }

// touchesIdle says the patch changes a key of idle_queue_cleanup.
func (p *RuntimePatch) touchesIdle() bool {
	return p.IdleCleanupEnabled != nil || p.IdleEvictAfterMs != nil || p.IdleSweepIntervalMs != nil
}

// applyTo returns s with the patch's keys set.
func (p *RuntimePatch) applyTo(s RuntimeSettings) RuntimeSettings {
	set64 := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	set64(&s.LeaseMs, p.LeaseMs)
	set64(&s.ReconnectGraceMs, p.ReconnectGraceMs)
	set64(&s.ResumeRestartTTLMs, p.ResumeRestartTTLMs)
	set64(&s.IdleEvictAfterMs, p.IdleEvictAfterMs)
	set64(&s.IdleSweepIntervalMs, p.IdleSweepIntervalMs)
	if p.ExpiryBatchMax != nil {
		s.ExpiryBatchMax = *p.ExpiryBatchMax
	}
	if p.DefaultPartitionCount != nil {
		s.DefaultPartitionCount = *p.DefaultPartitionCount
	}
	if p.IdleCleanupEnabled != nil {
		s.IdleCleanupEnabled = *p.IdleCleanupEnabled
	}
	return s
}

// seedDifferences lists the keys whose seed differs from the persisted
// value (the driver logs them: the persisted values win).
func seedDifferences(persisted, seed RuntimeSettings) []string {
	var keys []string
	add := func(differs bool, key string) {
		if differs {
			keys = append(keys, key)
		}
	}
	add(persisted.LeaseMs != seed.LeaseMs, "delivery.inflight_ttl_ms")
	add(persisted.ExpiryBatchMax != seed.ExpiryBatchMax, "delivery.expiry_batch_max")
	add(persisted.ReconnectGraceMs != seed.ReconnectGraceMs, "connection.reconnect_grace_ms")
	add(persisted.ResumeRestartTTLMs != seed.ResumeRestartTTLMs, "connection.resume_session_restart_ttl_ms")
	add(persisted.DefaultPartitionCount != seed.DefaultPartitionCount, "partitioning.default_partition_count")
	add(persisted.IdleCleanupEnabled != seed.IdleCleanupEnabled, "idle_queue_cleanup.enabled")
	add(persisted.IdleEvictAfterMs != seed.IdleEvictAfterMs, "idle_queue_cleanup.evict_after_ms")
	add(persisted.IdleSweepIntervalMs != seed.IdleSweepIntervalMs, "idle_queue_cleanup.sweep_interval_ms")
	return keys
}

// applyRuntimeToConfig sets the Node's config copy to the settings in
// force: the Node reads them there (partitionConfig, the skeleton TTL,
// declares), and so does any code that reads n.cfg.
func applyRuntimeToConfig(cfg *Config, s *RuntimeSettings) {
	cfg.Partition.LeaseMs, cfg.Partition.ExpiryBatchMax = s.LeaseMs, s.ExpiryBatchMax
	cfg.ReconnectGraceMs, cfg.ResumeRestartTTLMs = s.ReconnectGraceMs, s.ResumeRestartTTLMs
	cfg.DefaultPartitionCount = s.DefaultPartitionCount
	// The eviction mechanism reads n.cfg.IdleCleanup at every sweep
	// (node_idle.go); publisher_idle_timeout_ms is not a runtime setting.
	cfg.IdleCleanup.Enabled, cfg.IdleCleanup.EvictAfterMs = s.IdleCleanupEnabled, s.IdleEvictAfterMs
	cfg.IdleCleanup.SweepIntervalMs = s.IdleSweepIntervalMs
}

// ---- encoding
//
// runtime record  u64 version, u64 lease ms, u32 expiry batch, u64 grace ms,
//                 u64 resume TTL ms, u32 default partitions, u8 idle
//                 enabled, u64 idle evict after ms, u64 idle sweep ms
// global DLQ      u64 version, opt{str topic, str group}
//
// A snapshot (version 4) adds, after the streams: opt{runtime record body},
// then the global DLQ record body.

// appendRuntime writes a runtime record's body.
func appendRuntime(dst []byte, version uint64, s *RuntimeSettings) []byte {
	dst = binary.BigEndian.AppendUint64(dst, version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(s.LeaseMs))
	dst = binary.BigEndian.AppendUint32(dst, uint32(s.ExpiryBatchMax))
	dst = binary.BigEndian.AppendUint64(dst, uint64(s.ReconnectGraceMs))
	dst = binary.BigEndian.AppendUint64(dst, uint64(s.ResumeRestartTTLMs))
	dst = binary.BigEndian.AppendUint32(dst, s.DefaultPartitionCount)
	enabled := byte(0)
	if s.IdleCleanupEnabled {
		enabled = 1
	}
	dst = append(dst, enabled)
	dst = binary.BigEndian.AppendUint64(dst, uint64(s.IdleEvictAfterMs))
	return binary.BigEndian.AppendUint64(dst, uint64(s.IdleSweepIntervalMs))
}

// runtime reads a runtime record's body and checks it as a change would
// have been checked. The partition count bound is the encoding's (u32):
// the node's own PartitionsPerQueueMax may have been lowered since, and a
// queue count already recorded is not corrupt for that.
func (d *decoder) runtime() (uint64, *RuntimeSettings) {
	version := d.u64()
	s := &RuntimeSettings{LeaseMs: int64(d.u64()), ExpiryBatchMax: int(d.u32()),
		ReconnectGraceMs: int64(d.u64()), ResumeRestartTTLMs: int64(d.u64()), DefaultPartitionCount: d.u32()}
	s.IdleCleanupEnabled = d.flag()
	s.IdleEvictAfterMs, s.IdleSweepIntervalMs = int64(d.u64()), int64(d.u64())
	if d.err != nil {
		return version, s
	}
	if version == 0 {
		d.fail("runtime settings version 0")
	}
	if bad := validateRuntime(s, ^uint32(0)); bad != nil {
		d.fail("runtime settings out of range: " + bad.Error())
	}
	return version, s
}

// appendGlobalDLQ writes a global DLQ record's body.
func appendGlobalDLQ(dst []byte, version uint64, target *core.DLQTarget) []byte {
	dst = binary.BigEndian.AppendUint64(dst, version)
	if target == nil {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	dst = appendString(dst, target.Topic)
	return appendString(dst, target.Group)
}

// globalDLQ reads a global DLQ record's body; the target must be a valid,
// normalised queue name, as a change checks it.
func (d *decoder) globalDLQ() (uint64, *core.DLQTarget) {
	version := d.u64()
	if !d.flag() {
		return version, nil
	}
	k := d.queueName()
	return version, &core.DLQTarget{Topic: k.Topic, Group: k.Group}
}
