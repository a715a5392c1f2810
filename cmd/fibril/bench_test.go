package main

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/bench"
	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/internal/syncbuf"
)

// The benchmark at a tiny size against a real `fibril serve`, over both
// transports: it proves the command works end to end (every message arrives
// once, the acks reach the broker). No figure is checked for speed.

// freeUDPAndTCPPort finds a loopback port free for TCP and UDP (QUIC).
func freeUDPAndTCPPort(t *testing.T) int {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		u.Close()
		return port
	}
	t.Fatal("no free port")
	return 0
}

// startServe builds this command and runs `fibril serve` on a temporary data
// directory with the given reconnect grace (0: closed consumers' deliveries
// return at once and the left probe need not wait).
func startServe(t *testing.T, reconnectGraceMs int) (addr string, pid int) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fibril")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The broker publishes its CA for local clients under the user config
	// directory, and our in-process client reads it there: keep both in the
	// test's directory instead of the developer's ~/.config.
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	addr = "127.0.0.1:" + strconv.Itoa(freeUDPAndTCPPort(t))
	serve := exec.Command(bin, "serve", "--data-dir", filepath.Join(dir, "data"), "--listen", addr, "--reconnect-grace-ms", strconv.Itoa(reconnectGraceMs),
		"--admin-listen=") // the default port is fixed; tests may run beside another broker
	log := &syncbuf.Buffer{}
	serve.Stdout, serve.Stderr = log, log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	// QUIC listens after TCP: the log line says both are up.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(log.String(), "fibril is serving") {
		if time.Now().After(deadline) {
			t.Fatalf("fibril serve did not start:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr, serve.Process.Pid
}

func benchLines(t *testing.T, args ...string) []map[string]string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := benchMain(args, &stdout, &stderr)
	var lines []map[string]string
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		fields, err := bench.ParseLine(sc.Text())
		if err != nil {
			t.Fatalf("%v in %q", err, sc.Text())
		}
		lines = append(lines, fields)
	}
	if code != 0 {
		t.Fatalf("fibril bench %v exited %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout.String(), stderr.String())
	}
	return lines
}

func TestBenchAgainstServeOverBothTransports(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr, pid := startServe(t, 0)
	common := []string{"-addr", addr, "-transport", "quic,tcp", "-msgs", "2000", "-timeout", "60s",
		"-pids", "fibril=" + strconv.Itoa(pid), "-run", "ci"}

	lines := benchLines(t, append([]string{"end-to-end", "-reconnect-grace", "0"}, common...)...)
	if len(lines) != 2 || lines[0]["system"] != "fibril-quic" || lines[1]["system"] != "fibril-tcp" {
		t.Fatalf("want one line per transport, got %v", lines)
	}
	for _, l := range lines {
		for k, want := range map[string]string{"status": "ok", "scenario": "end-to-end", "msgs": "2000", "delivered": "2000",
			"unique": "2000", "missing": "0", "dups": "0", "left": "0", "nacked": "0"} {
			if l[k] != want {
				t.Fatalf("%s: %s=%s, want %s (%v)", l["system"], k, l[k], want, l)
			}
		}
		if l["server_cpu_s"] == "" || l["server_rss_mb"] == "" {
			t.Fatalf("the broker's CPU and RSS are missing: %v", l)
		}
	}

	lines = benchLines(t, append([]string{"confirmed-publish"}, common...)...)
	for _, l := range lines {
		if l["status"] != "ok" || l["confirmed"] != "2000" || l["nacked"] != "0" || l["dup_confirms"] != "0" {
			t.Fatalf("%v", l)
		}
	}

	lines = benchLines(t, append([]string{"fanout", "-consumers", "3"}, common...)...)
	for _, l := range lines {
		if l["status"] != "ok" || l["records"] != "6000" || l["delivered"] != "6000" || l["missing"] != "0" ||
			l["dups"] != "0" || l["preload_msgs_per_s"] == "" {
			t.Fatalf("%v", l)
		}
	}
}

// The left probe must count what a closed consumer received but never
// acknowledged: the broker returns it to the queue only when the dormant
// session's grace ends, so the probe has to listen past it.
func TestLeftProbeCountsDeliveriesHeldByAClosedConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	const graceMs, prefetch, published = 1000, 5, 12
	addr, _ := startServe(t, graceMs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	target := &bench.Fibril{Addr: addr, Transport: client.TransportTCP,
		Credentials: &client.Credentials{Username: "fibril", Password: "fibril"}}
	if err := target.Prepare(ctx, bench.Workload{Scenario: bench.ScenarioEndToEnd, Prefetch: 64}); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, addr, client.ClientOptions{Transport: client.TransportTCP,
		Credentials: &client.Credentials{Username: "fibril", Password: "fibril"}, DisableAutoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeTopic(ctx, target.Topic(), client.SubscribeOptions{Prefetch: prefetch})
	if err != nil {
		t.Fatal(err)
	}
	for i := range published {
		if _, err := c.Publisher(target.Topic()).PublishConfirmed(ctx, client.Raw([]byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
	}
	for range prefetch { // received, never acknowledged
		select {
		case <-sub.Deliveries():
		case <-ctx.Done():
			t.Fatal("no delivery")
		}
	}
	c.Close()

	target.ReconnectGrace = time.Duration(graceMs) * time.Millisecond
	left, err := target.Remaining(ctx)
	if err != nil || left != published {
		t.Fatalf("left = %d (%v), want %d: the held deliveries must be counted", left, err, published)
	}
	left, err = target.Remaining(ctx)
	if err != nil || left != 0 {
		t.Fatalf("the probe acknowledges what it counts; a second probe found %d (%v)", left, err)
	}
}

func TestBenchRejectsBadArguments(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"no-such-scenario"},
		{"end-to-end", "-size", "15"},
		{"end-to-end", "-consumers", "0"},
		{"confirmed-publish", "-transport", "quic,udp"},
		{"confirmed-publish", "-prefetch", "4"}, // no consumers in this scenario
	} {
		var stdout, stderr bytes.Buffer
		if code := benchMain(args, &stdout, &stderr); code != 2 {
			t.Errorf("fibril bench %v exited %d, want 2 (stderr %q)", args, code, stderr.String())
		}
	}
	if got := serverPID("nats=1, fibril=42", "fibril"); got != 42 {
		t.Errorf("serverPID = %d", got)
	}
	if got := serverPID("", "fibril"); got != 0 {
		t.Errorf("serverPID of nothing = %d", got)
	}
}

// A peer is chosen with -system and -url; a URL off loopback, of the wrong
// scheme, or an unknown system is refused before anything is dialled (exit 2,
// no result line), and -url does not apply to Fibril.
func TestBenchPeerArguments(t *testing.T) {
	for _, args := range [][]string{
		{"confirmed-publish", "-system", "nats-js", "-url", "nats://10.0.0.1:4222"},
		{"confirmed-publish", "-system", "nats-js", "-url", "nats://example.com:4222"},
		{"end-to-end", "-system", "redis-streams", "-url", "nats://127.0.0.1:4222"},
		{"end-to-end", "-system", "rabbitmq-quorum", "-url", "amqp://guest:guest@192.168.0.9:5672/"},
		{"confirmed-publish", "-system", "kafka"},
		{"confirmed-publish", "-transport", "tcp", "-url", "nats://127.0.0.1:4222"},
		{"confirmed-publish", "-system", "nats-js", "-transport", "tcp"},
		{"confirmed-publish", "-system", "nats-js", "-addr", "127.0.0.1:4222"},
		{"wait", "-system", "redis-streams", "-url", "redis://10.1.2.3:6379/0"},
		{"wait", "-system", "kafka"},
	} {
		var stdout, stderr bytes.Buffer
		if code := benchMain(args, &stdout, &stderr); code != 2 || stdout.Len() != 0 {
			t.Errorf("fibril bench %v exited %d with %q, want 2 and no line (stderr %q)", args, code, stdout.String(), stderr.String())
		}
	}
	// Reachable arguments, no server: one line with the peer's name, an error.
	var stdout, stderr bytes.Buffer
	code := benchMain([]string{"end-to-end", "-system", "redis-streams", "-url", "redis://127.0.0.1:1/0", "-msgs", "10", "-timeout", "5s", "-run", "7"}, &stdout, &stderr)
	if code != 1 || !strings.HasPrefix(stdout.String(), "system=redis-streams scenario=end-to-end run=7 ") ||
		!strings.Contains(stdout.String(), " status=error ") {
		t.Fatalf("exit %d, line %q, stderr %q", code, stdout.String(), stderr.String())
	}
	// Fanout on a queue type without logs is a fact about the system, not a
	// failed run.
	stdout.Reset()
	code = benchMain([]string{"fanout", "-system", "rabbitmq-classic", "-url", "amqp://guest:guest@127.0.0.1:1/"}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "system=rabbitmq-classic scenario=fanout ") || !strings.Contains(stdout.String(), " status=unsupported ") {
		t.Fatalf("exit %d, line %q", code, stdout.String())
	}
	// -system fibril-tcp is -transport tcp.
	stdout.Reset()
	code = benchMain([]string{"confirmed-publish", "-system", "fibril-tcp", "-addr", "127.0.0.1:1", "-timeout", "5s"}, &stdout, &stderr)
	if code != 1 || !strings.HasPrefix(stdout.String(), "system=fibril-tcp scenario=confirmed-publish ") {
		t.Fatalf("exit %d, line %q", code, stdout.String())
	}
	if got := serverPID("fibril=1,nats=2,nats-sync=3,rabbitmq=4,redis=5", "nats-sync"); got != 3 {
		t.Errorf("serverPID(nats-sync) = %d", got)
	}
}

func TestBenchFanoutWithoutABrokerIsAnError(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := benchMain([]string{"fanout", "-addr", "127.0.0.1:1", "-transport", "tcp", "-timeout", "5s"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "system=fibril-tcp scenario=fanout ") ||
		!strings.Contains(stdout.String(), " consumers=4 ") || !strings.Contains(stdout.String(), " status=error ") {
		t.Fatalf("line %q", stdout.String())
	}
}

func TestMain(m *testing.M) {
	// The go build in startServe needs the go tool; CI puts it on PATH, a
	// developer's shell may only have it here.
	if _, err := exec.LookPath("go"); err != nil {
		os.Setenv("PATH", os.Getenv("PATH")+string(os.PathListSeparator)+"/usr/local/go/bin")
	}
	os.Exit(m.Run())
}
