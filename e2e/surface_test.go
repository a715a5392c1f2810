package e2e

// The admin surface of a real `fibril serve` (issue 12, docs/admin.md):
// overview, history, attention, connections and subscriptions with a real
// client, a force-close, the event stream, users, a TLS reload seen by new
// handshakes, admin auth, and the refusal to serve an unauthenticated
// admin listener on the network.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/certs"
)

// adminClient talks to one broker's admin listener.
type adminClient struct {
	t    *testing.T
	base string
	hc   *http.Client
	user string
	pass string
}

func newAdminClient(t *testing.T, base string) *adminClient {
	return &adminClient{t: t, base: base, hc: &http.Client{Timeout: 10 * time.Second}}
}

// do sends a request (body JSON when not empty) and returns the status and
// the body.
func (a *adminClient) do(method, path, body string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.user != "" {
		req.SetBasicAuth(a.user, a.pass)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// json does a request that must answer want, decoding the body into v.
func (a *adminClient) json(method, path, body string, want int, v any) {
	a.t.Helper()
	status, out := a.do(method, path, body)
	if status != want {
		a.t.Fatalf("%s %s = %d %s, want %d", method, path, status, out, want)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			a.t.Fatalf("%s %s: %v in %s", method, path, err, out)
		}
	}
}

// problem does a request that must fail with status and code.
func (a *adminClient) problem(method, path, body string, status int, code string) {
	a.t.Helper()
	got, out := a.do(method, path, body)
	var p struct{ Code, Message string }
	if got != status || json.Unmarshal([]byte(out), &p) != nil || p.Code != code || p.Message == "" {
		a.t.Fatalf("%s %s %s = %d %s, want %d %s with a message", method, path, body, got, out, status, code)
	}
}

func startAdmin(t *testing.T, extra ...string) (*server, *adminClient) {
	t.Helper()
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s := startServer(t, t.TempDir(), append([]string{"--admin-listen", adminAddr}, extra...)...)
	a := newAdminClient(t, "http://"+adminAddr)
	eventually(t, 5000, 20, func() bool { status, _ := a.do("GET", "/readyz", ""); return status == 200 })
	return s, a
}

type connRow struct {
	ID            uint64 `json:"id"`
	Session       uint64 `json:"session"`
	ClientName    string `json:"client_name"`
	ClientVersion string `json:"client_version"`
	Transport     string `json:"transport"`
	TLS           bool   `json:"tls"`
	Remote        string `json:"remote"`
	SinceMs       int64  `json:"since_ms"`
	Dormant       bool   `json:"dormant"`
	Authenticated bool   `json:"authenticated"`
	Subscriptions int    `json:"subscriptions"`
}

func (a *adminClient) connections() []connRow {
	a.t.Helper()
	var out struct{ Connections []connRow }
	a.json("GET", "/admin/api/connections", "", 200, &out)
	return out.Connections
}

func TestSurfaceOverviewHistoryAttention(t *testing.T) {
	s, a := startAdmin(t)
	c := dial(t, s, client.TransportTCP)
	publishText(t, c, "ov", "one")
	var ov struct {
		Node      string
		Version   string
		DataDir   string `json:"data_dir"`
		Listeners []struct{ Kind, Addr string }
		Totals    map[string]uint64
		Rates     map[string]float64 `json:"rates_per_s"`
		Memory    struct {
			RSS  uint64 `json:"rss_bytes"`
			Heap uint64 `json:"heap_bytes"`
		}
		Disk struct {
			Free uint64 `json:"free_bytes"`
			Used uint64 `json:"used_bytes"`
		}
		Connections int
		Queues      map[string]int
		Attention   *int
		UptimeMs    int64 `json:"uptime_ms"`
	}
	a.json("GET", "/admin/api/overview", "", 200, &ov)
	if ov.Node == "" || ov.Version == "" || ov.DataDir != s.dataDir || len(ov.Listeners) != 3 || ov.Totals["published"] != 1 ||
		ov.Memory.RSS == 0 || ov.Memory.Heap == 0 || ov.Disk.Free == 0 || ov.Connections != 1 || ov.Queues["loaded_partitions"] != 1 || ov.Attention == nil || ov.Rates == nil {
		t.Fatalf("overview %+v", ov)
	}
	var hist struct {
		IntervalMs int `json:"interval_ms"`
		Samples    []struct {
			AtMs int64 `json:"at_ms"`
		}
	}
	a.json("GET", "/admin/api/history", "", 200, &hist)
	if hist.IntervalMs != 5000 || len(hist.Samples) == 0 || hist.Samples[0].AtMs == 0 {
		t.Fatalf("history %+v", hist)
	}
	var att struct{ Items []map[string]any }
	a.json("GET", "/admin/api/attention", "", 200, &att)
	if att.Items == nil {
		t.Fatal("attention has no items list")
	}
}

func TestSurfaceConnectionsSubscriptionsForceClose(t *testing.T) {
	s, a := startAdmin(t, "--reconnect-grace-ms", "60000", "--lease-ms", "60000")
	ctx := ctxT(t)
	sub := dial(t, s, client.TransportQUIC)
	subscription, err := sub.SubscribeTopic(ctx, "fc", client.SubscribeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	pub := dial(t, s, client.TransportTCP)
	publishText(t, pub, "fc", "held")
	next(t, subscription, 10*time.Second) // delivered, never acked

	rows := a.connections()
	if len(rows) != 2 {
		t.Fatalf("connections %+v", rows)
	}
	var quicRow connRow
	for _, r := range rows {
		if r.ClientName != client.ClientNameDefault || r.Session == 0 || r.Dormant || r.SinceMs == 0 || !strings.HasPrefix(r.Remote, "127.0.0.1:") {
			t.Fatalf("row %+v", r)
		}
		switch r.Transport {
		case "quic":
			quicRow = r
		case "tcp":
			if r.TLS || r.Subscriptions != 0 {
				t.Fatalf("tcp row %+v", r)
			}
		}
	}
	if quicRow.ID == 0 || !quicRow.TLS || quicRow.Subscriptions != 1 {
		t.Fatalf("quic row %+v in %+v", quicRow, rows)
	}
	var subs struct {
		Subscriptions []struct {
			Connection uint64
			SubID      uint64 `json:"sub_id"`
			Topic      string
			Partition  uint32
			Prefetch   uint32
			AutoAck    bool `json:"auto_ack"`
			Kind       string
		}
	}
	a.json("GET", "/admin/api/subscriptions", "", 200, &subs)
	if len(subs.Subscriptions) != 1 || subs.Subscriptions[0].Connection != quicRow.ID || subs.Subscriptions[0].Topic != "fc" ||
		subs.Subscriptions[0].Prefetch != 4 || subs.Subscriptions[0].Kind != "queue" || subs.Subscriptions[0].SubID == 0 {
		t.Fatalf("subscriptions %+v", subs)
	}

	a.problem("POST", "/admin/api/connections/close", `{}`, 400, "bad_parameter")
	a.problem("POST", "/admin/api/connections/close", `{"id":"x"}`, 400, "bad_json")
	a.problem("POST", "/admin/api/connections/close", `{"id":1,"force":true}`, 400, "bad_json")
	a.problem("POST", "/admin/api/connections/close", ``, 400, "bad_json")
	a.problem("POST", "/admin/api/connections/close", `{"id":999999}`, 404, "not_found")

	var closed struct {
		Closed     bool
		Connection uint64
	}
	a.json("POST", "/admin/api/connections/close", `{"id":`+strconv.FormatUint(quicRow.ID, 10)+`}`, 200, &closed)
	if !closed.Closed || closed.Connection != quicRow.ID {
		t.Fatalf("close %+v", closed)
	}
	// The client's subscription ends with its connection.
	select {
	case _, ok := <-subscription.Deliveries():
		if ok {
			t.Fatal("a delivery after the force-close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the force-closed client's subscription did not end")
	}
	// Ended, not dormant despite the minute of grace; its unacked delivery
	// is redelivered at once although the lease is a minute.
	eventually(t, 5000, 20, func() bool { r := a.connections(); return len(r) == 1 && r[0].Transport == "tcp" })
	again, err := pub.SubscribeTopic(ctx, "fc", client.SubscribeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	if d := next(t, again, 10*time.Second); d.Text() != "held" {
		t.Fatalf("redelivered %q", d.Text())
	}
	var audit struct {
		Entries []struct{ Action, Target, Outcome string }
	}
	a.json("GET", "/admin/api/audit", "", 200, &audit)
	if len(audit.Entries) == 0 || audit.Entries[0].Action != "connection.close" || audit.Entries[0].Outcome != "ok" {
		t.Fatalf("audit %+v", audit.Entries)
	}
	metrics := scrapeFibril(t, a.base)
	if metrics["fibril_subscriptions_open"] != 1 || metrics["fibril_tcp_bytes_in_total"] == 0 || metrics["fibril_tcp_bytes_out_total"] == 0 {
		t.Fatalf("metrics: subscriptions %v bytes in %v out %v", metrics["fibril_subscriptions_open"], metrics["fibril_tcp_bytes_in_total"], metrics["fibril_tcp_bytes_out_total"])
	}
}

// readEvents reads SSE events from r until it has seen every name in want.
func readEvents(t *testing.T, r *bufio.Reader, want ...string) map[string]string {
	t.Helper()
	seen := map[string]string{}
	name := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the event stream ended: %v (seen %v)", err, seen)
		}
		line = strings.TrimRight(line, "\n")
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
		} else if v, ok := strings.CutPrefix(line, "data: "); ok && name != "" {
			seen[name] = v
		}
		done := true
		for _, w := range want {
			if _, ok := seen[w]; !ok {
				done = false
			}
		}
		if done {
			return seen
		}
	}
}

func TestSurfaceEventsDeliverTheAskedFamilies(t *testing.T) {
	s, a := startAdmin(t)
	dial(t, s, client.TransportTCP)
	a.problem("GET", "/admin/api/events?families=overview,bogus", "", 400, "bad_parameter")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.base+"/admin/api/events?families=overview,connections", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	first := readEvents(t, r, "overview", "connections")
	if strings.Contains(first["overview"], "error") || !strings.Contains(first["connections"], `"client_name":"fibril-go"`) {
		t.Fatalf("events %v", first)
	}
	// A second tick comes too; no family that was not asked for.
	second := readEvents(t, r, "overview", "connections")
	for name := range second {
		if name != "overview" && name != "connections" {
			t.Fatalf("an event of family %s nobody asked for", name)
		}
	}
}

func TestSurfaceUsers(t *testing.T) {
	s, a := startAdmin(t)
	login := func(user, pw string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, s.addr(), client.ClientOptions{Transport: client.TransportTCP,
			Credentials: &client.Credentials{Username: user, Password: pw}, DisableAutoReconnect: true})
		if err == nil {
			c.Close()
		}
		return err
	}
	var put struct {
		Name    string
		Created bool
	}
	a.json("POST", "/admin/api/users", `{"name":"alice","password":"first"}`, 200, &put)
	if !put.Created || put.Name != "alice" {
		t.Fatalf("add %+v", put)
	}
	if err := login("alice", "first"); err != nil {
		t.Fatalf("the added user cannot log in: %v", err)
	}
	a.json("POST", "/admin/api/users", `{"name":"alice","password":"second"}`, 200, &put)
	if put.Created {
		t.Fatal("a password change said created")
	}
	if err := login("alice", "first"); err == nil {
		t.Fatal("the old password still works")
	}
	if err := login("alice", "second"); err != nil {
		t.Fatalf("the new password: %v", err)
	}
	status, body := a.do("GET", "/admin/api/users", "")
	if status != 200 || body != `{"users":[{"name":"alice"}]}`+"\n" {
		t.Fatalf("users = %d %s", status, body)
	}
	a.problem("POST", "/admin/api/users", `{"name":"@node","password":"x"}`, 400, "bad_name")
	a.problem("POST", "/admin/api/users", `{"name":"has space","password":"x"}`, 400, "bad_name")
	a.problem("POST", "/admin/api/users", `{"name":"bob"}`, 400, "bad_name")
	a.problem("POST", "/admin/api/users", `{"name":"bob","password":"x","role":"admin"}`, 400, "bad_json")
	a.problem("POST", "/admin/api/users", `[1,2]`, 400, "bad_json")
	a.problem("DELETE", "/admin/api/users/nobody", "", 404, "not_found")
	a.json("DELETE", "/admin/api/users/alice", "", 200, nil)
	if err := login("alice", "second"); err == nil {
		t.Fatal("a removed user still logs in")
	}
	// The file is durable: a restart keeps what the API left.
	a.json("POST", "/admin/api/users", `{"name":"carol","password":"pw"}`, 200, nil)
	s.restart()
	if err := login("carol", "pw"); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}

// leafOf returns the SHA-256 fingerprint of the certificate a TLS server
// at addr presents.
func leafOf(t *testing.T, addr string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{transport.ALPN}})
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	return certs.FingerprintSHA256(conn.ConnectionState().PeerCertificates[0].Raw)
}

// quicLeafOf is leafOf over QUIC.
func quicLeafOf(t *testing.T, addr string) string {
	t.Helper()
	var got string
	conf := &tls.Config{InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
		got = certs.FingerprintSHA256(cs.PeerCertificates[0].Raw)
		return nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := transport.DialQUIC(ctx, addr, conf)
	if err != nil {
		t.Fatalf("QUIC handshake with %s: %v", addr, err)
	}
	c.Close()
	return got
}

func TestSurfaceTLSReload(t *testing.T) {
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	dataDir := t.TempDir()
	s := startServer(t, dataDir, "--admin-listen", adminAddr, "--tcp-tls")
	tlsDir := filepath.Join(dataDir, certs.TLSDirName)
	caPEM, err := os.ReadFile(filepath.Join(tlsDir, certs.CACertFileName))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	// The admin listener serves HTTPS with the broker's certificate.
	a := newAdminClient(t, "https://"+adminAddr)
	a.hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	eventually(t, 5000, 20, func() bool { status, _ := a.do("GET", "/readyz", ""); return status == 200 })

	var info struct {
		Fingerprint string `json:"fingerprint_sha256"`
		CA          string `json:"ca_fingerprint_sha256"`
		SANs        []string
		NotAfter    string `json:"not_after"`
		AdminHTTPS  bool   `json:"admin_https"`
	}
	a.json("GET", "/admin/api/tls", "", 200, &info)
	old := info.Fingerprint
	if old == "" || old != leafOf(t, s.addr()) || old != quicLeafOf(t, s.addr()) || old != leafOf(t, adminAddr) || !info.AdminHTTPS || len(info.SANs) == 0 {
		t.Fatalf("tls %+v; the wire presents %s", info, leafOf(t, s.addr()))
	}
	// A client connected before the reload keeps working after it.
	before, err := client.Dial(ctxT(t), s.addr(), client.ClientOptions{Transport: client.TransportTCP,
		TLS:         &client.TLSOptions{CAFile: filepath.Join(tlsDir, certs.CACertFileName)},
		Credentials: &client.Credentials{Username: "fibril", Password: "fibril"}, DisableAutoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()

	// An invalid certificate is refused; the old one keeps serving.
	leafPath, keyPath := filepath.Join(tlsDir, certs.LeafFileName), filepath.Join(tlsDir, certs.LeafKeyName)
	goodLeaf, _ := os.ReadFile(leafPath)
	goodKey, _ := os.ReadFile(keyPath)
	os.WriteFile(leafPath, []byte("not a certificate"), 0o600)
	a.problem("POST", "/admin/api/tls/reload", "", 400, "bad_certificate")
	otherDir := t.TempDir()
	if _, err := certs.LoadOrCreate(otherDir); err != nil {
		t.Fatal(err)
	}
	otherKey, _ := os.ReadFile(filepath.Join(otherDir, certs.TLSDirName, certs.LeafKeyName))
	os.WriteFile(leafPath, goodLeaf, 0o600)
	os.WriteFile(keyPath, otherKey, 0o600)
	a.problem("POST", "/admin/api/tls/reload", "", 400, "bad_certificate")
	if leafOf(t, s.addr()) != old || quicLeafOf(t, s.addr()) != old {
		t.Fatal("a refused reload changed the served certificate")
	}
	os.WriteFile(keyPath, goodKey, 0o600)

	// A new valid leaf (minted here from the same CA) is served to new
	// TCP-TLS, QUIC and admin HTTPS handshakes after the reload.
	os.Remove(leafPath)
	os.Remove(keyPath)
	fresh, err := certs.LoadOrCreate(dataDir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if fresh.LeafFingerprintSHA256 == old {
		t.Fatal("the test minted the same leaf")
	}
	var reloaded struct {
		Reloaded    bool
		Fingerprint string `json:"fingerprint_sha256"`
		NotAfter    string `json:"not_after"`
	}
	a.json("POST", "/admin/api/tls/reload", "", 200, &reloaded)
	if !reloaded.Reloaded || reloaded.Fingerprint != fresh.LeafFingerprintSHA256 || reloaded.NotAfter == "" {
		t.Fatalf("reload %+v", reloaded)
	}
	if got := leafOf(t, s.addr()); got != fresh.LeafFingerprintSHA256 {
		t.Fatalf("TCP-TLS after the reload presents %s, want %s", got, fresh.LeafFingerprintSHA256)
	}
	if got := quicLeafOf(t, s.addr()); got != fresh.LeafFingerprintSHA256 {
		t.Fatalf("QUIC after the reload presents %s", got)
	}
	a.hc.CloseIdleConnections()
	if got := leafOf(t, adminAddr); got != fresh.LeafFingerprintSHA256 {
		t.Fatalf("admin HTTPS after the reload presents %s", got)
	}
	publishText(t, before, "after-reload", "still here")
	var audit struct {
		Entries []struct{ Action, Outcome string }
	}
	a.json("GET", "/admin/api/audit", "", 200, &audit)
	if len(audit.Entries) != 3 || audit.Entries[0].Outcome != "ok" || audit.Entries[1].Outcome != "bad_certificate" {
		t.Fatalf("audit %+v", audit.Entries)
	}
}

func TestSurfaceAdminAuth(t *testing.T) {
	_, a := startAdmin(t, "--admin-auth", "--admin-username", "ops", "--admin-password", "hunter2")
	for _, p := range []string{"/healthz", "/readyz"} {
		if status, _ := a.do("GET", p, ""); status != 200 {
			t.Fatalf("%s needs auth: %d", p, status)
		}
	}
	for _, p := range []string{"/metrics", "/admin/api/overview", "/admin/api/connections"} {
		a.problem("GET", p, "", 401, "unauthorized")
	}
	a.user, a.pass = "ops", "wrong"
	a.problem("GET", "/admin/api/overview", "", 401, "unauthorized")
	a.user, a.pass = "ops", "hunter2"
	a.json("GET", "/admin/api/overview", "", 200, nil)
	if status, _ := a.do("GET", "/metrics", ""); status != 200 {
		t.Fatalf("/metrics with basic auth: %d", status)
	}
	// A person logs in: a session cookie, then no basic auth needed.
	a.user, a.pass = "", ""
	a.problem("POST", "/login", `{"username":"ops","password":"nope"}`, 401, "unauthorized")
	jar, _ := cookiejar.New(nil)
	a.hc.Jar = jar
	a.json("POST", "/login", `{"username":"ops","password":"hunter2"}`, 200, nil)
	a.json("GET", "/admin/api/overview", "", 200, nil)
	a.json("POST", "/admin/api/users", `{"name":"dave","password":"pw"}`, 200, nil)
	var audit struct {
		Entries []struct{ Actor, Action string }
	}
	a.json("GET", "/admin/api/audit", "", 200, &audit)
	if audit.Entries[0].Actor != "ops" || audit.Entries[0].Action != "user.put" {
		t.Fatalf("audit %+v", audit.Entries)
	}
	a.json("POST", "/logout", "", 200, nil)
	a.problem("GET", "/admin/api/overview", "", 401, "unauthorized")
}

func TestSurfaceRefusesUnauthenticatedNetworkAdmin(t *testing.T) {
	addr := "0.0.0.0:" + strconv.Itoa(freePort(t))
	// Bounded: a broker that wrongly starts is killed and the test fails.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, fibrilBin, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:"+strconv.Itoa(freePort(t)), "--admin-listen", addr)
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
		t.Fatalf("serve with an unauthenticated admin on 0.0.0.0 exited %d (%v):\n%s", code, err, out)
	}
	if !strings.Contains(string(out), "--admin-allow-unauthenticated") || !strings.Contains(string(out), "--admin-auth") {
		t.Fatalf("the refusal does not say what to do:\n%s", out)
	}
	// Allowed explicitly, or with auth, it starts.
	for _, extra := range [][]string{{"--admin-allow-unauthenticated"}, {"--admin-auth", "--admin-username", "u", "--admin-password", "p"}} {
		port := strconv.Itoa(freePort(t))
		startServer(t, t.TempDir(), append([]string{"--admin-listen", "0.0.0.0:" + port}, extra...)...)
		a := newAdminClient(t, "http://127.0.0.1:"+port)
		eventually(t, 5000, 20, func() bool { status, _ := a.do("GET", "/healthz", ""); return status == 200 })
	}
}
