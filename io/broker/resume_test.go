package broker

import (
	"testing"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// Regression tests from review: replies belong to the socket that asked,
// resumed clients re-authenticate, reconcile repeats do not orphan a binding,
// and a stalled handshake does not hold Close.

func TestRepliesDoNotFollowAResume(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	for i := 0; i < 2000; i++ { // pipelined: many confirms still pending
		p.request(wire.OpPublish, &wire.Publish{Topic: "r", RequireConfirm: true, Payload: []byte("x")})
	}
	id := wire.ResumeIdentity{OwnerID: p.hello.OwnerID, ClientID: p.hello.ClientID, ResumeToken: p.hello.ResumeToken}
	q := dialPeer(t, addr)
	q.handshake(&id)
	if q.hello.ResumeOutcome != wire.ResumeResumed {
		t.Fatalf("outcome %d", q.hello.ResumeOutcome)
	}
	start := time.Now()
	q.auth("fibril", "fibril", wire.OpAuthOk) // a resumed client re-authenticates
	if took := time.Since(start); took > time.Second {
		t.Fatalf("AUTH after resume answered after %v (the gate held it)", took)
	}
	for {
		f, err := q.tryRead(time.Second)
		if err != nil {
			break
		}
		if f.hdr.Opcode == wire.OpPublishOk || f.hdr.Opcode == wire.OpError {
			t.Fatalf("the new socket got %v for request %d of the old one", f.hdr.Opcode, f.hdr.RequestID)
		}
	}
}

func TestReconcileRepeatedQueueIsRefused(t *testing.T) {
	_, addr := testBroker(t, "", nil)
	p := connect(t, addr)
	sub := wire.ReconcileSub{SubID: 1, Topic: "rc", Prefetch: 1}
	id := p.request(wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: []wire.ReconcileSub{sub, sub}})
	res := p.reply(id).body.(wire.ReconcileResult)
	kept := 0
	for _, e := range res.Entries {
		if e.Action == wire.ReconcileKeep {
			kept++
		}
	}
	if kept != 1 || len(res.Entries) != 2 {
		t.Fatalf("want one kept and one refused entry, got %+v", res.Entries)
	}
}

func TestStalledHandshakeDoesNotHoldClose(t *testing.T) {
	b, addr := testBroker(t, "", nil)
	p := dialPeer(t, addr)
	p.c.Write(wire.AppendBodyFrame(nil, wire.OpHello, 1, &wire.Hello{ProtocolVersion: 1})[:10]) // half a header, then silence
	time.Sleep(100 * time.Millisecond)
	done := make(chan struct{})
	go func() { b.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited on a stalled handshake")
	}
}
