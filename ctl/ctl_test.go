package ctl

// The command line itself: --help everywhere, usage errors, flags around
// positional arguments, the config file reader and value precedence,
// completion scripts, and the local commands (cert, secret).

import (
	"crypto/x509"
	"encoding/pem"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/config"
)

func TestHelpOnEveryCommand(t *testing.T) {
	var paths [][]string
	walk(tree("fibrilctl"), nil, func(c *command, path []string) { paths = append(paths, path) })
	if len(paths) < 30 {
		t.Fatalf("only %d commands in the tree", len(paths))
	}
	for _, path := range paths {
		for _, help := range []string{"--help", "-h"} {
			args := append(append([]string{}, path...), help)
			code, stdout, stderr := runCtl(t, args, "", nil)
			if code != exitOK || !strings.HasPrefix(stdout, "Usage: fibrilctl") || stderr != "" {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
	}{
		{nil, "missing command"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"admin", "queuse"}, `did you mean "queues"?`},
		{[]string{"admin", "connections", "clsoe"}, `did you mean "close"?`},
		{[]string{"admin"}, "missing command"},
		{[]string{"admin", "queues", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"queue", "publish"}, "missing argument: want <topic>"},
		{[]string{"queue", "publish", "orders"}, "--message is required"},
		{[]string{"queue", "publish", "a", "b", "--message", "x"}, `unexpected argument "b"`},
		{[]string{"queue", "consume", "orders", "--count", "0"}, "--count must be"},
		{[]string{"queue", "declare", "orders", "--dlq", "custom"}, "--dlq custom needs --dlq-topic"},
		{[]string{"queue", "declare", "orders", "--dlq", "sometimes"}, `--dlq "sometimes"`},
		{[]string{"queue", "declare", "orders", "--partitions", "0"}, "--partitions must be"},
		{[]string{"admin", "queues", "--timeout", "soon"}, "--timeout"},
		{[]string{"admin", "queues", "--admin", "ftp://x"}, "--admin"},
		{[]string{"queue", "declare", "orders", "--broker", "nohostport"}, "--broker"},
		{[]string{"completion", "tcsh"}, `unknown shell "tcsh"`},
		{[]string{"cert", "issue", "@node"}, "reserved for nodes"},
		{[]string{"queue", "publish", "orders", "--message", "x", "--header", "novalue"}, "want KEY=VALUE"},
	}
	for _, c := range cases {
		code, _, stderr := runCtl(t, c.args, "", nil)
		if code != exitUsage || !strings.Contains(stderr, c.wantErr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, exitUsage, c.wantErr)
		}
	}
}

func TestParseInterleaved(t *testing.T) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	msg := fs.String("message", "", "")
	js := fs.Bool("json", false, "")
	pos, err := parseInterleaved(fs, []string{"orders", "--message", "hi", "extra", "--json", "--", "--message"})
	if err != nil {
		t.Fatal(err)
	}
	if *msg != "hi" || !*js || strings.Join(pos, "|") != "orders|extra|--message" {
		t.Fatalf("message %q json %v positional %q", *msg, *js, pos)
	}
}

// brokerConfig is a broker's whole config file (the broker's own loader
// accepts it: TestConfigFileIsTheBrokers): fibrilctl reads a few keys and
// skips the rest.
const brokerConfig = `
# a broker's whole config file: fibrilctl reads a few keys and skips the rest
[server]
data_dir = "DATADIR" # where the logs live

[broker.listener]
bind = "0.0.0.0:7000"

[admin]
listener.bind = '0.0.0.0:7001'
auth.enabled = true
auth.username = "ops"
auth.password = "p#ss \"quoted\""

[auth]
seed_users = [
  { name = "a", password = "]" },
  { name = "b", password = "x" },
]

[tls]
enabled = true

[log]
level = """
debug"""
`

func brokerConfigIn(t *testing.T) (text, dataDir string) {
	t.Helper()
	dataDir = t.TempDir()
	return strings.Replace(brokerConfig, "DATADIR", dataDir, 1), dataDir
}

// Every key fibrilctl reads is a key of the broker's table: a file that
// sets it also starts the broker (which refuses unknown keys).
func TestConfigKeysAreTheBrokers(t *testing.T) {
	known := map[string]bool{}
	for _, k := range config.Table() {
		known[k.Name] = true
	}
	for _, key := range configKeys {
		if !known[key] {
			t.Errorf("fibrilctl reads %s, which the broker's config table does not have (fibril serve refuses it)", key)
		}
	}
}

// The file of TestConfigFile is one the broker loads.
func TestConfigFileIsTheBrokers(t *testing.T) {
	text, _ := brokerConfigIn(t)
	path := filepath.Join(t.TempDir(), "fibril.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(config.Table(), config.Inputs{Args: []string{"--config", path}, Output: io.Discard}); err != nil {
		t.Fatalf("the broker refuses the test's config file: %v", err)
	}
}

func TestConfigFile(t *testing.T) {
	text, dataDir := brokerConfigIn(t)
	cfg, err := parseConfig(text)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.brokerAddr(); got != "127.0.0.1:7000" {
		t.Errorf("broker %q", got)
	}
	if got := cfg.adminURL(); got != "https://127.0.0.1:7001" {
		t.Errorf("admin %q", got)
	}
	if cfg.adminUsername != "ops" || cfg.adminPassword != `p#ss "quoted"` {
		t.Errorf("credentials %q/%q", cfg.adminUsername, cfg.adminPassword)
	}
	// The CA is trusted once the broker wrote it (its first start).
	if got := cfg.caFile(); got != "" {
		t.Errorf("ca file %q before the broker made one", got)
	}
	caFile := filepath.Join(dataDir, "tls", "ca.pem")
	if err := os.MkdirAll(filepath.Dir(caFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cfg.caFile(); got != caFile {
		t.Errorf("ca file %q, want %q", got, caFile)
	}
	if _, err := parseConfig("[tls]\nenabled = \"yes\"\n"); err == nil || !strings.Contains(err.Error(), "line 2: tls.enabled") {
		t.Errorf("a bad bool: %v", err)
	}
	if _, err := parseConfig("[broker.listener]\nbind = 7000\n"); err == nil || !strings.Contains(err.Error(), "broker.listener.bind") {
		t.Errorf("an unquoted address: %v", err)
	}
	// broker.listener.advertise is a host (the broker refuses a port): the
	// port is bind's, else the default bind's.
	if cfg, err := parseConfig("[broker.listener]\nbind = \"0.0.0.0:7002\"\nadvertise = \"broker.example\"\n"); err != nil || cfg.brokerAddr() != "broker.example:7002" {
		t.Errorf("advertise with bind's port: %q, %v", cfg.brokerAddr(), err)
	}
	if cfg, err := parseConfig("broker.listener.advertise = \"::1\"\n"); err != nil || cfg.brokerAddr() != "[::1]:9876" {
		t.Errorf("advertise with the default port: %q, %v", cfg.brokerAddr(), err)
	}
	// Keys the broker does not have are not read (the broker would refuse
	// the file anyway).
	if cfg, err := parseConfig("[admin.listener]\nbind = \"127.0.0.1:1\"\nadvertise = \"admin.example:2\"\n"); err != nil || cfg.adminURL() != "http://127.0.0.1:1" {
		t.Errorf("admin.listener.advertise read: %q, %v", cfg.adminURL(), err)
	}
}

// Precedence per value: flag > environment > config file > default.
func TestGlobalsPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fibril.toml")
	if err := os.WriteFile(path, []byte("[admin.auth]\nusername = \"fileuser\"\npassword = \"filepw\"\n[broker.listener]\nbind = \"127.0.0.1:7000\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	resolve := func(args []string, env map[string]string) *globals {
		t.Helper()
		g := &globals{}
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		g.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := g.resolve(Env{Getenv: func(k string) string { return env[k] }}); err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := resolve(nil, nil)
	if g.username.value != usernameDefault || g.broker.value != brokerAddrDefault || g.admin.value != adminURLDefault {
		t.Errorf("defaults: %q %q %q", g.username.value, g.broker.value, g.admin.value)
	}
	g = resolve(nil, map[string]string{envConfig: path})
	if g.adminUsername != "fileuser" || g.adminPassword != "filepw" || g.broker.value != "127.0.0.1:7000" {
		t.Errorf("file via $FIBRIL_CONFIG: %q %q %q", g.adminUsername, g.adminPassword, g.broker.value)
	}
	// The file's admin.auth.* are the admin listener's, not a wire user's.
	if g.username.value != usernameDefault || g.password.value != passwordDefault {
		t.Errorf("the wire user from admin.auth.*: %q %q", g.username.value, g.password.value)
	}
	g = resolve([]string{"--config", path}, map[string]string{envUsername: "envuser"})
	if g.adminUsername != "envuser" || g.adminPassword != "filepw" || g.username.value != "envuser" {
		t.Errorf("env over file: %q %q %q", g.adminUsername, g.adminPassword, g.username.value)
	}
	g = resolve([]string{"--config", path, "--username", "flaguser", "--broker", "h:1"}, map[string]string{envUsername: "envuser"})
	if g.username.value != "flaguser" || g.adminUsername != "flaguser" || g.broker.value != "h:1" {
		t.Errorf("flag over env and file: %q %q %q", g.username.value, g.adminUsername, g.broker.value)
	}
	code, _, stderr := runCtl(t, []string{"admin", "queues", "--config", filepath.Join(t.TempDir(), "missing.toml")}, "", nil)
	if code != exitUsage || !strings.Contains(stderr, "config file") {
		t.Errorf("a missing config file: exit %d, %q", code, stderr)
	}
}

func TestCompletionScripts(t *testing.T) {
	code, script, _ := runCtl(t, []string{"completion", "bash"}, "", nil)
	if code != 0 || !strings.Contains(script, "complete -o default -F _fibrilctl fibrilctl") {
		t.Fatalf("bash: exit %d\n%s", code, script)
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		file := filepath.Join(t.TempDir(), "c.bash")
		if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		for words, want := range map[string]string{
			"fibrilctl admin gl":                    "global-dlq",
			"fibrilctl admin global-dlq set --exp":  "--expected-version",
			"fibrilctl queue consume orders --exp":  "--expect",
			"fibrilctl q":                           "queue",
			"fibrilctl admin dlq redrive x --dry-r": "--dry-run",
		} {
			n := len(strings.Fields(words))
			if strings.HasSuffix(words, " ") {
				n++
			}
			cmd := exec.Command(bash, "-c", `source "$1"; COMP_WORDS=($2); COMP_CWORD=$3; _fibrilctl; echo "${COMPREPLY[@]}"`,
				"bash", file, words, strconv.Itoa(n-1))
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != want {
				t.Errorf("%q completes to %q (%v), want %q", words, out, err, want)
			}
		}
	}
	for _, shell := range []string{"zsh", "fish"} {
		code, script, _ := runCtl(t, []string{"completion", shell}, "", nil)
		if code != 0 || !strings.Contains(script, "fibrilctl") {
			t.Errorf("%s: exit %d\n%s", shell, code, script)
		}
	}
	_, fish, _ := runCtl(t, []string{"completion", "fish"}, "", nil)
	if !strings.Contains(fish, "__fish_seen_subcommand_from admin; and __fish_seen_subcommand_from dlq' -a redrive") {
		t.Errorf("fish lacks admin dlq redrive:\n%s", fish)
	}
}

func TestCertAndSecretCommands(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	code, out, stderr := runCtl(t, []string{"cert", "generate", "--data-dir", dataDir, "--san", "broker.example,10.0.0.7"}, "", nil)
	if code != 0 || !strings.Contains(out, "broker.example") || !strings.Contains(out, "10.0.0.7") {
		t.Fatalf("cert generate: exit %d\n%s%s", code, out, stderr)
	}
	code, fp, _ := runCtl(t, []string{"cert", "fingerprint", filepath.Join(dataDir, "tls", "ca.pem")}, "", nil)
	if code != 0 || !strings.Contains(out, "CA fingerprint (pin this): "+strings.TrimSpace(fp)) {
		t.Fatalf("cert fingerprint %q does not match generate's:\n%s", fp, out)
	}
	// generate again keeps the CA.
	_, again, _ := runCtl(t, []string{"cert", "generate", "--data-dir", dataDir}, "", nil)
	if !strings.Contains(again, strings.TrimSpace(fp)) {
		t.Fatalf("a second generate replaced the CA:\n%s", again)
	}
	if code, _, _ := runCtl(t, []string{"cert", "fingerprint", filepath.Join(dir, "none.pem")}, "", nil); code != exitNotFound {
		t.Errorf("fingerprint of a missing file: exit %d", code)
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.pem"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := runCtl(t, []string{"cert", "fingerprint", filepath.Join(dir, "junk.pem")}, "", nil); code != exitUsage {
		t.Errorf("fingerprint of junk: exit %d", code)
	}

	outDir := filepath.Join(dir, "out")
	code, out, stderr = runCtl(t, []string{"cert", "issue", "alice", "--data-dir", dataDir, "--out-dir", outDir}, "", nil)
	if code != 0 {
		t.Fatalf("cert issue: exit %d %s%s", code, out, stderr)
	}
	certPEM, err := os.ReadFile(filepath.Join(outDir, "alice.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(dataDir, "tls", "ca.pem"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the issued certificate does not verify as a client of the CA: %v", err)
	}
	if leaf.Subject.CommonName != "alice" || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "alice" {
		t.Fatalf("identity: CN %q DNS %v", leaf.Subject.CommonName, leaf.DNSNames)
	}
	if info, _ := os.Stat(filepath.Join(outDir, "alice.key")); info == nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("alice.key mode: %v", info)
	}
	if code, _, _ := runCtl(t, []string{"cert", "issue", "alice", "--data-dir", dataDir, "--out-dir", outDir}, "", nil); code != exitConflict {
		t.Errorf("issue over existing files: exit %d, want %d", code, exitConflict)
	}
	if code, _, _ := runCtl(t, []string{"cert", "issue", "alice", "--data-dir", dataDir, "--out-dir", outDir, "--force"}, "", nil); code != 0 {
		t.Errorf("issue --force: exit %d", code)
	}
	if code, _, stderr := runCtl(t, []string{"cert", "issue", "bob", "--data-dir", filepath.Join(dir, "empty"), "--out-dir", outDir}, "", nil); code != exitFailed || !strings.Contains(stderr, "no CA") {
		t.Errorf("issue without a CA: exit %d %q", code, stderr)
	}

	code, out, _ = runCtl(t, []string{"secret", "generate", "--data-dir", dataDir, "--show"}, "", nil)
	path := filepath.Join(dataDir, "cluster.secret")
	secret, err := os.ReadFile(path)
	if code != 0 || err != nil || len(strings.TrimSpace(string(secret))) != 64 || !strings.Contains(out, strings.TrimSpace(string(secret))) {
		t.Fatalf("secret generate: exit %d, %v, file %q, out %q", code, err, secret, out)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Fatalf("cluster.secret mode %v", info.Mode().Perm())
	}
	code, out, _ = runCtl(t, []string{"secret", "generate", "--data-dir", dataDir}, "", nil)
	if kept, _ := os.ReadFile(path); code != exitConflict || string(kept) != string(secret) {
		t.Fatalf("a second generate: exit %d, secret replaced: %v", code, string(kept) != string(secret))
	}
	code, out, _ = runCtl(t, []string{"secret", "generate", "--data-dir", dataDir, "--force"}, "", nil)
	if fresh, _ := os.ReadFile(path); code != 0 || string(fresh) == string(secret) || strings.Contains(out, strings.TrimSpace(string(fresh))) {
		t.Fatalf("generate --force: exit %d, replaced %v, printed without --show: %q", code, string(fresh) != string(secret), out)
	}
}
