package wire

// Bodies of DECLARE_QUEUE, DECLARE_QUEUE_OK, DECLARE_PLEXUS and DECLARE_PLEXUS_OK
// (PROTOCOL.md §5.12 to §5.15).
//
// Invariants:
//   - DECLARE_QUEUE's default_message_ttl_ms is a trailing optional (§2): a payload
//     that ends right before it decodes as absent; the encoder always writes it.
//   - DLQPolicyKind and Durability are u8 wire enums, append-only; unknown values are
//     decode errors (the DLQ kind also decides which fields follow).
//   - Status strings in the *_OK replies are free text; clients do not interpret them.

// DLQPolicyKind is the dlq_policy kind byte (§5.12). Append-only u8 wire enum.
type DLQPolicyKind uint8

const (
	DLQDiscard DLQPolicyKind = 0 // drop dead letters (the default)
	DLQGlobal  DLQPolicyKind = 1 // the operator-configured global DLQ target
	DLQCustom  DLQPolicyKind = 2 // Topic and Group below
)

// DLQPolicy is the wire dlq_policy: what happens to exhausted or failed messages.
type DLQPolicy struct {
	Kind  DLQPolicyKind
	Topic string           // DLQ topic; only for DLQCustom
	Group Optional[string] // DLQ group; only for DLQCustom
}

func appendDLQPolicy(dst []byte, p DLQPolicy) []byte {
	dst = appendU8(dst, uint8(p.Kind))
	if p.Kind == DLQCustom {
		dst = appendStr(dst, p.Topic)
		dst = appendOpt(dst, p.Group, appendStr)
	}
	return dst
}

func (d *decoder) dlqPolicy(string) DLQPolicy {
	p := DLQPolicy{Kind: DLQPolicyKind(d.enumU8("dlq_policy", uint8(DLQCustom)))}
	if p.Kind == DLQCustom {
		p.Topic = d.str("dlq_policy.topic")
		p.Group = decodeOpt(d, "dlq_policy.group", (*decoder).str)
	}
	return p
}

// DeclareQueue is DECLARE_QUEUE (opcode 60, C→B, FDQ1). Absent fields keep the
// existing or default setting.
type DeclareQueue struct {
	Topic               string
	Group               Optional[string]
	DLQPolicy           Optional[DLQPolicy]
	DLQRetriesMax       Optional[uint32] // wire: dlq_max_retries (Fibril default 5)
	PartitionCount      Optional[uint32] // default 1; raised to at least 1
	DefaultMessageTTLMs Optional[uint64] // trailing optional
}

func (m DeclareQueue) AppendTo(dst []byte) []byte {
	dst = append(dst, magicDeclareQueue...)
	dst = appendStr(dst, m.Topic)
	dst = appendOpt(dst, m.Group, appendStr)
	dst = appendOpt(dst, m.DLQPolicy, appendDLQPolicy)
	dst = appendOpt(dst, m.DLQRetriesMax, appendU32)
	dst = appendOpt(dst, m.PartitionCount, appendU32)
	return appendOpt(dst, m.DefaultMessageTTLMs, appendU64)
}

// DecodeDeclareQueue strictly decodes a DECLARE_QUEUE payload;
// default_message_ttl_ms may be wholly absent.
func DecodeDeclareQueue(b []byte) (DeclareQueue, error) {
	d := decoder{b: b, magic: magicDeclareQueue}
	d.checkMagic()
	var m DeclareQueue
	m.Topic = d.str("topic")
	m.Group = decodeOpt(&d, "group", (*decoder).str)
	m.DLQPolicy = decodeOpt(&d, "dlq_policy", (*decoder).dlqPolicy)
	m.DLQRetriesMax = decodeOpt(&d, "dlq_max_retries", (*decoder).u32)
	m.PartitionCount = decodeOpt(&d, "partition_count", (*decoder).u32)
	if !d.atEnd() {
		m.DefaultMessageTTLMs = decodeOpt(&d, "default_message_ttl_ms", (*decoder).u64)
	}
	return finish(&d, m)
}

// DeclareQueueOk is DECLARE_QUEUE_OK (opcode 61, B→C, FDK1).
type DeclareQueueOk struct {
	Status         string // free text: Fibril sends "stored"
	PartitionCount uint32 // effective count
}

func (m DeclareQueueOk) AppendTo(dst []byte) []byte {
	dst = append(dst, magicDeclareQueueOk...)
	dst = appendStr(dst, m.Status)
	return appendU32(dst, m.PartitionCount)
}

// DecodeDeclareQueueOk strictly decodes a DECLARE_QUEUE_OK payload.
func DecodeDeclareQueueOk(b []byte) (DeclareQueueOk, error) {
	d := decoder{b: b, magic: magicDeclareQueueOk}
	d.checkMagic()
	var m DeclareQueueOk
	m.Status = d.str("status")
	m.PartitionCount = d.u32("partition_count")
	return finish(&d, m)
}

// Durability is a Plexus stream's tier (§5.14, §7.5). Append-only u8 wire enum.
type Durability uint8

const (
	DurabilityEphemeral   Durability = 0 // delivered when staged, never fsynced
	DurabilitySpeculative Durability = 1 // may run ahead of durability
	DurabilityDurable     Durability = 2 // delivered after persistence (client default)
)

// DeclarePlexus is DECLARE_PLEXUS (opcode 62, C→B, FDP1): declare a fan-out stream.
// Absent retention bounds are unbounded.
type DeclarePlexus struct {
	Topic               string
	PartitionCount      Optional[uint32] // default 1, minimum 1
	Durability          Durability
	RetentionAgeMsMax   Optional[uint64] // wire: max_age_ms
	RetentionBytesMax   Optional[uint64] // wire: max_bytes
	RetentionRecordsMax Optional[uint64] // wire: max_records
	ReplicationFactor   Optional[uint32] // durable-tier follower count; absent = cluster default
}

func (m DeclarePlexus) AppendTo(dst []byte) []byte {
	dst = append(dst, magicDeclarePlexus...)
	dst = appendStr(dst, m.Topic)
	dst = appendOpt(dst, m.PartitionCount, appendU32)
	dst = appendU8(dst, uint8(m.Durability))
	dst = appendOpt(dst, m.RetentionAgeMsMax, appendU64)
	dst = appendOpt(dst, m.RetentionBytesMax, appendU64)
	dst = appendOpt(dst, m.RetentionRecordsMax, appendU64)
	return appendOpt(dst, m.ReplicationFactor, appendU32)
}

// DecodeDeclarePlexus strictly decodes a DECLARE_PLEXUS payload.
func DecodeDeclarePlexus(b []byte) (DeclarePlexus, error) {
	d := decoder{b: b, magic: magicDeclarePlexus}
	d.checkMagic()
	var m DeclarePlexus
	m.Topic = d.str("topic")
	m.PartitionCount = decodeOpt(&d, "partition_count", (*decoder).u32)
	m.Durability = Durability(d.enumU8("durability", uint8(DurabilityDurable)))
	m.RetentionAgeMsMax = decodeOpt(&d, "max_age_ms", (*decoder).u64)
	m.RetentionBytesMax = decodeOpt(&d, "max_bytes", (*decoder).u64)
	m.RetentionRecordsMax = decodeOpt(&d, "max_records", (*decoder).u64)
	m.ReplicationFactor = decodeOpt(&d, "replication_factor", (*decoder).u32)
	return finish(&d, m)
}

// DeclarePlexusOk is DECLARE_PLEXUS_OK (opcode 63, B→C, FPK1).
type DeclarePlexusOk struct {
	Status         string // free text: Fibril sends "stored"
	PartitionCount uint32 // effective count
}

func (m DeclarePlexusOk) AppendTo(dst []byte) []byte {
	dst = append(dst, magicDeclarePlexusOk...)
	dst = appendStr(dst, m.Status)
	return appendU32(dst, m.PartitionCount)
}

// DecodeDeclarePlexusOk strictly decodes a DECLARE_PLEXUS_OK payload.
func DecodeDeclarePlexusOk(b []byte) (DeclarePlexusOk, error) {
	d := decoder{b: b, magic: magicDeclarePlexusOk}
	d.checkMagic()
	var m DeclarePlexusOk
	m.Status = d.str("status")
	m.PartitionCount = d.u32("partition_count")
	return finish(&d, m)
}
