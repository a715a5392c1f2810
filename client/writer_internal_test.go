package client

// Unit test of the writer's batching (PERFORMANCE-NOTES: frames per write, never
// one syscall per frame), on a counting in-memory Conn.

import (
	"errors"
	"io"
	"net"
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
	e := newEngine(conn, opts, newRouteCache())
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
