package wire

// Fuzz targets, seeded from the golden vectors. Properties, for every input:
//   - decoding never panics, and every failure is ErrMalformed;
//   - when decoding succeeds, the input is a prefix of its re-encoding (the encoding
//     is canonical; only a wholly absent trailing optional is written back), and
//     decode(encode(x)) equals x and re-encodes to the same bytes.

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

func FuzzFrameHeader(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add(AppendFrame(nil, v.op, 0, 1, v.body), uint32(len(v.body)))
	}
	f.Add([]byte{}, uint32(0))
	f.Add(AppendHeader(nil, Header{PayloadSizeBytes: 1<<32 - 1, Version: 2, Opcode: 65535, Flags: 1, RequestID: 1<<64 - 1}), uint32(5))
	f.Fuzz(func(t *testing.T, raw []byte, maxPayloadBytes uint32) {
		h, err := DecodeHeader(raw)
		if err != nil {
			if len(raw) >= HeaderSizeBytes || !errors.Is(err, ErrTruncated) {
				t.Fatalf("DecodeHeader(%d bytes): %v", len(raw), err)
			}
		} else if enc := EncodeHeader(h); !bytes.Equal(enc[:], raw[:HeaderSizeBytes]) {
			t.Fatalf("header round trip: %x -> %+v -> %x", raw[:HeaderSizeBytes], h, enc)
		}

		r := bufio.NewReaderSize(bytes.NewReader(raw), 16)
		read, payload, err := ReadFrame(r, maxPayloadBytes, nil)
		switch {
		case err == nil:
			if read != h || len(payload) != int(h.PayloadSizeBytes) || uint32(len(payload)) > maxPayloadBytes {
				t.Fatalf("ReadFrame %+v with %d payload bytes, DecodeHeader %+v", read, len(payload), h)
			}
			frame := append(AppendHeader(nil, read), payload...)
			if !bytes.HasPrefix(raw, frame) {
				t.Fatalf("frame does not re-encode to the bytes read")
			}
			// Whatever the opcode, decoding the payload must not panic.
			if _, err := DecodeBody(read.Opcode, payload); err != nil &&
				!errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownOpcode) {
				t.Fatalf("DecodeBody: %v", err)
			}
		case errors.Is(err, ErrFrameTooLarge):
			if read.PayloadSizeBytes <= maxPayloadBytes || read != h {
				t.Fatalf("ErrFrameTooLarge for %+v, limit %d", read, maxPayloadBytes)
			}
		case err == io.EOF:
			if len(raw) != 0 {
				t.Fatalf("io.EOF after %d bytes", len(raw))
			}
		case err == io.ErrUnexpectedEOF:
			if len(raw) >= HeaderSizeBytes && len(raw) >= HeaderSizeBytes+int(h.PayloadSizeBytes) {
				t.Fatalf("io.ErrUnexpectedEOF with the whole frame present")
			}
		default:
			t.Fatalf("ReadFrame: %v", err)
		}
	})
}

// fuzzBody runs the body properties for one decoder. ignoresPayload marks PING and
// PONG, whose decoders accept any payload (§5.2), so their encoding is not a superset.
func fuzzBody[T Body](f *testing.F, op Opcode, decode func([]byte) (T, error), extraSeeds ...Body) {
	for _, body := range vectorsFor(f, op) {
		f.Add(body)
	}
	for _, seed := range extraSeeds {
		f.Add(seed.AppendTo(nil))
	}
	ignoresPayload := op == OpPing || op == OpPong
	f.Fuzz(func(t *testing.T, b []byte) {
		first, err := decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error is not ErrMalformed: %v", err)
			}
			return
		}
		encoded := first.AppendTo(nil)
		if !ignoresPayload && !bytes.HasPrefix(encoded, b) {
			t.Fatalf("input\n %x\nre-encodes to\n %x", b, encoded)
		}
		second, err := decode(encoded)
		if err != nil {
			t.Fatalf("re-encoded body does not decode: %v", err)
		}
		if !reflect.DeepEqual(first, second) {
			t.Fatalf("round trip changed the value:\n %#v\n %#v", first, second)
		}
		if again := second.AppendTo(nil); !bytes.Equal(again, encoded) {
			t.Fatalf("encoding is not stable:\n %x\n %x", encoded, again)
		}
	})
}

func FuzzHello(f *testing.F)     { fuzzBody(f, OpHello, DecodeHello) }
func FuzzHelloOk(f *testing.F)   { fuzzBody(f, OpHelloOk, DecodeHelloOk) }
func FuzzAuth(f *testing.F)      { fuzzBody(f, OpAuth, DecodeAuth) }
func FuzzAuthOk(f *testing.F)    { fuzzBody(f, OpAuthOk, DecodeAuthOk, AuthOk{}) }
func FuzzPing(f *testing.F)      { fuzzBody(f, OpPing, DecodePing, Ping{}) }
func FuzzPong(f *testing.F)      { fuzzBody(f, OpPong, DecodePong, Pong{}) }
func FuzzErrorBody(f *testing.F) { fuzzBody(f, OpError, DecodeErrorBody) }
func FuzzGoingAway(f *testing.F) { fuzzBody(f, OpGoingAway, DecodeGoingAway) }
func FuzzPublish(f *testing.F)   { fuzzBody(f, OpPublish, DecodePublish) }
func FuzzPublishDelayed(f *testing.F) {
	fuzzBody(f, OpPublishDelayed, DecodePublishDelayed)
}
func FuzzPublishOk(f *testing.F)   { fuzzBody(f, OpPublishOk, DecodePublishOk) }
func FuzzSubscribe(f *testing.F)   { fuzzBody(f, OpSubscribe, DecodeSubscribe) }
func FuzzSubscribeOk(f *testing.F) { fuzzBody(f, OpSubscribeOk, DecodeSubscribeOk) }
func FuzzSubscribeStream(f *testing.F) {
	fuzzBody(f, OpSubscribeStream, DecodeSubscribeStream,
		SubscribeStream{Topic: "t", Start: StreamStart{Kind: StreamStartOffset, Value: 5}})
}
func FuzzAssignmentChanged(f *testing.F) {
	fuzzBody(f, OpAssignmentChanged, DecodeAssignmentChanged)
}
func FuzzSubscriptionClosed(f *testing.F) {
	fuzzBody(f, OpSubscriptionClosed, DecodeSubscriptionClosed)
}
func FuzzDeliver(f *testing.F) { fuzzBody(f, OpDeliver, DecodeDeliver) }
func FuzzAck(f *testing.F)     { fuzzBody(f, OpAck, DecodeAck) }
func FuzzNack(f *testing.F)    { fuzzBody(f, OpNack, DecodeNack) }
func FuzzDeclareQueue(f *testing.F) {
	fuzzBody(f, OpDeclareQueue, DecodeDeclareQueue,
		DeclareQueue{Topic: "t", DLQPolicy: Some(DLQPolicy{Kind: DLQGlobal})})
}
func FuzzDeclareQueueOk(f *testing.F)  { fuzzBody(f, OpDeclareQueueOk, DecodeDeclareQueueOk) }
func FuzzDeclarePlexus(f *testing.F)   { fuzzBody(f, OpDeclarePlexus, DecodeDeclarePlexus) }
func FuzzDeclarePlexusOk(f *testing.F) { fuzzBody(f, OpDeclarePlexusOk, DecodeDeclarePlexusOk) }
func FuzzReconcileClient(f *testing.F) { fuzzBody(f, OpReconcileClient, DecodeReconcileClient) }
func FuzzReconcileServer(f *testing.F) {
	fuzzBody(f, OpReconcileServer, DecodeReconcileServer, ReconcileServer{Subscriptions: []ReconcileSub{
		{SubID: 1, Topic: "t", Group: Some("g"), MemberID: Some(uuidOf(1)), ConsumerTarget: Some(uint32(3))}}})
}
func FuzzReconcileResult(f *testing.F) { fuzzBody(f, OpReconcileResult, DecodeReconcileResult) }
func FuzzTopology(f *testing.F)        { fuzzBody(f, OpTopology, DecodeTopology) }
func FuzzTopologyOk(f *testing.F)      { fuzzBody(f, OpTopologyOk, DecodeTopologyOk) }
func FuzzTopologyUpdate(f *testing.F)  { fuzzBody(f, OpTopologyUpdate, DecodeTopologyUpdate) }
func FuzzTopologyUpdateAck(f *testing.F) {
	fuzzBody(f, OpTopologyUpdateAck, DecodeTopologyUpdateAck)
}
func FuzzRedirect(f *testing.F) { fuzzBody(f, OpRedirect, DecodeRedirect) }

// FuzzDecodeBody drives the opcode dispatch with every vector under every opcode.
func FuzzDecodeBody(f *testing.F) {
	for _, v := range loadVectors(f) {
		for _, op := range ClientOpcodes() {
			f.Add(uint16(op), v.body)
		}
	}
	f.Fuzz(func(t *testing.T, opcode uint16, b []byte) {
		op := Opcode(opcode)
		body, err := DecodeBody(op, b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownOpcode) {
				t.Fatalf("%s: %v", op, err)
			}
			if body != nil {
				t.Fatalf("%s: a body alongside an error", op)
			}
			return
		}
		encoded := body.AppendTo(nil)
		again, err := DecodeBody(op, encoded)
		if err != nil || !reflect.DeepEqual(body, again) {
			t.Fatalf("%s: round trip: %v", op, err)
		}
	})
}
