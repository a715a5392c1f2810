package client

// Unit test of the writer's batching (PERFORMANCE-NOTES: frames per write, never
// one syscall per frame), on a counting in-memory Conn.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// countingConn records writes; reads block until Close.
type countingConn struct {
	mu     sync.Mutex
	writes int
	bytes  int
	closed chan struct{}
	once   sync.Once
}

func (c *countingConn) Read([]byte) (int, error) { <-c.closed; return 0, io.EOF }
func (c *countingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	c.bytes += len(b)
	return len(b), nil
}
func (c *countingConn) Close() error { c.once.Do(func() { close(c.closed) }); return nil }
func (c *countingConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9876}
}
func (c *countingConn) Kind() string     { return "tcp" }
func (c *countingConn) IsLoopback() bool { return true }

func (c *countingConn) stats() (writes, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.bytes
}

func waitForBytes(t *testing.T, conn *countingConn, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, got := conn.stats(); got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer did not write %d bytes", want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWriterBatchesFramesPerWrite(t *testing.T) {
	conn := &countingConn{closed: make(chan struct{})}
	opts, err := ClientOptions{}.resolved()
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(conn, opts, newRouteCache(), newCohortTable(opts))
	defer e.fail(errors.New("test over"))

	const queued = 500 // 500 × 20-byte PINGs: well under one 64 KiB buffer
	for i := range queued {
		frame, err := encode(wire.OpPing, uint64(i+4), wire.Ping{})
		if err != nil {
			t.Fatal(err)
		}
		e.writeQueue <- frame
	}
	go e.writeLoop()
	waitForBytes(t, conn, queued*wire.HeaderSizeBytes)
	if writes, _ := conn.stats(); writes != 1 {
		t.Fatalf("%d queued frames took %d writes, want 1", queued, writes)
	}

	// An idle writer flushes a lone frame at once rather than waiting for company.
	frame, _ := encode(wire.OpPing, 1000, wire.Ping{})
	e.writeQueue <- frame
	waitForBytes(t, conn, (queued+1)*wire.HeaderSizeBytes)
	if writes, _ := conn.stats(); writes != 2 {
		t.Fatalf("lone frame: %d writes in total, want 2", writes)
	}
}

// TestAckRunMergesConsecutiveAcksOfOneKey: a drain of ACKs of one queue key
// goes out as one ACK with every tag in order; another key, another frame
// kind and the tag cap each end the run, and no frame overtakes another.
func TestAckRunMergesConsecutiveAcksOfOneKey(t *testing.T) {
	ack := func(topic string, partition uint32, reqID uint64, tags ...uint64) []byte {
		frame, err := encode(wire.OpAck, reqID, wire.Ack{Topic: topic, Partition: partition, Tags: tags})
		if err != nil {
			t.Fatal(err)
		}
		return frame
	}
	nack, err := encode(wire.OpNack, 50, wire.Nack{Topic: "q", Partition: 0, Tags: []uint64{9}, Requeue: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	var run ackRun
	frames := [][]byte{
		ack("q", 0, 10, 1), ack("q", 0, 11, 2, 3), ack("q", 0, 12, 4), // one run
		ack("q", 1, 13, 5), // another partition
		nack,               // another kind ends the run
		ack("q", 1, 14, 6),
	}
	capTags := 0 // tags of "s"/0 that fit the payload cap after the first
	if probe, err := encode(wire.OpAck, 1, wire.Ack{Topic: "s", Tags: []uint64{1}}); err == nil {
		capTags = 1 + (ackMergePayloadBytesMax-(len(probe)-wire.HeaderSizeBytes))/8
	}
	for i := uint64(0); i < uint64(capTags)+1; i++ { // past the cap: two frames
		frames = append(frames, ack("s", 0, 100+i, 1000+i))
	}
	for _, f := range frames {
		if err := run.write(w, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := run.flush(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	type got struct {
		op    wire.Opcode
		reqID uint64
		key   string
		tags  []uint64
	}
	var frs []got
	r := bufio.NewReader(&out)
	for {
		h, payload, err := wire.ReadFrame(r, wire.PayloadSizeBytesMaxDefault, nil)
		if err != nil {
			break
		}
		switch h.Opcode {
		case wire.OpAck:
			if len(payload) > ackMergePayloadBytesMax {
				t.Fatalf("a merged ACK of %d bytes, over the %d-byte cap", len(payload), ackMergePayloadBytesMax)
			}
			a, err := wire.DecodeAck(payload)
			if err != nil {
				t.Fatal(err)
			}
			frs = append(frs, got{h.Opcode, h.RequestID, fmt.Sprintf("%s/%d", a.Topic, a.Partition), a.Tags})
		default:
			frs = append(frs, got{op: h.Opcode, reqID: h.RequestID})
		}
	}
	if len(frs) != 6 {
		t.Fatalf("%d frames out: %+v", len(frs), frs)
	}
	want := []got{
		{wire.OpAck, 10, "q/0", []uint64{1, 2, 3, 4}},
		{wire.OpAck, 13, "q/1", []uint64{5}},
		{op: wire.OpNack, reqID: 50},
		{wire.OpAck, 14, "q/1", []uint64{6}},
	}
	for i, w := range want {
		if frs[i].op != w.op || frs[i].reqID != w.reqID || frs[i].key != w.key || !slices.Equal(frs[i].tags, w.tags) {
			t.Fatalf("frame %d: %+v, want %+v", i, frs[i], w)
		}
	}
	if len(frs[4].tags) != capTags || frs[4].reqID != 100 || len(frs[5].tags) != 1 || frs[5].tags[0] != 1000+uint64(capTags) {
		t.Fatalf("capped run: %d tags (req %d), then %v; cap %d", len(frs[4].tags), frs[4].reqID, frs[5].tags, capTags)
	}
}
