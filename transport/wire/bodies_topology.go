package wire

// Bodies of routing: TOPOLOGY, TOPOLOGY_OK, TOPOLOGY_UPDATE, TOPOLOGY_UPDATE_ACK and
// REDIRECT (PROTOCOL.md §5.20, §5.22).
//
// Invariants:
//   - TOPOLOGY_OK and TOPOLOGY_UPDATE share one layout (TopologySnapshot) under two
//     magics; the opcode decides which.
//   - Queue entries and REDIRECT use queue_key order: topic, partition, group. Stream
//     entries are the same without group.
//   - Owner endpoints are in priority order and may be empty (owner unknown).

// Endpoint is the wire endpoint: where a broker can be reached.
type Endpoint struct {
	Host string   // DNS name, IPv4, or bracketed IPv6
	Port uint16   // TCP (and QUIC) port
	Tags []string // free-form; Fibril sends none
}

// endpointBytesMin: empty host, port, empty tag list.
const endpointBytesMin = 4 + 2 + 4

func appendEndpoint(dst []byte, e Endpoint) []byte {
	dst = appendStr(dst, e.Host)
	dst = appendU16(dst, e.Port)
	return appendList(dst, e.Tags, appendStr)
}

func (d *decoder) endpoint(string) Endpoint {
	var e Endpoint
	e.Host = d.str("endpoint.host")
	e.Port = d.u16("endpoint.port")
	e.Tags = decodeList(d, "endpoint.tags", 4, (*decoder).str)
	return e
}

func (d *decoder) endpoints(field string) []Endpoint {
	return decodeList(d, field, endpointBytesMin, (*decoder).endpoint)
}

// Topology is TOPOLOGY (opcode 90, C→B, FTP1): a routing snapshot request. No topic
// asks for everything; a topic filters queues (and by group, when given) and streams.
type Topology struct {
	Topic Optional[string]
	Group Optional[string]
}

func (m Topology) AppendTo(dst []byte) []byte {
	dst = append(dst, magicTopology...)
	dst = appendOpt(dst, m.Topic, appendStr)
	return appendOpt(dst, m.Group, appendStr)
}

// DecodeTopology strictly decodes a TOPOLOGY payload.
func DecodeTopology(b []byte) (Topology, error) {
	d := decoder{b: b, magic: magicTopology}
	d.checkMagic()
	var m Topology
	m.Topic = decodeOpt(&d, "topic", (*decoder).str)
	m.Group = decodeOpt(&d, "group", (*decoder).str)
	return finish(&d, m)
}

// TopologyQueue is one queue partition of a topology snapshot (queue_entry).
type TopologyQueue struct {
	Topic               string
	Partition           uint32
	Group               Optional[string]
	OwnerEndpoints      []Endpoint // priority order; empty when the owner is unknown
	PartitioningVersion uint64
	PartitionCount      uint32 // the queue's total, repeated on every entry
}

// topologyQueueBytesMin: empty topic, partition, absent group, no endpoints, u64, u32.
const topologyQueueBytesMin = 4 + 4 + 1 + 4 + 8 + 4

func appendTopologyQueue(dst []byte, q TopologyQueue) []byte {
	dst = appendStr(dst, q.Topic)
	dst = appendU32(dst, q.Partition)
	dst = appendOpt(dst, q.Group, appendStr)
	dst = appendList(dst, q.OwnerEndpoints, appendEndpoint)
	dst = appendU64(dst, q.PartitioningVersion)
	return appendU32(dst, q.PartitionCount)
}

func (d *decoder) topologyQueue(string) TopologyQueue {
	var q TopologyQueue
	q.Topic = d.str("queue.topic")
	q.Partition = d.u32("queue.partition")
	q.Group = decodeOpt(d, "queue.group", (*decoder).str)
	q.OwnerEndpoints = d.endpoints("queue.owner_endpoints")
	q.PartitioningVersion = d.u64("queue.partitioning_version")
	q.PartitionCount = d.u32("queue.partition_count")
	return q
}

// TopologyStream is one stream partition of a topology snapshot (stream_entry).
type TopologyStream struct {
	Topic               string
	Partition           uint32
	OwnerEndpoints      []Endpoint
	PartitioningVersion uint64
	PartitionCount      uint32
}

const topologyStreamBytesMin = 4 + 4 + 4 + 8 + 4

func appendTopologyStream(dst []byte, s TopologyStream) []byte {
	dst = appendStr(dst, s.Topic)
	dst = appendU32(dst, s.Partition)
	dst = appendList(dst, s.OwnerEndpoints, appendEndpoint)
	dst = appendU64(dst, s.PartitioningVersion)
	return appendU32(dst, s.PartitionCount)
}

func (d *decoder) topologyStream(string) TopologyStream {
	var s TopologyStream
	s.Topic = d.str("stream.topic")
	s.Partition = d.u32("stream.partition")
	s.OwnerEndpoints = d.endpoints("stream.owner_endpoints")
	s.PartitioningVersion = d.u64("stream.partitioning_version")
	s.PartitionCount = d.u32("stream.partition_count")
	return s
}

// TopologySnapshot is the body layout shared by TOPOLOGY_OK and TOPOLOGY_UPDATE.
// Standalone brokers send generation 0 and both lists empty.
type TopologySnapshot struct {
	Generation uint64 // the coordination generation
	Queues     []TopologyQueue
	Streams    []TopologyStream
}

func (s TopologySnapshot) appendTo(dst []byte, magic string) []byte {
	dst = append(dst, magic...)
	dst = appendU64(dst, s.Generation)
	dst = appendList(dst, s.Queues, appendTopologyQueue)
	return appendList(dst, s.Streams, appendTopologyStream)
}

func decodeTopologySnapshot(b []byte, magic string) (TopologySnapshot, error) {
	d := decoder{b: b, magic: magic}
	d.checkMagic()
	var s TopologySnapshot
	s.Generation = d.u64("generation")
	s.Queues = decodeList(&d, "queues", topologyQueueBytesMin, (*decoder).topologyQueue)
	s.Streams = decodeList(&d, "streams", topologyStreamBytesMin, (*decoder).topologyStream)
	return finish(&d, s)
}

// TopologyOk is TOPOLOGY_OK (opcode 91, B→C, FTO1), the reply to TOPOLOGY.
type TopologyOk TopologySnapshot

func (m TopologyOk) AppendTo(dst []byte) []byte {
	return TopologySnapshot(m).appendTo(dst, magicTopologyOk)
}

// DecodeTopologyOk strictly decodes a TOPOLOGY_OK payload.
func DecodeTopologyOk(b []byte) (TopologyOk, error) {
	s, err := decodeTopologySnapshot(b, magicTopologyOk)
	return TopologyOk(s), err
}

// TopologyUpdate is TOPOLOGY_UPDATE (opcode 101, B→C push, FTU1). The client answers
// TOPOLOGY_UPDATE_ACK with the push's request id.
type TopologyUpdate TopologySnapshot

func (m TopologyUpdate) AppendTo(dst []byte) []byte {
	return TopologySnapshot(m).appendTo(dst, magicTopologyUpdate)
}

// DecodeTopologyUpdate strictly decodes a TOPOLOGY_UPDATE payload.
func DecodeTopologyUpdate(b []byte) (TopologyUpdate, error) {
	s, err := decodeTopologySnapshot(b, magicTopologyUpdate)
	return TopologyUpdate(s), err
}

// TopologyUpdateAck is TOPOLOGY_UPDATE_ACK (opcode 102, C→B, FTA1). A malformed one
// is ignored by the broker rather than answered.
type TopologyUpdateAck struct {
	Generation uint64 // the generation the client now reflects
}

func (m TopologyUpdateAck) AppendTo(dst []byte) []byte {
	dst = append(dst, magicTopologyUpdateAck...)
	return appendU64(dst, m.Generation)
}

// DecodeTopologyUpdateAck strictly decodes a TOPOLOGY_UPDATE_ACK payload.
func DecodeTopologyUpdateAck(b []byte) (TopologyUpdateAck, error) {
	d := decoder{b: b, magic: magicTopologyUpdateAck}
	d.checkMagic()
	var m TopologyUpdateAck
	m.Generation = d.u64("generation")
	return finish(&d, m)
}

// Redirect is REDIRECT (opcode 92, B→C, FRD1), sent instead of the normal reply to
// PUBLISH, PUBLISH_DELAYED, SUBSCRIBE or SUBSCRIBE_STREAM. Control flow, not an error.
type Redirect struct {
	Topic               string
	Partition           uint32
	Group               Optional[string] // absent for streams
	OwnerEndpoints      []Endpoint       // Fibril sends one, with no tags
	PartitioningVersion uint64           // the current authoritative version
}

func (m Redirect) AppendTo(dst []byte) []byte {
	dst = append(dst, magicRedirect...)
	dst = appendStr(dst, m.Topic)
	dst = appendU32(dst, m.Partition)
	dst = appendOpt(dst, m.Group, appendStr)
	dst = appendList(dst, m.OwnerEndpoints, appendEndpoint)
	return appendU64(dst, m.PartitioningVersion)
}

// DecodeRedirect strictly decodes a REDIRECT payload.
func DecodeRedirect(b []byte) (Redirect, error) {
	d := decoder{b: b, magic: magicRedirect}
	d.checkMagic()
	var m Redirect
	m.Topic = d.str("topic")
	m.Partition = d.u32("partition")
	m.Group = decodeOpt(&d, "group", (*decoder).str)
	m.OwnerEndpoints = d.endpoints("owner_endpoints")
	m.PartitioningVersion = d.u64("partitioning_version")
	return finish(&d, m)
}
