package e2e

// The dashboard's Settings and Security pages and the login flow, in
// headless Chromium against a real `fibril serve` (dashboard_harness_test.go).
// Every change is made through the page (fill, click, confirm) and checked
// through the API, or through the wire protocol when it is about logins.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/security"
	"github.com/chromedp/chromedp"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/transport/certs"
)

// runtimeState is GET /admin/api/runtime-settings.
type runtimeState struct {
	Version  uint64
	Settings map[string]map[string]any
	Locked   []string
}

// settingInput is the id of a runtime key's input on the settings page.
func settingInput(name string) string {
	return "st-" + strings.NewReplacer(".", "-", "_", "-").Replace(name)
}

// jsonNum prints a JSON number as the page's inputs hold it.
func jsonNum(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// fillIn replaces the value of the input sel by typing value. (The
// harness's fill clears with chromedp.SetValue(sel, ""), which sends the
// empty string as no argument at all: a text input then holds
// "undefined". Clearing from the page's script avoids it.)
func fillIn(p *dashPage, sel, value string) {
	p.t.Helper()
	p.waitJS(sel+" is there", fmt.Sprintf(`!!document.querySelector(%q)`, sel))
	var ok bool
	p.eval(fmt.Sprintf(`(() => { const n = document.querySelector(%q); if (!n) return false; n.value = '';
		n.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, sel), &ok)
	if !ok {
		p.t.Fatalf("browser: no %s to fill", sel)
	}
	if value != "" {
		p.run("type into "+sel, chromedp.SendKeys(sel, value, chromedp.ByQuery))
	}
}

// waitInputs waits until every runtime input shows st's value.
func waitInputs(p *dashPage, st runtimeState) {
	p.t.Helper()
	for group, keys := range st.Settings {
		for key, v := range keys {
			id := settingInput(group + "." + key)
			if b, ok := v.(bool); ok {
				p.waitJS(id+" checked", fmt.Sprintf(`document.getElementById(%q).checked === %v`, id, b))
				continue
			}
			p.waitJS(id+" = "+jsonNum(v), fmt.Sprintf(`document.getElementById(%q).value === %q`, id, jsonNum(v)))
		}
	}
}

// TestDashboardSettings: the runtime settings form shows the API's version
// and values, with the group locked at startup (runtime_locks, from a TOML
// file) disabled and saying why; a change made on the page is in force in
// the API at the next version; an out-of-range value shows the API's
// message and changes nothing; a change made through the API behind the
// page's back makes the page's submit a 409 that the page explains, with
// the values in force now and the user's edit kept, and the re-apply lands
// on the new version without undoing the other change; the log level is
// set live; the startup configuration lists every value with its source
// (file, flag, default), filterable by text and by source, persisted in
// the URL.
func TestDashboardSettings(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "fibril.toml")
	if err := os.WriteFile(cfgFile, []byte("[runtime_locks]\nidle_queue_cleanup = true\n\n[delivery]\ndefault_max_retries = 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, a, p := startDashboard(t, "--config", cfgFile)
	c := dial(t, s, client.TransportTCP)
	publishText(t, c, "st-orders", "one")

	var st runtimeState
	a.json("GET", "/admin/api/runtime-settings", "", 200, &st)
	if len(st.Locked) != 1 || st.Locked[0] != "idle_queue_cleanup" {
		t.Fatalf("the TOML lock is not in force: %+v", st)
	}
	p.open("/admin/settings")
	p.waitText("#live", "live")
	p.waitText("#st-version", fmt.Sprintf("version %d", st.Version))
	waitInputs(p, st)
	p.waitJS("the locked group is disabled and says why", `document.querySelector('fieldset[data-group="idle_queue_cleanup"]').disabled &&
		document.getElementById('st-locked-idle_queue_cleanup').textContent.includes('runtime_locks.idle_queue_cleanup') &&
		!document.querySelector('fieldset[data-group="delivery"]').disabled`)
	p.waitText("#st-delivery-inflight-ttl-ms-help", "1 … 604,800,000 ms")

	// A change through the page.
	fillIn(p, "#st-delivery-inflight-ttl-ms", "45000")
	p.waitText("#st-dirty", "1 edit not applied yet")
	p.click("#st-apply")
	p.waitText("#st-status", fmt.Sprintf("Applied at version %d", st.Version+1))
	var after runtimeState
	a.json("GET", "/admin/api/runtime-settings", "", 200, &after)
	if after.Version != st.Version+1 || after.Settings["delivery"]["inflight_ttl_ms"] != float64(45000) {
		t.Fatalf("after the page's change: %+v", after)
	}
	p.waitText("#st-version", fmt.Sprintf("version %d", after.Version))

	// Out of range: the API's message, marked on the input, nothing changed.
	fillIn(p, "#st-delivery-inflight-ttl-ms", "0")
	p.click("#st-apply")
	p.waitText("#st-status", "delivery.inflight_ttl_ms must be between 1 and 604800000")
	p.waitJS("the bad input is marked", `document.getElementById('st-delivery-inflight-ttl-ms').getAttribute('aria-invalid') === 'true'`)
	var same runtimeState
	a.json("GET", "/admin/api/runtime-settings", "", 200, &same)
	if same.Version != after.Version || same.Settings["delivery"]["inflight_ttl_ms"] != float64(45000) {
		t.Fatalf("a refused value changed the settings: %+v", same)
	}
	p.click("#st-reset")
	waitInputs(p, after)

	// The 409: while the user edits one key on the page, someone changes
	// two keys through the API behind the page's back. The stream tells
	// the page, which says so but keeps the version the edit was made
	// from.
	fillIn(p, "#st-delivery-inflight-ttl-ms", "50000")
	a.json("PUT", "/admin/api/runtime-settings", fmt.Sprintf(`{"expected_version":%d,"settings":{"delivery":{"inflight_ttl_ms":20000,"expiry_batch_max":4096}}}`, after.Version), 200, nil)
	p.waitText("#st-newer", fmt.Sprintf("Version %d is in force now, changed elsewhere while you were editing version %d", after.Version+1, after.Version))
	p.click("#st-apply")
	p.waitText("#st-status", fmt.Sprintf("Not applied: the settings changed since you read them (now version %d)", after.Version+1))
	p.waitJS("the conflict is shown", `!document.getElementById('st-conflict').hidden`)
	p.waitText("#st-conflict", fmt.Sprintf("version %d is in force now, and you started from version %d", after.Version+1, after.Version))
	p.waitText(`#st-conflict-table tr[data-key="delivery.inflight_ttl_ms"] td.st-current`, "20,000 ms")
	p.waitText(`#st-conflict-table tr[data-key="delivery.expiry_batch_max"] td.st-current`, "4,096")
	p.waitText("#st-delivery-inflight-ttl-ms-now", "In force now: 20,000 ms")
	p.waitText("#st-version", fmt.Sprintf("version %d", after.Version+1))
	p.waitJS("the edit is kept and the untouched key shows the value in force",
		`document.getElementById('st-delivery-inflight-ttl-ms').value === '50000' && document.getElementById('st-delivery-expiry-batch-max').value === '4096'`)
	p.shots("settings-conflict")
	p.axe()
	p.click("#st-reapply")
	p.waitText("#st-status", fmt.Sprintf("Applied at version %d", after.Version+2))
	var reapplied runtimeState
	a.json("GET", "/admin/api/runtime-settings", "", 200, &reapplied)
	if reapplied.Version != after.Version+2 || reapplied.Settings["delivery"]["inflight_ttl_ms"] != float64(50000) ||
		reapplied.Settings["delivery"]["expiry_batch_max"] != float64(4096) {
		t.Fatalf("after the re-apply: %+v", reapplied)
	}
	p.waitJS("the conflict box is gone", `document.getElementById('st-conflict').hidden`)
	a.problem("PUT", "/admin/api/runtime-settings", fmt.Sprintf(`{"expected_version":%d,"settings":{"idle_queue_cleanup":{"enabled":true}}}`, reapplied.Version), 403, "locked")

	// With no edit on the form, a change made elsewhere shows at once.
	a.json("PUT", "/admin/api/runtime-settings", fmt.Sprintf(`{"expected_version":%d,"settings":{"connection":{"reconnect_grace_ms":7000}}}`, reapplied.Version), 200, &reapplied)
	p.waitText("#st-newer", fmt.Sprintf("Updated to version %d, changed elsewhere", reapplied.Version))
	p.waitJS("the new value is in the form", `document.getElementById('st-connection-reconnect-grace-ms').value === '7000'`)
	p.waitText("#st-version", fmt.Sprintf("version %d", reapplied.Version))

	// The log level, live.
	var lvl struct{ Level string }
	a.json("GET", "/admin/api/log-level", "", 200, &lvl)
	p.waitText("#st-log-current", lvl.Level)
	p.run("pick debug", chromedp.SetValue("#st-log-level", "debug", chromedp.ByQuery))
	p.click("#st-log-apply")
	p.waitText("#st-log-status", "The broker logs at debug")
	a.json("GET", "/admin/api/log-level", "", 200, &lvl)
	if lvl.Level != "debug" {
		t.Fatalf("log level after the page set debug: %s", lvl.Level)
	}
	p.waitText("#st-log-current", "debug")

	// The startup configuration: every value, its source and origin.
	var cfg struct {
		Values []struct {
			Key, Source, Origin string
			Value               any
		}
	}
	a.json("GET", "/admin/api/startup-config", "", 200, &cfg)
	p.waitText("#st-startup .table-tools", fmt.Sprintf("%d rows", len(cfg.Values)))
	var fromFile int
	for _, v := range cfg.Values {
		if v.Source == "file" {
			fromFile++
		}
	}
	p.waitText(`#cfg-table tr[data-key="delivery.default_max_retries"]`, "file")
	p.waitText(`#cfg-table tr[data-key="delivery.default_max_retries"]`, cfgFile)
	p.waitText(`#cfg-table tr[data-key="delivery.default_max_retries"]`, "7")
	p.waitText(`#cfg-table tr[data-key="admin.listener.bind"]`, "--admin-listen")
	p.waitText(`#cfg-table tr[data-key="server.name"]`, "built-in default")
	// The flag's seed (--lease-ms 2000) is not what is in force.
	p.waitText(`#cfg-table tr[data-key="delivery.inflight_ttl_ms"]`, "50,000 ms (50 s) in force")
	fillIn(p, "#cfg-filter", "max_retries")
	p.waitText("#st-startup .table-tools", "1 of "+strconv.Itoa(len(cfg.Values)))
	fillIn(p, "#cfg-filter", "")
	p.eval(`(() => { const s = document.getElementById('cfg-source'); s.value = 'file'; s.dispatchEvent(new Event('change')); return true; })()`, new(bool))
	p.waitJS("only the file's values", fmt.Sprintf(`document.querySelectorAll('#cfg-table tbody tr').length === %d && location.search.includes('cfg.source=file')`, fromFile))
	p.open("/admin/settings?cfg.source=file&cfg.q=retries")
	p.waitJS("the URL's filters are applied", `document.querySelectorAll('#cfg-table tbody tr').length === 1 &&
		document.getElementById('cfg-filter').value === 'retries' && document.getElementById('cfg-source').value === 'file'`)
	p.open("/admin/settings")
	p.waitText("#st-version", fmt.Sprintf("version %d", reapplied.Version))

	p.shots("settings")
	p.axe()
	p.keyboardReach()
	p.noErrors(400, 409)
	p.measure("settings", "/admin/settings")
	if strings.Contains(p.text("main"), "being built") {
		t.Fatal("the settings page is a placeholder")
	}
}

// TestDashboardSettingsGlobalDLQ: the global dead-letter target is set
// through the page and is the API's at the next version; a change made
// through the API meanwhile makes the page's set a 409 that names the
// target in force now, and setting again replaces it; a bad name shows the
// API's message; Clear asks first and then clears (target null), and the
// focus comes back (to Clear after a refused clear, to the topic once Clear
// is off); the "open the queue" link is dash.js's queueHref.
func TestDashboardSettingsGlobalDLQ(t *testing.T) {
	_, a, p := startDashboard(t)
	type dlqState struct {
		Version uint64
		Target  *struct{ Topic, Group string }
	}
	get := func() dlqState {
		var d dlqState
		a.json("GET", "/admin/api/global-dlq", "", 200, &d)
		return d
	}
	p.open("/admin/settings")
	p.waitText("#st-dlq-version", "version 0")
	p.waitText("#st-dlq-current", "none")

	fillIn(p, "#st-dlq-topic", "graveyard")
	p.click("#st-dlq-set")
	p.waitText("#st-dlq-status", "Global dead-letter queue set to graveyard (version 1)")
	if d := get(); d.Version != 1 || d.Target == nil || d.Target.Topic != "graveyard" {
		t.Fatalf("after the page set it: %+v", d)
	}
	p.waitText("#st-dlq-current", "graveyard")
	// The link is dash.js's queueHref: no group key for the default group.
	dlqLink(p, "/admin/queue?topic=graveyard")

	// Changed through the API while the user types a new target.
	fillIn(p, "#st-dlq-topic", "graveyard2")
	a.json("PUT", "/admin/api/global-dlq", `{"expected_version":1,"target":{"topic":"other","group":"g1"}}`, 200, nil)
	p.waitText("#st-dlq-newer", "Changed elsewhere to other / g1 (version 2) while you were typing")
	p.click("#st-dlq-set")
	p.waitText("#st-dlq-status", "someone else set the target to other / g1 (version 2)")
	p.waitText("#st-dlq-current", "other / g1")
	p.waitText("#st-dlq-version", "version 2")
	dlqLink(p, "/admin/queue?topic=other&group=g1")
	p.click("#st-dlq-set")
	p.waitText("#st-dlq-status", "set to graveyard2 (version 3)")
	if d := get(); d.Version != 3 || d.Target == nil || d.Target.Topic != "graveyard2" {
		t.Fatalf("after the re-set: %+v", d)
	}

	fillIn(p, "#st-dlq-topic", "Not A Queue!")
	p.click("#st-dlq-set")
	p.waitText("#st-dlq-status", "bad_name: target must be a queue name")
	if d := get(); d.Version != 3 {
		t.Fatalf("a bad name changed the target: %+v", d)
	}

	// Clear from the keyboard while someone else changed the target
	// through the API (the typed topic keeps the page on version 3): the
	// 409 names the target in force, and the focus is back on Clear, which
	// stays on (there still is a target).
	a.json("PUT", "/admin/api/global-dlq", `{"expected_version":3,"target":{"topic":"other2","group":"default"}}`, 200, nil)
	p.waitText("#st-dlq-newer", "Changed elsewhere to other2 (version 4)")
	p.eval(`document.getElementById('st-dlq-clear').focus(); document.activeElement.id`, new(string))
	p.run("Enter on Clear", chromedp.KeyEvent("\r"))
	p.waitText("#confirm-text", "graveyard2")
	p.acceptConfirm()
	p.waitText("#st-dlq-status", "Not changed: someone else set the target to other2 (version 4)")
	p.waitText("#st-dlq-current", "other2")
	dlqLink(p, "/admin/queue?topic=other2")
	focusOn(p, "st-dlq-clear", "after a refused Clear")

	p.click("#st-dlq-clear")
	p.waitText("#confirm-text", "other2")
	p.acceptConfirm()
	p.waitText("#st-dlq-status", "Global dead-letter queue cleared (version 5)")
	if d := get(); d.Version != 5 || d.Target != nil {
		t.Fatalf("after the page cleared it: %+v", d)
	}
	p.waitText("#st-dlq-current", "none")
	p.waitJS("Clear is off with no target", `document.getElementById('st-dlq-clear').disabled`)
	// Clear is off now: the focus goes to the topic, where a new target
	// is typed, not to the page's body.
	focusOn(p, "st-dlq-topic", "after the Clear")
	p.noErrors(400, 409)
}

// dlqLink checks the global target's "open the queue" link.
func dlqLink(p *dashPage, want string) {
	p.t.Helper()
	var href string
	p.eval(`(() => { const a = document.querySelector('#st-dlq-current a'); return a ? a.getAttribute('href') : ''; })()`, &href)
	if href != want {
		p.t.Errorf("the global target's link is %q, want %q", href, want)
	}
}

// focusOn checks that the element with id has the focus (a moment after
// the page's last change: a focus given back lands at once).
func focusOn(p *dashPage, id, when string) {
	p.t.Helper()
	var got string
	p.eval(`(() => { const n = document.activeElement; return !n || n === document.body ? 'body' : n.id || n.tagName; })()`, &got)
	if got != id {
		p.t.Errorf("%s the focus is on %s, want #%s", when, got, id)
	}
}

// failingReads stands for a broker whose first answers fail (a Node call
// past its deadline answers 503): injected before the page's scripts, it
// answers the page's first GET /admin/api/runtime-settings with a 503 and
// every GET /admin/api/global-dlq with a 503, and the event stream's
// global-dlq events never reach the page. The runtime settings then come
// from live()'s own read and the stream; the global target stays unread.
const failingReads = `(() => {
  const realFetch = window.fetch;
  const unavailable = (what) => Promise.resolve(new Response(JSON.stringify({code: 'unavailable', message: what + ' did not answer in time (test)'}),
    {status: 503, headers: {'Content-Type': 'application/json'}}));
  window.__reads = {runtimeFailed: 0, dlqFailed: 0};
  window.fetch = function (input, init) {
    const path = new URL(typeof input === 'string' ? input : input.url, location.href).pathname;
    const method = ((init && init.method) || 'GET').toUpperCase();
    if (method === 'GET' && path === '/admin/api/runtime-settings' && window.__reads.runtimeFailed === 0) {
      window.__reads.runtimeFailed++;
      return unavailable('the runtime settings');
    }
    if (method === 'GET' && path === '/admin/api/global-dlq') {
      window.__reads.dlqFailed++;
      return unavailable('the global dead-letter queue');
    }
    return realFetch.apply(this, arguments);
  };
  const RealES = window.EventSource;
  window.EventSource = class extends RealES {
    addEventListener(type, fn, opts) { if (type !== 'global-dlq') super.addEventListener(type, fn, opts); }
  };
})();`

// TestDashboardSettingsFirstReadFails: when the page's first read of the
// runtime settings fails, the form filled later (by live()'s read or the
// stream) can be applied: Apply is on and a change made through it is in
// force in the API. While the global target has not been read, setting
// one says it is still loading (no TypeError) and changes nothing.
func TestDashboardSettingsFirstReadFails(t *testing.T) {
	_, a, p := startDashboard(t)
	p.run("failing first reads", chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := cdppage.AddScriptToEvaluateOnNewDocument(failingReads).Do(ctx)
		return err
	}))
	var st runtimeState
	a.json("GET", "/admin/api/runtime-settings", "", 200, &st)
	p.open("/admin/settings")
	p.waitText("#live", "live")
	p.waitText("#st-version", fmt.Sprintf("version %d", st.Version))
	waitInputs(p, st)
	var failed int
	p.eval(`window.__reads.runtimeFailed`, &failed)
	if failed != 1 {
		t.Fatalf("the page's first read of the runtime settings was not the failed one (%d failed)", failed)
	}

	var applyOff bool
	p.eval(`document.getElementById('st-apply').disabled`, &applyOff)
	if applyOff {
		t.Errorf("Apply stays off after the form was filled from the stream")
	} else {
		fillIn(p, "#st-delivery-expiry-batch-max", "2048")
		p.click("#st-apply")
		p.waitText("#st-status", fmt.Sprintf("Applied at version %d", st.Version+1))
		var after runtimeState
		a.json("GET", "/admin/api/runtime-settings", "", 200, &after)
		if after.Version != st.Version+1 || after.Settings["delivery"]["expiry_batch_max"] != float64(2048) {
			t.Fatalf("after the page's change: %+v", after)
		}
	}

	// The global target was never read.
	p.waitText("#st-dlq-current", "Could not read the global dead-letter queue: unavailable")
	fillIn(p, "#st-dlq-topic", "graveyard")
	p.click("#st-dlq-set")
	p.waitJS("the set is answered", `document.getElementById('st-dlq-status').textContent !== ''`)
	if got := p.text("#st-dlq-status"); !strings.Contains(got, "still loading") {
		t.Errorf("setting the target before it was read says %q, want it to say it is still loading", got)
	}
	var d struct{ Version uint64 }
	a.json("GET", "/admin/api/global-dlq", "", 200, &d)
	if d.Version != 0 {
		t.Fatalf("a set before the target was read changed it: %+v", d)
	}
	p.axe()
	p.noErrors()
}

// dialAs answers whether a wire client logs in as user with pw.
func dialAs(s *server, user, pw string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.addr(), client.ClientOptions{Transport: client.TransportTCP,
		Credentials: &client.Credentials{Username: user, Password: pw}, DisableAutoReconnect: true})
	if err == nil {
		c.Close()
	}
	return err
}

// TestDashboardSecurityUsers: users are added, given a new password and
// removed through the page (the removal after a confirmation), and a wire
// client's AUTH follows each step: the new user logs in, the old password
// stops working, the removed user is refused; while a password is changed
// the name is read-only (no user is added by typing there), Cancel goes
// back to adding, and a user removed elsewhere ends the change; a bad name
// shows the API's message and the refused password is not kept; the
// certificate shown is the API's, served on QUIC but not TCP
// (no --tcp-tls); admin auth is shown off.
func TestDashboardSecurityUsers(t *testing.T) {
	s, a, p := startDashboard(t)
	var info struct {
		Fingerprint string `json:"fingerprint_sha256"`
	}
	a.json("GET", "/admin/api/tls", "", 200, &info)
	p.open("/admin/security")
	p.waitText("#live", "live")
	p.waitText("#sec-fingerprint", info.Fingerprint)
	p.waitText("#sec-served", "TCP without TLS")
	p.waitText("#sec-auth", "off")
	p.waitText("#sec-auth-badge", "auth off")
	p.waitText("#sec-users", "No user yet")
	p.waitText("#sec-default-login", "fibril / fibril")

	fillIn(p, "#sec-user-name", "alice")
	fillIn(p, "#sec-user-password", "first-pw")
	p.click("#sec-user-save")
	p.waitText("#sec-user-status", "Added user alice")
	p.waitJS("alice is listed", `!!document.querySelector('#users-table tr[data-key="alice"]')`)
	p.waitJS("the password field is emptied", `document.getElementById('sec-user-password').value === ''`)
	if status, body := a.do("GET", "/admin/api/users", ""); status != 200 || !strings.Contains(body, `"alice"`) {
		t.Fatalf("users after the page added alice: %d %s", status, body)
	}
	if err := dialAs(s, "alice", "first-pw"); err != nil {
		t.Fatalf("alice added through the page cannot AUTH: %v", err)
	}

	p.jsClick(`#users-table tr[data-key="alice"] button[data-action="password"]`)
	p.waitJS("the form is set to change alice's password", `document.getElementById('sec-user-name').value === 'alice' &&
		document.getElementById('sec-user-save').textContent === 'Change password' && document.activeElement.id === 'sec-user-password'`)
	// Changing a password never adds a user: the name is read-only then
	// (what a person types into it is dropped).
	var readOnly bool
	p.eval(`document.getElementById('sec-user-name').readOnly`, &readOnly)
	if !readOnly {
		t.Errorf("the name stays editable while changing alice's password")
	}
	p.run("type into the name", chromedp.SendKeys("#sec-user-name", "x", chromedp.ByQuery))
	fillIn(p, "#sec-user-password", "second-pw")
	p.click("#sec-user-save")
	p.waitJS("the change is answered", `document.getElementById('sec-user-status').textContent !== ''`)
	if status, body := a.do("GET", "/admin/api/users", ""); status != 200 || strings.Contains(body, `"alicex"`) {
		t.Errorf("changing alice's password added a user: %d %s", status, body)
	}
	p.waitText("#sec-user-status", "Changed the password of alice")
	if err := dialAs(s, "alice", "first-pw"); err == nil {
		t.Fatal("alice's old password still works after the page changed it")
	}
	if err := dialAs(s, "alice", "second-pw"); err != nil {
		t.Fatalf("alice's new password: %v", err)
	}

	// Back to adding: Cancel leaves the password mode, the name editable.
	p.jsClick(`#users-table tr[data-key="alice"] button[data-action="password"]`)
	p.waitText("#sec-user-save", "Change password")
	p.click("#sec-user-cancel")
	p.waitJS("the form adds users again", `document.getElementById('sec-user-save').textContent === 'Add user' &&
		!document.getElementById('sec-user-name').readOnly && document.getElementById('sec-user-name').value === '' &&
		document.getElementById('sec-user-cancel').hidden`)

	fillIn(p, "#sec-user-name", "has space")
	fillIn(p, "#sec-user-password", "x")
	p.click("#sec-user-save")
	p.waitText("#sec-user-status", "bad_name")
	// No password is kept, a refused one either.
	var pw string
	p.eval(`document.getElementById('sec-user-password').value`, &pw)
	if pw != "" {
		t.Errorf("the password field still holds %q after the API refused it", pw)
	}

	// The user whose password is being changed is removed elsewhere: the
	// form goes back to adding (a "change" would add it back).
	a.json("POST", "/admin/api/users", `{"name":"bob","password":"bob-pw"}`, 200, nil)
	p.waitJS("bob is listed", `!!document.querySelector('#users-table tr[data-key="bob"]')`)
	p.jsClick(`#users-table tr[data-key="bob"] button[data-action="password"]`)
	p.waitText("#sec-user-hint", "Changing the password of bob")
	a.json("DELETE", "/admin/api/users/bob", "", 200, nil)
	p.waitText("#sec-user-status", "User bob was removed elsewhere; its password was not changed.")
	p.waitJS("the form adds users again", `document.getElementById('sec-user-save').textContent === 'Add user' && !document.getElementById('sec-user-name').readOnly`)

	p.shots("security")
	p.axe()
	p.keyboardReach()

	p.jsClick(`#users-table tr[data-key="alice"] button[data-action="remove"]`)
	p.waitText("#confirm-text", "Remove user alice?")
	p.acceptConfirm()
	p.waitJS("alice is gone", `!document.querySelector('#users-table tr[data-key="alice"]')`)
	if status, body := a.do("GET", "/admin/api/users", ""); status != 200 || strings.Contains(body, `"alice"`) {
		t.Fatalf("users after the page removed alice: %d %s", status, body)
	}
	if err := dialAs(s, "alice", "second-pw"); err == nil {
		t.Fatal("alice still logs in after the page removed her")
	}
	p.noErrors(400)
	p.measure("security", "/admin/security")
}

// mintLeafFor writes a server certificate signed by the data directory's
// CA, valid for validity from now, over the leaf the broker reads on a
// reload; it answers its fingerprint.
func mintLeafFor(t *testing.T, tlsDir string, validity time.Duration) string {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(tlsDir, certs.CACertFileName))
	if err != nil {
		t.Fatal(err)
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(tlsDir, certs.CAKeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(caKeyPEM)
	if cb == nil || kb == nil {
		t.Fatal("the CA files do not hold PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 100))
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "fibril-broker-short", Organization: []string{"Fibril"}},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(validity), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	if err := os.WriteFile(filepath.Join(tlsDir, certs.LeafKeyName), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tlsDir, certs.LeafFileName), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return certs.FingerprintSHA256(der)
}

// TestDashboardSecurityTLSReload: a broker with --tcp-tls serves the
// dashboard over HTTPS; the Security page shows the API's certificate
// (fingerprint, SANs, days left) served on TCP, QUIC and the admin
// listener; a reload of broken material through the page shows the API's
// refusal and the old fingerprint stays; a reload of a new leaf (valid for
// ten days) shows the new fingerprint, the one the wire listener presents,
// and the expiry warning.
func TestDashboardSecurityTLSReload(t *testing.T) {
	needBrowser(t)
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	dataDir := t.TempDir()
	s := startServer(t, dataDir, "--admin-listen", adminAddr, "--tcp-tls")
	caPEM, err := os.ReadFile(filepath.Join(dataDir, certs.TLSDirName, certs.CACertFileName))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	a := newAdminClient(t, "https://"+adminAddr)
	a.hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	eventually(t, 5000, 20, func() bool { status, _ := a.do("GET", "/readyz", ""); return status == 200 })
	p := openBrowser(t, a.base)
	// The broker's CA is not the browser's: this tab accepts it (the CA's
	// own trust is TestSurfaceTLSReload's).
	p.run("accept the broker's certificate", security.SetIgnoreCertificateErrors(true))
	t.Cleanup(func() { _ = chromedp.Run(p.ctx, security.SetIgnoreCertificateErrors(false)) })

	type tlsState struct {
		Fingerprint string `json:"fingerprint_sha256"`
		SANs        []string
		NotAfter    string `json:"not_after"`
		AdminHTTPS  bool   `json:"admin_https"`
	}
	var info tlsState
	var notAfter time.Time
	a.json("GET", "/admin/api/tls", "", 200, &info)
	if !info.AdminHTTPS {
		t.Fatalf("the admin listener is not HTTPS: %+v", info)
	}
	old := info.Fingerprint
	p.open("/admin/security")
	p.waitText("#live", "live")
	p.waitText("#sec-fingerprint", old)
	p.waitText("#sec-served", "TCP with TLS")
	p.waitText("#sec-served", "this admin listener over HTTPS")
	for _, san := range info.SANs {
		p.waitText("#sec-sans", san)
	}
	notAfter, err = time.Parse(time.RFC3339, info.NotAfter)
	if err != nil {
		t.Fatal(err)
	}
	left := int(time.Until(notAfter) / (24 * time.Hour))
	days := strconv.Itoa(left)
	if left >= 1000 {
		days = strconv.Itoa(left/1000) + "," + fmt.Sprintf("%03d", left%1000)
	}
	p.waitText("#sec-days-left", days+" days left")
	p.waitText("#sec-cert-badge", "valid")

	// Broken material: refused, the old certificate keeps serving.
	tlsDir := filepath.Join(dataDir, certs.TLSDirName)
	leafPath := filepath.Join(tlsDir, certs.LeafFileName)
	goodLeaf, _ := os.ReadFile(leafPath)
	if err := os.WriteFile(leafPath, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.click("#sec-reload")
	p.waitText("#sec-reload-status", "Refused: bad_certificate: the certificate material in")
	p.waitText("#sec-fingerprint", old)
	if leafOf(t, s.addr()) != old {
		t.Fatal("a refused reload changed the served certificate")
	}
	os.WriteFile(leafPath, goodLeaf, 0o644)

	// A new leaf, ten days long.
	fresh := mintLeafFor(t, tlsDir, 10*24*time.Hour+time.Hour)
	p.click("#sec-reload")
	p.waitText("#sec-reload-status", "Reloaded: new handshakes (TCP, QUIC, admin HTTPS) get "+fresh)
	p.waitText("#sec-reload-status", "it replaced "+old)
	p.waitText("#sec-fingerprint", fresh)
	a.json("GET", "/admin/api/tls", "", 200, &info)
	if info.Fingerprint != fresh {
		t.Fatalf("the API says %s after the page's reload, want %s", info.Fingerprint, fresh)
	}
	if got := leafOf(t, s.addr()); got != fresh {
		t.Fatalf("TCP-TLS presents %s after the page's reload, want %s", got, fresh)
	}
	p.waitText("#sec-cert-badge", "expires in 10 days")
	p.waitText("#sec-expiry-warning", "expires in 10 days: put a new server.pem and server.key in "+dataDir)
	p.waitJS("the badge is a warning", `document.getElementById('sec-cert-badge').classList.contains('warning')`)
	p.shots("security-tls-expiring")
	p.axe()
	p.noErrors(400)
}

// loginReady waits for the login page's script to have started (it
// focuses the username): a submit before it would be the browser's own.
func loginReady(p *dashPage) {
	p.t.Helper()
	p.waitJS("the login page's script runs", `location.pathname === '/login' && document.activeElement && document.activeElement.id === 'login-username'`)
}

// TestDashboardLogin: with admin auth on, opening a page without a session
// goes to the login page with the page as next; a wrong password shows the
// API's message and stays; the right one returns to the page (its query
// kept), which then reads the API with the session cookie; the Security
// page says auth is on; Log out ends the session (the old cookie is
// refused by the API) and a page goes back to the login; past the rate
// limit the page shows the 429's wait and keeps its button off.
func TestDashboardLogin(t *testing.T) {
	_, a, p := startDashboard(t, "--admin-auth", "--admin-username", "ops", "--admin-password", "hunter2")
	// The browser's cookies are per host, not per port: leave none behind
	// for the next test's broker on 127.0.0.1.
	t.Cleanup(func() { _ = chromedp.Run(p.ctx, network.ClearBrowserCookies()) })

	p.open("/admin/settings?cfg.q=tls")
	p.waitJS("the login page with next", `location.pathname === '/login' && new URLSearchParams(location.search).get('next') === '/admin/settings?cfg.q=tls'`)
	p.waitText("#login-why", "/admin/settings?cfg.q=tls")
	loginReady(p)

	fillIn(p, "#login-username", "ops")
	fillIn(p, "#login-password", "wrong")
	p.click("#login-submit")
	p.waitText("#login-status", "Wrong username or password.")
	p.waitJS("still on the login page, password emptied", `location.pathname === '/login' && document.getElementById('login-password').value === ''`)
	p.shots("login")
	p.axe()
	p.keyboardReach()

	fillIn(p, "#login-password", "hunter2")
	p.click("#login-submit")
	p.waitJS("back on the page", `location.pathname === '/admin/settings' && location.search === '?cfg.q=tls'`)
	p.waitText("#st-version", "version")
	p.waitJS("the filter of the URL is kept", `document.getElementById('cfg-filter') && document.getElementById('cfg-filter').value === 'tls'`)
	var cookies []*network.Cookie
	p.run("cookies", chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		cookies, err = network.GetCookies().Do(ctx)
		return err
	}))
	session := ""
	for _, c := range cookies {
		if c.Name == "fibril_admin_session" {
			session = c.Value
			if !c.HTTPOnly {
				t.Fatal("the session cookie is readable by scripts")
			}
		}
	}
	if session == "" {
		t.Fatalf("no session cookie after the login: %v", cookies)
	}
	withCookie := func() int {
		req, _ := http.NewRequest("GET", a.base+"/admin/api/overview", nil)
		req.AddCookie(&http.Cookie{Name: "fibril_admin_session", Value: session})
		resp, err := a.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := withCookie(); got != 200 {
		t.Fatalf("the page's session cookie: %d", got)
	}
	p.open("/admin/security")
	p.waitText("#sec-auth", "on, as ops (--admin-username)")
	p.waitText("#sec-auth-badge", "auth on")

	p.click("#logout")
	p.waitJS("the login page after log out", `location.pathname === '/login'`)
	if got := withCookie(); got != 401 {
		t.Fatalf("the session still works after Log out: %d", got)
	}
	p.open("/admin/security")
	p.waitJS("a page needs the login again", `location.pathname === '/login' && new URLSearchParams(location.search).get('next') === '/admin/security'`)

	// next is followed only to a path on this origin.
	for _, evil := range []string{"//evil.example/x", "https://evil.example/", "/\\evil.example/"} {
		p.open("/login?next=" + url.QueryEscape(evil))
		loginReady(p)
		fillIn(p, "#login-username", "ops")
		fillIn(p, "#login-password", "hunter2")
		p.click("#login-submit")
		p.waitJS("next "+evil+" is not followed", fmt.Sprintf(`location.origin === %q && location.pathname === '/'`, a.base))
		p.waitText("#live", "live") // the page's script is running: Log out is wired
		p.click("#logout")
		p.waitJS("logged out", `location.pathname === '/login'`)
	}

	// The rate limit: one failure so far (the page's); nine more from a
	// script at the same address make ten, and then even the right
	// password is answered 429.
	a.user, a.pass = "ops", "nope"
	for range 9 {
		a.problem("GET", "/admin/api/overview", "", 401, "unauthorized")
	}
	loginReady(p)
	fillIn(p, "#login-username", "ops")
	fillIn(p, "#login-password", "hunter2")
	p.click("#login-submit")
	p.waitText("#login-status", "Too many failed logins from this address; wait")
	p.waitJS("the button waits", `document.getElementById('login-submit').disabled && /^Wait \d+ s$/.test(document.getElementById('login-submit').textContent)`)
	p.waitJS("still on the login page", `location.pathname === '/login'`)
	p.noErrors(401, 429)
	p.measure("login", "/login")
}
