package wire

// Bodies of PUBLISH, PUBLISH_DELAYED and PUBLISH_OK (PROTOCOL.md §5.3 to §5.5).
//
// Invariants:
//   - Field order is topic, group, partition here (not the queue_key order of
//     SUBSCRIBE): Fibril's layout, easy to get wrong.
//   - PUBLISH's ttl_ms is a trailing optional (§2): a payload that ends right before it
//     decodes as "no TTL"; the encoder always writes it (0x00 when absent).
//   - PUBLISH_DELAYED has no TTL field at all.
//   - The broker ignores partition_key; it is carried and re-encoded verbatim.

// Publish is PUBLISH (opcode 20, C→B, FPB1).
type Publish struct {
	Topic               string
	Group               Optional[string] // queue namespace; absent = default; ignored for streams
	Partition           uint32           // chosen by the client (§2.2)
	RequireConfirm      bool             // reply PUBLISH_OK once durable
	ContentType         ContentType
	Headers             Headers
	PublishedMs         uint64           // producer timestamp, Unix ms, echoed in DELIVER
	PartitionKey        Optional[[]byte] // informational; the broker ignores it
	PartitioningVersion uint64           // topology version routed under; 0 = unknown
	Payload             []byte           // message body
	TTLMs               Optional[uint64] // relative to broker receipt; trailing optional
}

// QueueKey returns the (topic, partition, group) this publish targets.
func (m Publish) QueueKey() QueueKey {
	return QueueKey{Topic: m.Topic, Partition: m.Partition, Group: m.Group}
}

func (m Publish) AppendTo(dst []byte) []byte {
	dst = append(dst, magicPublish...)
	dst = appendStr(dst, m.Topic)
	dst = appendOpt(dst, m.Group, appendStr)
	dst = appendU32(dst, m.Partition)
	dst = appendBool(dst, m.RequireConfirm)
	dst = appendContentType(dst, m.ContentType)
	dst = appendHeaders(dst, m.Headers)
	dst = appendU64(dst, m.PublishedMs)
	dst = appendOpt(dst, m.PartitionKey, appendBytes)
	dst = appendU64(dst, m.PartitioningVersion)
	dst = appendBytes(dst, m.Payload)
	return appendOpt(dst, m.TTLMs, appendU64)
}

// DecodePublish strictly decodes a PUBLISH payload; ttl_ms may be wholly absent.
func DecodePublish(b []byte) (Publish, error) {
	var m Publish
	err := DecodePublishInto(b, &m)
	return m, err
}

// DecodePublishInto is DecodePublish into *m, for a caller that decodes a
// stream of publishes into one struct (the broker's hot path): when the
// topic or group has the same bytes as the one *m held, that string is
// kept rather than allocated again. Everything else is decoded afresh
// (the payload is a copy, as in DecodePublish); on error *m is zeroed.
func DecodePublishInto(b []byte, m *Publish) error {
	prevTopic, prevGroup := m.Topic, m.Group.Value
	*m = Publish{}
	d := decoder{b: b, magic: magicPublish}
	d.checkMagic()
	m.Topic = d.strReuse("topic", prevTopic)
	if d.optTag("group") {
		if v := d.strReuse("group", prevGroup); d.err == nil {
			m.Group = Some(v)
		}
	}
	m.Partition = d.u32("partition")
	m.RequireConfirm = d.boolean("require_confirm")
	m.ContentType = d.contentType("content_type")
	m.Headers = d.headers("headers")
	m.PublishedMs = d.u64("published")
	// The optionals are read inline, not through decodeOpt: its function
	// value would move the decoder to the heap (an allocation per publish).
	if d.optTag("partition_key") {
		if v := d.bytes("partition_key"); d.err == nil {
			m.PartitionKey = Some(v)
		}
	}
	m.PartitioningVersion = d.u64("partitioning_version")
	m.Payload = d.bytes("payload")
	if !d.atEnd() && d.optTag("ttl_ms") {
		if v := d.u64("ttl_ms"); d.err == nil {
			m.TTLMs = Some(v)
		}
	}
	if err := d.finish(); err != nil {
		*m = Publish{}
		return err
	}
	return nil
}

// PublishDelayed is PUBLISH_DELAYED (opcode 21, C→B, FPD1).
type PublishDelayed struct {
	Topic               string
	Group               Optional[string]
	Partition           uint32
	RequireConfirm      bool
	NotBeforeMs         uint64 // absolute Unix ms; not delivered before this
	ContentType         ContentType
	Headers             Headers
	PublishedMs         uint64
	PartitionKey        Optional[[]byte]
	PartitioningVersion uint64
	Payload             []byte
}

// QueueKey returns the (topic, partition, group) this publish targets.
func (m PublishDelayed) QueueKey() QueueKey {
	return QueueKey{Topic: m.Topic, Partition: m.Partition, Group: m.Group}
}

func (m PublishDelayed) AppendTo(dst []byte) []byte {
	dst = append(dst, magicPublishDelayed...)
	dst = appendStr(dst, m.Topic)
	dst = appendOpt(dst, m.Group, appendStr)
	dst = appendU32(dst, m.Partition)
	dst = appendBool(dst, m.RequireConfirm)
	dst = appendU64(dst, m.NotBeforeMs)
	dst = appendContentType(dst, m.ContentType)
	dst = appendHeaders(dst, m.Headers)
	dst = appendU64(dst, m.PublishedMs)
	dst = appendOpt(dst, m.PartitionKey, appendBytes)
	dst = appendU64(dst, m.PartitioningVersion)
	return appendBytes(dst, m.Payload)
}

// DecodePublishDelayed strictly decodes a PUBLISH_DELAYED payload.
func DecodePublishDelayed(b []byte) (PublishDelayed, error) {
	d := decoder{b: b, magic: magicPublishDelayed}
	d.checkMagic()
	var m PublishDelayed
	m.Topic = d.str("topic")
	m.Group = decodeOpt(&d, "group", (*decoder).str)
	m.Partition = d.u32("partition")
	m.RequireConfirm = d.boolean("require_confirm")
	m.NotBeforeMs = d.u64("not_before")
	m.ContentType = d.contentType("content_type")
	m.Headers = d.headers("headers")
	m.PublishedMs = d.u64("published")
	m.PartitionKey = decodeOpt(&d, "partition_key", (*decoder).bytes)
	m.PartitioningVersion = d.u64("partitioning_version")
	m.Payload = d.bytes("payload")
	return finish(&d, m)
}

// PublishOk is PUBLISH_OK (opcode 25, B→C, FPO1), the confirm for 20 and 21.
type PublishOk struct {
	Offset uint64 // the message's offset in the partition log
}

func (m PublishOk) AppendTo(dst []byte) []byte {
	dst = append(dst, magicPublishOk...)
	return appendU64(dst, m.Offset)
}

// DecodePublishOk strictly decodes a PUBLISH_OK payload.
func DecodePublishOk(b []byte) (PublishOk, error) {
	d := decoder{b: b, magic: magicPublishOk}
	d.checkMagic()
	var m PublishOk
	m.Offset = d.u64("offset")
	return finish(&d, m)
}
