package e2e

// The Connections, Subscriptions and Activity pages (issue 13) against a
// real broker with real named clients over TCP and QUIC: the rows on the
// pages are the API's, they change live (a client that leaves turns
// dormant or disappears without a reload), a force-close done through the
// page (with its confirmation) ends the client's session, as the API and
// the client itself see, and the audit page shows it; filters live in the
// URL. Helpers here are prefixed clients* so as not to collide with the
// other pages' tests.

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/fibril-go/fibril/client"
)

// clientsDial connects a client that names itself name in HELLO.
func clientsDial(t *testing.T, s *server, transport, name string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.addr(), client.ClientOptions{Transport: transport, ClientName: name,
		Credentials: &client.Credentials{Username: "fibril", Password: "fibril"}, DisableAutoReconnect: true})
	if err != nil {
		t.Fatalf("dial %s as %s: %v\nserver log:\n%s", transport, name, err, s.log.String())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func clientsSubscribe(t *testing.T, c *client.Client, topic string, opts client.SubscribeOptions) *client.Subscription {
	t.Helper()
	sub, err := c.SubscribeTopic(ctxT(t), topic, opts)
	if err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	return sub
}

// clientsSub is a row of GET /admin/api/subscriptions.
type clientsSub struct {
	Connection uint64 `json:"connection"`
	Session    uint64 `json:"session"`
	SubID      uint64 `json:"sub_id"`
	Topic      string `json:"topic"`
	Group      string `json:"group"`
	Partition  uint32 `json:"partition"`
	Prefetch   uint32 `json:"prefetch"`
	Held       int    `json:"held"`
	AutoAck    bool   `json:"auto_ack"`
	Kind       string `json:"kind"`
}

// clientsAudit is an entry of GET /admin/api/audit.
type clientsAudit struct {
	Seq     uint64 `json:"seq"`
	AtMs    int64  `json:"at_ms"`
	Actor   string `json:"actor"`
	Action  string `json:"action"`
	Target  string `json:"target"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail"`
}

func clientsAPI(a *adminClient) ([]connRow, []clientsSub) {
	var conns struct{ Connections []connRow }
	var subs struct{ Subscriptions []clientsSub }
	a.json("GET", "/admin/api/connections", "", 200, &conns)
	a.json("GET", "/admin/api/subscriptions", "", 200, &subs)
	return conns.Connections, subs.Subscriptions
}

func clientsAuditAPI(a *adminClient) []clientsAudit {
	var out struct{ Entries []clientsAudit }
	a.json("GET", "/admin/api/audit", "", 200, &out)
	return out.Entries
}

// clientsFind answers the API row of the client name (dormant or not).
func clientsFind(rows []connRow, name string, dormant bool) (connRow, bool) {
	for _, r := range rows {
		if r.ClientName == name && r.Dormant == dormant {
			return r, true
		}
	}
	return connRow{}, false
}

// clientsPageRows reads a table of the page: row key -> field -> text (the
// cells' data-f spans).
func clientsPageRows(p *dashPage, table string) map[string]map[string]string {
	p.t.Helper()
	out := map[string]map[string]string{}
	p.eval(fmt.Sprintf(`(() => { const o = {};
		document.querySelectorAll('#%s tbody tr[data-key]').forEach(tr => {
			const f = {}; tr.querySelectorAll('[data-f]').forEach(n => { f[n.dataset.f] = n.textContent.trim(); });
			o[tr.dataset.key] = f; });
		return o; })()`, table), &out)
	return out
}

// clientsPageOrder answers the row keys of a table in the page's order.
func clientsPageOrder(p *dashPage, table string) []string {
	p.t.Helper()
	var out []string
	p.eval(fmt.Sprintf(`[...document.querySelectorAll('#%s tbody tr[data-key]')].map(tr => tr.dataset.key)`, table), &out)
	return out
}

// clientsChoose picks value in the <select> sel as a person does (the
// change event the page listens to).
func clientsChoose(p *dashPage, sel, value string) {
	p.t.Helper()
	var ok bool
	p.eval(fmt.Sprintf(`(() => { const n = document.querySelector(%q); if (!n || ![...n.options].some(o => o.value === %q)) return false;
		n.focus(); n.value = %q; n.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, sel, value, value), &ok)
	if !ok {
		p.t.Fatalf("no option %q in %s", value, sel)
	}
}

// clientsFill types value into the input sel, as a person does. The
// harness's fill clears with chromedp.SetValue(sel, ""), which chromedp
// v0.14 reports as failed on every input ("could not set value"): an empty
// string answer reads as a mismatch. So the input is cleared here from the
// page (with the input event a person's delete would fire).
func clientsFill(p *dashPage, sel, value string) {
	p.t.Helper()
	var ok bool
	p.eval(fmt.Sprintf(`(() => { const n = document.querySelector(%q); if (!n) return false; n.focus(); n.value = '';
		n.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, sel), &ok)
	if !ok {
		p.t.Fatalf("no input %s", sel)
	}
	p.run("type into "+sel, chromedp.SendKeys(sel, value, chromedp.ByQuery))
}

// clientsRefuse makes the browser's requests matching the URL patterns
// answer 503 with the API's error shape (a broker whose listing fails),
// until the answered stop is called.
func clientsRefuse(p *dashPage, message string, patterns ...string) (stop func()) {
	p.t.Helper()
	body := base64.StdEncoding.EncodeToString([]byte(`{"code":"not_ready","message":"` + message + `"}`))
	var on atomic.Bool
	on.Store(true)
	chromedp.ListenTarget(p.ctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok || !on.Load() {
			return
		}
		go func() {
			c := chromedp.FromContext(p.ctx)
			ctx := cdp.WithExecutor(p.ctx, c.Target)
			_ = fetch.FulfillRequest(e.RequestID, 503).WithBody(body).
				WithResponseHeaders([]*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}}).Do(ctx)
		}()
	})
	var rp []*fetch.RequestPattern
	for _, pat := range patterns {
		rp = append(rp, &fetch.RequestPattern{URLPattern: pat})
	}
	p.run("intercept "+strings.Join(patterns, " "), fetch.Enable().WithPatterns(rp))
	return func() {
		on.Store(false)
		p.run("stop intercepting", fetch.Disable())
	}
}

// clientsWantConnections is what the Connections page must show for the
// API's rows: the key of each row and its fields, and the summary.
func clientsWantConnections(conns []connRow, subs []clientsSub) (map[string]map[string]string, map[string]int) {
	prefetch, held := map[uint64]int{}, map[uint64]int{}
	for _, s := range subs {
		prefetch[s.Session] += int(s.Prefetch)
		held[s.Session] += s.Held
	}
	rows := map[string]map[string]string{}
	sum := map[string]int{"open": 0, "tcp": 0, "quic": 0, "tls": 0, "dormant": 0, "subs": len(subs)}
	for _, c := range conns {
		key, id := "c"+strconv.FormatUint(c.ID, 10), strconv.FormatUint(c.ID, 10)
		state := "connected"
		if c.Dormant {
			key, id, state = "s"+strconv.FormatUint(c.Session, 10), "–", "dormant"
			sum["dormant"]++
		} else {
			sum["open"]++
			sum[c.Transport]++
			if c.TLS {
				sum["tls"]++
			}
		}
		tls, auth := "plaintext", "not authenticated"
		if c.TLS {
			tls = "TLS"
		}
		if c.Authenticated {
			auth = "authenticated"
		}
		rows[key] = map[string]string{
			"name": c.ClientName, "version": c.ClientVersion, "transport": strings.ToUpper(c.Transport), "tls": tls,
			"remote": c.Remote, "auth": auth, "state": state, "subs": strconv.Itoa(c.Subscriptions),
			"prefetch": strconv.Itoa(prefetch[c.Session]), "held": strconv.Itoa(held[c.Session]), "id": id,
			"session": strconv.FormatUint(c.Session, 10),
		}
	}
	return rows, sum
}

// clientsMatchConnections waits until the Connections page shows what the
// API answers (read again on each try: a tick may fall between the two).
func clientsMatchConnections(t *testing.T, p *dashPage, a *adminClient) ([]connRow, []clientsSub) {
	t.Helper()
	deadline := time.Now().Add(12 * time.Second)
	for {
		conns, subs := clientsAPI(a)
		want, sum := clientsWantConnections(conns, subs)
		got := clientsPageRows(p, "cn-table")
		diff := clientsDiff(want, got, "since")
		for k, v := range sum {
			var shown string
			p.eval(fmt.Sprintf(`(document.getElementById('cn-sum-%s') || {}).textContent || ''`, k), &shown)
			if shown != strconv.Itoa(v) {
				diff = append(diff, fmt.Sprintf("summary %s: page %q, API %d", k, shown, v))
			}
		}
		if len(diff) == 0 {
			for k, r := range got {
				if !strings.HasSuffix(r["since"], "ago") && r["since"] != "just now" {
					t.Fatalf("row %s: connected %q", k, r["since"])
				}
			}
			return conns, subs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connections page does not match the API:\n%s\npage: %v\napi: %+v %+v", strings.Join(diff, "\n"), got, conns, subs)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// clientsDiff lists the differences of two tables (fields in skip only
// need to be there).
func clientsDiff(want, got map[string]map[string]string, skip ...string) []string {
	var diff []string
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			diff = append(diff, "missing row "+k)
			continue
		}
		for f, v := range w {
			if g[f] != v {
				diff = append(diff, fmt.Sprintf("row %s %s: page %q, API %q", k, f, g[f], v))
			}
		}
		for _, f := range skip {
			if _, ok := g[f]; !ok {
				diff = append(diff, fmt.Sprintf("row %s has no %s", k, f))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diff = append(diff, "extra row "+k)
		}
	}
	sort.Strings(diff)
	return diff
}

// clientsMarkPage marks the document, so a later check can tell the page
// was not reloaded (what it shows came live).
func clientsMarkPage(p *dashPage) {
	p.t.Helper()
	p.eval(`window.clientsMark = 'kept'; true`, new(bool))
}

func clientsStillMarked(p *dashPage) {
	p.t.Helper()
	var mark string
	p.eval(`window.clientsMark || ''`, &mark)
	if mark != "kept" {
		p.t.Fatal("the page was reloaded: the change did not come live")
	}
}

// clientsURL answers the page's location (path and query).
func clientsURL(p *dashPage) string {
	p.t.Helper()
	var u string
	p.eval(`location.pathname + location.search`, &u)
	return u
}

// TestDashboardConnections: named clients over TCP and QUIC with
// subscriptions of several prefetches; the Connections page's rows and
// summary are the API's (name, version, transport, TLS, remote, auth,
// state, subscriptions, their summed prefetch and held, ids); a client
// that disconnects within --reconnect-grace-ms turns dormant live, without
// a reload; the state, transport and text filters go into the URL and
// survive a reload; Cancel in the confirmation closes nothing; a
// force-close confirmed on the page ends the QUIC client's session (gone
// from the API, no dormancy despite the grace; the client's subscription
// ends and a reconnect finds no session to resume) and the dormant session
// is ended the same way; a close of a connection that went meanwhile shows
// the API's 404 message; the activity page then lists the connection.close
// entries as the API does.
func TestDashboardConnections(t *testing.T) {
	s, a, p := startDashboard(t, "--reconnect-grace-ms", "60000", "--lease-ms", "60000")
	tcp := clientsDial(t, s, client.TransportTCP, "dash-orders-tcp")
	clientsSubscribe(t, tcp, "cn-orders", client.SubscribeOptions{Prefetch: 8})
	clientsSubscribe(t, tcp, "cn-audit", client.SubscribeOptions{Prefetch: 3, AutoAck: true})
	quic := clientsDial(t, s, client.TransportQUIC, "dash-worker-quic")
	quicSub := clientsSubscribe(t, quic, "cn-orders", client.SubscribeOptions{Prefetch: 4})
	pub := clientsDial(t, s, client.TransportTCP, "dash-publisher")
	leaver := clientsDial(t, s, client.TransportTCP, "dash-leaver")
	clientsSubscribe(t, leaver, "cn-held", client.SubscribeOptions{Prefetch: 5})
	for i := range 6 {
		publishText(t, pub, "cn-orders", "order "+strconv.Itoa(i))
	}

	p.open("/admin/connections")
	p.waitText("#live", "live")
	conns, _ := clientsMatchConnections(t, p, a)
	if len(conns) != 4 {
		t.Fatalf("connections %+v", conns)
	}
	quicRow, ok := clientsFind(conns, "dash-worker-quic", false)
	if !ok || quicRow.Transport != "quic" || !quicRow.TLS || quicRow.Subscriptions != 1 || quicRow.ClientVersion == "" {
		t.Fatalf("the quic client's row %+v", quicRow)
	}
	tcpRow, _ := clientsFind(conns, "dash-orders-tcp", false)
	leaverRow, _ := clientsFind(conns, "dash-leaver", false)

	// The leaver drops within its grace: dormant, live. What is published
	// to it meanwhile is held by its session; the page shows what the API
	// counts.
	clientsMarkPage(p)
	leaver.Close()
	for i := range 3 {
		publishText(t, pub, "cn-held", "kept "+strconv.Itoa(i))
	}
	dormantKey := "s" + strconv.FormatUint(leaverRow.Session, 10)
	p.waitJS("the leaver turns dormant on the page", fmt.Sprintf(
		`!!document.querySelector('#cn-table tr[data-key=%q] .badge.warning') && !document.querySelector('#cn-table tr[data-key="c%d"]')`, dormantKey, leaverRow.ID))
	clientsStillMarked(p)
	conns, subs := clientsMatchConnections(t, p, a)
	held := 0
	for _, sb := range subs {
		held += sb.Held
	}
	t.Logf("deliveries held by the dormant session: %d", held)

	// Filters: in the URL, kept by a reload.
	clientsChoose(p, "#cn-state", "dormant")
	if got := clientsPageOrder(p, "cn-table"); len(got) != 1 || got[0] != dormantKey {
		t.Fatalf("state=dormant shows %v", got)
	}
	if u := clientsURL(p); !strings.Contains(u, "state=dormant") {
		t.Fatalf("the filter is not in the URL: %s", u)
	}
	p.open(clientsURL(p))
	p.waitJS("dormant only after a reload", fmt.Sprintf(`document.getElementById('cn-state').value === 'dormant' &&
		[...document.querySelectorAll('#cn-table tbody tr[data-key]')].map(t => t.dataset.key).join() === %q`, dormantKey))
	p.open("/admin/connections?transport=quic")
	p.waitJS("quic only", fmt.Sprintf(`document.getElementById('cn-transport').value === 'quic' &&
		[...document.querySelectorAll('#cn-table tbody tr[data-key]')].map(t => t.dataset.key).join() === 'c%d'`, quicRow.ID))
	clientsChoose(p, "#cn-transport", "")
	clientsFill(p, "#cn-filter", "orders-tcp")
	p.waitJS("the text filter", fmt.Sprintf(`[...document.querySelectorAll('#cn-table tbody tr[data-key]')].map(t => t.dataset.key).join() === 'c%d'`, tcpRow.ID))
	if u := clientsURL(p); !strings.Contains(u, "cn.q=orders-tcp") || strings.Contains(u, "transport") {
		t.Fatalf("the URL after the filters: %s", u)
	}

	p.open("/admin/connections")
	clientsMatchConnections(t, p, a)
	p.shots("connections")
	p.axe()
	p.keyboardReach()

	// Cancel closes nothing.
	p.open("/admin/connections")
	closeQuic := fmt.Sprintf(`#cn-table button[data-close="c%d"]`, quicRow.ID)
	p.waitJS("the close button", fmt.Sprintf(`!!document.querySelector(%q)`, closeQuic))
	p.click(closeQuic)
	p.waitJS("the confirm dialog opens", `document.getElementById('confirm').open`)
	if text := p.text("#confirm-text"); !strings.Contains(text, "dash-worker-quic") || !strings.Contains(text, "GOING_AWAY") {
		t.Fatalf("the confirmation says %q", text)
	}
	p.click(`#confirm button[value="cancel"]`)
	time.Sleep(300 * time.Millisecond)
	if conns, _ := clientsAPI(a); len(conns) != 4 {
		t.Fatalf("Cancel closed something: %+v", conns)
	}

	// Force-close through the page: confirmed, the result shown, the
	// session ended (not dormant, though the grace is a minute).
	p.click(closeQuic)
	p.acceptConfirm()
	p.waitText("#cn-result", fmt.Sprintf("Closed connection %d of “dash-worker-quic”", quicRow.ID))
	p.waitJS("the row goes", fmt.Sprintf(`!document.querySelector(%q)`, closeQuic))
	eventually(t, 10000, 50, func() bool {
		conns, _ := clientsAPI(a)
		_, open := clientsFind(conns, "dash-worker-quic", false)
		_, dormant := clientsFind(conns, "dash-worker-quic", true)
		return !open && !dormant
	})
	select {
	case _, ok := <-quicSub.Deliveries():
		for ok {
			_, ok = <-quicSub.Deliveries() // what it had prefetched, then the end
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the force-closed client's subscription did not end")
	}
	if !quic.Connection().Closed {
		t.Fatal("the force-closed client does not see its connection closed")
	}
	if outcome, err := quic.Reconnect(ctxT(t)); err != nil || outcome != client.ResumeNotFound {
		t.Fatalf("the force-closed client's reconnect: outcome %v, err %v (want its resume to find no session)", outcome, err)
	}

	// The dormant session, ended from its row.
	p.click(fmt.Sprintf(`#cn-table button[data-close=%q]`, dormantKey))
	p.acceptConfirm()
	p.waitText("#cn-result", fmt.Sprintf("Ended dormant session %d", leaverRow.Session))
	eventually(t, 10000, 50, func() bool { conns, _ := clientsAPI(a); _, ok := clientsFind(conns, "dash-leaver", true); return !ok })
	p.waitJS("the dormant row goes", fmt.Sprintf(`!document.querySelector('#cn-table tr[data-key=%q]')`, dormantKey))

	// A close of a connection that went meanwhile: the row stays while its
	// button has the focus (the table does not redraw under the keyboard),
	// the connection is closed by a script, and the page's close shows the
	// API's answer.
	closeTCP := fmt.Sprintf(`#cn-table button[data-close="c%d"]`, tcpRow.ID)
	p.eval(fmt.Sprintf(`document.querySelector(%q).focus(); true`, closeTCP), new(bool))
	a.json("POST", "/admin/api/connections/close", fmt.Sprintf(`{"id":%d}`, tcpRow.ID), 200, nil)
	time.Sleep(2500 * time.Millisecond) // a tick of the stream passes
	p.click(closeTCP)
	p.acceptConfirm()
	p.waitText("#cn-result", fmt.Sprintf("Could not close connection %d: not_found: no connection %d", tcpRow.ID, tcpRow.ID))
	p.waitJS("the error is styled as one", `document.getElementById('cn-result').classList.contains('form-error')`)
	clientsMatchConnections(t, p, a)

	// The activity page lists the closes as the audit ring does.
	p.open("/admin/activity?action=connection.close")
	var closes []clientsAudit
	for _, e := range clientsAuditAPI(a) {
		if e.Action == "connection.close" {
			closes = append(closes, e)
		}
	}
	if len(closes) != 4 || closes[0].Outcome != "not_found" || closes[3].Target != "connection/"+strconv.FormatUint(quicRow.ID, 10) || closes[3].Outcome != "ok" {
		t.Fatalf("the audit's connection.close entries %+v", closes)
	}
	p.waitJS("the closes on the activity page", fmt.Sprintf(`document.querySelectorAll('#au-table tbody tr[data-key]').length === %d`, len(closes)))
	rows := clientsPageRows(p, "au-table")
	for _, e := range closes {
		r := rows[strconv.FormatUint(e.Seq, 10)]
		if r["action"] != "connection.close" || r["target"] != e.Target || !strings.Contains(r["outcome"], e.Outcome) {
			t.Fatalf("activity row %v for %+v", r, e)
		}
	}
	var href string
	p.eval(fmt.Sprintf(`document.querySelector('#au-table tr[data-key="%d"] [data-f=target] a').getAttribute('href')`, closes[3].Seq), &href)
	if href != fmt.Sprintf("/admin/connections?id=%d", quicRow.ID) {
		t.Fatalf("the close entry links %q", href)
	}

	// A listing the broker refuses: the page says so with the API's
	// message (not a blank or a forever "loading"), and recovers once the
	// broker answers again.
	stop := clientsRefuse(p, "the broker is recovering its logs", "*/admin/api/connections*", "*/admin/api/events*")
	p.open("/admin/connections")
	p.waitJSWithin("the refusal in the banner", 20*time.Second, `!document.getElementById('banner').hidden &&
		document.getElementById('banner').textContent.includes('/admin/api/connections: not_ready: the broker is recovering its logs')`)
	stop()
	p.waitJSWithin("the banner clears", 20*time.Second, `document.getElementById('banner').hidden`)
	clientsMatchConnections(t, p, a)

	p.noErrors(404, 503)
	p.measure("connections", "/admin/connections")
}

// TestDashboardSubscriptions: the Subscriptions page's rows are the API's
// (kind, topic, group, partition, prefetch, held, acks, the client's name
// from the connections family, the connection), with its summary; a header
// sorts (ascending, then descending) and the order is in the URL and kept
// by a reload; the kind and text filters go into the URL; a row links to
// its queue's page and to its connection's row, which the Connections page
// shows alone; with no reconnect grace a client that disconnects loses its
// rows on both pages live, without a reload.
func TestDashboardSubscriptions(t *testing.T) {
	s, a, p := startDashboard(t, "--reconnect-grace-ms", "0")
	tcp := clientsDial(t, s, client.TransportTCP, "sb-billing-tcp")
	clientsSubscribe(t, tcp, "sb-orders", client.SubscribeOptions{Prefetch: 16})
	clientsSubscribe(t, tcp, "sb-billing", client.SubscribeOptions{Prefetch: 2, AutoAck: true})
	quic := clientsDial(t, s, client.TransportQUIC, "sb-worker-quic")
	clientsSubscribe(t, quic, "sb-orders", client.SubscribeOptions{Prefetch: 5})

	p.open("/admin/subscriptions")
	p.waitText("#live", "live")
	var subs []clientsSub
	var conns []connRow
	deadline := time.Now().Add(12 * time.Second)
	for {
		conns, subs = clientsAPI(a)
		names := map[uint64]string{}
		for _, c := range conns {
			names[c.Session] = c.ClientName
		}
		want := map[string]map[string]string{}
		for _, sb := range subs {
			ack, group := "manual", sb.Group
			if sb.AutoAck {
				ack = "auto-ack"
			}
			if group == "" {
				group = "default" // the API's "" is the default group, named so on the page
			}
			want[fmt.Sprintf("%d:%d:%d", sb.Session, sb.SubID, sb.Partition)] = map[string]string{
				"kind": sb.Kind, "topic": sb.Topic, "group": group, "partition": strconv.Itoa(int(sb.Partition)),
				"prefetch": strconv.Itoa(int(sb.Prefetch)), "held": strconv.Itoa(sb.Held), "ack": ack, "client": names[sb.Session],
				"connection": fmt.Sprintf("connection %d · session %d", sb.Connection, sb.Session), "sub": strconv.FormatUint(sb.SubID, 10),
			}
		}
		diff := clientsDiff(want, clientsPageRows(p, "sb-table"))
		if len(diff) == 0 && len(subs) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the subscriptions page does not match the API (%+v):\n%s", subs, strings.Join(diff, "\n"))
		}
		time.Sleep(250 * time.Millisecond)
	}
	prefetch := 0
	for _, sb := range subs {
		prefetch += int(sb.Prefetch)
		if sb.Kind != "queue" {
			t.Fatalf("subscription %+v", sb)
		}
	}
	for id, want := range map[string]int{"sb-sum-total": len(subs), "sb-sum-queue": len(subs), "sb-sum-stream": 0, "sb-sum-prefetch": prefetch, "sb-sum-sessions": 2} {
		if got := p.text("#" + id); got != strconv.Itoa(want) {
			t.Fatalf("summary %s: page %q, API %d", id, got, want)
		}
	}

	// Sorting by prefetch, both ways, kept in the URL.
	prefetchOrder := func() []int {
		var out []int
		p.eval(`[...document.querySelectorAll('#sb-table tbody tr[data-key] [data-f=prefetch]')].map(n => Number(n.textContent))`, &out)
		return out
	}
	p.click(`#sb-table th:nth-child(5) button.sort`)
	if got := prefetchOrder(); !sort.IntsAreSorted(got) || len(got) != len(subs) {
		t.Fatalf("ascending prefetch: %v", got)
	}
	p.click(`#sb-table th:nth-child(5) button.sort`)
	if got := prefetchOrder(); len(got) == 0 || got[0] != 16 || !sort.IsSorted(sort.Reverse(sort.IntSlice(got))) {
		t.Fatalf("descending prefetch: %v", got)
	}
	if u := clientsURL(p); !strings.Contains(u, "sb.sort=-prefetch") {
		t.Fatalf("the sort is not in the URL: %s", u)
	}
	p.open(clientsURL(p))
	p.waitJS("the sort after a reload", `document.querySelector('#sb-table th:nth-child(5)').getAttribute('aria-sort') === 'descending' &&
		document.querySelectorAll('#sb-table tbody tr[data-key]').length > 0`)
	if got := prefetchOrder(); got[0] != 16 {
		t.Fatalf("descending prefetch after a reload: %v", got)
	}

	// Filters.
	clientsChoose(p, "#sb-kind", "stream")
	p.waitText("#sb-table tbody", "No subscription matches the filters.")
	clientsChoose(p, "#sb-ack", "auto")
	clientsChoose(p, "#sb-kind", "queue")
	p.waitJS("auto-ack only", `[...document.querySelectorAll('#sb-table tbody tr[data-key] [data-f=topic]')].map(n => n.textContent).join() === 'sb-billing'`)
	if u := clientsURL(p); !strings.Contains(u, "kind=queue") || !strings.Contains(u, "ack=auto") {
		t.Fatalf("the filters are not in the URL: %s", u)
	}
	clientsChoose(p, "#sb-ack", "")
	clientsFill(p, "#sb-filter", "sb-worker")
	p.waitJS("the text filter (the client's name)", `[...document.querySelectorAll('#sb-table tbody tr[data-key] [data-f=client]')].map(n => n.textContent).join() === 'sb-worker-quic'`)

	// Links: the queue's page, and the connection's row.
	var quicSub clientsSub
	quicConn, _ := clientsFind(conns, "sb-worker-quic", false)
	for _, sb := range subs {
		if sb.Session == quicConn.Session {
			quicSub = sb
		}
	}
	var topicHref string
	p.eval(`document.querySelector('#sb-table tbody tr[data-key] [data-f=topic] a').getAttribute('href')`, &topicHref)
	if topicHref != "/admin/queue?topic=sb-orders" {
		t.Fatalf("the topic links %q", topicHref)
	}
	p.click(`#sb-table tbody tr[data-key] [data-f=connection] a`)
	p.waitJS("the connection's row alone", fmt.Sprintf(`location.pathname === '/admin/connections' && location.search === '?session=%d' &&
		[...document.querySelectorAll('#cn-table tbody tr[data-key]')].map(t => t.dataset.key).join() === 'c%d'`, quicSub.Session, quicConn.ID))
	p.waitText("#cn-only-text", fmt.Sprintf("Showing session %d only.", quicSub.Session))
	p.waitText(fmt.Sprintf(`#cn-table tr[data-key="c%d"] [data-f=name]`, quicConn.ID), "sb-worker-quic")

	p.open("/admin/subscriptions")
	p.waitJS("three rows", `document.querySelectorAll('#sb-table tbody tr[data-key]').length === 3`)
	p.shots("subscriptions")
	p.axe()
	p.keyboardReach()

	// A client leaves (no grace): its rows go, live, on both pages.
	p.open("/admin/subscriptions")
	p.waitJS("three rows", `document.querySelectorAll('#sb-table tbody tr[data-key]').length === 3`)
	clientsMarkPage(p)
	quic.Close()
	p.waitJS("the quic client's subscription goes", `document.querySelectorAll('#sb-table tbody tr[data-key]').length === 2 &&
		![...document.querySelectorAll('#sb-table [data-f=client]')].some(n => n.textContent === 'sb-worker-quic')`)
	clientsStillMarked(p)
	if _, subs := clientsAPI(a); len(subs) != 2 {
		t.Fatalf("the API after the quic client left: %+v", subs)
	}
	tcpConn, _ := clientsFind(conns, "sb-billing-tcp", false)
	p.open("/admin/connections")
	p.waitJS("one connection", fmt.Sprintf(`[...document.querySelectorAll('#cn-table tbody tr[data-key]')].map(t => t.dataset.key).join() === 'c%d'`, tcpConn.ID))
	clientsMarkPage(p)
	tcp.Close()
	p.waitText("#cn-table tbody", "No client is connected.")
	clientsStillMarked(p)
	p.waitText("#cn-sum-subs", "0")

	p.noErrors()
	p.measure("subscriptions", "/admin/subscriptions")
}

// TestDashboardActivity: the Activity page's rows are the audit ring's
// (seq, actor, action, target, outcome, detail) with its summary; a
// refused action stands out (its row is painted otherwise, its badge says
// refused and the code); a queue's entry links to the queue's page and a
// click goes there; the action, outcome and actor filters go into the URL
// and a reload keeps them; a new action made by a script shows up live,
// without a reload.
func TestDashboardActivity(t *testing.T) {
	s, a, p := startDashboard(t)
	pub := clientsDial(t, s, client.TransportTCP, "act-publisher")
	publishText(t, pub, "act-orders", "one")
	for _, call := range [][2]string{{"/admin/api/queues", `{"topic":"act-orders","max_retries":4}`},
		{"/admin/api/publish", `{"topic":"act-orders","text":"from the test"}`}} {
		if status, out := a.do("POST", call[0], call[1]); status/100 != 2 {
			t.Fatalf("POST %s = %d %s", call[0], status, out)
		}
	}
	a.problem("POST", "/admin/api/queues/delete", `{"topic":"act-missing"}`, 404, "not_found")
	a.problem("POST", "/admin/api/connections/close", `{"id":999999}`, 404, "not_found")

	p.open("/admin/activity")
	p.waitText("#live", "live")
	entries := clientsAuditAPI(a)
	if len(entries) != 4 {
		t.Fatalf("audit %+v", entries)
	}
	want := map[string]map[string]string{}
	refused := 0
	for _, e := range entries {
		outcome := "ok"
		if e.Outcome != "ok" {
			outcome, refused = "refused: "+e.Outcome, refused+1
		}
		target := e.Target
		if target == "" {
			target = "–"
		}
		want[strconv.FormatUint(e.Seq, 10)] = map[string]string{"seq": strconv.FormatUint(e.Seq, 10), "actor": e.Actor,
			"action": e.Action, "target": target, "outcome": outcome, "detail": e.Detail}
	}
	p.waitJS("the entries", fmt.Sprintf(`document.querySelectorAll('#au-table tbody tr[data-key]').length === %d`, len(entries)))
	if diff := clientsDiff(want, clientsPageRows(p, "au-table"), "time"); len(diff) > 0 {
		t.Fatalf("the activity page does not match the audit:\n%s", strings.Join(diff, "\n"))
	}
	if got := clientsPageOrder(p, "au-table"); got[0] != strconv.FormatUint(entries[0].Seq, 10) {
		t.Fatalf("not newest first: %v", got)
	}
	for id, n := range map[string]int{"au-sum-total": len(entries), "au-sum-refused": refused} {
		if got := p.text("#" + id); got != strconv.Itoa(n) {
			t.Fatalf("summary %s: page %q, API %d", id, got, n)
		}
	}

	// Refused rows stand out: another background than an ok row's.
	var paint struct{ Refused, OK string }
	p.eval(`(() => { const bg = (sel) => getComputedStyle(document.querySelector(sel).closest('tr')).backgroundColor;
		return {Refused: bg('#au-table .au-refused'), OK: bg('#au-table .badge.ok')}; })()`, &paint)
	if paint.Refused == paint.OK {
		t.Fatalf("a refused row looks like an ok one (%s)", paint.Refused)
	}

	// Filters, in the URL and kept by a reload.
	clientsChoose(p, "#au-outcome", "refused")
	p.waitJS("refused only", fmt.Sprintf(`document.querySelectorAll('#au-table tbody tr[data-key]').length === %d &&
		document.querySelectorAll('#au-table tbody .badge.ok').length === 0`, refused))
	clientsChoose(p, "#au-action", "queue.delete")
	p.waitJS("one refused delete", `[...document.querySelectorAll('#au-table tbody [data-f=target]')].map(n => n.textContent).join() === 'act-missing/default'`)
	clientsFill(p, "#au-actor", "nobody")
	p.waitText("#au-table tbody", "No action matches the filters.")
	u := clientsURL(p)
	for _, part := range []string{"outcome=refused", "action=queue.delete", "actor=nobody"} {
		if !strings.Contains(u, part) {
			t.Fatalf("the URL %s lacks %s", u, part)
		}
	}
	p.open(u)
	p.waitText("#au-table tbody", "No action matches the filters.")
	var kept string
	p.eval(`[document.getElementById('au-outcome').value, document.getElementById('au-action').value, document.getElementById('au-actor').value].join()`, &kept)
	if kept != "refused,queue.delete,nobody" {
		t.Fatalf("the filters after a reload: %s", kept)
	}
	clientsFill(p, "#au-actor", "127.0.0.1")
	p.waitJS("the actor filter", `document.querySelectorAll('#au-table tbody tr[data-key]').length === 1`)
	clientsChoose(p, "#au-outcome", "not_found")
	p.waitJS("by one code", `document.querySelectorAll('#au-table tbody tr[data-key]').length === 1`)

	// Live: a purge by a script shows up without a reload.
	p.open("/admin/activity?action=queue.purge")
	p.waitText("#au-table tbody", "No action matches the filters.")
	clientsMarkPage(p)
	a.json("POST", "/admin/api/queues/purge", `{"topic":"act-orders"}`, 200, nil)
	entries = clientsAuditAPI(a)
	p.waitJS("the purge, live", fmt.Sprintf(`!!document.querySelector('#au-table tr[data-key="%d"]')`, entries[0].Seq))
	clientsStillMarked(p)
	if got := p.text(fmt.Sprintf(`#au-table tr[data-key="%d"] [data-f=detail]`, entries[0].Seq)); got != entries[0].Detail {
		t.Fatalf("the purge's detail %q, API %q", got, entries[0].Detail)
	}

	// A queue's entry links to its page.
	p.open("/admin/activity")
	p.waitJS("the entries", fmt.Sprintf(`document.querySelectorAll('#au-table tbody tr[data-key]').length === %d`, len(entries)))
	p.shots("activity")
	p.axe()
	p.keyboardReach()
	p.open("/admin/activity?action=queue.create")
	p.waitJS("the create's link", `!!document.querySelector('#au-table [data-f=target] a')`)
	p.click(`#au-table [data-f=target] a`)
	p.waitJS("the queue's page", `location.pathname === '/admin/queue' && location.search === '?topic=act-orders'`)

	p.noErrors()
	p.measure("activity", "/admin/activity")
}
