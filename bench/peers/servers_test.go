package peers

// Private peer servers for the adapter tests, started on free loopback ports
// with throw-away directories the way scripts/bench-compare.sh starts them,
// and stopped by their own PIDs. A server that is not installed skips its
// tests (CI does not install the peers):
//   - redis-server from PATH;
//   - nats-server: $FIBRIL_NATS_SERVER, else the script's build
//     (~/.cache/bench-peers/bin/nats-server-v2.15.2), else PATH; a server
//     that refuses `sync_interval: always` (Debian's 2.9) skips nats-js-sync;
//   - RabbitMQ: $FIBRIL_BENCH_AMQP_URL (a running node, loopback only), else
//     the Debian package's /usr/lib/rabbitmq/bin/rabbitmq-server with epmd,
//     one node for the whole test binary (it takes ~10 s to boot). -short
//     skips starting one.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func freeTCPPort(t testing.TB) int {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// stopProcess sends SIGTERM to exactly cmd's process, then SIGKILL to it after
// grace.
func stopProcess(cmd *exec.Cmd, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	if !waitDone(done, grace) {
		_ = cmd.Process.Kill()
		<-done
	}
}

// waitPort waits until something accepts on 127.0.0.1:port or cmd exits.
func waitPort(t testing.TB, cmd *exec.Cmd, port int, limit time.Duration, logFile string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond); err == nil {
			c.Close()
			return
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(logFile)
	t.Fatalf("%s did not listen on %d:\n%s", cmd.Path, port, log)
}

// startRedis starts redis-server with the script's configuration (AOF,
// appendfsync always, no RDB) and returns its URL and PID.
func startRedis(t *testing.T) (string, int) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed")
	}
	dir := t.TempDir()
	port := freeTCPPort(t)
	conf := fmt.Sprintf("bind 127.0.0.1\nport %d\nprotected-mode yes\ndaemonize no\nlogfile %q\ndir %q\nsave \"\"\nappendonly yes\nappendfsync always\n",
		port, filepath.Join(dir, "redis.log"), dir)
	confPath := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, confPath)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(cmd, 10*time.Second) })
	waitPort(t, cmd, port, 10*time.Second, filepath.Join(dir, "redis.log"))
	return fmt.Sprintf("redis://127.0.0.1:%d/0", port), cmd.Process.Pid
}

// natsServerBinary finds a nats-server as the package doc says, or "".
func natsServerBinary() string {
	if p := os.Getenv("FIBRIL_NATS_SERVER"); p != "" {
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache")
		}
	}
	if p := filepath.Join(cache, "bench-peers", "bin", "nats-server-v2.15.2"); cache != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, _ := exec.LookPath("nats-server")
	return p
}

// startNATS starts a JetStream server (syncAlways: `sync_interval: always`)
// and returns its URL and PID.
func startNATS(t *testing.T, syncAlways bool) (string, int) {
	bin := natsServerBinary()
	if bin == "" {
		t.Skip("nats-server is not installed (build it: scripts/bench-compare.sh does, or set FIBRIL_NATS_SERVER)")
	}
	dir := t.TempDir()
	port := freeTCPPort(t)
	var conf strings.Builder
	fmt.Fprintf(&conf, "listen: 127.0.0.1:%d\nlog_file: %q\njetstream {\n  store_dir: %q\n", port,
		filepath.Join(dir, "nats.log"), filepath.Join(dir, "store"))
	if syncAlways {
		conf.WriteString("  sync_interval: always\n")
	}
	conf.WriteString("}\n")
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if syncAlways {
		// Debian's 2.9 rejects the field: then there is no nats-js-sync here.
		if out, err := exec.Command(bin, "-c", confPath, "-t").CombinedOutput(); err != nil {
			t.Skipf("%s does not take sync_interval: always: %s", bin, out)
		}
	}
	cmd := exec.Command(bin, "-c", confPath)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(cmd, 10*time.Second) })
	waitPort(t, cmd, port, 10*time.Second, filepath.Join(dir, "nats.log"))
	return fmt.Sprintf("nats://127.0.0.1:%d", port), cmd.Process.Pid
}

// The shared RabbitMQ node of this test binary.
var rabbit struct {
	once    sync.Once
	url     string
	pid     int // beam.smp, for CPU/RSS; 0 if unknown
	skip    string
	dir     string
	epmd    *exec.Cmd
	server  *exec.Cmd
	failure string
}

func startRabbit(t *testing.T) (string, int) {
	rabbit.once.Do(func() {
		if u := os.Getenv("FIBRIL_BENCH_AMQP_URL"); u != "" {
			rabbit.url = u
			return
		}
		server := "/usr/lib/rabbitmq/bin/rabbitmq-server"
		epmd, err := exec.LookPath("epmd")
		if _, statErr := os.Stat(server); statErr != nil || err != nil {
			rabbit.skip = "rabbitmq-server (and epmd) are not installed; or set FIBRIL_BENCH_AMQP_URL"
			return
		}
		if testing.Short() {
			rabbit.skip = "-short: not starting RabbitMQ"
			return
		}
		rabbit.failure = bootRabbit(server, epmd)
	})
	if rabbit.skip != "" {
		t.Skip(rabbit.skip)
	}
	if rabbit.failure != "" {
		t.Fatal(rabbit.failure)
	}
	return rabbit.url, rabbit.pid
}

// bootRabbit starts epmd and one private node as the script does; "" when
// it answers AMQP.
func bootRabbit(server, epmd string) string {
	dir, err := os.MkdirTemp("", "fibril-peers-rabbitmq-")
	if err != nil {
		return err.Error()
	}
	rabbit.dir = dir
	ports := make([]int, 3) // AMQP, distribution, epmd
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err.Error()
		}
	}
	for _, d := range []string{"mnesia", "log", "home"} {
		_ = os.MkdirAll(filepath.Join(dir, d), 0o700)
	}
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users.guest = true\nlog.console = false\n", ports[0])
	_ = os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "rabbitmq-env.conf"), nil, 0o600)
	rabbit.epmd = exec.Command(epmd, "-address", "127.0.0.1", "-port", strconv.Itoa(ports[2]))
	if err := rabbit.epmd.Start(); err != nil {
		return err.Error()
	}
	time.Sleep(300 * time.Millisecond)
	cmd := exec.Command(server)
	cmd.Env = append(os.Environ(),
		"HOME="+filepath.Join(dir, "home"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbitmq.pid"),
		fmt.Sprintf("RABBITMQ_NODENAME=fibrilpeers%d@localhost", os.Getpid()),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(ports[0]),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(ports[1]),
		"ERL_EPMD_PORT="+strconv.Itoa(ports[2]),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
	logFile, _ := os.Create(filepath.Join(dir, "stdout.log"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return err.Error()
	}
	rabbit.server = cmd
	rabbit.url = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", ports[0])
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := WaitReady(ctx, "rabbitmq-quorum", rabbit.url); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "stdout.log"))
		return fmt.Sprintf("RabbitMQ did not start: %v\n%s", err, log)
	}
	// the foreground script's child is the Erlang VM
	pid := cmd.Process.Pid
	if children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		if f := strings.Fields(string(children)); len(f) > 0 {
			rabbit.pid, _ = strconv.Atoi(f[0])
		}
	}
	return ""
}

// stopRabbit stops the node this binary started (the script first: it stops
// the VM cleanly), then epmd, each by its own PID.
func stopRabbit() {
	stopProcess(rabbit.server, 60*time.Second)
	if rabbit.pid > 0 {
		if p, err := os.FindProcess(rabbit.pid); err == nil && p.Signal(syscall.Signal(0)) == nil {
			_ = p.Kill()
		}
	}
	stopProcess(rabbit.epmd, 5*time.Second)
	if rabbit.dir != "" {
		_ = os.RemoveAll(rabbit.dir)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	stopRabbit()
	os.Exit(code)
}
