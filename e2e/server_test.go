// Package e2e tests the production path end to end: a real `fibril serve`
// process, a real WAL on disk, real TCP and QUIC sockets on loopback, our Go
// client and raw wire frames. Servers are killed with SIGKILL and restarted.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/internal/syncbuf"
)

var fibrilBin string

func TestMain(m *testing.M) {
	if os.Getenv(memberProcessEnv) != "" {
		// This process is a cohort member the test started (cohorts_test.go).
		os.Exit(runMemberProcess())
	}
	dir, err := os.MkdirTemp("", "fibril-e2e-bin")
	if err != nil {
		panic(err)
	}
	fibrilBin = filepath.Join(dir, "fibril")
	// Servers publish their CA for local clients under the user's config
	// directory: keep that inside the test's own directory (both the server
	// processes and the in-process clients read this variable).
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	build := exec.Command("go", "build", "-o", fibrilBin, "../cmd/fibril")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building fibril:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one `fibril serve` process.
type server struct {
	t       testing.TB
	dataDir string
	port    int
	args    []string
	cmd     *exec.Cmd
	log     *syncbuf.Buffer
	// bin and env, when set, run another build (a mutant's) with more
	// environment.
	bin string
	env []string
}

func freePort(t testing.TB) int {
	for i := 0; i < 20; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // the UDP side of this port is taken: QUIC needs it too
		}
		u.Close()
		return port
	}
	t.Fatal("no free port")
	return 0
}

func startServer(t testing.TB, dataDir string, extra ...string) *server {
	t.Helper()
	s := &server{t: t, dataDir: dataDir, port: freePort(t), args: extra}
	s.start()
	t.Cleanup(func() { s.kill() })
	return s
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *server) start() {
	s.t.Helper()
	// Tests run many brokers at once: the admin listener is off unless a
	// test asks for one in s.args (a later flag wins).
	args := append([]string{"serve", "--data-dir", s.dataDir, "--listen", s.addr(), "--lease-ms", "2000", "--admin-listen="}, s.args...)
	bin := s.bin
	if bin == "" {
		bin = fibrilBin
	}
	s.cmd = exec.Command(bin, args...)
	if len(s.env) > 0 {
		s.cmd.Env = append(os.Environ(), s.env...)
	}
	s.log = &syncbuf.Buffer{}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	// Ready means started to the end: the TCP port accepts before the
	// broker has logged "fibril is serving" (the QUIC listener, the admin
	// surface's attach and a forced GC come between), and tests read that
	// log.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", s.addr(), 100*time.Millisecond); err == nil {
			c.Close()
			if s.log.Contains("fibril is serving") {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the broker on %s did not say \"fibril is serving\" within 10 s; its log:\n%s", s.addr(), s.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL: no shutdown code runs, only what reached the disk stays.
func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *server) restart() {
	s.t.Helper()
	s.kill()
	s.start()
}

// eventually polls fn every intervalMs until it holds or timeoutMs passes.
func eventually(t testing.TB, timeoutMs, intervalMs int, fn func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	for !fn() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %d ms", timeoutMs)
		}
		time.Sleep(time.Duration(intervalMs) * time.Millisecond)
	}
}

var transports = []string{client.TransportQUIC, client.TransportTCP}

func dial(t testing.TB, s *server, transport string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.addr(), client.ClientOptions{Transport: transport,
		Credentials: &client.Credentials{Username: "fibril", Password: "fibril"}, DisableAutoReconnect: true})
	if err != nil {
		t.Fatalf("dial %s: %v\nserver log:\n%s", transport, err, s.log.String())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func next(t testing.TB, sub *client.Subscription, within time.Duration) *client.Delivery {
	t.Helper()
	select {
	case d, ok := <-sub.Deliveries():
		if !ok {
			t.Fatalf("subscription closed: %v", sub.CloseReason())
		}
		return d
	case <-time.After(within):
		t.Fatalf("no delivery within %v", within)
	}
	return nil
}

func nothing(t testing.TB, sub *client.Subscription, within time.Duration) {
	t.Helper()
	select {
	case d := <-sub.Deliveries():
		t.Fatalf("unexpected delivery of offset %d (%q)", d.Offset, d.Payload)
	case <-time.After(within):
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
