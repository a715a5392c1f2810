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
		// fibril unsupported
		"ratio scenario=fanout system=fibril-quic vs=nats-js value=NaN",
		"ratio scenario=fanout system=fibril-quic vs=rabbitmq-stream value=NaN",
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
		"| confirmed-publish | fibril-quic | 1 | 200000 | 2.000 | 100000 | 20.000 | 40.000 | (same) | - | 2.000 | 10.0 | 50.000 | 1.000 | ok | 1.25 | 4.00 |",
		"| end-to-end @5000/s | fibril-tcp | 1 | 50000 |",
		"| fanout | fibril-quic | 1 | 100000 x 4 |",
		"unsupported: no streams",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
}
