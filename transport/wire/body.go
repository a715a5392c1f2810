package wire

// Invariants:
//   - Dispatch is by opcode first, then magic (PROTOCOL.md §2, §9.3): every client
//     opcode has exactly one decoder here, and the four error opcodes share ErrorBody.
//   - Replication opcodes have no decoder here and give ErrUnknownOpcode, as does
//     anything undefined; the broker answers those with ERROR 400 "unknown opcode".

import "fmt"

// Body is a frame payload that encodes itself: AppendTo appends the whole body,
// magic included, to dst and returns the extended slice.
type Body interface {
	AppendTo(dst []byte) []byte
}

// Body magics, one per client layout (§4.1).
const (
	magicHello              = "FHL1"
	magicHelloOk            = "FHO1"
	magicAuth               = "FAU1"
	magicError              = "FER1"
	magicPublish            = "FPB1"
	magicPublishDelayed     = "FPD1"
	magicPublishOk          = "FPO1"
	magicSubscribe          = "FSB1"
	magicSubscribeOk        = "FSO1"
	magicDeliver            = "FDL1"
	magicAck                = "FAK1"
	magicNack               = "FNK1"
	magicAssignmentChanged  = "FAC1"
	magicDeclareQueue       = "FDQ1"
	magicDeclareQueueOk     = "FDK1"
	magicDeclarePlexus      = "FDP1"
	magicDeclarePlexusOk    = "FPK1"
	magicSubscribeStream    = "FSP1"
	magicReconcileClient    = "FRC1"
	magicReconcileServer    = "FRS1"
	magicReconcileResult    = "FRR1"
	magicTopology           = "FTP1"
	magicTopologyOk         = "FTO1"
	magicRedirect           = "FRD1"
	magicTopologyUpdate     = "FTU1"
	magicTopologyUpdateAck  = "FTA1"
	magicGoingAway          = "FGA1"
	magicSubscriptionClosed = "FSC1"
)

// DecodeBody decodes the payload of a client-protocol frame with opcode op. The
// concrete type is the body struct named after the opcode (ErrorBody for ERROR,
// HELLO_ERR, AUTH_ERR and SUBSCRIBE_ERR).
func DecodeBody(op Opcode, payload []byte) (Body, error) {
	switch op {
	case OpHello:
		return asBody(DecodeHello(payload))
	case OpHelloOk:
		return asBody(DecodeHelloOk(payload))
	case OpHelloErr, OpAuthErr, OpSubscribeErr, OpError:
		return asBody(DecodeErrorBody(payload))
	case OpAuth:
		return asBody(DecodeAuth(payload))
	case OpAuthOk:
		return asBody(DecodeAuthOk(payload))
	case OpPublish:
		return asBody(DecodePublish(payload))
	case OpPublishDelayed:
		return asBody(DecodePublishDelayed(payload))
	case OpPublishOk:
		return asBody(DecodePublishOk(payload))
	case OpSubscribe:
		return asBody(DecodeSubscribe(payload))
	case OpSubscribeOk:
		return asBody(DecodeSubscribeOk(payload))
	case OpDeliver:
		return asBody(DecodeDeliver(payload))
	case OpAck:
		return asBody(DecodeAck(payload))
	case OpNack:
		return asBody(DecodeNack(payload))
	case OpAssignmentChanged:
		return asBody(DecodeAssignmentChanged(payload))
	case OpPing:
		return asBody(DecodePing(payload))
	case OpPong:
		return asBody(DecodePong(payload))
	case OpDeclareQueue:
		return asBody(DecodeDeclareQueue(payload))
	case OpDeclareQueueOk:
		return asBody(DecodeDeclareQueueOk(payload))
	case OpDeclarePlexus:
		return asBody(DecodeDeclarePlexus(payload))
	case OpDeclarePlexusOk:
		return asBody(DecodeDeclarePlexusOk(payload))
	case OpSubscribeStream:
		return asBody(DecodeSubscribeStream(payload))
	case OpReconcileClient:
		return asBody(DecodeReconcileClient(payload))
	case OpReconcileServer:
		return asBody(DecodeReconcileServer(payload))
	case OpReconcileResult:
		return asBody(DecodeReconcileResult(payload))
	case OpTopology:
		return asBody(DecodeTopology(payload))
	case OpTopologyOk:
		return asBody(DecodeTopologyOk(payload))
	case OpRedirect:
		return asBody(DecodeRedirect(payload))
	case OpTopologyUpdate:
		return asBody(DecodeTopologyUpdate(payload))
	case OpTopologyUpdateAck:
		return asBody(DecodeTopologyUpdateAck(payload))
	case OpGoingAway:
		return asBody(DecodeGoingAway(payload))
	case OpSubscriptionClosed:
		return asBody(DecodeSubscriptionClosed(payload))
	}
	return nil, fmt.Errorf("%w %d (%s)", ErrUnknownOpcode, uint16(op), op)
}

// asBody drops the concrete type; on error it returns a nil Body, never a zero struct.
func asBody[T Body](body T, err error) (Body, error) {
	if err != nil {
		return nil, err
	}
	return body, nil
}

// finish completes a decode: it rejects trailing bytes and never returns a partly
// filled body alongside an error.
func finish[T any](d *decoder, body T) (T, error) {
	if err := d.finish(); err != nil {
		var zero T
		return zero, err
	}
	return body, nil
}

// QueueKey names one queue partition: (topic, partition, group). Comparable, so the
// broker can use it as a map key.
type QueueKey struct {
	Topic     string
	Partition uint32
	Group     Optional[string]
}
