package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fibril-go/fibril/client"
)

// The Streams and Consumer groups pages against a real broker with real
// stream and cohort traffic from the Go client.

// streamRow is one stream of GET /admin/api/streams, as the test reads it.
type streamRow struct {
	Topic            string `json:"topic"`
	PartitionCount   uint32 `json:"partition_count"`
	Durability       string `json:"durability"`
	MaxAgeMs         uint64 `json:"max_age_ms"`
	MaxBytes         uint64 `json:"max_bytes"`
	MaxRecords       uint64 `json:"max_records"`
	LoadedPartitions int    `json:"loaded_partitions"`
	Records          uint64 `json:"records"`
	Subscriptions    int64  `json:"subscriptions"`
	Partitions       []struct {
		Partition     uint32  `json:"partition"`
		Loaded        bool    `json:"loaded"`
		OldestOffset  *uint64 `json:"oldest_offset"`
		NextOffset    *uint64 `json:"next_offset"`
		Records       *uint64 `json:"records"`
		Subscriptions *int64  `json:"subscriptions"`
	} `json:"partitions"`
}

func apiStreams(a *adminClient) map[string]streamRow {
	var out struct{ Streams []streamRow }
	a.json("GET", "/admin/api/streams", "", 200, &out)
	m := map[string]streamRow{}
	for _, s := range out.Streams {
		m[s.Topic] = s
	}
	return m
}

func streamSubscriptions(a *adminClient) int {
	var out struct {
		Subscriptions []struct{ Kind string } `json:"subscriptions"`
	}
	a.json("GET", "/admin/api/subscriptions", "", 200, &out)
	n := 0
	for _, s := range out.Subscriptions {
		if s.Kind == "stream" {
			n++
		}
	}
	return n
}

// cellJS reads the text of column col (0-based) of the row keyed key in
// the table with id tableID.
func cellJS(tableID, key string, col int) string {
	return fmt.Sprintf(`(() => { const r = document.querySelector('#%s tr[data-key=%q]'); return r ? r.children[%d].textContent : ''; })()`, tableID, key, col)
}

// TestDashboardStreams: with no stream the page says so; a stream
// declared, published to (keyed over 3 partitions) and subscribed by the
// Go client shows with its settings, its loaded partitions' offsets and
// record counts equal to the API's, and its subscribers equal to the
// subscriptions API's stream rows; new records move the numbers live; a
// stream created through the form exists in the API with the settings
// filled in and a client publishes to it and reads it back; a re-declare
// with other settings and a bad name show the API's 400 message on the
// form; axe, keyboard, screenshots, weight, no console error.
func TestDashboardStreams(t *testing.T) {
	s, a, p := startDashboard(t)
	p.open("/admin/streams")
	p.waitJS("the no-stream notice", `!document.getElementById('st-none').hidden`)
	p.waitText("#st-list", "No stream is declared")
	if len(apiStreams(a)) != 0 {
		t.Fatal("the API lists a stream before any was declared")
	}
	p.shots("streams-empty")

	c := dial(t, s, client.TransportTCP)
	ctx := ctxT(t)
	if n, err := c.DeclarePlexus(ctx, client.NewStreamConfig("clicks").PartitionCount(3).MaxRecords(100000).MaxAgeMs(3_600_000)); err != nil || n != 3 {
		t.Fatalf("declare: %d %v", n, err)
	}
	pub := c.Publisher("clicks")
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := pub.PublishConfirmed(ctx, client.Text("click-"+strconv.Itoa(i)).PartitionKey("user-"+strconv.Itoa(i%7))); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	publish(0, 30)
	var readers []*client.StreamSubscription
	for range 2 {
		sub, err := dial(t, s, client.TransportTCP).SubscribeStream(ctx, "clicks", client.StreamOptions{Start: client.StartEarliest()})
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, sub)
	}
	for _, sub := range readers {
		for range 30 {
			nextRecord(t, sub, 5*time.Second)
		}
	}

	// The API observes every partition (the runners store their offsets
	// after their next batch); then the page shows the API's numbers.
	var st streamRow
	eventually(t, 10000, 50, func() bool {
		st = apiStreams(a)["clicks"]
		return st.Records == 30 && st.LoadedPartitions == 3 && st.Subscriptions == 6
	})
	if st.PartitionCount != 3 || st.Durability != "durable" || st.MaxRecords != 100000 || st.MaxAgeMs != 3_600_000 {
		t.Fatalf("API stream %+v", st)
	}
	p.waitJS("the stream row", `!!document.querySelector('#st-table tr[data-key="clicks"]')`)
	if !p.isHidden("#st-none") {
		t.Fatal("the no-stream notice stays with a stream declared")
	}
	subs := streamSubscriptions(a)
	if subs != 6 {
		t.Fatalf("%d stream subscriptions in the API, want 2 readers x 3 partitions", subs)
	}
	// Columns: topic, durability, partitions, loaded, retention, records, subscribers.
	p.waitJS("the stream's records", fmt.Sprintf(`%s === "30"`, cellJS("st-table", "clicks", 5)))
	for col, want := range map[int]string{1: st.Durability, 2: "3", 3: strconv.Itoa(st.LoadedPartitions), 6: strconv.Itoa(subs)} {
		p.waitJS(fmt.Sprintf("column %d is %q", col, want), fmt.Sprintf(`%s === %q`, cellJS("st-table", "clicks", col), want))
	}
	p.waitText(`#st-table tr[data-key="clicks"]`, "100,000 records")
	p.waitText("#st-subscribers", strconv.Itoa(subs))
	p.waitText("#st-records", "30")
	// Per partition: next offset, records and subscribers are the API's.
	// Columns: stream, partition, state, oldest, next, records, subscribers.
	var sum uint64
	for _, part := range st.Partitions {
		key := "clicks/" + strconv.Itoa(int(part.Partition))
		if !part.Loaded || part.NextOffset == nil || part.Records == nil || *part.Subscriptions != 2 {
			t.Fatalf("API partition %+v", part)
		}
		sum += *part.Records
		p.waitJS("partition "+key+" next offset", fmt.Sprintf(`%s === %q && %s === %q && %s === "2" && %s === "loaded"`,
			cellJS("stp-table", key, 4), strconv.FormatUint(*part.NextOffset, 10), cellJS("stp-table", key, 5), strconv.FormatUint(*part.Records, 10),
			cellJS("stp-table", key, 6), cellJS("stp-table", key, 2)))
	}
	if sum != 30 {
		t.Fatalf("partition records sum to %d", sum)
	}

	// Live: more records move the numbers without a reload.
	publish(30, 45)
	eventually(t, 10000, 50, func() bool { return apiStreams(a)["clicks"].Records == 45 })
	p.waitJS("records after more traffic", fmt.Sprintf(`%s === "45"`, cellJS("st-table", "clicks", 5)))
	p.shots("streams")

	// Create through the page (opened again: the full-page screenshot
	// leaves the emulated viewport where inputs cannot be typed into).
	p.open("/admin/streams")
	p.waitJS("the stream row after a reload", `!!document.querySelector('#st-table tr[data-key="clicks"]')`)
	p.retype("#st-topic", "audit.trail")
	p.retype("#st-partition-count", "2")
	p.eval(`(() => { const s = document.getElementById('st-durability'); s.value = 'ephemeral'; s.dispatchEvent(new Event('change')); return true; })()`, new(bool))
	p.retype("#st-max-records", "500")
	p.click("#st-create-submit")
	p.waitText("#st-create-status", "Stream audit.trail is declared")
	created := apiStreams(a)["audit.trail"]
	if created.PartitionCount != 2 || created.Durability != "ephemeral" || created.MaxRecords != 500 || created.MaxAgeMs != 0 || created.MaxBytes != 0 {
		t.Fatalf("created through the page: %+v", created)
	}
	p.waitJS("the new stream's row", `!!document.querySelector('#st-table tr[data-key="audit.trail"]')`)
	// A client publishes to it and reads it back: it is a real stream.
	if _, err := c.Publisher("audit.trail").PublishConfirmed(ctx, client.Text("hello")); err != nil {
		t.Fatalf("publish to the stream created on the page: %v", err)
	}
	// (Another client: the publisher probed the partitions with
	// subscriptions of its own.)
	rd, err := dial(t, s, client.TransportTCP).SubscribeStream(ctx, "audit.trail", client.StreamOptions{Start: client.StartEarliest()})
	if err != nil {
		t.Fatal(err)
	}
	if d := nextRecord(t, rd, 5*time.Second); d.Text() != "hello" {
		t.Fatalf("read back %q", d.Text())
	}
	var audit struct {
		Entries []struct{ Action, Target, Outcome string }
	}
	a.json("GET", "/admin/api/audit", "", 200, &audit)
	if !slices.ContainsFunc(audit.Entries, func(e struct{ Action, Target, Outcome string }) bool {
		return e.Action == "stream.create" && e.Target == "audit.trail" && e.Outcome == "ok"
	}) {
		t.Fatalf("no audit entry for the create: %+v", audit.Entries)
	}

	// Refusals show the API's message: other settings for an existing
	// stream, then a bad name.
	p.retype("#st-topic", "clicks")
	p.retype("#st-partition-count", "5")
	p.click("#st-create-submit")
	p.waitText("#st-create-status", "stream settings differ")
	p.waitJS("an error status", `document.getElementById('st-create-status').classList.contains('form-error')`)
	p.retype("#st-topic", "bad name")
	p.click("#st-create-submit")
	p.waitText("#st-create-status", "is not a valid name")
	if got := apiStreams(a)["clicks"].PartitionCount; got != 3 {
		t.Fatalf("a refused re-declare changed clicks to %d partitions", got)
	}
	p.shots("streams-refused")
	p.axe()
	p.keyboardReach()
	p.noErrors(400)
	p.measure("streams", "/admin/streams")
}

// retype empties the input sel from the page's script, then types value
// into it as a person would (the harness's fill trips over chromedp's
// SetValue on an input whose value is already empty).
func (p *dashPage) retype(sel, value string) {
	p.t.Helper()
	var ok bool
	p.run("retype "+sel, chromedp.Evaluate(fmt.Sprintf(`(() => { const n = document.querySelector(%q); n.value = ''; return true; })()`, sel), &ok),
		chromedp.SendKeys(sel, value, chromedp.ByQuery))
}

// isHidden answers whether sel has the hidden attribute.
func (p *dashPage) isHidden(sel string) bool {
	p.t.Helper()
	var hidden bool
	p.eval(fmt.Sprintf(`document.querySelector(%q).hidden`, sel), &hidden)
	return hidden
}

// cohortView is GET /admin/api/cohorts as the test reads it.
type cohortView struct {
	Cohorts []struct {
		Topic          string `json:"topic"`
		Group          string `json:"group"`
		ConsumerGroup  string `json:"consumer_group"`
		Generation     uint64 `json:"generation"`
		PartitionCount uint32 `json:"partition_count"`
		Members        []struct {
			MemberID   string   `json:"member_id"`
			Session    uint64   `json:"session"`
			Subscribed []uint32 `json:"subscribed_partitions"`
			Owned      []uint32 `json:"owned_partitions"`
		} `json:"members"`
	} `json:"cohorts"`
}

func apiCohorts(a *adminClient) cohortView {
	var v cohortView
	a.json("GET", "/admin/api/cohorts", "", 200, &v)
	return v
}

// pageOwned reads, per member id, the partitions the page marks owned in
// the cohort panel keyed key.
func pageOwned(p *dashPage, key string) map[string][]uint32 {
	p.t.Helper()
	var raw string
	p.eval(fmt.Sprintf(`JSON.stringify(Object.fromEntries([...document.querySelectorAll('[data-cohort=%q] tr[data-member]')].map(r =>
		[r.dataset.member, [...r.querySelectorAll('td[data-state="owned"]')].map(c => Number(c.dataset.partition))])))`, key), &raw)
	out := map[string][]uint32{}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		p.t.Fatalf("page owners %q: %v", raw, err)
	}
	return out
}

// waitCohortPageMatchesAPI waits until the page's cohort panel shows exactly the
// API's members, owned partitions and generation, with members owners
// in all; it answers the API's view it matched.
func waitCohortPageMatchesAPI(t *testing.T, a *adminClient, p *dashPage, key string, members int) cohortView {
	t.Helper()
	var v cohortView
	deadline := time.Now().Add(15 * time.Second)
	for {
		v = apiCohorts(a)
		if len(v.Cohorts) == 1 && len(v.Cohorts[0].Members) == members {
			c := v.Cohorts[0]
			want := map[string][]uint32{}
			owned := 0
			for _, m := range c.Members {
				want[m.MemberID] = append([]uint32{}, m.Owned...)
				owned += len(m.Owned)
			}
			var gen string
			p.eval(fmt.Sprintf(`(() => { const g = document.querySelector('[data-cohort=%q] .co-gen'); return g ? g.textContent : ''; })()`, key), &gen)
			got := pageOwned(p, key)
			same := len(got) == len(want) && owned == int(c.PartitionCount)
			for id, ps := range want {
				same = same && slices.Equal(got[id], ps)
			}
			if same && gen == strconv.FormatUint(c.Generation, 10) {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("page owners %v generation %s, API %v generation %d", got, gen, want, c.Generation)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("API cohorts %+v, want one with %d members", v, members)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDashboardCohorts: with no cohort the page says so; one exclusive
// member of a 4-partition queue owns all four on the page, as the API
// (the Node's registry) says; a second member joining moves two partitions
// to it on the open page (no reload), at a later generation, the page's
// grid equal to the API's owners and to what the members' own
// ASSIGNMENT_CHANGED notices say; the second member leaving gives them
// back once its client closed; the filter (kept in the URL) hides and shows the group; axe,
// keyboard, screenshots, weight, no console error.
func TestDashboardCohorts(t *testing.T) {
	s, a, p := startDashboard(t, "--lease-ms", "60000", "--reconnect-grace-ms", "500")
	p.open("/admin/cohorts")
	p.waitJS("the no-group notice", `!document.getElementById('co-none').hidden`)
	if n := len(apiCohorts(a).Cohorts); n != 0 {
		t.Fatalf("%d cohorts before any member", n)
	}
	p.shots("cohorts-empty")

	producer := dial(t, s, client.TransportTCP)
	declareCohortQueue(t, producer, "co-orders")
	key := "co-orders/default/billing"
	ma := dialMember(t, "a", s.addr(), client.TransportTCP, memberOptions{})
	ma.join(t, "co-orders", client.SubscribeOptions{Prefetch: 8, ConsumerGroup: "billing"})
	waitSplit(t, ma)
	v := waitCohortPageMatchesAPI(t, a, p, key, 1)
	first := v.Cohorts[0]
	if first.Topic != "co-orders" || first.Group != "" || first.ConsumerGroup != "billing" || first.PartitionCount != cohortPartitions ||
		!slices.Equal(first.Members[0].Owned, []uint32{0, 1, 2, 3}) || first.Members[0].MemberID != ma.sub.MemberID().String() {
		t.Fatalf("one member: %+v (member id %s)", first, ma.sub.MemberID())
	}
	p.waitText("#co-members", "1")
	p.waitText("#co-owned", "4")
	if !p.isHidden("#co-none") {
		t.Fatal("the no-group notice stays with a group")
	}

	// A second member: the open page moves two partitions to it.
	mb := dialMember(t, "b", s.addr(), client.TransportTCP, memberOptions{})
	mb.join(t, "co-orders", client.SubscribeOptions{Prefetch: 8, ConsumerGroup: "billing"})
	split := waitSplit(t, ma, mb)
	v = waitCohortPageMatchesAPI(t, a, p, key, 2)
	second := v.Cohorts[0]
	if second.Generation <= first.Generation {
		t.Fatalf("generation %d after %d", second.Generation, first.Generation)
	}
	byID := map[string][]uint32{}
	for _, m := range second.Members {
		byID[m.MemberID] = m.Owned
		if !slices.Equal(m.Subscribed, []uint32{0, 1, 2, 3}) {
			t.Fatalf("member %s subscribed %v", m.MemberID, m.Subscribed)
		}
	}
	if !slices.Equal(byID[ma.sub.MemberID().String()], split[0]) || !slices.Equal(byID[mb.sub.MemberID().String()], split[1]) {
		t.Fatalf("API owners %v, the members' notices %v", byID, split)
	}
	p.waitText("#co-members", "2")
	p.waitText(`[data-cohort="`+key+`"] .co-member-count`, "2")
	p.shots("cohorts")

	// The filter hides the group and keeps itself in the URL.
	p.retype("#co-filter", "no-such-queue")
	p.waitText("#co-list", "No consumer group matches the filter.")
	p.waitJS("the filter in the URL", `location.search.includes('co.q=no-such-queue')`)
	p.retype("#co-filter", "billing")
	p.waitJS("the group shown again", fmt.Sprintf(`!!document.querySelector('[data-cohort=%q]')`, key))

	// The second member goes (its client closes; the session ends after
	// the 500 ms grace): the first owns everything again.
	if err := mb.c.Close(); err != nil {
		t.Fatal(err)
	}
	v = waitCohortPageMatchesAPI(t, a, p, key, 1)
	if !slices.Equal(v.Cohorts[0].Members[0].Owned, []uint32{0, 1, 2, 3}) || v.Cohorts[0].Generation <= second.Generation {
		t.Fatalf("after the leave: %+v", v.Cohorts[0])
	}
	p.axe()
	p.keyboardReach()
	p.noErrors()
	p.measure("cohorts", "/admin/cohorts")
}
