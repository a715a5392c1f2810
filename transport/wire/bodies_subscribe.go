package wire

// Bodies that open, describe and end subscriptions: SUBSCRIBE, SUBSCRIBE_OK,
// SUBSCRIBE_STREAM, ASSIGNMENT_CHANGED and SUBSCRIPTION_CLOSED (PROTOCOL.md §5.6,
// §5.7, §5.11, §5.16, §5.24).
//
// Invariants:
//   - SUBSCRIBE and SUBSCRIBE_OK use queue_key order: topic, partition, group.
//   - StreamStartKind is a u8 wire enum, append-only; kinds 2..4 carry a u64 value and
//     0..1 carry none, so an unknown kind cannot be skipped and is an error.
//   - Stream filter clauses keep wire order (§5.11 "order is preserved").

// Subscribe is SUBSCRIBE (opcode 30, C→B, FSB1): one partition of a queue.
type Subscribe struct {
	Topic          string
	Partition      uint32
	Group          Optional[string] // queue namespace
	Prefetch       uint32           // max unsettled deliveries; 0 is treated as 1
	AutoAck        bool             // broker settles each delivery as it sends it
	ConsumerGroup  Optional[string] // exclusive cohort id (§7.6); absent = competing consumers
	ConsumerTarget Optional[uint32] // soft max partitions for this member
	MemberID       Optional[UUID]   // cohort member identity; absent on first exclusive subscribe
}

// QueueKey returns the (topic, partition, group) being subscribed.
func (m Subscribe) QueueKey() QueueKey {
	return QueueKey{Topic: m.Topic, Partition: m.Partition, Group: m.Group}
}

func (m Subscribe) AppendTo(dst []byte) []byte {
	dst = append(dst, magicSubscribe...)
	dst = appendStr(dst, m.Topic)
	dst = appendU32(dst, m.Partition)
	dst = appendOpt(dst, m.Group, appendStr)
	dst = appendU32(dst, m.Prefetch)
	dst = appendBool(dst, m.AutoAck)
	dst = appendOpt(dst, m.ConsumerGroup, appendStr)
	dst = appendOpt(dst, m.ConsumerTarget, appendU32)
	return appendOpt(dst, m.MemberID, appendUUID)
}

// DecodeSubscribe strictly decodes a SUBSCRIBE payload.
func DecodeSubscribe(b []byte) (Subscribe, error) {
	d := decoder{b: b, magic: magicSubscribe}
	d.checkMagic()
	var m Subscribe
	m.Topic = d.str("topic")
	m.Partition = d.u32("partition")
	m.Group = decodeOpt(&d, "group", (*decoder).str)
	m.Prefetch = d.u32("prefetch")
	m.AutoAck = d.boolean("auto_ack")
	m.ConsumerGroup = decodeOpt(&d, "consumer_group", (*decoder).str)
	m.ConsumerTarget = decodeOpt(&d, "consumer_target", (*decoder).u32)
	m.MemberID = decodeOpt(&d, "member_id", (*decoder).uuid)
	return finish(&d, m)
}

// SubscribeOk is SUBSCRIBE_OK (opcode 31, B→C, FSO1), the reply to 30 and 64.
type SubscribeOk struct {
	SubID          uint64 // carried by every DELIVER and SUBSCRIPTION_CLOSED of it
	Topic          string
	Partition      uint32
	Group          Optional[string] // absent for streams
	Prefetch       uint32           // echo of the requested value, unclamped
	ConsumerGroup  Optional[string] // absent for streams
	ConsumerTarget Optional[uint32]
	MemberID       Optional[UUID] // resolved member id; present iff exclusive
}

func (m SubscribeOk) AppendTo(dst []byte) []byte {
	dst = append(dst, magicSubscribeOk...)
	dst = appendU64(dst, m.SubID)
	dst = appendStr(dst, m.Topic)
	dst = appendU32(dst, m.Partition)
	dst = appendOpt(dst, m.Group, appendStr)
	dst = appendU32(dst, m.Prefetch)
	dst = appendOpt(dst, m.ConsumerGroup, appendStr)
	dst = appendOpt(dst, m.ConsumerTarget, appendU32)
	return appendOpt(dst, m.MemberID, appendUUID)
}

// DecodeSubscribeOk strictly decodes a SUBSCRIBE_OK payload.
func DecodeSubscribeOk(b []byte) (SubscribeOk, error) {
	d := decoder{b: b, magic: magicSubscribeOk}
	d.checkMagic()
	var m SubscribeOk
	m.SubID = d.u64("sub_id")
	m.Topic = d.str("topic")
	m.Partition = d.u32("partition")
	m.Group = decodeOpt(&d, "group", (*decoder).str)
	m.Prefetch = d.u32("prefetch")
	m.ConsumerGroup = decodeOpt(&d, "consumer_group", (*decoder).str)
	m.ConsumerTarget = decodeOpt(&d, "consumer_target", (*decoder).u32)
	m.MemberID = decodeOpt(&d, "member_id", (*decoder).uuid)
	return finish(&d, m)
}

// StreamStartKind says where an ephemeral stream subscription starts (§5.11).
// Append-only u8 wire enum.
type StreamStartKind uint8

const (
	StreamStartLatest   StreamStartKind = 0 // only new records
	StreamStartEarliest StreamStartKind = 1 // oldest retained record
	StreamStartOffset   StreamStartKind = 2 // Value is an offset, clamped to retention
	StreamStartNBack    StreamStartKind = 3 // Value is a record count back from the tail
	StreamStartByTime   StreamStartKind = 4 // Value is a wall-clock time, Unix ms
)

// StreamStart is the wire stream_start: a kind and, for kinds 2..4, a u64 value.
type StreamStart struct {
	Kind  StreamStartKind
	Value uint64 // offset, count or Unix ms by Kind; zero and not sent for 0 and 1
}

func (s StreamStart) hasValue() bool { return s.Kind >= StreamStartOffset }

func appendStreamStart(dst []byte, s StreamStart) []byte {
	dst = appendU8(dst, uint8(s.Kind))
	if s.hasValue() {
		dst = appendU64(dst, s.Value)
	}
	return dst
}

func (d *decoder) streamStart(field string) StreamStart {
	s := StreamStart{Kind: StreamStartKind(d.enumU8(field, uint8(StreamStartByTime)))}
	if s.hasValue() {
		s.Value = d.u64(field)
	}
	return s
}

// SubscribeStream is SUBSCRIBE_STREAM (opcode 64, C→B, FSP1): one stream partition.
type SubscribeStream struct {
	Topic       string
	Partition   uint32
	DurableName Optional[string] // durable cursor; absent = ephemeral
	Start       StreamStart      // used only when DurableName is absent
	Filter      []KeyValue       // AND of (header key, glob pattern); empty matches all
	Prefetch    uint32           // echoed; not enforced for streams
	AutoAck     bool             // with a durable name, commit after each delivery
}

func (m SubscribeStream) AppendTo(dst []byte) []byte {
	dst = append(dst, magicSubscribeStream...)
	dst = appendStr(dst, m.Topic)
	dst = appendU32(dst, m.Partition)
	dst = appendOpt(dst, m.DurableName, appendStr)
	dst = appendStreamStart(dst, m.Start)
	dst = appendList(dst, m.Filter, appendKeyValue)
	dst = appendU32(dst, m.Prefetch)
	return appendBool(dst, m.AutoAck)
}

// DecodeSubscribeStream strictly decodes a SUBSCRIBE_STREAM payload.
func DecodeSubscribeStream(b []byte) (SubscribeStream, error) {
	d := decoder{b: b, magic: magicSubscribeStream}
	d.checkMagic()
	var m SubscribeStream
	m.Topic = d.str("topic")
	m.Partition = d.u32("partition")
	m.DurableName = decodeOpt(&d, "durable_name", (*decoder).str)
	m.Start = d.streamStart("start")
	m.Filter = decodeList(&d, "filter", keyValueBytesMin, (*decoder).keyValue)
	m.Prefetch = d.u32("prefetch")
	m.AutoAck = d.boolean("auto_ack")
	return finish(&d, m)
}

// AssignmentChanged is ASSIGNMENT_CHANGED (opcode 43, B→C push, FAC1): a cohort
// member's new partition set. Informational; the broker enforces exclusivity anyway.
type AssignmentChanged struct {
	Topic         string
	Group         Optional[string]
	ConsumerGroup string   // cohort id
	Generation    uint64   // grows with every rebalance; discard older notices
	Assigned      []uint32 // the member's full current partition set
	Added         []uint32 // since the member's previous assignment
	Revoked       []uint32 // since the member's previous assignment
}

func (m AssignmentChanged) AppendTo(dst []byte) []byte {
	dst = append(dst, magicAssignmentChanged...)
	dst = appendStr(dst, m.Topic)
	dst = appendOpt(dst, m.Group, appendStr)
	dst = appendStr(dst, m.ConsumerGroup)
	dst = appendU64(dst, m.Generation)
	dst = appendList(dst, m.Assigned, appendU32)
	dst = appendList(dst, m.Added, appendU32)
	return appendList(dst, m.Revoked, appendU32)
}

// DecodeAssignmentChanged strictly decodes an ASSIGNMENT_CHANGED payload.
func DecodeAssignmentChanged(b []byte) (AssignmentChanged, error) {
	d := decoder{b: b, magic: magicAssignmentChanged}
	d.checkMagic()
	var m AssignmentChanged
	m.Topic = d.str("topic")
	m.Group = decodeOpt(&d, "group", (*decoder).str)
	m.ConsumerGroup = d.str("consumer_group")
	m.Generation = d.u64("generation")
	m.Assigned = decodeList(&d, "assigned", 4, (*decoder).u32)
	m.Added = decodeList(&d, "added", 4, (*decoder).u32)
	m.Revoked = decodeList(&d, "revoked", 4, (*decoder).u32)
	return finish(&d, m)
}

// SubscriptionClosed is SUBSCRIPTION_CLOSED (opcode 104, B→C push, FSC1): one
// subscription has ended while the connection stays up.
type SubscriptionClosed struct {
	SubID   uint64
	Code    ReasonCode // unknown values are preserved
	Message string
}

func (m SubscriptionClosed) AppendTo(dst []byte) []byte {
	dst = append(dst, magicSubscriptionClosed...)
	dst = appendU64(dst, m.SubID)
	dst = appendU16(dst, uint16(m.Code))
	return appendStr(dst, m.Message)
}

// DecodeSubscriptionClosed strictly decodes a SUBSCRIPTION_CLOSED payload.
func DecodeSubscriptionClosed(b []byte) (SubscriptionClosed, error) {
	d := decoder{b: b, magic: magicSubscriptionClosed}
	d.checkMagic()
	var m SubscriptionClosed
	m.SubID = d.u64("sub_id")
	m.Code = ReasonCode(d.u16("code"))
	m.Message = d.str("message")
	return finish(&d, m)
}
