package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/fibril-go/fibril/client"
)

// TestDashboardOverview: the overview against a broker with real traffic:
// the totals on the page are the API's, the rate chart gains points and its
// published line rises as messages flow, the attention list shows a queue
// with no consumer and links to it, the node's facts are there; the
// command palette (Ctrl+K) finds a page and a queue and goes there; the
// theme toggle switches and persists across a reload; a page that does not
// exist is the dashboard's 404; no console error or failed request; axe
// finds nothing in either theme; every control is reachable by keyboard.
func TestDashboardOverview(t *testing.T) {
	s, a, p := startDashboard(t)
	c := dial(t, s, client.TransportTCP)
	for i := range 20 {
		publishText(t, c, "ov-orders", "order "+strconv.Itoa(i))
	}
	p.open("/")
	p.waitText("#live", "live")
	var ov struct{ Totals map[string]uint64 }
	a.json("GET", "/admin/api/overview", "", 200, &ov)
	p.waitText("#ov-published", grouped(ov.Totals["published"]))
	if got := p.text("#ov-connections"); got != "1" {
		t.Fatalf("connections on the page %q, want 1", got)
	}
	p.waitText("#ov-node", s.dataDir)

	// The chart moves: more traffic, and within two history samples (5 s
	// each) the page has more points and a non-zero published rate.
	var before int
	p.eval(`document.querySelectorAll('#ov-rates polyline')[0] ? document.querySelectorAll('#ov-rates polyline')[0].getAttribute('points').split(' ').length : 0`, &before)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		pub := c.Publisher("ov-orders")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := pub.PublishConfirmed(ctxT(t), client.Text("more "+strconv.Itoa(i))); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	p.waitJSWithin("the published line gains points and rises", 14*time.Second, fmt.Sprintf(`(() => {
		const l = document.querySelector('#ov-rates polyline[data-series="published"]');
		if (!l) return false;
		const pts = l.getAttribute('points').split(' ');
		const ys = pts.map(p => Number(p.split(',')[1]));
		return pts.length > %d && Math.min(...ys) < Math.max(...ys);
	})()`, before))
	close(stop)
	<-done
	a.json("GET", "/admin/api/overview", "", 200, &ov)
	p.waitText("#ov-published", grouped(ov.Totals["published"]))

	// Attention: ov-orders has messages ready and no consumer (sampled every
	// 5 s; the page links to the queue).
	p.waitJSWithin("a no_consumer item", 12*time.Second, `!!document.querySelector('#ov-attention li[data-kind="no_consumer"] a[href*="ov-orders"]')`)
	p.shots("overview")
	p.axe()
	p.keyboardReach()

	// The palette: Ctrl+K, type, Enter.
	p.run("ctrl+k", chromedp.KeyEvent("k", chromedp.KeyModifiers(input.ModifierCtrl)))
	p.waitJS("the palette opens", `document.getElementById('palette').open`)
	p.run("type", chromedp.SendKeys("#palette-input", "ov-ord", chromedp.ByQuery))
	p.waitText("#palette-list", "ov-orders")
	p.shots("palette")
	p.run("enter", chromedp.SendKeys("#palette-input", kb.Enter, chromedp.ByQuery))
	p.waitJS("the queue page", `location.pathname === '/admin/queue' && location.search.includes('ov-orders')`)
	p.open("/")
	p.run("ctrl+k", chromedp.KeyEvent("k", chromedp.KeyModifiers(input.ModifierCtrl)))
	p.waitJS("the palette opens", `document.getElementById('palette').open`)
	p.run("type", chromedp.SendKeys("#palette-input", "settings", chromedp.ByQuery))
	p.run("enter", chromedp.SendKeys("#palette-input", kb.Enter, chromedp.ByQuery))
	p.waitJS("the settings page", `location.pathname === '/admin/settings'`)

	// Themes: the toggle switches, and a reload keeps the choice.
	p.open("/")
	var theme string
	p.eval(`document.documentElement.dataset.theme`, &theme)
	p.click("#theme-toggle")
	want := map[string]string{"light": "dark", "dark": "light"}[theme]
	p.waitJS("theme switched", fmt.Sprintf(`document.documentElement.dataset.theme === %q`, want))
	p.open("/")
	p.waitJS("theme kept after a reload", fmt.Sprintf(`document.documentElement.dataset.theme === %q`, want))
	p.click("#theme-toggle")

	// The favicon says the broker is ready.
	p.waitJS("liveness favicon", `document.documentElement.dataset.health === 'ready' && document.getElementById('favicon').href.startsWith('data:image/svg+xml')`)

	// A page that does not exist.
	p.open("/admin/no-such-page")
	p.waitText("#nf-path", "/admin/no-such-page")
	p.noErrors(404)
	p.measure("overview", "/")
	if strings.Contains(p.text("main"), "being built") {
		t.Fatal("the overview is a placeholder")
	}
}

// grouped formats n as the page does (en-US thousands separators).
func grouped(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestDashboardConfirmDialogAnswersEachQuestionOnce drives dash.js's
// confirmDialog in the page: the focus starts on Cancel; a cancelled
// question is "no"; a question asked while another is open answers that
// one "no"; a question asked right after a cancel (its close event still
// queued) is not answered by that cancel; the focus goes back to where it
// was. Seen failing before the fix: the cancel-then-ask sequence answered
// [true, true] (a cancelled purge was sent).
func TestDashboardConfirmDialogAnswersEachQuestionOnce(t *testing.T) {
	_, _, p := startDashboard(t)
	p.open("/")
	p.waitText("#live", "live")
	var out string
	p.run("confirm sequences", chromedp.Evaluate(`(async () => {
		const { confirmDialog } = await import('/static/dash.js');
		const d = document.getElementById('confirm');
		const cancel = d.querySelector('button[value="cancel"]'), ok = document.getElementById('confirm-ok');
		const toggle = document.getElementById('theme-toggle');
		const tick = () => new Promise(r => setTimeout(r, 50));
		const got = [];
		toggle.focus();
		let a = confirmDialog('one', 'Purge');
		got.push(document.activeElement === cancel ? 'focus-cancel' : 'focus-' + document.activeElement.id);
		cancel.click();
		got.push(await a);
		await tick();
		got.push(document.activeElement === toggle ? 'focus-back' : 'focus-lost');
		a = confirmDialog('two');
		let b = confirmDialog('three');
		got.push(await a);
		ok.click();
		got.push(await b);
		await tick();
		a = confirmDialog('four');
		cancel.click();
		b = confirmDialog('five');
		ok.click();
		got.push(await a, await b);
		await tick();
		got.push(d.open ? 'still-open' : 'closed');
		return JSON.stringify(got);
	})()`, &out, func(ep *runtime.EvaluateParams) *runtime.EvaluateParams { return ep.WithAwaitPromise(true) }))
	want := `["focus-cancel",false,"focus-back",false,true,false,true,"closed"]`
	if out != want {
		t.Fatalf("confirm answers %s, want %s", out, want)
	}
	p.noErrors()
}
