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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/internal/syncbuf"
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
	return startCtlServerEnv(t, nil, extra...)
}

// startCtlServerEnv is startCtlServer with more environment for the broker.
func startCtlServerEnv(t *testing.T, env []string, extra ...string) ctlTarget {
	t.Helper()
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s := &server{t: t, dataDir: t.TempDir(), port: freePort(t), args: append([]string{"--admin-listen", adminAddr}, extra...), env: env}
	s.start()
	t.Cleanup(func() { s.kill() })
	base := "http://" + adminAddr
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == 200 })
	return ctlTarget{s: s, adminURL: base}
}

// ctl runs fibrilctl against target; want is the exit code expected.
func (c ctlTarget) ctl(t *testing.T, want int, args ...string) ctlResult {
	t.Helper()
	return c.ctlStdin(t, want, "", args...)
}

// ctlStdin is ctl with stdin.
func (c ctlTarget) ctlStdin(t *testing.T, want int, stdin string, args ...string) ctlResult {
	t.Helper()
	full := append([]string{"--broker", c.s.addr(), "--admin", c.adminURL}, args...)
	r := runCtlArgs(t, nil, stdin, fibrilctlBin(t), full...)
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
	setup [][]string
	// before, when set, prepares what fibrilctl cannot (a consumer that
	// fails a message or holds one, a connection to list) and may note
	// values for later rows in x.
	before func(t *testing.T, x *ctlAdminRun)
	args   []string
	// argsOf, when set, gives the arguments from what earlier rows noted.
	argsOf   func(x *ctlAdminRun) []string
	stdin    string
	wantExit int
	wantOut  []string // substrings of stdout
	wantRE   []string // regular expressions stdout must match (table rows)
	notOut   []string // substrings stdout must not hold
	wantErr  []string // substrings of stderr
	// wantJSON, when set, decodes stdout (the command runs with --json) and
	// checks it.
	wantJSON func(t *testing.T, v map[string]any)
	// after, when set, checks the command's effect on the broker.
	after func(t *testing.T, x *ctlAdminRun)
}

// ctlAdminRun is what the rows share: the broker, and what earlier rows
// noted (connection ids, clients kept open).
type ctlAdminRun struct {
	c       ctlTarget
	ids     map[string]uint64
	clients map[string]*client.Client
	held    map[string]*client.Delivery
	noted   map[string]string
}

// jsonAt walks v along path (map keys and slice indexes).
func jsonAt(t *testing.T, v any, path ...any) any {
	t.Helper()
	cur := v
	for _, p := range path {
		switch key := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("at %v: %v is not an object", path, cur)
			}
			cur = m[key]
		case int:
			list, ok := cur.([]any)
			if !ok || key >= len(list) {
				t.Fatalf("at %v: %v is not a list of more than %d", path, cur, key)
			}
			cur = list[key]
		}
	}
	return cur
}

// wantAt checks the value at path (numbers compare as float64).
func wantAt(t *testing.T, v any, want any, path ...any) {
	t.Helper()
	got := jsonAt(t, v, path...)
	if n, ok := want.(int); ok {
		want = float64(n)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%v = %#v, want %#v in\n%v", path, got, want, v)
	}
}

// findRow is the element of the list at path whose key equals value.
func findRow(t *testing.T, v any, key string, value any, path ...any) map[string]any {
	t.Helper()
	list, _ := jsonAt(t, v, path...).([]any)
	if n, ok := value.(uint64); ok {
		value = float64(n)
	}
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && reflect.DeepEqual(m[key], value) {
			return m
		}
	}
	t.Fatalf("no element with %s=%v at %v in\n%v", key, value, path, v)
	return nil
}

// apiJSON GETs an admin path and decodes it.
func (x *ctlAdminRun) apiJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	status, body := adminGet(t, x.c.adminURL, path)
	var v map[string]any
	if status != 200 || json.Unmarshal([]byte(body), &v) != nil {
		t.Fatalf("GET %s = %d %s", path, status, body)
	}
	return v
}

// queueCounts is a queue's ready and inflight totals from the listing.
func (x *ctlAdminRun) queueCounts(t *testing.T, topic string) (ready, inflight float64) {
	t.Helper()
	q := findRow(t, x.apiJSON(t, "/admin/api/queues"), "topic", topic, "queues")
	return q["ready"].(float64), q["inflight"].(float64)
}

// eventuallyReady waits for topic's ready count to be want (a count is an
// observation that may trail its partition by a batch), and fails with the
// last count otherwise.
func (x *ctlAdminRun) eventuallyReady(t *testing.T, topic string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ready, _ := x.queueCounts(t, topic)
		if ready == want {
			return
		}
		if time.Now().After(deadline) {
			_, list := adminGet(t, x.c.adminURL, "/admin/api/queues")
			_, msgs := adminGet(t, x.c.adminURL, "/admin/api/messages?include_settled=true&topic="+topic)
			t.Fatalf("%s has %v ready, want %v\n%s\n%s", topic, ready, want, list, msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dialNamed connects a client with a client name (to find it in the
// connections listing).
func (x *ctlAdminRun) dialNamed(t *testing.T, name string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, x.c.s.addr(), client.ClientOptions{Transport: client.TransportTCP, ClientName: name,
		Credentials: &client.Credentials{Username: "fibril", Password: "fibril"}, DisableAutoReconnect: true})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	x.clients[name] = cl
	return cl
}

// connectionOf finds the listed connection of client name (not dormant).
func (x *ctlAdminRun) connectionOf(t *testing.T, name string, dormant bool) map[string]any {
	t.Helper()
	for _, e := range jsonAt(t, x.apiJSON(t, "/admin/api/connections"), "connections").([]any) {
		m := e.(map[string]any)
		if m["client_name"] == name && m["dormant"] == dormant {
			return m
		}
	}
	return nil
}

// login runs a wire command as user and returns the exit code.
func (x *ctlAdminRun) login(t *testing.T, user, password string) int {
	t.Helper()
	return runCtlArgs(t, nil, "", fibrilctlBin(t), "--broker", x.c.s.addr(), "--username", user, "--password", password,
		"queue", "declare", "login-check").code
}

var (
	fingerprintRE = regexp.MustCompile(`reloaded: fingerprint ([0-9a-f]{64}), valid until \d{4}-\d\d-\d\dT`)
)

// ctlAdminCases run in order against one broker (TestCtlAdminCommands,
// lease 2 s, reconnect grace 60 s, runtime_locks.idle_queue_cleanup on):
// every command of docs/fibrilctl.md that calls the admin API, its table
// and its --json, and the exit codes of its real refusals. Later rows may
// use what earlier ones set up (each family has its own queues).
var ctlAdminCases = []ctlAdminCase{
	// queues, messages, topology.
	{name: "queues table", setup: [][]string{
		{"queue", "declare", "ops-q", "--partitions", "2", "--max-retries", "5", "--dlq", "custom", "--dlq-topic", "ops-dead", "--ttl-ms", "600000"},
		{"queue", "publish", "ops-q", "--message", "ops-0"}, {"queue", "publish", "ops-q", "--message", "ops-1"}},
		args: []string{"admin", "queues"},
		// 2 partitions, 1 loaded (counted), 2 ready, DLQ, max retries, TTL.
		wantRE: []string{`(?m)^ops-q/default\s+2\s+1\s+2\s+0\s+0\s+0\s+0\s+custom:ops-dead/default\s+5\s+600000$`}},
	{name: "queues json", args: []string{"admin", "queues", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			q := findRow(t, v, "topic", "ops-q", "queues")
			wantAt(t, q, 2, "partition_count")
			wantAt(t, q, 2, "ready")
			wantAt(t, q, "custom", "dlq", "policy")
			wantAt(t, q, "ops-dead", "dlq", "topic")
			wantAt(t, q, 600000, "default_message_ttl_ms")
			wantAt(t, q, 5, "dlq", "max_retries")
			wantAt(t, q, false, "partitions", 1, "loaded")
			wantAt(t, q, nil, "partitions", 1, "ready")
		}},
	{name: "messages table", args: []string{"admin", "messages", "ops-q", "--include-payload"},
		wantRE:  []string{`(?m)^0\s+0\s+ready\s+0\s+5\s+-\s+-\s+\d{4}-\d\d-\d\dT\S+Z\s+-\s+"ops-0"$`, `(?m)^0\s+1\s+ready\s+0\s+5\s.*"ops-1"$`},
		wantOut: []string{"partition 0 of partitions 0-1"}, notOut: []string{"next:"}},
	{name: "messages one page", args: []string{"admin", "messages", "ops-q", "--limit", "1"},
		wantOut: []string{"next: --from 1"}, notOut: []string{"ops-1"}},
	{name: "messages json", args: []string{"admin", "messages", "ops-q", "--from", "1", "--include-payload", "--payload-limit-bytes", "3", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, 1, "items", 0, "offset")
			wantAt(t, v, "b3Bz", "items", 0, "payload_base64") // "ops"
			wantAt(t, v, 5, "items", 0, "payload_len")
			wantAt(t, v, 2, "next_offset")
			wantAt(t, v, 2, "partition_count")
		}},
	{name: "messages of another partition", args: []string{"admin", "messages", "ops-q", "--partition", "1"},
		wantOut: []string{"(no messages)", "partition 1 of partitions 0-1"}},
	{name: "messages unknown queue", args: []string{"admin", "messages", "ops-nope"}, wantExit: 3, wantErr: []string{"404 not_found"}},
	{name: "messages partition past the count", args: []string{"admin", "messages", "ops-q", "--partition", "5"}, wantExit: 2,
		wantErr: []string{"400 bad_parameter", "partition_count"}},
	{name: "messages bad status", args: []string{"admin", "messages", "ops-q", "--status", "acked"}, wantExit: 2,
		wantErr: []string{"ready, inflight, delayed, pending_dlq"}},
	{name: "topology table", args: []string{"admin", "topology"},
		wantOut: []string{"node.standalone: true", "node.advertise_address: 127.0.0.1:"},
		wantRE:  []string{`(?m)^ops-q/default\s+0\s+[0-9a-f]{32}$`, `(?m)^ops-q/default\s+1\s+[0-9a-f]{32}$`}},
	{name: "topology json", args: []string{"admin", "topology", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			q := findRow(t, v, "topic", "ops-q", "queues")
			wantAt(t, q, "", "group")
			wantAt(t, q, jsonAt(t, v, "node", "owner_id"), "partitions", 1, "owner")
		}},

	// dead letters: a consumer fails ops-0, which goes to ops-dead.
	{name: "a failed message in the DLQ",
		before: func(t *testing.T, x *ctlAdminRun) {
			cl := x.dialNamed(t, "dlq-consumer")
			sub, err := cl.SubscribeTopic(ctxT(t), "ops-q", client.SubscribeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			d := next(t, sub, 10*time.Second)
			if d.Text() != "ops-0" {
				t.Fatalf("got %q", d.Text())
			}
			if err := d.Fail(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			// The whole client goes: Subscription.Close alone sends no
			// UNSUBSCRIBE, and the session would go on taking ops-1. Its
			// dormant session takes no more; ops-1's lease (2 s) runs out.
			cl.Close()
			eventually(t, 10000, 50, func() bool {
				q := x.apiJSON(t, "/admin/api/queues")
				for _, e := range q["queues"].([]any) {
					if m := e.(map[string]any); m["topic"] == "ops-dead" && m["ready"] == float64(1) {
						return true
					}
				}
				return false
			})
		},
		args:    []string{"admin", "messages", "ops-dead"},
		wantOut: []string{"stroma.dlq.reason=terminal_nack", "stroma.dlq.source_topic=ops-q", "stroma.dlq.source_offset=0"}},
	{name: "dlq replay table", args: []string{"admin", "dlq", "replay", "ops-dead", "--offset", "0,7"},
		wantRE: []string{`(?m)^0\s+replayed\s+-$`, `(?m)^7\s+skipped\s+missing$`}, wantOut: []string{"replayed 1 of 2"},
		after: func(t *testing.T, x *ctlAdminRun) {
			// ops-1 was left by the consumer, plus the replayed ops-0; the
			// DLQ keeps its copy.
			// (Counts are observations that may trail a batch: ops-1 is
			// requeued from the closed subscription.)
			x.eventuallyReady(t, "ops-q", 2)
			x.eventuallyReady(t, "ops-dead", 1)
		}},
	{name: "dlq replay json", args: []string{"admin", "dlq", "replay", "ops-dead", "--offset", "0", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, "replayed", "results", 0, "outcome")
			wantAt(t, v, 0, "results", 0, "offset")
		}},
	{name: "dlq replay unknown dlq", args: []string{"admin", "dlq", "replay", "ops-nope", "--offset", "0"}, wantExit: 3},
	{name: "dlq replay partition past the count", args: []string{"admin", "dlq", "replay", "ops-dead", "--offset", "0", "--partition", "9"},
		wantExit: 2, wantErr: []string{"400 bad_parameter"}},
	{name: "dlq redrive dry run table", args: []string{"admin", "dlq", "redrive", "ops-dead", "--reason", "terminal_nack", "--dry-run"},
		wantOut: []string{"dry run: 1 dead letters match; nothing was replayed"}, notOut: []string{"run again"}},
	{name: "dlq redrive json", args: []string{"admin", "dlq", "redrive", "ops-dead", "--source-topic", "ops-q", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, 1, "matched")
			wantAt(t, v, 1, "replayed")
			wantAt(t, v, true, "done")
			wantAt(t, v, nil, "next_offset_hint")
		},
		after: func(t *testing.T, x *ctlAdminRun) {
			// A redrive moves: the copy is completed in the DLQ.
			x.eventuallyReady(t, "ops-dead", 0)
			x.eventuallyReady(t, "ops-q", 4) // ops-1, ops-0 replayed twice and redriven once
		}},
	{name: "dlq redrive table, nothing left", args: []string{"admin", "dlq", "redrive", "ops-dead"},
		wantOut: []string{"matched 0, replayed 0, skipped 0"}, notOut: []string{"run again", "stopped early"}},
	{name: "dlq redrive bad reason", args: []string{"admin", "dlq", "redrive", "ops-dead", "--reason", "max_retries"}, wantExit: 2,
		wantErr: []string{"retries_exhausted, terminal_nack, pending_recovery or expired"}},
	{name: "dlq redrive unknown dlq", args: []string{"admin", "dlq", "redrive", "ops-nope"}, wantExit: 3},

	// queue purge and delete.
	{name: "queue purge table", setup: [][]string{
		{"queue", "publish", "ops-purge", "--message", "a"}, {"queue", "publish", "ops-purge", "--message", "b"}, {"queue", "publish", "ops-purge", "--message", "c"}},
		args: []string{"queue", "purge", "ops-purge"}, wantOut: []string{"purged 3 messages from ops-purge/default"},
		after: func(t *testing.T, x *ctlAdminRun) {
			x.eventuallyReady(t, "ops-purge", 0)
		}},
	{name: "queue purge json", args: []string{"queue", "purge", "ops-purge", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) { wantAt(t, v, 0, "purged") }},
	{name: "queue purge unknown", args: []string{"queue", "purge", "ops-nope"}, wantExit: 3, wantErr: []string{`no queue "ops-nope"`}},
	{name: "queue delete in use",
		before: func(t *testing.T, x *ctlAdminRun) {
			cl := x.dialNamed(t, "holder")
			publishText(t, cl, "ops-held", "held")
			sub, err := cl.SubscribeTopic(ctxT(t), "ops-held", client.SubscribeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			x.held["ops-held"] = next(t, sub, 10*time.Second)
		},
		args: []string{"queue", "delete", "ops-held"}, wantExit: 4, wantErr: []string{"409 in_use", "1 messages inflight"},
		after: func(t *testing.T, x *ctlAdminRun) {
			if err := x.held["ops-held"].Ack(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10000, 50, func() bool { _, inflight := x.queueCounts(t, "ops-held"); return inflight == 0 })
		}},
	{name: "queue delete table", args: []string{"queue", "delete", "ops-held"}, wantOut: []string{"deleted ops-held/default"},
		after: func(t *testing.T, x *ctlAdminRun) {
			for _, e := range x.apiJSON(t, "/admin/api/queues")["queues"].([]any) {
				if e.(map[string]any)["topic"] == "ops-held" {
					t.Fatalf("ops-held is still listed after its delete")
				}
			}
		}},
	{name: "queue delete json", setup: [][]string{{"queue", "declare", "ops-del"}}, args: []string{"queue", "delete", "ops-del", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) { wantAt(t, v, true, "deleted") }},
	{name: "queue delete unknown", args: []string{"queue", "delete", "ops-del"}, wantExit: 3},
	{name: "queue delete bad name", args: []string{"queue", "delete", "Bad.Name"}, wantExit: 2, wantErr: []string{"400 bad_name"}},

	// the global DLQ.
	{name: "global-dlq get table", args: []string{"admin", "global-dlq", "get"}, wantOut: []string{"version 0: no global DLQ"}},
	{name: "global-dlq set table", args: []string{"admin", "global-dlq", "set", "graveyard"}, wantOut: []string{"version 1: global DLQ graveyard/default"}},
	{name: "global-dlq get json", args: []string{"admin", "global-dlq", "get", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, 1, "version")
			wantAt(t, v, "graveyard", "target", "topic")
		}},
	{name: "global-dlq set stale", args: []string{"admin", "global-dlq", "set", "other", "--expected-version", "0"}, wantExit: 4,
		wantErr: []string{"409 stale_version", `current: {"version":1,"target":{"topic":"graveyard"`}},
	{name: "global-dlq set bad name", args: []string{"admin", "global-dlq", "set", "Bad..name"}, wantExit: 2, wantErr: []string{"400 bad_name"}},
	{name: "global-dlq set json", args: []string{"admin", "global-dlq", "set", "graveyard2", "--group", "g", "--expected-version", "1", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, 2, "version")
			wantAt(t, v, "g", "target", "group")
		}},
	{name: "global-dlq clear table", args: []string{"admin", "global-dlq", "clear"}, wantOut: []string{"version 3: no global DLQ"}},
	{name: "global-dlq clear json", args: []string{"admin", "global-dlq", "clear", "--expected-version", "3", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, 4, "version")
			wantAt(t, v, nil, "target")
		}},
	{name: "global-dlq clear stale", args: []string{"admin", "global-dlq", "clear", "--expected-version", "3"}, wantExit: 4,
		wantErr: []string{"stale_version"}},

	// runtime settings (the broker runs with --lease-ms 2000 and the idle
	// cleanup group locked).
	{name: "runtime-settings get table", args: []string{"admin", "runtime-settings", "get"},
		wantOut: []string{"version 1"},
		wantRE:  []string{`(?m)^delivery\.inflight_ttl_ms\s+2000\s+-$`, `(?m)^idle_queue_cleanup\.enabled\s+false\s+locked$`, `(?m)^connection\.reconnect_grace_ms\s+60000\s+-$`}},
	{name: "runtime-settings get json", args: []string{"admin", "runtime-settings", "get", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, 2000, "settings", "delivery", "inflight_ttl_ms")
			wantAt(t, v, []any{"idle_queue_cleanup"}, "locked")
		}},
	{name: "runtime-settings set table", args: []string{"admin", "runtime-settings", "set", "delivery.inflight_ttl_ms=3000", "delivery.expiry_batch_max=4096"},
		wantOut: []string{"version 2"}, wantRE: []string{`(?m)^delivery\.inflight_ttl_ms\s+3000\s+-$`, `(?m)^delivery\.expiry_batch_max\s+4096\s+-$`}},
	{name: "runtime-settings set json", args: []string{"admin", "runtime-settings", "set", "partitioning.default_partition_count=1", "--expected-version", "2", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, 3, "version")
			wantAt(t, v, 3000, "settings", "delivery", "inflight_ttl_ms")
		}},
	{name: "runtime-settings set stale", args: []string{"admin", "runtime-settings", "set", "delivery.inflight_ttl_ms=4000", "--expected-version", "1"},
		wantExit: 4, wantErr: []string{"409 stale_version", `current: {"version":3`}},
	{name: "runtime-settings set locked", args: []string{"admin", "runtime-settings", "set", "idle_queue_cleanup.enabled=true"},
		wantExit: 4, wantErr: []string{"403 locked"}},
	{name: "runtime-settings set out of range", args: []string{"admin", "runtime-settings", "set", "delivery.inflight_ttl_ms=0"},
		wantExit: 2, wantErr: []string{"400 bad_setting", "delivery.inflight_ttl_ms"}},
	{name: "runtime-settings set unknown key", args: []string{"admin", "runtime-settings", "set", "delivery.mode=fast"},
		wantExit: 2, wantErr: []string{"400 bad_json", `unknown field "mode"`}},

	// quarantine: nothing is damaged here (TestCtlQuarantineRepair damages
	// a partition).
	{name: "quarantine list table", args: []string{"admin", "quarantine", "list"}, wantOut: []string{"no partition is quarantined"}},
	{name: "quarantine list json", args: []string{"admin", "quarantine", "list", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) { wantAt(t, v, []any{}, "quarantined") }},
	{name: "quarantine repair of a healthy partition", args: []string{"admin", "quarantine", "repair", "ops-q", "--partition", "1"},
		wantExit: 4, wantErr: []string{"409 conflict", "partition ops-q/default/1 is not quarantined"}},
	{name: "quarantine repair of an unknown partition", args: []string{"admin", "quarantine", "repair", "ops-q", "--partition", "2"},
		wantExit: 3, wantErr: []string{"404 not_found"}},
	{name: "quarantine repair bad name", args: []string{"admin", "quarantine", "repair", "Bad..name"}, wantExit: 2, wantErr: []string{"400 bad_name"}},

	// TLS reload: the broker's own material, then a refused one.
	{name: "reload-tls table", args: []string{"admin", "reload-tls"}, wantRE: []string{fingerprintRE.String()},
		after: func(t *testing.T, x *ctlAdminRun) {
			tls := x.apiJSON(t, "/admin/api/tls")
			if !strings.Contains(x.noted["last stdout"], tls["fingerprint_sha256"].(string)) {
				t.Fatalf("reload printed %q; the broker serves %v", x.noted["last stdout"], tls["fingerprint_sha256"])
			}
		}},
	{name: "reload-tls json", args: []string{"admin", "reload-tls", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, true, "reloaded")
			if fp, _ := v["fingerprint_sha256"].(string); len(fp) != 64 {
				t.Fatalf("fingerprint %q", fp)
			}
		}},
	{name: "reload-tls refused",
		before: func(t *testing.T, x *ctlAdminRun) {
			// The CA's certificate as the server's: its key does not match.
			dir := filepath.Join(x.c.s.dataDir, "tls")
			server, err := os.ReadFile(filepath.Join(dir, "server.pem"))
			if err != nil {
				t.Fatal(err)
			}
			x.noted["server.pem"] = string(server)
			ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "server.pem"), ca, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		args: []string{"admin", "reload-tls"}, wantExit: 2, wantErr: []string{"400 bad_certificate", "old certificate keeps serving"},
		after: func(t *testing.T, x *ctlAdminRun) {
			if err := os.WriteFile(filepath.Join(x.c.s.dataDir, "tls", "server.pem"), []byte(x.noted["server.pem"]), 0o644); err != nil {
				t.Fatal(err)
			}
		}},

	// connections: one open with a subscription, one dormant (closed within
	// the grace).
	{name: "connections table",
		before: func(t *testing.T, x *ctlAdminRun) {
			cl := x.dialNamed(t, "ctl-open")
			if _, err := cl.SubscribeTopic(ctxT(t), "ops-conn", client.SubscribeOptions{Prefetch: 1}); err != nil {
				t.Fatal(err)
			}
			gone := x.dialNamed(t, "ctl-dormant")
			publishText(t, gone, "ops-conn", "x")
			gone.Close()
			var open, dormant map[string]any
			eventually(t, 10000, 50, func() bool {
				open, dormant = x.connectionOf(t, "ctl-open", false), x.connectionOf(t, "ctl-dormant", true)
				return open != nil && dormant != nil && open["subscriptions"] == float64(1)
			})
			x.ids["open id"], x.ids["open session"] = uint64(open["id"].(float64)), uint64(open["session"].(float64))
			x.ids["dormant session"] = uint64(dormant["session"].(float64))
		},
		args: []string{"admin", "connections"},
		after: func(t *testing.T, x *ctlAdminRun) {
			out := x.noted["last stdout"]
			for _, re := range []string{
				fmt.Sprintf(`(?m)^%d\s+%d\s+ctl-open\s+\S+\s+tcp\s+false\s+127\.0\.0\.1:\d+\s+\S+\s+open\s+1$`, x.ids["open id"], x.ids["open session"]),
				fmt.Sprintf(`(?m)^-\s+%d\s+ctl-dormant\s+\S+\s+tcp\s+false\s+127\.0\.0\.1:\d+\s+\S+\s+dormant\s+0$`, x.ids["dormant session"]),
			} {
				if !regexp.MustCompile(re).MatchString(out) {
					t.Fatalf("connections table does not match %s:\n%s", re, out)
				}
			}
		}},
	{name: "connections list json", args: []string{"admin", "connections", "list", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			row := findRow(t, v, "client_name", "ctl-dormant", "connections")
			wantAt(t, row, 0, "id")
			wantAt(t, row, true, "dormant")
		}},
	{name: "connections close table", argsOf: func(x *ctlAdminRun) []string {
		return []string{"admin", "connections", "close", strconv.FormatUint(x.ids["open id"], 10)}
	},
		wantOut: []string{"closed connection", "its session ended"},
		after: func(t *testing.T, x *ctlAdminRun) {
			// The session ends: no dormant one is left behind.
			eventually(t, 10000, 50, func() bool {
				return x.connectionOf(t, "ctl-open", false) == nil && x.connectionOf(t, "ctl-open", true) == nil
			})
		}},
	{name: "connections close a dormant session json", argsOf: func(x *ctlAdminRun) []string {
		return []string{"admin", "connections", "close", "--session", strconv.FormatUint(x.ids["dormant session"], 10), "--json"}
	},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, true, "closed")
			wantAt(t, v, true, "was_dormant")
		},
		after: func(t *testing.T, x *ctlAdminRun) {
			if x.connectionOf(t, "ctl-dormant", true) != nil {
				t.Fatalf("the dormant session is still listed after its close")
			}
		}},
	{name: "connections close gone", argsOf: func(x *ctlAdminRun) []string {
		return []string{"admin", "connections", "close", strconv.FormatUint(x.ids["open id"], 10)}
	}, wantExit: 3, wantErr: []string{"404 not_found"}},
	{name: "connections close needs an id", args: []string{"admin", "connections", "close"}, wantExit: 2, wantErr: []string{"--session"}},

	// users (the wire's user store).
	{name: "user list empty", args: []string{"user", "list"}, wantOut: []string{"no users"}},
	{name: "user add", args: []string{"user", "add", "bob", "--user-password", "pw-1"}, wantOut: []string{"added user bob"},
		after: func(t *testing.T, x *ctlAdminRun) {
			if code := x.login(t, "bob", "pw-1"); code != 0 {
				t.Fatalf("bob cannot log in after user add: exit %d", code)
			}
		}},
	{name: "user add existing", args: []string{"user", "add", "bob", "--user-password", "pw-x"}, wantExit: 4, wantErr: []string{"user passwd bob"}},
	{name: "user add bad name", args: []string{"user", "add", "@node", "--user-password", "pw"}, wantExit: 2, wantErr: []string{"400 bad_name"}},
	{name: "user passwd from stdin", args: []string{"user", "passwd", "bob", "--user-password", "-"}, stdin: "pw-2\n",
		wantOut: []string{"changed the password of bob"},
		after: func(t *testing.T, x *ctlAdminRun) {
			if code := x.login(t, "bob", "pw-1"); code != 5 {
				t.Fatalf("the old password: exit %d, want 5", code)
			}
			if code := x.login(t, "bob", "pw-2"); code != 0 {
				t.Fatalf("the new password: exit %d", code)
			}
		}},
	{name: "user passwd json", args: []string{"user", "passwd", "bob", "--user-password", "pw-3", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, "bob", "name")
			wantAt(t, v, false, "created")
		}},
	{name: "user passwd unknown", args: []string{"user", "passwd", "zed", "--user-password", "pw"}, wantExit: 3, wantErr: []string{"user add zed"}},
	{name: "user list table", args: []string{"user", "list"}, wantRE: []string{`(?m)^NAME$`, `(?m)^bob$`}},
	{name: "user list json", args: []string{"user", "list", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) { wantAt(t, v, []any{map[string]any{"name": "bob"}}, "users") }},
	{name: "user remove table", args: []string{"user", "remove", "bob"}, wantOut: []string{"removed user bob"},
		after: func(t *testing.T, x *ctlAdminRun) {
			if code := x.login(t, "bob", "pw-3"); code != 5 {
				t.Fatalf("a removed user logs in: exit %d, want 5", code)
			}
		}},
	{name: "user remove unknown", args: []string{"user", "remove", "bob"}, wantExit: 3, wantErr: []string{"404 not_found"}},
	{name: "user remove json", setup: [][]string{{"user", "add", "carol", "--user-password", "pw"}}, args: []string{"user", "remove", "carol", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			wantAt(t, v, "carol", "name")
			wantAt(t, v, true, "deleted")
		}},

	// the audit ring: every mutation above is in it.
	{name: "audit table", args: []string{"admin", "audit", "--limit", "500"},
		wantRE: []string{`(?m)\squeue\.purge\s+ops-purge/default\s+ok\s+purged 3$`, `(?m)\squeue\.delete\s+ops-held/default\s+in_use\s`}},
	{name: "audit json", args: []string{"admin", "audit", "--limit", "500", "--json"},
		wantJSON: func(t *testing.T, v map[string]any) {
			seen := map[string]bool{}
			for _, e := range v["entries"].([]any) {
				seen[e.(map[string]any)["action"].(string)] = true
			}
			for _, action := range []string{"queue.purge", "queue.delete", "dlq.replay", "dlq.redrive", "global_dlq.put",
				"runtime_settings.put", "quarantine.repair", "tls.reload", "connection.close", "user.put", "user.delete"} {
				if !seen[action] {
					t.Errorf("the audit lacks %s: %v", action, seen)
				}
			}
		}},
	{name: "audit after", argsOf: func(x *ctlAdminRun) []string {
		return []string{"admin", "audit", "--after", "1000000"}
	}, wantOut: []string{"(no operator actions recorded"}},
	{name: "audit bad parameter", args: []string{"admin", "audit", "--limit", "100000"}, wantExit: 2,
		wantErr: []string{"bad_parameter", "limit=100000"}},
}

func TestCtlAdminCommands(t *testing.T) {
	c := startCtlServerEnv(t, []string{"FIBRIL_RUNTIME_LOCKS_IDLE_QUEUE_CLEANUP=true"}, "--reconnect-grace-ms", "60000")
	x := &ctlAdminRun{c: c, ids: map[string]uint64{}, clients: map[string]*client.Client{}, held: map[string]*client.Delivery{},
		noted: map[string]string{}}
	t.Cleanup(func() {
		for _, cl := range x.clients {
			cl.Close()
		}
	})
	for _, tc := range ctlAdminCases {
		ok := t.Run(tc.name, func(t *testing.T) {
			for _, args := range tc.setup {
				c.ctl(t, 0, args...)
			}
			if tc.before != nil {
				tc.before(t, x)
			}
			args := tc.args
			if tc.argsOf != nil {
				args = tc.argsOf(x)
			}
			r := c.ctlStdin(t, tc.wantExit, tc.stdin, args...)
			x.noted["last stdout"] = r.stdout
			mustContain(t, "stdout", r.stdout, tc.wantOut...)
			mustContain(t, "stderr", r.stderr, tc.wantErr...)
			for _, re := range tc.wantRE {
				if !regexp.MustCompile(re).MatchString(r.stdout) {
					t.Fatalf("stdout does not match %s:\n%s", re, r.stdout)
				}
			}
			for _, s := range tc.notOut {
				if strings.Contains(r.stdout, s) {
					t.Fatalf("stdout holds %q:\n%s", s, r.stdout)
				}
			}
			if tc.wantJSON != nil {
				var v map[string]any
				if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
					t.Fatalf("--json printed no JSON object: %v\n%s", err, r.stdout)
				}
				tc.wantJSON(t, v)
			}
			if tc.after != nil {
				tc.after(t, x)
			}
		})
		if !ok {
			// Later rows build on this one's state.
			t.FailNow()
		}
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
	// The admin listener stays HTTP here (with --tcp-tls it would serve
	// HTTPS, which startCtlServer's readiness poll does not speak);
	// TestCtlConfigFileSharedWithTheBroker reaches an HTTPS one.
	c := startCtlServer(t, "--tcp-tls", "--admin-tls=false")
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

// quarantine list and repair on a partition whose last record was damaged
// (the quarantine tests' setup: a clean stop, bytes flipped).
func TestCtlQuarantineRepair(t *testing.T) {
	dir := quarantineSetup(t, damageFlip)
	s, base := startWithAdmin(t, dir, "quarantine")
	c := ctlTarget{s: s, adminURL: base}
	// Detection is lazy: the first touch parks it.
	cl := dial(t, s, client.TransportTCP)
	wantQuarantineRefusal(t, cl)

	r := c.ctl(t, 0, "admin", "quarantine", "list")
	if !regexp.MustCompile(`(?m)^q-bad/default\s+0\s+checksum\s+\d{4}-\d\d-\d\dT\S+Z\s+\S`).MatchString(r.stdout) {
		t.Fatalf("quarantine list:\n%s", r.stdout)
	}
	r = c.ctl(t, 0, "admin", "quarantine", "list", "--json")
	var list map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	row := findRow(t, list, "topic", "q-bad", "quarantined")
	wantAt(t, row, "checksum", "kind")
	wantAt(t, row, "queue", "partition_kind")

	c.ctl(t, 4, "admin", "quarantine", "repair", "q-good")                    // serves: 409
	c.ctl(t, 3, "admin", "quarantine", "repair", "q-bad", "--partition", "3") // no such partition: 404
	r = c.ctl(t, 0, "admin", "quarantine", "repair", "q-bad", "--partition", "0")
	mustContain(t, "repair", r.stdout, "repaired q-bad/default partition 0: 1 entries truncated")
	r = c.ctl(t, 4, "admin", "quarantine", "repair", "q-bad", "--json")
	mustContain(t, "a second repair", r.stderr, "409 conflict", "partition q-bad/default/0 is not quarantined")
	r = c.ctl(t, 0, "admin", "quarantine", "list")
	mustContain(t, "list after the repair", r.stdout, "no partition is quarantined")
	// Served again: every message before the cut.
	wantPrefix(t, consumeTexts(t, cl, "q-bad", quarantineMessages-1), "bad-", quarantineMessages-1)
}

// One TOML file for both: `fibril serve --config FILE` accepts it (it refuses
// unknown keys) and fibrilctl --config FILE finds the broker and its admin
// listener (HTTPS with the broker's certificate, admin auth) from it.
func TestCtlConfigFileSharedWithTheBroker(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	brokerPort, adminPort := freePort(t), freePort(t)
	file := filepath.Join(dir, "fibril.toml")
	text := fmt.Sprintf(`# a broker's config file, read by fibrilctl too
[server]
data_dir = %q

[broker.listener]
bind = "0.0.0.0:%d"
advertise = "127.0.0.1"

[admin]
listener.bind = "127.0.0.1:%d"
auth.enabled = true
auth.username = "ops"
auth.password = "ops-secret"

[tls]
enabled = true
admin_enabled = true

[delivery]
inflight_ttl_ms = 4000
`, dataDir, brokerPort, adminPort)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(fibrilBin, "serve", "--print-config", "--config", file).CombinedOutput()
	if err != nil {
		t.Fatalf("fibril serve --print-config --config refuses the file: %v\n%s", err, out)
	}
	mustContain(t, "--print-config", string(out), "admin.auth.username", "broker.listener.advertise")

	cmd := exec.Command(fibrilBin, "serve", "--config", file)
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Another user's config dir: no local trust file, so the CA must come
	// from <data_dir>/tls/ca.pem, as the file says where it is.
	env := []string{"XDG_CONFIG_HOME=" + t.TempDir(), "FIBRIL_CONFIG=" + file}
	bin := fibrilctlBin(t)
	// Wait for the broker: exit 6 (unreachable) until the admin listener
	// is up, then 503 starting (exit 1) while it recovers.
	var r ctlResult
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r = runCtlArgs(t, env, "", bin, "admin", "runtime-settings", "get")
		if r.code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if r.code != 0 || !regexp.MustCompile(`(?m)^delivery\.inflight_ttl_ms\s+4000\s`).MatchString(r.stdout) {
		t.Fatalf("runtime-settings through the file's https admin URL:\n%s%s\nbroker log:\n%s", r.stdout, r.stderr, log.String())
	}
	// The wire: TLS (tls.enabled), the advertised host on bind's port; the
	// admin credentials are not a wire user (the built-in login serves).
	r = runCtlArgs(t, env, "", bin, "queue", "publish", "shared", "--message", "one file")
	if r.code != 0 {
		t.Fatalf("publish through the file's broker address: exit %d\n%s%s\nbroker log:\n%s", r.code, r.stdout, r.stderr, log.String())
	}
	r = runCtlArgs(t, env, "", bin, "admin", "messages", "shared", "--include-payload")
	if r.code != 0 || !strings.Contains(r.stdout, `"one file"`) {
		t.Fatalf("admin messages: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Admin auth is on: a wrong password is refused (exit 5).
	r = runCtlArgs(t, env, "", bin, "--password", "wrong", "admin", "queues")
	if r.code != 5 || !strings.Contains(r.stderr, "401 unauthorized") {
		t.Fatalf("a wrong admin password: exit %d\n%s", r.code, r.stderr)
	}
}
