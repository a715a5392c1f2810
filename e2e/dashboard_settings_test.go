package e2e

// The dashboard's Settings and Security pages and the login flow, in
// headless Chromium against a real `fibril serve` (dashboard_harness_test.go).
// Every change is made through the page (fill, click, confirm) and checked
// through the API, or through the wire protocol when it is about logins.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fibril-go/fibril/client"
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
