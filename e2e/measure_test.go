package e2e

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
)

// Measurements for the notes, not timed tests: they log figures and assert
// only correctness. Run with FIBRIL_MEASURE=1 go test ./e2e -run Measure -v.

func measureOnly(t *testing.T) {
	if os.Getenv("FIBRIL_MEASURE") == "" {
		t.Skip("set FIBRIL_MEASURE=1 to run measurements")
	}
}

func dirBytes(dir string) int64 {
	var total int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

func rssKiB(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			v, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return v
		}
	}
	return -1
}

func publishMany(t *testing.T, c *client.Client, topic string, n int, payload []byte) {
	ctx := context.Background()
	pub := c.Publisher(topic)
	const window = 512
	pending := make([]*client.Confirmation, 0, window)
	for i := 0; i < n; i++ {
		conf, err := pub.PublishWithConfirmation(ctx, client.Raw(payload))
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, conf)
		if len(pending) == window {
			for _, p := range pending {
				if _, err := p.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			pending = pending[:0]
		}
	}
	for _, p := range pending {
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMeasureMillionMessages: a million live messages of 100 bytes (inline
// in the log, held in memory) and of 1 KiB (in blob files, past the memory
// budget read back from disk when delivered): publish, SIGKILL, recover,
// drain.
func TestMeasureMillionMessages(t *testing.T) {
	measureOnly(t)
	for _, size := range []int{100, 1024} {
		t.Run(strconv.Itoa(size)+"B", func(t *testing.T) { measureMillion(t, size) })
	}
}

func measureMillion(t *testing.T, size int) {
	const n = 1_000_000
	dir := t.TempDir()
	s := startServer(t, dir)
	c := dial(t, s, client.TransportTCP)
	payload := make([]byte, size)
	start := time.Now()
	publishMany(t, c, "million", n, payload)
	t.Logf("published %d confirmed %d-byte messages in %v; disk %d MiB; RSS %d MiB", n, size, time.Since(start), dirBytes(dir)>>20, rssKiB(s.cmd.Process.Pid)>>10)

	// Recovery: SIGKILL, restart, and time until the queue serves again.
	s.kill()
	restart := time.Now()
	s.start()
	listening := time.Since(restart)
	c2 := dial(t, s, client.TransportTCP)
	sub, err := c2.SubscribeTopic(context.Background(), "million", client.SubscribeOptions{Prefetch: 4096})
	if err != nil {
		t.Fatal(err)
	}
	first := next(t, sub, 120*time.Second)
	t.Logf("recovery of %d live messages: listening after %v, first delivery after %v; RSS %d MiB",
		n, listening, time.Since(restart), rssKiB(s.cmd.Process.Pid)>>10)

	// Consume and ack everything, then see the log shrink.
	ctx := context.Background()
	first.Complete(ctx)
	for i := 1; i < n; i++ {
		next(t, sub, 30*time.Second).Complete(ctx)
	}
	time.Sleep(2 * time.Second)
	t.Logf("after %d published and acked: disk %d KiB in %s", n, dirBytes(dir)>>10, dir)
	s.kill()
	s.start()
	t.Logf("after a restart: disk %d KiB", dirBytes(dir)>>10)
}

func TestMeasureIdleQueuesStartup(t *testing.T) {
	measureOnly(t)
	const queues = 10_000
	dir := t.TempDir()
	s := startServer(t, dir)
	c := dial(t, s, client.TransportTCP)
	ctx := context.Background()
	for i := 0; i < queues; i++ {
		if _, err := c.DeclareQueue(ctx, client.NewQueueConfig("idle-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	s.kill()
	restart := time.Now()
	s.start()
	ready := time.Since(restart)
	time.Sleep(time.Second)
	t.Logf("%d declared idle queues: listening after %v, RSS %d MiB", queues, ready, rssKiB(s.cmd.Process.Pid)>>10)
	before := cpuTicks(s.cmd.Process.Pid)
	time.Sleep(10 * time.Second)
	t.Logf("idle CPU over 10 s: %d clock ticks (1 tick = 10 ms)", cpuTicks(s.cmd.Process.Pid)-before)
}

// cpuTicks is utime+stime of a process from /proc.
func cpuTicks(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	s, _ := strconv.ParseInt(fields[12], 10, 64)
	return u + s
}
