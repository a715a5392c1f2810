package wire

import "testing"

func TestOpcodeTable(t *testing.T) {
	if OpTopologyUpdate.String() != "TOPOLOGY_UPDATE" || Opcode(300).String() != "OPCODE(300)" {
		t.Errorf("opcode strings")
	}
	// Magic reuse across the client/replication boundary (§4.2, §9.3).
	if OpReplicationStreamBatch.Magic() != OpSubscribe.Magic() || OpReplicationStreamProgress.Magic() != OpSubscribeStream.Magic() {
		t.Errorf("replication magics")
	}
	for _, op := range []Opcode{OpAuthOk, OpPing, OpPong} {
		if op.Magic() != "" {
			t.Errorf("%s has an empty body, not magic %q", op, op.Magic())
		}
	}
	for _, op := range ClientOpcodes() {
		if op.IsReplication() || !op.IsClient() {
			t.Errorf("%s misclassified", op)
		}
	}
}
