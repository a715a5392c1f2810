// Package syncbuf is a bytes.Buffer one goroutine may write while others
// read it: the output of a child process (os/exec copies into it from its
// own goroutine) or a logger, read by the test that started it.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is safe for one writer and many readers at once. The zero value is
// ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Contains says whether s has been written (within one Write or across
// several).
func (b *Buffer) Contains(s string) bool { return strings.Contains(b.String(), s) }
