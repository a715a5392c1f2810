package e2e

import (
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fibril-go/fibril/client"
)

// The Diagnostics and Topology pages against the real binary. Diagnostics:
// two queues damaged on disk after a clean stop and parked at their first
// touch; the page lists them with what was found, a repair of one made
// behind the page's back shows the API's 409 when the page repairs it
// again, the other is repaired through the page (its confirmation says
// what is lost) and serves again; the recovery timings, the partition
// loads, the storage, group-commit and idle figures on the page are the
// API's. Topology: queues and streams with their partitions as the API
// lists them, in the list and the diagram, filtered, the view in the URL.

// The page's formatting, in Go, so the test compares what a person reads
// with what the API answered (dash.js fmt.num and fmt.bytes, diagnostics.js
// dur).
func jsNum(n float64) string {
	s := strconv.FormatFloat(math.Round(n), 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// toFixed is JavaScript's Number.toFixed: the float's exact value rounded,
// an exact tie up (Go's formatting rounds an exact tie to even).
func toFixed(v float64, digits int) string {
	exact := strconv.FormatFloat(v, 'f', 40, 64)
	dot := strings.IndexByte(exact, '.')
	if rest := exact[dot+1+digits:]; rest[0] == '5' && strings.Trim(rest[1:], "0") == "" {
		return strconv.FormatFloat(v+math.Pow(10, -float64(digits))/4, 'f', digits, 64)
	}
	return strconv.FormatFloat(v, 'f', digits, 64)
}

func jsBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatFloat(n, 'f', -1, 64) + " B"
	}
	digits := 0
	if n < 10 {
		digits = 1
	}
	return toFixed(n, digits) + " " + units[i]
}

func jsDur(us float64) string {
	switch {
	case us < 1000:
		return strconv.FormatFloat(math.Floor(us*100+0.5)/100, 'f', -1, 64) + " µs"
	case us < 1e6:
		return toFixed(us/1000, 2) + " ms"
	}
	return toFixed(us/1e6, 2) + " s"
}

// diagView is the part of GET /admin/api/diagnostics the test compares.
type diagView struct {
	Startup struct {
		DurationUs float64 `json:"duration_us"`
		NodeLog    struct {
			ReadUs   float64 `json:"read_us"`
			ReplayUs float64 `json:"replay_us"`
			Records  float64 `json:"records"`
		} `json:"node_log"`
	} `json:"startup"`
	Loads struct {
		Total  float64 `json:"total"`
		Recent []struct {
			Topic      string  `json:"topic"`
			Group      string  `json:"group"`
			Partition  uint32  `json:"partition"`
			AtMs       int64   `json:"at_ms"`
			DurationUs float64 `json:"duration_us"`
			ReadUs     float64 `json:"read_us"`
			Entries    float64 `json:"entries_replayed"`
			Outcome    string  `json:"outcome"`
			Repair     bool    `json:"repair"`
			Cut        *struct {
				Index          float64 `json:"index"`
				DroppedRecords float64 `json:"dropped_records"`
			} `json:"cut"`
		} `json:"recent"`
	} `json:"loads"`
	Storage struct {
		DataDir    string `json:"data_dir"`
		Filesystem struct {
			TotalBytes float64 `json:"total_bytes"`
		} `json:"filesystem"`
		DataDirUsage struct {
			Bytes    float64 `json:"bytes"`
			Files    float64 `json:"files"`
			Complete bool    `json:"complete"`
			Method   string  `json:"method"`
		} `json:"data_dir_usage"`
	} `json:"storage"`
	GroupCommit struct {
		Rounds              float64 `json:"rounds"`
		Entries             float64 `json:"entries"`
		MeanRoundUs         float64 `json:"mean_round_us"`
		MeanEntriesPerRound float64 `json:"mean_entries_per_round"`
	} `json:"group_commit"`
	Idle *struct {
		Counters struct{ Evicted, Skipped, Reloaded float64 } `json:"counters"`
	} `json:"idle"`
	Partitions *struct {
		Declared float64 `json:"declared"`
		Max      float64 `json:"max"`
	} `json:"partitions"`
	Runtime struct {
		Goroutines float64 `json:"goroutines"`
	} `json:"runtime"`
}

// textNow reads sel's text in one evaluation: live tables are redrawn at
// every tick, so a node found by one DevTools call may be gone by the next.
func textNow(p *dashPage, sel string) string {
	p.t.Helper()
	var out string
	p.eval(fmt.Sprintf(`(() => { const n = document.querySelector(%q); return n ? n.textContent : '(missing ' + %q + ')'; })()`, sel, sel), &out)
	return out
}

// setInput sets an input's or select's value as a person's edit would
// (input and change events).
func setInput(sel, value string) chromedp.Action {
	var ok bool
	return chromedp.Evaluate(fmt.Sprintf(`(() => { const n = document.querySelector(%q); if (!n) return false; n.value = %q;
		n.dispatchEvent(new Event('input', {bubbles: true})); n.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, sel, value), &ok)
}

func loadKey(atMs int64, topic, group string, partition uint32) string {
	if group == "" {
		group = "default"
	}
	return fmt.Sprintf("%d:%s/%s/%d", atMs, topic, group, partition)
}

// waitPageMatchesAPI reads the API and the page again and again until the
// page shows what the API said (values that move, like free space or the
// data dir's walk, settle at the next tick), within browserStepTimeout.
func waitPageMatchesAPI(t *testing.T, p *dashPage, what string, pairs func() map[string]string) {
	t.Helper()
	deadline := time.Now().Add(browserStepTimeout)
	for {
		want := pairs()
		var bad []string
		for sel, text := range want {
			var got string
			p.eval(fmt.Sprintf(`(() => { const n = document.querySelector(%q); return n ? n.textContent : '(missing)'; })()`, sel), &got)
			if !strings.Contains(got, text) {
				bad = append(bad, fmt.Sprintf("%s shows %q, the API says %q", sel, got, text))
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the page is not the API's: %v", what, bad)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestDashboardDiagnosticsQuarantineRepairAndFigures(t *testing.T) {
	needBrowser(t)
	dir := t.TempDir()
	s := startServer(t, dir)
	c := dial(t, s, client.TransportTCP)
	for i := range quarantineMessages {
		publishText(t, c, "q-bad", "bad-"+strconv.Itoa(i))
		publishText(t, c, "q-bad2", "bad2-"+strconv.Itoa(i))
		publishText(t, c, "q-good", "good-"+strconv.Itoa(i))
	}
	c.Close()
	s.stop()
	damageLastRecord(t, filepath.Join(dir, "queues", "q-bad", "0"), damageFlip)
	damageLastRecord(t, filepath.Join(dir, "queues", "q-bad2", "0"), damageTruncate)

	s, base := startWithAdmin(t, dir, "quarantine")
	a := newAdminClient(t, base)
	c = dial(t, s, client.TransportTCP)
	wantQuarantineRefusal(t, c) // the first touch parks q-bad
	if _, err := c.Publisher("q-bad2").PublishConfirmed(ctxT(t), client.Text("refused")); err == nil {
		t.Fatal("a publish to the damaged q-bad2 was accepted")
	}
	publishText(t, c, "q-good", "good-"+strconv.Itoa(quarantineMessages)) // loads q-good

	p := openBrowser(t, base)
	p.open("/admin/diagnostics")
	p.waitText("#live", "live")

	// The quarantined partitions as the API lists them.
	var list struct {
		Quarantined []struct {
			Topic, Group, Kind, Reason string
			Partition                  uint32
			Index                      uint64
		}
	}
	a.json("GET", "/admin/api/quarantine", "", 200, &list)
	if len(list.Quarantined) != 2 {
		t.Fatalf("quarantined %+v, want q-bad and q-bad2", list.Quarantined)
	}
	for _, q := range list.Quarantined {
		row := fmt.Sprintf(`#dgq-table tr[data-key="%s/default/%d"]`, q.Topic, q.Partition)
		p.waitText(row, q.Reason)
		text := textNow(p, row)
		if !strings.Contains(text, q.Kind) || !strings.Contains(text, jsNum(float64(q.Index))) || !strings.Contains(text, "quarantine") {
			t.Fatalf("row of %s: %q, want kind %s and index %d", q.Topic, text, q.Kind, q.Index)
		}
	}
	p.waitText("#dg-quarantined", "2")
	p.waitText("#dg-ready", "degraded")
	if status, body := adminGet(t, base, "/readyz"); status != http.StatusOK || !strings.Contains(body, `"degraded":true`) {
		t.Fatalf("/readyz = %d %s", status, body)
	}

	// Recovery timings and figures: the page's are the API's.
	var d diagView
	pairs := func() map[string]string {
		a.json("GET", "/admin/api/diagnostics", "", 200, &d)
		m := map[string]string{
			"#dg-startup-total":   jsDur(d.Startup.DurationUs),
			"#dg-startup-read":    jsDur(d.Startup.NodeLog.ReadUs),
			"#dg-startup-replay":  jsDur(d.Startup.NodeLog.ReplayUs),
			"#dg-startup-records": jsNum(d.Startup.NodeLog.Records),
			"#dg-loads-total":     jsNum(d.Loads.Total),
			"#dg-fs-total":        jsBytes(d.Storage.Filesystem.TotalBytes),
			"#dg-datadir-exact":   jsNum(d.Storage.DataDirUsage.Bytes) + " B",
			"#dg-datadir-bytes":   jsBytes(d.Storage.DataDirUsage.Bytes),
			"#dg-commit-rounds":   jsNum(d.GroupCommit.Rounds),
			"#dg-commit-entries":  jsNum(d.GroupCommit.Entries),
			"#dg-commit-mean":     jsDur(d.GroupCommit.MeanRoundUs),
			"#dg-commit-batch":    strconv.FormatFloat(d.GroupCommit.MeanEntriesPerRound, 'f', -1, 64),
		}
		if d.Idle != nil {
			m["#dg-idle-evicted"] = jsNum(d.Idle.Counters.Evicted)
			m["#dg-idle-skipped"] = jsNum(d.Idle.Counters.Skipped)
			m["#dg-idle-reloaded"] = jsNum(d.Idle.Counters.Reloaded)
		}
		if d.Partitions != nil {
			m["#dg-partitions"] = jsNum(d.Partitions.Declared)
			m["#dg-partitions-hint"] = "of " + jsNum(d.Partitions.Max) + " allowed (limits.partitions_max)"
		}
		for _, l := range d.Loads.Recent {
			row := fmt.Sprintf(`#dgl-table tr[data-key="%s"]`, loadKey(l.AtMs, l.Topic, l.Group, l.Partition))
			m[row+" td:nth-child(4)"] = l.Outcome
			m[row+" td:nth-child(5)"] = jsDur(l.DurationUs)
			m[row+" td:nth-child(6)"] = jsDur(l.ReadUs)
			m[row+" td:nth-child(7)"] = jsNum(l.Entries)
		}
		return m
	}
	waitPageMatchesAPI(t, p, "the figures before the repair", pairs)
	if d.Startup.DurationUs <= 0 || d.Startup.NodeLog.Records <= 0 || d.Storage.DataDir != dir || d.Storage.DataDirUsage.Method != "walk" ||
		!d.Storage.DataDirUsage.Complete || d.Storage.DataDirUsage.Bytes <= 0 || d.GroupCommit.Rounds < 1 || d.Idle == nil ||
		d.Partitions == nil || d.Partitions.Declared < 3 || d.Partitions.Max < d.Partitions.Declared {
		t.Fatalf("diagnostics %+v", d)
	}
	outcomes := map[string]string{}
	for _, l := range d.Loads.Recent {
		outcomes[l.Topic] = l.Outcome
		if l.Outcome == "loaded" && l.Entries < quarantineMessages {
			t.Fatalf("%s replayed %v entries, want at least %d", l.Topic, l.Entries, quarantineMessages)
		}
	}
	if outcomes["q-bad"] != "quarantined" || outcomes["q-bad2"] != "quarantined" || outcomes["q-good"] != "loaded" {
		t.Fatalf("load outcomes %v", outcomes)
	}
	// The runtime moves on its own (goroutines come and go): the page's
	// count is a number close to the API's.
	var goroutines float64
	p.eval(`Number(document.getElementById('dg-rt-goroutines').textContent.replace(/,/g, ''))`, &goroutines)
	if goroutines <= 0 || math.Abs(goroutines-d.Runtime.Goroutines) > 40 {
		t.Fatalf("goroutines on the page %v, the API's %v", goroutines, d.Runtime.Goroutines)
	}
	p.shots("diagnostics-quarantined")

	// Another operator repairs q-bad2 behind the page's back: the page's
	// Repair of it shows the API's 409, and nothing changes.
	// The row's button holds the focus, so the page keeps the row (a
	// table does not redraw under a focused button) until the click.
	p.eval(`document.querySelector('button[data-repair="q-bad2/default/0"]').focus(); true`, new(bool))
	if status, body := adminPost(t, base, "/admin/api/quarantine/repair?topic=q-bad2&partition=0"); status != http.StatusOK {
		t.Fatalf("repair of q-bad2 by the API = %d %s", status, body)
	}
	p.jsClick(`button[data-repair="q-bad2/default/0"]`)
	p.acceptConfirm()
	p.waitText("#dg-repair-status", "is not quarantined: there is nothing to repair")
	p.waitJS("the stale row leaves", `!document.querySelector('#dgq-table tr[data-key="q-bad2/default/0"]')`)

	// Repair q-bad through the page: Cancel first (nothing happens), then
	// confirm.
	p.click(`button[data-repair="q-bad/default/0"]`)
	p.waitJS("the confirm dialog opens", `document.getElementById('confirm').open`)
	confirmText := textNow(p, "#confirm-text")
	for _, want := range []string{"q-bad/default/0", "deleted for good", "confirmed messages included", "cannot be undone"} {
		if !strings.Contains(confirmText, want) {
			t.Fatalf("the confirmation %q does not say %q", confirmText, want)
		}
	}
	p.click(`#confirm button[value="cancel"]`)
	p.waitJS("the dialog closes", `!document.getElementById('confirm').open`)
	a.json("GET", "/admin/api/quarantine", "", 200, &list)
	if len(list.Quarantined) != 1 || list.Quarantined[0].Topic != "q-bad" {
		t.Fatalf("after Cancel: %+v", list.Quarantined)
	}
	p.click(`button[data-repair="q-bad/default/0"]`)
	p.acceptConfirm()
	p.waitText("#dg-repair-status", "Repaired q-bad/default/0: cut 1 record; it serves again.")
	p.waitText("#dgq-table", "No partition is quarantined.")
	p.waitJS("the repair is listed", `!!document.querySelector('#dg-repairs li[data-target="q-bad/default/0"][data-outcome="ok"]')`)
	p.waitText("#dg-repairs", "cut 1 records")
	// Exact texts: "ready" is also in "not ready", "0" in "10".
	p.waitJS("readiness ready", `document.querySelector('#dg-ready').textContent.trim() === 'ready'`)
	p.waitJS("none quarantined", `document.querySelector('#dg-quarantined').textContent.trim() === '0'`)

	// The API agrees, and a client is served again.
	a.json("GET", "/admin/api/quarantine", "", 200, &list)
	if len(list.Quarantined) != 0 {
		t.Fatalf("still quarantined after the page's repair: %+v", list.Quarantined)
	}
	if status, body := adminGet(t, base, "/readyz"); status != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz after the repair = %d %q", status, body)
	}
	publishText(t, c, "q-bad", "bad-"+strconv.Itoa(quarantineMessages-1))
	wantPrefix(t, consumeTexts(t, c, "q-bad", quarantineMessages), "bad-", quarantineMessages)

	// The repairing load is in the ring with its cut, as the API says.
	waitPageMatchesAPI(t, p, "the figures after the repair", pairs)
	var repairLoad bool
	for _, l := range d.Loads.Recent {
		if l.Topic == "q-bad" && l.Repair && l.Outcome == "loaded" && l.Cut != nil && l.Cut.DroppedRecords == 1 {
			repairLoad = true
			row := fmt.Sprintf(`#dgl-table tr[data-key="%s"]`, loadKey(l.AtMs, l.Topic, l.Group, l.Partition))
			if got := textNow(p, row); !strings.Contains(got, "1 from index "+jsNum(l.Cut.Index)) || !strings.Contains(got, "repair") {
				t.Fatalf("the repairing load's row %q, want its cut at %v", got, l.Cut.Index)
			}
		}
	}
	if !repairLoad {
		t.Fatalf("no repairing load of q-bad in %+v", d.Loads.Recent)
	}

	p.shots("diagnostics")
	p.axe()
	p.keyboardReach()
	p.measure("diagnostics", "/admin/diagnostics")
	p.noErrors(http.StatusConflict)
}

// topologyView is GET /admin/api/topology.
type topologyView struct {
	Node struct {
		Name             string `json:"name"`
		AdvertiseAddress string `json:"advertise_address"`
		OwnerID          string `json:"owner_id"`
		Standalone       bool   `json:"standalone"`
	} `json:"node"`
	Queues []struct {
		Topic      string
		Group      string
		Partitions []struct{ Partition uint32 }
	}
	Streams []struct {
		Topic      string
		Partitions []struct{ Partition uint32 }
	}
}

func TestDashboardTopologyListDiagramAndFilters(t *testing.T) {
	s, a, p := startDashboard(t)
	a.json("POST", "/admin/api/queues", `{"topic":"tp-orders","partition_count":3}`, 201, nil)
	a.json("POST", "/admin/api/queues", `{"topic":"tp-mail","group":"workers","partition_count":2}`, 201, nil)
	c := dial(t, s, client.TransportTCP)
	publishText(t, c, "tp-implicit", "one") // an implicit queue, one partition
	if _, err := c.DeclarePlexus(ctxT(t), client.NewStreamConfig("tp-events").PartitionCount(4)); err != nil {
		t.Fatal(err)
	}

	p.open("/admin/topology")
	var topo topologyView
	a.json("GET", "/admin/api/topology", "", 200, &topo)
	if len(topo.Queues) != 3 || len(topo.Streams) != 1 {
		t.Fatalf("topology %+v", topo)
	}
	p.waitText("#tp-node-name", topo.Node.Name)
	for sel, want := range map[string]string{"#tp-node-addr": topo.Node.AdvertiseAddress, "#tp-node-owner": topo.Node.OwnerID,
		"#tp-node-standalone": "yes"} {
		if got := textNow(p, sel); !strings.Contains(got, want) {
			t.Fatalf("%s shows %q, want %q", sel, got, want)
		}
	}
	total := 0
	for _, q := range topo.Queues {
		name := q.Topic
		if q.Group != "" {
			name += " / " + q.Group
		}
		row := fmt.Sprintf(`#tpl-table tr[data-key="queue:%s"]`, name)
		p.waitText(row, name)
		if got := textNow(p, row+" td:nth-child(3)"); got != strconv.Itoa(len(q.Partitions)) {
			t.Fatalf("%s: %s partitions on the page, %d in the API", name, got, len(q.Partitions))
		}
		if got := textNow(p, row+" td:nth-child(4)"); !strings.HasPrefix(topo.Node.OwnerID, strings.TrimSuffix(got, "…")) {
			t.Fatalf("%s: owner %q, the API's %s", name, got, topo.Node.OwnerID)
		}
		total += len(q.Partitions)
	}
	for _, st := range topo.Streams {
		row := fmt.Sprintf(`#tpl-table tr[data-key="stream:%s"]`, st.Topic)
		p.waitText(row, st.Topic)
		if got := textNow(p, row+" td:nth-child(3)"); got != strconv.Itoa(len(st.Partitions)) {
			t.Fatalf("%s: %s partitions on the page, %d in the API", st.Topic, got, len(st.Partitions))
		}
		total += len(st.Partitions)
	}
	if got := textNow(p, "#tp-queues") + " " + textNow(p, "#tp-streams") + " " + textNow(p, "#tp-partitions"); got != fmt.Sprintf("3 1 %d", total) {
		t.Fatalf("totals %q, want 3 1 %d", got, total)
	}
	p.waitText("#tp-loaded", "loaded now")

	// Filters: by name, then by kind; the URL keeps them.
	p.run("filter", setInput("#tp-filter", "orders"))
	p.waitJS("one row", `document.querySelectorAll('#tpl-table tbody tr').length === 1 && !!document.querySelector('#tpl-table tr[data-key="queue:tp-orders"]')`)
	p.waitJS("the filter in the URL", `location.search.includes('q=orders')`)
	p.run("clear the filter", setInput("#tp-filter", ""))
	p.run("kind", setInput("#tp-kind", "stream"))
	p.waitJS("streams only", `document.querySelectorAll('#tpl-table tbody tr').length === 1 && !!document.querySelector('#tpl-table tr[data-key="stream:tp-events"]')`)
	p.shots("topology-list")

	// The diagram: one entry per row shown, a mark per partition.
	p.click("#tp-view-diagram")
	p.waitJS("the diagram", `location.search.includes('view=diagram') && document.querySelectorAll('#tp-diagram g.tp-entry').length === 1`)
	var marks int
	p.eval(`document.querySelectorAll('#tp-diagram g.tp-entry[data-name="tp-events"] rect.tp-part').length`, &marks)
	if marks != len(topo.Streams[0].Partitions) {
		t.Fatalf("the diagram draws %d partitions of tp-events, the API lists %d", marks, len(topo.Streams[0].Partitions))
	}
	// A reload keeps the view and the filter; all kinds again.
	p.open("/admin/topology?view=diagram")
	p.waitJS("every entry drawn", `document.querySelectorAll('#tp-diagram g.tp-entry').length === 4`)
	var drawn map[string]int
	p.eval(`Object.fromEntries([...document.querySelectorAll('#tp-diagram g.tp-entry')].map(g => [g.dataset.name, g.querySelectorAll('rect.tp-part').length]))`, &drawn)
	if drawn["tp-orders"] != 3 || drawn["tp-mail / workers"] != 2 || drawn["tp-implicit"] != 1 || drawn["tp-events"] != 4 {
		t.Fatalf("partition marks %v", drawn)
	}
	p.shots("topology-diagram")
	p.axe()
	p.keyboardReach()

	// A queue declared meanwhile appears on Refresh.
	a.json("POST", "/admin/api/queues", `{"topic":"tp-late","partition_count":5}`, 201, nil)
	p.click("#tp-view-list")
	p.click("#tp-refresh")
	p.waitJS("the new queue", `!!document.querySelector('#tpl-table tr[data-key="queue:tp-late"]')`)
	if got := textNow(p, `#tpl-table tr[data-key="queue:tp-late"] td:nth-child(3)`); got != "5" {
		t.Fatalf("tp-late shows %s partitions, want 5", got)
	}
	p.measure("topology", "/admin/topology")
	p.noErrors()

	// The broker goes away: Refresh shows why in the banner, not a blank
	// page, and the last read stays. (Checked after noErrors: the page's
	// fetches fail now, on purpose.)
	p.waitText("#tp-queues", "4")
	s.stop()
	p.click("#tp-refresh")
	p.waitText("#banner", "The topology could not be read: unreachable")
	if got := textNow(p, "#tp-queues"); got != "4" {
		t.Fatalf("after the failure the page shows %q queues, want the last read's 4", got)
	}
}
