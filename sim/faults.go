package sim

import (
	"fmt"
	"reflect"
	"strings"
)

// Faults are the knobs of the environment a run goes through. Each is named
// with its unit; zero turns a fault off. Invariants:
//   - faults apply only in the safety phase; the liveness phase runs with
//     every fault off (the environment latencies stay);
//   - swarm mode draws a fresh set per seed (SwarmFaults), so a sweep covers
//     many combinations instead of one tuned mix.
type Faults struct {
	// Network between clients and nodes.
	PacketDelayMinMs     int64   // one-way latency, lower bound
	PacketDelayMaxMs     int64   // one-way latency, upper bound
	PacketDelayTailRatio float64 // share of packets that take an extra tail delay
	PacketDelayTailMs    int64   // the tail delay's upper bound
	PacketLossRatio      float64 // share of transmissions lost (each costs a retransmit timeout)
	PacketDuplicateRatio float64 // share of packets delivered twice (the stream drops the copy)
	RetransmitTimeoutMs  int64   // first retransmit timeout; doubles per attempt
	RetransmitsMax       int     // attempts before a connection gives up and resets
	ConnectionResetRatio float64 // per packet: the connection resets after it
	KeepaliveTimeoutMs   int64   // an idle connection across a partition dies after this

	// Network partitions that cut a share of the clients off their node.
	PartitionMeanIntervalMs int64   // mean time between partitions (0 = none)
	PartitionMeanDurationMs int64   // mean time until it heals
	PartitionClientsRatio   float64 // share of clients on the far side

	// Node process and disk.
	CrashProbabilityPerStep float64 // per machine step, round start and fsync completion
	CrashAfterFsyncRatio    float64 // per fsync: crash once durable, before Persisted is fed
	RestartDelayMinMs       int64
	RestartDelayMaxMs       int64
	FsyncLatencyMinMs       int64
	FsyncLatencyMaxMs       int64
	GroupCommitWindowMs     int64 // appends wait up to this long to share an fsync

	// Broker process, storage and machines (the node-core driver).
	PowerLossRatio     float64 // share of crashes that are power losses (unsynced data dropped, torn tails)
	FsyncErrorRatio    float64 // per sync round: the fsync fails (the process fails and recovers)
	BitRotRatio        float64 // per stored-payload read: a flipped bit the checksum catches
	EnvelopeDelayMaxMs int64   // delay of one machine-to-machine envelope, 0..this
	LoadDelayMaxMs     int64   // time a partition load takes, 0..this
	LoadFailRatio      float64 // per partition load: it fails (the Node retries later)

	// Misbehaving clients, per connection.
	StalledHandshakeRatio float64 // sends part of a HELLO header, then nothing
	NoAuthRatio           float64 // HELLO, then only PINGs, never AUTH
	OversizeFrameRatio    float64 // announces a frame over the size cap
	SplitWriteRatio       float64 // per frame: written in two chunks with a pause between
	SplitWriteDelayMaxMs  int64

	// Clocks.
	ClockOffsetMaxMs        int64 // each clock starts within +-this of true time
	ClockDriftMaxPpm        int64 // each clock runs up to +-this fast or slow
	ClockJumpMs             int64 // a jump moves one node clock by up to +-this
	ClockJumpMeanIntervalMs int64 // mean time between jumps (0 = none)
}

// BaseFaults is a calm LAN: small latencies, fast disks, no faults.
func BaseFaults() Faults {
	return Faults{
		PacketDelayMinMs:    1,
		PacketDelayMaxMs:    3,
		RetransmitTimeoutMs: 20,
		RetransmitsMax:      6,
		KeepaliveTimeoutMs:  1500,
		RestartDelayMinMs:   50,
		RestartDelayMaxMs:   500,
		FsyncLatencyMinMs:   1,
		FsyncLatencyMaxMs:   3,
		GroupCommitWindowMs: 1,
		ClockOffsetMaxMs:    200,
		ClockDriftMaxPpm:    200,
		EnvelopeDelayMaxMs:  1,
		LoadDelayMaxMs:      2,
	}
}

// Calm returns f with every fault off and the environment kept: what the
// liveness phase runs with.
func (f Faults) Calm() Faults {
	calm := BaseFaults()
	calm.PacketDelayMinMs, calm.PacketDelayMaxMs = f.PacketDelayMinMs, f.PacketDelayMaxMs
	calm.FsyncLatencyMinMs, calm.FsyncLatencyMaxMs = f.FsyncLatencyMinMs, f.FsyncLatencyMaxMs
	calm.GroupCommitWindowMs = f.GroupCommitWindowMs
	calm.RestartDelayMinMs, calm.RestartDelayMaxMs = f.RestartDelayMinMs, f.RestartDelayMaxMs
	calm.ClockOffsetMaxMs, calm.ClockDriftMaxPpm = f.ClockOffsetMaxMs, f.ClockDriftMaxPpm
	calm.EnvelopeDelayMaxMs, calm.LoadDelayMaxMs = f.EnvelopeDelayMaxMs, f.LoadDelayMaxMs
	return calm
}

// SwarmFaults draws which faults are on, and how hard, for one seed. Each
// family is on with probability one half.
func SwarmFaults(rng *Rand) Faults {
	f := BaseFaults()
	f.PacketDelayMaxMs = rng.RangeInt64(1, 20)
	f.PacketDelayMinMs = rng.RangeInt64(0, f.PacketDelayMaxMs)
	if rng.Chance(0.5) {
		f.PacketDelayTailRatio = rng.RangeFloat(0.001, 0.05)
		f.PacketDelayTailMs = rng.RangeInt64(50, 2000)
	}
	if rng.Chance(0.5) {
		f.PacketLossRatio = rng.RangeFloat(0.001, 0.2)
	}
	if rng.Chance(0.5) {
		f.PacketDuplicateRatio = rng.RangeFloat(0.001, 0.1)
	}
	if rng.Chance(0.5) {
		f.ConnectionResetRatio = rng.RangeFloat(0.0001, 0.01)
	}
	if rng.Chance(0.5) {
		f.PartitionMeanIntervalMs = rng.RangeInt64(500, 10_000)
		f.PartitionMeanDurationMs = rng.RangeInt64(50, 3000)
		f.PartitionClientsRatio = rng.RangeFloat(0.1, 1)
	}
	if rng.Chance(0.5) {
		f.CrashProbabilityPerStep = rng.RangeFloat(0.00005, 0.003)
	}
	if rng.Chance(0.5) {
		f.CrashAfterFsyncRatio = rng.RangeFloat(0.0005, 0.02)
	}
	f.RestartDelayMaxMs = rng.RangeInt64(10, 2000)
	f.RestartDelayMinMs = rng.RangeInt64(1, f.RestartDelayMaxMs)
	f.FsyncLatencyMaxMs = rng.RangeInt64(1, 30)
	f.FsyncLatencyMinMs = rng.RangeInt64(0, f.FsyncLatencyMaxMs)
	f.GroupCommitWindowMs = rng.RangeInt64(0, 5)
	f.EnvelopeDelayMaxMs = rng.RangeInt64(0, 3)
	f.LoadDelayMaxMs = rng.RangeInt64(0, 20)
	if rng.Chance(0.5) {
		f.PowerLossRatio = rng.RangeFloat(0.1, 1)
	}
	if rng.Chance(0.25) {
		f.FsyncErrorRatio = rng.RangeFloat(0.0005, 0.01)
	}
	if rng.Chance(0.25) {
		f.BitRotRatio = rng.RangeFloat(0.001, 0.02)
	}
	if rng.Chance(0.25) {
		f.LoadFailRatio = rng.RangeFloat(0.05, 0.5)
	}
	if rng.Chance(0.25) {
		f.StalledHandshakeRatio = rng.RangeFloat(0.01, 0.1)
		f.NoAuthRatio = rng.RangeFloat(0.01, 0.1)
		f.OversizeFrameRatio = rng.RangeFloat(0, 0.05)
	}
	if rng.Chance(0.5) {
		f.SplitWriteRatio = rng.RangeFloat(0.01, 0.3)
		f.SplitWriteDelayMaxMs = rng.RangeInt64(1, 200)
	}
	if rng.Chance(0.5) {
		f.ClockOffsetMaxMs = rng.RangeInt64(0, 5000)
		f.ClockDriftMaxPpm = rng.RangeInt64(0, 50_000)
	}
	if rng.Chance(0.5) {
		f.ClockJumpMs = rng.RangeInt64(10, 10_000)
		f.ClockJumpMeanIntervalMs = rng.RangeInt64(500, 10_000)
	}
	return f
}

// String lists every knob that is set, in declaration order, as Name=value.
func (f Faults) String() string {
	var parts []string
	v := reflect.ValueOf(f)
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		field := v.Field(i)
		if field.IsZero() {
			continue
		}
		switch field.Kind() {
		case reflect.Float64:
			parts = append(parts, fmt.Sprintf("%s=%.4g", t.Field(i).Name, field.Float()))
		default:
			parts = append(parts, fmt.Sprintf("%s=%v", t.Field(i).Name, field.Interface()))
		}
	}
	return strings.Join(parts, " ")
}

// validate rejects knob combinations the simulator cannot honour.
func (f *Faults) validate() error {
	switch {
	case f.PacketDelayMinMs < 0 || f.PacketDelayMaxMs < f.PacketDelayMinMs:
		return fmt.Errorf("sim: PacketDelayMinMs..PacketDelayMaxMs is not a range")
	case f.FsyncLatencyMinMs < 0 || f.FsyncLatencyMaxMs < f.FsyncLatencyMinMs:
		return fmt.Errorf("sim: FsyncLatencyMinMs..FsyncLatencyMaxMs is not a range")
	case f.RestartDelayMinMs < 1 || f.RestartDelayMaxMs < f.RestartDelayMinMs:
		return fmt.Errorf("sim: RestartDelayMinMs..RestartDelayMaxMs must be a range from 1")
	case f.RetransmitsMax < 1 || f.RetransmitTimeoutMs < 1:
		return fmt.Errorf("sim: RetransmitsMax and RetransmitTimeoutMs must be at least 1")
	case f.ClockDriftMaxPpm < 0 || f.ClockDriftMaxPpm > 100_000:
		return fmt.Errorf("sim: ClockDriftMaxPpm must be within 0..100000")
	case f.KeepaliveTimeoutMs < 1:
		return fmt.Errorf("sim: KeepaliveTimeoutMs must be at least 1")
	}
	for _, ratio := range []float64{f.PacketLossRatio, f.PacketDuplicateRatio, f.ConnectionResetRatio,
		f.PacketDelayTailRatio, f.PartitionClientsRatio, f.CrashProbabilityPerStep,
		f.CrashAfterFsyncRatio, f.PowerLossRatio, f.FsyncErrorRatio, f.BitRotRatio,
		f.LoadFailRatio, f.StalledHandshakeRatio, f.NoAuthRatio, f.OversizeFrameRatio, f.SplitWriteRatio} {
		if ratio < 0 || ratio > 1 {
			return fmt.Errorf("sim: ratios must be within 0..1")
		}
	}
	if f.PacketLossRatio > 0.5 {
		return fmt.Errorf("sim: PacketLossRatio above 0.5 starves every connection")
	}
	return nil
}
