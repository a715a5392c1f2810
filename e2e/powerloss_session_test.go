package e2e

import (
	"bufio"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// TestPowerLossKeepsSessionSkeletons: session state survives a power loss.
// A session subscribes (its skeleton is recorded in the Node's log after
// SUBSCRIBE_OK), then declares a queue on the same connection: the declare's
// record follows the skeleton's in that log (FIFO from the session to the
// Node), so DECLARE_QUEUE_OK proves both durable. After a power loss and a
// restart within resume_session_restart_ttl_ms, a HELLO with the old
// identity must get resumed_after_restart with the same client id and
// owner id (PROTOCOL 7.7), and the declared queue must still be there.
func TestPowerLossKeepsSessionSkeletons(t *testing.T) {
	fsys, mnt := mountLazy(t, uint64(envInt("FIBRIL_E2E_POWERLOSS_SEED", 1)))
	fsys.SetSyncDelay(powerSyncDelay)
	b := &brokerProc{t: t, bin: fibrilBin, dataDir: filepath.Join(mnt, "data"), port: freePort(t), snapshotEntriesMin: powerSnapshotMin}
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
	defer b.kill()
	const rounds = 3
	for round := 0; round < rounds; round++ {
		c := skeletonConn(t, b.addr())
		hello := c.hello(nil)
		c.auth()
		c.request(wire.OpSubscribe, &wire.Subscribe{Topic: "skeleton-q", Prefetch: 4}, wire.OpSubscribeOk)
		topic := "skeleton-declared-" + string(rune('a'+round))
		c.request(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: topic, PartitionCount: wire.Some[uint32](2)}, wire.OpDeclareQueueOk)
		report, err := fsys.PowerLoss(func() { b.kill(); c.c.Close() })
		if err != nil {
			t.Fatal(err)
		}
		if err := b.start(); err != nil {
			t.Fatalf("round %d: the broker does not start after the power loss (%s): %v", round, report, err)
		}
		again := skeletonConn(t, b.addr())
		id := wire.ResumeIdentity{OwnerID: hello.OwnerID, ClientID: hello.ClientID, ResumeToken: hello.ResumeToken}
		ok := again.hello(&id)
		if ok.ResumeOutcome != wire.ResumeResumedAfterRestart || ok.ClientID != hello.ClientID || ok.OwnerID != hello.OwnerID {
			t.Fatalf("round %d (seed %d, %s): resume after the power loss got outcome %d client %x owner %x, want %d with client %x owner %x",
				round, fsys.Seed(), report, ok.ResumeOutcome, ok.ClientID, ok.OwnerID, wire.ResumeResumedAfterRestart, hello.ClientID, hello.OwnerID)
		}
		again.auth()
		f := again.request(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: topic}, wire.OpDeclareQueueOk)
		if dk, err := wire.DecodeDeclareQueueOk(f); err != nil || dk.PartitionCount != 2 {
			t.Fatalf("round %d: the declared queue lost its 2 partitions after the power loss: %+v %v", round, dk, err)
		}
		again.c.Close()
	}
}

type skeletonClient struct {
	t      *testing.T
	c      net.Conn
	r      *bufio.Reader
	nextID uint64
}

func skeletonConn(t *testing.T, addr string) *skeletonClient {
	t.Helper()
	var c net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return &skeletonClient{t: t, c: c, r: bufio.NewReader(c)}
}

// request sends one frame and returns the payload of its answer, which must
// have opcode want (pushes such as PING are skipped).
func (s *skeletonClient) request(op wire.Opcode, body wire.Body, want wire.Opcode) []byte {
	s.t.Helper()
	s.nextID++
	id := s.nextID
	if _, err := s.c.Write(wire.AppendBodyFrame(nil, op, id, body)); err != nil {
		s.t.Fatal(err)
	}
	for {
		s.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		h, payload, err := wire.ReadFrame(s.r, wire.PayloadSizeBytesMaxDefault, nil)
		if err != nil {
			s.t.Fatalf("waiting for %v: %v", want, err)
		}
		if h.RequestID != id {
			continue // a push
		}
		if h.Opcode != want {
			e, _ := wire.DecodeErrorBody(payload)
			s.t.Fatalf("%v answered %v (%+v), want %v", op, h.Opcode, e, want)
		}
		return payload
	}
}

func (s *skeletonClient) hello(resume *wire.ResumeIdentity) wire.HelloOk {
	s.t.Helper()
	h := &wire.Hello{ClientName: "skeleton", ProtocolVersion: wire.ProtocolVersion}
	if resume != nil {
		h.Resume = wire.Some(*resume)
	}
	ok, err := wire.DecodeHelloOk(s.request(wire.OpHello, h, wire.OpHelloOk))
	if err != nil {
		s.t.Fatal(err)
	}
	return ok
}

func (s *skeletonClient) auth() {
	s.request(wire.OpAuth, &wire.Auth{Username: "fibril", Password: "fibril"}, wire.OpAuthOk)
}
