package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// A batch of answers (Responses) is taken as that many Responses, in
// order: the PUBLISH_OKs leave in arrival order with their own offsets.
func TestSessionTakesABatchOfAnswersInOrder(t *testing.T) {
	h := newSessHarness(t, nil)
	h.ready(1)
	var ids []uint64
	var reqs []*Request
	for i := 0; i < 3; i++ {
		ids = append(ids, h.frame(1, wire.OpPublish, wire.Publish{Topic: "orders", RequireConfirm: true, Payload: []byte("x")}))
		if i == 0 {
			h.takeOpen(sessQOrders, 1, nil)
		}
		reqs = append(reqs, h.takeRequest(sessQOrders))
	}
	batch := &Responses{}
	for i, r := range reqs {
		batch.Items = append(batch.Items, Response{Token: r.Token, Reply: core.Reply{Kind: core.ReplyPublished, Offset: uint64(40 + i)}})
	}
	h.fromPartition(sessQOrders, batch)
	frames := h.takeFrames(1)
	if len(frames) != 3 {
		t.Fatalf("%d frames for 3 answers: %+v", len(frames), frames)
	}
	for i, f := range frames {
		if f.hdr.Opcode != wire.OpPublishOk || f.hdr.RequestID != ids[i] || f.body.(wire.PublishOk).Offset != uint64(40+i) {
			t.Fatalf("frame %d: %v request %d %+v, want PUBLISH_OK for %d at %d", i, f.hdr.Opcode, f.hdr.RequestID, f.body, ids[i], 40+i)
		}
	}
	if len(h.s.pending) != 0 {
		t.Fatalf("pending holds %d entries after every answer", len(h.s.pending))
	}
}
