package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/io/broker"
)

// load runs Load over the real table with a file (when text is not empty)
// at /cfg/fibril.toml.
func load(t *testing.T, file string, environ []string, args ...string) (*Config, error) {
	t.Helper()
	in := Inputs{Args: args, Environ: environ, Output: io.Discard,
		ReadFile: func(path string) ([]byte, error) {
			if path == "/cfg/fibril.toml" && file != "" {
				return []byte(file), nil
			}
			return nil, os.ErrNotExist
		}}
	if file != "" {
		in.Args = append([]string{"--config", "/cfg/fibril.toml"}, args...)
	}
	return Load(Table(), in)
}

func mustLoad(t *testing.T, file string, environ []string, args ...string) *Config {
	t.Helper()
	c, err := load(t, file, environ, args...)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

// wantError checks Load fails with a config.Error containing every part.
func wantError(t *testing.T, err error, parts ...string) {
	t.Helper()
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Load error = %v, want a *config.Error", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error does not mention %q:\n%v", p, err)
		}
	}
}

func TestDefaultsAreTheBrokersDefaults(t *testing.T) {
	c := mustLoad(t, "", nil)
	if got, want := c.Broker(broker.DefaultConfig()), broker.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("no source set, yet Broker() differs from broker.DefaultConfig():\n got %+v\nwant %+v", got, want)
	}
	for _, s := range c.Settings() {
		if s.Source != SourceDefault || s.Origin != "" {
			t.Fatalf("%s: source %s %q with nothing set", s.Key.Name, s.Source, s.Origin)
		}
	}
	if c.String("broker.listener.bind") != "127.0.0.1:9876" || c.String("admin.listener.bind") != "127.0.0.1:8081" ||
		!c.Bool("broker.listener.quic") || c.Bool("tls.enabled") || c.String("log.level") != "info" {
		t.Fatal("serve's own defaults changed")
	}
}

// Every flag fibril serve had before the table keeps its name.
func TestEveryOldFlagIsAKey(t *testing.T) {
	old := []string{"data-dir", "listen", "tcp-tls", "no-quic", "advertise", "reconnect-grace-ms", "lease-ms",
		"max-retries", "resident-payload-mb", "snapshot-entries-min", "handshake-timeout", "auth-timeout",
		"max-connections", "log-level", "pprof-addr", "admin-listen", "user"}
	flags := map[string]string{}
	for _, k := range Table() {
		if k.Flag != "" {
			flags[k.Flag] = k.Name
		}
	}
	for _, f := range old {
		if flags[f] == "" {
			t.Errorf("flag --%s is no longer a key's flag", f)
		}
	}
}

func TestOldFlagSpellingsStillParse(t *testing.T) {
	c := mustLoad(t, "", nil, "--data-dir", "/d", "--listen", "127.0.0.1:1", "--tcp-tls", "--no-quic",
		"--advertise", "h.example", "--reconnect-grace-ms", "0", "--lease-ms=2000", "--max-retries", "3",
		"--resident-payload-mb", "0", "--snapshot-entries-min", "7", "--handshake-timeout", "2s",
		"--auth-timeout", "1500", "--max-connections", "9", "--log-level", "WARN", "--pprof-addr", "127.0.0.1:6060",
		"--admin-listen=", "--user", "a:b", "--user", "c:d:e")
	bc := c.Broker(broker.DefaultConfig())
	switch {
	case bc.DataDir != "/d" || c.String("broker.listener.bind") != "127.0.0.1:1" || !c.Bool("tls.enabled"):
		t.Fatal("data dir, listen or tcp-tls")
	case c.Bool("broker.listener.quic"):
		t.Fatal("--no-quic left QUIC on")
	case c.String("broker.listener.advertise") != "h.example" || bc.ReconnectGraceMs != 0 || bc.Partition.LeaseMs != 2000:
		t.Fatal("advertise, grace or lease")
	case bc.Partition.MaxRetriesDefault != 3 || bc.ResidentPayloadBytesMax != 0 || bc.SnapshotEntriesMin != 7:
		t.Fatal("retries, resident payload or snapshot floor")
	case bc.HandshakeTimeout.Milliseconds() != 2000 || bc.AuthTimeout.Milliseconds() != 1500 || bc.ConnectionsMax != 9:
		t.Fatalf("timeouts %v %v or connections", bc.HandshakeTimeout, bc.AuthTimeout)
	case c.String("log.level") != "warn" || c.String("debug.pprof_addr") != "127.0.0.1:6060" || c.String("admin.listener.bind") != "":
		t.Fatal("log level, pprof or admin listen")
	case !reflect.DeepEqual(bc.Users, []broker.UserSeed{{Name: "a", Password: "b"}, {Name: "c", Password: "d:e"}}):
		t.Fatalf("users %+v", bc.Users)
	}
	if s := c.Get("connection.handshake_timeout_ms"); s.Source != SourceFlag || s.Origin != "--handshake-timeout" {
		t.Fatalf("source %s", s.SourceText())
	}
}

// A later flag wins over an earlier one (the e2e harness relies on it).
func TestLaterFlagWins(t *testing.T) {
	c := mustLoad(t, "", nil, "--admin-listen=", "--admin-listen", "127.0.0.1:0")
	if c.String("admin.listener.bind") != "127.0.0.1:0" {
		t.Fatal(c.String("admin.listener.bind"))
	}
}

func TestFileTablesAndDottedKeysAreTheSame(t *testing.T) {
	tables := mustLoad(t, "[delivery]\ninflight_ttl_ms = 1234\n[broker.listener]\nbind = \"127.0.0.1:7\"\n", nil)
	dotted := mustLoad(t, "delivery.inflight_ttl_ms = 1234\nbroker.listener.bind = \"127.0.0.1:7\"\n", nil)
	for _, c := range []*Config{tables, dotted} {
		s := c.Get("delivery.inflight_ttl_ms")
		if s.Value.Int != 1234 || s.Source != SourceFile || s.Origin != "/cfg/fibril.toml" || c.String("broker.listener.bind") != "127.0.0.1:7" {
			t.Fatalf("got %+v from %s", s.Value, s.SourceText())
		}
	}
	if tables.File != "/cfg/fibril.toml" || tables.FileFrom != "--config" {
		t.Fatalf("file %q from %q", tables.File, tables.FileFrom)
	}
}

func TestConfigFileFromEnvAndFlagWins(t *testing.T) {
	files := map[string]string{"/a.toml": "log.level = \"debug\"\n", "/b.toml": "log.level = \"error\"\n"}
	read := func(p string) ([]byte, error) {
		if f, ok := files[p]; ok {
			return []byte(f), nil
		}
		return nil, os.ErrNotExist
	}
	c, err := Load(Table(), Inputs{Environ: []string{"FIBRIL_CONFIG=/a.toml"}, ReadFile: read, Output: io.Discard})
	if err != nil || c.String("log.level") != "debug" || c.FileFrom != ConfigEnv {
		t.Fatalf("FIBRIL_CONFIG: %v %v", err, c)
	}
	c, err = Load(Table(), Inputs{Args: []string{"--config", "/b.toml"}, Environ: []string{"FIBRIL_CONFIG=/a.toml"}, ReadFile: read, Output: io.Discard})
	if err != nil || c.String("log.level") != "error" || c.File != "/b.toml" {
		t.Fatalf("--config over FIBRIL_CONFIG: %v", err)
	}
	_, err = Load(Table(), Inputs{Args: []string{"--config", "/missing.toml"}, ReadFile: read, Output: io.Discard})
	wantError(t, err, "/missing.toml", "--config")
}

func TestFileParseErrors(t *testing.T) {
	_, err := load(t, "delivery.inflight_ttl_ms = 1\n[broker\n", nil)
	wantError(t, err, "/cfg/fibril.toml", "line 3", "TOML syntax")
	_, err = load(t, "[delivery]\ninflight_ttl_ms = \"30s\"\n", nil)
	wantError(t, err, "line 2: key delivery.inflight_ttl_ms", "want a whole number of milliseconds", "a string")
	_, err = load(t, "delivery.inflight_ttl_ms = 1.5\n", nil)
	wantError(t, err, "delivery.inflight_ttl_ms", "1.5")
	_, err = load(t, "tls.enabled = \"yes\"\n", nil)
	wantError(t, err, "tls.enabled", "want true or false")
	_, err = load(t, "broker.listener = \"127.0.0.1:1\"\n", nil)
	wantError(t, err, "broker.listener is a table", "bind, advertise, quic")
	_, err = load(t, "auth.seed_users = [{name = \"a\", pass = \"b\"}]\n", nil)
	wantError(t, err, "auth.seed_users", "unknown field pass")
	_, err = load(t, "auth.seed_users = \"a:b\"\n", nil)
	wantError(t, err, "auth.seed_users", "want a list")
}

func TestUnknownFileKeysNameTheNearest(t *testing.T) {
	_, err := load(t, "[delivery]\ninflight_tl_ms = 5\nlease_ms = 5\n[logs]\nlevel = \"debug\"\n", nil)
	wantError(t, err, "3 problems",
		"fibril.toml: line 2: unknown key delivery.inflight_tl_ms; did you mean delivery.inflight_ttl_ms?",
		"fibril.toml: line 3: unknown key delivery.lease_ms; did you mean delivery.inflight_ttl_ms?", // the flag's name
		"fibril.toml: line 5: unknown key logs.level; did you mean log.level?")
	_, err = load(t, "log.level = \"info\"\n[broker.listener]\n\"bnid\" = \"x\"\n", nil)
	wantError(t, err, "line 3: unknown key broker.listener.bnid; did you mean broker.listener.bind?")
}

func TestEnvValuesAndUnknownVariables(t *testing.T) {
	c := mustLoad(t, "", []string{"FIBRIL_DELIVERY_INFLIGHT_TTL_MS=777", "FIBRIL_MUTANT=x", "FIBRIL_STORAGE_BACKEND=sim",
		"FIBRIL_E2E_MEMBER_ADDR=y", "FIBRIL_CLUSTER_SECRET=z", "PATH=/bin", "FIBRIL_ADMIN_LISTENER_BIND=",
		"FIBRIL_USERNAME=ctl", "FIBRIL_PASSWORD=ctl"})
	if s := c.Get("delivery.inflight_ttl_ms"); s.Value.Int != 777 || s.SourceText() != "env FIBRIL_DELIVERY_INFLIGHT_TTL_MS" {
		t.Fatalf("%+v %s", s.Value, s.SourceText())
	}
	if s := c.Get("admin.listener.bind"); s.Value.Str != "" || s.Source != SourceEnv {
		t.Fatal("an empty variable must set an empty string (admin listener off)")
	}
	if len(c.Ignored) != 6 {
		t.Fatalf("ignored %v", c.Ignored)
	}
	_, err := load(t, "", []string{"FIBRIL_DELIVERY_INFLIGHT_TTL=5", "FIBRIL_LOG_LEVL=debug", "FIBRIL_LISTEN=127.0.0.1:1"})
	wantError(t, err, "3 problems",
		"unknown variable FIBRIL_DELIVERY_INFLIGHT_TTL; did you mean FIBRIL_DELIVERY_INFLIGHT_TTL_MS (key delivery.inflight_ttl_ms)?",
		"unknown variable FIBRIL_LOG_LEVL; did you mean FIBRIL_LOG_LEVEL",
		"FIBRIL_LISTEN; the variable of flag --listen is FIBRIL_BROKER_LISTENER_BIND")
	_, err = load(t, "", []string{"FIBRIL_CONNECTION_RECONNECT_GRACE_MS=5s"})
	wantError(t, err, "FIBRIL_CONNECTION_RECONNECT_GRACE_MS=5s", "connection.reconnect_grace_ms", "want a whole number of milliseconds")
}

func TestValidationNamesKeySourceAndFix(t *testing.T) {
	_, err := load(t, "", []string{"FIBRIL_DELIVERY_INFLIGHT_TTL_MS=0"})
	wantError(t, err, "delivery.inflight_ttl_ms = 0 (from env FIBRIL_DELIVERY_INFLIGHT_TTL_MS)", "at least 1 ms", "set a whole number from 1")
	_, err = load(t, "[broker.listener]\nbind = \"localhost\"\n", nil)
	wantError(t, err, `broker.listener.bind = "localhost" (from file /cfg/fibril.toml)`, "want HOST:PORT")
	_, err = load(t, "", nil, "--data-dir", " ")
	wantError(t, err, "server.data_dir", "flag --data-dir", "must not be empty")
	_, err = load(t, "", nil, "--log-format", "yaml")
	wantError(t, err, `log.format = "yaml" (from flag --log-format)`, "want one of text, json")
	_, err = load(t, "", nil, "--listen", "127.0.0.1:0")
	wantError(t, err, "broker.listener.bind", "port must be a number from 1")
	_, err = load(t, "", nil, "--max-retries", "-1")
	wantError(t, err, "delivery.default_max_retries = -1", "at least 0")
	_, err = load(t, "", nil, "--user", "a:b", "--user", "a:c")
	wantError(t, err, "auth.seed_users", "user a is listed twice")
	// A relation only the broker knows: the outbox must hold one frame.
	_, err = load(t, "connection.outbox_max_bytes = 2048\n", nil)
	wantError(t, err, "the broker refuses this configuration", "outbox", "connection.outbox_max_bytes = 2048 (file /cfg/fibril.toml)")
	// Several problems are reported together.
	_, err = load(t, "", []string{"FIBRIL_LOG_LEVEL=loud"}, "--lease-ms", "0")
	wantError(t, err, "2 problems", "log.level", "delivery.inflight_ttl_ms")
}

func TestBadFlags(t *testing.T) {
	_, err := load(t, "", nil, "--lease-ms", "soon")
	wantError(t, err, "lease-ms", "want a whole number")
	_, err = load(t, "", nil, "--nope")
	wantError(t, err, "nope", "--help")
	_, err = load(t, "", nil, "extra")
	wantError(t, err, `unexpected argument "extra"`)
	_, err = load(t, "", nil, "--user", "nopassword")
	wantError(t, err, "NAME:PASSWORD")
	// The flag package would quote the value: a password stays out.
	_, err = load(t, "", nil, "--user", ":s3cret")
	wantError(t, err, "flag --user <redacted>: want NAME:PASSWORD")
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("the password is in the message: %v", err)
	}
	if _, err := load(t, "", nil, "--help"); !errors.Is(err, ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
}

func TestSeedUsersFromEnv(t *testing.T) {
	c := mustLoad(t, "", []string{"FIBRIL_AUTH_SEED_USERS=a:1,b:2", "FIBRIL_AUTH_USERNAME=c", "FIBRIL_AUTH_PASSWORD=3"})
	want := []broker.UserSeed{{Name: "a", Password: "1"}, {Name: "b", Password: "2"}, {Name: "c", Password: "3"}}
	if s := c.Get("auth.seed_users"); !reflect.DeepEqual(s.Value.Users, want) || s.Source != SourceEnv {
		t.Fatalf("%+v from %s", s.Value.Users, s.SourceText())
	}
	c = mustLoad(t, "", []string{"FIBRIL_AUTH_USERNAME=c", "FIBRIL_AUTH_PASSWORD=3"})
	if s := c.Get("auth.seed_users"); len(s.Value.Users) != 1 || s.Origin != "FIBRIL_AUTH_USERNAME/FIBRIL_AUTH_PASSWORD" {
		t.Fatalf("%+v from %s", s.Value.Users, s.SourceText())
	}
	_, err := load(t, "", []string{"FIBRIL_AUTH_USERNAME=c"})
	wantError(t, err, "FIBRIL_AUTH_USERNAME and FIBRIL_AUTH_PASSWORD seed one user together")
	// A flag list replaces the env list whole.
	c = mustLoad(t, "", []string{"FIBRIL_AUTH_SEED_USERS=a:1"}, "--user", "z:9")
	if s := c.Get("auth.seed_users"); len(s.Value.Users) != 1 || s.Value.Users[0].Name != "z" {
		t.Fatalf("%+v", s.Value.Users)
	}
}

func TestPrintRedactsAndRoundTrips(t *testing.T) {
	c := mustLoad(t, "auth.seed_users = [\"alice:s3cret-file\"]\n", []string{"FIBRIL_AUTH_USERNAME=bob", "FIBRIL_AUTH_PASSWORD=s3cret-env"},
		"--lease-ms", "4321", "--log-format", "json", "--user", "carol:s3cret-flag")
	var text, js bytes.Buffer
	if err := c.Print(&text); err != nil {
		t.Fatal(err)
	}
	if err := c.PrintJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{text.String(), js.String(), errText(load(t, "", nil, "--user", "x:s3cret-dup", "--user", "x:s3cret-dup"))} {
		if strings.Contains(out, "s3cret") {
			t.Fatalf("a password is printed:\n%s", out)
		}
	}
	if nd := strings.Join(c.NonDefault(), "; "); strings.Contains(nd, "s3cret") || !strings.Contains(nd, "delivery.inflight_ttl_ms=4321 (flag --lease-ms)") {
		t.Fatalf("NonDefault: %s", nd)
	}
	if !strings.Contains(text.String(), `auth.seed_users = [{name = "carol", password = "<redacted>"}]`) ||
		!strings.Contains(text.String(), "# flag --user") {
		t.Fatalf("users line:\n%s", text.String())
	}
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	if len(lines) != 2+len(Table()) {
		t.Fatalf("%d lines for %d keys:\n%s", len(lines), len(Table()), text.String())
	}
	var doc struct {
		Values []PrintedValue `json:"values"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil || len(doc.Values) != len(Table()) {
		t.Fatalf("JSON: %v, %d values", err, len(doc.Values))
	}
	for _, v := range doc.Values {
		if v.Key == "delivery.inflight_ttl_ms" && (v.Value != float64(4321) || v.Source != "flag" || v.Origin != "--lease-ms") {
			t.Fatalf("JSON lease %+v", v)
		}
	}
	// The text form is a config file: without the users line, loading it
	// gives every value back, now from the file.
	var kept []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "auth.seed_users") {
			kept = append(kept, l)
		}
	}
	back := mustLoad(t, strings.Join(kept, "\n")+"\n", nil)
	for _, s := range c.Settings() {
		if s.Key.Name == "auth.seed_users" {
			continue
		}
		b := back.Get(s.Key.Name)
		if !reflect.DeepEqual(b.Value, s.Value) || b.Source != SourceFile {
			t.Fatalf("%s: %+v from %s after the round trip, want %+v", s.Key.Name, b.Value, b.SourceText(), s.Value)
		}
	}
}

func errText(_ *Config, err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestPrintConfigFlag(t *testing.T) {
	for args, want := range map[string]string{"--print-config": "text", "--print-config=json": "json", "--print-config=text": "text", "": ""} {
		c := mustLoad(t, "", nil, strings.Fields(args)...)
		if c.PrintConfig != want {
			t.Fatalf("%q: %q", args, c.PrintConfig)
		}
	}
	_, err := load(t, "", nil, "--print-config=yaml")
	wantError(t, err, "--print-config=json")
}

// SPEC 9's FIBRIL_QUEUE_IDLE_EVICT_AFTER_MS: an alias variable that also
// turns cleanup on (an implied key).
func TestEnvAliasAndImplies(t *testing.T) {
	table := Table() // the real rows of SPEC 9's idle cleanup
	run := func(environ []string, args ...string) *Config {
		t.Helper()
		c, err := Load(table, Inputs{Args: args, Environ: environ, Output: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := run([]string{"FIBRIL_QUEUE_IDLE_EVICT_AFTER_MS=1000"})
	if c.Int("idle_queue_cleanup.evict_after_ms") != 1000 || !c.Bool("idle_queue_cleanup.enabled") ||
		c.Get("idle_queue_cleanup.enabled").SourceText() != "env FIBRIL_QUEUE_IDLE_EVICT_AFTER_MS (implied)" {
		t.Fatalf("alias: %d %v %s", c.Int("idle_queue_cleanup.evict_after_ms"), c.Bool("idle_queue_cleanup.enabled"),
			c.Get("idle_queue_cleanup.enabled").SourceText())
	}
	// An explicit value at the same source wins over the implied one, and a
	// higher source wins over both.
	if c := run([]string{"FIBRIL_QUEUE_IDLE_EVICT_AFTER_MS=1000", "FIBRIL_IDLE_QUEUE_CLEANUP_ENABLED=false"}); c.Bool("idle_queue_cleanup.enabled") {
		t.Fatal("explicit false at the same source lost to the implied true")
	}
	if c := run([]string{"FIBRIL_QUEUE_IDLE_EVICT_AFTER_MS=1000"}, "--idle-cleanup=false"); c.Bool("idle_queue_cleanup.enabled") {
		t.Fatal("a flag lost to an implied env value")
	}
	if c := run(nil); c.Bool("idle_queue_cleanup.enabled") || c.Int("idle_queue_cleanup.evict_after_ms") != 600000 {
		t.Fatal("defaults")
	}
	_, err := Load(table, Inputs{Environ: []string{"FIBRIL_QUEUE_IDLE_EVICT_AFTER_MS=1000", "FIBRIL_IDLE_QUEUE_CLEANUP_EVICT_AFTER_MS=5"}, Output: io.Discard})
	wantError(t, err, "both set key idle_queue_cleanup.evict_after_ms")
}

func TestTableIsWellFormed(t *testing.T) {
	for _, k := range Table() {
		if k.Doc == "" {
			t.Errorf("%s has no Doc", k.Name)
		}
		if k.Kind == KindInt && k.Max <= k.Min {
			t.Errorf("%s: Max %d <= Min %d", k.Name, k.Max, k.Min)
		}
		if k.Get == nil && k.Kind == KindInt && (k.Default.Int < k.Min || k.Default.Int > k.Max) {
			t.Errorf("%s: default out of range", k.Name)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a table with a repeated flag was accepted")
		}
	}()
	checkTable(append(Table(), Key{Name: "x.y", Flag: "listen"}))
}

func TestLoggerFormatAndLiveLevel(t *testing.T) {
	c := mustLoad(t, "", nil, "--log-format", "json", "--log-level", "warn")
	var out bytes.Buffer
	logger, level := c.NewLogger(&out)
	logger.Info("hidden")
	logger.Warn("shown", "k", 1)
	level.Set(slog.LevelDebug)
	logger.Debug("now shown")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %q", out.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || rec["msg"] != "shown" || rec["level"] != "WARN" {
		t.Fatalf("not a JSON record: %q (%v)", lines[0], err)
	}
	if _, err := ParseLevel("loud"); err == nil {
		t.Fatal("ParseLevel accepted loud")
	}
	if LevelName(slog.LevelWarn) != "warn" {
		t.Fatal(LevelName(slog.LevelWarn))
	}
}

func TestNearestKeyAndEditDistance(t *testing.T) {
	if d := editDistance("kitten", "sitting"); d != 3 {
		t.Fatal(d)
	}
	if d := editDistance("", "abc"); d != 3 {
		t.Fatal(d)
	}
	if got := nearestKey("connection.reconect_grace_ms", Table()); got != "connection.reconnect_grace_ms" {
		t.Fatal(got)
	}
	if got := nearestKey("anything.max_connections", Table()); got != "connection.max_connections" {
		t.Fatal(got)
	}
}

func TestExtraFlagsParseBesideTheTable(t *testing.T) {
	var temporary int64
	c, err := Load(Table(), Inputs{Args: []string{"--lease-ms", "9", "--temporary-ms", "42"}, Output: io.Discard,
		ExtraFlags: func(fs *flag.FlagSet) { fs.Int64Var(&temporary, "temporary-ms", 0, "a setting that is not a row yet") }})
	if err != nil || temporary != 42 || c.Int("delivery.inflight_ttl_ms") != 9 {
		t.Fatalf("%v, temporary %d", err, temporary)
	}
}

// docs/configuration.md lists every key with its variable and flag.
func TestDocsListEveryKey(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Table() {
		var row string
		for _, line := range strings.Split(string(doc), "\n") {
			if strings.HasPrefix(line, "| `"+k.Name+"` |") {
				row = line
			}
		}
		if row == "" {
			t.Errorf("docs/configuration.md has no row for %s", k.Name)
			continue
		}
		if !strings.Contains(row, "`"+k.EnvName()+"`") || k.Flag != "" && !strings.Contains(row, "`--"+k.Flag+"`") {
			t.Errorf("the row of %s lacks its variable %s or flag --%s", k.Name, k.EnvName(), k.Flag)
		}
	}
}
