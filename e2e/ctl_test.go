package e2e

// fibrilctl against a real `fibril serve` (docs/fibrilctl.md): queue
// declare / publish / consume over TCP and QUIC, the admin commands through
// the admin listener, the local cert and secret commands, help, completion
// and the exit codes scripts branch on. Both spellings run: the fibrilctl
// binary and `fibril ctl`.
//
// The admin commands are a table (ctlAdminCases): a new endpoint on main gets
// its command checked by adding a row.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	ctlBinOnce sync.Once
	ctlBin     string
	ctlBinErr  error
)

// fibrilctlBin builds cmd/fibrilctl once, beside the fibril binary (removed
// with it by TestMain).
func fibrilctlBin(t *testing.T) string {
	t.Helper()
	ctlBinOnce.Do(func() {
		ctlBin = filepath.Join(filepath.Dir(fibrilBin), "fibrilctl")
		out, err := exec.Command("go", "build", "-o", ctlBin, "../cmd/fibrilctl").CombinedOutput()
		if err != nil {
			ctlBinErr = err
			ctlBin = string(out)
		}
	})
	if ctlBinErr != nil {
		t.Fatalf("building fibrilctl: %v\n%s", ctlBinErr, ctlBin)
	}
	return ctlBin
}

// ctlResult is one fibrilctl run.
type ctlResult struct {
	code           int
	stdout, stderr string
}

// ctlTimeout bounds one fibrilctl run: every command must end on its own
// (a hang is a failure, not a slow test).
const ctlTimeout = 60 * time.Second

// runCtlArgs runs bin with args and extra environment; bin is the fibrilctl
// binary, or fibrilBin with "ctl" as its first argument.
func runCtlArgs(t *testing.T, env []string, stdin string, bin string, args ...string) ctlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	// The user's own config must not leak into the test.
	cmd.Env = append(os.Environ(), "FIBRIL_CONFIG=", "FIBRIL_USERNAME=", "FIBRIL_PASSWORD=")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not end within %v\nstdout: %s\nstderr: %s", bin, args, ctlTimeout, stdout.String(), stderr.String())
	}
	code := 0
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return ctlResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// ctlTarget is a broker the commands talk to.
type ctlTarget struct {
	s        *server
	adminURL string
}

// startCtlServer starts a broker with its admin listener on a free port.
func startCtlServer(t *testing.T, extra ...string) ctlTarget {
	t.Helper()
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s := startServer(t, t.TempDir(), append([]string{"--admin-listen", adminAddr}, extra...)...)
	base := "http://" + adminAddr
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == 200 })
	return ctlTarget{s: s, adminURL: base}
}

// ctl runs fibrilctl against target; want is the exit code expected.
func (c ctlTarget) ctl(t *testing.T, want int, args ...string) ctlResult {
	t.Helper()
	full := append([]string{"--broker", c.s.addr(), "--admin", c.adminURL}, args...)
	r := runCtlArgs(t, nil, "", fibrilctlBin(t), full...)
	if r.code != want {
		t.Fatalf("fibrilctl %v: exit %d, want %d\nstdout: %s\nstderr: %s\nserver log:\n%s",
			args, r.code, want, r.stdout, r.stderr, c.s.log.String())
	}
	return r
}

func mustContain(t *testing.T, what, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(text, s) {
			t.Fatalf("%s lacks %q:\n%s", what, s, text)
		}
	}
}

var publishedRE = regexp.MustCompile(`published to (\S+) partition (\d+) offset (\d+)`)

func TestCtlQueueDeclarePublishConsume(t *testing.T) {
	c := startCtlServer(t)

	r := c.ctl(t, 0, "queue", "declare", "orders", "--partitions", "3", "--max-retries", "2",
		"--dlq", "custom", "--dlq-topic", "orders-dead", "--ttl-ms", "600000")
	mustContain(t, "declare", r.stdout, "declared orders/default with 3 partition(s)")
	// Declaring again keeps the partition count.
	r = c.ctl(t, 0, "queue", "declare", "orders", "--partitions", "5")
	mustContain(t, "re-declare", r.stdout, "with 3 partition(s)")

	// A keyed publish lands on the same partition every time (FNV-1a of
	// customer-1 mod 3 is 2: not the partition a broken report would print).
	var partitions []string
	for i := range 3 {
		r = c.ctl(t, 0, "queue", "publish", "orders", "--message", "hello "+strconv.Itoa(i), "--partition-key", "customer-1",
			"--header", "source=e2e")
		m := publishedRE.FindStringSubmatch(r.stdout)
		if m == nil || m[1] != "orders/default" || m[3] != strconv.Itoa(i) {
			t.Fatalf("publish %d printed %q", i, r.stdout)
		}
		partitions = append(partitions, m[2])
	}
	if partitions[0] != partitions[1] || partitions[1] != partitions[2] {
		t.Fatalf("one partition key went to partitions %v", partitions)
	}

	r = c.ctl(t, 0, "queue", "consume", "orders", "--count", "3", "--prefetch", "4", "--json")
	var consumed struct {
		Messages []struct {
			Partition uint32            `json:"partition"`
			Offset    uint64            `json:"offset"`
			Text      string            `json:"text"`
			Headers   map[string]string `json:"headers"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &consumed); err != nil || len(consumed.Messages) != 3 {
		t.Fatalf("consume --json: %v\n%s", err, r.stdout)
	}
	for i, m := range consumed.Messages {
		if m.Text != "hello "+strconv.Itoa(i) || strconv.Itoa(int(m.Partition)) != partitions[0] || m.Headers["source"] != "e2e" {
			t.Fatalf("message %d: %+v", i, m)
		}
	}
	// They were completed: nothing is left.
	r = c.ctl(t, 1, "queue", "consume", "orders", "--timeout-ms", "300")
	mustContain(t, "consume of an empty queue", r.stderr, "got 0 of 1 messages from orders/default within 300 ms")

	// --expect: a match exits 0; a mismatch exits 1 and leaves the message
	// unacked, so a later consume still gets it.
	c.ctl(t, 0, "queue", "publish", "orders", "--message", "ping")
	r = c.ctl(t, 0, "queue", "consume", "orders", "--expect", "ping")
	mustContain(t, "consume --expect", r.stdout, ": ping")
	c.ctl(t, 0, "queue", "publish", "jobs", "--message", "pong")
	r = c.ctl(t, 1, "queue", "consume", "jobs", "--expect", "ping")
	mustContain(t, "consume --expect mismatch", r.stderr, `is "pong", expected "ping" (left unacked)`)
	// Unacked, it comes back once the broker lets go of the closed session
	// (its reconnect grace, then the lease): wait for it, however long.
	r = c.ctl(t, 0, "queue", "consume", "jobs", "--expect", "pong", "--timeout-ms", "30000")
	mustContain(t, "consume after a mismatch", r.stdout, "jobs/default partition 0 offset 0: pong")

	// Groups are separate namespaces; QUIC reaches the same queues; `fibril
	// ctl` is the same program.
	c.ctl(t, 0, "queue", "publish", "orders", "--group", "eu", "--message", "bonjour", "--quic")
	r = runCtlArgs(t, nil, "", fibrilBin, "ctl", "--broker", c.s.addr(), "queue", "consume", "orders", "--group", "eu", "--expect", "bonjour")
	if r.code != 0 {
		t.Fatalf("fibril ctl queue consume: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "fibril ctl consume", r.stdout, "orders/eu partition 0 offset 0: bonjour")
}

// ctlAdminCase is one admin command against a live broker.
type ctlAdminCase struct {
	name string
	// setup are fibrilctl commands run first, each expected to exit 0
	// (declares, publishes the command then looks at).
	setup    [][]string
	args     []string
	wantExit int
	wantOut  []string // substrings of stdout
	wantErr  []string // substrings of stderr
	// wantJSON, when set, decodes stdout (the command runs with --json) and
	// checks it.
	wantJSON func(t *testing.T, v map[string]any)
}

// ctlAdminCases are the admin commands whose endpoints exist on main. After
// a merge brings more endpoints, add their rows here.
var ctlAdminCases = []ctlAdminCase{
	{name: "audit table", setup: [][]string{{"queue", "declare", "audited"}},
		args: []string{"admin", "audit"}, wantOut: []string{"SEQ", "ACTION"}},
	{name: "audit json", args: []string{"admin", "audit", "--limit", "5", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			if _, ok := v["entries"].([]any); !ok {
				t.Fatalf("no entries list: %v", v)
			}
		}},
	{name: "audit bad parameter", args: []string{"admin", "audit", "--limit", "100000"}, wantExit: 2,
		wantErr: []string{"bad_parameter", "limit=100000"}},
}

func TestCtlAdminCommands(t *testing.T) {
	c := startCtlServer(t)
	for _, tc := range ctlAdminCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range tc.setup {
				c.ctl(t, 0, args...)
			}
			r := c.ctl(t, tc.wantExit, tc.args...)
			mustContain(t, "stdout", r.stdout, tc.wantOut...)
			mustContain(t, "stderr", r.stderr, tc.wantErr...)
			if tc.wantJSON != nil {
				var v map[string]any
				if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
					t.Fatalf("--json printed no JSON object: %v\n%s", err, r.stdout)
				}
				tc.wantJSON(t, v)
			}
		})
	}
}

// The exit codes of docs/fibrilctl.md, each from a real failure.
func TestCtlExitCodes(t *testing.T) {
	c := startCtlServer(t)
	nobody := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cases := []struct {
		name    string
		args    []string
		want    int
		wantErr string
	}{
		{"unknown flag", []string{"queue", "publish", "orders", "--message", "x", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"unknown command", []string{"queue", "pubish"}, 2, `did you mean "publish"?`},
		{"missing argument", []string{"queue", "consume"}, 2, "missing argument"},
		{"bad topic name", []string{"queue", "publish", "Bad Name", "--message", "x"}, 2, "invalid name"},
		{"wrong password", []string{"--password", "wrong", "queue", "publish", "orders", "--message", "x"}, 5, "authentication failed"},
		{"broker unreachable", []string{"--broker", nobody, "queue", "publish", "orders", "--message", "x"}, 6, "connection refused"},
		{"broker unreachable over QUIC", []string{"--broker", nobody, "--quic", "--timeout", "2s", "queue", "declare", "orders"}, 6, ""},
		{"admin unreachable", []string{"--admin", "http://" + nobody, "admin", "audit"}, 6, "cannot reach the admin API"},
		{"consume gets too few", []string{"queue", "consume", "empty", "--timeout-ms", "200"}, 1, "got 0 of 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.ctl(t, tc.want, tc.args...)
			mustContain(t, "stderr", r.stderr, tc.wantErr)
		})
	}
}

func TestCtlLocalCommands(t *testing.T) {
	bin := fibrilctlBin(t)
	dir := t.TempDir()

	// The broker's own CA: cert fingerprint prints what the broker logged.
	c := startCtlServer(t)
	m := regexp.MustCompile(`ca_sha256=([0-9a-f]{64})`).FindStringSubmatch(c.s.log.String())
	if m == nil {
		t.Fatalf("the broker logged no ca_sha256:\n%s", c.s.log.String())
	}
	r := runCtlArgs(t, nil, "", bin, "cert", "fingerprint", filepath.Join(c.s.dataDir, "tls", "ca.pem"))
	if r.code != 0 || strings.TrimSpace(r.stdout) != m[1] {
		t.Fatalf("cert fingerprint = %q (exit %d), the broker says %s", r.stdout, r.code, m[1])
	}

	// cert generate in a fresh data dir, then a broker started on it serves
	// that CA; cert issue signs a client certificate with it.
	dataDir := filepath.Join(dir, "data")
	r = runCtlArgs(t, nil, "", bin, "cert", "generate", "--data-dir", dataDir, "--san", "broker.example")
	if r.code != 0 {
		t.Fatalf("cert generate: exit %d\n%s", r.code, r.stderr)
	}
	fp := regexp.MustCompile(`CA fingerprint \(pin this\): ([0-9a-f]{64})`).FindStringSubmatch(r.stdout)
	if fp == nil {
		t.Fatalf("cert generate printed no CA fingerprint:\n%s", r.stdout)
	}
	s := startServer(t, dataDir)
	if !strings.Contains(s.log.String(), "ca_sha256="+fp[1]) {
		eventually(t, 5000, 20, func() bool { return strings.Contains(s.log.String(), "ca_sha256=") })
		if !strings.Contains(s.log.String(), "ca_sha256="+fp[1]) {
			t.Fatalf("the broker does not serve the generated CA %s:\n%s", fp[1], s.log.String())
		}
	}
	// Pinning that CA over QUIC reaches the broker.
	r = runCtlArgs(t, nil, "", bin, "--broker", s.addr(), "--quic", "--pin-sha256", fp[1], "queue", "declare", "pinned")
	if r.code != 0 {
		t.Fatalf("declare over QUIC with the CA pinned: exit %d\n%s", r.code, r.stderr)
	}
	r = runCtlArgs(t, nil, "", bin, "--broker", s.addr(), "--quic", "--pin-sha256", strings.Repeat("ab", 32), "queue", "declare", "pinned")
	if r.code != 6 || !strings.Contains(r.stderr, "pin") {
		t.Fatalf("a wrong pin: exit %d, want 6\n%s", r.code, r.stderr)
	}
	r = runCtlArgs(t, nil, "", bin, "cert", "issue", "alice", "--data-dir", dataDir, "--out-dir", filepath.Join(dir, "alice"))
	if r.code != 0 {
		t.Fatalf("cert issue: exit %d\n%s", r.code, r.stderr)
	}
	for name, perm := range map[string]os.FileMode{"alice.pem": 0o644, "alice.key": 0o600} {
		info, err := os.Stat(filepath.Join(dir, "alice", name))
		if err != nil || info.Mode().Perm() != perm {
			t.Fatalf("%s: %v %v", name, err, info)
		}
	}

	// secret generate: 0600, never silently replaced.
	r = runCtlArgs(t, nil, "", bin, "secret", "generate", "--data-dir", dataDir, "--show")
	secret, err := os.ReadFile(filepath.Join(dataDir, "cluster.secret"))
	if r.code != 0 || err != nil || !strings.Contains(r.stdout, strings.TrimSpace(string(secret))) {
		t.Fatalf("secret generate: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	r = runCtlArgs(t, nil, "", bin, "secret", "generate", "--data-dir", dataDir)
	if r.code != 4 || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("secret generate over a secret: exit %d\n%s", r.code, r.stderr)
	}

	// The config file names the data dir.
	conf := filepath.Join(dir, "fibril.toml")
	if err := os.WriteFile(conf, []byte("[server]\ndata_dir = \""+filepath.Join(dir, "fromconfig")+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCtlArgs(t, []string{"FIBRIL_CONFIG=" + conf}, "", bin, "secret", "generate")
	if _, err := os.Stat(filepath.Join(dir, "fromconfig", "cluster.secret")); r.code != 0 || err != nil {
		t.Fatalf("secret generate with server.data_dir from $FIBRIL_CONFIG: exit %d, %v\n%s", r.code, err, r.stderr)
	}
}

func TestCtlHelpAndCompletion(t *testing.T) {
	bin := fibrilctlBin(t)
	r := runCtlArgs(t, nil, "", bin, "--help")
	if r.code != 0 {
		t.Fatalf("--help: exit %d", r.code)
	}
	mustContain(t, "--help", r.stdout, "queue", "admin", "user", "cert", "secret", "completion", "Exit codes:")
	for _, args := range [][]string{{"queue", "consume", "--help"}, {"admin", "dlq", "redrive", "-h"}, {"help"}} {
		r := runCtlArgs(t, nil, "", bin, args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: fibrilctl") {
			t.Fatalf("%v: exit %d\n%s", args, r.code, r.stdout)
		}
	}
	r = runCtlArgs(t, nil, "", fibrilBin, "ctl", "queue", "--help")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: fibril ctl queue <command>") {
		t.Fatalf("fibril ctl queue --help: exit %d\n%s", r.code, r.stdout)
	}
	r = runCtlArgs(t, nil, "", fibrilBin, "--help")
	mustContain(t, "fibril --help", r.stdout+r.stderr, "ctl")
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := runCtlArgs(t, nil, "", bin, "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, "fibrilctl") {
			t.Fatalf("completion %s: exit %d\n%s", shell, r.code, r.stdout)
		}
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		r := runCtlArgs(t, nil, "", bin, "completion", "bash")
		script := filepath.Join(t.TempDir(), "fibrilctl.bash")
		if err := os.WriteFile(script, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bash, "-c", `source "$1"; COMP_WORDS=(fibrilctl queue de); COMP_CWORD=2; _fibrilctl; echo "${COMPREPLY[@]}"`,
			"bash", script).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "declare delete" {
			t.Fatalf("bash completes 'queue de' to %q (%v)", out, err)
		}
	}
}

// TLS on TCP: --tls with the local trust file, with --ca-file alone, and
// the guided failures without either.
func TestCtlTLS(t *testing.T) {
	c := startCtlServer(t, "--tcp-tls")
	caFile := filepath.Join(c.s.dataDir, "tls", "ca.pem")
	c.ctl(t, 0, "--tls", "queue", "publish", "secure", "--message", "over tls")
	r := c.ctl(t, 2, "queue", "publish", "secure", "--message", "plaintext")
	mustContain(t, "plaintext to a TLS port", r.stderr, "requires TLS: pass --tls")

	// Without the local trust file (another user's config dir), the CA file
	// is what makes the broker trusted.
	noTrust := []string{"XDG_CONFIG_HOME=" + t.TempDir()}
	base := []string{"--broker", c.s.addr()}
	r = runCtlArgs(t, noTrust, "", fibrilctlBin(t), append(base, "--tls", "queue", "consume", "secure", "--expect", "over tls")...)
	if r.code != 6 {
		t.Fatalf("--tls with no trust: exit %d, want 6\n%s", r.code, r.stderr)
	}
	mustContain(t, "untrusted", r.stderr, "--ca-file")
	r = runCtlArgs(t, noTrust, "", fibrilctlBin(t), append(base, "--tls", "--ca-file", caFile, "queue", "consume", "secure", "--expect", "over tls")...)
	if r.code != 0 {
		t.Fatalf("--tls --ca-file: exit %d\n%s", r.code, r.stderr)
	}
}
