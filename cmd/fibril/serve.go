package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // profiles for --pprof-addr
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fibril-go/fibril/admin"
	"github.com/fibril-go/fibril/io/broker"
	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/certs"
)

func init() {
	register("serve", "run the broker (TCP and QUIC on one port, data in a local directory)", runServe)
}

// userFlags collects repeated --user NAME:PASSWORD flags.
type userFlags []broker.UserSeed

func (u *userFlags) String() string { return fmt.Sprintf("%d users", len(*u)) }
func (u *userFlags) Set(v string) error {
	name, password, ok := strings.Cut(v, ":")
	if !ok || name == "" || password == "" {
		return errors.New("want NAME:PASSWORD")
	}
	*u = append(*u, broker.UserSeed{Name: name, Password: password})
	return nil
}

// listenerAdapter gives a transport.Listener the broker's Listener shape.
type listenerAdapter struct{ transport.Listener }

func (l listenerAdapter) Accept(ctx context.Context) (broker.Conn, error) {
	c, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func runServe(args []string) int {
	def := broker.DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	dataDir := fs.String("data-dir", def.DataDir, "directory for logs, users and TLS material (created if absent)")
	listen := fs.String("listen", "127.0.0.1:9876", "HOST:PORT for the wire protocol: TCP and QUIC (UDP) on the same port")
	tcpTLS := fs.Bool("tcp-tls", false, "serve TCP with TLS (plaintext clients get error 426); QUIC is always TLS 1.3")
	noQUIC := fs.Bool("no-quic", false, "do not serve QUIC")
	advertise := fs.String("advertise", "", "host clients should dial, as listed in topology (default: the listen host)")
	graceMs := fs.Int64("reconnect-grace-ms", def.ReconnectGraceMs, "how long a dropped client's session waits for it to resume (0 disables)")
	leaseMs := fs.Int64("lease-ms", def.Partition.LeaseMs, "how long a delivery stays leased without a settle (delivery.inflight_ttl_ms)")
	maxRetries := fs.Uint("max-retries", uint(def.Partition.MaxRetriesDefault), "default dlq_max_retries for queues that declare none")
	residentMB := fs.Int64("resident-payload-mb", def.ResidentPayloadBytesMax>>20, "MiB of message payloads kept in memory over all queues; past it, payloads are read back from disk when delivered")
	snapshotMin := fs.Int("snapshot-entries-min", def.SnapshotEntriesMin, "fewest log entries between two snapshots of a queue partition")
	handshakeTimeout := fs.Duration("handshake-timeout", def.HandshakeTimeout, "close a connection whose HELLO has not arrived whole by then")
	authTimeout := fs.Duration("auth-timeout", def.AuthTimeout, "close a session not authenticated this long after HELLO_OK")
	connectionsMax := fs.Int("max-connections", def.ConnectionsMax, "connections open at once; one more is answered with error 500 and closed")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	pprofAddr := fs.String("pprof-addr", "", "serve Go's pprof profiles on this loopback HOST:PORT (off when empty)")
	adminListen := fs.String("admin-listen", "127.0.0.1:8081", "HOST:PORT of the admin HTTP listener: GET /healthz, /readyz, /metrics (no auth: keep it on loopback; \"\" disables it; port 0 picks a free one)")
	// Idle queue eviction (SPEC 9), a temporary flag block until the config
	// package maps idle_queue_cleanup.
	idleCleanup := fs.Bool("idle-cleanup", def.IdleCleanup.Enabled, "unload queue partitions nobody uses (idle_queue_cleanup.enabled; docs/idle.md)")
	idleEvictMs := fs.Int64("idle-evict-after-ms", 0, "unload a partition idle this long (idle_queue_cleanup.evict_after_ms, default 600000); setting it enables --idle-cleanup")
	idleSweepMs := fs.Int64("idle-sweep-interval-ms", def.IdleCleanup.SweepIntervalMs, "how often idle partitions are looked for (idle_queue_cleanup.sweep_interval_ms)")
	var users userFlags
	fs.Var(&users, "user", "seed a user NAME:PASSWORD while the user store is empty (repeatable); without users, fibril/fibril works from loopback only")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: fibril serve [flags]\n\nRuns the broker on an embedded default: a local data directory, loopback only, no setup.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "fibril serve: --log-level:", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	host, portText, err := net.SplitHostPort(*listen)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || port <= 0 || port > 65535 {
		fmt.Fprintf(os.Stderr, "fibril serve: --listen %q: want HOST:PORT\n", *listen)
		return 2
	}
	cfg := def
	cfg.DataDir = *dataDir
	cfg.Logger = logger
	cfg.Users = users
	cfg.ReconnectGraceMs = *graceMs
	cfg.Partition.LeaseMs = *leaseMs
	cfg.Partition.MaxRetriesDefault = uint32(*maxRetries)
	if *residentMB < 0 {
		fmt.Fprintln(os.Stderr, "fibril serve: --resident-payload-mb must not be negative")
		return 2
	}
	cfg.ResidentPayloadBytesMax = *residentMB << 20
	cfg.SnapshotEntriesMin = *snapshotMin
	cfg.HandshakeTimeout = *handshakeTimeout
	cfg.AuthTimeout = *authTimeout
	cfg.ConnectionsMax = *connectionsMax
	cfg.IdleCleanup.Enabled = *idleCleanup
	cfg.IdleCleanup.SweepIntervalMs = *idleSweepMs
	if *idleEvictMs != 0 {
		cfg.IdleCleanup.Enabled, cfg.IdleCleanup.EvictAfterMs = true, *idleEvictMs
	}
	if err := cfg.IdleCleanup.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "fibril serve: --idle-evict-after-ms / --idle-sweep-interval-ms:", err)
		return 2
	}
	cfg.AdvertiseHost = *advertise
	if cfg.AdvertiseHost == "" {
		cfg.AdvertiseHost = host
		if host == "" || host == "0.0.0.0" || host == "::" {
			cfg.AdvertiseHost, _ = os.Hostname()
		}
	}
	cfg.AdvertisePort = uint16(port)
	if *pprofAddr != "" {
		if err := servePprof(*pprofAddr, logger); err != nil {
			fmt.Fprintln(os.Stderr, "fibril serve: --pprof-addr:", err)
			return 2
		}
	}
	return serve(cfg, *listen, port, *tcpTLS, !*noQUIC, *adminListen)
}

// adminShutdownTimeout bounds how long admin requests in flight may take to
// finish once the broker has closed.
const adminShutdownTimeout = 2 * time.Second

func serve(cfg broker.Config, listen string, port int, tcpTLS, withQUIC bool, adminListen string) int {
	log := cfg.Logger
	start := time.Now()
	raiseOpenFilesLimit(log)
	// The admin listener is bound first: a port already taken stops the
	// start before recovery, and /readyz says 503 while recovery runs.
	var adm *admin.Server
	if adminListen != "" {
		var err error
		if adm, err = admin.Listen(adminListen, log); err != nil {
			log.Error("cannot start", "err", err)
			return 1
		}
		log.Info("admin listener", "addr", adm.Addr().String(), "endpoints", "/healthz /readyz /metrics")
		defer func() {
			if err := adm.Shutdown(adminShutdownTimeout); err != nil {
				log.Warn("admin listener shutdown", "err", err)
			}
		}()
	}
	b, err := broker.New(cfg)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	material, err := certs.LoadOrCreate(cfg.DataDir, cfg.AdvertiseHost)
	if err != nil {
		log.Error("cannot load or create TLS material", "err", err)
		return 1
	}
	if path, err := certs.PublishLocalTrust(material, port); err != nil {
		log.Warn("could not publish local trust; local clients need --ca-file", "err", err)
	} else {
		log.Info("local clients trust this broker through", "file", path)
	}
	lc := transport.ListenConfig{Logger: log}
	var tcpConf = material.ServerTLS()
	if !tcpTLS {
		tcpConf = nil
	}
	tcp, err := lc.ListenTCP(listen, tcpConf)
	if err != nil {
		log.Error("cannot listen on TCP", "addr", listen, "err", err)
		return 1
	}
	b.Serve(listenerAdapter{tcp})
	if withQUIC {
		quic, err := lc.ListenQUIC(listen, material.ServerTLS())
		if err != nil {
			log.Error("cannot listen on QUIC", "addr", listen, "err", err)
			b.Close()
			return 1
		}
		b.Serve(listenerAdapter{quic})
	}
	if adm != nil {
		adm.Attach(b)
	}
	log.Info("fibril is serving", "tcp", tcp.Addr().String(), "tcp_tls", tcpTLS, "quic", withQUIC, "alpn", transport.ALPN,
		"data_dir", cfg.DataDir, "ca_sha256", material.CAFingerprintSHA256, "start_ms", time.Since(start).Milliseconds())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	select {
	case sig := <-signals:
		log.Info("shutting down", "signal", sig.String())
		if adm != nil {
			adm.Stopping() // /readyz: 503 while the broker closes
		}
		if err := b.Close(); err != nil {
			log.Error("shutdown", "err", err)
			return 1
		}
		return 0
	case <-b.Failed():
		if adm != nil {
			adm.Stopping()
		}
		b.Close()
		return 1
	}
}

// raiseOpenFilesLimit lifts the soft limit on open files to the hard one: each
// loaded queue partition keeps its log segment open, and each client a socket.
func raiseOpenFilesLimit(log *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur >= lim.Max {
		return
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("could not raise the open files limit", "err", err)
	}
}

// servePprof exposes net/http/pprof on a loopback address only: profiles
// reveal internals and must not be reachable from the network.
func servePprof(addr string, log *slog.Logger) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%q is not a loopback address", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() {
		if err := http.Serve(l, nil); err != nil {
			log.Warn("pprof server stopped", "err", err)
		}
	}()
	log.Info("pprof profiles served", "addr", l.Addr().String())
	return nil
}
