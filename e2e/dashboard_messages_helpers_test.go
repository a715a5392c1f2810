package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// msgRequests counts the requests of a tab by URL path (from the
// browser's network events: an EventSource's and a fetch alike), so a test
// can say how often a page asked for a listing.
type msgRequests struct {
	mu   sync.Mutex
	urls []*url.URL
}

func watchRequests(p *dashPage) *msgRequests {
	r := &msgRequests{}
	chromedp.ListenTarget(p.ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			if u, err := url.Parse(e.Request.URL); err == nil {
				r.mu.Lock()
				r.urls = append(r.urls, u)
				r.mu.Unlock()
			}
		}
	})
	return r
}

// mark answers how many requests were seen so far.
func (r *msgRequests) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.urls)
}

// since answers the requests seen after mark whose path is path.
func (r *msgRequests) since(mark int, path string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, u := range r.urls[mark:] {
		if u.Path == path {
			out = append(out, u.String())
		}
	}
	return out
}

// msgNoPeriodicListing checks that the page, live, makes no listing of its
// own for 7 s (three stream ticks; the old pages asked every 4 s): its
// listings come from the stream's families, which the stream's URL names.
func msgNoPeriodicListing(t *testing.T, r *msgRequests, openMark int, families string, paths ...string) {
	t.Helper()
	mark := r.mark()
	time.Sleep(7 * time.Second)
	for _, path := range paths {
		if got := r.since(mark, path); len(got) != 0 {
			t.Errorf("the page asked for %s %d times in 7 s of live updates: %v", path, len(got), got)
		}
		if got := r.since(openMark, path); len(got) > 1 {
			t.Errorf("the page asked for %s %d times since it opened, want at most the stream's first poll: %v", path, len(got), got)
		}
	}
	streams := r.since(openMark, "/admin/api/events")
	if len(streams) == 0 || !strings.Contains(streams[0], "families="+url.QueryEscape(families)) {
		t.Errorf("the page's event stream %v, want families=%s", streams, families)
	}
}

// msgSpyFetch wraps the tab's fetch: each request is recorded in
// window.__reqs ({url, method, body}), and one whose URL contains
// delayFor (when not "") is answered delayMs late, window.__late counting
// the late answers delivered: a race the test provokes on purpose.
func msgSpyFetch(p *dashPage, delayFor string, delayMs int) {
	p.t.Helper()
	p.eval(fmt.Sprintf(`(() => { window.__reqs = []; window.__late = 0; const orig = window.__origFetch || window.fetch; window.__origFetch = orig;
		window.fetch = async (u, init) => {
			window.__reqs.push({ url: String(u), method: (init && init.method) || 'GET', body: init && init.body ? String(init.body) : '' });
			const answer = orig(u, init);
			if (%q === '' || !String(u).includes(%q)) return answer;
			const res = await answer;
			await new Promise((ok) => setTimeout(ok, %d));
			window.__late++;
			return res;
		};
		return true; })()`, delayFor, delayFor, delayMs), new(bool))
}

type msgSpiedRequest struct{ URL, Method, Body string }

// msgSpied answers the recorded requests whose URL contains part.
func msgSpied(p *dashPage, part string) []msgSpiedRequest {
	p.t.Helper()
	var raw string
	p.eval(fmt.Sprintf(`JSON.stringify((window.__reqs || []).filter((r) => r.url.includes(%q)))`, part), &raw)
	var out []msgSpiedRequest
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		p.t.Fatalf("spied requests %s: %v", raw, err)
	}
	return out
}

// msgFocused answers the id of the element with the focus ("BODY" for
// none).
func msgFocused(p *dashPage) string {
	p.t.Helper()
	var id string
	p.eval(`document.activeElement === document.body ? 'BODY' : (document.activeElement.id || document.activeElement.tagName)`, &id)
	return id
}

// msgWaitFocus waits until the element id has the focus.
func msgWaitFocus(p *dashPage, what, id string) {
	p.t.Helper()
	p.waitJS(what+": the focus on #"+id, fmt.Sprintf(`!!document.activeElement && document.activeElement.id === %q`, id))
}

// msgFocusTop drops the focus to the top of the document. keyboardReach
// blurs the focused control and tabs on from there without wrapping, so a
// focus the page rightly gave back to a button near the end (the redrive's)
// would leave the controls before it unreached.
func msgFocusTop(p *dashPage) {
	p.t.Helper()
	p.eval(`(() => { const tmp = document.createElement('span'); tmp.tabIndex = -1; document.body.prepend(tmp); tmp.focus(); tmp.remove(); return true; })()`, new(bool))
}

// msgEvalAsync evaluates expr, a promise, into out.
func msgEvalAsync(p *dashPage, expr string, out any) {
	p.t.Helper()
	p.run("eval "+expr, chromedp.Evaluate(expr, out, func(e *runtime.EvaluateParams) *runtime.EvaluateParams { return e.WithAwaitPromise(true) }))
}

// msgPayloadCases checks lib/payload.js in the tab on payloads JSON.parse
// and JSON.stringify would change: the pretty-printed text must be Go's
// json.Indent of the bytes (which keeps every literal as written), invalid
// JSON is shown as text with a note, and a byte order mark is kept and
// said.
func msgPayloadCases(t *testing.T, p *dashPage) {
	t.Helper()
	valid := []string{
		`{"id":12345678901234567890,"price":1.50,"k":1,"k":2,"tiny":-0.0e+5,"s":"a\u003cb\"\\n\u00e9","t":true,"f":false,"n":null,"e":[],"o":{},"deep":[1,[2,{"x":[]}]]}`,
		` [ 1.0 , 2E3 ]  `,
		`"just a string"`,
	}
	invalid := []string{`{"a":1,}`, `[1 2]`, `{} x`, `01`, `{"a":.5}`, "{\"a\":\"tab\tinside\"}", `{"a":"\x"}`, "\ufeff" + `{"a":1}`}
	type result struct{ View, Body, Notes string }
	check := func(raw, ct, view string) result {
		var out string
		b64 := base64.StdEncoding.EncodeToString([]byte(raw))
		msgEvalAsync(p, fmt.Sprintf(`import('/static/lib/payload.js').then((m) => {
			const r = m.render({ payload_base64: %q, payload_len: %d, content_type: %q }, %q, 4096);
			const box = document.createElement('div'); box.append(...r.nodes.filter(Boolean));
			return JSON.stringify({ view: r.view, body: box.querySelector('pre').textContent, notes: [...box.querySelectorAll('p')].map((n) => n.textContent).join(' | ') });
		})`, b64, len(raw), ct, view), &out)
		var r result
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("payload.js on %q: %v in %s", raw, err, out)
		}
		return r
	}
	for _, raw := range valid {
		var want bytes.Buffer
		if err := json.Indent(&want, bytes.TrimSpace([]byte(raw)), "", "  "); err != nil {
			t.Fatal(err)
		}
		if got := check(raw, "application/json", "auto"); got.View != "json" || got.Body != want.String() {
			t.Errorf("pretty JSON of %s:\n%s (as %s)\nwant, every literal as written:\n%s", raw, got.Body, got.View, want.String())
		}
	}
	for _, raw := range invalid {
		// Asked for as JSON: the text as it is, with a note; automatic: text.
		got := check(raw, "application/json", "json")
		if got.View != "text" || got.Body != raw || !strings.Contains(got.Notes, "Not valid JSON") {
			t.Errorf("invalid JSON %q shown as %s %q (notes %q), want the text as it is with a note", raw, got.View, got.Body, got.Notes)
		}
		if got := check(raw, "application/json", "auto"); got.View != "text" || got.Body != raw {
			t.Errorf("invalid JSON %q shown automatically as %s %q, want text", raw, got.View, got.Body)
		}
	}
	bom := "\ufeff" + `{"a":1}`
	if got := check(bom, "text/plain", "auto"); got.View != "text" || got.Body != bom || !strings.Contains(got.Notes, "byte order mark") {
		t.Errorf("a payload with a BOM shown as %s %q (notes %q), want the text with its BOM, said", got.View, got.Body, got.Notes)
	}
}

// dashBrowse reads a page of GET /admin/api/messages for the test to
// compare the page against.
func dashBrowse(t *testing.T, a *adminClient, query string) (page struct {
	Items []struct {
		Offset        uint64            `json:"offset"`
		State         string            `json:"state"`
		Headers       map[string]string `json:"headers"`
		PayloadLen    int               `json:"payload_len"`
		ContentType   string            `json:"content_type"`
		DeliveryCount int               `json:"delivery_count"`
	} `json:"items"`
	NextOffsetHint uint64 `json:"next_offset_hint"`
	NextOffset     uint64 `json:"next_offset"`
}) {
	t.Helper()
	a.json("GET", "/admin/api/messages?"+query, "", 200, &page)
	return page
}

// rowCells answers the text of each cell of the table sel's body rows, by
// the row's data-key (the offset).
func rowCells(p *dashPage, sel string) map[string][]string {
	p.t.Helper()
	var raw string
	p.eval(fmt.Sprintf(`JSON.stringify(Object.fromEntries([...document.querySelectorAll(%q)].filter(tr => tr.dataset.key !== undefined)
		.map(tr => [tr.dataset.key, [...tr.cells].map(td => td.textContent.trim())])))`, sel+" tbody tr"), &raw)
	out := map[string][]string{}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		p.t.Fatalf("rows of %s: %v in %s", sel, err, raw)
	}
	return out
}

// setSelect picks value in the select sel as a person would (a change
// event follows).
func setSelect(p *dashPage, sel, value string) {
	p.t.Helper()
	var ok bool
	p.eval(fmt.Sprintf(`(() => { const s = document.querySelector(%q); if (!s || ![...s.options].some(o => o.value === %q)) return false;
		s.value = %q; s.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, sel, value, value), &ok)
	if !ok {
		p.t.Fatalf("browser: no option %q in %s", value, sel)
	}
}

// setInput types value into the input sel from the page's script (input
// and change events follow): chromedp's SetValue loses track of a node on
// these pages, whose tables are rebuilt under it.
func msgSetInput(p *dashPage, sel, value string) {
	p.t.Helper()
	var ok bool
	p.eval(fmt.Sprintf(`(() => { const n = document.querySelector(%q); if (!n) return false; n.focus(); n.value = %q;
		n.dispatchEvent(new Event('input', {bubbles: true})); n.dispatchEvent(new Event('change', {bubbles: true})); return n.value === %q; })()`, sel, value, value), &ok)
	if !ok {
		p.t.Fatalf("browser: could not type %q into %s", value, sel)
	}
}

type dashOrder struct {
	Order int      `json:"order"`
	Items []string `json:"items"`
	Note  string   `json:"note"`
}
