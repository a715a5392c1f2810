package wire

// Invariants:
//   - Opcode numbers and magics are Fibril's (PROTOCOL.md §4) and never change.
//   - 34 opcodes are client protocol; 16 are inter-broker replication, listed so they
//     can be recognised, with no bodies in this package.
//   - A magic names a layout only within the client protocol; some replication opcodes
//     reuse client magics (§4.2), so always dispatch by opcode, then check the magic.

import "strconv"

// Opcode is the u16 operation field of the frame header.
type Opcode uint16

// Client protocol opcodes (§4.1).
const (
	OpHello              Opcode = 1
	OpHelloOk            Opcode = 2
	OpHelloErr           Opcode = 3
	OpAuth               Opcode = 10
	OpAuthOk             Opcode = 11
	OpAuthErr            Opcode = 12
	OpPublish            Opcode = 20
	OpPublishDelayed     Opcode = 21
	OpPublishOk          Opcode = 25
	OpSubscribe          Opcode = 30
	OpSubscribeOk        Opcode = 31
	OpSubscribeErr       Opcode = 32
	OpDeliver            Opcode = 40
	OpAck                Opcode = 41
	OpNack               Opcode = 42
	OpAssignmentChanged  Opcode = 43
	OpPing               Opcode = 50
	OpPong               Opcode = 51
	OpDeclareQueue       Opcode = 60
	OpDeclareQueueOk     Opcode = 61
	OpDeclarePlexus      Opcode = 62
	OpDeclarePlexusOk    Opcode = 63
	OpSubscribeStream    Opcode = 64
	OpReconcileClient    Opcode = 70
	OpReconcileServer    Opcode = 71
	OpReconcileResult    Opcode = 72
	OpTopology           Opcode = 90
	OpTopologyOk         Opcode = 91
	OpRedirect           Opcode = 92
	OpTopologyUpdate     Opcode = 101
	OpTopologyUpdateAck  Opcode = 102
	OpGoingAway          Opcode = 103
	OpSubscriptionClosed Opcode = 104
	OpError              Opcode = 255
)

// Inter-broker replication opcodes (§4.2). Out of scope for the client protocol: a
// broker that does not implement them answers "unknown opcode".
const (
	OpReplicationRead                Opcode = 80
	OpReplicationReadOk              Opcode = 81
	OpReplicationApply               Opcode = 82
	OpReplicationApplyOk             Opcode = 83
	OpReplicationCheckpointExport    Opcode = 84
	OpReplicationCheckpointExportOk  Opcode = 85
	OpReplicationCheckpointInstall   Opcode = 86
	OpReplicationCheckpointInstallOk Opcode = 87
	OpReplicationStreamStart         Opcode = 93
	OpReplicationStreamBatch         Opcode = 94
	OpReplicationStreamProgress      Opcode = 95
	OpReplicationStreamReset         Opcode = 96
	OpReplicationStreamStop          Opcode = 97
	OpReplicationStreamEnd           Opcode = 98
	OpStreamReplicationRead          Opcode = 99
	OpStreamReplicationReadOk        Opcode = 100
)

type opcodeInfo struct {
	name   string
	magic  string // "" when the body is empty or undefined
	client bool
}

// opcodes is indexed by opcode; every defined opcode is below 256.
var opcodes = [256]opcodeInfo{
	OpHello:              {"HELLO", magicHello, true},
	OpHelloOk:            {"HELLO_OK", magicHelloOk, true},
	OpHelloErr:           {"HELLO_ERR", magicError, true},
	OpAuth:               {"AUTH", magicAuth, true},
	OpAuthOk:             {"AUTH_OK", "", true},
	OpAuthErr:            {"AUTH_ERR", magicError, true},
	OpPublish:            {"PUBLISH", magicPublish, true},
	OpPublishDelayed:     {"PUBLISH_DELAYED", magicPublishDelayed, true},
	OpPublishOk:          {"PUBLISH_OK", magicPublishOk, true},
	OpSubscribe:          {"SUBSCRIBE", magicSubscribe, true},
	OpSubscribeOk:        {"SUBSCRIBE_OK", magicSubscribeOk, true},
	OpSubscribeErr:       {"SUBSCRIBE_ERR", magicError, true},
	OpDeliver:            {"DELIVER", magicDeliver, true},
	OpAck:                {"ACK", magicAck, true},
	OpNack:               {"NACK", magicNack, true},
	OpAssignmentChanged:  {"ASSIGNMENT_CHANGED", magicAssignmentChanged, true},
	OpPing:               {"PING", "", true},
	OpPong:               {"PONG", "", true},
	OpDeclareQueue:       {"DECLARE_QUEUE", magicDeclareQueue, true},
	OpDeclareQueueOk:     {"DECLARE_QUEUE_OK", magicDeclareQueueOk, true},
	OpDeclarePlexus:      {"DECLARE_PLEXUS", magicDeclarePlexus, true},
	OpDeclarePlexusOk:    {"DECLARE_PLEXUS_OK", magicDeclarePlexusOk, true},
	OpSubscribeStream:    {"SUBSCRIBE_STREAM", magicSubscribeStream, true},
	OpReconcileClient:    {"RECONCILE_CLIENT", magicReconcileClient, true},
	OpReconcileServer:    {"RECONCILE_SERVER", magicReconcileServer, true},
	OpReconcileResult:    {"RECONCILE_RESULT", magicReconcileResult, true},
	OpTopology:           {"TOPOLOGY", magicTopology, true},
	OpTopologyOk:         {"TOPOLOGY_OK", magicTopologyOk, true},
	OpRedirect:           {"REDIRECT", magicRedirect, true},
	OpTopologyUpdate:     {"TOPOLOGY_UPDATE", magicTopologyUpdate, true},
	OpTopologyUpdateAck:  {"TOPOLOGY_UPDATE_ACK", magicTopologyUpdateAck, true},
	OpGoingAway:          {"GOING_AWAY", magicGoingAway, true},
	OpSubscriptionClosed: {"SUBSCRIPTION_CLOSED", magicSubscriptionClosed, true},
	OpError:              {"ERROR", magicError, true},

	OpReplicationRead:                {"REPLICATION_READ", "FRQ1", false},
	OpReplicationReadOk:              {"REPLICATION_READ_OK", "FRR2", false},
	OpReplicationApply:               {"REPLICATION_APPLY", "FRA1", false},
	OpReplicationApplyOk:             {"REPLICATION_APPLY_OK", "FAO1", false},
	OpReplicationCheckpointExport:    {"REPLICATION_CHECKPOINT_EXPORT", "FCE1", false},
	OpReplicationCheckpointExportOk:  {"REPLICATION_CHECKPOINT_EXPORT_OK", "FCO1", false},
	OpReplicationCheckpointInstall:   {"REPLICATION_CHECKPOINT_INSTALL", "FCI1", false},
	OpReplicationCheckpointInstallOk: {"REPLICATION_CHECKPOINT_INSTALL_OK", "FCK1", false},
	OpReplicationStreamStart:         {"REPLICATION_STREAM_START", "FSS1", false},
	OpReplicationStreamBatch:         {"REPLICATION_STREAM_BATCH", "FSB1", false},
	OpReplicationStreamProgress:      {"REPLICATION_STREAM_PROGRESS", "FSP1", false},
	OpReplicationStreamReset:         {"REPLICATION_STREAM_RESET", "FSR1", false},
	OpReplicationStreamStop:          {"REPLICATION_STREAM_STOP", "", false},
	OpReplicationStreamEnd:           {"REPLICATION_STREAM_END", "FSE1", false},
	OpStreamReplicationRead:          {"STREAM_REPLICATION_READ", "FSQ1", false},
	OpStreamReplicationReadOk:        {"STREAM_REPLICATION_READ_OK", "FSR1", false},
}

func (op Opcode) info() opcodeInfo {
	if int(op) < len(opcodes) {
		return opcodes[op]
	}
	return opcodeInfo{}
}

// String returns the UPPER_SNAKE name, or "OPCODE(n)" for an undefined opcode.
func (op Opcode) String() string {
	if name := op.info().name; name != "" {
		return name
	}
	return "OPCODE(" + strconv.Itoa(int(op)) + ")"
}

// Magic returns the 4-byte body magic of op, or "" when its body is empty (AUTH_OK,
// PING, PONG, REPLICATION_STREAM_STOP) or op is undefined.
func (op Opcode) Magic() string { return op.info().magic }

// IsClient reports whether op is one of the 34 client-protocol opcodes.
func (op Opcode) IsClient() bool { return op.info().client }

// IsReplication reports whether op is one of the 16 inter-broker opcodes.
func (op Opcode) IsReplication() bool {
	info := op.info()
	return info.name != "" && !info.client
}

// ClientOpcodes returns the 34 client-protocol opcodes in numeric order.
func ClientOpcodes() []Opcode { return opcodesWhere(Opcode.IsClient) }

// ReplicationOpcodes returns the 16 replication opcodes in numeric order.
func ReplicationOpcodes() []Opcode { return opcodesWhere(Opcode.IsReplication) }

func opcodesWhere(keep func(Opcode) bool) []Opcode {
	var ops []Opcode
	for i := range len(opcodes) {
		if op := Opcode(i); keep(op) {
			ops = append(ops, op)
		}
	}
	return ops
}
