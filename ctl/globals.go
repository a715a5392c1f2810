package ctl

// Global flags and where their values come from.
//
// Invariants:
//   - Precedence per value: flag > environment > config file > default. A
//     flag counts as given only when it appears on the command line.
//   - The config file's admin.auth.username/password are the admin API's
//     credentials only; the wire protocol's user comes from the flags, the
//     environment or the default (the broker's admin credentials are not a
//     wire user).
//   - The config file is read only for the handful of keys below (the same
//     names the broker reads, SPEC 14); every other key is skipped, so a
//     broker's whole config file can be pointed at.
//   - A password never appears in an error message or in --help.

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Defaults.
const (
	brokerAddrDefault = "127.0.0.1:9876"
	adminURLDefault   = "http://127.0.0.1:8081"
	usernameDefault   = "fibril"
	passwordDefault   = "fibril"
	timeoutDefault    = 10 * time.Second
	// dataDirDefault is the broker's own default (io/broker DefaultConfig).
	dataDirDefault = "fibril-data"
)

// Environment variables fibrilctl reads.
const (
	envConfig   = "FIBRIL_CONFIG"
	envUsername = "FIBRIL_USERNAME"
	envPassword = "FIBRIL_PASSWORD"
)

// stringFlag remembers whether it was given.
type stringFlag struct {
	value string
	set   bool
}

func (f *stringFlag) String() string     { return f.value }
func (f *stringFlag) Set(v string) error { f.value, f.set = v, true; return nil }

// boolFlag remembers whether it was given.
type boolFlag struct {
	value bool
	set   bool
}

func (f *boolFlag) String() string { return strconv.FormatBool(f.value) }
func (f *boolFlag) Set(v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("want true or false, got %q", v)
	}
	f.value, f.set = b, true
	return nil
}
func (f *boolFlag) IsBoolFlag() bool { return true }

type globals struct {
	config     stringFlag
	broker     stringFlag
	admin      stringFlag
	username   stringFlag
	password   stringFlag
	tls        boolFlag
	caFile     stringFlag
	pin        stringFlag
	serverName stringFlag
	quic       boolFlag
	json       boolFlag
	timeoutArg stringFlag

	// Resolved by resolve.
	timeout time.Duration
	// adminUsername and adminPassword are the admin API's basic auth: the
	// flags or variables, else the config file's admin.auth.*, else the
	// defaults. The wire protocol uses username and password.
	adminUsername, adminPassword string
	// dataDir is server.data_dir from the config file ("" if absent): the
	// default of --data-dir for cert and secret.
	dataDir string
}

// register adds the global flags to fs.
func (g *globals) register(fs *flag.FlagSet) {
	fs.Var(&g.config, "config", "`FILE`: TOML config file to read broker.listener, admin.listener, admin.auth, tls and server.data_dir from (else $"+envConfig+")")
	fs.Var(&g.broker, "broker", "`HOST:PORT` of the broker's wire port (default "+brokerAddrDefault+")")
	fs.Var(&g.admin, "admin", "`URL` of the admin HTTP listener (default "+adminURLDefault+")")
	fs.Var(&g.username, "username", "`NAME`: user for the broker and the admin API (default "+usernameDefault+", else $"+envUsername+")")
	fs.Var(&g.password, "password", "`PASSWORD` (default "+passwordDefault+", else $"+envPassword+")")
	fs.Var(&g.tls, "tls", "use TLS on the TCP connection to the broker (QUIC always uses TLS)")
	fs.Var(&g.caFile, "ca-file", "PEM CA `FILE` to trust for the broker and an https admin URL (the broker's <data_dir>/tls/ca.pem)")
	fs.Var(&g.pin, "pin-sha256", "`HEX` SHA-256 fingerprint of the broker's leaf or CA certificate to trust (see 'cert fingerprint')")
	fs.Var(&g.serverName, "server-name", "`NAME` to verify the broker's certificate against, when it differs from the --broker host")
	fs.Var(&g.quic, "quic", "talk to the broker over QUIC instead of TCP")
	fs.Var(&g.json, "json", "print JSON (the API's answer) instead of a table")
	fs.Var(&g.timeoutArg, "timeout", "give up on the operation after this `DURATION` (default 10s)")
}

// resolve fills unset values from the environment, the config file and the
// defaults.
func (g *globals) resolve(env Env) error {
	path := g.config.value
	if !g.config.set {
		path = env.Getenv(envConfig)
	}
	var file fileConfig
	if path != "" {
		var err error
		if file, err = readConfigFile(path); err != nil {
			return fail(exitUsage, "%v", err)
		}
	}
	pick := func(f *stringFlag, envName, fromFile, def string) {
		switch {
		case f.set:
		case envName != "" && env.Getenv(envName) != "":
			f.value = env.Getenv(envName)
		case fromFile != "":
			f.value = fromFile
		default:
			f.value = def
		}
	}
	pick(&g.broker, "", file.brokerAddr(), brokerAddrDefault)
	pick(&g.admin, "", file.adminURL(), adminURLDefault)
	// The file's admin.auth.* are the admin listener's credentials, not a
	// wire user's: they go to the admin API only. A flag or variable names
	// the user for both.
	adminUser, adminPassword := g.username, g.password
	pick(&adminUser, envUsername, file.adminUsername, usernameDefault)
	pick(&adminPassword, envPassword, file.adminPassword, passwordDefault)
	g.adminUsername, g.adminPassword = adminUser.value, adminPassword.value
	pick(&g.username, envUsername, "", usernameDefault)
	pick(&g.password, envPassword, "", passwordDefault)
	if !g.tls.set && file.tlsEnabled {
		g.tls.value = true
	}
	if !g.caFile.set && file.caFile() != "" {
		g.caFile.value = file.caFile()
	}
	g.dataDir = file.dataDir
	g.timeout = timeoutDefault
	if g.timeoutArg.set {
		d, err := time.ParseDuration(g.timeoutArg.value)
		if err != nil || d <= 0 {
			return fail(exitUsage, "--timeout %q: want a positive duration such as 10s or 500ms", g.timeoutArg.value)
		}
		g.timeout = d
	}
	if _, _, err := net.SplitHostPort(g.broker.value); err != nil {
		return fail(exitUsage, "--broker %q: want HOST:PORT, e.g. %s", g.broker.value, brokerAddrDefault)
	}
	u, err := url.Parse(g.admin.value)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fail(exitUsage, "--admin %q: want a URL such as %s", g.admin.value, adminURLDefault)
	}
	g.admin.value = strings.TrimRight(g.admin.value, "/")
	return nil
}

// fileConfig is the part of a broker config file fibrilctl uses.
type fileConfig struct {
	brokerBind      string
	brokerAdvertise string // a host without a port (the broker refuses one)
	adminBind       string
	adminUsername   string
	adminPassword   string
	tlsEnabled      bool
	tlsAdminEnabled *bool
	dataDir         string
}

// brokerBindDefault is broker.listener.bind's default in the broker's table.
const brokerBindDefault = brokerAddrDefault

// dialable turns a bind address into one to dial: an unspecified host
// (0.0.0.0, ::, empty) becomes loopback.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// brokerAddr is where to dial: the advertised host (broker.listener.advertise
// is a host only, as the broker's table checks) on the bind address's port,
// else the bind address made dialable.
func (f fileConfig) brokerAddr() string {
	if f.brokerAdvertise != "" {
		bind := f.brokerBind
		if bind == "" {
			bind = brokerBindDefault
		}
		if _, port, err := net.SplitHostPort(bind); err == nil {
			return net.JoinHostPort(f.brokerAdvertise, port)
		}
	}
	if f.brokerBind != "" {
		return dialable(f.brokerBind)
	}
	return ""
}

func (f fileConfig) adminURL() string {
	addr := f.adminBind
	if addr == "" {
		return ""
	}
	scheme := "http"
	// Admin HTTPS follows tls.enabled unless tls.admin_enabled says otherwise (SPEC 10).
	if f.tlsEnabled && (f.tlsAdminEnabled == nil || *f.tlsAdminEnabled) {
		scheme = "https"
	}
	return scheme + "://" + dialable(addr)
}

// caFile is the CA of a tls.enabled broker: the broker always keeps its
// material in <data_dir>/tls (generated on first start, or 'cert
// generate'), so the CA there is trusted when this machine can read it (a
// file for a broker elsewhere may name a data dir that is not here: then
// the local trust file or --ca-file / --pin-sha256 decide).
func (f fileConfig) caFile() string {
	if !f.tlsEnabled {
		return ""
	}
	dir := f.dataDir
	if dir == "" {
		dir = dataDirDefault
	}
	path := filepath.Join(dir, "tls", "ca.pem")
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// dataDirFor returns the --data-dir a local command uses: the flag, else the
// config file's server.data_dir, else the broker's default.
func (g *globals) dataDirFor(flagValue string) string {
	switch {
	case flagValue != "":
		return flagValue
	case g.dataDir != "":
		return g.dataDir
	}
	return dataDirDefault
}
