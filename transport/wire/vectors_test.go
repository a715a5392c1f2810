package wire

// Golden-vector tests: every body in fibril-wire/wire_vectors.json must decode to the
// values PROTOCOL.md §8 says it was generated from, consume every byte, and re-encode
// byte for byte, both as a body and inside a frame.

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// vectorsPathDefault is a copy, kept in the repository so that a clone tests
// on its own, of the protocol's golden vectors (fibril-wire/wire_vectors.json
// of the shared protocol material, byte for byte; FIBRIL_WIRE_VECTORS points
// at another copy, e.g. a newer one to check against).
var vectorsPathDefault = filepath.Join("testdata", "wire_vectors.json")

// vectorsEnv overrides the vector file location.
const vectorsEnv = "FIBRIL_WIRE_VECTORS"

type vector struct {
	name string
	op   Opcode
	body []byte
}

// vectorOpcodes maps each vector name to its opcode, from the table in §8. A vector
// missing here fails the tests: a new vector must be wired to a decoder.
var vectorOpcodes = map[string]Opcode{
	"hello":                          OpHello,
	"hello_no_resume":                OpHello,
	"hello_ok":                       OpHelloOk,
	"hello_ok_resumed_after_restart": OpHelloOk,
	"auth":                           OpAuth,
	"error":                          OpError,
	"publish":                        OpPublish,
	"publish_no_ttl":                 OpPublish,
	"publish_custom_ct":              OpPublish,
	"publish_delayed":                OpPublishDelayed,
	"publish_ok":                     OpPublishOk,
	"subscribe":                      OpSubscribe,
	"subscribe_min":                  OpSubscribe,
	"subscribe_ok":                   OpSubscribeOk,
	"deliver":                        OpDeliver,
	"ack":                            OpAck,
	"nack":                           OpNack,
	"nack_no_nb":                     OpNack,
	"assignment":                     OpAssignmentChanged,
	"declare":                        OpDeclareQueue,
	"declare_min":                    OpDeclareQueue,
	"declare_ok":                     OpDeclareQueueOk,
	"declare_plexus":                 OpDeclarePlexus,
	"declare_plexus_min":             OpDeclarePlexus,
	"declare_plexus_ok":              OpDeclarePlexusOk,
	"subscribe_stream":               OpSubscribeStream,
	"subscribe_stream_min":           OpSubscribeStream,
	"reconcile_client":               OpReconcileClient,
	"reconcile_result":               OpReconcileResult,
	"topology_req":                   OpTopology,
	"topology_ok":                    OpTopologyOk,
	"redirect":                       OpRedirect,
	"topology_update":                OpTopologyUpdate,
	"topology_update_ack":            OpTopologyUpdateAck,
	"going_away":                     OpGoingAway,
	"subscription_closed":            OpSubscriptionClosed,
}

// loadVectors reads the shared vector file, failing (never skipping) when it is absent.
func loadVectors(tb testing.TB) []vector {
	tb.Helper()
	path := vectorsPathDefault
	if p := os.Getenv(vectorsEnv); p != "" {
		path = p
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("wire vectors are required (set %s to override the path): %v", vectorsEnv, err)
	}
	var byName map[string]string
	if err := json.Unmarshal(raw, &byName); err != nil {
		tb.Fatalf("parse %s: %v", path, err)
	}
	var vectors []vector
	for name, hexBody := range byName {
		body, err := hex.DecodeString(hexBody)
		if err != nil {
			tb.Fatalf("vector %q: bad hex: %v", name, err)
		}
		op, ok := vectorOpcodes[name]
		if !ok {
			tb.Fatalf("vector %q has no opcode mapping in vectorOpcodes: wire it to a decoder", name)
		}
		vectors = append(vectors, vector{name: name, op: op, body: body})
	}
	slices.SortFunc(vectors, func(a, b vector) int { return cmp.Compare(a.name, b.name) })
	if len(vectors) == 0 {
		tb.Fatalf("%s holds no vectors", path)
	}
	return vectors
}

// vectorsFor returns the bodies of the vectors with opcode op.
func vectorsFor(tb testing.TB, op Opcode) [][]byte {
	var bodies [][]byte
	for _, v := range loadVectors(tb) {
		if v.op == op {
			bodies = append(bodies, v.body)
		}
	}
	return bodies
}

func uuidOf(b byte) UUID {
	var u UUID
	for i := range u {
		u[i] = b
	}
	return u
}

// expectedVectors are the values §8 says each vector was generated from.
var expectedVectors = map[string]Body{
	"hello": Hello{ClientName: "py-client", ClientVersion: "0.1.0", ProtocolVersion: 1,
		Resume: Some(ResumeIdentity{OwnerID: uuidOf(1), ClientID: uuidOf(2), ResumeToken: uuidOf(3)})},
	"hello_no_resume": Hello{ClientName: "c", ClientVersion: "v", ProtocolVersion: 1},
	"hello_ok": HelloOk{ProtocolVersion: 1, OwnerID: uuidOf(9), ClientID: uuidOf(8), ResumeToken: uuidOf(7),
		ResumeOutcome: ResumeResumed, ServerName: "srv", Compliance: "v=1;x"},
	"hello_ok_resumed_after_restart": HelloOk{ProtocolVersion: 1, OwnerID: uuidOf(9), ClientID: uuidOf(8),
		ResumeToken: uuidOf(7), ResumeOutcome: ResumeResumedAfterRestart, ServerName: "srv", Compliance: "v=1;x"},
	"auth":  Auth{Username: "u", Password: "p"},
	"error": ErrorBody{Code: CodeConflict, Message: "not owner"},
	"publish": Publish{Topic: "orders", Group: Some("g"), Partition: 3, RequireConfirm: true,
		ContentType: ContentType{Kind: ContentJSON}, Headers: Headers{{"x-a", "1"}}, PublishedMs: 1234567890,
		PartitionKey: Some([]byte{0x09, 0x09}), PartitioningVersion: 5, Payload: []byte{1, 2, 3, 4},
		TTLMs: Some(uint64(60000))},
	"publish_no_ttl": Publish{Topic: "t"},
	"publish_custom_ct": Publish{Topic: "t", ContentType: CustomContentType("application/x-thing"),
		PublishedMs: 1, Payload: []byte{7}},
	"publish_delayed": PublishDelayed{Topic: "t", Partition: 1, RequireConfirm: true, NotBeforeMs: 999,
		ContentType: ContentType{Kind: ContentText}, Headers: Headers{{"k", "v"}}, PublishedMs: 42,
		PartitioningVersion: 2, Payload: []byte{5, 6}},
	"publish_ok": PublishOk{Offset: 777},
	"subscribe": Subscribe{Topic: "t", Partition: 1, Group: Some("g"), Prefetch: 32, AutoAck: false,
		ConsumerGroup: Some("cg"), ConsumerTarget: Some(uint32(2)), MemberID: Some(uuidOf(4))},
	"subscribe_min": Subscribe{Topic: "t", AutoAck: true},
	"subscribe_ok": SubscribeOk{SubID: 5, Topic: "t", Partition: 1, Group: Some("g"), Prefetch: 16,
		ConsumerGroup: Some("cg"), MemberID: Some(uuidOf(4))},
	"deliver": Deliver{SubID: 11, Topic: "t", Group: Some("g"), Partition: 2, Offset: 100, DeliveryTag: 5,
		PublishedMs: 7, PublishReceivedMs: 8, ContentType: ContentType{Kind: ContentMsgpack},
		Headers: Headers{{"h", "1"}}, Payload: []byte{3, 2, 1}},
	"ack":        Ack{Topic: "t", Tags: []uint64{1, 2}},
	"nack":       Nack{Topic: "t", Group: Some("g"), Partition: 1, Tags: []uint64{9}, Requeue: true, NotBeforeMs: Some(uint64(5000))},
	"nack_no_nb": Nack{Topic: "t"},
	"assignment": AssignmentChanged{Topic: "t", ConsumerGroup: "cg", Generation: 6,
		Assigned: []uint32{0, 1, 2}, Added: []uint32{2}},
	"declare": DeclareQueue{Topic: "t", Group: Some("g"), DLQPolicy: Some(DLQPolicy{Kind: DLQCustom, Topic: "dlq"}),
		DLQRetriesMax: Some(uint32(3)), PartitionCount: Some(uint32(4)), DefaultMessageTTLMs: Some(uint64(30000))},
	"declare_min": DeclareQueue{Topic: "t"},
	"declare_ok":  DeclareQueueOk{Status: "created", PartitionCount: 4},
	"declare_plexus": DeclarePlexus{Topic: "t", PartitionCount: Some(uint32(4)), Durability: DurabilitySpeculative,
		RetentionAgeMsMax: Some(uint64(60000)), RetentionRecordsMax: Some(uint64(1000000)),
		ReplicationFactor: Some(uint32(2))},
	"declare_plexus_min": DeclarePlexus{Topic: "t", Durability: DurabilityDurable},
	"declare_plexus_ok":  DeclarePlexusOk{Status: "created", PartitionCount: 4},
	"subscribe_stream": SubscribeStream{Topic: "t", Partition: 1, DurableName: Some("c1"),
		Start:  StreamStart{Kind: StreamStartByTime, Value: 1234},
		Filter: []KeyValue{{"region", "eu-*"}, {"kind", "order"}}, Prefetch: 16, AutoAck: false},
	"subscribe_stream_min": SubscribeStream{Topic: "t", AutoAck: true},
	"reconcile_client": ReconcileClient{Policy: ReconcileRestore,
		Subscriptions: []ReconcileSub{{SubID: 1, Topic: "t", Prefetch: 8}}},
	"reconcile_result": ReconcileResult{Entries: []ReconcileEntry{
		{Client: Some(ReconcileSub{SubID: 1, Topic: "t", Prefetch: 8}), Action: ReconcileCloseClientSide,
			Reason: "server_missing", Code: ReasonServerMissing},
		{Server: Some(ReconcileSub{SubID: 2, Topic: "t", Partition: 1, Group: Some("g"), AutoAck: true, Prefetch: 4}),
			Action: ReconcileCloseServerSide, Reason: "client_missing", Code: ReasonClientMissing},
	}},
	"topology_req": Topology{Topic: Some("t")},
	"topology_ok": TopologyOk{Generation: 12,
		Queues: []TopologyQueue{
			{Topic: "t", Partition: 0, OwnerEndpoints: []Endpoint{{Host: "127.0.0.1", Port: 7000}},
				PartitioningVersion: 1, PartitionCount: 2},
			{Topic: "t", Partition: 1, PartitioningVersion: 1, PartitionCount: 2},
		},
		Streams: []TopologyStream{{Topic: "s", Partition: 2, OwnerEndpoints: []Endpoint{{Host: "10.0.0.9", Port: 7100}},
			PartitioningVersion: 4, PartitionCount: 3}},
	},
	"redirect": Redirect{Topic: "t", Partition: 1, Group: Some("g"), OwnerEndpoints: []Endpoint{{Host: "h", Port: 1}},
		PartitioningVersion: 3},
	"topology_update": TopologyUpdate{Generation: 12,
		Queues: []TopologyQueue{{Topic: "t", Partition: 0, OwnerEndpoints: []Endpoint{{Host: "127.0.0.1", Port: 7000}},
			PartitioningVersion: 1, PartitionCount: 2}},
		Streams: []TopologyStream{{Topic: "s", Partition: 2, OwnerEndpoints: []Endpoint{{Host: "10.0.0.9", Port: 7100}},
			PartitioningVersion: 4, PartitionCount: 3}},
	},
	"topology_update_ack": TopologyUpdateAck{Generation: 12},
	"going_away":          GoingAway{GraceMs: 30000, Message: "broker restarting for upgrade"},
	"subscription_closed": SubscriptionClosed{SubID: 7, Code: ReasonOwnerMoved, Message: "partition moved"},
}

// opcodesOf lists every opcode a vector's body is valid under: the error body
// serves four opcodes.
func opcodesOf(v vector) []Opcode {
	if v.op == OpError {
		return []Opcode{OpError, OpHelloErr, OpAuthErr, OpSubscribeErr}
	}
	return []Opcode{v.op}
}

func TestVectorsRoundTripByteExact(t *testing.T) {
	vectors := loadVectors(t)
	seen := map[string]bool{}
	for _, v := range vectors {
		seen[v.name] = true
		for _, op := range opcodesOf(v) {
			t.Run(v.name+"/"+op.String(), func(t *testing.T) {
				checkVectorFrame(t, v, op)
			})
		}
	}
	for name := range expectedVectors {
		if !seen[name] {
			t.Errorf("vector %q (PROTOCOL.md §8) is missing from the vector file", name)
		}
	}
}

// checkVectorFrame frames the body, reads it back, decodes, compares with the
// expected values and re-encodes both the body and the frame.
func checkVectorFrame(t *testing.T, v vector, op Opcode) {
	const requestID = 0x0102030405060708
	if !bytes.HasPrefix(v.body, []byte(op.Magic())) || len(op.Magic()) != 4 {
		t.Fatalf("body does not start with %s's magic %q", op, op.Magic())
	}
	frame := AppendFrame(nil, op, 0, requestID, v.body)
	h, payload, err := ReadFrame(bufio.NewReader(bytes.NewReader(frame)), PayloadSizeBytesMaxDefault, nil)
	if err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	wantHeader := Header{PayloadSizeBytes: uint32(len(v.body)), Version: 1, Opcode: op, RequestID: requestID}
	if h != wantHeader {
		t.Fatalf("header = %+v, want %+v", h, wantHeader)
	}
	if enc := EncodeHeader(h); !bytes.Equal(enc[:], frame[:HeaderSizeBytes]) {
		t.Fatalf("EncodeHeader = %x, want %x", enc, frame[:HeaderSizeBytes])
	}
	body, err := DecodeBody(op, payload)
	if err != nil {
		t.Fatalf("DecodeBody(%s): %v", op, err)
	}
	want, ok := expectedVectors[v.name]
	if !ok {
		t.Fatalf("no expected values for vector %q", v.name)
	}
	if !reflect.DeepEqual(body, want) {
		t.Fatalf("decoded\n %#v\nwant\n %#v", body, want)
	}
	if got := body.AppendTo(nil); !bytes.Equal(got, v.body) {
		t.Fatalf("re-encoded body\n %x\nwant\n %x", got, v.body)
	}
	if got := want.AppendTo([]byte("prefix")); !bytes.Equal(got[6:], v.body) {
		t.Fatalf("expected values encode to\n %x\nwant\n %x", got[6:], v.body)
	}
	if got := AppendBodyFrame(nil, op, requestID, body); !bytes.Equal(got, frame) {
		t.Fatalf("AppendBodyFrame\n %x\nwant\n %x", got, frame)
	}
}

// TestEveryClientOpcodeHasADecoder covers the opcodes without vectors too (§8: the
// error opcodes share a vector, AUTH_OK/PING/PONG are empty, RECONCILE_SERVER has
// none) by encoding a sample and decoding it through DecodeBody.
func TestEveryClientOpcodeHasADecoder(t *testing.T) {
	samples := map[Opcode]Body{
		OpAuthOk: AuthOk{},
		OpPing:   Ping{},
		OpPong:   Pong{},
		OpReconcileServer: ReconcileServer{Subscriptions: []ReconcileSub{{SubID: 3, Topic: "q", Partition: 2,
			Group: Some("g"), AutoAck: true, Prefetch: 5, ConsumerGroup: Some("cg"),
			ConsumerTarget: Some(uint32(1)), MemberID: Some(uuidOf(6))}}},
	}
	for _, v := range loadVectors(t) {
		for _, op := range opcodesOf(v) {
			samples[op] = expectedVectors[v.name]
		}
	}
	clientOpcodes := ClientOpcodes()
	if len(clientOpcodes) != 34 {
		t.Fatalf("%d client opcodes, PROTOCOL.md §4.1 lists 34", len(clientOpcodes))
	}
	for _, op := range clientOpcodes {
		sample, ok := samples[op]
		if !ok {
			t.Errorf("%s: no vector and no sample", op)
			continue
		}
		encoded := sample.AppendTo(nil)
		decoded, err := DecodeBody(op, encoded)
		if err != nil {
			t.Errorf("%s: DecodeBody: %v", op, err)
			continue
		}
		if !reflect.DeepEqual(decoded, sample) {
			t.Errorf("%s: decoded %#v, want %#v", op, decoded, sample)
		}
	}
}

func TestReplicationAndUnknownOpcodesHaveNoDecoder(t *testing.T) {
	replicationOpcodes := ReplicationOpcodes()
	if len(replicationOpcodes) != 16 {
		t.Fatalf("%d replication opcodes, PROTOCOL.md §4.2 lists 16", len(replicationOpcodes))
	}
	for _, op := range append(replicationOpcodes, 0, 4, 52, 200, 256, 65535) {
		_, err := DecodeBody(op, []byte("FSB1"))
		if !errors.Is(err, ErrUnknownOpcode) {
			t.Errorf("%s: err = %v, want ErrUnknownOpcode", op, err)
		}
		if errors.Is(err, ErrMalformed) {
			t.Errorf("%s: unknown opcode must not count as malformed", op)
		}
	}
}

// TestHeaderExamples checks the two hex examples of §1.2.
func TestHeaderExamples(t *testing.T) {
	ping := AppendBodyFrame(nil, OpPing, 7, Ping{})
	if got, want := hex.EncodeToString(ping), "0000000000010032000000000000000000000007"; got != want {
		t.Errorf("PING frame = %s, want %s", got, want)
	}
	hello := AppendBodyFrame(nil, OpHello, 1, expectedVectors["hello_no_resume"])
	want := "0000001100010001000000000000000000000001" + "46484c3100000001630000000176000100"
	if got := hex.EncodeToString(hello); got != want {
		t.Errorf("HELLO frame = %s, want %s", got, want)
	}
}
