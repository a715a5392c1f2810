package ctl

// Every admin-API command against an httptest server that checks each
// request (method, path, query, JSON body, basic auth) and serves the JSON
// the real broker answers (copied from its answers: admin/*.go; the same
// commands run against a real broker in e2e/ctl_test.go), including the
// error answers behind the exit codes.

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// exchange is one expected request and the answer to it.
type exchange struct {
	method string
	path   string
	query  url.Values // nil: no query
	body   string     // JSON the request body must equal; "" for no body
	status int        // 0: 200
	answer string
}

// apiCase runs args against a server that expects exactly the exchanges.
type apiCase struct {
	name      string
	args      []string
	stdin     string
	env       map[string]string
	exchanges []exchange
	wantExit  int
	wantOut   []string // substrings of stdout
	notOut    []string // substrings stdout must not hold
	wantErr   []string // substrings of stderr
	// user and password the requests must carry (default fibril/fibril).
	user, password string
	// terminalPassword, when set, makes stdin a terminal that types it.
	terminalPassword string
}

// fakeAPI serves the exchanges in order and records what went wrong.
type fakeAPI struct {
	t         *testing.T
	mu        sync.Mutex
	exchanges []exchange
	next      int
	user, pw  string
	problems  []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	if f.next >= len(f.exchanges) {
		f.problems = append(f.problems, fmt.Sprintf("unexpected request %s %s %s", r.Method, r.URL, body))
		http.Error(w, `{"code":"internal","message":"unexpected"}`, 500)
		return
	}
	ex := f.exchanges[f.next]
	f.next++
	bad := func(format string, args ...any) {
		f.problems = append(f.problems, fmt.Sprintf("request %d (%s %s): ", f.next, ex.method, ex.path)+fmt.Sprintf(format, args...))
	}
	if r.Method != ex.method || r.URL.Path != ex.path {
		bad("got %s %s", r.Method, r.URL.Path)
	}
	if q := r.URL.Query(); !(len(q) == 0 && len(ex.query) == 0) && !reflect.DeepEqual(q, ex.query) {
		bad("query %v, want %v", q, ex.query)
	}
	if user, pw, ok := r.BasicAuth(); !ok || user != f.user || pw != f.pw {
		bad("basic auth %q/%q (%v), want %q/%q", user, pw, ok, f.user, f.pw)
	}
	switch {
	case ex.body == "" && len(body) != 0:
		bad("body %s, want none", body)
	case ex.body != "":
		var got, want any
		if err := json.Unmarshal(body, &got); err != nil {
			bad("body %q is not JSON: %v", body, err)
		} else if err := json.Unmarshal([]byte(ex.body), &want); err != nil {
			f.t.Fatalf("bad test body %s: %v", ex.body, err)
		} else if !reflect.DeepEqual(got, want) {
			bad("body %s, want %s", body, ex.body)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			bad("Content-Type %q", ct)
		}
	}
	status := ex.status
	if status == 0 {
		status = http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, ex.answer)
}

func runCtl(t *testing.T, args []string, stdin string, env map[string]string) (int, string, string) {
	t.Helper()
	return runCtlTerminal(t, args, stdin, env, "")
}

// runCtlTerminal is runCtl with stdin a terminal typing terminalPassword
// when that is not empty.
func runCtlTerminal(t *testing.T, args []string, stdin string, env map[string]string, terminalPassword string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main("fibrilctl", args, Env{
		Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		Getenv:          func(k string) string { return env[k] },
		StdinIsTerminal: func() bool { return terminalPassword != "" },
		ReadPasswordNoEcho: func() (string, bool, error) {
			return terminalPassword, true, nil
		},
	})
	return code, stdout.String(), stderr.String()
}

func (c apiCase) run(t *testing.T) {
	t.Helper()
	f := &fakeAPI{t: t, exchanges: c.exchanges, user: "fibril", pw: "fibril"}
	if c.user != "" {
		f.user, f.pw = c.user, c.password
	}
	srv := httptest.NewServer(f)
	defer srv.Close()
	code, stdout, stderr := runCtlTerminal(t, append(c.args, "--admin", srv.URL), c.stdin, c.env, c.terminalPassword)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.problems {
		t.Error(p)
	}
	if f.next != len(f.exchanges) {
		t.Errorf("%d of %d expected requests were made", f.next, len(f.exchanges))
	}
	if code != c.wantExit {
		t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.wantExit, stdout, stderr)
	}
	for _, s := range c.wantOut {
		if !strings.Contains(stdout, s) {
			t.Errorf("stdout lacks %q:\n%s", s, stdout)
		}
	}
	for _, s := range c.notOut {
		if strings.Contains(stdout, s) {
			t.Errorf("stdout holds %q:\n%s", s, stdout)
		}
	}
	for _, s := range c.wantErr {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr)
		}
	}
}

// queueJSON is GET /admin/api/queues's Queue: counts of the loaded
// partitions, null for an unloaded one, TTL 0 for none, the DLQ target's
// group omitted when it is the default.
const queueJSON = `{"topic":"orders","group":"","partition_count":2,"ready":5,"inflight":2,"delayed":1,"pending_dlq":0,
"consumers":1,"publish_rate_per_sec":0,"deliver_rate_per_sec":0,"dlq":{"policy":"custom","topic":"dead","max_retries":5},
"default_message_ttl_ms":0,"loaded_partitions":1,"partitions":[
{"partition":0,"loaded":true,"ready":5,"inflight":2,"delayed":1,"pending_dlq":0,"consumers":1},
{"partition":1,"loaded":false,"ready":null,"inflight":null,"delayed":null,"pending_dlq":null,"consumers":null}]}`

func problemJSON(code, message string) string {
	return fmt.Sprintf(`{"code":%q,"message":%q}`, code, message)
}

func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

func TestAdminQueueCommands(t *testing.T) {
	cases := []apiCase{
		{name: "queues", args: []string{"admin", "queues"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/queues", answer: `{"queues":[` + queueJSON + `]}`}},
			wantOut:   []string{"QUEUE", "LOADED", "orders/default  2           1       5", "custom:dead/default  5            -"}},
		{name: "globals before the command", args: []string{"--json", "--username", "u", "--password", "p", "admin", "queues"},
			user: "u", password: "p",
			exchanges: []exchange{{method: "GET", path: "/admin/api/queues", answer: `{"queues":[]}`}},
			wantOut:   []string{`"queues": []`}},
		{name: "queues json", args: []string{"admin", "queues", "--json"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/queues", answer: `{"queues":[]}`}},
			wantOut:   []string{`"queues": []`}},
		{name: "queues unauthorized", args: []string{"--username", "ops", "--password", "s3cret", "admin", "queues"},
			user: "ops", password: "s3cret",
			exchanges: []exchange{{method: "GET", path: "/admin/api/queues", status: 401, answer: problemJSON("unauthorized", "log in first")}},
			wantExit:  exitAuth, wantErr: []string{"401 unauthorized: log in first", "--username"}},
		{name: "credentials from the environment", args: []string{"admin", "queues"},
			env: map[string]string{envUsername: "envuser", envPassword: "envpw"}, user: "envuser", password: "envpw",
			exchanges: []exchange{{method: "GET", path: "/admin/api/queues", answer: `{"queues":[]}`}}},
		{name: "messages with every filter",
			args: []string{"admin", "messages", "orders", "--group", "g", "--partition", "1", "--from", "5", "--limit", "10",
				"--include-settled", "--include-payload", "--payload-limit-bytes", "64", "--status", "ready"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/messages",
				query: q("topic", "orders", "group", "g", "partition", "1", "from", "5", "limit", "10", "include_settled", "true",
					"include_payload", "true", "payload_limit_bytes", "64", "status", "ready"),
				answer: `{"items":[{"partition":1,"offset":5,"state":"ready","headers":{"k":"v"},"payload_len":5,
					"payload_base64":"aGVsbG8=","content_type":"text/plain","delivery_count":0,"not_before_ms":0,"expires_at_ms":0}],
					"next_offset_hint":6,"next_offset":9,"partition":1,"partition_count":3}`}},
			wantOut: []string{`"hello"`, "k=v", "next: --from 6", "partition 1 of partitions 0-2"}},
		{name: "messages at the end of the partition", args: []string{"admin", "messages", "orders"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/messages", query: q("topic", "orders"),
				answer: `{"items":[{"partition":0,"offset":3,"state":"inflight","headers":{},"payload_len":1,"content_type":"text/plain",
					"delivery_count":1,"not_before_ms":0,"lease_deadline_ms":1700000000000,"expires_at_ms":0}],
					"next_offset_hint":4,"next_offset":4,"partition":0,"partition_count":1}`}},
			wantOut: []string{"inflight  1           1      -           2023-11-14T22:13:20.000Z"}, notOut: []string{"next:", "partition 0 of"}},
		{name: "messages sends only the topic by default", args: []string{"admin", "messages", "orders"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/messages", query: q("topic", "orders"),
				answer: `{"items":[],"next_offset":0,"next_offset_hint":0,"partition":0,"partition_count":1}`}},
			wantOut: []string{"(no messages)"}},
		{name: "messages of an unknown queue", args: []string{"admin", "messages", "nope"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/messages", query: q("topic", "nope"), status: 404,
				answer: problemJSON("not_found", "no such queue: check the topic and group (GET /admin/api/queues lists them)")}},
			wantExit: exitNotFound, wantErr: []string{"no such queue"}},
		{name: "messages of a partition past the count", args: []string{"admin", "messages", "orders", "--partition", "5"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/messages", query: q("topic", "orders", "partition", "5"), status: 400,
				answer: problemJSON("bad_parameter", "partition out of range for this queue: ask for a partition below the queue's partition_count")}},
			wantExit: exitUsage, wantErr: []string{"partition out of range"}},
		{name: "messages bad parameter", args: []string{"admin", "messages", "orders", "--limit", "99999"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/messages", query: q("topic", "orders", "limit", "99999"), status: 400,
				answer: problemJSON("bad_parameter", "limit=99999 is over its cap 5000")}},
			wantExit: exitUsage, wantErr: []string{"over its cap"}},
		{name: "messages needs a topic", args: []string{"admin", "messages"}, wantExit: exitUsage, wantErr: []string{"missing argument"}},
		{name: "topology", args: []string{"admin", "topology"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/topology",
				answer: `{"node":{"advertise_address":"127.0.0.1:9876","name":"fibril-go","owner_id":"7e43","standalone":true},
					"queues":[{"topic":"orders","group":"","partitions":[{"partition":0,"owner":"7e43"}]}],"streams":[]}`}},
			wantOut: []string{"node.name: fibril-go", "node.owner_id: 7e43", "orders/default  0          7e43"}},
		{name: "queue delete", args: []string{"queue", "delete", "orders", "--group", "g"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/queues/delete", body: `{"topic":"orders","group":"g"}`, answer: `{"deleted":true}`}},
			wantOut:   []string{"deleted orders/g"}},
		{name: "queue delete in use", args: []string{"queue", "delete", "orders"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/queues/delete", body: `{"topic":"orders","group":""}`, status: 409,
				answer: problemJSON("in_use", `queue "orders" has 2 messages inflight (leased to consumers); settle them or wait for their leases, then delete again`)}},
			wantExit: exitConflict, wantErr: []string{"in_use"}},
		{name: "queue delete unknown", args: []string{"queue", "delete", "nope"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/queues/delete", body: `{"topic":"nope","group":""}`, status: 404,
				answer: problemJSON("not_found", `no queue "nope"; GET /admin/api/queues lists the queues`)}},
			wantExit: exitNotFound, wantErr: []string{`no queue "nope"`}},
		{name: "queue purge", args: []string{"queue", "purge", "orders"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/queues/purge", body: `{"topic":"orders","group":""}`, answer: `{"purged":7}`}},
			wantOut:   []string{"purged 7 messages from orders/default"}},
		{name: "an endpoint this broker lacks", args: []string{"admin", "queues"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/queues", status: 404,
				answer: problemJSON("not_found", "no admin endpoint at /admin/api/queues; this broker serves ...")}},
			wantExit: exitFailed, wantErr: []string{"older than this fibrilctl"}},
		{name: "a server error", args: []string{"admin", "queues"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/queues", status: 500, answer: problemJSON("internal", "see the log")}},
			wantExit:  exitFailed, wantErr: []string{"500 internal"}},
		{name: "starting", args: []string{"admin", "queues"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/queues", status: 503, answer: problemJSON("starting", "retry shortly")}},
			wantExit:  exitFailed, wantErr: []string{"retry shortly"}},
	}
	for _, c := range cases {
		t.Run(c.name, c.run)
	}
}

func TestAdminDLQCommands(t *testing.T) {
	offsets := make([]string, 150)
	for i := range offsets {
		offsets[i] = fmt.Sprint(i)
	}
	replayAnswer := func(n int) string {
		return `{"results":[` + strings.Repeat(`{"offset":0,"outcome":"replayed","reason":""},`, n-1) + `{"offset":0,"outcome":"skipped","reason":"inactive"}]}`
	}
	cases := []apiCase{
		{name: "global-dlq get", args: []string{"admin", "global-dlq", "get"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/global-dlq", answer: `{"version":3,"target":{"topic":"dead","group":""}}`}},
			wantOut:   []string{"version 3: global DLQ dead/default"}},
		{name: "global-dlq get none", args: []string{"admin", "global-dlq", "get"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/global-dlq", answer: `{"version":0,"target":null}`}},
			wantOut:   []string{"version 0: no global DLQ"}},
		{name: "global-dlq set with a version", args: []string{"admin", "global-dlq", "set", "dead", "--group", "g", "--expected-version", "3"},
			exchanges: []exchange{{method: "PUT", path: "/admin/api/global-dlq", body: `{"expected_version":3,"target":{"topic":"dead","group":"g"}}`,
				answer: `{"version":4,"target":{"topic":"dead","group":"g"}}`}},
			wantOut: []string{"version 4: global DLQ dead/g"}},
		{name: "global-dlq set reads the version first", args: []string{"admin", "global-dlq", "set", "dead"},
			exchanges: []exchange{
				{method: "GET", path: "/admin/api/global-dlq", answer: `{"version":9,"target":null}`},
				{method: "PUT", path: "/admin/api/global-dlq", body: `{"expected_version":9,"target":{"topic":"dead","group":""}}`,
					answer: `{"version":10,"target":{"topic":"dead","group":""}}`}},
			wantOut: []string{"version 10"}},
		{name: "global-dlq set stale", args: []string{"admin", "global-dlq", "set", "dead", "--expected-version", "1"},
			exchanges: []exchange{{method: "PUT", path: "/admin/api/global-dlq", body: `{"expected_version":1,"target":{"topic":"dead","group":""}}`,
				status: 409, answer: `{"code":"stale_version","message":"the value changed since you read it; read the current one (in current), then retry with its version","current":{"version":5,"target":null}}`}},
			wantExit: exitConflict, wantErr: []string{"stale_version", `current: {"version":5,"target":null}`}},
		{name: "global-dlq clear", args: []string{"admin", "global-dlq", "clear", "--expected-version", "2"},
			exchanges: []exchange{{method: "PUT", path: "/admin/api/global-dlq", body: `{"expected_version":2,"target":null}`, answer: `{"version":3,"target":null}`}},
			wantOut:   []string{"version 3: no global DLQ"}},
		{name: "dlq replay", args: []string{"admin", "dlq", "replay", "dead", "--offset", "1,2", "--offset", "5-6", "--dlq-group", "g"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/dlq/replay", body: `{"dlq_topic":"dead","dlq_group":"g","offsets":[1,2,5,6]}`,
				answer: replayAnswer(4)}},
			wantOut: []string{"replayed 3 of 4", "inactive"}},
		{name: "dlq replay of another partition", args: []string{"admin", "dlq", "replay", "dead", "--offset", "3", "--partition", "2"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/dlq/replay", body: `{"dlq_topic":"dead","dlq_group":"","partition":2,"offsets":[3]}`,
				answer: `{"results":[{"offset":3,"outcome":"skipped","reason":"missing"}]}`}},
			wantOut: []string{"replayed 0 of 1", "missing"}},
		{name: "dlq replay in batches of 100", args: []string{"admin", "dlq", "replay", "dead", "--offset", "0-149"},
			exchanges: []exchange{
				{method: "POST", path: "/admin/api/dlq/replay", body: `{"dlq_topic":"dead","dlq_group":"","offsets":[` + strings.Join(offsets[:100], ",") + `]}`, answer: replayAnswer(100)},
				{method: "POST", path: "/admin/api/dlq/replay", body: `{"dlq_topic":"dead","dlq_group":"","offsets":[` + strings.Join(offsets[100:], ",") + `]}`, answer: replayAnswer(50)}},
			wantOut: []string{"replayed 148 of 150"}},
		{name: "dlq replay needs offsets", args: []string{"admin", "dlq", "replay", "dead"}, wantExit: exitUsage, wantErr: []string{"--offset"}},
		{name: "dlq replay bad offset", args: []string{"admin", "dlq", "replay", "dead", "--offset", "7-3"}, wantExit: exitUsage},
		{name: "dlq replay unknown dlq", args: []string{"admin", "dlq", "replay", "nope", "--offset", "1"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/dlq/replay", body: `{"dlq_topic":"nope","dlq_group":"","offsets":[1]}`,
				status: 404, answer: problemJSON("not_found", "no such queue: check the topic and group (GET /admin/api/queues lists them)")}},
			wantExit: exitNotFound},
		{name: "dlq redrive", args: []string{"admin", "dlq", "redrive", "dead", "--source-topic", "orders", "--source-group", "g",
			"--reason", "retries_exhausted", "--from-ms", "10", "--to-ms", "20", "--limit", "5"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/dlq/redrive",
				body:   `{"dlq_topic":"dead","dlq_group":"","source_topic":"orders","source_group":"g","reason":"retries_exhausted","from_ms":10,"to_ms":20,"limit":5}`,
				answer: `{"matched":6,"replayed":5,"skipped":1,"dry_run":false,"done":false,"stopped_early":true,"next_offset_hint":42,"next_partition":1}`}},
			wantOut: []string{"matched 6, replayed 5, skipped 1", "stopped early", "run again with --partition 1 --from-offset 42"}},
		{name: "dlq redrive goes on", args: []string{"admin", "dlq", "redrive", "dead", "--partition", "1", "--from-offset", "42"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/dlq/redrive", body: `{"dlq_topic":"dead","dlq_group":"","partition":1,"from_offset":42}`,
				answer: `{"matched":1,"replayed":1,"skipped":0,"dry_run":false,"done":true,"stopped_early":false,"next_offset_hint":null}`}},
			wantOut: []string{"matched 1, replayed 1, skipped 0"}, notOut: []string{"run again", "stopped early"}},
		{name: "dlq redrive bad reason", args: []string{"admin", "dlq", "redrive", "dead", "--reason", "max_retries"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/dlq/redrive", body: `{"dlq_topic":"dead","dlq_group":"","reason":"max_retries"}`,
				status: 400, answer: problemJSON("bad_parameter", `reason "max_retries": use retries_exhausted, terminal_nack, pending_recovery or expired`)}},
			wantExit: exitUsage, wantErr: []string{"retries_exhausted"}},
		{name: "dlq redrive dry run", args: []string{"admin", "dlq", "redrive", "dead", "--dry-run"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/dlq/redrive", body: `{"dlq_topic":"dead","dlq_group":"","dry_run":true}`,
				answer: `{"matched":6,"replayed":0,"skipped":0,"dry_run":true,"done":true,"stopped_early":false,"next_offset_hint":null}`}},
			wantOut: []string{"dry run: 6 dead letters match"}},
	}
	for _, c := range cases {
		t.Run(c.name, c.run)
	}
}

func TestAdminNodeCommands(t *testing.T) {
	// The real answer: every key, nested by group.
	settings := `{"version":7,"settings":{"delivery":{"inflight_ttl_ms":30000,"expiry_batch_max":8192},
		"connection":{"reconnect_grace_ms":5000,"resume_session_restart_ttl_ms":60000},"partitioning":{"default_partition_count":1},
		"idle_queue_cleanup":{"enabled":false,"evict_after_ms":600000,"sweep_interval_ms":60000}},"locked":["idle_queue_cleanup"]}`
	cases := []apiCase{
		{name: "reload-tls", args: []string{"admin", "reload-tls"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/tls/reload", answer: `{"reloaded":true,"fingerprint_sha256":"ab12","not_after":"2027-01-01T00:00:00Z"}`}},
			wantOut:   []string{"reloaded: fingerprint ab12"}},
		{name: "reload-tls rejected", args: []string{"admin", "reload-tls"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/tls/reload", status: 400,
				answer: problemJSON("bad_certificate", "server.pem does not match server.key; the old certificate keeps serving")}},
			wantExit: exitUsage, wantErr: []string{"old certificate keeps serving"}},
		{name: "quarantine list", args: []string{"admin", "quarantine", "list"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/quarantine",
				answer: `{"quarantined":[{"topic":"orders","group":"","partition":2,"kind":"checksum","reason":"bad crc at 77","detected_at_ms":1700000000000,
					"partition_kind":"queue","index":4,"refused":false}]}`}},
			wantOut: []string{"orders/default", "checksum", "bad crc at 77", "2023-11-14T22:13:20.000Z"}},
		{name: "quarantine list empty", args: []string{"admin", "quarantine", "list"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/quarantine", answer: `{"quarantined":[]}`}},
			wantOut:   []string{"no partition is quarantined"}},
		{name: "quarantine repair", args: []string{"admin", "quarantine", "repair", "orders", "--group", "g", "--partition", "2"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/quarantine/repair", query: q("topic", "orders", "group", "g", "partition", "2"),
				answer: `{"repaired":{"topic":"orders","group":"g","partition":2,"kind":"checksum","reason":"bad crc","detected_at_ms":1700000000000,
					"partition_kind":"queue","index":4,"refused":false,"truncated_entries":3}}`}},
			wantOut: []string{"repaired orders/g partition 2: 3 entries truncated"}},
		{name: "quarantine repair of a healthy partition", args: []string{"admin", "quarantine", "repair", "orders"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/quarantine/repair", query: q("topic", "orders", "partition", "0"),
				status: 409, answer: problemJSON("conflict", "partition orders/default/0 is not quarantined: there is nothing to repair")}},
			wantExit: exitConflict, wantErr: []string{"not quarantined"}},
		{name: "quarantine repair of an unknown partition", args: []string{"admin", "quarantine", "repair", "orders", "--partition", "7"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/quarantine/repair", query: q("topic", "orders", "partition", "7"),
				status: 404, answer: problemJSON("not_found", "no partition orders/default/7: check topic, group and partition (GET /admin/api/quarantine lists the parked ones)")}},
			wantExit: exitNotFound},
		{name: "runtime-settings get", args: []string{"admin", "runtime-settings", "get"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/runtime-settings", answer: settings}},
			wantOut:   []string{"version 7", "delivery.inflight_ttl_ms", "30000", "idle_queue_cleanup.enabled                false   locked"}},
		{name: "runtime-settings set", args: []string{"admin", "runtime-settings", "set", "delivery.inflight_ttl_ms=60000",
			"connection.reconnect_grace_ms=100", "delivery.mode=fast", "--expected-version", "7"},
			exchanges: []exchange{{method: "PUT", path: "/admin/api/runtime-settings",
				body:   `{"expected_version":7,"settings":{"delivery":{"inflight_ttl_ms":60000,"mode":"fast"},"connection":{"reconnect_grace_ms":100}}}`,
				answer: settings}},
			wantOut: []string{"version 7"}},
		{name: "runtime-settings set reads the version first", args: []string{"admin", "runtime-settings", "set", "idle_queue_cleanup.enabled=true"},
			exchanges: []exchange{
				{method: "GET", path: "/admin/api/runtime-settings", answer: settings},
				{method: "PUT", path: "/admin/api/runtime-settings", body: `{"expected_version":7,"settings":{"idle_queue_cleanup":{"enabled":true}}}`,
					status: 403, answer: problemJSON("locked", "the idle_queue_cleanup group is locked by runtime_locks.idle_queue_cleanup at startup; restart without the lock to change it")}},
			wantExit: exitConflict, wantErr: []string{"locked"}},
		{name: "runtime-settings set stale", args: []string{"admin", "runtime-settings", "set", "delivery.inflight_ttl_ms=1", "--expected-version", "1"},
			exchanges: []exchange{{method: "PUT", path: "/admin/api/runtime-settings", body: `{"expected_version":1,"settings":{"delivery":{"inflight_ttl_ms":1}}}`,
				status: 409, answer: `{"code":"stale_version","message":"read again","current":` + settings + `}`}},
			wantExit: exitConflict, wantErr: []string{"current: {\"version\":7"}},
		{name: "runtime-settings set bad argument", args: []string{"admin", "runtime-settings", "set", "inflight_ttl_ms=1"}, wantExit: exitUsage,
			wantErr: []string{"want group.key=value"}},
		{name: "audit", args: []string{"admin", "audit", "--after", "3", "--limit", "2"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/audit", query: q("after", "3", "limit", "2"),
				answer: `{"entries":[{"seq":4,"at_ms":1700000000000,"actor":"127.0.0.1","action":"queue.delete","target":"orders/default","outcome":"ok"}]}`}},
			wantOut: []string{"queue.delete", "orders/default", "ok"}},
		{name: "connections", args: []string{"admin", "connections"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/connections",
				answer: `{"connections":[{"id":12345678901,"session":77,"client_name":"fibril-go","client_version":"0.1.0","transport":"tcp","tls":false,
					"remote":"127.0.0.1:5555","since_ms":1700000000000,"dormant":false,"authenticated":true,"subscriptions":2},
					{"id":0,"session":78,"client_name":"fibrilctl","client_version":"0.1.0","transport":"quic","tls":true,
					"remote":"127.0.0.1:5556","since_ms":1700000000000,"dormant":true,"authenticated":true,"subscriptions":0}]}`}},
			wantOut: []string{"SESSION", "12345678901  77", "fibril-go", "127.0.0.1:5555", "open     2", "-            78", "dormant  0"}},
		{name: "connections with flags lists", args: []string{"--json", "admin", "connections", "--username", "u", "--password", "p"},
			user: "u", password: "p",
			exchanges: []exchange{{method: "GET", path: "/admin/api/connections", answer: `{"connections":[]}`}},
			wantOut:   []string{`"connections": []`}},
		{name: "connections list json", args: []string{"admin", "connections", "list", "--json"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/connections", answer: `{"connections":[]}`}},
			wantOut:   []string{`"connections": []`}},
		{name: "connections close", args: []string{"admin", "connections", "close", "12"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/connections/close", body: `{"id":12}`,
				answer: `{"closed":true,"connection":12,"was_dormant":false}`}},
			wantOut: []string{"closed connection 12; its session ended"}},
		{name: "connections close a dormant session", args: []string{"admin", "connections", "close", "--session", "78"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/connections/close", body: `{"session":78}`,
				answer: `{"closed":true,"connection":0,"was_dormant":true}`}},
			wantOut: []string{"ended dormant session 78"}},
		{name: "connections close gone", args: []string{"admin", "connections", "close", "99"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/connections/close", body: `{"id":99}`, status: 404,
				answer: problemJSON("not_found", "no connection 99 (session 0): it may have closed; list them with GET /admin/api/connections")}},
			wantExit: exitNotFound},
		{name: "connections close in handshake", args: []string{"admin", "connections", "close", "5"},
			exchanges: []exchange{{method: "POST", path: "/admin/api/connections/close", body: `{"id":5}`, status: 409,
				answer: problemJSON("conflict", "connection 5 is still in its handshake (no session yet); retry in a moment")}},
			wantExit: exitConflict},
		{name: "connections close needs an id", args: []string{"admin", "connections", "close"}, wantExit: exitUsage, wantErr: []string{"--session"}},
		{name: "connections close not both", args: []string{"admin", "connections", "close", "3", "--session", "4"}, wantExit: exitUsage},
		{name: "connections close a bad id", args: []string{"admin", "connections", "close", "x"}, wantExit: exitUsage},
	}
	for _, c := range cases {
		t.Run(c.name, c.run)
	}
}

func TestUserCommands(t *testing.T) {
	users := `{"users":[{"name":"alice"}]}`
	cases := []apiCase{
		{name: "add", args: []string{"user", "add", "bob", "--user-password", "pw"},
			exchanges: []exchange{
				{method: "GET", path: "/admin/api/users", answer: users},
				{method: "POST", path: "/admin/api/users", body: `{"name":"bob","password":"pw"}`, answer: `{"name":"bob","created":true}`}},
			wantOut: []string{"added user bob"}},
		{name: "add an existing user", args: []string{"user", "add", "alice", "--user-password", "pw"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/users", answer: users}},
			wantExit:  exitConflict, wantErr: []string{"user passwd alice"}},
		{name: "add with the password typed at a prompt", args: []string{"user", "add", "bob"}, terminalPassword: "typed",
			exchanges: []exchange{
				{method: "GET", path: "/admin/api/users", answer: users},
				{method: "POST", path: "/admin/api/users", body: `{"name":"bob","password":"typed"}`, answer: `{"name":"bob","created":true}`}},
			wantOut: []string{"added user bob"}, wantErr: []string{"new password: "}},
		{name: "add raced by another add", args: []string{"user", "add", "bob", "--user-password", "pw"},
			exchanges: []exchange{
				{method: "GET", path: "/admin/api/users", answer: users},
				{method: "POST", path: "/admin/api/users", body: `{"name":"bob","password":"pw"}`, answer: `{"name":"bob","created":false}`}},
			wantExit: exitConflict, wantErr: []string{"added by someone else meanwhile"}},
		{name: "add a bad name", args: []string{"user", "add", "bad name", "--user-password", "pw"},
			exchanges: []exchange{
				{method: "GET", path: "/admin/api/users", answer: users},
				{method: "POST", path: "/admin/api/users", body: `{"name":"bad name","password":"pw"}`, status: 400,
					answer: problemJSON("bad_name", "broker: bad user: config: user names may not contain ':' or whitespace")}},
			wantExit: exitUsage, wantErr: []string{"bad_name"}},
		{name: "add without a password", args: []string{"user", "add", "bob"}, wantExit: exitUsage, wantErr: []string{"--user-password -"}},
		{name: "passwd from stdin", args: []string{"user", "passwd", "alice", "--user-password", "-"}, stdin: "from stdin\n",
			exchanges: []exchange{
				{method: "GET", path: "/admin/api/users", answer: users},
				{method: "POST", path: "/admin/api/users", body: `{"name":"alice","password":"from stdin"}`, answer: `{"name":"alice","created":false}`}},
			wantOut: []string{"changed the password of alice"}},
		{name: "passwd empty stdin", args: []string{"user", "passwd", "alice", "--user-password", "-"}, stdin: "", wantExit: exitUsage},
		{name: "passwd of a missing user", args: []string{"user", "passwd", "zed", "--user-password", "pw"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/users", answer: users}},
			wantExit:  exitNotFound, wantErr: []string{"user add zed"}},
		{name: "remove", args: []string{"user", "remove", "alice"},
			exchanges: []exchange{{method: "DELETE", path: "/admin/api/users/alice", answer: `{"name":"alice","deleted":true}`}},
			wantOut:   []string{"removed user alice"}},
		{name: "remove missing", args: []string{"user", "remove", "zed"},
			exchanges: []exchange{{method: "DELETE", path: "/admin/api/users/zed", status: 404, answer: problemJSON("not_found", `no user "zed"; list them with GET /admin/api/users`)}},
			wantExit:  exitNotFound},
		{name: "list", args: []string{"user", "list"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/users", answer: users}},
			wantOut:   []string{"NAME", "alice"}},
		{name: "list json", args: []string{"user", "list", "--json"},
			exchanges: []exchange{{method: "GET", path: "/admin/api/users", answer: users}},
			wantOut:   []string{`"name": "alice"`}},
	}
	for _, c := range cases {
		t.Run(c.name, c.run)
	}
}

func TestAdminUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close() // nothing listens there any more
	code, _, stderr := runCtl(t, []string{"admin", "queues", "--admin", base}, "", nil)
	if code != exitUnreachable || !strings.Contains(stderr, "cannot reach the admin API") {
		t.Fatalf("exit %d, stderr %q; want %d", code, stderr, exitUnreachable)
	}
}

func TestAdminRedirectIsReported(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://broker.example:8443"+r.URL.Path, http.StatusMovedPermanently)
	}))
	defer srv.Close()
	code, _, stderr := runCtl(t, []string{"queue", "purge", "orders", "--admin", srv.URL}, "", nil)
	if code != exitUsage || !strings.Contains(stderr, "pass --admin https://broker.example:8443") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// An https admin URL is trusted through --ca-file (and, on loopback, the
// local trust file of --broker's port, which certs tests).
func TestAdminHTTPS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"entries":[]}`)
	}))
	defer srv.Close()
	code, _, stderr := runCtl(t, []string{"admin", "audit", "--admin", srv.URL, "--broker", "192.0.2.1:9876"}, "", nil)
	if code != exitUnreachable || !strings.Contains(stderr, "--ca-file") {
		t.Fatalf("an untrusted certificate: exit %d, stderr %q", code, stderr)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCtl(t, []string{"admin", "audit", "--admin", srv.URL, "--ca-file", caFile}, "", nil)
	if code != 0 || !strings.Contains(stdout, "SEQ") {
		t.Fatalf("with --ca-file: exit %d, %s%s", code, stdout, stderr)
	}
}
