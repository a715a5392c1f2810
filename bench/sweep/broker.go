package sweep

// One `fibril serve` process per point: started on a fresh data dir and free
// loopback ports, ready once both of its transports take a client, stopped
// with SIGTERM and, 10 s later, SIGKILL.
//
// Invariants:
//   - Every address is on 127.0.0.1: the sweep sends traffic nowhere else.
//   - Stop always reaps the process (no zombie, no broker left running),
//     whatever state it is in; it is safe to call twice.
//   - The broker's output is kept in a bounded buffer (its tail), so a broker
//     that logs a lot cannot grow the sweep's memory.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fibril-go/fibril/client"
)

// stopGrace is how long SIGTERM gets before SIGKILL.
const stopGrace = 10 * time.Second

// readyPollInterval is the pause between dial attempts while a broker starts.
const readyPollInterval = 20 * time.Millisecond

// dialAttemptTimeout bounds one dial while waiting for readiness: a broker
// still starting may accept the UDP packet and answer nothing.
const dialAttemptTimeout = time.Second

// logTailBytes is how much of a broker's output is kept for error messages.
const logTailBytes = 8 << 10

// Credentials the broker seeds into an empty user store by default.
var benchCredentials = &client.Credentials{Username: "fibril", Password: "fibril"}

// tailBuffer keeps the last logTailBytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - logTailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Broker is one running `fibril serve`.
type Broker struct {
	Bin       string
	DataDir   string
	Addr      string // 127.0.0.1:port, TCP and UDP
	AdminAddr string // 127.0.0.1:port of the admin HTTP listener
	PprofAddr string // 127.0.0.1:port of --pprof-addr, used to force a GC
	// StartedAt is when the process was started (before any readiness check),
	// the origin of a recovery time.
	StartedAt time.Time

	cmd    *exec.Cmd
	log    *tailBuffer
	waited chan struct{}
}

// freePorts finds n distinct ports, each free on both TCP and UDP (QUIC
// shares the broker's port). Every pick stays held until all n are chosen:
// a port released at once could be handed out again by the next pick, and
// two listeners of one broker on one port fail its start.
func freePorts(n int) ([]int, error) {
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	ports := make([]int, 0, n)
	for attempt := 0; len(ports) < n; attempt++ {
		if attempt >= 20*n {
			return nil, errors.New("no free port on 127.0.0.1")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // the UDP side is taken; the TCP one stays held, so it is not picked again
		}
		held = append(held, u)
		ports = append(ports, port)
	}
	return ports, nil
}

// StartBroker starts `bin serve` on dataDir with fresh ports. The admin
// listener gets a port chosen here rather than 0, so the sweep knows where to
// read the Go heap from.
func StartBroker(bin, dataDir string) (*Broker, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	b := &Broker{Bin: bin, DataDir: dataDir, Addr: "127.0.0.1:" + strconv.Itoa(ports[0]),
		AdminAddr: "127.0.0.1:" + strconv.Itoa(ports[1]), PprofAddr: "127.0.0.1:" + strconv.Itoa(ports[2])}
	return b, b.start()
}

// Restart stops the broker and starts it again on the same data dir and
// ports. kill stops it with SIGKILL: none of its shutdown code runs, so the
// next start recovers as after a crash (the page cache keeps what was
// written, so this is not a power loss).
func (b *Broker) Restart(kill bool) error {
	if kill {
		b.kill()
	} else {
		b.Stop()
	}
	return b.start()
}

// kill ends the broker with SIGKILL and waits for it.
func (b *Broker) kill() {
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	defer func() { b.cmd = nil }()
	if !b.exited() {
		_ = b.cmd.Process.Kill()
	}
	<-b.waited
}

func (b *Broker) start() error {
	b.cmd = exec.Command(b.Bin, "serve", "--data-dir", b.DataDir, "--listen", b.Addr,
		"--admin-listen", b.AdminAddr, "--pprof-addr", b.PprofAddr, "--reconnect-grace-ms", "0", "--log-level", "warn")
	b.log = &tailBuffer{}
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	// The broker dies with the sweep, even when the sweep is SIGKILLed.
	b.cmd.SysProcAttr = brokerProcAttr()
	b.StartedAt = time.Now()
	if err := b.cmd.Start(); err != nil {
		b.cmd = nil
		return err
	}
	b.waited = make(chan struct{})
	cmd, waited := b.cmd, b.waited
	trackBroker(cmd.Process, true)
	go func() {
		_ = cmd.Wait()
		trackBroker(cmd.Process, false)
		close(waited)
	}()
	return nil
}

// PID is the broker's process id, 0 when not running.
func (b *Broker) PID() int {
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// Log is the tail of the broker's output.
func (b *Broker) Log() string {
	if b.log == nil {
		return ""
	}
	return b.log.String()
}

// exited reports whether the process has ended.
func (b *Broker) exited() bool {
	select {
	case <-b.waited:
		return true
	default:
		return false
	}
}

// Dial opens one client connection over transport, without auto-reconnect
// (a silent reconnect would change what is measured).
func (b *Broker) Dial(ctx context.Context, transport string) (*client.Client, error) {
	return client.Dial(ctx, b.Addr, client.ClientOptions{Transport: transport, Credentials: benchCredentials,
		DisableAutoReconnect: true, ClientName: "fibril-bench-sweep"})
}

// WaitReady waits until a client connects over TCP and over QUIC: the TCP
// listener may be up before the UDP one, and a point must not start early on
// either transport.
func (b *Broker) WaitReady(ctx context.Context) error {
	for _, transport := range []string{client.TransportTCP, client.TransportQUIC} {
		for {
			if b.exited() {
				return fmt.Errorf("broker exited while starting: %s", b.Log())
			}
			attemptCtx, cancel := context.WithTimeout(ctx, dialAttemptTimeout)
			c, err := b.Dial(attemptCtx, transport)
			cancel()
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("broker not ready over %s: %w (last: %v)", transport, ctx.Err(), err)
			case <-time.After(readyPollInterval):
			}
		}
	}
	return nil
}

// Stop sends SIGTERM, then SIGKILL after stopGrace, and reaps the process.
// It reports whether SIGKILL was needed.
func (b *Broker) Stop() (killed bool) {
	if b.cmd == nil || b.cmd.Process == nil {
		return false
	}
	defer func() { b.cmd = nil }()
	if b.exited() {
		return false
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.waited:
		return false
	case <-time.After(stopGrace):
	}
	_ = b.cmd.Process.Kill()
	<-b.waited
	return true
}

// CollectGarbage makes the broker run a full GC (pprof's heap profile with
// gc=1 calls runtime.GC first) and reports whether it did. An idle Go
// process collects only every two minutes, so without it a heap sample
// holds whatever garbage startup or the publish left, which differs from
// point to point more than the figure being measured.
func (b *Broker) CollectGarbage(ctx context.Context) bool {
	return getOK(ctx, 10*time.Second, "http://"+b.PprofAddr+"/debug/pprof/heap?gc=1")
}

// ready reports whether the admin listener answers /readyz with 200: the
// broker has recovered and serves both transports.
func (b *Broker) ready(ctx context.Context) bool {
	return getOK(ctx, dialAttemptTimeout, "http://"+b.AdminAddr+"/readyz")
}

// getOK GETs url within timeout and reports whether it answered 200.
func getOK(ctx context.Context, timeout time.Duration, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// HeapMB reads the broker's Go heap (live objects) from the admin API's
// overview, or returns -1.
func (b *Broker) HeapMB(ctx context.Context) float64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.AdminAddr+"/admin/api/overview", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return -1
	}
	var overview struct {
		Memory struct {
			HeapBytes *uint64 `json:"heap_bytes"`
		} `json:"memory"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&overview); err != nil || overview.Memory.HeapBytes == nil {
		return -1
	}
	return float64(*overview.Memory.HeapBytes) / (1 << 20)
}

// FreeDiskBytes is the space available to an unprivileged writer on the
// file system holding dir.
func FreeDiskBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// RaiseOpenFiles lifts RLIMIT_NOFILE to at least need (a connections point
// opens one descriptor per client here, and the broker, which inherits the
// limit, one per connection as well). It raises the hard limit too when it
// may (root), and reports the soft limit in force.
func RaiseOpenFiles(need uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= need {
		return lim.Cur, nil
	}
	want := lim
	want.Cur = need
	if want.Max < need {
		want.Max = need
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		// Not allowed above the hard limit: take what the hard limit gives.
		want = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err2 != nil {
			return lim.Cur, err
		}
	}
	return want.Cur, nil
}

// removeDataDir deletes a point's data; a failure is reported, not fatal.
func removeDataDir(dir string) error { return os.RemoveAll(dir) }
