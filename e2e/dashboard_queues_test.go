package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fibril-go/fibril/client"
)

// The Queues and Queue pages (dashboard/assets/pages/queue{s,}.html)
// against a broker with real traffic. Every number read off a page is
// compared with the API's answer read by the test; every mutation is done
// by clicking and typing on the page and checked through the API.

// dashQueue is the Queue shape of GET /admin/api/queues.
type dashQueue struct {
	Topic            string  `json:"topic"`
	Group            string  `json:"group"`
	PartitionCount   int     `json:"partition_count"`
	Ready            int64   `json:"ready"`
	Inflight         int64   `json:"inflight"`
	Delayed          int64   `json:"delayed"`
	PendingDLQ       int64   `json:"pending_dlq"`
	Consumers        int64   `json:"consumers"`
	LoadedPartitions int     `json:"loaded_partitions"`
	DefaultTTLMs     int64   `json:"default_message_ttl_ms"`
	PublishRate      float64 `json:"publish_rate_per_sec"`
	DLQ              struct {
		Policy     string `json:"policy"`
		Topic      string `json:"topic"`
		Group      string `json:"group"`
		MaxRetries int    `json:"max_retries"`
	} `json:"dlq"`
	Partitions []struct {
		Partition int    `json:"partition"`
		Loaded    bool   `json:"loaded"`
		Ready     *int64 `json:"ready"`
		Inflight  *int64 `json:"inflight"`
		Consumers *int64 `json:"consumers"`
	} `json:"partitions"`
}

func dashQueues(a *adminClient) map[string]dashQueue {
	a.t.Helper()
	var out struct{ Queues []dashQueue }
	a.json("GET", "/admin/api/queues", "", 200, &out)
	m := map[string]dashQueue{}
	for _, q := range out.Queues {
		m[q.Topic+"/"+q.Group] = q
	}
	return m
}

// qsAudit counts the audit ring's entries of action on target (e.g.
// "queue.delete", "qs-held/default"): the requests the broker carried out
// or refused, whoever sent them.
func qsAudit(a *adminClient, action, target string) int {
	a.t.Helper()
	var out struct {
		Entries []struct{ Action, Target string }
	}
	a.json("GET", "/admin/api/audit", "", 200, &out)
	n := 0
	for _, e := range out.Entries {
		if e.Action == action && e.Target == target {
			n++
		}
	}
	return n
}

// qsSkewClock sets the tab's Date.now() off the broker's by skewMs from
// the next page on: the pages must chart on the broker's clock.
func qsSkewClock(p *dashPage, skewMs int64) {
	p.run("skew the browser clock", chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := cdppage.AddScriptToEvaluateOnNewDocument(fmt.Sprintf(`(() => { const real = Date.now.bind(Date);
			Date.now = () => real() + %d; })();`, skewMs)).Do(ctx)
		return err
	}))
}

// num is fmt.num of the page for the small counts the tests make.
func qsNum(n int64) string { return strconv.FormatInt(n, 10) }

// rowSel is the Queues table's row of a queue of the default group.
func rowSel(topic string) string { return fmt.Sprintf(`#qs-table tr[data-key=%q]`, topic+"/") }

// holdInflight publishes n to topic and takes them with a subscriber that
// never settles them: n inflight, one consumer.
func holdInflight(t *testing.T, c *client.Client, topic string, n int) {
	t.Helper()
	for i := range n {
		publishText(t, c, topic, fmt.Sprint("held ", i))
	}
	sub, err := c.SubscribeTopic(ctxT(t), topic, client.SubscribeOptions{Prefetch: uint32(n)})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		next(t, sub, 5*time.Second)
	}
}

// TestDashboardQueues: the Queues page lists every queue with the API's
// counts (a loaded queue with ready messages, one with inflight messages
// and a consumer, a wide one never loaded), a sparkline each that has the
// broker's backlog samples from the first paint, totals that are the sums;
// it follows new traffic live; filter, "show" and sort persist in the URL
// across a reload; create (with a refused one showing the API's message),
// purge, a cancelled delete, a delete refused while messages are inflight
// (the API's 409 message shown) and a delete, all through the page and
// checked through the API; a named group's link opens its Queue page.
func TestDashboardQueues(t *testing.T) {
	s, a, p := startDashboard(t, "--lease-ms", "60000")
	// The browser's clock an hour behind the broker's: the live points
	// (the listing's at_ms) still follow the history (seen failing with
	// Date.now() points: all older than the history, all dropped).
	qsSkewClock(p, -3_600_000)
	// A fresh broker: no queue, said so.
	p.open("/admin/queues")
	p.waitText("#qs-table td.empty", "No queue is declared yet")
	c := dial(t, s, client.TransportTCP)
	for i := range 6 {
		publishText(t, c, "qs-orders", "order "+strconv.Itoa(i))
	}
	holdInflight(t, c, "qs-held", 2)
	a.json("POST", "/admin/api/queues", `{"topic":"qs-wide","group":"g1","partition_count":3}`, 201, nil)

	// The backlog sampler (every 5 s) has seen qs-orders before the page
	// opens, so its sparkline must start with that history.
	var backlog struct {
		WindowMs  int64                 `json:"window_ms"`
		PointsMax int                   `json:"points_max"`
		Queues    map[string][][2]int64 `json:"queues"`
	}
	eventually(t, 12_000, 200, func() bool {
		a.json("GET", "/admin/api/queue-backlog", "", 200, &backlog)
		pts := backlog.Queues["qs-orders/"]
		return len(pts) > 0 && pts[len(pts)-1][1] == 6
	})
	if backlog.WindowMs != 600_000 || backlog.PointsMax != 121 || backlog.Queues["qs-wide/g1"] != nil {
		t.Fatalf("queue-backlog: %+v (an unloaded queue has no history)", backlog)
	}
	historyPoints := len(backlog.Queues["qs-orders/"])

	p.open("/admin/queues")
	p.waitText(rowSel("qs-orders")+` [data-f="ready"]`, "6")
	p.waitJS("the sparkline of qs-orders starts with the broker's history", fmt.Sprintf(`(() => {
		const n = document.querySelector('%s svg.spark');
		return !!n && Number(n.dataset.history) >= %d && Number(n.dataset.points) > Number(n.dataset.history);
	})()`, rowSel("qs-orders"), historyPoints))
	p.waitText("#live", "live")
	p.waitText(rowSel("qs-held")+` [data-f="inflight"]`, "2")

	// Every row's numbers are the API's.
	api := dashQueues(a)
	compareQueueRows(t, p, api)
	if got, want := p.text("#qs-count"), qsNum(int64(len(api))); got != want {
		t.Fatalf("queues on the page %q, want %s", got, want)
	}
	var ready, inflight int64
	for _, q := range api {
		ready += q.Ready
		inflight += q.Inflight
	}
	if p.text("#qs-ready") != qsNum(ready) || p.text("#qs-inflight") != qsNum(inflight) {
		t.Fatalf("totals ready %q inflight %q, want %d and %d", p.text("#qs-ready"), p.text("#qs-inflight"), ready, inflight)
	}
	if got := p.text(`#qs-table tr[data-key="qs-wide/g1"] [data-f="partitions"]`); got != "0 of 3" {
		t.Fatalf("qs-wide loaded partitions %q, want 0 of 3", got)
	}

	// Live: more traffic shows without a reload (the events stream's
	// queues family, every 2 s), and the sparkline gains its points.
	var sparkBefore int
	p.eval(`Number(document.querySelector('`+rowSel("qs-orders")+` svg.spark').dataset.points)`, &sparkBefore)
	for i := range 3 {
		publishText(t, c, "qs-orders", "late "+strconv.Itoa(i))
	}
	p.waitText(rowSel("qs-orders")+` [data-f="ready"]`, "9")
	p.waitJS("the sparkline moves", fmt.Sprintf(`(() => { const n = document.querySelector('%s svg.spark');
		const ys = n.querySelector('polyline').getAttribute('points').split(' ').map(pt => Number(pt.split(',')[1]));
		return Number(n.dataset.points) > %d && ys[ys.length - 1] < ys[0]; })()`, // it rises: SVG y grows downwards
		rowSel("qs-orders"), sparkBefore))

	// Filter, show and sort: typed and clicked, kept in the URL, and the
	// same view after a reload.
	qsFill(p, "#qs-filter", "qs-")
	p.run("show backlog", qsSelect("#qs-show", "backlog"))
	p.jsClick(`#qs-table th:nth-child(3) button.sort`) // Ready ascending
	p.jsClick(`#qs-table th:nth-child(3) button.sort`) // and descending
	var loc string
	p.eval(`location.search`, &loc)
	qv, _ := url.ParseQuery(strings.TrimPrefix(loc, "?"))
	if qv.Get("qs.q") != "qs-" || qv.Get("qs.sort") != "-ready" || qv.Get("qs.show") != "backlog" {
		t.Fatalf("the URL does not keep the view: %q", loc)
	}
	p.open("/admin/queues" + loc)
	p.waitText(rowSel("qs-orders")+` [data-f="ready"]`, "9")
	var view struct {
		Filter, Show, Sort string
		Keys               []string
	}
	p.eval(`({filter: document.getElementById('qs-filter').value, show: document.getElementById('qs-show').value,
		sort: document.querySelector('#qs-table th:nth-child(3)').getAttribute('aria-sort'),
		keys: [...document.querySelectorAll('#qs-table tbody tr')].map(r => r.dataset.key)})`, &view)
	// qs-wide (nothing ready) is not shown; qs-held has 0 ready too (its
	// two are inflight): only qs-orders has a backlog.
	if view.Filter != "qs-" || view.Show != "backlog" || view.Sort != "descending" || strings.Join(view.Keys, ",") != "qs-orders/" {
		t.Fatalf("after a reload: %+v", view)
	}
	qsFill(p, "#qs-filter", "")
	p.run("show dlq", qsSelect("#qs-show", "dlq"))
	p.waitText("#qs-table td.empty", "None of the 3 queues is shown")
	p.run("show all", qsSelect("#qs-show", ""))
	p.waitJS("three rows", `document.querySelectorAll('#qs-table tbody tr').length === 3`)
	p.eval(`[...document.querySelectorAll('#qs-table tbody tr')].map(r => r.dataset.key)`, &view.Keys)
	if strings.Join(view.Keys, ",") != "qs-orders/,qs-held/,qs-wide/g1" && strings.Join(view.Keys, ",") != "qs-orders/,qs-wide/g1,qs-held/" {
		t.Fatalf("rows by ready, descending: %v", view.Keys)
	}

	// Create: a refusal shows the API's message; then a queue with every
	// setting, checked through the API.
	p.jsClick("#qs-create summary")
	qsFill(p, "#qs-c-topic", "bad..name")
	p.jsClick("#qs-c-submit")
	p.waitText("#qs-create-form .form-status", "not a valid name")
	qsFill(p, "#qs-c-topic", "qs-new")
	qsFill(p, "#qs-c-partitions", "2")
	p.run("policy custom", qsSelect("#qs-c-policy", "custom"))
	qsFill(p, "#qs-c-target-topic", "qs-new-dlq")
	qsFill(p, "#qs-c-retries", "4")
	qsFill(p, "#qs-c-ttl", "60000")
	p.jsClick("#qs-c-submit")
	p.waitText("#qs-create-form .form-status", "Created qs-new")
	q := dashQueues(a)["qs-new/"]
	if q.PartitionCount != 2 || q.DLQ.Policy != "custom" || q.DLQ.Topic != "qs-new-dlq" || q.DLQ.MaxRetries != 4 || q.DefaultTTLMs != 60_000 {
		t.Fatalf("created through the page: %+v", q)
	}
	p.waitJS("qs-new listed", `!!document.querySelector('`+rowSel("qs-new")+`')`)
	p.shots("queues")

	// Purge qs-orders: confirmed in the dialog; the API has nothing ready.
	p.jsClick(rowSel("qs-orders") + ` button[data-act="purge"]`)
	p.acceptConfirm()
	p.waitText("#toasts", "Purged 9 messages from qs-orders")
	if q := dashQueues(a)["qs-orders/"]; q.Ready != 0 {
		t.Fatalf("after the purge qs-orders has %d ready", q.Ready)
	}
	p.waitText(rowSel("qs-orders")+` [data-f="ready"]`, "0")

	// A delete cancelled in the dialog deletes nothing.
	// dash.js's confirmDialog: the focus starts on Cancel.
	p.jsClick(`#qs-table tr[data-key="qs-wide/g1"] button[data-act="delete"]`)
	p.waitJS("the confirm dialog opens", `document.getElementById('confirm').open`)
	p.waitJS("the focus on Cancel", `document.activeElement === document.querySelector('#confirm button[value="cancel"]')`)
	p.shots("queues-confirm")
	p.click(`#confirm button[value="cancel"]`)
	p.waitJS("the dialog closes", `!document.getElementById('confirm').open`)
	if _, ok := dashQueues(a)["qs-wide/g1"]; !ok {
		t.Fatal("a cancelled delete deleted the queue")
	}
	if n := qsAudit(a, "queue.delete", "qs-wide/g1"); n != 0 {
		t.Fatalf("a cancelled delete sent %d delete requests", n)
	}

	// Delete qs-held while two are inflight: the broker refuses (409
	// in_use) and the page shows its message; the queue stays. The delete
	// is asked, cancelled and asked again in one script, before the
	// cancel's close event is dispatched: the second ask must still be
	// answered by its own button, and the cancelled one sends nothing:
	// the audit ring has exactly one delete of qs-held (the second ask's).
	var asked bool
	p.eval(`(() => { const del = document.querySelector('`+rowSel("qs-held")+` button[data-act="delete"]');
		del.click(); document.querySelector('#confirm button[value="cancel"]').click(); del.click();
		return document.getElementById('confirm').open; })()`, &asked)
	if !asked {
		t.Fatal("the second delete did not open the confirm dialog")
	}
	p.acceptConfirm()
	p.waitText("#banner", "was not deleted")
	time.Sleep(500 * time.Millisecond) // a second request, if any, is in
	if n := qsAudit(a, "queue.delete", "qs-held/default"); n != 1 {
		t.Fatalf("ask, cancel, ask and confirm sent %d delete requests of qs-held, want 1 (the cancelled ask must send none)", n)
	}
	status, body := a.do("POST", "/admin/api/queues/delete", `{"topic":"qs-held"}`)
	if status != 409 || !strings.Contains(body, "in_use") {
		t.Fatalf("the API's delete of qs-held = %d %s", status, body)
	}
	var refusal struct{ Message string }
	if err := json.Unmarshal([]byte(body), &refusal); err != nil {
		t.Fatal(err)
	}
	if banner := p.text("#banner"); !strings.Contains(banner, refusal.Message) || !strings.Contains(banner, "2 messages inflight") {
		t.Fatalf("banner %q, want the API's message %q", banner, refusal.Message)
	}
	if _, ok := dashQueues(a)["qs-held/"]; !ok {
		t.Fatal("a refused delete deleted the queue")
	}
	p.shots("queues-refused")

	// Delete qs-new: gone from the API and from the page.
	p.jsClick(rowSel("qs-new") + ` button[data-act="delete"]`)
	p.acceptConfirm()
	p.waitText("#toasts", "Deleted qs-new")
	if _, ok := dashQueues(a)["qs-new/"]; ok {
		t.Fatal("qs-new is still listed after its delete")
	}
	p.waitJS("qs-new's row gone", `!document.querySelector('`+rowSel("qs-new")+`')`)
	var banner bool
	p.eval(`document.getElementById('banner').hidden`, &banner)
	if !banner {
		t.Fatal("the refusal's banner stayed after a delete that worked")
	}

	p.axe()
	p.keyboardReach()
	p.noErrors(400, 409)
	p.measure("queues", "/admin/queues")

	// A queue of a named group, never loaded: its link opens its page,
	// which says its partitions are not loaded rather than showing zeros.
	p.waitJS("qs-wide listed", `!!document.querySelector('#qs-table tr[data-key="qs-wide/g1"] a')`)
	p.jsClick(`#qs-table tr[data-key="qs-wide/g1"] a`)
	p.waitJS("the queue page of qs-wide/g1", `location.pathname === '/admin/queue' && location.search === '?topic=qs-wide&group=g1'`)
	p.waitText("#qd-loaded", "not loaded")
	p.waitJS("three partitions, none loaded", `document.querySelectorAll('#qp-table tbody tr').length === 3 &&
		[...document.querySelectorAll('#qp-table tbody tr')].every(r => r.cells[1].textContent === 'not loaded')`)
	if got := p.text("#page-title"); got != "Queue qs-wide / g1" {
		t.Fatalf("title %q", got)
	}
	p.noErrors(400, 409)
}

// compareQueueRows checks every queue of the API against its row.
func compareQueueRows(t *testing.T, p *dashPage, api map[string]dashQueue) {
	t.Helper()
	var rows map[string]map[string]string
	p.eval(`Object.fromEntries([...document.querySelectorAll('#qs-table tbody tr[data-key]')].map(r =>
		[r.dataset.key, Object.fromEntries([...r.querySelectorAll('[data-f]')].map(n => [n.dataset.f, n.textContent]))]))`, &rows)
	if len(rows) != len(api) {
		t.Fatalf("%d rows on the page, %d queues in the API: %v", len(rows), len(api), rows)
	}
	for key, q := range api {
		r, ok := rows[key]
		if !ok {
			t.Fatalf("queue %s is not on the page (rows %v)", key, rows)
		}
		want := map[string]string{"ready": qsNum(q.Ready), "inflight": qsNum(q.Inflight), "delayed": qsNum(q.Delayed),
			"pending_dlq": qsNum(q.PendingDLQ), "consumers": qsNum(q.Consumers),
			"partitions": fmt.Sprintf("%d of %d", q.LoadedPartitions, q.PartitionCount)}
		for f, v := range want {
			if r[f] != v {
				t.Errorf("queue %s: %s on the page %q, the API %q", key, f, r[f], v)
			}
		}
	}
}

// TestDashboardQueueDetail: one queue's page shows the API's counts, its
// partitions and its consumers (the API's subscriptions of the queue), a
// chart of ready and inflight with the broker's history from the first
// paint that moves with traffic; settings edited through the page (a
// refused one shows the API's message) are the API's afterwards; a test
// publish through the page lands at the offset the page shows (read back
// through the messages API); the links go to its messages and its dead
// letters; an unknown queue says so; without EventSource the page polls
// and still follows the traffic.
func TestDashboardQueueDetail(t *testing.T) {
	s, a, p := startDashboard(t, "--lease-ms", "60000")
	a.json("POST", "/admin/api/queues", `{"topic":"qd-orders","partition_count":2}`, 201, nil)
	c := dial(t, s, client.TransportTCP)
	for i := range 5 {
		publishText(t, c, "qd-orders", "order "+strconv.Itoa(i))
	}
	holdInflight(t, c, "qd-orders", 2)
	var backlog struct{ Queues map[string][][2]int64 }
	eventually(t, 12_000, 200, func() bool {
		a.json("GET", "/admin/api/queue-backlog", "", 200, &backlog)
		return len(backlog.Queues["qd-orders/"]) > 0
	})
	historyPoints := len(backlog.Queues["qd-orders/"])
	historyFirst := backlog.Queues["qd-orders/"][0][0]

	// The browser's clock an hour ahead of the broker's: the history must
	// stay (seen failing with Date.now() points: the first live point,
	// "an hour later", pushed every history point out of the 10 min
	// window). And a fetch the test can make the broker's refusal of: the
	// TTL's re-declare (POST /admin/api/queues) answers 503 while
	// window.__qdRefuse is set.
	qsSkewClock(p, 3_600_000)
	p.run("refusable re-declare", chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := cdppage.AddScriptToEvaluateOnNewDocument(`(() => { const real = window.fetch.bind(window);
			window.fetch = (input, init) => {
				if (window.__qdRefuse && init && init.method === 'POST' && String(input) === '/admin/api/queues') {
					return Promise.resolve(new Response(JSON.stringify({code: 'not_ready', message: 'refused by the test'}),
						{status: 503, headers: {'Content-Type': 'application/json'}}));
				}
				return real(input, init);
			}; })();`).Do(ctx)
		return err
	}))

	p.open("/admin/queue?topic=qd-orders")
	p.waitText("#qd-inflight", "2")
	p.waitJS("the chart starts with the broker's history", fmt.Sprintf(`(() => {
		const n = document.querySelector('#qd-chart'), l = n.querySelector('polyline[data-series="ready"]');
		return !!l && Number(n.dataset.history) >= %d && l.getAttribute('points').split(' ').length > Number(n.dataset.history);
	})()`, historyPoints))
	p.waitText("#live", "live")
	// Two live ticks in (inflight has only live points), the chart still
	// starts at the broker's first sample.
	p.waitJS("two live points", `(() => { const l = document.querySelector('#qd-chart polyline[data-series="inflight"]');
		return !!l && l.getAttribute('points').split(' ').length >= 2; })()`)
	var first string
	p.eval(`document.getElementById('qd-chart').dataset.first`, &first)
	if first != strconv.FormatInt(historyFirst, 10) {
		t.Fatalf("the chart starts at %s, the broker's history at %d: history dropped", first, historyFirst)
	}
	// The queue's history only: one request, with ?key=.
	var backlogReqs []string
	p.eval(`performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('/admin/api/queue-backlog'))`, &backlogReqs)
	if len(backlogReqs) != 1 || !strings.HasSuffix(backlogReqs[0], "/admin/api/queue-backlog?key=qd-orders%2F") {
		t.Fatalf("the page's backlog requests: %v", backlogReqs)
	}
	// The settings list is kept across ticks that change nothing (update,
	// not a rebuild): a node marked now is still there two ticks later.
	var inflightPts int
	p.eval(`document.getElementById('qd-set-policy').qdMark = true;
		document.querySelector('#qd-chart polyline[data-series="inflight"]').getAttribute('points').split(' ').length`, &inflightPts)
	p.waitJS("two more ticks", fmt.Sprintf(`document.querySelector('#qd-chart polyline[data-series="inflight"]').getAttribute('points').split(' ').length >= %d`, inflightPts+2))
	var kept bool
	p.eval(`document.getElementById('qd-set-policy').qdMark === true`, &kept)
	if !kept {
		t.Fatal("the settings list was rebuilt on a tick that changed nothing")
	}
	api := dashQueues(a)["qd-orders/"]
	for id, v := range map[string]int64{"#qd-ready": api.Ready, "#qd-inflight": api.Inflight, "#qd-delayed": api.Delayed,
		"#qd-pending-dlq": api.PendingDLQ, "#qd-consumers": api.Consumers} {
		if got := p.text(id); got != qsNum(v) {
			t.Errorf("%s on the page %q, the API %d", id, got, v)
		}
	}
	var partRows [][]string
	p.eval(`[...document.querySelectorAll('#qp-table tbody tr')].map(r => [...r.cells].map(c => c.textContent))`, &partRows)
	if len(partRows) != len(api.Partitions) {
		t.Fatalf("%d partition rows, the API has %d", len(partRows), len(api.Partitions))
	}
	for i, part := range api.Partitions {
		want := []string{qsNum(int64(part.Partition)), "not loaded", "not loaded"}
		if part.Loaded {
			want = []string{qsNum(int64(part.Partition)), qsNum(*part.Ready), qsNum(*part.Inflight)}
		}
		if got := partRows[i][:3]; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("partition %d on the page %v, the API %v", part.Partition, got, want)
		}
	}
	var subs struct {
		Subscriptions []struct {
			Session uint64 `json:"session"`
			SubID   uint64 `json:"sub_id"`
			Topic   string `json:"topic"`
		}
	}
	a.json("GET", "/admin/api/subscriptions", "", 200, &subs)
	var wantSubs []string
	for _, sb := range subs.Subscriptions {
		if sb.Topic == "qd-orders" {
			wantSubs = append(wantSubs, fmt.Sprint(sb.Session, "/", sb.SubID))
		}
	}
	var gotSubs []string
	p.eval(`[...document.querySelectorAll('#qc-table tbody tr[data-key]')].map(r => r.dataset.key)`, &gotSubs)
	if len(wantSubs) == 0 || strings.Join(gotSubs, ",") != strings.Join(wantSubs, ",") {
		t.Fatalf("consumers on the page %v, the API's subscriptions of the queue %v", gotSubs, wantSubs)
	}

	// The chart moves with the traffic: more published, the ready line's
	// newest value is the API's new count (the chart's title says each
	// line's newest value) and it is drawn above every earlier point
	// (SVG y grows downwards). A tick alone adds points, not this.
	readyBefore := dashQueues(a)["qd-orders/"].Ready
	var title string
	p.eval(`document.querySelector('#qd-chart title').textContent`, &title)
	if !strings.HasPrefix(title, "ready "+qsNum(readyBefore)+",") {
		t.Fatalf("the chart says %q before the traffic, the API has %d ready", title, readyBefore)
	}
	for i := range 4 {
		publishText(t, c, "qd-orders", "more "+strconv.Itoa(i))
	}
	readyAfter := dashQueues(a)["qd-orders/"].Ready
	if readyAfter != readyBefore+4 {
		t.Fatalf("ready %d after 4 more published, was %d", readyAfter, readyBefore)
	}
	p.waitJS("the ready line rises to the new count", fmt.Sprintf(`(() => {
		const n = document.querySelector('#qd-chart');
		if (!n.querySelector('title').textContent.startsWith('ready %d,')) return false;
		const ys = n.querySelector('polyline[data-series="ready"]').getAttribute('points').split(' ').map(pt => Number(pt.split(',')[1]));
		return ys.length > 1 && ys.slice(0, -1).every(y => y > ys[ys.length - 1]); })()`, readyAfter))
	p.waitText("#qd-ready", qsNum(readyAfter))

	// Settings. Numbers are checked before anything is sent: a changed
	// policy with a bad TTL sends nothing (seen failing: the policy was
	// PUT, then the TTL refused), nor does a fractional max retries.
	api = dashQueues(a)["qd-orders/"]
	defaultRetries := api.DLQ.MaxRetries // never set: the broker's default
	const target = "qd-orders/default"
	sent := func() int { return qsAudit(a, "queue.dlq", target) + qsAudit(a, "queue.create", target) }
	status := func() string { return p.text("#qd-settings-form .form-status") }
	sentBefore := sent()
	p.run("policy global", qsSelect("#qd-s-policy", "global"))
	qsFill(p, "#qd-s-ttl", "-5")
	p.jsClick("#qd-s-save")
	p.waitText("#qd-settings-form .form-status", "Nothing sent: Default TTL (ms) must be a whole number")
	qsFill(p, "#qd-s-ttl", "0")
	qsFill(p, "#qd-s-retries", "2.5")
	p.jsClick("#qd-s-save")
	p.waitText("#qd-settings-form .form-status", "Nothing sent: Max retries must be a whole number")
	if n := sent(); n != sentBefore {
		t.Fatalf("%d settings requests sent with bad numbers", n-sentBefore)
	}
	if q := dashQueues(a)["qd-orders/"]; q.DLQ.Policy != "discard" || q.DLQ.MaxRetries != defaultRetries || q.DefaultTTLMs != 0 {
		t.Fatalf("settings changed by a refused form: %+v", q.DLQ)
	}

	// Only what changed is sent: the TTL alone is one re-declare, and
	// max_retries, never set, stays unset (following the broker's
	// default): PUT queue-dlq without max_retries answers it only when the
	// queue has its own (seen failing: the form pinned the default).
	creates := qsAudit(a, "queue.create", target) // the test's own declare
	p.run("policy discard", qsSelect("#qd-s-policy", "discard"))
	qsFill(p, "#qd-s-retries", strconv.Itoa(defaultRetries))
	qsFill(p, "#qd-s-ttl", "30000")
	p.jsClick("#qd-s-save")
	p.waitJS("the save answered", `document.querySelector('#qd-settings-form .form-status').classList.contains('form-ok')`)
	var probe struct {
		DLQ map[string]any `json:"dlq"`
	}
	a.json("PUT", "/admin/api/queue-dlq", `{"topic":"qd-orders","policy":"discard"}`, 200, &probe)
	if _, pinned := probe.DLQ["max_retries"]; pinned {
		t.Fatalf("max_retries pinned by a save that did not change it: %v", probe.DLQ)
	}
	if d, c := qsAudit(a, "queue.dlq", target)-1, qsAudit(a, "queue.create", target)-creates; d != 0 || c != 1 {
		t.Fatalf("a TTL change sent %d PUT queue-dlq and %d re-declares, want 0 and 1", d, c)
	}
	if msg := status(); !strings.HasPrefix(msg, "Saved: default TTL 30 s.") {
		t.Fatalf("the save says %q", msg)
	}

	// A dead-letter target equal to the queue is refused with the API's
	// message, nothing saved.
	p.run("policy custom", qsSelect("#qd-s-policy", "custom"))
	qsFill(p, "#qd-s-target-topic", "qd-orders")
	p.jsClick("#qd-s-save")
	p.waitJS("the refusal", `document.querySelector('#qd-settings-form .form-status').classList.contains('form-error')`)
	if msg := status(); !strings.HasPrefix(msg, "Nothing saved: ") {
		t.Fatalf("the refusal says %q", msg)
	}

	// Someone else saves while the form is being edited: the save sends
	// nothing and says what is in force; the field this user did not
	// touch takes it, so the second save keeps the other's max retries.
	qsFill(p, "#qd-s-target-topic", "qd-dlq")
	a.json("PUT", "/admin/api/queue-dlq", `{"topic":"qd-orders","policy":"discard","max_retries":9}`, 200, nil)
	sentBefore = sent()
	p.jsClick("#qd-s-save")
	p.waitText("#qd-settings-form .form-status", "Nothing sent: the settings changed since this form was filled")
	if msg := status(); !strings.Contains(msg, "In force now: dead letters discarded, max retries 9, default TTL 30 s") {
		t.Fatalf("the page says %q", msg)
	}
	if n := sent(); n != sentBefore {
		t.Fatalf("%d requests sent over settings changed under the form", n-sentBefore)
	}
	var retries string
	p.eval(`document.getElementById('qd-s-retries').value`, &retries)
	if retries != "9" {
		t.Fatalf("max retries in the form %q, want the 9 in force", retries)
	}
	p.jsClick("#qd-s-save")
	p.waitText("#qd-settings-form .form-status", "Saved: dead letters to qd-dlq.")
	api = dashQueues(a)["qd-orders/"]
	if api.DLQ.Policy != "custom" || api.DLQ.Topic != "qd-dlq" || api.DLQ.MaxRetries != 9 || api.DefaultTTLMs != 30_000 {
		t.Fatalf("after the second save the API has %+v ttl %d", api.DLQ, api.DefaultTTLMs)
	}

	// Half saved: max retries PUT, the TTL's re-declare refused (by the
	// test, a 503): the page says which was saved and which not; a second
	// save sends only the TTL.
	p.eval(`window.__qdRefuse = true`, new(bool))
	qsFill(p, "#qd-s-retries", "7")
	qsFill(p, "#qd-s-ttl", "60000")
	p.jsClick("#qd-s-save")
	p.waitText("#qd-settings-form .form-status", "Partly saved: max retries 7 saved; default TTL 1 min NOT saved (not_ready: refused by the test)")
	if msg := status(); !strings.Contains(msg, "In force now: dead letters to qd-dlq, max retries 7, default TTL 30 s") {
		t.Fatalf("the partial failure says %q", msg)
	}
	if api = dashQueues(a)["qd-orders/"]; api.DLQ.MaxRetries != 7 || api.DefaultTTLMs != 30_000 {
		t.Fatalf("after a half save the API has retries %d ttl %d", api.DLQ.MaxRetries, api.DefaultTTLMs)
	}
	p.eval(`window.__qdRefuse = false; true`, new(bool))
	dlqBefore := qsAudit(a, "queue.dlq", target)
	p.jsClick("#qd-s-save")
	p.waitText("#qd-settings-form .form-status", "Saved: default TTL 1 min.")
	if n := qsAudit(a, "queue.dlq", target); n != dlqBefore {
		t.Fatalf("the second save sent %d PUT queue-dlq, want none", n-dlqBefore)
	}
	api = dashQueues(a)["qd-orders/"]
	if api.DLQ.Policy != "custom" || api.DLQ.Topic != "qd-dlq" || api.DLQ.MaxRetries != 7 || api.DefaultTTLMs != 60_000 {
		t.Fatalf("settings saved through the page, the API has %+v ttl %d", api.DLQ, api.DefaultTTLMs)
	}
	p.waitText("#qd-set-policy", "to qd-dlq")
	p.waitText("#qd-set-retries", "7")
	dlqHref := ""
	p.eval(`document.getElementById('qd-dlq').getAttribute('href')`, &dlqHref)
	// The dead-letters page's own URL keys (dlq.js): the DLQ queue and the
	// source filter.
	if !strings.Contains(dlqHref, "topic=qd-dlq") || !strings.Contains(dlqHref, "source=qd-orders%2F") {
		t.Fatalf("the DLQ link %q", dlqHref)
	}
	browseHref := ""
	p.eval(`document.getElementById('qd-browse').getAttribute('href')`, &browseHref)
	if browseHref != "/admin/messages?topic=qd-orders" {
		t.Fatalf("the browse link %q", browseHref)
	}

	// Test publish: JSON into partition 1; the page shows the offset, and
	// the message is there at that offset.
	// A partition the queue does not have: the API's refusal is shown.
	qsFill(p, "#qd-p-part", "9")
	p.jsClick("#qd-p-send")
	p.waitJS("the publish refusal", `document.querySelector('#qd-pub-form .form-status').classList.contains('form-error')`)
	if msg := p.text("#qd-pub-form .form-status"); !strings.Contains(msg, "partition") {
		t.Fatalf("the refused publish says %q", msg)
	}
	qsFill(p, "#qd-p-text", `{"probe":1}`)
	qsFill(p, "#qd-p-ct", "application/json")
	qsFill(p, "#qd-p-part", "1")
	p.jsClick("#qd-p-send")
	p.waitText("#qd-pub-form .form-status", "Published to partition 1 at offset")
	var offset string
	p.eval(`document.getElementById('qd-pub-form').dataset.offset`, &offset)
	var page struct {
		Items []struct {
			Offset        int64  `json:"offset"`
			PayloadBase64 string `json:"payload_base64"`
			ContentType   string `json:"content_type"`
		}
	}
	a.json("GET", "/admin/api/messages?topic=qd-orders&partition=1&from="+offset+"&limit=1&include_payload=true", "", 200, &page)
	if len(page.Items) != 1 || strconv.FormatInt(page.Items[0].Offset, 10) != offset ||
		page.Items[0].PayloadBase64 != base64.StdEncoding.EncodeToString([]byte(`{"probe":1}`)) || page.Items[0].ContentType != "application/json" {
		t.Fatalf("the test publish at offset %s: %+v", offset, page.Items)
	}
	if !strings.Contains(p.text("#qd-pub-form .form-status"), "offset "+offset+".") {
		t.Fatalf("the page says %q", p.text("#qd-pub-form .form-status"))
	}
	p.shots("queue")
	p.axe()
	p.keyboardReach()

	// An unknown queue, and no queue named: said so, nothing else shown.
	p.open("/admin/queue?topic=qd-nope")
	p.waitText("#qd-missing-text", "No queue qd-nope is declared")
	var bodyHidden bool
	p.eval(`document.getElementById('qd-body').hidden`, &bodyHidden)
	if !bodyHidden {
		t.Fatal("an unknown queue shows the queue's panels")
	}
	p.shots("queue-unknown")
	p.axe()
	p.open("/admin/queue")
	p.waitText("#qd-missing-text", "No queue named")
	p.noErrors(400)
	p.measure("queue", "/admin/queue?topic=qd-orders")

	// Without server-sent events (a proxy that cuts streams), the page
	// polls GET /admin/api/queues and still follows the traffic.
	p2 := openBrowser(t, a.base)
	p2.run("no EventSource", chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := cdppage.AddScriptToEvaluateOnNewDocument(`delete window.EventSource;`).Do(ctx)
		return err
	}))
	p2.open("/admin/queue?topic=qd-orders")
	p2.waitText("#live", "polling")
	before := dashQueues(a)["qd-orders/"].Ready
	a.json("POST", "/admin/api/publish", `{"topic":"qd-orders","text":"polled"}`, 200, nil)
	p2.waitText("#qd-ready", qsNum(before+1))
	p2.noErrors()
}

// qsSelect chooses value in the <select> sel as a person would: the
// value, then the input and change events the page listens to.
func qsSelect(sel, value string) chromedp.Action {
	var ignored bool
	return chromedp.Evaluate(fmt.Sprintf(`(() => { const n = document.querySelector(%q); n.value = %q;
		n.dispatchEvent(new Event('input', {bubbles: true})); n.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, sel, value), &ignored)
}

// qsFill empties the input sel and types value into it. The harness's
// fill cannot be used: chromedp v0.14.2's SetValue(sel, "") fails with
// "could not set value on node" on every input (seen on a text and a
// search input; SetValue with a non-empty value works), and fill starts
// with it.
func qsFill(p *dashPage, sel, value string) {
	p.t.Helper()
	var ok bool
	p.eval(fmt.Sprintf(`(() => { const n = document.querySelector(%q); if (!n) return false; n.focus(); n.value = '';
		n.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, sel), &ok)
	if !ok {
		p.t.Fatalf("browser: no %s to fill", sel)
	}
	p.run("type into "+sel, chromedp.SendKeys(sel, value, chromedp.ByQuery))
}
