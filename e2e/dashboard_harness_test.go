package e2e

// The dashboard's browser harness: headless Chromium (Debian's chromium
// package, /usr/bin/chromium, installed by .ci/run) driven over the DevTools
// protocol by chromedp, against a real `fibril serve`. Each test opens its
// own tab on one shared browser. A tab records every console error,
// uncaught exception and failed request (status >= 400 or a network
// failure) of its pages; a test ends with noErrors, naming the statuses it
// provoked on purpose. Screenshots of each page in both themes go to
// dashboardShotsDir (FIBRIL_DASHBOARD_SHOTS, else
// $TMPDIR/fibril-dashboard-screenshots), outside the repository. axe-core
// (e2e/a11y, installed by `npm ci` in .ci/run) checks each page offline.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const (
	// chromiumPath is Debian's chromium.
	chromiumPath = "/usr/bin/chromium"
	// browserStepTimeout bounds one step of a page test (a wait, a click).
	browserStepTimeout = 15 * time.Second
)

var (
	browserOnce   sync.Once
	browserCtx    context.Context
	browserErr    error
	browserCancel context.CancelFunc
)

// dashboardShotsDir is where screenshots go.
func dashboardShotsDir() string {
	if d := os.Getenv("FIBRIL_DASHBOARD_SHOTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "fibril-dashboard-screenshots")
}

// needBrowser skips without Chromium, except in CI where it must be there.
func needBrowser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("headless Chromium is missing at %s (CI=%s): .ci/run installs Debian's chromium package", chromiumPath, os.Getenv("CI"))
		}
		t.Skipf("no Chromium at %s (apt-get install chromium); the dashboard's browser tests need it", chromiumPath)
	}
	browserOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fibril-chromium")
		if err != nil {
			browserErr = err
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromiumPath),
			chromedp.UserDataDir(dir),
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
			chromedp.WindowSize(1280, 800),
		)
		alloc, _ := chromedp.NewExecAllocator(context.Background(), opts...)
		// chromedp logs protocol events it has no handler for (newer Chromium
		// sends more): noise, not failures of the page.
		ctx, cancel := chromedp.NewContext(alloc, chromedp.WithErrorf(func(string, ...any) {}))
		if err := chromedp.Run(ctx); err != nil {
			browserErr = fmt.Errorf("starting %s: %w", chromiumPath, err)
			cancel()
			return
		}
		browserCtx, browserCancel = ctx, cancel
	})
	if browserErr != nil {
		t.Fatal(browserErr)
	}
	return browserCtx
}

// dashPage is one browser tab on one broker's admin listener.
type dashPage struct {
	t    *testing.T
	base string
	ctx  context.Context

	mu       sync.Mutex
	problems []string // console errors, exceptions, failed requests
	statuses []int    // the statuses of the failed requests, in order
	bytes    map[string]int64
	types    map[network.RequestID]string
}

// openBrowser opens a tab for the admin listener at base (http://HOST:PORT).
func openBrowser(t *testing.T, base string) *dashPage {
	t.Helper()
	parent := needBrowser(t)
	ctx, cancel := chromedp.NewContext(parent)
	t.Cleanup(cancel)
	p := &dashPage{t: t, base: base, ctx: ctx, bytes: map[string]int64{}, types: map[network.RequestID]string{}}
	chromedp.ListenTarget(ctx, p.listen)
	if err := chromedp.Run(ctx, network.Enable(), runtime.Enable()); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *dashPage) listen(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.APITypeError || e.Type == runtime.APITypeAssert {
			var parts []string
			for _, a := range e.Args {
				parts = append(parts, strings.Trim(string(a.Value), `"`)+a.Description)
			}
			p.problems = append(p.problems, "console error: "+strings.Join(parts, " "))
		}
	case *runtime.EventExceptionThrown:
		msg := e.ExceptionDetails.Text
		if e.ExceptionDetails.Exception != nil {
			msg += " " + e.ExceptionDetails.Exception.Description
		}
		p.problems = append(p.problems, "uncaught exception: "+msg)
	case *network.EventResponseReceived:
		p.types[e.RequestID] = string(e.Type)
		if e.Response.Status >= 400 {
			p.problems = append(p.problems, fmt.Sprintf("request failed: %d %s", int(e.Response.Status), e.Response.URL))
			p.statuses = append(p.statuses, int(e.Response.Status))
		}
	case *network.EventLoadingFinished:
		if kind, ok := p.types[e.RequestID]; ok {
			p.bytes[kind] += int64(e.EncodedDataLength)
		}
	case *network.EventLoadingFailed:
		// A navigation cancels the previous page's event stream and
		// fetches: not a failure of the page.
		if !e.Canceled && e.BlockedReason == "" {
			p.problems = append(p.problems, "request failed: 0 "+e.ErrorText) // 0: no status (noErrors(0) allows it)
			p.statuses = append(p.statuses, 0)
		}
	}
}

// run runs actions within browserStepTimeout, failing the test with what
// the step was.
func (p *dashPage) run(what string, actions ...chromedp.Action) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserStepTimeout)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		p.t.Fatalf("browser: %s: %v\nproblems so far: %v", what, err, p.problemsNow())
	}
}

func (p *dashPage) problemsNow() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.problems...)
}

// open navigates to path and waits for the page's script to have started
// (the live indicator leaves "connecting", or the login form is there).
func (p *dashPage) open(path string) {
	p.t.Helper()
	p.run("open "+path, chromedp.Navigate(p.base+path), chromedp.WaitReady("body", chromedp.ByQuery))
	// The page's script has wired the frame (theme, palette, Ctrl+K): a key
	// pressed from now on is heard.
	p.waitJS("the page's script started", `document.documentElement.dataset.wired === '1'`)
}

// waitText waits until the element sel's text contains want.
func (p *dashPage) waitText(sel, want string) {
	p.t.Helper()
	p.waitJS(fmt.Sprintf("waiting for %q in %s", want, sel),
		fmt.Sprintf(`(() => { const n = document.querySelector(%q); return !!n && n.textContent.includes(%q); })()`, sel, want))
}

// waitJS polls expr (JavaScript answering a boolean) until true.
func (p *dashPage) waitJS(what, expr string) {
	p.t.Helper()
	p.waitJSWithin(what, browserStepTimeout, expr)
}

// waitJSWithin is waitJS with its own deadline (a wait for the history's
// 5 s samples).
func (p *dashPage) waitJSWithin(what string, within time.Duration, expr string) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var ok bool
		ctx, cancel := context.WithTimeout(p.ctx, browserStepTimeout)
		err := chromedp.Run(ctx, chromedp.Evaluate(expr, &ok))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			_ = chromedp.Run(p.ctx, chromedp.Evaluate(`document.querySelector('main') ? document.querySelector('main').innerText.slice(0, 2000) : ''`, &body))
			p.t.Fatalf("browser: %s: not within %v (err %v)\npage text: %s\nproblems: %v", what, within, err, body, p.problemsNow())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// text answers the text of sel.
func (p *dashPage) text(sel string) string {
	p.t.Helper()
	var out string
	p.run("text of "+sel, chromedp.Text(sel, &out, chromedp.ByQuery))
	return out
}

// eval evaluates expr into out.
func (p *dashPage) eval(expr string, out any) {
	p.t.Helper()
	p.run("eval "+expr, chromedp.Evaluate(expr, out))
}

// click clicks sel. A live page may redraw the element between chromedp
// finding it and clicking it (a row whose figures changed is replaced), so
// a click on a node that went away meanwhile is tried again on the new one,
// as a user's next click would land on it.
func (p *dashPage) click(sel string) {
	p.t.Helper()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(p.ctx, browserStepTimeout)
		err := chromedp.Run(ctx, chromedp.Click(sel, chromedp.ByQuery))
		cancel()
		if err == nil {
			return
		}
		if attempt < clickStaleRetries && staleNode(err) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		p.t.Fatalf("browser: click %s: %v\nproblems so far: %v", sel, err, p.problemsNow())
	}
}

// clickStaleRetries bounds the clicks tried on a node redrawn meanwhile.
const clickStaleRetries = 5

// staleNode says whether err is the DevTools' answer for a node that left
// the document between the query and the click.
func staleNode(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Could not find node with given id") || strings.Contains(msg, "Node is detached") ||
		strings.Contains(msg, "No node with given id")
}

// jsClick clicks sel from the page's script (after a full-page screenshot
// the emulated viewport may leave a pointer click off its target).
func (p *dashPage) jsClick(sel string) {
	p.t.Helper()
	var ok bool
	p.eval(fmt.Sprintf(`(() => { const n = document.querySelector(%q); if (!n) return false; n.click(); return true; })()`, sel), &ok)
	if !ok {
		p.t.Fatalf("browser: no %s to click", sel)
	}
}

// fill replaces the value of the input sel and fires its input and change
// events, as typing would (chromedp's SetValue refuses some input types).
func (p *dashPage) fill(sel, value string) {
	p.t.Helper()
	var ok bool
	p.eval(fmt.Sprintf(`(() => { const n = document.querySelector(%q); if (!n) return false; n.focus(); n.value = %q;
		n.dispatchEvent(new Event('input', {bubbles: true})); n.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, sel, value), &ok)
	if !ok {
		p.t.Fatalf("browser: no %s to fill", sel)
	}
}

// acceptConfirm clicks the confirm dialog's confirming button once it is
// open.
func (p *dashPage) acceptConfirm() {
	p.t.Helper()
	p.waitJS("the confirm dialog opens", `document.getElementById('confirm').open`)
	p.click("#confirm-ok")
}

// shots saves a full-page screenshot of the current page as
// <name>-light.png and <name>-dark.png, switching the theme with the
// page's own toggle (and back to where it was).
func (p *dashPage) shots(name string) {
	p.t.Helper()
	dir := dashboardShotsDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	var start string
	p.eval(`document.documentElement.dataset.theme`, &start)
	for _, theme := range []string{"light", "dark"} {
		var now string
		p.eval(`document.documentElement.dataset.theme`, &now)
		if now != theme {
			p.jsClick("#theme-toggle")
			p.waitJS("theme "+theme, fmt.Sprintf(`document.documentElement.dataset.theme === %q`, theme))
		}
		time.Sleep(150 * time.Millisecond) // charts redraw on the theme change
		var png []byte
		// A sticky header would be drawn where the capture's scroll left
		// it, mid-page: pinned to the top for the capture only.
		p.eval(`(() => { const h = document.querySelector('header.top'); if (h) h.style.position = 'static'; return true; })()`, new(bool))
		p.run("screenshot "+name, chromedp.FullScreenshot(&png, 100))
		p.eval(`(() => { const h = document.querySelector('header.top'); if (h) h.style.position = ''; return true; })()`, new(bool))
		file := filepath.Join(dir, name+"-"+theme+".png")
		if err := os.WriteFile(file, png, 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
	var now string
	p.eval(`document.documentElement.dataset.theme`, &now)
	if now != start && start != "" {
		p.jsClick("#theme-toggle")
	}
	p.t.Logf("screenshots of %s: %s/%s-{light,dark}.png", name, dir, name)
}

// axeViolation is one rule axe-core found broken.
type axeViolation struct {
	ID    string `json:"id"`
	Help  string `json:"help"`
	Nodes []struct {
		Target []string `json:"target"`
	} `json:"nodes"`
}

var (
	axeOnce   sync.Once
	axeSource string
	axeErr    error
)

// axe runs axe-core's WCAG 2 A and AA rules on the current page in both
// themes and fails on any violation. axe-core comes from e2e/a11y
// (npm ci); in CI it must be there.
func (p *dashPage) axe() {
	p.t.Helper()
	axeOnce.Do(func() {
		b, err := os.ReadFile(filepath.Join("a11y", "node_modules", "axe-core", "axe.min.js"))
		axeSource, axeErr = string(b), err
	})
	if axeErr != nil {
		if os.Getenv("CI") != "" {
			p.t.Fatalf("axe-core is missing (%v): .ci/run runs npm ci in e2e/a11y", axeErr)
		}
		p.t.Logf("axe-core not installed (cd e2e/a11y && npm ci): accessibility not checked")
		return
	}
	var loaded bool
	p.eval(`typeof window.axe === 'object'`, &loaded)
	if !loaded {
		var ignored any
		// DevTools evaluation is not bound by the page's CSP.
		p.run("load axe-core", chromedp.Evaluate(axeSource, &ignored))
	}
	for _, theme := range []string{"light", "dark"} {
		var now string
		p.eval(`document.documentElement.dataset.theme`, &now)
		if now != theme {
			p.jsClick("#theme-toggle")
			p.waitJS("theme "+theme, fmt.Sprintf(`document.documentElement.dataset.theme === %q`, theme))
		}
		var raw string
		script := `axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}, resultTypes: ['violations']})
			.then(r => JSON.stringify(r.violations))`
		p.run("axe "+theme, chromedp.Evaluate(script, &raw, func(ep *runtime.EvaluateParams) *runtime.EvaluateParams {
			return ep.WithAwaitPromise(true)
		}))
		var violations []axeViolation
		if err := json.Unmarshal([]byte(raw), &violations); err != nil {
			p.t.Fatalf("axe answer: %v in %s", err, raw)
		}
		for _, v := range violations {
			var targets []string
			for _, n := range v.Nodes {
				targets = append(targets, strings.Join(n.Target, " "))
			}
			p.t.Errorf("accessibility (%s theme) %s: %s at %v", theme, v.ID, v.Help, targets)
		}
	}
}

// keyboardReach tabs through the page and fails unless every visible,
// enabled control (links, buttons, inputs, selects, textareas, summaries)
// outside a closed dialog is focused on the way: nothing a mouse can use is
// out of a keyboard's reach. Controls are told apart by what they are (tag,
// id, name, label, text, href), since a live page may redraw them while the
// test tabs.
func (p *dashPage) keyboardReach() {
	p.t.Helper()
	const identity = `(n) => [n.tagName, n.id, n.getAttribute('name') || '', n.getAttribute('aria-label') || '',
		(n.textContent || '').trim().slice(0, 40), n.getAttribute('href') || '', n.type || ''].join('|')`
	var want []string
	p.eval(`(() => { const id = `+identity+`;
		return [...new Set([...document.querySelectorAll('a[href], button, input, select, textarea, summary')]
			.filter(n => !n.disabled && n.offsetParent !== null && !n.closest('dialog'))
			.map(id))]; })()`, &want)
	seen := map[string]bool{}
	// Tabbing starts at the top of the document: a blur alone would leave
	// Chromium's starting point at the control that had the focus.
	p.eval(`(() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0);
		const top = document.body; top.tabIndex = -1; top.focus(); top.removeAttribute('tabindex'); return true; })()`, new(bool))
	for i := 0; i < 2*len(want)+10 && len(seen) < len(want); i++ {
		p.run("tab", chromedp.KeyEvent("\t"))
		var got string
		p.eval(`(() => { const n = document.activeElement; if (!n || n === document.body) return ''; return (`+identity+`)(n); })()`, &got)
		if got != "" {
			seen[got] = true
		}
	}
	var missing []string
	for _, w := range want {
		if !seen[w] {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		p.t.Errorf("tabbing did not reach %d of %d controls: %v", len(missing), len(want), missing)
	}
}

// paintMs answers the page's first contentful paint, in ms after
// navigation start.
func (p *dashPage) paintMs() float64 {
	p.t.Helper()
	var ms float64
	p.waitJS("first contentful paint", `performance.getEntriesByType('paint').some(e => e.name === 'first-contentful-paint')`)
	p.eval(`performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint').startTime`, &ms)
	return ms
}

// resetWeights forgets the bytes counted so far (call before a navigation
// whose weight is measured).
func (p *dashPage) resetWeights() {
	p.mu.Lock()
	p.bytes = map[string]int64{}
	p.mu.Unlock()
}

// weights answers the bytes transferred per resource type (Document,
// Stylesheet, Script, Fetch, EventSource, ...) since resetWeights.
func (p *dashPage) weights() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int64{}
	for k, v := range p.bytes {
		out[k] = v
	}
	return out
}

// noErrors fails the test on any console error, exception or failed
// request of the tab, but for requests answered with one of the allowed
// statuses (provoked on purpose by the test: a 409 shown to the user).
func (p *dashPage) noErrors(allowed ...int) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	ok := map[int]bool{}
	for _, s := range allowed {
		ok[s] = true
	}
	for _, pr := range p.problems {
		skip := false
		for s := range ok {
			if strings.HasPrefix(pr, fmt.Sprintf("request failed: %d ", s)) ||
				(strings.HasPrefix(pr, "console error: Failed to load resource") && strings.Contains(pr, fmt.Sprintf("status of %d", s))) {
				skip = true
			}
		}
		if !skip {
			p.t.Errorf("browser: %s", pr)
		}
	}
}

// startDashboard starts a broker with its admin listener and opens a tab.
func startDashboard(t *testing.T, extra ...string) (*server, *adminClient, *dashPage) {
	t.Helper()
	needBrowser(t)
	s, a := startAdmin(t, extra...)
	return s, a, openBrowser(t, a.base)
}

// chromiumVersion is for the note: which browser ran.
func chromiumVersion() string {
	out, err := exec.Command(chromiumPath, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// pageFigures is one page's weight and paint, for the note
// (dashboard-figures.jsonl beside the screenshots).
type pageFigures struct {
	Page         string  `json:"page"`
	HTMLBytes    int64   `json:"html_bytes"`
	CSSBytes     int64   `json:"css_bytes"`
	JSBytes      int64   `json:"js_bytes"`
	APIBytes     int64   `json:"api_bytes"`
	FirstPaintMs float64 `json:"first_contentful_paint_ms"`
}

var figuresMu sync.Mutex

// measure loads path with the cache off and records its weight (bytes on
// the wire per resource type) and first contentful paint. Recorded, never
// asserted: a measurement, not a timed test.
func (p *dashPage) measure(name, path string) pageFigures {
	p.t.Helper()
	p.run("cache off", network.SetCacheDisabled(true))
	p.resetWeights()
	p.open(path)
	f := pageFigures{Page: name, FirstPaintMs: p.paintMs()}
	time.Sleep(300 * time.Millisecond) // the page's first API answers
	w := p.weights()
	f.HTMLBytes, f.CSSBytes, f.JSBytes, f.APIBytes = w["Document"], w["Stylesheet"], w["Script"], w["Fetch"]+w["XHR"]
	p.run("cache on", network.SetCacheDisabled(false))
	line, _ := json.Marshal(f)
	figuresMu.Lock()
	defer figuresMu.Unlock()
	if err := os.MkdirAll(dashboardShotsDir(), 0o755); err == nil {
		if fh, err := os.OpenFile(filepath.Join(dashboardShotsDir(), "dashboard-figures.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fh.Write(append(line, '\n'))
			fh.Close()
		}
	}
	p.t.Logf("page %s: %s (%s)", name, line, chromiumVersion())
	return f
}
