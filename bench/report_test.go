package bench

import (
	"strings"
	"testing"
)

const sampleResults = `[run.sh 13:21:00] progress lines are skipped
system=fibril-quic scenario=confirmed-publish run=1 size=1024 msgs=200000 producers=2 window=1024 secs=2.000 msgs_per_s=100000 p50_ms=20.000 p99_ms=40.000 max_ms=50.000 confirmed=200000 nacked=0 dup_confirms=0 server_cpu_s=2.000 server_rss_mb=50.000 client_cpu_s=1.000 wall_s=2.100 status=ok
system=nats-js scenario=confirmed-publish run=1 size=1024 msgs=200000 producers=2 window=1024 secs=2.500 msgs_per_s=80000 p50_ms=20.000 p99_ms=40.000 max_ms=50.000 confirmed=200000 nacked=0 dup_confirms=0 status=ok
system=rabbitmq-quorum scenario=confirmed-publish run=1 size=1024 msgs=200000 producers=2 window=1024 secs=8.000 msgs_per_s=25000 status=ok
system=fibril-tcp scenario=end-to-end run=1 size=1024 msgs=50000 producers=2 window=1024 consumers=2 prefetch=1024 rate=5000 secs=10.000 msgs_per_s=5000 p50_ms=0.500 p99_ms=2.000 max_ms=3.000 delivered=50000 unique=50000 missing=0 dups=0 left=0 status=ok
system=nats-js scenario=end-to-end run=1 size=1024 msgs=50000 producers=2 window=1024 consumers=2 prefetch=1024 rate=5000 secs=10.000 msgs_per_s=5000 p50_ms=0.400 p99_ms=6.000 status=ok
system=rabbitmq-quorum scenario=end-to-end run=1 size=1024 msgs=50000 producers=2 window=1024 consumers=2 prefetch=1024 rate=5000 secs=10.000 msgs_per_s=5000 p50_ms=2.000 p99_ms=5.000 status=timeout
system=fibril-quic scenario=fanout run=1 size=1024 msgs=100000 producers=2 window=1024 consumers=4 prefetch=1024 status=unsupported err="no streams"
system=nats-js scenario=fanout run=1 size=1024 msgs=100000 producers=2 window=1024 consumers=4 prefetch=1024 secs=4.000 msgs_per_s=100000 records=400000 status=ok
system=fibril-quic scenario=confirmed-publish run=2 size=1024 msgs=200000 producers=2 window=1024 msgs_per_s=120000 status=ok
system=nats-js scenario=confirmed-publish run=2 size=1024 msgs=200000 producers=2 window=1024 msgs_per_s=100000 status=ok
system=rabbitmq-quorum scenario=confirmed-publish run=2 size=1024 msgs=200000 producers=2 window=1024 msgs_per_s=20000 status=ok
`

func TestRatioLinesFavourFibrilAboveOne(t *testing.T) {
	results, err := ParseResults(sampleResults)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 11 {
		t.Fatalf("parsed %d results", len(results))
	}
	want := []string{
		// runs 1 and 2: 100000/80000 = 1.25 and 1.2, median 1.225
		"ratio scenario=confirmed-publish system=fibril-quic vs=nats-js value=1.23",
		// 4 and 6: median 5
		"ratio scenario=confirmed-publish system=fibril-quic vs=rabbitmq-quorum value=5.00",
		// paced: p99 peer over fibril
		"ratio scenario=end-to-end@5000/s system=fibril-tcp vs=nats-js value=3.00",
		// the peer timed out: no ratio
		"ratio scenario=end-to-end@5000/s system=fibril-tcp vs=rabbitmq-quorum value=NaN",
		// fibril unsupported; no rabbitmq-stream line: it has no fanout result here
		"ratio scenario=fanout system=fibril-quic vs=nats-js value=NaN",
	}
	got := RatioLines(results)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ratio lines\n got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestReportTableHasOneRowPerResult(t *testing.T) {
	results, _ := ParseResults(sampleResults)
	var b strings.Builder
	WriteReport(&b, results)
	out := b.String()
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| scenario") {
			rows++
		}
	}
	if rows != len(results) {
		t.Fatalf("%d table rows for %d results:\n%s", rows, len(results), out)
	}
	for _, want := range []string{
		// only the peers present get a column
		"| client CPU s | status | fibril/nats-js | fibril/rabbitmq-quorum |\n",
		"| confirmed-publish | fibril-quic | 1 | 200000 | 2.000 | 100000 | 20.000 | 40.000 | (same) | - | 2.000 | 10.0 | 50.000 | 1.000 | ok | 1.25 | 4.00 |",
		// a peer's own row has no ratios
		"| confirmed-publish | nats-js | 1 | 200000 | 2.500 | 80000 | 20.000 | 40.000 | (same) | - | - | - | - | - | ok | - | - |",
		"| end-to-end @5000/s | fibril-tcp | 1 | 50000 |",
		"| fanout | fibril-quic | 1 | 100000 x 4 |",
		"unsupported: no streams",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
}

// Every peer of the harness's current set, lines in the order run.sh and
// bench-compare.sh print them except that redis-streams comes first in
// confirmed-publish (the column order must not depend on it).
const allPeersResults = `system=redis-streams scenario=confirmed-publish run=1 msgs=1000 msgs_per_s=15000 status=ok
system=fibril-quic scenario=confirmed-publish run=1 msgs=1000 msgs_per_s=60000 status=ok
system=fibril-tcp scenario=confirmed-publish run=1 msgs=1000 msgs_per_s=90000 status=ok
system=nats-js scenario=confirmed-publish run=1 msgs=1000 msgs_per_s=120000 status=ok
system=nats-js-sync scenario=confirmed-publish run=1 msgs=1000 msgs_per_s=3000 status=ok
system=rabbitmq-quorum scenario=confirmed-publish run=1 msgs=1000 msgs_per_s=30000 status=ok
system=rabbitmq-classic scenario=confirmed-publish run=1 msgs=1000 msgs_per_s=24000 status=ok
system=fibril-tcp scenario=end-to-end run=1 msgs=1000 rate=5000 msgs_per_s=5000 p99_ms=4.000 status=ok
system=nats-js scenario=end-to-end run=1 msgs=1000 rate=5000 msgs_per_s=5000 p99_ms=2.000 status=ok
system=nats-js-sync scenario=end-to-end run=1 msgs=1000 rate=5000 msgs_per_s=5000 p99_ms=10.000 status=ok
system=rabbitmq-quorum scenario=end-to-end run=1 msgs=1000 rate=5000 msgs_per_s=5000 p99_ms=6.000 status=ok
system=rabbitmq-classic scenario=end-to-end run=1 msgs=1000 rate=5000 status=error err=boom
system=redis-streams scenario=end-to-end run=1 msgs=1000 rate=5000 msgs_per_s=5000 p99_ms=8.000 status=ok
system=fibril-quic scenario=fanout run=1 msgs=1000 consumers=4 msgs_per_s=200000 records=4000 status=ok
system=nats-js scenario=fanout run=1 msgs=1000 consumers=4 msgs_per_s=400000 records=4000 status=ok
system=nats-js-sync scenario=fanout run=1 msgs=1000 consumers=4 msgs_per_s=100000 records=4000 status=ok
system=rabbitmq-stream scenario=fanout run=1 msgs=1000 consumers=4 msgs_per_s=50000 records=4000 status=ok
system=redis-streams scenario=fanout run=1 msgs=1000 consumers=4 msgs_per_s=80000 records=4000 status=ok
`

func TestPeersInColumnOrder(t *testing.T) {
	results, err := ParseResults(allPeersResults + "system=kafka scenario=fanout run=1 msgs=1000 status=ok\n")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(Peers(results), " ")
	want := "nats-js nats-js-sync rabbitmq-quorum rabbitmq-classic rabbitmq-stream redis-streams kafka"
	if got != want {
		t.Fatalf("peers %q, want %q", got, want)
	}
	results, _ = ParseResults(sampleResults)
	if got := strings.Join(Peers(results), " "); got != "nats-js rabbitmq-quorum" {
		t.Fatalf("peers of the small sample %q", got)
	}
}

func TestRatioLinesAgainstEveryPeer(t *testing.T) {
	results, err := ParseResults(allPeersResults)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ratio scenario=confirmed-publish system=fibril-quic vs=nats-js value=0.50",
		"ratio scenario=confirmed-publish system=fibril-quic vs=nats-js-sync value=20.00",
		"ratio scenario=confirmed-publish system=fibril-quic vs=rabbitmq-quorum value=2.00",
		"ratio scenario=confirmed-publish system=fibril-quic vs=rabbitmq-classic value=2.50",
		"ratio scenario=confirmed-publish system=fibril-quic vs=redis-streams value=4.00",
		"ratio scenario=confirmed-publish system=fibril-tcp vs=nats-js value=0.75",
		"ratio scenario=confirmed-publish system=fibril-tcp vs=nats-js-sync value=30.00",
		"ratio scenario=confirmed-publish system=fibril-tcp vs=rabbitmq-quorum value=3.00",
		"ratio scenario=confirmed-publish system=fibril-tcp vs=rabbitmq-classic value=3.75",
		"ratio scenario=confirmed-publish system=fibril-tcp vs=redis-streams value=6.00",
		// paced: p99 peer over fibril; classic failed
		"ratio scenario=end-to-end@5000/s system=fibril-tcp vs=nats-js value=0.50",
		"ratio scenario=end-to-end@5000/s system=fibril-tcp vs=nats-js-sync value=2.50",
		"ratio scenario=end-to-end@5000/s system=fibril-tcp vs=rabbitmq-quorum value=1.50",
		"ratio scenario=end-to-end@5000/s system=fibril-tcp vs=rabbitmq-classic value=NaN",
		"ratio scenario=end-to-end@5000/s system=fibril-tcp vs=redis-streams value=2.00",
		// fanout: the stream queue, not the quorum or classic queue
		"ratio scenario=fanout system=fibril-quic vs=nats-js value=0.50",
		"ratio scenario=fanout system=fibril-quic vs=nats-js-sync value=2.00",
		"ratio scenario=fanout system=fibril-quic vs=rabbitmq-stream value=4.00",
		"ratio scenario=fanout system=fibril-quic vs=redis-streams value=2.50",
	}
	got := RatioLines(results)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ratio lines\n got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestReportHasOneRatioColumnPerPeer(t *testing.T) {
	results, _ := ParseResults(allPeersResults)
	var b strings.Builder
	WriteReport(&b, results)
	out := b.String()
	lines := strings.Split(out, "\n")
	wantHeader := "| scenario | system | run | msgs | secs | msgs/s | p50 ms | p99 ms | confirm p50/p99 ms | missing/dups/left " +
		"| server CPU s | server CPU us/msg | server RSS MB | client CPU s | status " +
		"| fibril/nats-js | fibril/nats-js-sync | fibril/rabbitmq-quorum | fibril/rabbitmq-classic | fibril/rabbitmq-stream | fibril/redis-streams |"
	if lines[0] != wantHeader {
		t.Fatalf("header\n got: %s\nwant: %s", lines[0], wantHeader)
	}
	// every table line has as many cells as the header
	cells := strings.Count(wantHeader, "|")
	for _, line := range lines {
		if strings.HasPrefix(line, "|") && strings.Count(line, "|") != cells {
			t.Fatalf("%d cell separators, want %d: %s", strings.Count(line, "|"), cells, line)
		}
	}
	for _, want := range []string{
		"| confirmed-publish | fibril-quic | 1 | 1000 | - | 60000 | - | - | (same) | - | - | - | - | - | ok | 0.50 | 20.00 | 2.00 | 2.50 | - | 4.00 |",
		"| confirmed-publish | fibril-tcp | 1 | 1000 | - | 90000 | - | - | (same) | - | - | - | - | - | ok | 0.75 | 30.00 | 3.00 | 3.75 | - | 6.00 |",
		"| end-to-end @5000/s | fibril-tcp | 1 | 1000 | - | 5000 | - | 4.000 | - | - | - | - | - | - | ok | 0.50 | 2.50 | 1.50 | NaN | - | 2.00 |",
		"| fanout | fibril-quic | 1 | 1000 x 4 | - | 200000 | - | - | - | - | - | - | - | - | ok | 0.50 | 2.00 | - | - | 4.00 | 2.50 |",
		"| fanout | rabbitmq-stream | 1 | 1000 x 4 | - | 50000 | - | - | - | - | - | - | - | - | ok | - | - | - | - | - | - |",
		"| end-to-end @5000/s | rabbitmq-classic | 1 | 1000 | - | - | - | - | - | - | - | - | - | - | error: boom | - | - | - | - | - | - |",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
	// the ratio lines follow the table, the same as RatioLines
	if !strings.HasSuffix(out, strings.Join(RatioLines(results), "\n")+"\n") {
		t.Fatalf("report does not end with the ratio lines:\n%s", out)
	}
}

// Our own figures go after the harness's keys, in the order they are moved.
func TestLineMoveToEnd(t *testing.T) {
	l := NewLine()
	l.Set("a", 1)
	l.Set("ours", 2)
	l.Set("b", 3)
	l.moveToEnd("ours")
	l.moveToEnd("absent")
	if got := l.String(); got != "a=1 b=3 ours=2" {
		t.Fatalf("line %q", got)
	}
}
