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
	// Admin surface flags (issue 12, helper F): a separate block, for the
	// config rewrite to map.
	var admf adminFlags
	fs.BoolVar(&admf.auth, "admin-auth", false, "require credentials on /metrics and /admin/api/* (basic auth or a POST /login session)")
	fs.StringVar(&admf.username, "admin-username", "", "the admin user name (with --admin-auth)")
	fs.StringVar(&admf.password, "admin-password", "", "the admin password (with --admin-auth)")
	fs.BoolVar(&admf.allowUnauth, "admin-allow-unauthenticated", false, "accept a non-loopback --admin-listen with admin auth off")
	fs.BoolVar(&admf.https, "admin-tls", true, "serve the admin listener over HTTPS with the broker's certificate when --tcp-tls is on (false keeps HTTP)")
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
	return serve(cfg, *listen, port, *tcpTLS, !*noQUIC, *adminListen, admf)
}

// adminFlags are the admin surface's flags.
type adminFlags struct {
	auth, allowUnauth, https bool
	username, password       string
}

// options builds the admin listener's options.
func (f adminFlags) options(cfg broker.Config, tlsHolder *certs.Holder, tcpTLS bool) admin.Options {
	return admin.Options{
		Auth:                 admin.AuthOptions{Enabled: f.auth, Username: f.username, Password: f.password},
		AllowUnauthenticated: f.allowUnauth,
		TLS:                  tlsHolder,
		ServeTLS:             tcpTLS && f.https,
		Info:                 admin.Info{Node: cfg.ServerName, Version: version, DataDir: cfg.DataDir},
	}
}

// adminShutdownTimeout bounds how long admin requests in flight may take to
// finish once the broker has closed.
const adminShutdownTimeout = 2 * time.Second

func serve(cfg broker.Config, listen string, port int, tcpTLS, withQUIC bool, adminListen string, admf adminFlags) int {
	log := cfg.Logger
	start := time.Now()
	raiseOpenFilesLimit(log)
	// The TLS material is loaded before the admin listener binds: HTTPS and
	// GET /admin/api/tls serve it, and a reload swaps it (certs.Holder).
	material, err := certs.LoadOrCreate(cfg.DataDir, cfg.AdvertiseHost)
	if err != nil {
		log.Error("cannot load or create TLS material", "err", err)
		return 1
	}
	tlsHolder := certs.NewHolder(material)
	// The admin listener is bound first: a port already taken stops the
	// start before recovery, and /readyz says 503 while recovery runs.
	var adm *admin.Server
	if adminListen != "" {
		var err error
		if adm, err = admin.ListenWith(adminListen, log, admf.options(cfg, tlsHolder, tcpTLS)); err != nil {
			log.Error("cannot start", "err", err)
			return 1
		}
		log.Info("admin listener", "addr", adm.Addr().String(), "endpoints", "/healthz /readyz /metrics /admin/api/...",
			"https", tcpTLS && admf.https, "auth", admf.auth)
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
	if path, err := certs.PublishLocalTrust(material, port); err != nil {
		log.Warn("could not publish local trust; local clients need --ca-file", "err", err)
	} else {
		log.Info("local clients trust this broker through", "file", path)
	}
	// A TLS reload (POST /admin/api/tls/reload) may bring a new CA: local
	// trust follows it.
	tlsHolder.OnReload(func(m *certs.Material) {
		if _, err := certs.PublishLocalTrust(m, port); err != nil {
			log.Warn("could not republish local trust after a TLS reload", "err", err)
		}
		log.Info("TLS material reloaded", "leaf_sha256", m.LeafFingerprintSHA256, "ca_sha256", m.CAFingerprintSHA256)
	})
	lc := transport.ListenConfig{Logger: log}
	var tcpConf = tlsHolder.ServerTLS()
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
		quic, err := lc.ListenQUIC(listen, tlsHolder.ServerTLS())
		if err != nil {
			log.Error("cannot listen on QUIC", "addr", listen, "err", err)
			b.Close()
			return 1
		}
		b.Serve(listenerAdapter{quic})
	}
	if adm != nil {
		listeners := []admin.Listener{{Kind: map[bool]string{true: "tls", false: "tcp"}[tcpTLS], Addr: tcp.Addr().String()}}
		if withQUIC {
			listeners = append(listeners, admin.Listener{Kind: "quic", Addr: tcp.Addr().String()})
		}
		listeners = append(listeners, admin.Listener{Kind: "admin", Addr: adm.Addr().String()})
		adm.SetInfo(admin.Info{Node: cfg.ServerName, Version: version, DataDir: cfg.DataDir, Listeners: listeners})
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
