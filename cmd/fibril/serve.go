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
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fibril-go/fibril/admin"
	"github.com/fibril-go/fibril/config"
	"github.com/fibril-go/fibril/io/broker"
	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/certs"
)

func init() {
	register("serve", "run the broker (TCP and QUIC on one port, data in a local directory)", runServe)
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

// serveUsage heads `fibril serve --help`.
const serveUsage = `Usage: fibril serve [flags]

Runs the broker on an embedded default: a local data directory, loopback only, no setup.
Settings come from defaults < a TOML file (--config PATH, else $FIBRIL_CONFIG) < FIBRIL_*
environment variables < these flags; --print-config shows the result and where each value
came from. docs/configuration.md lists every key.

Flags:`

// serveTemporaryFlags are flags of settings that are not configuration keys
// yet (docs/configuration.md, "Adding a key"): each registers its flag and
// returns what puts the parsed value into the broker's config. A setting
// with a row in config.Table needs none.
var serveTemporaryFlags []func(fs *flag.FlagSet) (apply func(*broker.Config))

func runServe(args []string) int {
	var applyTemporary []func(*broker.Config)
	cfg, err := config.Load(config.Table(), config.Inputs{Args: args, Environ: os.Environ(), Usage: serveUsage,
		ExtraFlags: func(fs *flag.FlagSet) {
			for _, register := range serveTemporaryFlags {
				applyTemporary = append(applyTemporary, register(fs))
			}
		}})
	if errors.Is(err, config.ErrHelp) {
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fibril serve:", err)
		return 2
	}
	switch cfg.PrintConfig {
	case "text":
		if err := cfg.Print(os.Stdout); err != nil {
			return 1
		}
		return 0
	case "json":
		if err := cfg.PrintJSON(os.Stdout); err != nil {
			return 1
		}
		return 0
	}
	logger, level := cfg.NewLogger(os.Stderr)
	logger.Info("configuration", "file", cfg.File, "named_by", cfg.FileFrom,
		"set", strings.Join(cfg.NonDefault(), "; "))
	if len(cfg.Ignored) > 0 {
		logger.Debug("FIBRIL_ variables that are not configuration, ignored", "names", strings.Join(cfg.Ignored, ","))
	}
	bc := cfg.Broker(broker.DefaultConfig())
	for _, apply := range applyTemporary {
		apply(&bc)
	}
	bc.Logger = logger
	listen := cfg.String("broker.listener.bind")
	// Validated as HOST:PORT with a port from 1 (config.Table).
	host, portText, _ := net.SplitHostPort(listen)
	port, _ := strconv.Atoi(portText)
	bc.AdvertiseHost = cfg.String("broker.listener.advertise")
	if bc.AdvertiseHost == "" {
		bc.AdvertiseHost = host
		if host == "" || host == "0.0.0.0" || host == "::" {
			bc.AdvertiseHost, _ = os.Hostname()
		}
	}
	bc.AdvertisePort = uint16(port)
	if addr := cfg.String("debug.pprof_addr"); addr != "" {
		if err := servePprof(addr, logger); err != nil {
			fmt.Fprintln(os.Stderr, "fibril serve: debug.pprof_addr (--pprof-addr):", err)
			return 2
		}
	}
	// The admin listener gets the live log level and what the broker
	// started with (GET|PUT /admin/api/log-level, GET /admin/api/startup-config).
	startup := cfg.Values()
	withLogControl := func(adm *admin.Server) { adm.SetLogControl(level, startup) }
	admf := adminFlags{auth: cfg.Bool("admin.auth.enabled"), username: cfg.String("admin.auth.username"),
		password: cfg.String("admin.auth.password"), allowUnauth: cfg.Bool("admin.allow_unauthenticated"),
		https: cfg.Bool("tls.admin_enabled")}
	return serve(bc, listen, port, cfg.Bool("tls.enabled"), cfg.Bool("broker.listener.quic"),
		cfg.String("admin.listener.bind"), withLogControl, admf)
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

func serve(cfg broker.Config, listen string, port int, tcpTLS, withQUIC bool, adminListen string, setupAdmin func(*admin.Server), admf adminFlags) int {
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
		if setupAdmin != nil {
			setupAdmin(adm)
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
	// The start leaves tens of MiB of garbage behind (recovery's decoded
	// entries, an argon2id hash of 19 MiB per seeded user) that the heap
	// would keep as idle pages until the scavenger gets to them: give it back
	// now, once, at the end of the start (a forced GC of a small heap).
	debug.FreeOSMemory()
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
