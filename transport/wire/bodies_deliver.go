package wire

// Bodies of a delivery and its settlements: DELIVER, ACK and NACK (PROTOCOL.md §5.8
// to §5.10).
//
// Invariants:
//   - Field order is topic, group, partition in all three (not queue_key order).
//   - A delivery tag is one u64; there is no separate epoch field.
//   - NACK's not_before is an ordinary opt<u64>, not a trailing optional: it must be
//     present as a tag. "not_before without requeue" is a broker rule (ERROR 400), not
//     a decode error, so the decoder accepts it.

// Deliver is DELIVER (opcode 40, B→C push, FDL1).
type Deliver struct {
	SubID             uint64
	Topic             string
	Group             Optional[string] // absent for streams
	Partition         uint32
	Offset            uint64 // offset in the partition log
	DeliveryTag       uint64 // settles this delivery; the offset for streams
	PublishedMs       uint64 // producer timestamp from PUBLISH
	PublishReceivedMs uint64 // broker receive time, Unix ms
	ContentType       ContentType
	Headers           Headers // user headers plus system headers
	Payload           []byte
}

func (m Deliver) AppendTo(dst []byte) []byte {
	dst = append(dst, magicDeliver...)
	dst = appendU64(dst, m.SubID)
	dst = appendStr(dst, m.Topic)
	dst = appendOpt(dst, m.Group, appendStr)
	dst = appendU32(dst, m.Partition)
	dst = appendU64(dst, m.Offset)
	dst = appendU64(dst, m.DeliveryTag)
	dst = appendU64(dst, m.PublishedMs)
	dst = appendU64(dst, m.PublishReceivedMs)
	dst = appendContentType(dst, m.ContentType)
	dst = appendHeaders(dst, m.Headers)
	return appendBytes(dst, m.Payload)
}

// DecodeDeliver strictly decodes a DELIVER payload.
func DecodeDeliver(b []byte) (Deliver, error) {
	d := decoder{b: b, magic: magicDeliver}
	d.checkMagic()
	var m Deliver
	m.SubID = d.u64("sub_id")
	m.Topic = d.str("topic")
	m.Group = decodeOpt(&d, "group", (*decoder).str)
	m.Partition = d.u32("partition")
	m.Offset = d.u64("offset")
	m.DeliveryTag = d.u64("delivery_tag")
	m.PublishedMs = d.u64("published")
	m.PublishReceivedMs = d.u64("publish_received")
	m.ContentType = d.contentType("content_type")
	m.Headers = d.headers("headers")
	m.Payload = d.bytes("payload")
	return finish(&d, m)
}

// Ack is ACK (opcode 41, C→B, FAK1): complete a batch of deliveries. No reply.
type Ack struct {
	Topic     string
	Group     Optional[string]
	Partition uint32
	Tags      []uint64 // delivery tags
}

// QueueKey returns the (topic, partition, group) whose deliveries are settled.
func (m Ack) QueueKey() QueueKey {
	return QueueKey{Topic: m.Topic, Partition: m.Partition, Group: m.Group}
}

func (m Ack) AppendTo(dst []byte) []byte {
	dst = append(dst, magicAck...)
	dst = appendStr(dst, m.Topic)
	dst = appendOpt(dst, m.Group, appendStr)
	dst = appendU32(dst, m.Partition)
	return appendList(dst, m.Tags, appendU64)
}

// DecodeAck strictly decodes an ACK payload.
func DecodeAck(b []byte) (Ack, error) {
	var m Ack
	err := DecodeAckInto(b, &m)
	return m, err
}

// DecodeAckInto is DecodeAck into *m, keeping *m's previous topic or group
// string when the bytes repeat (as DecodePublishInto). The tags are a
// fresh slice; on error *m is zeroed.
func DecodeAckInto(b []byte, m *Ack) error {
	prevTopic, prevGroup := m.Topic, m.Group.Value
	*m = Ack{}
	d := decoder{b: b, magic: magicAck}
	d.checkMagic()
	m.Topic = d.strReuse("topic", prevTopic)
	if d.optTag("group") {
		if v := d.strReuse("group", prevGroup); d.err == nil {
			m.Group = Some(v)
		}
	}
	m.Partition = d.u32("partition")
	m.Tags = d.u64List("tags") // not decodeList: the decoder stays on the stack
	if err := d.finish(); err != nil {
		*m = Ack{}
		return err
	}
	return nil
}

// Nack is NACK (opcode 42, C→B, FNK1): retry, retry-after or fail a batch. No reply.
type Nack struct {
	Topic       string
	Group       Optional[string]
	Partition   uint32
	Tags        []uint64
	Requeue     bool             // true = retry, false = terminal failure
	NotBeforeMs Optional[uint64] // absolute Unix ms; only valid with Requeue
}

// QueueKey returns the (topic, partition, group) whose deliveries are settled.
func (m Nack) QueueKey() QueueKey {
	return QueueKey{Topic: m.Topic, Partition: m.Partition, Group: m.Group}
}

func (m Nack) AppendTo(dst []byte) []byte {
	dst = append(dst, magicNack...)
	dst = appendStr(dst, m.Topic)
	dst = appendOpt(dst, m.Group, appendStr)
	dst = appendU32(dst, m.Partition)
	dst = appendList(dst, m.Tags, appendU64)
	dst = appendBool(dst, m.Requeue)
	return appendOpt(dst, m.NotBeforeMs, appendU64)
}

// DecodeNack strictly decodes a NACK payload.
func DecodeNack(b []byte) (Nack, error) {
	d := decoder{b: b, magic: magicNack}
	d.checkMagic()
	var m Nack
	m.Topic = d.str("topic")
	m.Group = decodeOpt(&d, "group", (*decoder).str)
	m.Partition = d.u32("partition")
	m.Tags = decodeList(&d, "tags", 8, (*decoder).u64)
	m.Requeue = d.boolean("requeue")
	m.NotBeforeMs = decodeOpt(&d, "not_before", (*decoder).u64)
	return finish(&d, m)
}
