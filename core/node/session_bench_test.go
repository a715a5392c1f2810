package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// benchSession is an attached, authenticated session with sessQOrders open and
// one subscription on it.
func benchSession(b *testing.B, autoAck bool) (*sessHarness, uint64) {
	h := newSessHarness(b, nil)
	h.ready(1)
	sub := h.subscribe(1, sessQOrders, 1000, autoAck)
	h.takeOut()
	h.takeFrames(1)
	return h, sub
}

// BenchmarkSessionPublishConfirm: one PUBLISH (confirm) frame in, its
// Request out, the partition's Response in, PUBLISH_OK out.
func BenchmarkSessionPublishConfirm(b *testing.B) {
	h, _ := benchSession(b, false)
	s := h.s
	payload := wire.Publish{Topic: "orders", RequireConfirm: true, PublishedMs: 1, Payload: make([]byte, 256)}.AppendTo(nil)
	frame := &Frame{NowMs: h.now, Conn: 1, Header: wire.Header{Opcode: wire.OpPublish, RequestID: 9, PayloadSizeBytes: uint32(len(payload))}, Payload: payload}
	resp := &Response{Reply: core.Reply{Kind: core.ReplyPublished, Offset: 1}}
	in := &Deliver{NowMs: h.now, Envelope: Envelope{From: PartitionAddr(sessQOrders), To: SessionAddr(sessTestID), Msg: resp}}
	written := &Written{NowMs: h.now, Conn: 1}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rd := s.Step(frame)
		resp.Token = rd.Out[0].Msg.(*Request).Token
		rd = s.Step(in)
		if len(rd.Sends) != 1 {
			b.Fatal("no PUBLISH_OK")
		}
		written.Bytes = len(rd.Sends[0].Bytes)
		s.Step(written)
	}
}

// BenchmarkSessionDeliverEncode: one Deliveries envelope of one message
// (256-byte payload, one user header) in, one DELIVER frame out.
func BenchmarkSessionDeliverEncode(b *testing.B) {
	h, sub := benchSession(b, true)
	s := h.s
	body := &core.Body{Payload: make([]byte, 256), Headers: []core.Header{{Key: "k", Value: "v"}}, PublishedMs: 1, ReceivedMs: 2}
	items := []core.Delivery{{SubID: sub, Tag: 1, Offset: 1, Retries: 1, Body: body}}
	msg := &Deliveries{Queue: sessQOrders, SubID: sub, Items: items}
	in := &Deliver{NowMs: h.now, Envelope: Envelope{From: PartitionAddr(sessQOrders), To: SessionAddr(sessTestID), Msg: msg}}
	written := &Written{NowMs: h.now, Conn: 1}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rd := s.Step(in)
		if len(rd.Sends) != 1 {
			b.Fatal("no DELIVER")
		}
		written.Bytes = len(rd.Sends[0].Bytes)
		s.Step(written)
	}
}
