package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
)

// TestDashboardMessages: the Messages page against a queue with messages
// in every state (acked, inflight, ready text/JSON/binary/large, delayed):
// the rows (offset, state, deliveries, size, content type) and the
// partition's counts are the API's; the state checkboxes filter as the
// API's status does, settled included; paging follows next_offset_hint;
// the inspector shows text as text, JSON pretty-printed, binary as a hex
// dump, a large payload as truncated at the preview size and whole once a
// bigger preview is chosen; the state lives in the URL (a reload shows the
// same view); an unknown queue shows the API's 404 message. Also: the
// pretty-printer keeps every JSON literal (checked in the tab on payloads
// JSON.parse would change); a late answer for an earlier click never
// replaces the inspector's newer message; opening a message moves the
// focus to the inspector's heading; a bad preview in the URL falls back to
// the default; no state checked asks for nothing and says so; the page
// makes no queue listing of its own (the stream's queues family).
func TestDashboardMessages(t *testing.T) {
	s, a, p := startDashboard(t, "--lease-ms", "60000")
	requests := watchRequests(p)
	ctx := ctxT(t)
	c := dial(t, s, client.TransportTCP)
	if _, err := c.DeclareQueue(ctx, client.NewQueueConfig("shop")); err != nil {
		t.Fatal(err)
	}
	pub := c.Publisher("shop")
	publishText(t, c, "shop", "acked") // offset 0
	sub, err := c.SubscribeTopic(ctx, "shop", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := next(t, sub, 10*time.Second).Ack(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	publishText(t, c, "shop", "held") // offset 1: inflight, the prefetch of 1 taken
	held := next(t, sub, 10*time.Second)
	order := dashOrder{Order: 7, Items: []string{"tea", "cup"}, Note: "<b>not markup</b>"}
	binary := []byte{0x00, 0xff, 0x10, 'A', 'B', 0x7f, 0x80, 0x01}
	big := strings.Repeat("0123456789", 600) // 6000 bytes, over the 4096 preview
	for _, m := range []*client.Message{
		client.Text("hello text").Header("x-kind", "greeting"), // 2
		client.JSON(order), // 3
		client.Raw(binary), // 4
		client.Text(big),   // 5
	} {
		if _, err := pub.PublishConfirmed(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pub.PublishDelayedConfirmed(ctx, client.Text("later"), time.Now().Add(time.Hour)); err != nil { // 6
		t.Fatal(err)
	}

	openMark := requests.mark()
	p.open("/admin/messages?topic=shop")
	p.waitText("#live", "live")
	api := dashBrowse(t, a, "topic=shop")
	if len(api.Items) != 6 {
		t.Fatalf("the API shows %d active messages, want 6: %+v", len(api.Items), api.Items)
	}
	p.waitJS("the rows", fmt.Sprintf(`document.querySelectorAll('#msg-table tbody tr[data-key]').length === %d`, len(api.Items)))
	rows := rowCells(p, "#msg-table")
	for _, it := range api.Items {
		r := rows[strconv.FormatUint(it.Offset, 10)]
		want := []string{strconv.FormatUint(it.Offset, 10), it.State, strconv.Itoa(it.DeliveryCount)}
		if len(r) < 8 || r[0] != want[0] || r[1] != want[1] || r[2] != want[2] || strings.ReplaceAll(r[5], ",", "") != strconv.Itoa(it.PayloadLen) {
			t.Fatalf("row %d on the page %q, the API has %+v", it.Offset, r, it)
		}
		if ct := it.ContentType; ct != "" && r[6] != ct || ct == "" && r[6] != "none" {
			t.Fatalf("row %d content type %q, the API has %q", it.Offset, r[6], ct)
		}
	}
	if r := rows["1"]; r[1] != "inflight" || !strings.HasPrefix(r[3], "lease until") {
		t.Fatalf("the inflight row %q", r)
	}
	if r := rows["6"]; r[1] != "delayed" || !strings.HasPrefix(r[3], "not before") {
		t.Fatalf("the delayed row %q", r)
	}
	// The partition's counts are the queue listing's.
	var qs struct {
		Queues []struct {
			Topic      string
			Partitions []struct {
				Ready, Inflight, Delayed int
				PendingDLQ               int `json:"pending_dlq"`
			}
		}
	}
	a.json("GET", "/admin/api/queues", "", 200, &qs)
	for _, q := range qs.Queues {
		if q.Topic == "shop" {
			pc := q.Partitions[0]
			p.waitText("#msg-c-ready", strconv.Itoa(pc.Ready))
			p.waitText("#msg-c-inflight", strconv.Itoa(pc.Inflight))
			p.waitText("#msg-c-delayed", strconv.Itoa(pc.Delayed))
			if pc.Ready != 4 || pc.Inflight != 1 || pc.Delayed != 1 {
				t.Fatalf("the listing's counts %+v", pc)
			}
		}
	}
	p.waitText("#msg-c-next", strconv.FormatUint(api.NextOffset, 10))
	// The counts came from the stream's queues family: no listing of the
	// page's own (the old page asked every 4 s on the overview's ticks).
	msgNoPeriodicListing(t, requests, openMark, "queues", "/admin/api/queues")

	// States, through the checkboxes: ready off leaves inflight and delayed.
	p.click("#msg-st-ready")
	p.waitJS("status in the URL", `location.search.includes('status=inflight%2Cdelayed%2Cpending_dlq')`)
	want := dashBrowse(t, a, "topic=shop&status=inflight,delayed,pending_dlq")
	p.waitJS("ready rows gone", fmt.Sprintf(`document.querySelectorAll('#msg-table tbody tr[data-key]').length === %d`, len(want.Items)))
	if got := rowCells(p, "#msg-table"); len(got) != 2 || got["1"] == nil || got["6"] == nil {
		t.Fatalf("rows with ready off: %v", got)
	}
	// Settled alone: the acked offset 0, and nothing else.
	p.open("/admin/messages?topic=shop&status=settled")
	p.waitJS("the settled row", `document.querySelectorAll('#msg-table tbody tr[data-key]').length === 1 && !!document.querySelector('#msg-table tr[data-key="0"]')`)
	if got := rowCells(p, "#msg-table")["0"]; got[1] != "settled" {
		t.Fatalf("the settled row %q", got)
	}

	// Paging: two a page, Next goes to the API's next_offset_hint.
	p.open("/admin/messages?topic=shop&limit=2")
	first := dashBrowse(t, a, "topic=shop&limit=2")
	p.waitJS("page one", `document.querySelectorAll('#msg-table tbody tr[data-key]').length === 2`)
	p.click("#msg-next")
	p.waitJS("from in the URL", fmt.Sprintf(`location.search.includes('from=%d')`, first.NextOffsetHint))
	second := dashBrowse(t, a, fmt.Sprintf("topic=shop&limit=2&from=%d", first.NextOffsetHint))
	p.waitJS("page two", fmt.Sprintf(`!!document.querySelector('#msg-table tr[data-key="%d"]') && document.querySelectorAll('#msg-table tbody tr[data-key]').length === %d`, second.Items[0].Offset, len(second.Items)))
	p.click("#msg-prev")
	p.waitJS("back to page one", fmt.Sprintf(`!!document.querySelector('#msg-table tr[data-key="%d"]')`, first.Items[0].Offset))

	// The inspector: text, pretty JSON, hex, truncated.
	p.open("/admin/messages?topic=shop")
	p.waitJS("the rows", `document.querySelectorAll('#msg-table tbody tr[data-key]').length === 6`)
	p.click(`#msg-table tr[data-key="2"] a`)
	p.waitJS("text view", `(() => { const b = document.getElementById('payload-body'); return !!b && b.dataset.view === 'text' && b.textContent === 'hello text'; })()`)
	p.waitText("#msg-headers", "x-kind")
	p.waitText("#msg-headers", "greeting")
	p.waitJS("offset in the URL", `location.search.includes('offset=2')`)
	msgWaitFocus(p, "a message opened", "msg-insp-title")

	p.click(`#msg-table tr[data-key="3"] a`)
	// Pretty-printed as stored: Go's json.Indent of the payload's bytes
	// keeps every literal (the client's \u003c escapes included).
	var stored struct {
		Items []struct {
			PayloadBase64 string `json:"payload_base64"`
		} `json:"items"`
	}
	a.json("GET", "/admin/api/messages?topic=shop&from=3&limit=1&include_payload=true", "", 200, &stored)
	rawJSON, err := base64.StdEncoding.DecodeString(stored.Items[0].PayloadBase64)
	if err != nil {
		t.Fatal(err)
	}
	var prettyBuf bytes.Buffer
	if err := json.Indent(&prettyBuf, rawJSON, "", "  "); err != nil {
		t.Fatal(err)
	}
	pretty := prettyBuf.Bytes()
	p.waitJS("pretty JSON", fmt.Sprintf(`(() => { const b = document.getElementById('payload-body'); return !!b && b.dataset.view === 'json' && b.textContent === %q; })()`, string(pretty)))
	var markup int
	p.eval(`document.querySelectorAll('#payload-body b').length`, &markup)
	if markup != 0 {
		t.Fatal("a payload became markup")
	}
	p.waitText("#msg-facts", "application/json")
	msgPayloadCases(t, p)

	p.click(`#msg-table tr[data-key="4"] a`)
	const hexOf4 = `00000000  00 ff 10 41 42 7f 80 01                           |...AB...|`
	p.waitJS("hex dump", fmt.Sprintf(`(() => { const b = document.getElementById('payload-body'); return !!b && b.dataset.view === 'hex' && b.textContent === %q; })()`, hexOf4))
	// A late answer for an earlier click: offset 2's answer held back
	// 1.5 s, offset 4 clicked meanwhile; offset 4 stays shown.
	msgSpyFetch(p, "from=2&limit=1&", 1500)
	p.click(`#msg-table tr[data-key="2"] a`)
	p.click(`#msg-table tr[data-key="4"] a`)
	p.waitJS("the late answer delivered", `window.__late === 1`)
	p.waitJS("offset 4 still shown", fmt.Sprintf(`(() => { const b = document.getElementById('payload-body'); return !!b && b.textContent === %q && document.getElementById('msg-insp-offset').textContent === 'offset 4'; })()`, hexOf4))
	time.Sleep(200 * time.Millisecond)
	if got := p.text("#payload-body"); got != hexOf4 {
		t.Fatalf("after offset 2's late answer the inspector shows %q, want offset 4's hex dump", got)
	}

	p.click(`#msg-table tr[data-key="5"] a`)
	p.waitJS("a truncated preview", `!!document.getElementById('payload-truncated') && document.getElementById('payload-body').textContent.length === 4096`)
	p.waitText("#msg-insp-body", "first 4,096 of 6,000 bytes")
	// A bigger preview: the whole payload.
	setSelect(p, "#msg-preview", "65536")
	p.waitJS("the whole payload", fmt.Sprintf(`!document.getElementById('payload-truncated') && document.getElementById('payload-body').textContent === %q`, big))
	// The view forced to hex, and a reload keeps the view and the message.
	setSelect(p, "#msg-view", "hex")
	p.waitJS("forced hex", `document.getElementById('payload-body').dataset.view === 'hex' && document.getElementById('payload-body').textContent.startsWith('00000000  30 31 32 33')`)
	p.open("/admin/messages?" + strings.TrimPrefix(pageSearch(p), "?"))
	p.waitJS("the same view after a reload", `document.getElementById('payload-body') && document.getElementById('payload-body').dataset.view === 'hex' && !document.getElementById('payload-truncated') && document.getElementById('msg-preview').value === '65536'`)
	// A preview that is not a number: the default, not NaN sent.
	p.open("/admin/messages?topic=shop&offset=2&preview=abc")
	p.waitJS("the default preview", `(() => { const b = document.getElementById('payload-body'); return !!b && b.textContent === 'hello text' && document.getElementById('msg-preview').value === '4096'; })()`)
	p.waitText("#msg-insp-body", "payload_limit_bytes=4,096")
	// No state checked: the page says so and asks for nothing.
	p.open("/admin/messages?topic=shop")
	p.waitJS("the rows", `document.querySelectorAll('#msg-table tbody tr[data-key]').length === 6`)
	for _, st := range []string{"ready", "inflight", "delayed"} {
		p.click("#msg-st-" + st)
	}
	p.waitJS("pending_dlq alone", `location.search.includes('status=pending_dlq') && document.querySelectorAll('#msg-table tbody tr[data-key]').length === 0 && document.getElementById('msg-range').textContent.startsWith('nothing')`)
	msgSpyFetch(p, "", 0)
	p.click("#msg-st-pending_dlq")
	p.waitJS("no state: said", `!document.getElementById('msg-states-none').hidden && document.getElementById('msg-range').textContent === 'no state chosen'`)
	time.Sleep(500 * time.Millisecond)
	if n := len(msgSpied(p, "/admin/api/messages")); n != 0 {
		t.Fatalf("with no state checked the page asked for messages %d times", n)
	}
	if n := len(rowCells(p, "#msg-table")); n != 0 {
		t.Fatalf("with no state checked the table shows %d rows", n)
	}
	p.click("#msg-st-ready")
	p.waitJS("ready again", `document.getElementById('msg-states-none').hidden && document.querySelectorAll('#msg-table tbody tr[data-key]').length === 4`)
	p.open("/admin/messages?topic=shop&offset=5&preview=65536&view=hex")
	p.waitJS("the view again", `document.getElementById('payload-body') && document.getElementById('payload-body').dataset.view === 'hex'`)
	p.shots("messages")
	p.axe()
	p.keyboardReach()

	// Another queue, chosen in the select: its rows, the URL follows, the
	// inspector is cleared. With "refresh with the live ticks" on, a new
	// message appears without a click.
	publishText(t, c, "other", "elsewhere")
	p.open("/admin/messages?topic=shop&offset=2")
	p.waitJS("the inspector", `!!document.getElementById('payload-body')`)
	setSelect(p, "#msg-queue", "other/")
	p.waitJS("other's row", `location.search.includes('topic=other') && !location.search.includes('offset=') && document.querySelectorAll('#msg-table tbody tr[data-key]').length === 1 && !document.getElementById('payload-body')`)
	p.click("#msg-auto")
	p.waitJS("auto in the URL", `location.search.includes('auto=1')`)
	publishText(t, c, "other", "more")
	p.waitJSWithin("the new message without a click", 12*time.Second, `document.querySelectorAll('#msg-table tbody tr[data-key]').length === 2`)
	p.waitText("#msg-c-ready", "2")

	// An unknown queue: the API's message, not a blank page.
	p.open("/admin/messages?topic=no-such-queue")
	p.waitText("#banner", "not_found")
	// An over-the-cap page size: the API's 400 message.
	p.open("/admin/messages?topic=shop")
	p.waitJS("the rows", `document.querySelectorAll('#msg-table tbody tr[data-key]').length === 6`)
	p.fill("#msg-limit", "6000")
	p.click("#msg-show")
	p.waitText("#banner", "bad_parameter")
	if err := held.Ack(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	p.noErrors(404, 400)
	p.measure("messages", "/admin/messages?topic=shop&offset=3")
}

// pageSearch answers the page's location.search.
func pageSearch(p *dashPage) string {
	var s string
	p.eval(`location.search`, &s)
	if _, err := url.ParseQuery(strings.TrimPrefix(s, "?")); err != nil {
		p.t.Fatalf("the page's query %q: %v", s, err)
	}
	return s
}

// TestDashboardDeadLetters: the Dead letters page against a custom DLQ fed
// by two queues, with copies of both reasons (retries exhausted past
// max_retries, terminal nacks): the page picks the DLQ target by itself,
// its rows (source, reason, retries) and per-reason counts are the API's;
// the source and reason filters narrow the rows; two copies chosen with
// checkboxes are replayed through the page (per-offset outcomes shown; the
// messages are delivered again from their source; the DLQ keeps its
// copies); a redrive by source and reason is previewed with the dry run's
// count, confirmed, and moves the copies (delivered from the source, the
// DLQ copies settled); a refused redrive shows the API's message; the
// inspector shows a copy's payload and stroma.dlq.* headers. Also: no
// listing of the page's own (the stream's queues and global-dlq
// families); a late inspector answer never replaces a newer one; the focus
// lands on the inspector's heading, on the replay's outcome and back on
// the redrive button used; a date or time that does not exist and a limit
// outside 1-10,000 are refused on the page with what is wrong, nothing
// sent; an "until" date includes that day.
func TestDashboardDeadLetters(t *testing.T) {
	s, a, p := startDashboard(t, "--lease-ms", "60000")
	requests := watchRequests(p)
	startedMs := time.Now().UnixMilli()
	ctx := ctxT(t)
	c := dial(t, s, client.TransportTCP)
	for _, topic := range []string{"pay", "ship"} {
		if _, err := c.DeclareQueue(ctx, client.NewQueueConfig(topic).Dlq(client.DlqCustom("pay-dlq", "")).DlqMaxRetries(1)); err != nil {
			t.Fatal(err)
		}
	}
	subs := map[string]*client.Subscription{}
	for _, topic := range []string{"pay", "ship"} {
		sub, err := c.SubscribeTopic(ctx, topic, client.SubscribeOptions{Prefetch: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs[topic] = sub
	}
	// pay-dlq offsets 0, 1: pay, retries exhausted (two failed attempts
	// with one retry allowed); 2, 3: pay, terminal nacks; 4: ship, terminal.
	// attempts 1 is a terminal nack (Fail), 2 two retries.
	copies := 0
	deadLetter := func(topic string, m *client.Message, attempts int) {
		t.Helper()
		// The copy is written after the nack's answer: wait for it, so the
		// offsets in the DLQ are in the order of the calls.
		copies++
		defer func(want int) {
			eventually(t, 10_000, 20, func() bool {
				// 404 until the DLQ's first copy creates it.
				status, body := a.do("GET", "/admin/api/messages?topic=pay-dlq", "")
				var page struct{ Items []json.RawMessage }
				return status == 200 && json.Unmarshal([]byte(body), &page) == nil && len(page.Items) == want
			})
		}(copies)
		if _, err := c.Publisher(topic).PublishConfirmed(ctx, m); err != nil {
			t.Fatal(err)
		}
		for range attempts {
			d := next(t, subs[topic], 10*time.Second)
			settle := d.Retry
			if attempts == 1 {
				settle = d.Fail
			}
			if err := settle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadLetter("pay", client.Text("charge 1").Header("x-order", "1"), 2)
	deadLetter("pay", client.JSON(map[string]int{"charge": 2}), 2)
	deadLetter("pay", client.Text("refund 3"), 1)
	deadLetter("pay", client.Raw([]byte{0xde, 0xad, 0xbe, 0xef}), 1)
	deadLetter("ship", client.Text("parcel 5"), 1)
	api := dashBrowse(t, a, "topic=pay-dlq")

	// A queue under the global policy, with a global target that has no
	// copy yet: listed among the targets, not choosable.
	if _, err := c.DeclareQueue(ctxT(t), client.NewQueueConfig("misc").Dlq(client.DlqGlobal())); err != nil {
		t.Fatal(err)
	}
	var g struct {
		Version uint64 `json:"version"`
	}
	a.json("GET", "/admin/api/global-dlq", "", 200, &g)
	a.json("PUT", "/admin/api/global-dlq", fmt.Sprintf(`{"expected_version":%d,"target":{"topic":"all-dlq","group":""}}`, g.Version), 200, nil)

	openMark := requests.mark()
	p.open("/admin/dlq")
	p.waitText("#live", "live")
	p.waitJS("the global target, listed and disabled", `(() => { const o = document.querySelector('#dlq-queue option[value="all-dlq/"]'); return !!o && o.disabled && o.textContent.includes('no dead letter yet'); })()`)
	p.waitJS("pay-dlq chosen by itself", `document.getElementById('dlq-queue').value === 'pay-dlq/' && location.search.includes('topic=pay-dlq')`)
	p.waitText("#dlq-feeds", "pay, ship")
	p.waitJS("the rows", `document.querySelectorAll('#dlq-table tbody tr[data-key]').length === 5`)
	rows := rowCells(p, "#dlq-table")
	reasons := map[string]int{}
	for _, it := range api.Items {
		r := rows[strconv.FormatUint(it.Offset, 10)]
		h := it.Headers
		reasons[h["stroma.dlq.reason"]]++
		if len(r) < 9 || r[1] != strconv.FormatUint(it.Offset, 10) || !strings.HasPrefix(r[2], h["stroma.dlq.source_topic"]) ||
			!strings.Contains(r[2], "#"+h["stroma.dlq.source_partition"]+" @"+h["stroma.dlq.source_offset"]) ||
			r[3] != h["stroma.dlq.reason"] || r[5] != h["stroma.dlq.retry_count"] || r[6] != strconv.Itoa(it.PayloadLen) {
			t.Fatalf("row %d on the page %q, the API has %+v", it.Offset, r, it)
		}
	}
	if reasons["retries_exhausted"] != 2 || reasons["terminal_nack"] != 3 {
		t.Fatalf("the API's reasons %v", reasons)
	}
	p.waitText("#dlq-c-total", "5")
	p.waitText("#dlq-c-retries_exhausted", strconv.Itoa(reasons["retries_exhausted"]))
	p.waitText("#dlq-c-terminal_nack", strconv.Itoa(reasons["terminal_nack"]))
	msgNoPeriodicListing(t, requests, openMark, "queues,global-dlq", "/admin/api/queues", "/admin/api/global-dlq")

	// Filters: the source ship, then pay and terminal nacks.
	setSelect(p, "#dlq-source", "ship/")
	p.waitJS("ship's row", `document.querySelectorAll('#dlq-table tbody tr[data-key]').length === 1 && !!document.querySelector('#dlq-table tr[data-key="4"]')`)
	setSelect(p, "#dlq-source", "pay/")
	setSelect(p, "#dlq-reason", "terminal_nack")
	p.waitJS("pay's terminal rows", `document.querySelectorAll('#dlq-table tbody tr[data-key]').length === 2 && !!document.querySelector('#dlq-table tr[data-key="2"]') && !!document.querySelector('#dlq-table tr[data-key="3"]')`)
	p.waitJS("filters in the URL", `location.search.includes('source=pay%2F') && location.search.includes('reason=terminal_nack')`)
	setSelect(p, "#dlq-source", "")
	setSelect(p, "#dlq-reason", "")
	p.waitJS("all rows again", `document.querySelectorAll('#dlq-table tbody tr[data-key]').length === 5`)

	// The inspector: a copy's payload and its stroma.dlq.* headers.
	p.click(`#dlq-table tr[data-key="0"] a`)
	p.waitJS("the copy's payload", `document.getElementById('payload-body') && document.getElementById('payload-body').textContent === 'charge 1'`)
	p.waitText("#dlq-headers", "stroma.dlq.reason")
	p.waitText("#dlq-headers", "x-order")
	p.waitText("#dlq-facts", "retries_exhausted")
	msgWaitFocus(p, "a copy opened", "dlq-insp-title")
	// A late answer for an earlier click: offset 0's held back 1.5 s,
	// offset 1 clicked meanwhile; offset 1 stays shown.
	msgSpyFetch(p, "from=0&limit=1&", 1500)
	p.click(`#dlq-table tr[data-key="0"] a`)
	p.click(`#dlq-table tr[data-key="1"] a`)
	p.waitJS("the late answer delivered", `window.__late === 1`)
	time.Sleep(200 * time.Millisecond)
	p.waitJS("offset 1 still shown", `(() => { const b = document.getElementById('payload-body'); return !!b && b.textContent.includes('"charge": 2') && document.getElementById('dlq-insp-offset').textContent === 'offset 1'; })()`)

	// Replay the two retries-exhausted copies, chosen with their checkboxes.
	p.click(`.dlq-pick[data-offset="0"]`)
	p.click(`.dlq-pick[data-offset="1"]`)
	p.waitText("#dlq-selected-count", "2 selected")
	p.click("#dlq-replay")
	p.waitText("#confirm-text", "2 copies")
	p.acceptConfirm()
	p.waitJS("per-offset outcomes", `document.querySelectorAll('#dlq-replay-table tr[data-outcome="replayed"]').length === 2`)
	// The replay button is disabled now (nothing selected): the focus is
	// on the outcome, not dropped to the page's body.
	msgWaitFocus(p, "after the replay", "dlq-replay-heading")
	for _, want := range []string{"charge 1", `{"charge":2}`} {
		d := next(t, subs["pay"], 10*time.Second)
		if d.Text() != want || d.Headers["stroma.dlq.reason"] != "" {
			t.Fatalf("replayed delivery %q %v, want %q without stroma.dlq.*", d.Text(), d.Headers, want)
		}
		if err := d.Ack(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(dashBrowse(t, a, "topic=pay-dlq").Items); n != 5 {
		t.Fatalf("after a replay the DLQ holds %d copies, want its 5", n)
	}

	// Redrive by filter: pay's terminal nacks. The preview is the dry run.
	// A time that is not one: the form says so, nothing is sent.
	msgSpyFetch(p, "", 0)
	msgSetInput(p, "#rd-from", "yesterday")
	p.click("#rd-preview")
	p.waitText("#rd-result", "is not a time")
	// A date that does not exist is refused with what is wrong (Date
	// would move it to 2027-02-15 01:00), and so is a limit outside
	// 1-10,000 (0 would be read as the API's default of 1000).
	msgSetInput(p, "#rd-from", "2026-13-45 25:00")
	p.click("#rd-preview")
	p.waitText("#rd-result", "month 13 is not 1-12")
	p.waitText("#rd-result", "hour 25 is not 0-23")
	p.waitJS("the field marked", `document.getElementById('rd-from').getAttribute('aria-invalid') === 'true'`)
	msgSetInput(p, "#rd-from", "2026-02-30")
	p.click("#rd-preview")
	p.waitText("#rd-result", "day 30 is not 1-28")
	msgSetInput(p, "#rd-from", "")
	for _, bad := range []string{"0", "10001", "2.5"} {
		msgSetInput(p, "#rd-limit", bad)
		p.click("#rd-preview")
		p.waitText("#rd-result", "At most: \""+bad+"\": write a whole number from 1 to 10,000")
	}
	if sent := msgSpied(p, "/admin/api/dlq/redrive"); len(sent) != 0 {
		t.Fatalf("refused fields sent %d redrives: %v", len(sent), sent)
	}
	msgSetInput(p, "#rd-limit", "1000")
	// "until" a date includes that day: today from its start to its end
	// counts the copies dead-lettered today.
	var today string
	p.eval(`(() => { const d = new Date(); return d.getFullYear() + '-' + String(d.getMonth() + 1).padStart(2, '0') + '-' + String(d.getDate()).padStart(2, '0'); })()`, &today)
	msgSetInput(p, "#rd-from", today)
	msgSetInput(p, "#rd-to", today)
	msgSetInput(p, "#rd-source-topic", "pay")
	setSelect(p, "#rd-reason", "terminal_nack")
	p.click("#rd-preview")
	p.waitText("#rd-preview-count", "2")
	msgWaitFocus(p, "after the preview", "rd-preview")
	var toMsOK bool
	p.eval(`(() => { const b = JSON.parse(window.__reqs.filter((r) => r.url.includes('/dlq/redrive')).pop().body); const d = new Date();
		return b.to_ms === new Date(d.getFullYear(), d.getMonth(), d.getDate() + 1).getTime() - 1 && b.from_ms === new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime() && b.limit === 1000; })()`, &toMsOK)
	if !toMsOK {
		t.Fatalf("the preview's body %v: want from_ms today's start, to_ms its last millisecond, limit 1000", msgSpied(p, "/admin/api/dlq/redrive"))
	}
	fromMs, toMs := startedMs-60_000, time.Now().UnixMilli()+60_000
	msgSetInput(p, "#rd-from", strconv.FormatInt(fromMs, 10))
	msgSetInput(p, "#rd-to", strconv.FormatInt(toMs, 10))
	msgSetInput(p, "#rd-source-topic", "pay")
	setSelect(p, "#rd-reason", "terminal_nack")
	p.click("#rd-preview")
	var dry struct {
		Matched int `json:"matched"`
	}
	a.json("POST", "/admin/api/dlq/redrive", fmt.Sprintf(`{"dlq_topic":"pay-dlq","source_topic":"pay","reason":"terminal_nack","from_ms":%d,"to_ms":%d,"dry_run":true}`, fromMs, toMs), 200, &dry)
	if dry.Matched != 2 {
		t.Fatalf("the dry run matched %d, want 2", dry.Matched)
	}
	p.waitText("#rd-preview-count", strconv.Itoa(dry.Matched))
	if n := len(dashBrowse(t, a, "topic=pay-dlq").Items); n != 5 {
		t.Fatalf("a preview moved copies: %d left", n)
	}
	p.click("#rd-run")
	p.waitText("#confirm-text", fmt.Sprintf("Move %d copies", dry.Matched))
	p.acceptConfirm()
	p.waitJS("the redrive's result", fmt.Sprintf(`(() => { const o = document.getElementById('rd-outcome'); return !!o && o.dataset.replayed === '%d' && o.dataset.matched === '%d'; })()`, dry.Matched, dry.Matched))
	msgWaitFocus(p, "after the redrive", "rd-run")
	got := map[string]bool{}
	for range 2 {
		d := next(t, subs["pay"], 10*time.Second)
		got[d.Text()] = true
		if err := d.Ack(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if !got["refund 3"] || !got[string([]byte{0xde, 0xad, 0xbe, 0xef})] {
		t.Fatalf("redriven deliveries %v", got)
	}
	after := dashBrowse(t, a, "topic=pay-dlq&include_settled=true")
	for _, it := range after.Items {
		if (it.Offset == 2 || it.Offset == 3) != (it.State == "settled") {
			t.Fatalf("after the redrive, DLQ offset %d is %s (want 2 and 3 settled, the rest not)", it.Offset, it.State)
		}
	}
	p.waitJS("the moved copies leave the table", `document.querySelectorAll('#dlq-table tbody tr[data-key]').length === 3 && !document.querySelector('#dlq-table tr[data-key="2"]')`)
	p.shots("dlq")
	p.axe()
	msgFocusTop(p)
	p.keyboardReach()

	// A redrive of everything with a limit of 1: one copy moves (the first,
	// pay's "charge 1") and the page says where the scan stopped.
	for _, sel := range []string{"#rd-source-topic", "#rd-from", "#rd-to"} {
		msgSetInput(p, sel, "")
	}
	setSelect(p, "#rd-reason", "")
	msgSetInput(p, "#rd-limit", "1")
	p.click("#rd-run")
	p.waitText("#confirm-text", "Move 1 copy")
	p.acceptConfirm()
	p.waitJS("one moved", `(() => { const o = document.getElementById('rd-outcome'); return !!o && o.dataset.replayed === '1'; })()`)
	p.waitText("#rd-result", "run again to go on")
	if d := next(t, subs["pay"], 10*time.Second); d.Text() != "charge 1" {
		t.Fatalf("the limited redrive delivered %q", d.Text())
	} else {
		d.Ack(ctxT(t))
	}
	p.waitJS("two copies left", `document.querySelectorAll('#dlq-table tbody tr[data-key]').length === 2 && !document.querySelector('#dlq-table tr[data-key="0"]')`)

	// A redrive the API refuses (until before from): its message.
	msgSetInput(p, "#rd-limit", "1000")
	msgSetInput(p, "#rd-from", strconv.FormatInt(toMs, 10))
	msgSetInput(p, "#rd-to", strconv.FormatInt(fromMs, 10))
	p.click("#rd-preview")
	p.waitText("#rd-result", "bad_parameter")
	p.noErrors(400)
	p.measure("dlq", "/admin/dlq?topic=pay-dlq")
}

// TestDashboardDeadLettersRedrive: a redrive through the page moves what
// its confirmation stated and nothing else. One topic's two queues (the
// default group and billing) dead-letter into one DLQ: the source filter
// "orders" (the default group) previews and moves the default group's
// copies only (the API reads an empty source_group as any group, so the
// page sends "default"); a copy dead-lettered while the confirmation is
// open changes the fresh count, which the page says and asks again; the
// real redrive is sent with limit = the count confirmed.
func TestDashboardDeadLettersRedrive(t *testing.T) {
	s, a, p := startDashboard(t, "--lease-ms", "60000")
	ctx := ctxT(t)
	c := dial(t, s, client.TransportTCP)
	subs := map[string]*client.Subscription{}
	for _, group := range []string{"", "billing"} {
		if _, err := c.DeclareQueue(ctx, client.NewQueueConfig("orders").Group(group).Dlq(client.DlqCustom("orders-dlq", ""))); err != nil {
			t.Fatal(err)
		}
		sub, err := c.SubscribeTopic(ctx, "orders", client.SubscribeOptions{Group: group, Prefetch: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs[group] = sub
	}
	copies := 0
	deadLetter := func(group, text string) {
		t.Helper()
		if _, err := c.PublisherGrouped("orders", group).PublishConfirmed(ctx, client.Text(text)); err != nil {
			t.Fatal(err)
		}
		if err := next(t, subs[group], 10*time.Second).Fail(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		copies++
		eventually(t, 10_000, 20, func() bool {
			status, body := a.do("GET", "/admin/api/messages?topic=orders-dlq", "")
			var page struct{ Items []json.RawMessage }
			return status == 200 && json.Unmarshal([]byte(body), &page) == nil && len(page.Items) == copies
		})
	}
	deadLetter("", "d1")
	deadLetter("billing", "b1")
	deadLetter("", "d2")
	deadLetter("billing", "b2")

	p.open("/admin/dlq?topic=orders-dlq")
	p.waitText("#live", "live")
	p.waitJS("the rows", `document.querySelectorAll('#dlq-table tbody tr[data-key]').length === 4`)
	setSelect(p, "#dlq-source", "orders/")
	p.waitJS("the default group's rows", `document.querySelectorAll('#dlq-table tbody tr[data-key]').length === 2`)
	var label string
	p.eval(`document.getElementById('dlq-source').selectedOptions[0].textContent`, &label)
	if label != "orders" {
		t.Fatalf("the source filter reads %q", label)
	}
	var group string
	p.eval(`document.getElementById('rd-source-group').value`, &group)
	if group != "default" {
		t.Fatalf("the source orders/ fills the redrive's group with %q, want default (\"\" is any group)", group)
	}
	msgSpyFetch(p, "", 0)
	p.click("#rd-preview")
	var dry struct {
		Matched int `json:"matched"`
	}
	a.json("POST", "/admin/api/dlq/redrive", `{"dlq_topic":"orders-dlq","source_topic":"orders","source_group":"default","dry_run":true}`, 200, &dry)
	if dry.Matched != 2 {
		t.Fatalf("the API's dry run for the default group matched %d, want 2", dry.Matched)
	}
	p.waitText("#rd-preview-count", "2")
	p.waitText("#rd-preview-text", "orders (default group)")

	// Run: a copy arrives while the question is open; the fresh count
	// differs, the page says so and asks again with it.
	p.click("#rd-run")
	p.waitText("#confirm-text", "Move 2 copies")
	deadLetter("", "d3")
	p.acceptConfirm()
	p.waitJS("asked again", `document.getElementById('confirm').open && document.getElementById('confirm-text').textContent.includes('Move 3 copies') && document.getElementById('confirm-text').textContent.includes('The count changed')`)
	p.waitText("#rd-changed", "2 copies then, 3 copies now")
	p.click("#confirm-ok")
	p.waitJS("the redrive's result", `(() => { const o = document.getElementById('rd-outcome'); return !!o && o.dataset.replayed === '3'; })()`)
	var runs []map[string]any
	for _, r := range msgSpied(p, "/admin/api/dlq/redrive") {
		var b map[string]any
		if err := json.Unmarshal([]byte(r.Body), &b); err != nil {
			t.Fatal(err)
		}
		if b["source_group"] != "default" || b["source_topic"] != "orders" {
			t.Fatalf("a redrive sent with source %v / %v, want orders / default", b["source_topic"], b["source_group"])
		}
		if b["dry_run"] == false {
			runs = append(runs, b)
		}
	}
	if len(runs) != 1 || runs[0]["limit"] != float64(3) {
		t.Fatalf("the real redrives sent %v, want one with limit 3 (the count confirmed)", runs)
	}
	got := map[string]bool{}
	for range 3 {
		d := next(t, subs[""], 10*time.Second)
		got[d.Text()] = true
		if err := d.Ack(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if !got["d1"] || !got["d2"] || !got["d3"] {
		t.Fatalf("redriven to the default group: %v", got)
	}
	left := dashBrowse(t, a, "topic=orders-dlq")
	if len(left.Items) != 2 {
		t.Fatalf("the DLQ keeps %d copies, want billing's 2", len(left.Items))
	}
	for _, it := range left.Items {
		if it.Headers["stroma.dlq.source_group"] != "billing" {
			t.Fatalf("a copy of %q left, want billing's only: %+v", it.Headers["stroma.dlq.source_group"], it)
		}
	}
	p.noErrors()
}
