package e2e

// The configuration of a real `fibril serve` (docs/configuration.md): a TOML
// file, FIBRIL_* variables and flags together; --print-config shows the
// winner of each key and where it came from; the running broker really
// uses the winners (it listens on the flag's port, not the file's or the
// env's; it leases for the file's lease); the admin API serves the same
// startup configuration and changes the log level live; a bad
// configuration exits 2 with a message naming the key, the source and the
// fix, without starting.

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/internal/syncbuf"
)

// runServeOnce runs `fibril serve args...` with env added, to its exit
// (bounded: a configuration error or --print-config never serves).
func runServeOnce(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, fibrilBin, append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("fibril serve %q did not exit within 20 s: it started serving?\n%s", args, stderr.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// printedLine finds key's line of --print-config output.
func printedLine(t *testing.T, out, key string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, key+" = ") {
			return strings.Join(strings.Fields(line), " ")
		}
	}
	t.Fatalf("no line for %s in:\n%s", key, out)
	return ""
}

func TestConfigPrecedenceAgainstTheRealBroker(t *testing.T) {
	dir := t.TempDir()
	filePort, envPort, flagPort, adminPort := freePort(t), freePort(t), freePort(t), freePort(t)
	for envPort == filePort {
		envPort = freePort(t)
	}
	for flagPort == filePort || flagPort == envPort {
		flagPort = freePort(t)
	}
	path := filepath.Join(dir, "fibril.toml")
	file := `# a config file as an operator writes it
[server]
data_dir = "` + filepath.Join(dir, "data") + `"

[broker.listener]
bind = "127.0.0.1:` + strconv.Itoa(filePort) + `"

[delivery]
inflight_ttl_ms = 1500

[connection]
reconnect_grace_ms = 100

[log]
level = "debug"

[auth]
seed_users = [{name = "alice", password = "file-secret-pw"}]
`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"FIBRIL_CONFIG=" + path,
		"FIBRIL_BROKER_LISTENER_BIND=127.0.0.1:" + strconv.Itoa(envPort),
		"FIBRIL_CONNECTION_RECONNECT_GRACE_MS=777",
		"FIBRIL_LOG_FORMAT=json",
		"FIBRIL_ADMIN_LISTENER_BIND="}
	args := []string{"--listen", "127.0.0.1:" + strconv.Itoa(flagPort), "--log-level", "info",
		"--admin-listen", "127.0.0.1:" + strconv.Itoa(adminPort)}

	code, out, errOut := runServeOnce(t, env, append(args, "--print-config")...)
	if code != 0 {
		t.Fatalf("--print-config exit %d:\n%s", code, errOut)
	}
	for key, want := range map[string]string{
		"broker.listener.bind":          `broker.listener.bind = "127.0.0.1:` + strconv.Itoa(flagPort) + `" # flag --listen`,
		"delivery.inflight_ttl_ms":      `delivery.inflight_ttl_ms = 1500 # file ` + path,
		"connection.reconnect_grace_ms": `connection.reconnect_grace_ms = 777 # env FIBRIL_CONNECTION_RECONNECT_GRACE_MS`,
		"log.level":                     `log.level = "info" # flag --log-level`,
		"log.format":                    `log.format = "json" # env FIBRIL_LOG_FORMAT`,
		"admin.listener.bind":           `admin.listener.bind = "127.0.0.1:` + strconv.Itoa(adminPort) + `" # flag --admin-listen`,
		"auth.seed_users":               `auth.seed_users = [{name = "alice", password = "<redacted>"}] # file ` + path,
		"delivery.default_max_retries":  `delivery.default_max_retries = 5 # default`,
	} {
		if got := printedLine(t, out, key); got != want {
			t.Errorf("--print-config:\n got %s\nwant %s", got, want)
		}
	}
	if !strings.Contains(out, "# config file: "+path+" (named by FIBRIL_CONFIG)") {
		t.Errorf("the header does not name the file:\n%s", out)
	}
	code, jsonOut, _ := runServeOnce(t, env, append(args, "--print-config=json")...)
	var printed struct {
		Values []struct {
			Key, Source, Origin string
			Value               any
		}
	}
	if code != 0 || json.Unmarshal([]byte(jsonOut), &printed) != nil || len(printed.Values) == 0 {
		t.Fatalf("--print-config=json exit %d:\n%s", code, jsonOut)
	}
	for _, text := range []string{out, jsonOut} {
		if strings.Contains(text, "file-secret-pw") {
			t.Fatalf("the password is printed:\n%s", text)
		}
	}

	// The broker itself, from the same file, variables and flags.
	log := &syncbuf.Buffer{}
	cmd := exec.Command(fibrilBin, append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	s := &server{t: t, port: flagPort, log: log}
	// Started to the end, as server.start counts it.
	eventually(t, 10_000, 20, func() bool {
		c, err := net.DialTimeout("tcp", s.addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil && log.Contains("fibril is serving")
	})
	for _, port := range []int{filePort, envPort} {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond); err == nil {
			c.Close()
			t.Fatalf("the broker also listens on %d, a losing value", port)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Fatalf("the file's data_dir was not used: %v", err)
	}
	// Logs are JSON (env) at info (flag beat the file's debug).
	firstLine, _, _ := strings.Cut(log.String(), "\n")
	var record map[string]any
	if err := json.Unmarshal([]byte(firstLine), &record); err != nil || record["level"] != "INFO" {
		t.Fatalf("the first log line is not a JSON info record: %q", firstLine)
	}

	// The file's 1.5 s lease is in force (the default is 30 s): an unsettled
	// delivery comes back.
	c := dial(t, s, client.TransportTCP)
	publishText(t, c, "cfg-lease", "leased")
	sub, err := c.SubscribeTopic(ctxT(t), "cfg-lease", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := next(t, sub, 10*time.Second); d.Text() != "leased" {
		t.Fatalf("got %q", d.Text())
	}
	if d := next(t, sub, 15*time.Second); d.Text() != "leased" {
		t.Fatalf("redelivered %q", d.Text())
	}

	// The admin API: the same startup configuration, and the live level.
	base := "http://127.0.0.1:" + strconv.Itoa(adminPort)
	status, body := adminGet(t, base, "/admin/api/startup-config")
	if status != http.StatusOK || strings.Contains(body, "file-secret-pw") {
		t.Fatalf("startup-config = %d %s", status, body)
	}
	var startup struct {
		Values []struct{ Key, Source string }
	}
	if err := json.Unmarshal([]byte(body), &startup); err != nil || len(startup.Values) != len(printed.Values) {
		t.Fatalf("startup-config %v: %s", err, body)
	}
	for i, v := range startup.Values {
		if v.Key != printed.Values[i].Key || v.Source != printed.Values[i].Source {
			t.Fatalf("startup-config %+v differs from --print-config %+v", v, printed.Values[i])
		}
	}
	if status, body := adminGet(t, base, "/admin/api/log-level"); status != http.StatusOK || !strings.Contains(body, `"info"`) {
		t.Fatalf("GET log-level = %d %s", status, body)
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/admin/api/log-level", strings.NewReader(`{"level":"debug"}`))
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT log-level: %v %v", err, resp)
	}
	resp.Body.Close()
	if status, body := adminGet(t, base, "/admin/api/log-level"); status != http.StatusOK || !strings.Contains(body, `"debug"`) {
		t.Fatalf("GET log-level after PUT = %d %s", status, body)
	}
	eventually(t, 5000, 20, func() bool { return strings.Contains(log.String(), `"log level changed through the admin API"`) })
	if status, body := adminGet(t, base, "/admin/api/audit"); status != http.StatusOK || !strings.Contains(body, `"info -\u003e debug"`) {
		t.Fatalf("audit = %d %s", status, body)
	}
}

func TestBadConfigExitsWithAGuidedMessage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(path, []byte("[delivery]\nlease_ms = 5\n[broker.listener]\nbind = \"127.0.0.1:1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"unknown file key", nil, []string{"--config", path},
			[]string{"unknown key delivery.lease_ms", "did you mean delivery.inflight_ttl_ms", path}},
		{"unknown variable", []string{"FIBRIL_DELIVERY_INFLIGHT_TTL=5"}, []string{"--data-dir", dir},
			[]string{"unknown variable FIBRIL_DELIVERY_INFLIGHT_TTL", "FIBRIL_DELIVERY_INFLIGHT_TTL_MS"}},
		{"zero lease from env", []string{"FIBRIL_DELIVERY_INFLIGHT_TTL_MS=0"}, []string{"--data-dir", dir},
			[]string{"delivery.inflight_ttl_ms = 0 (from env FIBRIL_DELIVERY_INFLIGHT_TTL_MS)", "at least 1 ms"}},
		{"bad listen flag", nil, []string{"--data-dir", dir, "--listen", "nowhere"},
			[]string{`broker.listener.bind = "nowhere" (from flag --listen)`, "want HOST:PORT"}},
		{"missing file", []string{"FIBRIL_CONFIG=" + filepath.Join(dir, "none.toml")}, []string{"--data-dir", dir},
			[]string{"none.toml", "FIBRIL_CONFIG"}},
	} {
		code, _, stderr := runServeOnce(t, c.env, c.args...)
		if code != 2 {
			t.Fatalf("%s: exit %d, want 2\n%s", c.name, code, stderr)
		}
		for _, part := range c.want {
			if !strings.Contains(stderr, part) {
				t.Fatalf("%s: the message does not say %q:\n%s", c.name, part, stderr)
			}
		}
	}
}
